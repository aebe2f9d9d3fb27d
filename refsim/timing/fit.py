"""Fitting a :class:`~refsim.timing.model.DeviceModel` to recorded runs, and checking it.

Each term of the model (refsim.timing.model) is fitted to the measured column it describes, over
every kept token of every run (a token is one row of a run's metrics CSV after the warm-up trim):
``cpu`` to ``compute_ms + mgmt_ms`` on all runs, ``io`` to ``io_ms`` on the serial runs (under
``--overlap`` ``io_ms`` is summed lane-busy time, not wall time: telemetry.md), ``stall`` to
``stall_ms`` on the overlap runs. The fits are robust: Huber loss (tuning constant 1.345 on a
residual scale of 1.4826 x the median absolute residual), by iteratively reweighted least squares
for the two linear terms and Gauss-Newton for the hinge of the stall. That keeps the tokens the
engine's notes warn about (thermal throttling, run-order contamination, the odd page-fault storm)
from steering the fit without dropping them by hand.

A parameter the runs cannot tell apart from the others (its column is a linear combination of the
columns before it: e.g. the lanes' term when every run used the same lanes) is reported as not
identified and held at 0; the terms it is collinear with absorb it. Uncertainty is the jackknife
over runs (refit leaving each run out): tokens within a run are correlated, runs are the
independent unit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim import progress
from refsim.errors import ConfigError
from refsim.timing.model import PARAMS, DeviceModel, Param
from refsim.timing.runs import RunData

HUBER_K = 3.0
"""Huber tuning constant in units of the robust residual scale (1.4826 x MAD). Chosen among
1.345 (95 % efficiency under normal errors), 3 and infinity (least squares) by the
leave-one-run-out check of docs/timing.md: see there for what that choice costs."""
_IRLS_ITERS = 50
_RANK_TOL = 1e-9


def _identified(X: np.ndarray) -> np.ndarray:
    """(p,) bool: column j is kept iff it raises the rank of the kept columns before it."""
    keep = np.zeros(X.shape[1], dtype=bool)
    scale = np.maximum(np.abs(X).max(axis=0), 1e-300)
    Xs = X / scale
    rank = 0
    for j in range(X.shape[1]):
        trial = Xs[:, np.append(np.flatnonzero(keep), j)]
        r = np.linalg.matrix_rank(trial, tol=_RANK_TOL * max(trial.shape) * max(1.0, np.abs(trial).max()))
        if r > rank:
            keep[j] = True
            rank = r
    return keep


def _weights(r: np.ndarray) -> np.ndarray:
    mad = np.median(np.abs(r - np.median(r)))
    s = 1.4826 * mad
    if not s > 0:
        return np.ones_like(r)
    u = np.abs(r) / (HUBER_K * s)
    return np.where(u <= 1.0, 1.0, 1.0 / np.maximum(u, 1e-300))


def huber_lstsq(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Huber-robust least squares by IRLS; X (n, p) float64 of full column rank, y (n,)."""
    beta = np.linalg.lstsq(X, y, rcond=None)[0]
    for _ in range(_IRLS_ITERS):
        w = np.sqrt(_weights(y - X @ beta))
        new = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)[0]
        if np.allclose(new, beta, rtol=1e-10, atol=1e-12):
            return new
        beta = new
    return beta


def _hinge_loss(F: np.ndarray, y: np.ndarray, theta: np.ndarray, offset) -> float:
    r = y - np.maximum(0.0, F @ theta + offset)
    w = _weights(r)
    return float(np.sum(w * r * r))


def huber_hinge(F: np.ndarray, y: np.ndarray, offset=0.0) -> np.ndarray:
    """Fit ``y ~ max(0, F @ theta + offset)`` with Huber weights by Gauss-Newton, started from
    least squares on the tokens with ``y > 0`` (F (n, p), y (n,), offset scalar or (n,))."""
    offset = np.broadcast_to(np.asarray(offset, dtype=np.float64), y.shape)
    pos = y > 0
    rows = pos if pos.sum() >= F.shape[1] else np.ones_like(pos)
    theta = np.linalg.lstsq(F[rows], (y - offset)[rows], rcond=None)[0]
    best = (_hinge_loss(F, y, theta, offset), theta)
    for _ in range(_IRLS_ITERS):
        active = (F @ theta + offset) > 0
        if active.sum() < F.shape[1]:
            break
        r = y - np.maximum(0.0, F @ theta + offset)
        w = np.sqrt(_weights(r))[active]
        J = F[active]
        step = np.linalg.lstsq(J * w[:, None], r[active] * w, rcond=None)[0]
        theta = theta + step
        loss = _hinge_loss(F, y, theta, offset)
        if loss < best[0]:
            best = (loss, theta)
        if np.allclose(step, 0.0, atol=1e-9):
            break
    return best[1]


