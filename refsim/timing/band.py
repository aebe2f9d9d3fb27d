"""The band around a predicted tok/s, or around a predicted change against ``off`` (issue 29).

A prediction is uncertain three ways, and the band carries all three:

1. **The parameters' uncertainty** (:func:`bootstrap_devices`): the device is refitted on
   resamples of its runs (runs are the independent unit: tokens within a run are correlated),
   drawn with replacement **within** each stratum of (model, overlap), so every resample can
   still predict every configuration the full fit can. ``n_boot`` replicates, seeded. A stratum
   of one run is kept as is in every replicate: its parameters' spread is *not estimated* (said
   in the band's notes), which is not the same as zero.
2. **A term the data bound but do not identify** (a :class:`~refsim.timing.terms.Term`'s interval,
   chiefly the per-position cost ``eps``): with no preference inside the interval, it is swept
   over ``K`` = :data:`EPS_POINTS` evenly spaced midpoints ``lo + (j + 1/2)(hi - lo)/K``.
3. **Run-to-run noise** (refsim.timing.noise): one run's ``ln tok/s`` is off by ``sigma z``,
   ``z`` standard normal; a change against ``off`` compares two runs, ``sigma sqrt(2)``. ``z`` is
   taken at :data:`NOISE_POINTS` normal quantiles ``Phi^-1((j + 1/2)/Z)``.

Every combination (replicate x eps point x noise point) is one prediction, on the log scale
(``ln tok/s``, or ``ln(spec/off)``); the band is their ``(1 - level)/2`` and ``(1 + level)/2``
quantiles (NumPy's linear interpolation, on that scale) mapped back to tok/s or %, extended to
the point estimate if the point falls outside (a skewed bootstrap): a band always contains its
point. So the band is deterministic given the seed, and exact by hand in the simple cases (no
replicate and no eps spread: ``point x exp(sigma q)``, ``q`` the quantile of the ``z`` grid).

``parts`` gives each source's band alone (the others at the point), so a reader sees what widens
it: the bootstrap widths, the eps sweep, the noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from refsim.errors import ConfigError
from refsim.timing.fit import fit_device
from refsim.timing.terms import Term

EPS_POINTS = 9
"""Midpoints the per-position cost's interval is swept over."""
NOISE_POINTS = 99
"""Normal quantiles the run-to-run noise is taken at."""
DEFAULT_LEVEL = 0.90
"""The band's coverage: the 5th to 95th percentile."""
DEFAULT_BOOT = 200
"""Bootstrap replicates by default (each a refit; ~20 ms on the shared sets)."""


@dataclass(frozen=True)
class Band:
    """A point estimate with its band.

    Attributes
    ----------
    point, lo, hi : float
        ``lo <= point <= hi``.
    level : float
        Coverage of the band (0.9: 5th-95th percentile).
    unit : str
        ``tok/s`` or ``%`` (a change against ``off``).
    parts : dict of str -> (float, float)
        Each source's ``(lo, hi)`` alone: ``params``, ``eps``, ``noise``.
    notes : tuple of str
        What was not estimated, and why.
    """

    point: float
    lo: float
    hi: float
    level: float
    unit: str
    parts: dict = field(default_factory=dict)
    notes: tuple = ()

    def contains(self, x: float) -> bool:
        return self.lo <= x <= self.hi

    @property
    def half_width(self) -> float:
        """``max(point - lo, hi - point)``."""
        return max(self.point - self.lo, self.hi - self.point)

    def as_dict(self) -> dict:
        return {"point": self.point, "lo": self.lo, "hi": self.hi, "level": self.level,
                "unit": self.unit, "parts": {k: list(v) for k, v in self.parts.items()},
                "notes": list(self.notes)}


def bootstrap_devices(runs, n_boot: int = DEFAULT_BOOT, seed: int = 0) -> tuple[list, tuple]:
    """Refit the device on ``n_boot`` stratified resamples of ``runs`` (module docstring, item 1).

    Returns
    -------
    devices : list of DeviceModel
        One per replicate (no jackknife inside).
    notes : tuple of str
        The strata of one run, whose parameters' spread is not estimated.

    Raises
    ------
    ConfigError
        Fewer than 2 runs (no device can be fitted), ``n_boot`` < 1.
    """
    if len(runs) < 2:
        raise ConfigError(f"bootstrap: {len(runs)} run(s); a device needs at least 2")
    if n_boot < 1:
        raise ConfigError(f"bootstrap: n_boot {n_boot}, expected >= 1")
    strata: dict = {}
    for r in runs:
        strata.setdefault((r.model, r.overlap), []).append(r)
    notes = tuple(f"stratum {m} {'overlap' if o else 'serial'}: one run ({g[0].label}); its "
                  f"parameters' spread is not estimated" for (m, o), g in sorted(strata.items())
                  if len(g) == 1)
    rng = np.random.default_rng(seed)
    devices = []
    for _ in range(n_boot):
        sample = []
        for key in sorted(strata):
            g = strata[key]
            sample += [g[i] for i in rng.integers(0, len(g), size=len(g))]
        devices.append(fit_device(sample, jackknife=False))
    return devices, notes


