"""The stale gate in the live forward pass: layer t's router applied to the gate input of an
earlier layer of the same graph, ranked, for ``--predict-prefetch`` (layer t-2) and
``--route-ahead N`` (layer t-N). Sources: engine-docs/expert-prediction.md ("Acting on it"),
route-ahead.md; router_hook.cpp ``predict_at_topk``, ``route_ahead_submit``,
``predict_worker_main`` and ``build_spec_lists``.

In :mod:`refsim.streaming` (below both ``forward`` and ``cache``), like :mod:`refsim.streaming.drop`:
the forward pass makes the prediction and the cache acts on it; neither imports the other. The prediction is
recorded in the event (``DecodeEvent.pred_routes`` / ``pred_weights``) and in a route trace (the
``pred_expert`` / ``pred_weight`` columns), so a replay acts on exactly what the run predicted.

Rules (our words):

- **When.** Decode graphs (phase 1) after the run's first: the engine stashes a layer's router
  matrix from a decode graph's ask pass, so the first decode graph has no matrix of a layer
  ahead and predicts nothing. Prefill never predicts. The row is the batch's last position.
- **What.** At layer il, the ranking of layer il+h's router on layer il's gate input (the
  FFN-norm output), top-k (k = the routing's ``n_expert_used``, ties to the lower id), and its
  *predicted weights*: the softmax over the top-k scores in float32, as the engine's worker
  computes them (``w_s = exp(score_s - score_0)``, summed in rank order, ``w_s / sum``).
- h = 2 for ``--predict-prefetch`` (the worker's L+2 horizon: the job is submitted at layer
  il's topk and collected after layer il+1's load), h = N for ``--route-ahead N``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def stale_weights(scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The softmax over a ranking's top-k scores, as router_hook.cpp's worker computes it.

    Parameters
    ----------
    scores : (n, n_expert) float32 ndarray
        Router logits (``ffn_gate_inp @ x``) per row.
    ids : (n, k) int ndarray
        The ranking, highest score first.

    Returns
    -------
    (n, k) float32 ndarray
        ``exp(s_j - max_j s) / sum_j exp(s_j - max_j s)`` over the k ranked scores, float32,
        summed in rank order.
    """
    s = np.take_along_axis(np.asarray(scores, np.float32), np.asarray(ids, np.int64), axis=1)
    mx = s.max(axis=1, keepdims=True)
    w = np.exp((s - mx).astype(np.float32)).astype(np.float32)
    total = np.zeros((w.shape[0], 1), np.float32)
    for j in range(w.shape[1]):                       # float32, in rank order
        total[:, 0] = (total[:, 0] + w[:, j]).astype(np.float32)
    return (w / total).astype(np.float32)


@dataclass
class DecodeGraphs:
    """When the stale gate acts (the rule "When" above), shared by ``--predict-prefetch`` and
    ``--route-ahead``: in decode graphs (phase 1) after the run's first.

    Attributes
    ----------
    phase : int
        The current graph's phase (0 prefill, 1 decode).
    decodes : int
        Decode graphs begun so far.
    """

    phase: int = 0
    decodes: int = 0

    def begin(self, phase: int) -> None:
        """A graph starts (0 prefill, 1 decode)."""
        self.phase = phase
        if phase == 1:
            self.decodes += 1

    @property
    def active(self) -> bool:
        """A decode graph after the run's first."""
        return self.phase == 1 and self.decodes > 1


@dataclass
class PredictPrefetch:
    """Per-run state of ``--predict-prefetch`` in the forward pass: decides per graph whether
    the stale gate predicts (decode graphs after the first) and names the horizon (2). Counts
    nothing; the cache counts the bytes (:mod:`refsim.cache.lru`).

    Attributes
    ----------
    horizon : int
        Layers ahead the prediction targets (2: expert-prediction.md's worker at L+2).
    predictions : int
        (layer, graph) predictions made so far.
    """

    horizon: int = 2
    predictions: int = 0
    graphs: DecodeGraphs = field(default_factory=DecodeGraphs)

    def begin_graph(self, phase: int) -> None:
        """A graph starts (0 prefill, 1 decode)."""
        self.graphs.begin(phase)

    @property
    def active(self) -> bool:
        """The current graph predicts (a decode graph after the run's first)."""
        return self.graphs.active


def predict_layer(pred, il: int, x: np.ndarray, stale, row: int, pred_routes: np.ndarray,
                  pred_weights: np.ndarray, gate=None) -> None:
    """At layer ``il``: rank layer ``il + pred.horizon``'s router on ``x`` and record it.

    Parameters
    ----------
    pred : PredictPrefetch or refsim.streaming.route_ahead.RouteAhead
        Has ``horizon`` and ``active``.
    x : (1, n_embd) float32 ndarray
        Layer il's gate input at the batch's last position.
    stale : callable
        ``stale(t, x) -> (ids (1, k) int16, scores (1, n_expert) float32)``: layer t's router
        ranking and logits on x.
    row : int
        The event position (index into the fed tokens) of ``x``.
    pred_routes, pred_weights : (n_pos, n_layer, k) ndarrays
        Written at ``[row, t]``.
    gate : LayerFeed-like, optional
        Told at once (``gate.predicted``), so the cache can act before layer t is routed.
    """
    t = il + pred.horizon
    if not pred.active or t >= pred_routes.shape[1]:
        return
    ids, scores = stale(t, x)
    w = stale_weights(scores, ids)
    pred_routes[row, t] = ids[0]
    pred_weights[row, t] = w[0]
    if hasattr(pred, "predictions"):
        pred.predictions += 1
    if gate is not None:
        gate.predicted(t, [row], ids, w)
