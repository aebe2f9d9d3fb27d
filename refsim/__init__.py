"""refsim: a reference simulator of the streamed-MoE speculative decoding loop.

The face a notebook needs, imported on first use (PEP 562; ``import refsim`` alone loads none of
it, so every command starts as fast as before)::

    import refsim
    t = refsim.read_trace("traces/demo.route.csv")       # a route trace; t.to_pandas(): its rows
    refsim.replay(t, 256).summary.hit_pct_decode         # the engine's LRU at 256 MiB
    refsim.sweep(t, [64, 128, 256], ["lru", "s3fifo"]).to_pandas()
    refsim.union(t, range(1, 5), 256).to_pandas()        # verify-batch widening
    refsim.simulate(refsim.RunConfig(n_predict=16)).as_dict()   # = refsim run --json

- models and traces: :func:`open_model`, :func:`read_trace`, :func:`write_trace`,
  :class:`DecodeEvent`, :class:`DecodeKind`;
- studies (:mod:`refsim.api`): :func:`replay` (one budget), :func:`sweep` (budgets x policies),
  :func:`union` (verify-batch widening);
- a generation (:mod:`refsim.session`): :class:`RunConfig`, :func:`simulate` -> :class:`RunReport`,
  with :class:`SpecConfig`, :class:`StreamKnobs`, :class:`DeviceOptions`;
- time: :func:`fit_device`, :func:`predict_time` (the device model, docs/timing.md);
  :func:`read_metrics` (the engine's per-token metrics CSVs);
- errors: :class:`RefsimError` and its kinds; :data:`MIB`, :data:`__version__`.

Results that are tables have ``to_pandas()`` / ``to_arrow()`` (the optional extra ``frames``;
:mod:`refsim.frames`). The rooms behind the face (docs/architecture.md): ``model`` (GGUF),
``kernels`` (Numba quant kernels), ``streaming`` (the engine's streaming knobs), ``forward``
(reference passes), ``spec`` (draft, verify, accept), ``cache`` (expert cache and flash
accounting), ``trace`` (route-trace files), ``telemetry`` (engine-format output), ``studies``
(what-if sweeps), ``timing`` (device model), ``analysis``, ``scale``, ``session`` (the run path),
``cli``. Data flows one way, through
:class:`refsim.events.DecodeEvent`.
"""

from refsim.lazy import lazy_exports as _lazy_exports

__version__ = "0.1.0"

MIB = 1 << 20
"""Bytes in one MiB (2**20). Every ``*_mib`` figure refsim prints is bytes / MIB."""

MAX_CACHE_MIB = 1 << 40
"""Largest cache budget refsim counts: 2**40 MiB = 1 EiB (``--cache-mb`` and a trace's recorded
``cache_mb=``; byte counts stay far inside int64)."""

__getattr__, __dir__ = _lazy_exports(__name__, {
    "open_model": "model.model", "read_trace": "trace.reader", "write_trace": "trace.writer",
    "DecodeEvent": "events", "DecodeKind": "events",
    "replay": "api", "sweep": "api", "union": "api", "fit_device": "api", "predict_time": "api",
    "RunConfig": "session", "RunReport": "session", "simulate": "session",
    "SpecConfig": "spec.config", "StreamKnobs": "streaming.knobs",
    "DeviceOptions": "timing.device_options", "read_metrics": "telemetry.metrics_reader",
    "RefsimError": "errors", "ConfigError": "errors", "UsageError": "errors",
    "TraceFormatError": "errors", "ModelFormatError": "errors", "MetricsFormatError": "errors",
    "RefsimWarning": "errors",
})
__all__ = ["open_model", "read_trace", "write_trace", "DecodeEvent", "DecodeKind", "replay",
           "sweep", "union", "RunConfig", "RunReport", "simulate", "SpecConfig", "StreamKnobs",
           "DeviceOptions", "fit_device", "predict_time", "read_metrics", "RefsimError",
           "ConfigError", "UsageError", "TraceFormatError", "ModelFormatError",
           "MetricsFormatError", "RefsimWarning", "MIB", "MAX_CACHE_MIB", "__version__"]
del lazy          # the submodule's binding: dir(refsim) lists the face (refsim.lazy still imports)
