"""``layer-opt``: per-layer LRU with the optimal per-layer budget shares (``--policy layer-opt``).

Per-layer LRU (``layer``) gives every layer the same share ``budget // n_layer``. A layer's
partition is an independent LRU over that layer's own batches (a batch evicts only from its
layer), so its hits at share ``s`` are the exact LRU step curve of the layer's sub-trace
(:func:`refsim.cache.mrc.stack_distances` on it): ``h_l(s)`` = lookups of layer ``l`` with
byte stack distance ``<= s`` (distance 0, a key of the layer's previous batch, hits at every
share). ``h_l`` only changes at multiples of the layer's entry size ``e_l`` (every key of the
layer has that size), and stops growing at ``n_l`` = the layer's distinct keys. So the best
shares are a knapsack over step functions:

    maximise sum_l h_l(c_l * e_l)  subject to  sum_l c_l * e_l <= budget,  0 <= c_l <= n_l.

Method: layers of one entry size cost the same per entry, so within each size group an exact
max-plus dynamic programme over entry counts gives ``best[n]`` = the most hits with exactly
``n`` entries (layer by layer: ``new[n + c] = max(best[n] + h_l(c))``); the groups (one per
distinct entry size, two on qwen) are then combined on the Pareto frontier of (bytes, hits):
dominated points (more bytes, no more hits) are dropped, and the last group is scanned
directly against the remaining budget. Optimality: the group DP is exhaustive over counts (each
state keeps the best of every way to reach it, and the hits of a group depend only on its
layers' counts); across groups, any allocation's restriction to the first groups is a point of
the unpruned table, and if pruning removed it a point with no more bytes and no fewer hits
replaces it within the budget, so some optimal allocation survives every stage; the final
answer is the best point. The result is exact (integers throughout, no relaxation); ties
(equal hits) go to the fewest bytes, then to the allocation found first, and the bytes left over
are then handed out layer by layer (in layer order, up to each layer's distinct keys), which
never lowers a curve, so a budget that holds everything evicts nothing. The group tables do
not depend on the budget (a budget only truncates them, :func:`group_tables`), so they are
computed once per trace, over every entry count: O(n_layer x N x max n_l) with N = the group's
distinct keys (tens of ms on the qwen trace, once); each budget then costs only the frontier
merge (well under a millisecond). Checked against brute force over every allocation on small
traces (tests/cache/test_layer_opt.py).

The objective is hits of all lookups (prefill included: the engine's ``cache_hit_pct``).
Fitted on the trace it then replays, the allocation is an oracle bound (it knows the future);
``fit=F`` fits it on the first ``F`` of the trace's events instead, and
:func:`refsim.studies.layer_alloc.fit_then_replay` replays a held-out part.
"""

from __future__ import annotations

import weakref

import numpy as np

from refsim.jit import njit
from refsim.cache.batches import BatchTrace, layer_subtraces
from refsim.cache.mrc import stack_distances
from refsim.cache.policies.layer import LayerLRU
from refsim.errors import ConfigError


def layer_curves(batches: BatchTrace) -> list[np.ndarray]:
    """Per layer ``l``: ``hits[c]`` = the layer's LRU hits with a share of ``c`` entries
    (``c * expert_bytes[l]`` bytes), for ``c = 0 .. n_l`` (n_l = distinct keys of the layer).

    Returns
    -------
    list of (n_l + 1,) int64 ndarray
        Non-decreasing in ``c``.
    """
    bt = batches
    out = []
    for il, (keys, start, layers, kinds) in enumerate(layer_subtraces(bt)):
        eb = int(bt.expert_bytes[il])
        dist, _, _ = stack_distances(keys, start, layers, kinds, bt.expert_bytes, bt.n_expert)
        n_l = int(np.unique(keys).size)
        finite = dist[dist != np.iinfo(np.int64).max]
        # distance d (a multiple of eb, or 0) hits at every share of >= d bytes: c >= d / eb
        need = finite // eb
        curve = np.bincount(np.minimum(need, n_l), minlength=n_l + 1).cumsum().astype(np.int64)
        out.append(curve)
    return out


