"""The sweep and union grids over many traces, one task per cell, and their pooled summaries
(docs/scale.md).

A **sweep cell** is (trace, policy, budgets, knobs): its rows are exactly those
:func:`refsim.studies.sweep.sweep_budgets` (or :func:`~refsim.studies.sweep.sweep_knobs` with a
knob on) gives for that trace, because every (budget, policy) point is an independent replay (the
``lru`` column's one-pass curve counts each budget exactly, whatever other budgets it is given).
In this process a cell holds every budget of one (trace, policy), which is what ``refsim sweep``
always computed; on local processes or Dask it holds one budget (one (trace × budget × policy ×
knob) cell per task). A **union cell** is (trace, window, budget, knobs). The results are put back
in one order -- trace as given, then budget, then policy (sweep) or window (union) -- so the output
is the same bytes for every executor.

**Pooling** over traces (the ``(pooled)`` rows): counters are summed over the traces and every
rate is a ratio of the sums -- hit % = 100 Σ hits / Σ lookups (cumulative, and decode-only with
decode hits and lookups), read MiB = Σ read bytes / 2^20, MiB/token = Σ decode read bytes / 2^20 /
Σ decoded tokens, dropped % = 100 Σ dropped / Σ routed. Union sizes are pooled as one population:
the mean, p50 and p90 over every (window, routed layer) of every trace (exact, from the traces'
histograms of union sizes); union MiB = Σ window union bytes / Σ windows / 2^20. A pooled sweep point
is over its budget when any trace's point is, and its held bytes are the largest trace's.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np

from refsim import MIB
from refsim.cache.summary import CacheSummary, KnobSummary
from refsim.errors import ConfigError
from refsim.fmt import pct, ratio

POOLED = "(pooled)"
"""The ``trace`` value of a pooled row in a many-trace CSV (a trace path is never this)."""

TRACE_CACHE_SIZE = 2
"""Parsed traces one process keeps (cells arrive trace-major, so one is re-read at most once)."""


@dataclass(frozen=True)
class TraceRef:
    """A trace as a cell names it: the path as given and the size and modification time the
    command saw when it checked the file; a worker that sees another file there refuses it."""

    path: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: str) -> "TraceRef":
        st = os.stat(path)
        return cls(path, int(st.st_size), int(st.st_mtime_ns))


_cache: OrderedDict = OrderedDict()
_lock = threading.Lock()


def remember(ref: TraceRef, trace) -> None:
    """Keep an already-read ``trace`` for the cells of this process (the command read it to check
    it; a serial grid then does not read it again)."""
    with _lock:
        _cache[ref] = {"trace": trace}
        _cache.move_to_end(ref)
        while len(_cache) > TRACE_CACHE_SIZE:
            _cache.popitem(last=False)


def _loaded(ref: TraceRef) -> dict:
    with _lock:
        hit = _cache.get(ref)
        if hit is not None:
            _cache.move_to_end(ref)
            return hit
    from refsim.trace import read_trace
    try:
        st = os.stat(ref.path)
    except OSError as exc:
        raise ConfigError(f"TRACE {ref.path}: not readable on this worker: {exc.strerror} (the "
                          f"workers need the trace paths on a shared filesystem; docs/scale.md)") from None
    if (int(st.st_size), int(st.st_mtime_ns)) != (ref.size, ref.mtime_ns):
        raise ConfigError(f"TRACE {ref.path}: not the file refsim checked (size or modification "
                          f"time differs on this worker: changed since, or another file at that "
                          f"path; docs/scale.md)")
    trace = read_trace(ref.path)
    remember(ref, trace)
    return _cache.get(ref) or {"trace": trace}


def load_trace(ref: TraceRef):
    """The :class:`~refsim.trace.RouteTrace` ``ref`` names (this process's cache, or read)."""
    return _loaded(ref)["trace"]


def _batches(ref: TraceRef):
    from refsim.cache.batches import BatchTrace
    entry = _loaded(ref)
    if "batches" not in entry:
        h = entry["trace"].header
        entry["batches"] = BatchTrace.from_block(entry["trace"].block, h.expert_bytes, h.n_expert)
    return entry["batches"]


# ---------------------------------------------------------------------------------------- sweep

@dataclass(frozen=True)
class SweepCell:
    """One task of a sweep grid: ``policy`` (a Policy instance) at ``budgets_mib`` on ``trace``,
    with ``knobs`` (a StreamKnobs with a knob on) or None."""

    trace: TraceRef
    policy: object
    budgets_mib: tuple
    knobs: object = None


def sweep_cell(cell: SweepCell):
    """Run one sweep cell: a :class:`~refsim.studies.sweep.SweepResult` of its points."""
    from refsim.studies.sweep import sweep_budgets, sweep_knobs
    if cell.knobs is not None:
        return sweep_knobs(load_trace(cell.trace), cell.budgets_mib, cell.knobs, [cell.policy])
    h = load_trace(cell.trace).header
    return sweep_budgets(_batches(cell.trace), cell.budgets_mib, [cell.policy], h.token_cycle_bytes)


def sweep_grid(refs: list[TraceRef], budgets_mib, policies, knobs, spec,
               split: bool | None = None) -> list:
    """Every trace at every budget under every policy, on the executor ``spec``.

    Parameters
    ----------
    refs : list of TraceRef
    budgets_mib : sequence of float
        MiB; a repeat is dropped (first kept), as :func:`~refsim.studies.sweep.sweep_budgets` does.
    policies : sequence of str or Policy
        Repeated labels dropped the same way.
    knobs : StreamKnobs or None
        With a knob on, one ExpertCache replay per point (lru only).
    spec : refsim.scale.executor.ExecutorSpec
    split : bool, optional
        One budget per cell (default: when ``spec`` is not this process) or every budget of a
        (trace, policy) in one cell; the rows are the same.

    Returns
    -------
    list of SweepResult
        One per trace, in ``refs`` order; rows budget-major then policy, as for one trace.
    """
    from refsim.cache.policies import get_policy
    from refsim.scale.executor import run_cells
    from refsim.studies.sweep import SweepResult, check_knob_policies
    budgets = tuple(dict.fromkeys(float(b) for b in budgets_mib))
    insts: dict = {}
    for p in policies:
        pol = get_policy(p) if isinstance(p, str) else p
        insts.setdefault(pol.label, pol)
    if not budgets:
        raise ConfigError("--cache-mb: no budget given")
    if not insts:
        raise ConfigError("--policy: no policy given")
    on = knobs if knobs is not None and knobs.any_on else None
    if on is not None:
        check_knob_policies(list(insts))
    if split is None:
        split = spec.dask is not None or spec.workers > 1
    chunks = [(b,) for b in budgets] if split else [budgets]
    cells = [SweepCell(ref, pol, chunk, on) for ref in refs for pol in insts.values()
             for chunk in chunks]
    done = run_cells(sweep_cell, cells, spec, desc="sweep")
    out, i = [], 0
    for ref in refs:
        points, first = {}, None
        for label in insts:
            for _ in chunks:
                res = done[i]
                i += 1
                first = first or res
                for r in res.rows:
                    points[(r.budget_mib, label)] = r
        rows = [points[(b, label)] for b in budgets for label in insts]
        out.append(SweepResult(rows, list(insts), list(budgets), first.t_bytes, first.n_batch,
                               first.tokens))
    return out


def pool_summaries(summaries: list[CacheSummary]) -> CacheSummary:
    """The pooled :class:`CacheSummary` of one point over traces: counters and bytes summed,
    rates the ratios of the sums; ``resident_bytes`` and ``t_bytes`` are the largest trace's
    (``resident_bytes`` -1 when a trace does not track it), ``evictions``/``rereads`` summed (-1
    when a trace does not count them)."""
    def total(name):
        return sum(getattr(s, name) for s in summaries)

    def tracked_sum(name):
        vals = [getattr(s, name) for s in summaries]
        return -1 if any(v < 0 for v in vals) else sum(vals)
    lookups, hits = total("lookups"), total("hits")
    d_look, d_hits = total("decode_lookups"), total("decode_hits")
    read, d_read, tokens = total("read_bytes"), total("decode_read_bytes"), total("tokens")
    held = [s.resident_bytes for s in summaries]
    t_bytes = max(s.t_bytes for s in summaries)
    return CacheSummary(
        budget_bytes=summaries[0].budget_bytes, lookups=lookups, hits=hits,
        hit_pct_cum=pct(hits, lookups), decode_lookups=d_look, decode_hits=d_hits,
        hit_pct_decode=pct(d_hits, d_look), prefill_lookups=total("prefill_lookups"),
        prefill_hits=total("prefill_hits"), read_bytes=read, read_mib=read / MIB,
        prefill_read_bytes=total("prefill_read_bytes"), decode_read_bytes=d_read,
        decode_read_mib=d_read / MIB, draft_read_bytes=total("draft_read_bytes"), tokens=tokens,
        mib_per_token=ratio(d_read / MIB, tokens),
        resident_bytes=-1 if any(v < 0 for v in held) else max(held),
        evictions=tracked_sum("evictions"), rereads=tracked_sum("rereads"),
        t_bytes=t_bytes, t_mib=t_bytes / MIB)


def pool_knobs(knobs: list[KnobSummary]) -> KnobSummary:
    """The pooled :class:`KnobSummary`: counts and bytes summed, percentages of the sums."""
    def total(name):
        return sum(getattr(k, name) for k in knobs)
    routed, dropped = total("experts_routed"), total("experts_dropped")
    se, su, sb = total("spec_experts"), total("spec_useful"), total("spec_read_bytes")
    return replace(knobs[0], experts_routed=routed, experts_dropped=dropped,
                   dropped_pct=pct(dropped, routed), spec_read_bytes=sb, spec_read_mib=sb / MIB,
                   spec_experts=se, spec_useful=su, useful_pct=pct(su, se))


def pool_sweep(results: list):
    """The pooled :class:`~refsim.studies.sweep.SweepResult` of per-trace results (same points in
    the same order): each row's summaries pooled (:func:`pool_summaries`, :func:`pool_knobs`);
    ``n_batch`` and ``tokens`` are sums, ``t_bytes`` the largest trace's."""
    from refsim.studies.sweep import SweepResult, SweepRow
    rows = []
    for i, r0 in enumerate(results[0].rows):
        same = [res.rows[i] for res in results]
        k = [r.knobs for r in same]
        rows.append(SweepRow(r0.budget_mib, r0.policy, pool_summaries([r.summary for r in same]),
                             pool_knobs(k) if all(x is not None for x in k) else None))
    return SweepResult(rows, list(results[0].policies), list(results[0].budgets_mib),
                       max(r.t_bytes for r in results), sum(r.n_batch for r in results),
                       sum(r.tokens for r in results))


def prefixed(label: str, width: int, lines: list[str]) -> list[str]:
    """``lines`` with a left-aligned first column ``label`` of ``width`` characters."""
    return [f"{label:<{width}}  {line}" for line in lines]


# ---------------------------------------------------------------------------------------- union

@dataclass(frozen=True)
class UnionCell:
    """One task of a union grid: ``window`` on ``trace``, replayed at ``budget_bytes`` (None = union
    sizes only) with ``knobs``; ``name_trace`` puts the path in a refusal (many traces)."""

    trace: TraceRef
    window: int
    budget_bytes: int | None
    knobs: object = None
    name_trace: bool = False


def union_cell(cell: UnionCell):
    """Run one union cell: ``(UnionRow, UnionParts)``."""
    from refsim.studies.union import union_study
    try:
        return union_study(load_trace(cell.trace), [cell.window], cell.budget_bytes, cell.knobs,
                           parts=True)[0]
    except ConfigError as exc:
        if cell.name_trace:
            raise ConfigError(f"TRACE {cell.trace.path}: {exc}") from None
        raise


def union_grid(refs: list[TraceRef], windows, budget_bytes, knobs, spec) -> list:
    """Every trace at every window width, on the executor ``spec``: per trace (in ``refs``
    order) the list of ``(UnionRow, UnionParts)`` in ``windows`` order."""
    from refsim.scale.executor import run_cells
    windows = list(windows)
    cells = [UnionCell(ref, int(w), budget_bytes, knobs, len(refs) > 1) for ref in refs
             for w in windows]
    done = run_cells(union_cell, cells, spec, desc="union")
    return [done[i * len(windows):(i + 1) * len(windows)] for i in range(len(refs))]


def counts_percentile(counts, q: float) -> float:
    """The ``q``-th percentile of the population whose value ``s`` occurs ``counts[s]`` times,
    by NumPy's default rule (linear interpolation between closest ranks: ``np.percentile`` of
    the expanded values), without expanding it."""
    c = np.asarray(counts, np.int64)
    n = int(c.sum())
    if n == 0:
        return float("nan")
    cum = np.cumsum(c)
    idx = q / 100.0 * (n - 1)
    lo = int(np.floor(idx))
    hi = min(lo + 1, n - 1)
    v_lo = int(np.searchsorted(cum, lo, side="right"))
    v_hi = int(np.searchsorted(cum, hi, side="right"))
    return float(v_lo + (v_hi - v_lo) * (idx - lo))


def pool_union(per_trace: list) -> list:
    """Pooled :class:`~refsim.studies.union.UnionRow` per window width (module docstring,
    "Pooling"): union sizes of every (window, layer) of every trace as one population, replay
    counters summed, rates the ratios of the sums."""
    from refsim.studies.union import UnionRow
    out = []
    for i, (row0, _) in enumerate(per_trace[0]):
        parts = [pairs[i][1] for pairs in per_trace]
        width = max(len(p.size_counts) for p in parts)
        counts = np.zeros(width, np.int64)
        for p in parts:
            counts[:len(p.size_counts)] += p.size_counts
        n_windows = sum(p.n_windows for p in parts)

        def total(name):
            return sum(getattr(p, name) for p in parts)
        row = dict(window=row0.window, n_windows=n_windows,
                   union_mean=float((counts * np.arange(width)).sum() / counts.sum()),
                   union_p50=counts_percentile(counts, 50), union_p90=counts_percentile(counts, 90),
                   union_mib_mean=total("union_bytes") / n_windows / MIB)
        if row0.decodes is not None:
            tokens, read = total("tokens"), total("decode_read_bytes")
            row.update(decodes=total("decodes"), read_mib=read / MIB,
                       mib_per_token=ratio(read / MIB, tokens),
                       hit_pct_decode=pct(total("decode_hits"), total("decode_lookups")))
            if row0.knob_read_mib is not None:
                kread = total("knob_decode_read_bytes")
                row.update(knob_read_mib=kread / MIB, knob_mib_per_token=ratio(kread / MIB, tokens),
                           knob_hit_pct_decode=pct(total("knob_decode_hits"),
                                                   total("knob_decode_lookups")),
                           knob_dropped=total("knob_dropped"), knob_routed=total("knob_routed"))
        out.append(UnionRow(**row))
    return out
