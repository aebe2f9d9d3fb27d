"""Serial flash time by requests and lanes: the device model's I/O term built on what the engine
issues (docs/timing.md, "Requests and lanes"; docs/io.md).

The per-MiB term of :mod:`refsim.timing.model` prices a token's serial flash time as ``i0 + x (a
+ b / L)``: lanes divide a share of every MiB. The engine's reads are requests (one per expert
slice, an aligned window each) issued per layer as a batch that ``L`` lanes drain from one queue
(expert_stream_source.cpp ``load_layer``, ``io_drain``; refsim.io.requests), and the serial load
waits for its batch. So lanes divide a batch only as far as it has requests, and each batch has a
fixed cost. The request term is::

    io = i0 + a x + b x_lane + c rounds + d batches

with ``x`` the token's window MiB, ``x_lane`` the MiB its layer batches' busiest lanes read (the
critical path on lanes of equal bandwidth), ``rounds`` = sum over batches of ``ceil(R_l / L)``
(requests in flight one after another on a lane), ``batches`` the layers with a read. Every
parameter is held >= 0 (a negative latency or bandwidth is not a device's; a parameter the fit
drives below 0 is held at 0 and reported so). Only the serial term changes; compute, bookkeeping
and the ``--overlap`` stall are the per-MiB model's (:class:`~refsim.timing.model.DeviceModel`),
``tail`` is recalibrated the same way (median over runs of measured / predicted).

From a replay the features are exact (:class:`refsim.io.summary.IoSummary`); from a recorded run
they are derived from each token's ``read_bytes`` (:func:`run_features`,
:mod:`refsim.io.geometry`): misses by decomposition, rounds and batches as their expectation under
misses spread uniformly over the routed slots, ``x_lane = rounds * x / requests``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim import MIB
from refsim.errors import ConfigError
from refsim.timing.fit import Prediction, _identified, fit_device, huber_lstsq, predict_run
from refsim.timing.model import REQ_PARAMS, DeviceModel, Param, read_requests_doc
from refsim.timing.runs import RunData



@dataclass(frozen=True)
class IoFeatures:
    """Per token (n,) float64: window MiB ``x``, busiest-lane MiB ``lane_mib``, lane
    ``rounds``, layer ``batches``; ``exact`` the share of tokens whose requests are exact."""

    x: np.ndarray
    lane_mib: np.ndarray
    rounds: np.ndarray
    batches: np.ndarray
    exact: float = 1.0

    def columns(self) -> np.ndarray:
        """(n, 5): the columns of :data:`REQ_PARAMS` (1, x, x_lane, rounds, batches)."""
        return np.column_stack([np.ones_like(self.x), self.x, self.lane_mib, self.rounds,
                                self.batches])

    def mean(self) -> "IoFeatures":
        """One row: the per-token means."""
        return IoFeatures(*(np.array([float(np.mean(v))]) for v in
                            (self.x, self.lane_mib, self.rounds, self.batches)), self.exact)


def run_features(run: RunData) -> IoFeatures:
    """The request features of a recorded run's kept tokens, from its ``read_bytes`` and lanes
    (:mod:`refsim.io.geometry`).

    Raises
    ------
    ConfigError
        The run's model has no known geometry.
    """
    from refsim.io.geometry import expected_batches, expected_rounds, geometry_for, misses_from_bytes
    from refsim.io.lanes import engine_lanes
    g = geometry_for(run.model, run.label)
    lanes = engine_lanes(run.lanes)
    misses, exact = misses_from_bytes(np.rint(run.x * MIB).astype(np.int64), g)
    requests = misses * g.slices
    rounds = expected_rounds(misses, g.slices, lanes, g.n_layer, g.k)
    batches = expected_batches(misses, g.n_layer, g.k)
    lane = np.where(requests > 0, rounds * run.x / np.maximum(requests, 1e-300), 0.0)
    return IoFeatures(run.x, lane, rounds, batches, float(exact.mean()) if exact.size else 1.0)


def summary_features(io_summary) -> IoFeatures:
    """The exact per-token features of a replay (:class:`refsim.io.summary.IoSummary`: decode
    means per confirmed token)."""
    t = io_summary.tokens
    if not t:
        raise ConfigError("the replay confirmed no token: no per-token reads to price")
    return IoFeatures(np.array([io_summary.decode_window_read_bytes / MIB / t]),
                      np.array([(io_summary.lane_bytes_per_token or 0.0) / MIB]),
                      np.array([io_summary.decode_rounds / t]),
                      np.array([io_summary.decode_batches / t]))


def _nonneg_huber(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Huber IRLS with every coefficient >= 0: fit the identified columns, hold the most negative
    one at 0, refit, until none is negative. Returns (theta, identified, held)."""
    ident = _identified(X)
    keep = ident.copy()
    while True:
        theta = np.zeros(X.shape[1])
        if keep.any():
            theta[keep] = huber_lstsq(X[:, keep], y)
        neg = np.flatnonzero(keep & (theta < 0))
        if not neg.size:
            return theta, ident, ident & ~keep
        keep[neg[np.argmin(theta[neg])]] = False


