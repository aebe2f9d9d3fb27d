"""The views of ``refsim analyze``: each takes a :class:`~refsim.analysis.frame.Framed`
selection and returns a plain dict (JSON-ready, full precision). Definitions: docs/analysis.md.

Two kinds of count, by framing (docs/analysis.md, "Framing"):

- *routings*: every routed slot, dropped ones included (what the router asked for). ``hot``
  and ``entropy`` always count routings; every view does in the ``position`` framing (the
  engine's ``route-analyze.py``).
- *lookups*: in the ``decode`` framing, ``reuse``, ``overlap``, ``workset`` and ``cache``
  count what the expert cache sees: one lookup per distinct (layer, expert) of a decode's
  layer batch, dropped slots left out (bmoe-engine.md §3.2, §3.6; :class:`refsim.cache.ExpertCache`
  counts the same way).
"""

from __future__ import annotations

import math

import numpy as np

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.events import DecodeKind
from refsim.fmt import ratio
from refsim.analysis.frame import Framed
from refsim.studies.replay import replay_events

VIEWS = ("matrix", "hot", "reuse", "overlap", "workset", "cache", "entropy", "bytes")
OVERLAP_LAGS = (1, 2, 4, 8)
WORKSET_MARKS = (1, 2, 5, 10, 25, 50, 100, 200, 500, 1000)
KIND_NAMES = {int(k): k.name.lower() for k in DecodeKind}


def _mean(values) -> float:
    """Mean of floats summed in the given (unit) order with Python's ``sum``, 0.0 when empty.

    The order is route-analyze.py's, so an exact tie at the printed precision (a mean of
    shares of k, e.g. 28.75 %) rounds the same way in both tools."""
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def group_ids(*cols: np.ndarray) -> np.ndarray:
    """(n,) int64: a dense id per distinct tuple of the columns, in lexicographic order.

    Used instead of arithmetic keys such as ``unit * n_expert + expert``, which a hostile header
    (a huge ``n_expert``) or huge positions could overflow; ids are bounded by the row count."""
    if not cols[0].size:
        return np.zeros(0, np.int64)
    _u, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    return inv.reshape(-1).astype(np.int64)


def occurrences(fr: Framed) -> dict:
    """The counted occurrences of a framing: lookups (decode) or routings (position).

    Returns a dict of row-index arrays over ``fr``'s rows (``idx``), in row order.
    """
    if fr.framing == "position":
        return {"idx": np.arange(fr.n_rows)}
    keep = np.flatnonzero(~fr.dropped)
    key = group_ids(fr.unit[keep], fr.layer[keep], fr.expert[keep])
    _u, first = np.unique(key, return_index=True)    # first row of each id in its layer batch
    return {"idx": np.sort(keep[first])}


def _layer_sequences(fr: Framed, occ_idx: np.ndarray):
    """Per layer: (seq index of each occurrence, expert, n_seq). The sequence index counts the
    units in which that layer has an occurrence (0-based, in time order)."""
    out = {}
    lay, uni, exp = fr.layer[occ_idx], fr.unit[occ_idx], fr.expert[occ_idx]
    for il in np.unique(lay).tolist():
        m = lay == il
        units, seq = np.unique(uni[m], return_inverse=True)
        out[il] = (seq.astype(np.int64), exp[m], int(units.size), np.flatnonzero(m))
    return out


# ── matrix ──────────────────────────────────────────────────────────────────────────────────
def repeat_flags(fr: Framed) -> tuple[np.ndarray, np.ndarray]:
    """Per row: ``repeat`` = the previous unit of ``fr`` also routed this (layer, expert);
    ``in_batch`` = not ``repeat``, and an earlier position of the same unit routed it in this
    layer (a verify batch reads it once). Both (n_rows,) bool."""
    base = group_ids(fr.layer, fr.expert)                # dense (layer, expert) id < n_rows
    span = int(base.max(initial=0)) + 1
    key = fr.unit * span + base
    repeat = np.isin((fr.unit - 1) * span + base, key) & (fr.unit > 0)
    order = np.lexsort((fr.step, key))
    ks = key[order]
    first = np.r_[True, ks[1:] != ks[:-1]]
    min_step = np.empty_like(fr.step)
    min_step[order] = fr.step[order][np.maximum.accumulate(np.where(first, np.arange(ks.size), 0))]
    return repeat, (fr.step > min_step) & ~repeat


