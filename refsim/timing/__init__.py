"""Time: a device model fitted to the engine's recorded runs (docs/timing.md).

- :mod:`refsim.timing.runs` — a recorded run's decode tokens and configuration (:class:`RunData`).
- :mod:`refsim.timing.model` — the rules (:class:`DeviceModel`), the device JSON file.
- :mod:`refsim.timing.fit` — robust fitting, jackknife uncertainty, prediction, leave-one-out.

The model reads counters (flash MiB per token, lanes, overlap, cache on); it never sees the
forward pass or the cache internals (docs/architecture.md).
"""

from refsim.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "Holdout": "fit", "Prediction": "fit", "fit_device": "fit", "leave_one_out": "fit",
    "predict_run": "fit", "DeviceModel": "model", "Param": "model", "load_device": "model",
    "RunData": "runs", "load_runs": "runs", "run_data": "runs", "split_spec": "runs",
})
__all__ = ["DeviceModel", "Param", "load_device", "RunData", "load_runs", "run_data",
           "split_spec", "fit_device", "predict_run", "leave_one_out", "Prediction", "Holdout"]
