"""``--route-ahead N`` in the live forward pass (engine-docs/route-ahead.md; bmoe-engine.md §3.5).

Lossy by design: in a decode graph, layer L's expert selection is *replaced* by the ranking of
layer L's own router on the gate input of layer L−N (the same position, the same graph); the
committed experts get their true renormalised weights from layer L's own logits
(:func:`refsim.forward.routing.route_weights`). Pass-through (the router's own choice) applies to
layers 0..N−1, prefill, and the run's first decode graph. The ranking for layer L is made at layer L−N
(:func:`refsim.streaming.stale_gate.predict_layer`, as the engine's worker job is submitted at L−N's topk)
and handed to the cache at once, which reads layer L's committed experts early, right after
layer L−N's load (:mod:`refsim.cache.lru`); with ``--drop-cold-experts`` only those whose
stale-ranking weight passes the drop-aware filter (rank 0, or weight >= F/k).

:class:`RouteAhead` is what the pass is handed as ``LayerHooks.ahead``
(:mod:`refsim.streaming.hooks`); it decides per graph whether to commit and keeps the engine's
``moe-route-ahead:`` counters. It never counts bytes. The commit itself is
:func:`refsim.forward.routing.commit_ahead`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from refsim.streaming.stale_gate import DecodeGraphs


@dataclass
class RouteAhead:
    """Per-run state and counters of ``--route-ahead n``.

    Attributes
    ----------
    n : int
        Layers early (1..8).
    committed, passthrough : int
        Decode routings (one per position and layer) replaced / left to the router.
    agree_slots, slots : int
        Over committed routings: slots of the committed selection the router also chose, and
        all slots (the ``agreed with the router on <pct>% of slots`` figure).
    """

    n: int
    committed: int = 0
    passthrough: int = 0
    agree_slots: int = 0
    slots: int = 0
    graphs: DecodeGraphs = field(default_factory=DecodeGraphs)

    def begin_graph(self, phase: int) -> None:
        """A graph starts (0 prefill, 1 decode): commits only in decode graphs after the first."""
        self.graphs.begin(phase)

    @property
    def active(self) -> bool:
        """The current graph ranks ahead and commits (a decode graph after the run's first)."""
        return self.graphs.active

    @property
    def horizon(self) -> int:
        """Layers ahead the ranking targets (N)."""
        return self.n

    def commits(self, il: int) -> bool:
        """Whether layer ``il`` of the current graph takes the committed selection."""
        return self.active and il >= self.n

    def record(self, router_ids: np.ndarray, committed_ids: np.ndarray | None) -> None:
        """Count one layer's decode routings (rows of ``router_ids`` (n, k)); ``committed_ids``
        None = passed through. Prefill graphs are not counted."""
        if self.graphs.phase != 1:
            return
        n = router_ids.shape[0]
        if committed_ids is None:
            self.passthrough += n
            return
        self.committed += n
        self.slots += committed_ids.size
        self.agree_slots += sum(len(set(a.tolist()) & set(b.tolist()))
                                for a, b in zip(router_ids, committed_ids))

    @property
    def agree_pct(self) -> float:
        """100 × agreeing slots / committed slots (0 when nothing was committed)."""
        return 100.0 * self.agree_slots / self.slots if self.slots else 0.0

    def line(self) -> str:
        """The engine's report line (route-ahead.md, "Reading a run")."""
        return (f"moe-route-ahead: {self.n} layers early — {self.committed} routings committed, "
                f"{self.passthrough} passed through; committed selection agreed with the router "
                f"on {self.agree_pct:.1f}% of slots")
