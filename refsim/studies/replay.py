"""Replay a route trace through the expert cache and compare with the engine's residency."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from refsim.cache import CacheSummary, EventRecord, ExpertCache
from refsim.cache.knobs import StreamKnobs
from refsim.cache.summary import KnobSummary
from refsim.errors import ConfigError
from refsim.events import confirmed_tokens
from refsim.trace import RouteTrace


@dataclass(frozen=True)
class Disagreement:
    """One trace row whose recorded residency differs from the replayed one."""

    line: int
    step: int
    layer: int
    slot: int
    expert: int
    recorded: int
    replayed: int


@dataclass
class ReplayReport:
    """Result of :func:`replay_trace`.

    Attributes
    ----------
    summary : CacheSummary
    records : list of EventRecord
        One per event, in trace order.
    residency_rows : int
        Rows comparable with the engine's record (routed, not dropped).
    residency_agree : int
        Rows whose recorded residency (0 = miss, 1/2 = hit) equals the replayed one. Every
        duplicate of an id inside one batch compares with that batch's single lookup.
    disagreements : list of Disagreement
        The first disagreeing rows (at most ``max_disagreements``).
    knobs : KnobSummary or None
        What ``--drop-cold-experts`` / ``--prefetch`` did; None when both are off.
    """

    summary: CacheSummary
    records: list[EventRecord]
    residency_rows: int = 0
    residency_agree: int = 0
    disagreements: list[Disagreement] = field(default_factory=list)
    knobs: KnobSummary | None = None


def require_weights(trace: RouteTrace, knobs: StreamKnobs | None) -> None:
    """Fail before a replay whose drop policy would meet a routed slot without a weight.

    Raises
    ------
    ConfigError
        ``"<trace>: line N: weight 'nan' on a routed slot; --drop-cold-experts needs every
        routed slot's final weight"`` for the first such row of an event the policy is armed for.
    """
    if knobs is None or not knobs.drop_on:
        return
    for ev, lines in zip(trace.events, trace.line_numbers):
        if not knobs.armed(ev.phase):
            continue
        bad = (ev.routes >= 0) & (~np.isfinite(ev.weights) if ev.weights is not None else True)
        if np.any(bad):
            line = int(lines[bad].min())
            raise ConfigError(f"{trace.path}: line {line}: weight 'nan' on a routed slot; "
                              f"--drop-cold-experts needs every routed slot's final weight")


def replay_events(events, cache: ExpertCache) -> list[EventRecord]:
    """Feed events to ``cache`` in order; returns one record per event."""
    return [cache.apply(ev) for ev in events]


def replay_trace(trace: RouteTrace, budget_bytes: int, max_disagreements: int = 10,
                 knobs: StreamKnobs | None = None) -> ReplayReport:
    """Replay ``trace`` through the engine's LRU at ``budget_bytes``.

    Parameters
    ----------
    trace : RouteTrace
    budget_bytes : int
        Cache budget in bytes (``--cache-mb`` × 2**20).
    max_disagreements : int
        How many disagreeing rows to keep for the report.
    knobs : StreamKnobs, optional
        ``--drop-cold-experts`` / ``--prefetch`` (default off). With F > 0 the policy decides
        every drop from the replayed cache state; a recorded ``dropped`` column is not used.

    Returns
    -------
    ReplayReport

    Raises
    ------
    ConfigError
        If the budget is not positive, or dropping needs weights the trace lacks.
    """
    return replay_turns(trace.header, [trace], budget_bytes, max_disagreements, knobs=knobs)


def replay_turns(header, traces, budget_bytes: int, max_disagreements: int = 10,
                 on_record=None, knobs: StreamKnobs | None = None) -> ReplayReport:
    """Replay the parts ``traces`` of one trace (e.g. :func:`refsim.trace.iter_trace_turns`'s
    turns) in order through one LRU; the same accounting as :func:`replay_trace` of the whole.

    ``on_record(record)`` is called for each event's record; given it, the report keeps no
    records (``records`` is empty), so memory does not grow with the trace. ``knobs`` as in
    :func:`replay_trace`.
    """
    h = header
    cache = ExpertCache(h.expert_bytes, h.n_expert, budget_bytes, knobs)
    report = ReplayReport(summary=None, records=[])
    tokens = 0
    for trace in traces:
        require_weights(trace, knobs)
        records = replay_events(trace.events, cache)
        tokens += sum(confirmed_tokens(ev) for ev in trace.events)
        _compare(trace, records, report, max_disagreements)
        if on_record is None:
            report.records.extend(records)
        else:
            for rec in records:
                on_record(rec)
    report.summary = CacheSummary.from_stats(cache.stats, budget_bytes, tokens,
                                             h.token_cycle_bytes)
    if cache.knobs.any_on:
        report.knobs = KnobSummary.from_stats(cache.stats, cache.knobs)
    report.disagreements.sort(key=lambda d: d.line)
    return report


def _compare(trace: RouteTrace, records, report: ReplayReport, max_disagreements: int) -> None:
    """Add the residency comparison of ``trace``'s events to ``report``."""
    for ev, rec, recorded, lines in zip(trace.events, records, trace.residency,
                                        trace.line_numbers):
        comparable = (recorded >= 0) & (rec.residency >= 0)
        ours = rec.residency[comparable]
        theirs = recorded[comparable] != 0
        agree = ours.astype(bool) == theirs
        report.residency_rows += int(comparable.sum())
        report.residency_agree += int(agree.sum())
        if not agree.all() and len(report.disagreements) < max_disagreements:
            bad = np.argwhere(comparable & ((rec.residency != 0) != (recorded != 0)))
            for p, il, s in bad.tolist():
                if len(report.disagreements) >= max_disagreements:
                    break
                report.disagreements.append(Disagreement(
                    line=int(lines[p, il, s]), step=int(ev.positions[p]), layer=il, slot=s,
                    expert=int(ev.routes[p, il, s]), recorded=int(recorded[p, il, s]),
                    replayed=int(rec.residency[p, il, s])))
