"""``DecodeResult``: what one call of an arch's ``decode`` returns (shared by every arch)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DecodeResult:
    """Logits and routes of one decode.

    Parameters
    ----------
    logits : (n_out, n_vocab) float32 ndarray
        One row per output position (``out_rows``; all positions by default).
    out_rows : (n_out,) int64 ndarray
        Index (into the fed positions) of each logits row.
    routes : (n_pos, n_layer, k) int16 ndarray
        Experts routed per fed position and layer, slot 0 = top weight; ``-1``
        (``refsim.events.NOT_ROUTED``) where the graph did not route (the last layer of a
        position that produces no logits; llama.cpp's ``inp_out_ids`` cut).
    weights : (n_pos, n_layer, k) float32 ndarray
        Renormalised routing weights (NaN where not routed).
    margin : (n_out,) float32 ndarray
        Top-1 minus top-2 logit of each logits row.
    route_margin : (n_pos, n_layer) float32 ndarray
        Router probability of the k-th chosen expert minus the best unchosen one (NaN where
        not routed): how near routing came to another expert set.
    dropped : (n_pos, n_layer, k) bool ndarray, optional
        Slots ``--drop-cold-experts`` dropped (through the drop seam); ``routes`` and
        ``weights`` stay the router's. None without the seam.
    pred_routes, pred_weights : (n_pos, n_layer, k) ndarrays, optional
        The stale-gate ranking per (position, layer) where the pass made one (``--route-ahead``,
        ``--predict-prefetch``; :mod:`refsim.streaming.stale_gate`): int16 ids (-1 elsewhere) and float32
        softmax weights (NaN elsewhere). None when no predictor ran.
    """

    logits: np.ndarray
    out_rows: np.ndarray
    routes: np.ndarray
    weights: np.ndarray
    margin: np.ndarray
    route_margin: np.ndarray
    dropped: np.ndarray | None = None
    pred_routes: np.ndarray | None = None
    pred_weights: np.ndarray | None = None

    @property
    def argmax(self) -> np.ndarray:
        """(n_out,) int64: greedy next token per logits row (lowest id among equal maxima)."""
        return np.argmax(self.logits, axis=1).astype(np.int64)
