"""Session calibration: re-fit one model's compute floor ``C`` on the same session's plain run.

Device fits do not carry across sessions: the phone's two recorded sessions give fits that put
the same published plain cell 29 % below and 23 % above its measured rate (issue 29). The floor
``C`` (the DRAM- or core-bound cost of one position) is the term a session moves (thermal state,
clocks, a co-resident process: engine-docs/benchmark-method.md, "Cool on a condition"); the
flash, stall and bookkeeping terms describe the storage and the cache, which the session does
not change. So calibration re-fits ``C`` **and nothing else**, in one of two ways:

- ``rate`` (default): ``C`` such that the device predicts the baseline's measured mean decode
  time over its kept tokens, ``mean_t wall(x_t; C) = mean_t wall_ms_t`` (each token at its own
  read ``x_t``; ``wall`` is :meth:`refsim.timing.model.DeviceModel.token_ms`, non-decreasing in
  ``C``: solved by bisection, :func:`solve_floor`). The calibrated device reproduces the
  baseline's tok/s exactly, as the published off cells are reproduced
  (refsim.timing.cells.calibrated calls the same solver with the cell's one read level).
- ``column``: the way the fit fits ``C`` (refsim.timing.fit), the Huber-robust location over the
  kept tokens of ``cpu - cache (m0 + m1 x) - overlap kappa x`` (``cpu`` = ``compute_ms +
  mgmt_ms``). It describes the typical token; the session's slow tokens stay in the device's
  ``tail``, so the baseline's rate is not reproduced when the session's tail differs.

The interval is the spread of the same estimate over the run's four consecutive quarters (tokens
within a run are correlated, so a per-token standard error would overstate what one run knows;
the quarters show its drift). A published ``off`` cell has no per-token columns, only tok/s at
MiB/token: :func:`calibrate_to_cell` solves ``C`` from that one read level.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from refsim.errors import ConfigError
from refsim.timing.fit import huber_lstsq, predict_run
from refsim.timing.model import MAX_ABS_PARAM, DeviceModel, Param
from refsim.timing.runs import RunData
from refsim.timing.terms import Term

QUARTERS = 4
"""Consecutive blocks of the baseline run whose estimates make the calibrated floor's interval."""

METHODS = ("rate", "column")
"""How :func:`calibrate_floor` re-fits ``C`` (module docstring)."""

_BISECT_STEPS = 200


def solve_floor(device: DeviceModel, model: str, x, lanes: int, overlap: bool, cache: bool,
                target_ms: float, where: str = "") -> float:
    """The compute floor ``C[model]`` (ms/token) at which the device's mean predicted wall time
    of tokens reading ``x`` MiB ((n,) float64) equals ``target_ms``.

    The mean wall is continuous and non-decreasing in ``C`` (slope ``tail`` where the stall is
    inactive, ``tail (1 - h) >= 0`` where it is active), so it is bisected on ``(0, target_ms]``
    until ``lo`` and ``hi`` are adjacent floats (at most 200 halvings).

    Raises
    ------
    ConfigError
        No positive floor reaches ``target_ms``: the flash and bookkeeping terms alone are slower.
    """
    x = np.atleast_1d(np.asarray(x, dtype=np.float64))

    def wall(c: float) -> float:
        dev = replace(device, compute={**device.compute, model: Param(c)})
        return float(dev.token_ms(x, model, lanes, overlap, cache, where=where)["wall"].mean())

    lo, hi = 1e-9, target_ms
    if wall(lo) >= target_ms:
        raise ConfigError(f"{where or model}: {1000.0 / target_ms:.4g} tok/s at {float(x.mean()):.4g} "
                          f"MiB/token is faster than this device's flash and bookkeeping alone; "
                          f"no compute floor fits")
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:        # adjacent floats: further steps cannot move lo or hi
            break
        lo, hi = (mid, hi) if wall(mid) < target_ms else (lo, mid)
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Calibration:
    """A compute floor re-fitted on one session's plain run (or off cell).

    Attributes
    ----------
    model : str
        The compute floor re-fitted (``C[model]``).
    method : str
        One of :data:`METHODS`, or ``cell`` (:func:`calibrate_to_cell`).
    before_ms : float or None
        ``C[model]`` of the device as fitted (None: the device did not know the model).
    floor : Term
        ``C'`` in ms/token with its interval.
    device : DeviceModel
        The device with ``C[model] = C'`` and every other parameter unchanged.
    measured_tok_s : float
        The baseline's measured rate (kept tokens; or the cell's published tok/s).
    predicted_before_tok_s, predicted_after_tok_s : float or None
        The baseline predicted by the device before and after (None before when the model was
        unknown).
    """

    model: str
    method: str
    before_ms: float | None
    floor: Term
    device: DeviceModel
    measured_tok_s: float
    predicted_before_tok_s: float | None
    predicted_after_tok_s: float

    @property
    def moved_ms(self) -> float | None:
        """``C' - C`` in ms/token (None when there was no ``C``)."""
        return None if self.before_ms is None else self.floor.value - self.before_ms

    @property
    def moved_pct(self) -> float | None:
        """``(C' - C) / C x 100``."""
        return None if self.before_ms is None else 100.0 * self.moved_ms / self.before_ms

    def line(self) -> str:
        """``calibration: compute floor C[m] 108.6 -> 112.0 ms/token (+3.1 %) on ...``."""
        moved = ("new" if self.before_ms is None else
                 f"{self.before_ms:.1f} -> {self.floor.value:.1f} ms/token ({self.moved_pct:+.1f} %)")
        before = ("" if self.predicted_before_tok_s is None else
                  f"{self.predicted_before_tok_s:.3f} -> ")
        return (f"calibration ({self.method}): compute floor C[{self.model}] {moved} on "
                f"{self.floor.source}; baseline predicted {before}{self.predicted_after_tok_s:.3f} "
                f"tok/s against {self.measured_tok_s:.3f} measured")


