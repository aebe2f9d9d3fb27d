"""The cache-aware dropping policy replayed on a route trace: the engine's *static* upper bound
and refsim's *dynamic* replay side by side.

**Static** (the engine's ``scripts/route-drop-replay.py``, bmoe-engine.md §5; definitions in
our words). Rows are grouped into routing *cells* ``(turn, step, layer)`` per trace phase (a
position decoded twice in a speculative trace merges into one cell, as there). A row whose weight
is unknown (``nan``) is left out. Against the **recorded** residency (``0`` = miss) and the
recorded ``expert_bytes`` column:

- threshold ``thr = frac / k`` (float64): in each cell the best row (largest weight, the first in
  file order on a tie) is kept; a miss row below ``thr`` that is not the best is dropped;
  ``io_saved = dropped miss bytes / miss bytes``, ``mass_lost = dropped weight / all weight``,
  and the histogram of surviving rows per cell (% of cells);
- static top-k baseline (``--n-expert-used keep``): slots ``>= keep`` are cut whatever the cache
  held; ``io_saved`` counts the cut miss bytes;
- a trace recorded with dropping on reports its own ``dropped`` column (rows, % of rows, %
  weight mass).

The static replay keeps the recorded hit pattern, although skipping a read changes what the
cache holds later: it is an upper bound only where dropping is light (expert-dropping.md).

**Dynamic**: the trace replayed through :class:`~refsim.cache.ExpertCache` at a budget with
the policy in force (the rule decides against the replayed cache state, §3.6), compared with
the same replay without it. ``io_saved = 1 - decode read bytes / decode read bytes without
drop``; ``mass_lost`` = the router weight of the dropped decode slots / all decode weight.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from refsim.cache import CacheSummary, ExpertCache
from refsim.streaming.knobs import StreamKnobs
from refsim.cache.summary import KnobSummary
from refsim.events import DecodeEvent, confirmed_tokens
from refsim.trace import RouteTrace

MISS = 0

DEFAULT_FRACS = (0.25, 0.5, 0.75, 1.0)
"""route-drop-replay.py's thresholds (fractions of the uniform share 1/k)."""


@dataclass(frozen=True)
class Cells:
    """The rows of one phase grouped into routing cells, as flat arrays in file order.

    ``cell`` is each row's cell index (cells numbered by first appearance); ``slot``, ``weight``
    (float64), ``residency`` (recorded), ``nbytes`` (recorded ``expert_bytes``), ``dropped``."""

    cell: np.ndarray
    slot: np.ndarray
    weight: np.ndarray
    residency: np.ndarray
    nbytes: np.ndarray
    dropped: np.ndarray
    n_cells: int

    @property
    def n_rows(self) -> int:
        return int(self.cell.size)


def trace_cells(trace: RouteTrace, phase: int) -> Cells:
    """The trace's rows of ``phase`` (0 prefill, 1 decode) with a known weight, as cells."""
    parts = defaultdict(list)
    for ev, res, chg, lines in zip(trace.events, trace.residency, trace.charged_bytes,
                                   trace.line_numbers):
        if ev.phase != phase or ev.weights is None:
            continue
        ok = (ev.routes >= 0) & np.isfinite(ev.weights)
        p, il, s = np.nonzero(ok)
        parts["line"].append(lines[ok])
        parts["turn"].append(np.full(p.size, ev.turn, np.int64))
        parts["step"].append(ev.positions[p])
        parts["layer"].append(il)
        parts["slot"].append(s)
        parts["weight"].append(ev.weights[ok].astype(np.float64))
        parts["res"].append(res[ok])
        parts["nb"].append(chg[ok])
        parts["d"].append(ev.dropped[ok] if ev.dropped is not None else np.zeros(p.size, bool))
    if not parts:
        z = np.zeros(0, np.int64)
        return Cells(z, z, z.astype(np.float64), z, z, z.astype(bool), 0)
    cat = {k: np.concatenate(v) for k, v in parts.items()}
    order = np.argsort(cat["line"], kind="stable")                  # file order
    cat = {k: v[order] for k, v in cat.items()}
    ids: dict[tuple, int] = {}
    cell = np.array([ids.setdefault(key, len(ids)) for key in
                     zip(cat["turn"].tolist(), cat["step"].tolist(), cat["layer"].tolist())],
                    np.int64)
    return Cells(cell=cell, slot=cat["slot"], weight=cat["weight"], residency=cat["res"],
                 nbytes=cat["nb"], dropped=cat["d"], n_cells=len(ids))


