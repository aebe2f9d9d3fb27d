"""The Target protocol: what the speculative loop needs from a model.

A target is anything that decodes token ids at absolute positions into next-token predictions
(one per row) and, when it has routed experts, the expert ids each position routed. The
reference forward pass (:class:`refsim.spec.forward_target.ForwardTarget`) and the scripted
targets of :mod:`refsim.testing.targets` implement it. The loop never touches weights and never counts
bytes; it turns a target's routes into :class:`refsim.events.DecodeEvent` for the cache.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from refsim.streaming.hooks import LayerHooks


@dataclass(frozen=True)
class TargetOutput:
    """What one prefill or decode returns.

    Parameters
    ----------
    logits : (n_rows, n_vocab) float32 ndarray, optional
        Logits per output row. Give either ``logits`` or ``ids``.
    ids : (n_rows,) int32 ndarray, optional
        The argmax of each row, when the target computes it itself (scripted targets).
    routes : (n_pos, n_layer, k) int16 ndarray, optional
        Expert ids routed per fed position, slot 0 = top weight, -1 = not routed
        (``refsim.events.NOT_ROUTED``). None for a target without routed experts.
    weights : (n_pos, n_layer, k) float32 ndarray, optional
        Final routing weights (NaN where unknown), the router's.
    dropped : (n_pos, n_layer, k) bool ndarray, optional
        Slots ``--drop-cold-experts`` dropped in the pass (a target with a drop seam).
    pred_routes, pred_weights : (n_pos, n_layer, k) ndarrays, optional
        The stale-gate ranking the pass made (``--route-ahead``, ``--predict-prefetch``;
        :class:`refsim.events.DecodeEvent`).

    Raises
    ------
    ValueError
        If neither or both of ``logits`` and ``ids`` are given, or shapes disagree.

    Notes
    -----
    Rows: a decode of ``n`` positions returns ``n`` rows (row ``i`` = the prediction after
    position ``i``); a prefill returns one row, for the last prompt position (the engine asks
    logits on the last prompt token only; bmoe-engine.md §2 "Prefill").
    """

    logits: np.ndarray | None = None
    ids: np.ndarray | None = None
    routes: np.ndarray | None = None
    weights: np.ndarray | None = None
    dropped: np.ndarray | None = None
    pred_routes: np.ndarray | None = None
    pred_weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        if (self.logits is None) == (self.ids is None):
            raise ValueError("TargetOutput needs exactly one of logits (n, n_vocab) or ids (n,)")
        if self.logits is not None and np.ndim(self.logits) != 2:
            raise ValueError(f"logits must be (n_rows, n_vocab), got {np.shape(self.logits)}")
        if self.ids is not None and np.ndim(self.ids) != 1:
            raise ValueError(f"ids must be (n_rows,), got {np.shape(self.ids)}")
        if self.routes is not None and np.ndim(self.routes) != 3:
            raise ValueError(f"routes must be (n_pos, n_layer, k), got {np.shape(self.routes)}")
        if self.weights is not None and (self.routes is None
                                         or np.shape(self.weights) != np.shape(self.routes)):
            raise ValueError("weights need routes of the same shape")

    @property
    def n_rows(self) -> int:
        """Output rows (predictions)."""
        return int((self.logits if self.logits is not None else self.ids).shape[0])

    def argmax(self) -> np.ndarray:
        """(n_rows,) int64: greedy next token per row (lowest id among equal maxima)."""
        if self.ids is not None:
            return np.asarray(self.ids, dtype=np.int64)
        return np.argmax(self.logits, axis=1).astype(np.int64)


@runtime_checkable
class Target(Protocol):
    """A model the speculative loop can drive (greedy, one sequence).

    Attributes
    ----------
    n_layer : int
        Streamed layer span of ``routes`` (0 for a target without routed experts).
    n_expert : int
        Routed experts per layer.
    n_expert_used : int
        ``k``, routing slots per position.
    eos_ids : collection of int
        End-of-generation token ids (the loop stops on them and never emits them).
    hooks : refsim.streaming.hooks.LayerHooks or None
        What the target's pass is handed per MoE layer (the streaming knobs: the drop seam, the
        ``--predict-log`` probe, ``--route-ahead``, ``--predict-prefetch``), or None when its pass
        has no such seam. The loop sets ``hooks.gate`` before a graph when ``--drop-cold-experts``
        is armed and clears it after (a target with ``hooks = None`` is refused then).

    Methods
    -------
    prefill(tokens) -> TargetOutput
        Decode the prompt ``tokens (n_prompt,) int32`` at positions ``0..n_prompt-1`` into an
        empty KV; one output row (the last position); routes for every position, with the last
        MoE layer routing only the final position as llama.cpp does (bmoe-engine.md §3.2 (a)).
    decode(tokens, positions) -> TargetOutput
        Decode ``tokens (n,) int32`` at ``positions (n,) int64`` (contiguous, starting at the
        KV length); one row per position; routes ``(n, n_layer, k)`` for every position.
    trim(n_keep) -> None
        KV rollback: keep positions ``< n_keep`` and drop the rest (recurrent state restored
        to that point). Called after a verify decode that rejected part of its draft.
    """

    n_layer: int
    n_expert: int
    n_expert_used: int
    eos_ids: Collection[int]
    hooks: LayerHooks | None

    def prefill(self, tokens: np.ndarray) -> TargetOutput: ...

    def decode(self, tokens: np.ndarray, positions: np.ndarray) -> TargetOutput: ...

    def trim(self, n_keep: int) -> None: ...
