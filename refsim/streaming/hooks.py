"""The one object a forward pass is handed for the streaming knobs: :class:`LayerHooks`.

A reference pass asks one narrow question per MoE layer through an object it is handed
(docs/architecture.md, "The drop seam"). That object is a :class:`LayerHooks`: the drop seam
(``gate``, per graph), the ``--predict-log`` probe (``probe``), ``--route-ahead N``
(``ahead``), ``--predict-prefetch`` (``predictor``) and the lossy verify routing (``verify``,
:mod:`refsim.streaming.verify_route`; refsim's experiment, not an engine flag). Each is optional; the pass calls the ones
it holds in one fixed order after each layer's router (:func:`refsim.forward.routing.route_layer`).

A target says whether its pass takes hooks by its ``hooks`` attribute
(:class:`refsim.spec.target.Target`): a :class:`LayerHooks` (the qwen3moe and qwen35moe passes,
``exact``/``ggml`` numerics; the scripted targets of :mod:`refsim.testing.targets`) or ``None``
(no per-layer seam: gemma3, the ``llamacpp`` numerics). The loop sets ``hooks.gate`` for a graph
and clears it after (:class:`refsim.spec.loop.SpeculativeLoop`); a run sets the other three once
(:meth:`LayerHooks.arm`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from refsim.streaming.knobs import StreamKnobs
from refsim.streaming.predict import PredictProbe
from refsim.streaming.route_ahead import RouteAhead
from refsim.streaming.stale_gate import PredictPrefetch
from refsim.streaming.verify_route import VerifyRouter


@dataclass
class LayerHooks:
    """What a forward pass calls per MoE layer (every field optional).

    Attributes
    ----------
    gate : LayerFeed-like, optional
        The drop seam of the current graph (:class:`refsim.cache.expert_cache.LayerFeed`, or any
        object with ``drop_threshold``, ``resident``, ``drop_renorm``, ``routed`` and
        ``predicted``; :func:`refsim.streaming.drop.gate_layer`). Set by the loop per graph when
        ``--drop-cold-experts`` is armed; the pass applies the rule to the routing its experts run.
    probe : PredictProbe, optional
        ``--predict-log``: handed each layer's routing of the graph's last routed position.
    ahead : RouteAhead, optional
        ``--route-ahead N``: commits the ranking made N layers early.
    predictor : PredictPrefetch, optional
        ``--predict-prefetch``: the stale-gate ranking of layer il+2 made at layer il.
    verify : VerifyRouter, optional
        Lossy verify routing (``cap:U`` / ``consensus:T``): applied to the rows of a verify decode
        (a decode graph of more than one position, :meth:`VerifyRouter.applies`), never to a
        plain decode or a prefill. Not combinable with the drop seam (the pass refuses the pair).
    phase : int
        The current graph's phase (0 prefill, 1 decode), set by :meth:`begin_graph`.

    Notes
    -----
    ``ahead`` and ``predictor`` are never both set (the engine rejects the pair;
    :class:`refsim.streaming.knobs.StreamKnobs`); whichever is set is the :attr:`ranker`.
    """

    gate: Any = None
    probe: PredictProbe | None = None
    ahead: RouteAhead | None = None
    predictor: PredictPrefetch | None = None
    verify: VerifyRouter | None = None
    phase: int = 1

    def arm(self, knobs: StreamKnobs, n_layer: int, predict_log: bool = False) -> None:
        """Set one run's hooks from its knobs: ``ahead`` with ``--route-ahead N``, ``predictor`` with
        ``--predict-prefetch``, a probe over ``n_layer`` layers with ``--predict-log``; each None
        otherwise. The gate is left alone (the loop sets it per graph)."""
        self.probe = PredictProbe(n_layer) if predict_log else None
        self.ahead = RouteAhead(knobs.route_ahead) if knobs.route_ahead else None
        self.predictor = PredictPrefetch() if knobs.predict_prefetch else None

    @property
    def ranker(self) -> RouteAhead | PredictPrefetch | None:
        """The stale-gate ranking's owner (``ahead``, else ``predictor``), or None."""
        return self.ahead if self.ahead is not None else self.predictor

    @property
    def idle(self) -> bool:
        """No hook is set: the pass may take a path without the per-layer seam. ``verify`` does not
        count: it never changes a one-position decode, the only graph such a path serves."""
        return self.gate is None and self.probe is None and self.ahead is None and self.predictor is None

    def begin_graph(self, phase: int) -> None:
        """A graph starts (0 prefill, 1 decode): remember the phase; tell the probe, route-ahead and
        the predictor."""
        self.phase = phase
        for hook in (self.probe, self.ahead, self.predictor):
            if hook is not None:
                hook.begin_graph(phase)