def view_matrix(fr: Framed, show_units: np.ndarray, layers: list[int]) -> dict:
    """Step × layer matrix of expert ids, for the units ``show_units`` (indices into ``fr``).

    One row per (unit, position). ``repeat`` marks an id this layer also routed in the previous
    unit of ``fr`` (previous decode / previous position), whether or not that unit is shown;
    ``in_batch`` (decode framing) an id an earlier position of the same verify batch already
    routed in this layer (:func:`repeat_flags`).
    """
    repeat, in_batch = repeat_flags(fr)
    show = np.isin(fr.unit, np.asarray(show_units)) & np.isin(fr.layer, layers)
    idx = np.flatnonzero(show)
    rowkey = fr.step[idx] if fr.framing == "decode" else fr.unit_first[fr.unit[idx]]
    order = idx[np.lexsort((fr.slot[idx], fr.layer[idx], rowkey, fr.unit[idx]))] \
        if fr.framing == "decode" else idx
    rows: list[dict] = []
    cur = None
    for j in order.tolist():
        u = int(fr.unit[j])
        s = int(fr.step[j]) if fr.framing == "decode" else int(fr.unit_first[u])
        if cur is None or (cur["unit"], cur["step"]) != (u, s):
            cur = dict(unit=u, step=s, turn=int(fr.unit_turn[u]),
                       kind=KIND_NAMES[int(fr.unit_kind[u])], cells={})
            rows.append(cur)
        c = cur["cells"].setdefault(str(int(fr.layer[j])), dict(
            experts=[], repeat=[], in_batch=[], dropped=[], residency=[], weight=[], bytes=[]))
        w = float(fr.weight[j])
        for name, v in (("experts", int(fr.expert[j])), ("repeat", bool(repeat[j])),
                        ("in_batch", bool(in_batch[j])), ("dropped", bool(fr.dropped[j])),
                        ("residency", int(fr.residency[j])),
                        ("weight", None if math.isnan(w) else w), ("bytes", int(fr.bytes[j]))):
            c[name].append(v)
    return {"layers": layers, "rows": rows}


def matrix_cell_text(cell: dict, mode: str, framing: str) -> str:
    """A matrix cell as text. ``experts``: ids, ``*`` = repeat from the previous unit, ``+`` =
    repeat inside the batch, ``~`` = dropped; ``weights``: ``id:weight%`` (``--`` unknown);
    ``mb``: MiB charged in the cell; ``hit``: one letter per slot, M miss, H hit, P prefetched
    (D dropped, decode framing)."""
    if mode == "experts":
        return " ".join(("*" if r else "+" if ib else "") + ("~" if d and framing == "decode"
                                                             else "") + str(e)
                        for e, r, ib, d in zip(cell["experts"], cell["repeat"], cell["in_batch"],
                                               cell["dropped"]))
    if mode == "weights":
        return " ".join("%d:%s" % (e, "--" if w is None else "%.0f%%" % (100 * w))
                        for e, w in zip(cell["experts"], cell["weight"]))
    if mode == "mb":
        return "%.1f" % (sum(cell["bytes"]) / MIB)
    return "".join("D" if d and framing == "decode" else "MHP"[r]
                   for r, d in zip(cell["residency"], cell["dropped"]))


