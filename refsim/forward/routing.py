"""Routing: where a MoE layer chooses its experts, and the streaming knobs' per-layer hook sequence.

The router (llama-graph.cpp ``build_moe_ffn`` with ``LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX`` and
``norm_w = true``; llama-cpp-notes.md §2.4), in our words::

    p = softmax(logits)                       # float32 exp of (x - max), float64 sum, float32 scale
    ids = top-k of p                          # highest first, equal probabilities: lower id first
    w = p[ids] / max(sum(p[ids]), 6.1e-5)     # float64 sum in slot order, rounded to float32

:func:`route_topk` is that rule; :func:`route_weights` gives a given selection the router's weights
(``--route-ahead``'s committed experts, engine-docs/route-ahead.md); :func:`commit_ahead` makes the
commit. :class:`Routing` records one decode's routing and runs the hooks a pass is handed
(:class:`refsim.streaming.hooks.LayerHooks`) after each MoE layer's router, in one fixed order
(:meth:`Routing.route_layer`); every arch's pass and every fused path calls it, so the sequence is
written once.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numba import njit

from refsim.errors import ConfigError
from refsim.events import NOT_ROUTED
from refsim.forward.layers import Numerics, QWeight, linear
from refsim.streaming.drop import gate_layer
from refsim.streaming.hooks import LayerHooks
from refsim.streaming.stale_gate import predict_layer

ROUTER_WEIGHT_FLOOR = np.float32(6.103515625e-5)
"""Clamp of the top-k weight sum before renormalising (llama-graph.cpp ``build_moe_ffn``)."""


@njit(cache=True)
def _softmax_row(row, probs):
    """``probs`` (n_expert,) float32 = softmax of one logits row (ggml's: max-shifted, float64
    sum, float32 scale)."""
    n_expert = row.size
    mx = np.float32(-np.inf)
    for e in range(n_expert):
        if row[e] > mx:
            mx = row[e]
    tot = 0.0
    for e in range(n_expert):
        v = np.float32(np.exp(np.float32(row[e] - mx)))
        probs[e] = v
        tot += np.float64(v)
    inv = np.float32(1.0 / tot)
    for e in range(n_expert):
        probs[e] = np.float32(probs[e] * inv)


@njit(cache=True)
def _norm_weights(probs, ids_row, w_row):
    """``w_row[s] = probs[ids_row[s]] / max(Σ, 6.103515625e-5)`` (float64 sum in slot order)."""
    wsum = 0.0
    for slot in range(ids_row.size):
        w_row[slot] = probs[ids_row[slot]]
        wsum += np.float64(probs[ids_row[slot]])
    ws = np.float32(wsum)
    if ws < np.float32(6.103515625e-5):
        ws = np.float32(6.103515625e-5)
    for slot in range(ids_row.size):
        w_row[slot] = np.float32(w_row[slot] / ws)


@njit(cache=True)
def _route_kernel(logits, k, ids, weights, margin):
    n_pos, n_expert = logits.shape
    probs = np.empty(n_expert, dtype=np.float32)
    taken = np.empty(n_expert, dtype=np.bool_)
    for p in range(n_pos):
        _softmax_row(logits[p], probs)
        for e in range(n_expert):
            taken[e] = False
        for slot in range(k):
            best = -1
            for e in range(n_expert):
                if not taken[e] and (best < 0 or probs[e] > probs[best]):
                    best = e
            taken[best] = True
            ids[p, slot] = best
        _norm_weights(probs, ids[p], weights[p])
        # selection margin: probability gap between the last chosen and the first unchosen expert
        nxt = np.float32(-1.0)
        for e in range(n_expert):
            if not taken[e] and probs[e] > nxt:
                nxt = probs[e]
        margin[p] = probs[ids[p, k - 1]] - nxt if nxt >= 0 else np.float32(np.inf)


@njit(cache=True)
def _gather_kernel(logits, ids, weights):
    probs = np.empty(logits.shape[1], dtype=np.float32)
    for p in range(logits.shape[0]):
        _softmax_row(logits[p], probs)
        _norm_weights(probs, ids[p], weights[p])


def route_weights(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The router's renormalised weights for a given selection: softmax of ``logits`` (n, n_expert)
    gathered at ``ids`` (n, k) and normalised as :func:`route_topk` does (its weights when ``ids``
    is its own selection). ``--route-ahead`` gives the committed experts their true weights this
    way (engine-docs/route-ahead.md). Returns (n, k) float32."""
    ids = np.ascontiguousarray(ids, dtype=np.int16)
    w = np.empty(ids.shape, dtype=np.float32)
    _gather_kernel(np.ascontiguousarray(logits, dtype=np.float32), ids, w)
    return w