def _cell_best(c: Cells) -> np.ndarray:
    """Per row: True for its cell's best row (largest weight, first in file order on a tie)."""
    best_row = {}
    for i, (cid, w) in enumerate(zip(c.cell.tolist(), c.weight.tolist())):
        j = best_row.get(cid)
        if j is None or w > c.weight[j]:
            best_row[cid] = i
    out = np.zeros(c.n_rows, bool)
    out[list(best_row.values())] = True
    return out


def _pct(num, den) -> float:
    return 100.0 * num / den if den else 0.0


def _in_cell_order(c: Cells, values) -> float:
    """Sum of ``values`` cell by cell, rows in file order inside a cell (the script's order)."""
    order = np.argsort(c.cell, kind="stable")
    return sum(np.asarray(values, np.float64)[order].tolist())


@dataclass(frozen=True)
class ThresholdRow:
    """One static threshold: percentages as printed, and the survivor histogram."""

    frac: float
    thr: float
    io_saved_pct: float
    mass_lost_pct: float
    kept_hist: dict[int, int]


@dataclass(frozen=True)
class StaticKRow:
    keep: int
    io_saved_pct: float
    mass_lost_pct: float


def static_threshold(c: Cells, frac: float, k: int) -> ThresholdRow:
    """The static replay of threshold ``frac / k`` over cells ``c`` (module docstring)."""
    thr = (1.0 / k) * frac
    miss = c.residency == MISS
    drop = miss & ~_cell_best(c) & (c.weight < thr)
    miss_b = int(c.nbytes[miss].sum())
    drop_b = int(c.nbytes[drop].sum())
    kept = np.bincount(c.cell[~drop], minlength=c.n_cells)
    hist = dict(sorted(zip(*np.unique(kept, return_counts=True))))
    return ThresholdRow(frac, thr, _pct(drop_b, miss_b),
                        _pct(_in_cell_order(c, np.where(drop, c.weight, 0.0)),
                             _in_cell_order(c, c.weight)),
                        {int(a): int(b) for a, b in hist.items()})


def static_keep(c: Cells, keep: int) -> StaticKRow:
    """The static top-``keep`` baseline over cells ``c``."""
    miss = c.residency == MISS
    cut = c.slot >= keep
    return StaticKRow(keep, _pct(int(c.nbytes[cut & miss].sum()), int(c.nbytes[miss].sum())),
                      _pct(_in_cell_order(c, np.where(cut, c.weight, 0.0)),
                           _in_cell_order(c, c.weight)))


@dataclass(frozen=True)
class DynamicRow:
    """One dynamic replay at a budget. ``label`` is the frac (drop) or keep (static top-k)."""

    label: str
    value: float
    io_saved_pct: float
    mass_lost_pct: float
    dropped: int
    routed: int
    hit_pct_decode: float
    mib_per_token: float
    decode_read_bytes: int


def _undropped(events) -> list[DecodeEvent]:
    return [DecodeEvent(e.kind, e.positions, e.routes, weights=e.weights, tokens=e.tokens,
                        turn=e.turn, n_draft=e.n_draft, accepted=e.accepted) for e in events]


def _cut(events, keep: int) -> list[DecodeEvent]:
    out = []
    for e in events:
        r = e.routes.copy()
        r[:, :, keep:] = -1
        out.append(DecodeEvent(e.kind, e.positions, r, weights=e.weights, tokens=e.tokens,
                               turn=e.turn, n_draft=e.n_draft, accepted=e.accepted))
    return out


def _replay(trace, events, budget, knobs=None):
    h = trace.header
    cache = ExpertCache(h.expert_bytes, h.n_expert, budget, knobs)
    recs = [cache.apply(e) for e in events]
    tokens = sum(confirmed_tokens(e) for e in events)
    return cache, recs, CacheSummary.from_stats(cache.stats, budget, tokens, h.token_cycle_bytes)