# ── hot ─────────────────────────────────────────────────────────────────────────────────────
def view_hot(fr: Framed, top: int = 8) -> dict:
    """Routings per (layer, expert); per layer the ``top`` busiest (ties: first routed first),
    ``unique`` experts routed and ``coverage_pct`` = 100 × top routings / layer routings."""
    out = []
    for il in fr.layers():
        m = fr.layer == il
        e, ln = fr.expert[m], fr.line[m]
        ids, inv, counts = np.unique(e, return_inverse=True, return_counts=True)
        first = np.full(ids.size, np.iinfo(np.int64).max)
        np.minimum.at(first, inv, ln)
        order = np.lexsort((first, -counts))
        total = int(counts.sum())
        topn = order[:top]
        out.append(dict(layer=il, unique=int(ids.size), routings=total,
                        coverage_pct=100.0 * int(counts[topn].sum()) / total if total else 0.0,
                        top=[[int(ids[j]), int(counts[j])] for j in topn]))
    return {"top": top, "layers": out}


# ── reuse ───────────────────────────────────────────────────────────────────────────────────
def reuse_distances(fr: Framed) -> dict[int, tuple[np.ndarray, int]]:
    """Per layer: (sorted reuse distances in units, experts occurring exactly once)."""
    occ = occurrences(fr)["idx"]
    out = {}
    for il, (seq, exp, _n, _rows) in _layer_sequences(fr, occ).items():
        order = np.lexsort((seq, exp))
        e, s = exp[order], seq[order]
        same = e[1:] == e[:-1]
        d = np.sort((s[1:] - s[:-1])[same])
        _ids, counts = np.unique(e, return_counts=True)
        out[il] = (d, int((counts == 1).sum()))
    return out