def _column_floor(device: DeviceModel, run: RunData, sl: slice) -> float:
    v = device.value
    x = run.x[sl]
    other = (v("m0") + v("m1") * x if run.cache else 0.0) + (v("kappa") * x if run.overlap else 0.0)
    r = run.cpu[sl] - other
    return float(huber_lstsq(np.ones((r.size, 1)), r)[0])


def _rate_floor(device: DeviceModel, run: RunData, model: str, sl: slice) -> float:
    return solve_floor(device, model, run.x[sl], run.lanes, run.overlap, run.cache,
                       float(run.wall[sl].mean()), where=run.label)


def calibrate_floor(device: DeviceModel, run: RunData, model: str | None = None,
                    method: str = "rate") -> Calibration:
    """Re-fit ``C[model]`` (default: the run's model) on the plain run ``run``; nothing else moves.

    Parameters
    ----------
    device : DeviceModel
    run : RunData
        The session's plain run, its kept tokens (:func:`refsim.timing.plain.load_plain_runs`
        leaves speculation runs out).
    model : str, optional
        The floor to re-fit, when the device names the run's model differently.
    method : {'rate', 'column'}, default 'rate'
        See the module docstring.

    Raises
    ------
    ConfigError
        An unknown method; fewer than ``2 * QUARTERS`` kept tokens; no positive floor (the run is
        faster than the device's flash and bookkeeping alone, or its CPU time is below the
        bookkeeping terms); a floor above :data:`refsim.timing.model.MAX_ABS_PARAM` (a damaged
        time column); the device's refusals (a mode it was not fitted on).
    """
    if method not in METHODS:
        raise ConfigError(f"calibration method {method!r}: expected one of {', '.join(METHODS)}")
    model = model or run.model
    if run.n < 2 * QUARTERS:
        raise ConfigError(f"{run.label}: {run.n} kept tokens; calibration needs at least "
                          f"{2 * QUARTERS}")
    est = ((lambda sl: _rate_floor(device, run, model, sl)) if method == "rate" else
           (lambda sl: _column_floor(device, run, sl)))
    c = est(slice(None))
    if not c > 0:
        raise ConfigError(f"{run.label}: the re-fitted compute floor is {c:.3g} ms/token (<= 0): the "
                          f"run's CPU time is below the device's bookkeeping terms alone")
    if not c <= MAX_ABS_PARAM:      # a damaged time column (wall_ms 1e300) is not a slow device
        raise ConfigError(f"{run.label}: the re-fitted compute floor is {c:.3g} ms/token; expected at "
                          f"most {MAX_ABS_PARAM:g}, the bound a device file's parameters have (check "
                          f"the run's time columns)")
    edges = np.linspace(0, run.n, QUARTERS + 1).astype(int)
    parts = [est(slice(a, b)) for a, b in zip(edges[:-1], edges[1:])]
    floor = Term("C", c, min([c] + parts), max([c] + parts), "ms/token", "fitted",
                 f"{run.label} ({run.n} kept tokens, {method})",
                 f"interval: the same estimate on each quarter of the run ({QUARTERS} blocks)")
    before = device.compute.get(model)
    as_run = replace(run, model=model)
    before_tok_s = predict_run(device, as_run).predicted_tok_s if before is not None else None
    after = replace(device, compute={**device.compute, model: Param(c)})
    return Calibration(model=model, method=method,
                       before_ms=None if before is None else before.value, floor=floor,
                       device=after, measured_tok_s=run.measured_tok_s,
                       predicted_before_tok_s=before_tok_s,
                       predicted_after_tok_s=predict_run(after, as_run).predicted_tok_s)


def calibrate_to_cell(device: DeviceModel, off, model: str, lanes: int, overlap: bool) -> Calibration:
    """Solve ``C[model]`` so that the device predicts the published plain cell ``off`` exactly
    (:class:`refsim.timing.cells.Cell`, ``draft == 0``; expert cache on): :func:`solve_floor` at
    the cell's one read level, ``1000 / tok_s`` ms per token.

    Raises
    ------
    ConfigError
        ``off`` carries drafts (a speculation cell is never a baseline); no positive floor fits.
    """
    if off.draft != 0:
        raise ConfigError(f"{off.name}: a speculation cell (draft {off.draft}); the baseline must be "
                          f"the session's plain (off) cell")

    def tok_s(dev: DeviceModel) -> float:
        return 1000.0 / float(dev.token_ms([off.mib_per_token], model, lanes, overlap, True)["wall"][0])

    before = device.compute.get(model)
    c = solve_floor(device, model, [off.mib_per_token], lanes, overlap, True, 1000.0 / off.tok_s,
                    where=off.name)
    after = replace(device, compute={**device.compute, model: Param(c)})
    floor = Term("C", c, c, c, "ms/token", "fitted", f"published cell {off.name!r} ({off.tok_s:g} tok/s "
                 f"at {off.mib_per_token:g} MiB/token)",
                 "solved from one published rate: its run-to-run noise is the band's, not this term's")
    return Calibration(model=model, method="cell", before_ms=None if before is None else before.value,
                       floor=floor, device=after, measured_tok_s=off.tok_s,
                       predicted_before_tok_s=tok_s(device) if before is not None else None,
                       predicted_after_tok_s=tok_s(after))
