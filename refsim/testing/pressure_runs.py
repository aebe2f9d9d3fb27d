"""The shared phone runs as the memory-pressure model reads them (docs/memory-pressure.md).

- :func:`drop_cold_runs`: the 2026-07-22 phone runs (they record ``majflt``, ``rss_*``,
  ``swap_mib``, ``mem_available_mib``), each with the resident demand of its configuration from
  the Qwen3.6-35B-A3B header-only twin (refsim.testing.twins): ``n_ctx`` and ``cache_mb`` and
  ``dense_weights`` from its preamble.
- :data:`LANES_MODELS`: what the 2026-07-12 phone runs' models need and no file here holds
  (published figures, each cited).

Nothing is copied from the shared folder; paths resolve with :mod:`refsim.testing.shared` and a
missing folder is the caller's to skip.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from refsim import MIB
from refsim.testing.recording_sets import PHONE_DROP, PHONE_LANES
from refsim.testing.shared import shared_path


def drop_cold_runs(tmpdir: str, trim: int = 50):
    """``(runs, demands)``: :class:`refsim.timing.pressure.RunPressure` per 2026-07-22 file (sorted by
    name) and the ``ResidentDemand`` each was read with."""
    from refsim.cache.demand import model_demand
    from refsim.cache.ledger import memory_ledger
    from refsim.model import open_model
    from refsim.telemetry.metrics_reader import read_metrics
    from refsim.testing.twins import qwen36_twin
    from refsim.timing.pressure import run_pressure
    model = open_model(qwen36_twin(os.path.join(tmpdir, "q36-pressure.gguf")))
    folder = shared_path("real-runs", PHONE_DROP)
    runs, demands = [], []
    for name in sorted(n for n in os.listdir(folder) if n.endswith(".csv")):
        run = read_metrics(folder / name)
        led = memory_ledger(model, int(run.number("n_ctx")), 0, False,
                            dense_weights=run.config["dense_weights"])
        demand = model_demand(model, led, int(run.number("cache_mb") * MIB))
        runs.append(run_pressure(run, demand, trim, label=str(folder / name)))
        demands.append(demand)
    return runs, demands


@dataclass(frozen=True)
class LanesModel:
    """A 2026-07-12 phone model's figures (MiB), each published (sources in ``source``)."""

    name: str
    file_mib: float
    dense_mib: float
    t_mib: float
    source: str


LANES_MODELS = {
    "qwen": LanesModel("Qwen3-30B-A3B Q4_K_M", 18.5e9 / MIB, 541.0, 1051.0,
                       "file 18.5 GB (summary.md); dense 541 MiB (bmoe-engine.md §7, 'effect of "
                       "subtracting dense bytes'); T = the cache-0 runs' read 1051 MiB/token "
                       "(summary.md)"),
    "gemma": LanesModel("gemma-4-26B-A4B Q4_K_M", 17.0e9 / MIB, 1224.0, 904.0,
                        "file 17.0 GB (summary.md); dense 1224 MiB (bmoe-engine.md §7); T = the "
                        "cache-0 runs' read 904 MiB/token (summary.md)"),
}


def lanes_files() -> list[str]:
    """Every 2026-07-12 phone CSV, sorted (paths)."""
    folder = shared_path("real-runs", PHONE_LANES)
    return [str(folder / n) for n in sorted(os.listdir(folder)) if n.endswith(".csv")]