def dynamic_rows(trace: RouteTrace, budget_bytes: int, fracs, keeps) -> list[DynamicRow]:
    """The dynamic replay at ``budget_bytes``: no drop (``frac`` 0, the baseline), each frac,
    and each static top-k; decode figures (module docstring). A recorded ``dropped`` column is
    ignored: every row starts from the router's own routing."""
    from refsim.studies.replay import require_weights
    if fracs:
        require_weights(trace, StreamKnobs(drop_frac=float(max(fracs)) or 1.0))
    events = _undropped(trace.events)
    _, _, base = _replay(trace, events, budget_bytes)
    dec = [e for e in events if e.phase == 1 and e.weights is not None]
    total_w = sum(float(np.nansum(np.where(e.routes >= 0, e.weights, 0.0), dtype=np.float64))
                  for e in dec)
    rows = []

    def row(label, value, cache, recs, s, lost):
        k = KnobSummary.from_stats(cache.stats, cache.knobs)
        saved = _pct(base.decode_read_bytes - s.decode_read_bytes, base.decode_read_bytes)
        rows.append(DynamicRow(label, value, saved, _pct(lost, total_w), k.experts_dropped,
                               k.experts_routed, s.hit_pct_decode, s.mib_per_token,
                               s.decode_read_bytes))

    for f in [0.0, *fracs]:
        cache, recs, s = _replay(trace, events, budget_bytes, StreamKnobs(drop_frac=float(f)))
        lost = sum(float(e.weights[r.dropped].astype(np.float64).sum())
                   for e, r in zip(events, recs) if e.phase == 1 and r.dropped is not None)
        row("frac", float(f), cache, recs, s, lost)
    for keep in keeps:
        cache, recs, s = _replay(trace, _cut(events, keep), budget_bytes)
        lost = sum(float(np.where(e.routes[:, :, keep:] >= 0, e.weights[:, :, keep:], 0.0)
                         .astype(np.float64).sum()) for e in dec)
        row("keep", float(keep), cache, recs, s, lost)
    return rows


def require_study_weights(trace: RouteTrace) -> None:
    """Refuse a trace whose decodes route a slot without its final weight, as ``replay
    --drop-cold-experts`` does (:func:`refsim.studies.replay.require_weights`, the one rule): the
    study weighs every decode routing against the threshold, and a trace whose weights are all
    ``nan`` printed ``[DECODE] no rows`` with exit 0 (issue 26 C4).

    Raises
    ------
    ConfigError
        ``"<trace>: line N: weight 'nan' on a routed slot; --drop-cold-experts needs every
        routed slot's final weight"``.
    """
    from refsim.studies.replay import require_weights
    require_weights(trace, StreamKnobs(drop_frac=1.0))


def report_lines(trace: RouteTrace, name: str, fracs=DEFAULT_FRACS, keeps=None,
                 budget_bytes: int | None = None) -> list[str]:
    """The report of one trace: route-drop-replay.py's text for the same thresholds and keeps
    (identical lines), and with ``budget_bytes`` a dynamic block after the decode tables.

    Parameters
    ----------
    trace : RouteTrace
    name : str
        What the banner names (the script prints the file's base name).
    fracs : sequence of float
        Thresholds as fractions of 1/k.
    keeps : sequence of int, optional
        Static top-k baselines (default: k-1 down to 1, the script's).
    budget_bytes : int, optional
        Budget for the dynamic replay; no dynamic block when None.

    Raises
    ------
    ConfigError
        A routed decode slot without its weight (:func:`require_study_weights`).
    """
    require_study_weights(trace)
    h = trace.header
    k = h.n_expert_used
    if keeps is None:
        keeps = list(range(k - 1, 0, -1))
    out = ["=" * 78, f"{name}   arch={h.arch}  n_expert={h.n_expert}  k={k}", "=" * 78]
    for phase, label in ((1, "DECODE"), (0, "PREFILL")):
        c = trace_cells(trace, phase)
        if not c.n_cells:
            out += ["", f"[{label}] no rows"]
            continue
        n_miss = int((c.residency == MISS).sum())
        out += ["", f"[{label}] {c.n_cells} routing cells, {c.n_rows} routed experts, "
                    f"{_pct(n_miss, c.n_rows):.1f}% misses"]
        n_drop = int(c.dropped.sum())
        if n_drop:
            lost = _in_cell_order(c, np.where(c.dropped, c.weight, 0.0))
            out.append(f"  recorded: dropping was ON for this run -- {n_drop} routings dropped "
                       f"({_pct(n_drop, c.n_rows):.1f}%), "
                       f"{_pct(lost, _in_cell_order(c, c.weight)):.2f}% of the weight mass")
        out += ["", f"  cache-aware threshold, as a fraction of the uniform share 1/k = "
                    f"{100 / k:.2f}%",
                f"  {'frac':>6}  {'thr':>8}  {'io_saved':>9}  {'mass_lost':>10}   "
                f"surviving experts per cell"]
        for f in fracs:
            r = static_threshold(c, f, k)
            hist = " ".join(f"{kk}:{_pct(v, c.n_cells):.0f}%" for kk, v in r.kept_hist.items())
            out.append(f"  {f:6.2f}  {100 * r.thr:7.2f}%  {r.io_saved_pct:8.1f}%  "
                       f"{r.mass_lost_pct:9.2f}%   {hist}")
        out += ["", "  static-k baseline (--n-expert-used), same rows, for comparison at equal "
                    "io_saved", f"  {'keep_k':>6}  {'io_saved':>9}  {'mass_lost':>10}"]
        for keep in keeps:
            r = static_keep(c, keep)
            out.append(f"  {keep:6d}  {r.io_saved_pct:8.1f}%  {r.mass_lost_pct:9.2f}%")
        if phase == 1 and budget_bytes is not None:
            out += dynamic_lines(dynamic_rows(trace, budget_bytes, fracs, keeps), budget_bytes)
    out.append("")
    return out


