"""Time: a device model fitted to the engine's recorded runs (docs/timing.md).

- :mod:`refsim.timing.runs` — a recorded run's decode tokens and configuration (:class:`RunData`).
- :mod:`refsim.timing.model` — the rules (:class:`DeviceModel`), the device JSON file.
- :mod:`refsim.timing.fit` — robust fitting, jackknife uncertainty, prediction, leave-one-out.

The model reads counters (flash MiB per token, lanes, overlap, cache on); it never sees the
forward pass or the cache internals (docs/architecture.md).
"""

from refsim.timing.fit import Holdout, Prediction, fit_device, leave_one_out, predict_run
from refsim.timing.model import DeviceModel, Param, load_device
from refsim.timing.runs import RunData, load_runs, run_data, split_spec

__all__ = ["DeviceModel", "Param", "load_device", "RunData", "load_runs", "run_data",
           "split_spec", "fit_device", "predict_run", "leave_one_out", "Prediction", "Holdout"]