def _stack(runs: list[RunData], attr: str) -> np.ndarray:
    return np.concatenate([getattr(r, attr) for r in runs]) if runs else np.zeros(0)


def _point_fit(runs: list[RunData]) -> tuple[dict, dict, dict]:
    """One fit: (params value by key, compute floor by model, identified flag by key)."""
    models = sorted({r.model for r in runs})
    x = _stack(runs, "x")
    n_tok = [r.n for r in runs]
    rep = lambda vals: np.repeat(np.asarray(vals, dtype=np.float64), n_tok)  # noqa: E731
    cache = rep([r.cache for r in runs])
    overlap = rep([r.overlap for r in runs])
    onehot = np.stack([rep([r.model == m for r in runs]) for m in models], axis=1)
    values = dict.fromkeys(PARAMS, 0.0)
    ident = dict.fromkeys(PARAMS, False)
    values["tail"] = 1.0

    # cpu = C[m] + cache (m0 + m1 x) + overlap kappa x
    names = [f"C:{m}" for m in models] + ["m1", "kappa", "m0"]
    X = np.column_stack([onehot, cache * x, overlap * x, cache])
    keep = _identified(X)
    beta = huber_lstsq(X[:, keep], _stack(runs, "cpu"))
    fitted = dict(zip([n for n, k in zip(names, keep) if k], beta))
    compute = {m: fitted[f"C:{m}"] for m in models if f"C:{m}" in fitted}
    for key in ("m1", "kappa", "m0"):
        if key in fitted:
            values[key], ident[key] = float(fitted[key]), True

    serial = [r for r in runs if not r.overlap]
    if serial:
        xs = _stack(serial, "x")
        lanes = np.repeat([float(r.lanes) for r in serial], [r.n for r in serial])
        X = np.column_stack([np.ones_like(xs), xs, xs / lanes])
        keep = _identified(X)
        beta = huber_lstsq(X[:, keep], _stack(serial, "io"))
        for key, b in zip([k for k, kp in zip(("i0", "a", "b"), keep) if kp], beta):
            values[key], ident[key] = float(b), True

    over = [r for r in runs if r.overlap]
    if over:
        xo = _stack(over, "x")
        floor = np.repeat([compute.get(r.model, 0.0) for r in over], [r.n for r in over])
        F = np.column_stack([np.ones_like(xo), xo, -floor])
        keep = _identified(F)
        y = _stack(over, "stall")
        theta = huber_hinge(F[:, keep], y)
        got = dict(zip([k for k, kp in zip(("s0", "s1", "h"), keep) if kp], theta))
        if "h" in got and not 0.0 <= got["h"] <= 1.0:
            # outside its physical range: hold h at the nearest bound, refit s0 and s1
            h = min(max(got["h"], 0.0), 1.0)
            theta = huber_hinge(F[:, :2][:, keep[:2]], y, offset=-h * floor)
            got = dict(zip([k for k, kp in zip(("s0", "s1"), keep[:2]) if kp], theta))
            got["h"] = h
        for key, v in got.items():
            values[key], ident[key] = float(v), True
    return values, compute, ident


def _fit_with_tail(runs: list[RunData]) -> tuple[dict, dict, dict]:
    """:func:`_point_fit`, then ``tail`` = the median over runs of measured mean ms / the robust
    terms' mean ms (a run-level statistic: one odd run cannot move it)."""
    values, compute, ident = _point_fit(runs)
    values["tail"], ident["tail"] = 1.0, True
    dev = DeviceModel(params={k: Param(v) for k, v in values.items()}, compute={
        m: Param(c) for m, c in compute.items()}, serial_runs=1, overlap_runs=1)
    ratios = []
    for r in runs:
        if r.model in compute:
            pred = dev.token_ms(r.x, r.model, r.lanes, r.overlap, r.cache)["wall"].mean()
            ratios.append(r.measured_ms / pred)
    values["tail"] = float(np.median(ratios))
    return values, compute, ident