def _grid(term: Term | None) -> list:
    if term is None or term.width == 0:
        return [None if term is None else term.value]
    k = np.arange(EPS_POINTS)
    return list(term.lo + (k + 0.5) * term.width / EPS_POINTS)


def _z() -> np.ndarray:
    nd = NormalDist()
    return np.array([nd.inv_cdf((j + 0.5) / NOISE_POINTS) for j in range(NOISE_POINTS)])


def _quantiles(values: np.ndarray, level: float) -> tuple[float, float]:
    q = np.quantile(values, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(q[0]), float(q[1])


def _check(level: float, sigma: float) -> None:
    if not 0.0 < level < 1.0:
        raise ConfigError(f"band: level {level!r}, expected 0 < level < 1")
    if not (sigma >= 0.0 and math.isfinite(sigma)):
        raise ConfigError(f"band: noise sigma {sigma!r}, expected a finite number >= 0")


def _band(values_fn, device, replicates, eps: Term | None, sigma: float, level: float,
          transform, unit: str, notes: tuple) -> Band:
    """``values_fn(device) -> (eps -> log-scale value)``; ``transform`` maps back to the unit."""
    _check(level, sigma)
    e0 = None if eps is None else eps.value
    at = values_fn(device)
    point_log = at(e0)
    point = transform(point_log)
    reps = list(replicates) or [device]
    grid = _grid(eps)
    z = sigma * _z()
    fns = [values_fn(d) for d in reps]
    logs = np.array([f(e) for f in fns for e in grid], dtype=np.float64)
    if not np.isfinite(logs).all() or not math.isfinite(point_log):
        raise ConfigError("band: a prediction is not finite")
    lo, hi = (float(v) for v in transform(np.array(_quantiles((logs[:, None] + z[None, :]).ravel(), level))))

    def part(values) -> tuple:
        return tuple(float(v) for v in transform(np.array(_quantiles(np.asarray(values), level))))
    parts = {"params": part([f(e0) for f in fns]), "eps": part([at(e) for e in grid]),
             "noise": part(point_log + z)}
    if not replicates:
        notes = notes + ("no bootstrap replicates: the parameters' spread is not estimated",)
    return Band(point=point, lo=min(lo, point), hi=max(hi, point), level=level, unit=unit,
                parts=parts, notes=notes)


def tok_s_band(predict, device, replicates=(), eps: Term | None = None, sigma: float = 0.0,
               level: float = DEFAULT_LEVEL, notes: tuple = ()) -> Band:
    """The band of a predicted tok/s.

    Parameters
    ----------
    predict : callable ``DeviceModel -> (eps -> tok/s)``
        The prediction, staged: what depends on the device alone (a calibration) is done once
        per replicate, then the returned function is evaluated at each ``eps`` (None when no
        ``eps`` term is given).
    device : DeviceModel
        The full-data fit: the point estimate.
    replicates : sequence of DeviceModel
        :func:`bootstrap_devices`; empty: the parameters' spread is not estimated (noted).
    eps : Term, optional
        Swept over its interval (module docstring, item 2).
    sigma : float
        Run-to-run noise, sd of ``ln tok/s`` of one run.
    level : float, default 0.9

    Raises
    ------
    ConfigError
        ``level`` outside (0, 1), ``sigma`` < 0, a prediction <= 0 or not finite.
    """
    def log_tok_s(d):
        at = predict(d)

        def f(e):
            v = at(e)
            if not v > 0:
                raise ConfigError(f"band: predicted tok/s {v!r}, expected > 0")
            return math.log(v)
        return f
    return _band(log_tok_s, device, replicates, eps, sigma, level, np.exp, "tok/s", tuple(notes))


def delta_band(predict_spec, predict_off, device, replicates=(), eps: Term | None = None,
               sigma: float = 0.0, level: float = DEFAULT_LEVEL, notes: tuple = ()) -> Band:
    """The band of a predicted change against ``off``, ``100 (spec / off - 1)`` %.

    ``predict_spec`` and ``predict_off`` are staged like :func:`tok_s_band`'s ``predict``
    (``DeviceModel -> (eps -> tok/s)``); both are evaluated on the same replicate (the
    parameters' errors largely cancel in the ratio), and the noise of two runs is ``sigma
    sqrt(2)``. Raises as :func:`tok_s_band`.
    """
    def log_ratio(d):
        at_s, at_o = predict_spec(d), predict_off(d)

        def f(e):
            s, o = at_s(e), at_o(e)
            if not (s > 0 and o > 0):
                raise ConfigError(f"band: predicted tok/s {s!r} and {o!r}, expected > 0")
            return math.log(s / o)
        return f

    def pct(x):
        return 100.0 * (np.exp(x) - 1.0)
    return _band(log_ratio, device, replicates, eps, sigma * math.sqrt(2.0), level, pct, "%",
                 tuple(notes))
