"""Predicted routes of the draft positions and the bytes a width would add.

The predictor here is the *previous occurrence* of each token: the routes the target gave that
token id the last time it decoded it (prefill rows included). An n-gram draft copies tokens from
the corpus, so every one of its tokens has such a row; an MTP token may not (its positions are
then unknown, -1). It is the issue's "previous token" predictor taken per token id rather than per
position, which is what a draft that repeats earlier text makes available (docs/spec-policies.md).
"""

from __future__ import annotations

import numpy as np


class RouteMemory:
    """Token id -> the routes of its last target decode row.

    Parameters
    ----------
    n_layer, k : int
        Layers and experts used per token (``n_expert_used``).
    """

    def __init__(self, n_layer: int, k: int):
        self.n_layer, self.k = int(n_layer), int(k)
        self._last: dict[int, np.ndarray] = {}

    def record(self, tokens: np.ndarray, routes: np.ndarray) -> None:
        """Remember each row of a target event (``routes`` (n_pos, n_layer, k) int16); a later
        row of the same token wins."""
        for t, r in zip(np.asarray(tokens).tolist(), routes):
            self._last[int(t)] = r

    def predict(self, tokens) -> np.ndarray:
        """(len(tokens), n_layer, k) int16: each token's remembered routes, -1 if never seen."""
        out = np.full((len(tokens), self.n_layer, self.k), -1, np.int16)
        for i, t in enumerate(np.asarray(tokens).tolist()):
            r = self._last.get(int(t))
            if r is not None:
                out[i] = r
        return out


def extra_bytes(pred: np.ndarray, resident: np.ndarray, expert_bytes: np.ndarray,
                unknown_bytes: float) -> np.ndarray:
    """Predicted flash bytes each width adds over a plain decode.

    Parameters
    ----------
    pred : (n + 1, n_layer, k) int16 ndarray
        Predicted routes of ``tok, d1..dn`` (-1 = unknown).
    resident : (n_layer, n_expert) bool ndarray
        Residency now.
    expert_bytes : (n_layer,) int64 ndarray
        Bytes of one expert per layer.
    unknown_bytes : float
        Bytes charged for each draft position whose routes are unknown (all -1).

    Returns
    -------
    (n + 1,) float64 ndarray
        ``out[w]``: bytes of the non-resident experts in the union of positions ``0..w`` that
        are not in position 0's own set (so ``out[0] == 0``), plus ``unknown_bytes`` per
        unknown draft position among ``1..w``. Non-decreasing in ``w``.
    """
    n1, n_layer, _ = pred.shape
    n_expert = resident.shape[1]
    seen = np.zeros((n_layer, n_expert), bool)
    layers = np.arange(n_layer)[:, None]
    p0 = pred[0].astype(np.int64)
    seen[np.broadcast_to(layers, p0.shape)[p0 >= 0], p0[p0 >= 0]] = True
    out = np.zeros(n1, np.float64)
    for w in range(1, n1):
        p = pred[w].astype(np.int64)
        if (p < 0).all():
            out[w] = out[w - 1] + unknown_bytes
            continue
        ok = p >= 0
        li = np.broadcast_to(layers, p.shape)[ok]
        ei = p[ok]
        new = ~seen[li, ei] & ~resident[li, ei]
        key = np.unique(li[new] * n_expert + ei[new])
        out[w] = out[w - 1] + float(expert_bytes[key // n_expert].sum())
        seen[li, ei] = True
    return out