def group_tables(curves: list[np.ndarray], expert_bytes) -> list[tuple]:
    """The budget-free part of :func:`optimal_shares`: per distinct entry size, the group's
    max-plus DP over *every* entry count (up to all the group's distinct keys).

    ``best[n]`` (the most hits with exactly ``n`` entries) does not depend on the budget: a
    budget only truncates the table at ``budget // size`` (the DP for counts ``<= n`` never
    looks past ``n``), so the tables of a trace serve every budget and
    :func:`optimal_shares` with them returns exactly what it returns without them.

    Returns
    -------
    list of (size, layers, pm, arg, choice)
        ``size`` the entry bytes, ``layers`` the group's layer indices, ``pm[n]`` the most hits
        with at most ``n`` entries, ``arg[n]`` the fewest entries reaching ``pm[n]``,
        ``choice[i, n]`` the count of ``layers[i]`` in the best allocation of exactly ``n``.
    """
    eb = [int(x) for x in expert_bytes]
    groups: dict[int, list[int]] = {}
    for il in range(len(curves)):
        groups.setdefault(eb[il], []).append(il)
    parts = []                                  # per entry size: (size, layers, pm, arg, choice)
    for size, layers in groups.items():
        n_max = sum(int(curves[l].size) - 1 for l in layers)
        flat = np.concatenate([curves[l] for l in layers]).astype(np.int64)
        offs = np.zeros(len(layers) + 1, np.int64)
        np.cumsum([curves[l].size for l in layers], out=offs[1:])
        best, choice = _group_dp(flat, offs, n_max)
        pm = np.maximum.accumulate(best)        # best with at most n entries
        arg = _first_argmax_prefix(best)        # the fewest entries reaching pm[n]
        parts.append((size, layers, pm, arg, choice))
    return parts


