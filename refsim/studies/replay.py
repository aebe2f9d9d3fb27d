"""Replay a route trace through the expert cache and compare with the engine's residency."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from refsim.cache import CacheSummary, EventRecord, ExpertCache
from refsim.streaming.knobs import StreamKnobs
from refsim.cache.summary import KnobSummary
from refsim.errors import ConfigError
from refsim.events import confirmed_tokens
from refsim.frames import Table
from refsim.trace import RouteTrace

DECODE_COLUMNS = ("event", "kind", "step", "n_pos", "lookups", "hits", "read_bytes",
                  "resident_bytes")
"""The per-decode table of a replay (``refsim replay --csv``; :meth:`ReplayReport.to_columns`):
the event's index, its kind (``prefill``, ``plain``, ``verify``), first position, positions, unique
(layer, expert) lookups and hits, flash bytes read, resident bytes after it."""


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
class ReplayReport(Table):
    """Result of :func:`replay_trace`.

    As a table (:meth:`to_pandas`): one row per event, the columns of ``refsim replay --csv``
    (:data:`DECODE_COLUMNS`); the counters are :attr:`summary` (``summary.to_pandas()``: one row).

    Attributes
    ----------
    summary : CacheSummary
    records : list of EventRecord
        One per event, in trace order (built when first asked for from the replayed parts).
    residency_rows : int
        Rows comparable with the engine's record (routed, not dropped).
    residency_agree : int
        Rows whose recorded residency (0 = miss, 1/2 = hit) equals the replayed one. Every
        duplicate of an id inside one batch compares with that batch's single lookup.
    disagreements : list of Disagreement
        The first disagreeing rows (at most ``max_disagreements``).
    knobs : KnobSummary or None
        What ``--drop-cold-experts`` / ``--prefetch`` did; None when both are off.
    io : refsim.io.requests.IoTally or None
        The reads as the engine issues them (windows, requests, lanes), when asked for.
    """

    summary: CacheSummary
    parts: list = field(default_factory=list)
    residency_rows: int = 0
    residency_agree: int = 0
    disagreements: list[Disagreement] = field(default_factory=list)
    knobs: KnobSummary | None = None
    io: object = None

    @property
    def records(self) -> list[EventRecord]:
        if len(self.parts) != 1 or not isinstance(self.parts[0], list):
            self.parts = [[r for part in self.parts for r in part]]
        return self.parts[0]

    @records.setter
    def records(self, value) -> None:
        self.parts = [list(value)]

    def to_columns(self) -> dict:
        """One row per event (:data:`DECODE_COLUMNS`), the values ``refsim replay --csv`` writes."""
        recs = self.records
        n = len(recs)

        def ints(get):
            return np.fromiter((get(r) for r in recs), np.int64, count=n)
        from refsim.frames import texts
        return {"event": np.arange(n, dtype=np.int64),
                "kind": texts([r.kind.name.lower() for r in recs]),
                "step": ints(lambda r: r.first_position), "n_pos": ints(lambda r: r.n_pos),
                "lookups": ints(lambda r: r.lookups), "hits": ints(lambda r: r.hits),
                "read_bytes": ints(lambda r: r.read_bytes),
                "resident_bytes": ints(lambda r: r.resident_bytes)}


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
                 knobs: StreamKnobs | None = None, io=None) -> ReplayReport:
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
    io : refsim.io.requests.IoTally, optional
        Given, every event's reads are also accounted as the engine issues them (aligned
        windows, requests, lanes: refsim.io); kept as the report's ``io``.

    Returns
    -------
    ReplayReport

    Raises
    ------
    ConfigError
        If the budget is not positive, dropping needs weights the trace lacks, or
        ``--predict-prefetch`` needs the prediction columns the trace lacks.
    """
    if knobs is not None and knobs.predict_prefetch and not trace.has_pred_columns:
        raise ConfigError(f"{trace.path}: --predict-prefetch needs the stale-gate prediction, "
                          f"and the trace has no pred_expert/pred_weight columns (record one "
                          f"with refsim run --predict-prefetch --route-trace)")
    return replay_turns(trace.header, [trace], budget_bytes, max_disagreements, knobs=knobs, io=io)


def replay_turns(header, traces, budget_bytes: int, max_disagreements: int = 10,
                 on_record=None, knobs: StreamKnobs | None = None,
                 keep_records: bool = True, io=None) -> ReplayReport:
    """Replay the parts ``traces`` of one trace (e.g. :func:`refsim.trace.iter_trace_turns`'s
    turns) in order through one LRU; the same accounting as :func:`replay_trace` of the whole.

    With every knob off a part is replayed as one block (:meth:`ExpertCache.apply_block`, no
    Python per event); with a knob on, event by event (:meth:`ExpertCache.apply`). Both run the
    same kernel over the same state.

    ``on_record(record)`` is called for each event's record; given it, or with
    ``keep_records=False``, the report keeps no records (``records`` is empty), so memory does
    not grow with the trace. ``knobs`` and ``io`` as in :func:`replay_trace` (``io`` takes each
    part's records before ``on_record`` does).
    """
    h = header
    cache = ExpertCache(h.expert_bytes, h.n_expert, budget_bytes, knobs)
    report = ReplayReport(summary=None, io=io)
    tokens = 0
    for trace in traces:
        require_weights(trace, knobs)
        if cache.knobs.any_on:
            records = replay_events(trace.events, cache)
            tokens += sum(confirmed_tokens(ev) for ev in trace.events)
            ours = (np.concatenate([r.residency for r in records]) if records
                    else trace.recorded[0])
        else:
            records = cache.apply_block(trace.block)
            tokens += trace.block.confirmed_tokens()
            ours = records.residency
        _compare(trace, ours, report, max_disagreements)
        if io is not None:
            io.add_part(trace, records)
        if on_record is not None:
            for rec in records:
                on_record(rec)
        elif keep_records:
            report.parts.append(records)
    report.summary = CacheSummary.from_stats(cache.stats, budget_bytes, tokens,
                                             h.token_cycle_bytes)
    if cache.knobs.any_on:
        report.knobs = KnobSummary.from_stats(cache.stats, cache.knobs)
    return report


def _compare(trace: RouteTrace, ours: np.ndarray, report: ReplayReport,
             max_disagreements: int) -> None:
    """Add the residency comparison of ``trace`` with the replayed residency ``ours``
    ((P, n_layer, k) int8, the trace's positions end to end) to ``report``: a slot compares where
    both are routed and not dropped (>= 0); 0 is a miss, 1 and 2 hits. The first
    ``max_disagreements`` disagreeing slots in trace order are kept, sorted by line."""
    recorded, _, lines = trace.recorded
    comparable = (recorded >= 0) & (ours >= 0)
    differ = comparable & ((ours != 0) != (recorded != 0))
    n = int(np.count_nonzero(comparable))
    bad = int(np.count_nonzero(differ))
    report.residency_rows += n
    report.residency_agree += n - bad
    room = max_disagreements - len(report.disagreements)
    if bad and room > 0:
        block = trace.block
        for p, il, s in np.argwhere(differ)[:room].tolist():
            report.disagreements.append(Disagreement(
                line=int(lines[p, il, s]), step=int(block.positions[p]), layer=il, slot=s,
                expert=int(block.routes[p, il, s]), recorded=int(recorded[p, il, s]),
                replayed=int(ours[p, il, s])))
    report.disagreements.sort(key=lambda d: d.line)
