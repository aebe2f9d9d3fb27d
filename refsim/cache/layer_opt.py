"""Optimal per-layer budget shares for per-layer LRU (``--policy layer-opt``).

Per-layer LRU (``layer``) gives every layer the same share ``budget // n_layer``. A layer's
partition is an independent LRU over that layer's own batches (a batch evicts only from its
layer), so its hits at share ``s`` are the exact LRU step curve of the layer's sub-trace
(:func:`refsim.cache.mrc.stack_distances` on it): ``h_l(s)`` = lookups of layer ``l`` with
byte stack distance ``<= s`` (distance 0, a key of the layer's previous batch, hits at every
share). ``h_l`` only changes at multiples of the layer's entry size ``e_l`` (every key of the
layer has that size), and stops growing at ``n_l`` = the layer's distinct keys. So the best
shares are a knapsack over step functions:

    maximise sum_l h_l(c_l * e_l)  subject to  sum_l c_l * e_l <= budget,  0 <= c_l <= n_l.

Method: dynamic programming over layers on the Pareto frontier of (bytes, hits). After layers
``0..l`` the frontier holds, for every achievable byte total, the best hits, with dominated
points (more bytes, no more hits) removed; adding layer ``l + 1`` combines every frontier point
with every count ``c``, drops totals above the budget, and prunes again. Optimality: any
allocation's restriction to layers ``0..l`` is a point of the full (unpruned) table; if it is
dominated, swapping it for the dominating point keeps the total within budget and the hits no
lower, so some optimal allocation is made of frontier points at every stage; the final answer is
the frontier's best point. The result is exact (integers throughout, no relaxation); ties
(equal hits) go to the fewest bytes, then to the allocation found first, and the bytes left over
are then handed out layer by layer (in layer order, up to each layer's distinct keys), which
never lowers a curve, so a budget that holds everything evicts nothing. The cost is
O(n_layer x |frontier| x max n_l); on the qwen trace (48 layers, two entry sizes) well under a
second per budget. Checked against brute force over every allocation on small traces
(tests/cache/test_layer_opt.py).

The objective is hits of all lookups (prefill included: the engine's ``cache_hit_pct``).
Fitted on the trace it then replays, the allocation is an oracle bound (it knows the future);
``fit=F`` fits it on the first ``F`` of the trace's events instead, and
:func:`refsim.cache.layer_opt.fit_then_replay` replays a held-out part.
"""

from __future__ import annotations

import numpy as np

from refsim.cache.batches import BatchTrace, layer_subtraces
from refsim.cache.mrc import stack_distances
from refsim.cache.policies import LayerLRU
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


def optimal_shares(curves: list[np.ndarray], expert_bytes, budget_bytes: int) -> tuple[list[int], int]:
    """The exact knapsack (module docstring): per-layer entry counts maximising total hits.

    Parameters
    ----------
    curves : list of (n_l + 1,) int64 ndarray
        :func:`layer_curves`.
    expert_bytes : (n_layer,) int array-like
        Entry size per layer, bytes.
    budget_bytes : int

    Returns
    -------
    counts : list of int
        Entries per layer (the share of layer ``l`` is ``counts[l] * expert_bytes[l]`` bytes).
    hits : int
        The optimal total hits (sum of the curves at the counts).
    """
    eb = [int(x) for x in expert_bytes]
    front_b = np.zeros(1, np.int64)
    front_h = np.zeros(1, np.int64)
    back: list[tuple[np.ndarray, np.ndarray]] = []
    for il, curve in enumerate(curves):
        c = np.arange(curve.size, dtype=np.int64)
        cb = front_b[:, None] + c[None, :] * eb[il]
        ch = front_h[:, None] + curve[None, :]
        parent = np.repeat(np.arange(front_b.size), c.size)
        choice = np.tile(c, front_b.size)
        cb, ch = cb.ravel(), ch.ravel()
        ok = cb <= budget_bytes
        cb, ch, parent, choice = cb[ok], ch[ok], parent[ok], choice[ok]
        order = np.lexsort((-ch, cb))                 # bytes ascending, hits descending
        cb, ch, parent, choice = cb[order], ch[order], parent[order], choice[order]
        best_before = np.maximum.accumulate(np.concatenate(([-1], ch[:-1])))
        keep = ch > best_before                       # strictly more hits than any cheaper point
        front_b, front_h = cb[keep], ch[keep]
        back.append((parent[keep], choice[keep]))
    j = int(np.argmax(front_h))                      # first maximum = fewest bytes
    best = int(front_h[j])
    counts = [0] * len(curves)
    for il in range(len(curves) - 1, -1, -1):
        parent, choice = back[il]
        counts[il] = int(choice[j])
        j = int(parent[j])
    left = budget_bytes - sum(c * e for c, e in zip(counts, eb))
    for il, curve in enumerate(curves):        # hand out what is left, layer by layer, up to
        more = min(curve.size - 1 - counts[il], left // eb[il])   # the layer's distinct keys:
        counts[il] += more                      # curves never decrease, so still optimal
        left -= more * eb[il]
    return counts, best


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


class LayerOpt(LayerLRU, name="layer-opt"):
    """Per-layer LRU with the hit-maximising shares of :func:`optimal_shares` instead of the
    uniform ``budget // n_layer``: fitted on the first ``fit`` of the replayed trace's events
    (default 1.0, the whole trace: an oracle bound). A hit promotes as in LRU."""

    params = {"fit": 1.0}

    def check_params(self):
        if not 0.0 < self.fit <= 1.0:
            raise ConfigError(f"--policy layer-opt: fit={self.fit} is not in (0, 1]")

    def shares(self, batches: BatchTrace, budget_bytes: int) -> list[int]:
        fitted = batches if self.fit == 1.0 else _fit_prefix(batches, self.fit)
        counts, _ = optimal_shares(layer_curves(fitted), batches.expert_bytes, budget_bytes)
        return [c * int(e) for c, e in zip(counts, batches.expert_bytes)]


def fit_then_replay(batches: BatchTrace, budget_bytes: int, split: float = 0.5):
    """Fit layer-opt's shares on the events before ``split`` (a fraction) and replay both
    uniform ``layer`` and those shares on the events after it.

    Returns
    -------
    (uniform, fitted) : tuple of PolicyResult
        Counters over the held-out part only (decode kinds as in the trace).
    """
    from refsim.cache.policy import replay_policy

    n_ev = batches.n_batch // batches.n_layer
    k = int(round(n_ev * split))
    head, tail = slice_events(batches, 0, k), slice_events(batches, k, n_ev)
    counts, _ = optimal_shares(layer_curves(head), batches.expert_bytes, budget_bytes)
    pol = FixedShares([c * int(e) for c, e in zip(counts, batches.expert_bytes)])
    return replay_policy(tail, "layer", budget_bytes), replay_policy(tail, pol, budget_bytes)


class FixedShares(LayerLRU):
    """Per-layer LRU with given per-layer shares in bytes (not registered; for studies)."""

    name = "layer-fixed"

    def __init__(self, shares_bytes):
        super().__init__()
        self.fixed = [int(x) for x in shares_bytes]

    def shares(self, batches, budget_bytes):
        return list(self.fixed)