def fit_device(runs: list[RunData], name: str = "", jackknife: bool = True) -> DeviceModel:
    """Fit one device's :class:`DeviceModel` to ``runs`` (at least 2, all of one device).

    Raises
    ------
    ConfigError
        Fewer than 2 runs, or runs with different warm-up trims.
    """
    if len(runs) < 2:
        raise ConfigError(f"timing fit: {len(runs)} run(s); a device needs at least 2")
    values, compute, ident = _fit_with_tail(runs)
    reps: list[tuple[dict, dict]] = []
    if jackknife and len(runs) >= 3:
        for i in progress.bar(range(len(runs)), desc="timing fit: jackknife", unit="refit"):
            rest = runs[:i] + runs[i + 1:]
            v, c, _ = _fit_with_tail(rest)
            reps.append((v, c))

    def se(samples: list[float]) -> float | None:
        if len(samples) < 2:
            return None
        s = np.asarray(samples)
        n = s.size
        return float(np.sqrt((n - 1) / n * np.sum((s - s.mean()) ** 2)))

    params = {k: Param(values[k], se([v[k] for v, _ in reps]) if ident[k] else None, ident[k])
              for k in PARAMS}
    comp = {m: Param(c, se([cc[m] for _, cc in reps if m in cc])) for m, c in compute.items()}
    notes = []
    for k in PARAMS:
        if not ident[k]:
            notes.append(f"{k} ({PARAMS[k][1]}): not identified by these runs; held at 0")
    return DeviceModel(params=params, compute=comp, name=name or f"{len(runs)} runs",
                       trim=runs[0].trim, fitted_on=tuple(r.label for r in runs),
                       serial_runs=sum(not r.overlap for r in runs),
                       overlap_runs=sum(r.overlap for r in runs), notes=tuple(notes),
                       lanes=tuple(sorted({r.lanes for r in runs})))


@dataclass(frozen=True)
class Prediction:
    """One run's predicted and measured mean decode time (over its kept tokens)."""

    label: str
    tokens: int
    predicted_ms: float
    measured_ms: float
    parts_ms: dict

    @property
    def predicted_tok_s(self) -> float:
        return 1000.0 / self.predicted_ms

    @property
    def measured_tok_s(self) -> float:
        return 1000.0 / self.measured_ms

    @property
    def error_pct(self) -> float:
        """(predicted tok/s - measured tok/s) / measured tok/s x 100."""
        return (self.predicted_tok_s - self.measured_tok_s) / self.measured_tok_s * 100.0

    def as_dict(self) -> dict:
        return {"run": self.label, "tokens": self.tokens,
                "predicted_tok_s": self.predicted_tok_s, "measured_tok_s": self.measured_tok_s,
                "error_pct": self.error_pct, "predicted_ms_per_token": self.predicted_ms,
                "measured_ms_per_token": self.measured_ms,
                "predicted_parts_ms_per_token": self.parts_ms}


def predict_run(device: DeviceModel, run: RunData) -> Prediction:
    """Predict ``run``'s mean decode time from its configuration and per-token flash reads only
    (never its measured times, which are kept for the comparison)."""
    parts = device.token_ms(run.x, run.model, run.lanes, run.overlap, run.cache, where=run.label)
    mean = {k: float(v.mean()) for k, v in parts.items()}
    return Prediction(label=run.label, tokens=run.n, predicted_ms=mean["wall"],
                      measured_ms=run.measured_ms,
                      parts_ms={"cpu": mean["cpu"], "flash_wait": mean["stall" if run.overlap else "io"]})


@dataclass(frozen=True)
class Holdout:
    """Leave-one-run-out: the run's prediction from a fit on the other runs (or why none)."""

    label: str
    prediction: Prediction | None
    reason: str = ""


def leave_one_out(runs: list[RunData]) -> list[Holdout]:
    """For each run, fit on the others (no jackknife) and predict it."""
    out = []
    for i, run in enumerate(runs):
        rest = runs[:i] + runs[i + 1:]
        try:
            dev = fit_device(rest, jackknife=False)
            out.append(Holdout(run.label, predict_run(dev, run)))
        except ConfigError as exc:
            out.append(Holdout(run.label, None, str(exc)))
    return out