def route_topk(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Router: softmax over all experts, top-k, renormalise.

    Parameters
    ----------
    logits : (n_pos, n_expert) float32 ndarray
        Router logits (``ffn_gate_inp @ x``).
    k : int
        Experts used per token (``{arch}.expert_used_count``).

    Returns
    -------
    ids : (n_pos, k) int16 ndarray
        Expert ids, highest probability first (equal probabilities: lower id first).
    weights : (n_pos, k) float32 ndarray
        ``p[ids] / max(sum(p[ids]), 6.103515625e-5)``.
    select_margin : (n_pos,) float32 ndarray
        Probability of the k-th chosen expert minus the best unchosen one (``inf`` when
        ``k == n_expert``): how close routing came to a different set.

    Raises
    ------
    ConfigError
        If ``k`` is not in ``1..n_expert``.

    Notes
    -----
    Source: llama-graph.cpp ``build_moe_ffn`` with ``LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX`` and
    ``norm_w = true``, hard-coded for qwen3moe/qwen35moe regardless of HF ``norm_topk_prob``
    (llama-cpp-notes.md §2.4). ggml's CPU argsort is not stable; refsim breaks exact ties by
    the lower id.
    """
    n_pos, n_expert = logits.shape
    if not 1 <= k <= n_expert:
        raise ConfigError(f"router: k={k} must be in 1..n_expert={n_expert}")
    ids = np.empty((n_pos, k), dtype=np.int16)
    w = np.empty((n_pos, k), dtype=np.float32)
    margin = np.empty(n_pos, dtype=np.float32)
    _route_kernel(np.ascontiguousarray(logits, dtype=np.float32), k, ids, w, margin)
    return ids, w, margin


def commit_ahead(ahead, il: int, ids: np.ndarray, w: np.ndarray, logits_e: np.ndarray, pred_routes: np.ndarray,
                 row: int) -> tuple[np.ndarray, np.ndarray]:
    """``--route-ahead``: where the policy commits, replace layer il's selection (one position) by the
    ranking made at layer il-N (``pred_routes[row, il]``), with its true weights from layer il's own
    logits; count the routing (engine-docs/route-ahead.md; :mod:`refsim.streaming.route_ahead`).

    Parameters
    ----------
    ahead : refsim.streaming.route_ahead.RouteAhead or None
        None: the router's selection is returned unchanged.
    il : int
    ids : (n, k) int16 ndarray; w : (n, k) float32 ndarray
        The router's selection and weights of the layer's routed rows.
    logits_e : (n, n_expert) float32 ndarray
        The layer's router logits.
    pred_routes : (n_pos, n_layer, k) int16 ndarray
        The rankings made so far in this graph.
    row : int
        The event position of the graph's last routed row.

    Returns
    -------
    ids, w : (n, k) ndarrays
        The committed selection with :func:`route_weights`, or the router's.
    """
    if ahead is None:
        return ids, w
    committed = None
    if ahead.commits(il) and ids.shape[0] == 1 and pred_routes[row, il, 0] >= 0:
        committed = pred_routes[row:row + 1, il].copy()
    ahead.record(ids, committed)
    if committed is None:
        return ids, w
    return committed, route_weights(logits_e, committed)


class Routing:
    """One decode's routing as the pass records it, and the hooks it calls after each MoE layer's router.

    Parameters
    ----------
    n_pos, n_layer, k : int
        Fed positions, MoE layers, experts used.
    router : callable
        ``router(j) -> QWeight``: layer j's router (``ffn_gate_inp``), for the rankings the probe and the
        stale gate make of a layer ahead.
    numerics : Numerics
    hooks : LayerHooks, optional
        What the pass was handed (None: no hook, the routing is only recorded).

    Attributes
    ----------
    routes : (n_pos, n_layer, k) int16 ndarray
        The routing the engine's trace records (the committed one with ``--route-ahead``);
        ``NOT_ROUTED`` where a position was not routed.
    weights : (n_pos, n_layer, k) float32 ndarray
        Their renormalised weights (NaN where not routed).
    margin : (n_pos, n_layer) float32 ndarray
        :func:`route_topk`'s selection margin (NaN where not routed).
    dropped : (n_pos, n_layer, k) bool ndarray
        Slots the drop seam (or the ``cap`` verify routing) dropped.
    pred_routes, pred_weights : (n_pos, n_layer, k) ndarrays
        The stale-gate rankings made (-1 / NaN elsewhere).
    """

    def __init__(self, n_pos: int, n_layer: int, k: int, router: Callable[[int], QWeight], numerics: Numerics,
                 hooks: LayerHooks | None = None):
        self.k, self.router, self.numerics = k, router, numerics
        self.hooks = hooks
        self.gate = None if hooks is None else hooks.gate
        self.ranker = None if hooks is None else hooks.ranker
        self.routes = np.full((n_pos, n_layer, k), NOT_ROUTED, dtype=np.int16)
        self.weights = np.full((n_pos, n_layer, k), np.nan, dtype=np.float32)
        self.margin = np.full((n_pos, n_layer), np.nan, dtype=np.float32)
        self.dropped = np.zeros((n_pos, n_layer, k), dtype=bool)
        self.pred_routes = np.full((n_pos, n_layer, k), NOT_ROUTED, dtype=np.int16)
        self.pred_weights = np.full((n_pos, n_layer, k), np.nan, dtype=np.float32)
        self.verify_dropped = False

    def rank(self, j: int, x: np.ndarray) -> np.ndarray:
        """Layer j's router on gate input x (n, n_embd): its top-k ids (n, k) (the probe's ranking)."""
        return route_topk(linear(self.router(j), x, self.numerics), self.k)[0]

    def stale(self, j: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Layer j's router on gate input x (1, n_embd): ranked ids (1, k) and the logits (the stale gate's)."""
        sc = linear(self.router(j), x, self.numerics)
        return route_topk(sc, self.k)[0], sc

    def route_layer(self, il: int, rows: np.ndarray, f: np.ndarray, logits_e: np.ndarray, ids: np.ndarray,
                    w: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Layer il has routed ``rows``: commit ahead, rank ahead, record, probe, drop, in that order.

        1. ``--route-ahead``: :func:`commit_ahead` may replace the selection (one routed row).
        2. ``--route-ahead`` / ``--predict-prefetch``: the stale gate ranks layer il+N's router on the
           last row's gate input (:func:`refsim.streaming.stale_gate.predict_layer`) and tells the
           drop seam at once.
        2b. Lossy verify routing (``hooks.verify``, a verify decode only): ``consensus`` moves slots (the
           moved routing is recorded), ``cap`` drops slots (recorded in ``dropped``; the experts run the
           survivors, :func:`refsim.streaming.drop.apply_drop`); :mod:`refsim.streaming.verify_route`.
        3. The routing is recorded (``routes``, ``weights``, ``margin``).
        4. ``--predict-log``: the probe scores the last row's routing.
        5. ``--drop-cold-experts``: the drop seam applies the rule
           (:func:`refsim.streaming.drop.gate_layer`).

        Raises
        ------
        ConfigError
            Verify routing and the drop seam on the same graph.

        Parameters
        ----------
        il : int
        rows : (n,) int64 ndarray
            Event positions (indices into the fed tokens) of the routed rows, increasing.
        f : (n, n_embd) float32 ndarray
            Their gate input (the FFN-norm output).
        logits_e : (n, n_expert) float32 ndarray
            The router's logits.
        ids, w, m : (n, k) int16, (n, k) float32, (n,) float32 ndarrays
            :func:`route_topk`'s selection, weights and margin.

        Returns
        -------
        ids, w : (n, k) ndarrays
            What the layer's experts run: after the commit and the drops.
        """
        hooks = self.hooks
        row = int(rows[-1])
        if hooks is not None:
            ids, w = commit_ahead(hooks.ahead, il, ids, w, logits_e, self.pred_routes, row)
            if self.ranker is not None:
                predict_layer(self.ranker, il, f[-1:], self.stale, row, self.pred_routes, self.pred_weights,
                              self.gate)
        at = slice(None) if rows.size == self.margin.shape[0] else rows   # every row: a slice (a cheaper write)
        run = None
        if hooks is not None and hooks.verify is not None and hooks.verify.applies(hooks.phase, rows.size):
            if self.gate is not None:
                raise ConfigError("lossy verify routing with --drop-cold-experts: not modelled (the drop "
                                  "seam and the verify rule would both decide this layer's reads)")
            ids, run_ids, run_w, vdrop = hooks.verify.layer(ids, w)
            self.dropped[rows, il] = vdrop
            self.verify_dropped |= bool(vdrop.any())
            run = run_ids, run_w
        self.routes[at, il] = ids
        self.weights[at, il] = w
        self.margin[at, il] = m
        if hooks is not None:
            if hooks.probe is not None:
                hooks.probe.layer(il, ids[-1], f[-1:], self.rank)
            if self.gate is not None:
                ids, w, self.dropped[rows, il] = gate_layer(self.gate, il, rows, ids, w)
        return (ids, w) if run is None else run

    def result_fields(self) -> dict:
        """The :class:`refsim.forward.result.DecodeResult` fields of the routing: ``dropped`` only with a
        drop seam, the rankings only with a ranker."""
        return dict(routes=self.routes, weights=self.weights, route_margin=self.margin,
                    dropped=self.dropped if self.gate is not None or self.verify_dropped else None,
                    pred_routes=self.pred_routes if self.ranker is not None else None,
                    pred_weights=self.pred_weights if self.ranker is not None else None)


__all__ = ["ROUTER_WEIGHT_FLOOR", "route_topk", "route_weights", "commit_ahead", "Routing"]