def optimal_shares(curves: list[np.ndarray], expert_bytes, budget_bytes: int,
                   tables: list[tuple] | None = None) -> tuple[list[int], int]:
    """The exact knapsack (module docstring): per-layer entry counts maximising total hits.

    Parameters
    ----------
    curves : list of (n_l + 1,) int64 ndarray
        :func:`layer_curves`.
    expert_bytes : (n_layer,) int array-like
        Entry size per layer, bytes.
    budget_bytes : int
    tables : list, optional
        :func:`group_tables` of the same curves and sizes (computed here if not given; pass
        them to solve several budgets of one trace without redoing the DP).

    Returns
    -------
    counts : list of int
        Entries per layer (the share of layer ``l`` is ``counts[l] * expert_bytes[l]`` bytes).
    hits : int
        The optimal total hits (sum of the curves at the counts).
    """
    eb = [int(x) for x in expert_bytes]
    parts = group_tables(curves, expert_bytes) if tables is None else tables
    # combine the groups on the Pareto frontier of (bytes, hits): all but the last folded,
    # the last scanned directly (one group per distinct entry size, usually 1 or 2)
    front_b = np.zeros(1, np.int64)
    front_h = np.zeros(1, np.int64)
    back: list[tuple[np.ndarray, np.ndarray]] = []
    for size, layers, pm, arg, choice in parts[:-1]:
        n = np.flatnonzero(np.concatenate(([True], pm[1:] > pm[:-1])))   # Pareto points
        cb = (front_b[:, None] + n[None, :] * size).ravel()
        ch = (front_h[:, None] + pm[n][None, :]).ravel()
        parent = np.repeat(np.arange(front_b.size), n.size)
        pick = np.tile(n, front_b.size)
        ok = cb <= budget_bytes
        cb, ch, parent, pick = cb[ok], ch[ok], parent[ok], pick[ok]
        order = np.lexsort((-ch, cb))
        cb, ch, parent, pick = cb[order], ch[order], parent[order], pick[order]
        keep = ch > np.maximum.accumulate(np.concatenate(([-1], ch[:-1])))
        front_b, front_h = cb[keep], ch[keep]
        back.append((parent[keep], pick[keep]))
    size, layers, pm, arg, choice = parts[-1]
    n_last = np.minimum((budget_bytes - front_b) // size, pm.size - 1)
    total = front_h + pm[n_last]
    j = int(np.argmax(total))                   # first maximum = fewest bytes before the last
    best_hits = int(total[j])
    picks = [0] * len(parts)
    picks[-1] = int(arg[n_last[j]])
    for g in range(len(parts) - 2, -1, -1):
        parent, pick = back[g]
        picks[g] = int(pick[j])
        j = int(parent[j])
    counts = [0] * len(curves)
    for (size, layers, pm, arg, choice), n in zip(parts, picks):
        n = int(arg[n])
        for li in range(len(layers) - 1, -1, -1):
            c = int(choice[li, n])
            counts[layers[li]] = c
            n -= c
    left = budget_bytes - sum(c * e for c, e in zip(counts, eb))
    for il, curve in enumerate(curves):        # hand out what is left, layer by layer, up to
        more = min(curve.size - 1 - counts[il], left // eb[il])   # the layer's distinct keys:
        counts[il] += more                      # curves never decrease, so still optimal
        left -= more * eb[il]
    return counts, best_hits


@njit(cache=True)
def _group_dp(flat, offs, n_max):
    """Max-plus DP over the layers of one entry size: ``best[n]`` = most hits with exactly
    ``n`` entries in all (-1 = not reachable), ``choice[l, n]`` = layer ``l``'s count in it."""
    n_l = offs.size - 1
    best = np.full(n_max + 1, -1, np.int64)
    best[0] = 0
    choice = np.zeros((n_l, n_max + 1), np.int32)
    reach = 0
    for li in range(n_l):
        lo, hi = offs[li], offs[li + 1]
        new = np.full(n_max + 1, -1, np.int64)
        for n in range(reach + 1):
            bn = best[n]
            if bn < 0:
                continue
            for c in range(hi - lo):
                m = n + c
                if m > n_max:
                    break
                v = bn + flat[lo + c]
                if v > new[m]:
                    new[m] = v
                    choice[li, m] = c
        reach = min(n_max, reach + hi - lo - 1)
        best = new
    return best, choice


@njit(cache=True)
def _first_argmax_prefix(best):
    """``arg[n]`` = the smallest ``m <= n`` with ``best[m] == max(best[:n+1])``."""
    arg = np.zeros(best.size, np.int64)
    top = np.int64(-2)
    at = 0
    for n in range(best.size):
        if best[n] > top:
            top = best[n]
            at = n
        arg[n] = at
    return arg


def _fit_prefix(batches: BatchTrace, fraction: float) -> BatchTrace:
    """The first ``fraction`` of the trace's events (whole events: n_layer batches each)."""
    n_ev = batches.n_batch // batches.n_layer
    k = max(1, int(round(n_ev * fraction))) if n_ev else 0
    return slice_events(batches, 0, k)


def slice_events(batches: BatchTrace, first: int, stop: int) -> BatchTrace:
    """Events ``first .. stop - 1`` of ``batches`` (each event = n_layer consecutive batches)
    as a BatchTrace (next uses recomputed; ``tokens`` = 0: unknown for a slice)."""
    from refsim.cache.batches import _next_use

    nl = batches.n_layer
    b0, b1 = first * nl, stop * nl
    s = batches.batch_start
    keys = batches.keys[s[b0]:s[b1]].copy()
    start = s[b0:b1 + 1] - s[b0]
    return BatchTrace(keys=keys, batch_start=start, batch_layer=batches.batch_layer[b0:b1].copy(),
                      batch_kind=batches.batch_kind[b0:b1].copy(),
                      next_use=_next_use(keys, start, nl * batches.n_expert),
                      expert_bytes=batches.expert_bytes, n_expert=batches.n_expert, tokens=0)


_CURVES: "weakref.WeakKeyDictionary[BatchTrace, dict]" = weakref.WeakKeyDictionary()
"""Per BatchTrace and fit fraction: (layer_curves, group_tables), kept as long as the trace
lives (neither depends on the budget; a budget costs only the frontier merge)."""


class LayerOpt(LayerLRU, name="layer-opt"):
    """Per-layer LRU with the hit-maximising shares of :func:`optimal_shares` instead of the
    uniform ``budget // n_layer``: fitted on the first ``fit`` of the replayed trace's events
    (default 1.0, the whole trace: an oracle bound). A hit promotes as in LRU; the fast path is
    LRU's (one :func:`~refsim.cache.policies.lru.lru_kernel` run per layer at its share)."""

    params = {"fit": 1.0}

    def check_params(self):
        if not 0.0 < self.fit <= 1.0:
            raise ConfigError(f"--policy layer-opt: fit={self.fit} is not in (0, 1]")

    def shares(self, batches: BatchTrace, budget_bytes: int) -> list[int]:
        per_trace = _CURVES.setdefault(batches, {})   # curves and DP tables: budget-free
        got = per_trace.get(self.fit)
        if got is None:
            fitted = batches if self.fit == 1.0 else _fit_prefix(batches, self.fit)
            curves = layer_curves(fitted)
            got = per_trace[self.fit] = (curves, group_tables(curves, batches.expert_bytes))
        curves, tables = got
        counts, _ = optimal_shares(curves, batches.expert_bytes, budget_bytes, tables)
        return [c * int(e) for c, e in zip(counts, batches.expert_bytes)]


class FixedShares(LayerLRU):
    """Per-layer LRU with given per-layer shares in bytes (not registered; for studies)."""

    name = "layer-fixed"

    def __init__(self, shares_bytes):
        super().__init__()
        self.fixed = [int(x) for x in shares_bytes]

    def shares(self, batches, budget_bytes):
        return list(self.fixed)
