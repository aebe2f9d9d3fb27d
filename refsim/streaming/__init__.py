"""The engine's streaming knobs: their flags, their rules, and the one object a forward pass is handed.

The room sits below both :mod:`refsim.forward` and :mod:`refsim.cache`: the forward pass makes a
decision live (a drop, a ranking, a committed routing) and the cache counts what it costs, so the
rule both of them call lives here and neither imports the other. It imports nothing of refsim
but :mod:`refsim.errors`, :mod:`refsim.jit` and :mod:`refsim.lazy`.

===================  =====================  ==============  ============================  ===============================
knob                 flag                   rule module     cache side (cache/lru.py)     forward side (LayerHooks field)
===================  =====================  ==============  ============================  ===============================
drop cold experts    --drop-cold-experts F  drop.py         drop_row: no lookup, no read  gate -> gate_layer
temporal prefetch    --prefetch K           (cache only)    queue ids of l+1..l+K         none
stale-gate prefetch  --predict-prefetch     stale_gate.py   retain / speculate at t-2     predictor -> predict_layer
route-ahead          --route-ahead N        route_ahead.py  early reads after L-N         ahead -> commit_ahead
predict log          --predict-log          predict.py      none (scores only)            probe -> probe.layer
verify routing       (refsim's, lossy)      verify_route.py dropped/moved slots recorded  verify -> VerifyRouter.layer
===================  =====================  ==============  ============================  ===============================

In more words (the forward side is :func:`refsim.forward.routing.route_layer`, the per-layer hook
sequence written once for every pass):

- **drop cold experts**: ``--drop-cold-experts F``, ``--drop-no-renorm``, ``--drop-in-prefill``
  -> :mod:`~.drop` (``drop_row``, ``apply_drop``, ``gate_layer``) -> a dropped slot is no lookup
  and no read, live and in a replay (``drop_row`` in the LRU kernel) -> ``LayerHooks.gate``:
  ``gate_layer`` applies the rule to the routing the experts run.
- **temporal prefetch**: ``--prefetch K`` -> the cache's own rule -> queues the previous graph's
  ids at layers l+1..l+K -> none.
- **stale-gate prefetch**: ``--predict-prefetch``, ``--predict-spec-max M`` -> :mod:`~.stale_gate`
  (``predict_layer``, ``PredictPrefetch``) -> retains / speculates the prediction for layer t
  after layer t-1's load -> ``LayerHooks.predictor``: ``predict_layer`` ranks layer il+2 at layer il.
- **route-ahead**: ``--route-ahead N`` -> :mod:`~.route_ahead` (``RouteAhead``) and the stale gate
  -> reads layer L's committed experts right after layer L-N's load -> ``LayerHooks.ahead``:
  ``commit_ahead`` replaces layer L's selection by the ranking made at layer L-N.
- **predict log**: ``--predict-log`` (``refsim run`` only) -> :mod:`~.predict` (``PredictProbe``,
  ``PredictorStats``) -> none (it scores, the cache does not act) -> ``LayerHooks.probe``:
  ``probe.layer`` after each layer's routing.

- **verify routing** (refsim's experiment, not an engine flag; lossy): ``cap:U`` / ``consensus:T`` ->
  :mod:`~.verify_route` (``cap_layer``, ``consensus_layer``, ``VerifyRouter``) -> the event records the
  capped slots as dropped (no lookup, no read) or the moved routing -> ``LayerHooks.verify``: applied to
  a verify decode's rows only; the trace study (:mod:`refsim.studies.spec_policy`) calls the same rule.

- :mod:`~.knobs`: :class:`StreamKnobs`, the cache-side flags of one run or replay with the engine's
  validation (ranges, the pairs it rejects), and the flag constants (``MAX_PREFETCH``,
  ``PREDICT_SPEC_MAX_DEFAULT``). The argparse stanza is ``refsim.cli.common.add_knob_args``.
- :mod:`~.hooks`: :class:`LayerHooks`, the one object a pass is handed (the four hooks of the
  forward side column); a target declares it (``Target.hooks``, :mod:`refsim.spec.target`).

Sources: bmoe-engine.md §3.5-3.6; engine-docs/expert-dropping.md, prefetch.md,
expert-prediction.md, route-ahead.md; docs/streaming-knobs.md.
"""

from refsim.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "StreamKnobs": "knobs", "MAX_PREFETCH": "knobs", "PREDICT_SPEC_MAX_DEFAULT": "knobs",
    "LayerHooks": "hooks", "RouteAhead": "route_ahead", "PredictPrefetch": "stale_gate",
    "PredictProbe": "predict", "PredictorStats": "predict",
})
__all__ = ["StreamKnobs", "MAX_PREFETCH", "PREDICT_SPEC_MAX_DEFAULT", "LayerHooks", "RouteAhead",
           "PredictPrefetch", "PredictProbe", "PredictorStats"]