def dynamic_lines(rows: list[DynamicRow], budget_bytes: int) -> list[str]:
    """The dynamic block: one line per replay (frac 0 = the no-drop baseline)."""
    from refsim import MIB
    out = ["", f"  dynamic: the trace replayed through the LRU at {budget_bytes / MIB:g} MiB with "
               f"the policy in force (decode; io_saved against frac 0)",
           f"  {'policy':>9}  {'io_saved':>9}  {'mass_lost':>10}  {'dropped':>15}  "
           f"{'hit_dec%':>8}  {'MiB/token':>9}"]
    for r in rows:
        name = f"frac {r.value:.2f}" if r.label == "frac" else f"keep {int(r.value)}"
        drop = f"{r.dropped}/{r.routed}" if r.label == "frac" else "-"
        out.append(f"  {name:>9}  {r.io_saved_pct:8.1f}%  {r.mass_lost_pct:9.2f}%  {drop:>15}  "
                   f"{r.hit_pct_decode:8.2f}  {r.mib_per_token:9.2f}")
    return out


def report_json(trace: RouteTrace, name: str, fracs=DEFAULT_FRACS, keeps=None,
                budget_bytes: int | None = None) -> dict:
    """``refsim drop-replay --json``: the numbers of :func:`report_lines` at full precision
    (docs/streaming-knobs.md "refsim drop-replay --json"). Per phase (``decode``, ``prefill``;
    null when the phase has no weighed rows): ``cells``, ``routed``, ``miss_pct``,
    ``recorded_dropped``, ``thresholds`` (:class:`ThresholdRow` fields per frac, the survivor
    histogram keyed by count), ``static_k`` (:class:`StaticKRow` per keep) and, for the decode
    phase with ``budget_bytes``, ``dynamic`` (:class:`DynamicRow` per point).

    Raises
    ------
    ConfigError
        As :func:`report_lines` (:func:`require_study_weights`).
    """
    import dataclasses
    require_study_weights(trace)
    h = trace.header
    k = h.n_expert_used
    if keeps is None:
        keeps = list(range(k - 1, 0, -1))
    out = {"trace": name, "arch": h.arch, "n_expert": h.n_expert, "k": k,
           "budget_bytes": budget_bytes}

    def row(r) -> dict:
        d = dataclasses.asdict(r)
        return {key: ({str(a): b for a, b in v.items()} if isinstance(v, dict) else v)
                for key, v in d.items()}
    for phase, label in ((1, "decode"), (0, "prefill")):
        c = trace_cells(trace, phase)
        if not c.n_cells:
            out[label] = None
            continue
        part = {"cells": c.n_cells, "routed": c.n_rows,
                "miss_pct": _pct(int((c.residency == MISS).sum()), c.n_rows),
                "recorded_dropped": int(c.dropped.sum()),
                "thresholds": [dict(row(static_threshold(c, f, k)), frac=f) for f in fracs],
                "static_k": [row(static_keep(c, keep)) for keep in keeps]}
        if phase == 1 and budget_bytes is not None:
            part["dynamic"] = [row(r) for r in dynamic_rows(trace, budget_bytes, fracs, keeps)]
        out[label] = part
    return out