def view_reuse(fr: Framed) -> dict:
    """Reuse distance per layer: for each occurrence of a (layer, expert) after its first, the
    number of units since its previous occurrence (decode framing: decodes between two
    lookups; position framing: steps, 0 for a position routed twice). ``p50``/``p90`` are the
    ``⌊n/2⌋``-th and ``⌊9n/10⌋``-th smallest (0-based, capped at n-1); ``never_2nd`` = experts
    with one occurrence only."""
    out = []
    for il, (d, singles) in reuse_distances(fr).items():
        n = int(d.size)
        row = dict(layer=il, n_reuse=n, never_2nd=singles, p50=None, p90=None, max=None)
        if n:
            row.update(p50=int(d[min(n - 1, n // 2)]), p90=int(d[min(n - 1, 9 * n // 10)]),
                       max=int(d[-1]))
        out.append(row)
    return {"unit": "decodes" if fr.framing == "decode" else "steps", "layers": out}


# ── overlap ─────────────────────────────────────────────────────────────────────────────────
def _unit_sets(fr: Framed):
    """Per layer: (seq, col, n_seq, n_col): the distinct (unit, expert) pairs of the layer as the
    unit's sequence index and a dense expert column (sets S_i, kept sparse: memory O(rows))."""
    occ = occurrences(fr)["idx"]
    out = {}
    for il, (seq, exp, n, _rows) in _layer_sequences(fr, occ).items():
        ids, col = np.unique(exp, return_inverse=True)
        key = np.unique(seq * ids.size + col.reshape(-1))
        out[il] = (key // ids.size, key % ids.size, n, int(ids.size))
    return out


def overlap_values(fr: Framed, lags=OVERLAP_LAGS) -> dict[int, dict[int, np.ndarray]]:
    """Per layer and lag g: 100 × |S_i ∩ S_{i-g}| / |S_i| for every unit i >= g."""
    out = {}
    for il, (seq, col, n, n_col) in _unit_sets(fr).items():
        out[il] = {}
        key = seq * n_col + col
        size = np.bincount(seq, minlength=n)
        for g in lags:
            if n > g:
                shared = np.isin(key - g * n_col, key) & (seq >= g)
                inter = np.bincount(seq[shared], minlength=n)
                out[il][g] = 100.0 * inter[g:] / size[g:]
            else:
                out[il][g] = np.zeros(0)
    return out


def view_overlap(fr: Framed, lags=OVERLAP_LAGS) -> dict:
    """Mean share (%) of a unit's experts that the unit ``g`` earlier in the same layer also
    had; ``all`` pools every layer's values."""
    vals = overlap_values(fr, lags)
    layers = [dict(layer=il, lag_pct={str(g): _mean(v[g].tolist()) for g in lags})
              for il, v in vals.items()]
    pooled = {str(g): _mean([x for v in vals.values() for x in v[g].tolist()]) for g in lags}
    return {"lags": list(lags), "layers": layers, "all": pooled}


# ── workset ─────────────────────────────────────────────────────────────────────────────────
def workset_curves(fr: Framed) -> dict[int, np.ndarray]:
    """Per layer: (n_seq,) int64, distinct experts seen in the layer's first 1..n_seq units."""
    out = {}
    for il, (seq, col, n, n_col) in _unit_sets(fr).items():
        first = np.full(n_col, n, np.int64)
        np.minimum.at(first, col, seq)
        out[il] = np.cumsum(np.bincount(first, minlength=n + 1)[:n])
    return out


def view_workset(fr: Framed) -> dict:
    """Cumulative distinct experts per layer after 1, 2, 5, ... units and at the last unit;
    ``union_mib`` = Σ_layers expert_bytes × distinct experts at the last mark / 2**20.

    A layer with fewer units than a mark shows ``None`` there (decode framing) or 0 (position
    framing, as route-analyze.py prints)."""
    curves = workset_curves(fr)
    total = max((c.size for c in curves.values()), default=0)
    marks = [m for m in WORKSET_MARKS if m <= total]
    if total and total not in marks:
        marks.append(total)
    missing = 0 if fr.framing == "position" else None
    layers = []
    union = 0
    eb = fr.header.expert_bytes
    for il, c in curves.items():
        vals = [int(c[m - 1]) if m <= c.size else missing for m in marks]
        layers.append(dict(layer=il, of=fr.header.n_expert, at=vals))
        union += int(eb[il]) * (vals[-1] or 0) if marks else 0
    return {"unit": "decodes" if fr.framing == "decode" else "steps", "marks": marks,
            "layers": layers, "union_bytes": union, "union_mib": union / MIB}


# ── cache ───────────────────────────────────────────────────────────────────────────────────
def view_cache(fr: Framed, trace=None, budget_bytes: int | None = None) -> dict:
    """Recorded outcome (the trace's ``residency``) per layer as shares of lookups (decode
    framing) or routings (position framing); prefetched hits by rank slot; dropped routings.
    With ``budget_bytes`` (decode framing), the whole trace is also replayed through
    :class:`refsim.cache.ExpertCache` and each counted lookup's replayed outcome is reported
    (``replay_hit_pct``, and how many agree with the record)."""
    occ = occurrences(fr)["idx"]
    res, lay = fr.residency[occ], fr.layer[occ]
    replay = None
    if budget_bytes is not None and fr.framing == "decode":
        h = trace.header
        cache = ExpertCache(h.expert_bytes, h.n_expert, budget_bytes)
        records = replay_events(trace.events, cache)
        ev = fr.unit_event[fr.unit[occ]]
        pos = fr.step[occ] - fr.unit_first[fr.unit[occ]]
        replay = np.array([records[e].residency[p, il, s] for e, p, il, s in
                           zip(ev.tolist(), pos.tolist(), lay.tolist(),
                               fr.slot[occ].tolist())], dtype=np.int64)
    layers = []
    tot = np.zeros(3, np.int64)
    for il in np.unique(lay).tolist():
        m = lay == il
        c = np.bincount(res[m], minlength=3)[:3]
        tot += c
        n = int(c.sum())
        row = dict(layer=il, miss=int(c[0]), hit=int(c[1]), prefetch=int(c[2]), n=n,
                   miss_pct=100.0 * c[0] / n, hit_pct=100.0 * c[1] / n,
                   prefetch_pct=100.0 * c[2] / n,
                   dropped=int((fr.dropped & (fr.layer == il)).sum()))
        if replay is not None:
            rh = int((replay[m] == 1).sum())
            row.update(replay_hit=rh, replay_hit_pct=100.0 * rh / n,
                       replay_agree=int(((replay[m] == 1) == (res[m] != 0)).sum()))
        layers.append(row)
    n = int(tot.sum()) or 1
    allrow = dict(miss=int(tot[0]), hit=int(tot[1]), prefetch=int(tot[2]), n=int(tot.sum()),
                  miss_pct=100.0 * tot[0] / n, hit_pct=100.0 * tot[1] / n,
                  prefetch_pct=100.0 * tot[2] / n, dropped=int(fr.dropped.sum()))
    if replay is not None:
        rh = int((replay == 1).sum())
        allrow.update(replay_hit=rh, replay_hit_pct=100.0 * rh / n,
                      replay_agree=int(((replay == 1) == (res != 0)).sum()),
                      budget_bytes=int(budget_bytes), budget_mib=budget_bytes / MIB)
    slots = fr.slot[occ][res == 2]
    by_slot = {str(s): int(c) for s, c in zip(*np.unique(slots, return_counts=True))}
    return {"counted": "lookups" if fr.framing == "decode" else "routings", "layers": layers,
            "all": allrow, "prefetch_by_slot": by_slot}


# ── entropy ─────────────────────────────────────────────────────────────────────────────────
def view_entropy(fr: Framed) -> dict:
    """Per routing decision (decode framing: one position in one layer; position framing: a
    (step, layer) cell, a re-decoded position's rows merged): the known weights normalised to
    p = w / Σw, entropy H = -Σ p log2 p bits and top-1 share = 100 × max p; per layer the means.
    Cells with no known weight or Σw <= 0 are skipped."""
    k = fr.header.n_expert_used
    ok = ~np.isnan(fr.weight)
    if fr.framing == "decode":
        key = group_ids(fr.unit, fr.layer, fr.step)        # rows are in (unit, layer, step) order
    else:
        key = group_ids(fr.unit, fr.layer)
    key, w, lay = key[ok], fr.weight[ok], fr.layer[ok]
    if not key.size:
        return {"k": k, "max_bits": math.log2(k) if k > 1 else 0.0, "layers": []}
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    tot = np.add.reduceat(w, starts)
    cell = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, key.size]))
    p = w / tot[cell]
    plogp = np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
    h = -np.add.reduceat(plogp, starts)
    top1 = 100.0 * np.maximum.reduceat(p, starts)
    good = tot > 0
    cl = lay[starts]
    layers = [dict(layer=il, cells=int((good & (cl == il)).sum()),
                   entropy_bits=_mean(h[good & (cl == il)].tolist()),
                   top1_pct=_mean(top1[good & (cl == il)].tolist()))
              for il in np.unique(cl[good]).tolist()]
    return {"k": k, "max_bits": math.log2(k) if k > 1 else 0.0, "layers": layers}


# ── bytes ───────────────────────────────────────────────────────────────────────────────────
def view_bytes(fr: Framed) -> dict:
    """Flash bytes the trace charged (its ``expert_bytes`` column): total, per unit, per layer;
    decode framing adds confirmed tokens and MiB per token. Per layer also the preamble's entry
    size and dense bytes (MiB)."""
    h = fr.header
    per_unit = np.bincount(fr.unit, weights=fr.bytes, minlength=fr.n_units).astype(np.int64)
    units_with_rows = np.unique(fr.unit).size
    total = int(fr.bytes.sum())
    layers = []
    for il in fr.layers():
        layers.append(dict(layer=il, read_bytes=int(fr.bytes[fr.layer == il].sum()),
                           read_mib=int(fr.bytes[fr.layer == il].sum()) / MIB,
                           expert_mib=int(h.expert_bytes[il]) / MIB,
                           dense_mib=int(h.dense_bytes[il]) / MIB))
    out = dict(unit="decodes" if fr.framing == "decode" else "steps", total_bytes=total,
               total_mib=total / MIB, units=int(units_with_rows),
               mib_per_unit=total / MIB / max(1, units_with_rows), layers=layers,
               dense_total_mib=int(h.dense_bytes.sum()) / MIB,
               per_unit_bytes=per_unit.tolist())
    if fr.framing == "decode":
        tokens = int(fr.unit_tokens.sum())
        out.update(tokens=tokens, mib_per_token=ratio(total / MIB, tokens))   # None: no token
    return out
