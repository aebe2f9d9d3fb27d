"""Predicted times for refsim's own telemetry files (``refsim run --device``; docs/telemetry.md,
"Predicted times").

refsim measures no device's seconds. With a fitted device model (:mod:`refsim.timing`) a run's
per-decode counters become predicted times; the metrics CSV and ``BMOE_DONE`` then carry them in
their time fields and say so — the CSV with the preamble line :data:`TIMES_KEY` ``=predicted
device=<name>``, the DONE line with the keys ``times`` and ``device`` after the engine's — and
never mix them with the simulator's own seconds: every time field the model has no term for
(drafting, loop overhead, prefill, load, CPU time) is written 0, the engine's "unmeasured".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TIMES_KEY = "times"
"""Preamble key of a file whose times are not measurements; its only value is ``predicted``."""
PREDICTED = "predicted"


def device_token(name: str) -> str:
    """``name`` as one preamble token (whitespace replaced by ``_``; empty -> ``unnamed``)."""
    text = "_".join(str(name).split())
    return text or "unnamed"


@dataclass(frozen=True)
class PredictedTimes:
    """Per-decode predicted times, ms: (n_steps,) float64 arrays, one entry per target decode
    (``RunResult.steps``), each the whole decode's (the CSV puts it on the group's first row).

    ``wall_ms = compute_ms + mgmt_ms + io_ms`` serially and ``compute_ms + mgmt_ms + stall_ms``
    with ``overlap`` (the engine's decomposition, compute the residual); under overlap ``io_ms``
    is the serial flash time of the decode's reads (the engine writes the lanes' summed busy time
    there, which the model does not predict) and ``stall_ms`` is 0 serially.
    """

    device: str
    overlap: bool
    io_threads: int
    wall_ms: np.ndarray
    compute_ms: np.ndarray
    mgmt_ms: np.ndarray
    io_ms: np.ndarray
    stall_ms: np.ndarray

    def preamble_line(self) -> str:
        """``# times=predicted device=<name>`` (the CSV's sixth preamble line)."""
        return f"# {TIMES_KEY}={PREDICTED} device={device_token(self.device)}"

    def total_s(self, name: str) -> float:
        """Σ of one of the ms arrays, in seconds."""
        return float(np.sum(getattr(self, name))) / 1000.0

    def stats(self, stats):
        """``stats`` (:class:`refsim.telemetry.RunStats`) with the decode seconds predicted and
        every time it has no prediction for 0 (drafting, loop overhead, prefill, load)."""
        import dataclasses
        return dataclasses.replace(stats, decode_s=self.total_s("wall_ms"), draft_s=0.0,
                                   loop_overhead_s=0.0, prefill_s=0.0, load_s=0.0)