@dataclass(frozen=True)
class RequestModel:
    """The per-MiB device with its serial flash term by requests and lanes.

    Attributes
    ----------
    base : DeviceModel
        Compute floors, bookkeeping, the overlap stall (and the per-MiB serial term, unused here).
    params : dict of str -> Param
        :data:`REQ_PARAMS`; ``identified`` False where the runs cannot tell the column apart or the
        fit held it at 0 (``held`` names those).
    tail : float
    held : tuple of str
        Parameters the fit drove below 0, held at 0.
    loo : dict or None
        Leave-one-run-out on the fitted runs: ``{"runs": n, "per_mib": {"median_pct",
        "worst_pct"}, "requests": {...}}`` (None: fewer than 3 runs).
    """

    base: DeviceModel
    params: dict
    tail: float
    held: tuple = ()
    loo: dict | None = None

    def io_ms(self, f: IoFeatures) -> np.ndarray:
        theta = np.array([self.params[k].value for k in REQ_PARAMS])
        return f.columns() @ theta

    def token_ms(self, f: IoFeatures, model: str, lanes: int, overlap: bool, cache: bool,
                 where: str = "") -> dict:
        """As :meth:`DeviceModel.token_ms`, the serial ``io`` by requests (``io_mib`` keeps the
        per-MiB figure) and ``wall`` with this model's ``tail``."""
        parts = self.base.token_ms(f.x, model, lanes, overlap, cache, where)
        io = self.io_ms(f)
        flash = parts["stall"] if overlap else io
        wall = self.tail * (parts["cpu"] + flash)
        return {**parts, "io_mib": parts["io"], "io": io, "wall": wall}

    @property
    def better(self) -> bool:
        """Whether this model's leave-one-out median |error| on the fitted runs is at most the
        per-MiB model's (False when unknown)."""
        if not self.loo:
            return False
        return self.loo["requests"]["median_pct"] <= self.loo["per_mib"]["median_pct"]

    def as_dict(self) -> dict:
        p = lambda par: {"value": par.value, "se": par.se, "identified": par.identified}  # noqa: E731
        return {"params": {k: p(self.params[k]) for k in REQ_PARAMS}, "tail": self.tail,
                "held": list(self.held), "loo": self.loo}


def _point(runs: list[RunData], feats: list[IoFeatures], base: DeviceModel):
    serial = [i for i, r in enumerate(runs) if not r.overlap]
    if not serial:
        raise ConfigError("request model: no serial run (the request term describes serial "
                          "reads; --overlap runs keep the per-MiB stall)")
    X = np.concatenate([feats[i].columns() for i in serial])
    y = np.concatenate([runs[i].io for i in serial])
    theta, ident, held = _nonneg_huber(X, y)
    names = list(REQ_PARAMS)
    params = {k: Param(float(theta[j]), None, bool(ident[j] and not held[j]))
              for j, k in enumerate(names)}
    rm = RequestModel(base, params, 1.0, tuple(k for j, k in enumerate(names) if held[j]))
    ratios = [r.measured_ms / float(rm.token_ms(f, r.model, r.lanes, r.overlap, r.cache)["wall"].mean())
              for r, f in zip(runs, feats) if r.model in base.compute]
    return RequestModel(base, params, float(np.median(ratios)), rm.held)


def fit_requests(runs: list[RunData], feats: list[IoFeatures], base: DeviceModel | None = None,
                 jackknife: bool = True) -> RequestModel:
    """Fit the request term on ``runs`` (the same runs as ``base``, fitted if not given).

    Raises
    ------
    ConfigError
        Fewer than 2 runs, no serial run, features not one per run.
    """
    if len(feats) != len(runs):
        raise ConfigError("request model: one feature set per run expected")
    base = base or fit_device(runs, jackknife=jackknife)
    rm = _point(runs, feats, base)
    if jackknife and len(runs) >= 3:
        reps = []
        for i in range(len(runs)):
            rest, rf = runs[:i] + runs[i + 1:], feats[:i] + feats[i + 1:]
            try:
                reps.append(_point(rest, rf, fit_device(rest, jackknife=False)).params)
            except ConfigError:
                continue
        n = len(reps)
        if n >= 2:
            params = {}
            for k, par in rm.params.items():
                s = np.array([r[k].value for r in reps])
                se = float(np.sqrt((n - 1) / n * np.sum((s - s.mean()) ** 2)))
                params[k] = Param(par.value, se if par.identified else None, par.identified)
            rm = RequestModel(base, params, rm.tail, rm.held)
    return rm


def predict_requests(rm: RequestModel, run: RunData, f: IoFeatures) -> Prediction:
    """``run``'s mean decode time by the request model (from its configuration and reads only)."""
    parts = rm.token_ms(f, run.model, run.lanes, run.overlap, run.cache, where=run.label)
    mean = {k: float(v.mean()) for k, v in parts.items()}
    return Prediction(label=run.label, tokens=run.n, predicted_ms=mean["wall"],
                      measured_ms=run.measured_ms,
                      parts_ms={"cpu": mean["cpu"],
                                "flash_wait": mean["stall" if run.overlap else "io"]})


@dataclass(frozen=True)
class PairedHoldout:
    """One run left out: its per-MiB and request predictions from fits on the other runs."""

    label: str
    per_mib: Prediction | None
    requests: Prediction | None
    reason: str = ""


def leave_one_out_pair(runs: list[RunData], feats: list[IoFeatures]) -> list[PairedHoldout]:
    """For each run, fit both models on the others (no jackknife) and predict it."""
    out = []
    for i, run in enumerate(runs):
        rest, rf = runs[:i] + runs[i + 1:], feats[:i] + feats[i + 1:]
        try:
            base = fit_device(rest, jackknife=False)
        except ConfigError as exc:
            out.append(PairedHoldout(run.label, None, None, str(exc)))
            continue
        try:
            p_mib = predict_run(base, run)
        except ConfigError as exc:
            out.append(PairedHoldout(run.label, None, None, str(exc)))
            continue
        try:
            p_req = predict_requests(_point(rest, rf, base), run, feats[i])
            out.append(PairedHoldout(run.label, p_mib, p_req))
        except ConfigError as exc:
            out.append(PairedHoldout(run.label, p_mib, None, str(exc)))
    return out


def loo_summary(held: list[PairedHoldout]) -> dict | None:
    """Median and worst |error| % of each model over the runs both predicted (None if none)."""
    both = [h for h in held if h.per_mib is not None and h.requests is not None]
    if not both:
        return None

    def stats(errs):
        a = np.abs(np.array(errs))
        return {"median_pct": float(np.median(a)), "worst_pct": float(a.max())}
    return {"runs": len(both),
            "per_mib": stats([h.per_mib.error_pct for h in both]),
            "requests": stats([h.requests.error_pct for h in both])}


def with_loo(rm: RequestModel, runs: list[RunData], feats: list[IoFeatures]) -> RequestModel:
    """``rm`` with its leave-one-out comparison on ``runs`` (at least 3 runs, else unchanged)."""
    if len(runs) < 3:
        return rm
    return RequestModel(rm.base, rm.params, rm.tail, rm.held, loo_summary(leave_one_out_pair(runs, feats)))


def requests_from_json(path: str, doc, base: DeviceModel) -> RequestModel:
    """Read a device file's ``requests`` object (validated: untrusted input).

    Raises
    ------
    ConfigError
        Naming the file and the key.
    """
    return RequestModel(base, *read_requests_doc(path, doc))
