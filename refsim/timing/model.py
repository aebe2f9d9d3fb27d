"""The device model: a decode token's wall time from its flash read and the run's configuration.

Rules (docs/timing.md states them with their sources and what the data can identify). For a token
that reads ``x`` MiB from flash in a run of model ``m`` with ``L`` I/O lanes:

- CPU time (compute + cache management; ms)::

      cpu = C[m] + cache * (m0 + m1 * x) + overlap * kappa * x

  ``C[m]`` is the per-token compute floor of model ``m`` on this device (the DRAM-bound GEMVs:
  desktop findings.md, "~0.11 s/token floor in every cell"); ``m0``, ``m1`` the expert cache's
  bookkeeping (``mgmt_ms``: lookups, evictions, inserts, more with more misses); ``kappa`` the
  compute slow-down per MiB read concurrently under ``--overlap`` (the async reads compete with
  compute for DRAM bandwidth: desktop findings.md, Round 3).
- Serial flash time (ms), one lane's reads queued behind the others::

      io = i0 + x * (a + b / L)

  ``a`` is the bandwidth-bound part (ms per MiB whatever the lanes: 1000 / a MiB/s is the
  ceiling), ``b / L`` the latency-bound part that lanes divide.
- With ``--overlap`` the wall clock waits only for the I/O the previous layer's compute did not
  hide (``stall_ms``)::

      stall = max(0, s0 + s1 * x - h * C[m])

- The token's wall time: ``tail * (cpu + io)`` serially, ``tail * (cpu + stall)`` with
  ``--overlap`` (the engine's ``wall_ms`` decomposes into those parts: telemetry.md; every shared
  run agrees within a few ms). The terms are fitted robustly, to the typical token; ``tail``
  (>= 1 in practice) scales them to the mean, which the rare slow tokens pull up.

All parameters are in ms (per token), ms/MiB or ms·lane/MiB; ``h`` is a fraction. MiB = 2^20 bytes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from refsim.errors import ConfigError

FORMAT = "refsim_device v1"
"""The first key's value in a device JSON file (:func:`load_device`)."""

PARAMS = {
    "m0": ("ms/token", "cache bookkeeping per token with an expert cache on"),
    "m1": ("ms/MiB", "cache bookkeeping per MiB read (misses: evict + insert)"),
    "kappa": ("ms/MiB", "compute slow-down per MiB read under --overlap (DRAM contention)"),
    "i0": ("ms/token", "serial flash time per token, fixed part"),
    "a": ("ms/MiB", "serial flash time per MiB, bandwidth-bound part (1000/a = MiB/s ceiling)"),
    "b": ("ms*lane/MiB", "serial flash time per MiB that the I/O lanes divide (latency-bound)"),
    "s0": ("ms/token", "overlap stall, fixed part"),
    "s1": ("ms/MiB", "overlap stall per MiB read"),
    "h": ("fraction", "share of the compute floor C[m] that hides flash reads under --overlap"),
    "tail": ("ratio", "mean token time / the robust fit's (the slow tokens' share: scheduling, "
                      "page faults, throttling)"),
}
"""Every scalar parameter: (unit, meaning)."""

MAX_ABS_PARAM = 1e7
"""Bound on any parameter read from a device file (ms per token or per MiB; a real device is
many orders of magnitude below)."""
MAX_MODELS = 1024
MIN_TAIL, MAX_TAIL = 0.5, 10.0
"""Range of ``tail`` accepted from a device file (the shared fits give 0.997-1.134)."""


@dataclass(frozen=True)
class Param:
    """A fitted value with its jackknife standard error (None: fewer than 2 replicates) and
    whether the runs identify it (False: the runs cannot tell it apart from other terms; value 0)."""

    value: float
    se: float | None = None
    identified: bool = True


@dataclass(frozen=True)
class DeviceModel:
    """One device's fitted parameters (see the module docstring for the rules and units).

    Attributes
    ----------
    params : dict of str -> Param
        Every key of :data:`PARAMS`.
    compute : dict of str -> Param
        ``C[m]``, ms/token, per model file name.
    name : str
        Free text (the runs it was fitted on, by default).
    trim : int
        Warm-up tokens left out of every run when fitting (and, by default, when predicting).
    fitted_on : tuple of str
    serial_runs, overlap_runs : int
        How many of the runs were serial / overlap (a model with no serial run cannot predict a
        serial one, and likewise).
    lanes : tuple of int
        The I/O lane counts (``io_threads``) of the runs, sorted, each once; ``()`` for a device
        file written before refsim recorded them (then no lane count is known to be outside).
    """

    params: dict
    compute: dict
    name: str = ""
    trim: int = 50
    fitted_on: tuple = ()
    serial_runs: int = 0
    overlap_runs: int = 0
    notes: tuple = field(default_factory=tuple)
    requests: dict | None = None
    """The serial flash term by requests and lanes (:mod:`refsim.timing.requests`, ``timing fit
    --io-model requests``), as its JSON object; None: per MiB only (the file has no such key)."""
    lanes: tuple = ()
    replicates: tuple = ()
    """Bootstrap refits over the runs (``timing fit --boot N``): each ``{"params": {key: value},
    "compute_ms": {model: value}}`` (:meth:`replicate_devices`); ``()``: none stored, a band's
    parameter spread is then not estimated."""
    position_cost: dict = field(default_factory=dict)
    """Per model file name, the readings that identify the compute of a verify decode's extra
    positions (``timing fit --gguf``; :func:`read_position_cost_doc` gives the layout,
    :func:`refsim.timing.positions.device_eps` the value at a width); ``{}``: not identified."""
    noise: dict | None = None
    """The device's own run-to-run noise, from the repeats among its fitted runs (``timing fit``;
    :func:`refsim.timing.noise.noise_doc` gives the layout, :func:`read_noise_doc` validates it,
    :func:`refsim.timing.noise.stored_noise` reads it); None: the runs hold no repeat (the file
    has no such key)."""

    def value(self, key: str) -> float:
        return self.params[key].value

    def replicate_devices(self) -> tuple:
        """The stored bootstrap refits as :class:`DeviceModel` s (the point fit's name, run counts,
        lanes and identified flags; no standard errors, no replicates, no ``position_cost``), for
        :func:`refsim.timing.band.tok_s_band`."""
        out = []
        for r in self.replicates:
            params = {k: Param(float(r["params"][k]), None, self.params[k].identified)
                      for k in PARAMS}
            compute = {m: Param(float(v)) for m, v in r["compute_ms"].items()}
            out.append(DeviceModel(params=params, compute=compute, name=self.name, trim=self.trim,
                                   fitted_on=self.fitted_on, serial_runs=self.serial_runs,
                                   overlap_runs=self.overlap_runs, lanes=self.lanes))
        return tuple(out)

    @staticmethod
    def replicate_doc(dev: "DeviceModel") -> dict:
        """One refit as a device file's ``replicates`` item (values only)."""
        return {"params": {k: dev.params[k].value for k in PARAMS},
                "compute_ms": {m: c.value for m, c in sorted(dev.compute.items())}}

    def lanes_warning(self, lanes: int) -> str | None:
        """The warning for a prediction at ``lanes`` I/O lanes outside the range of lane counts
        the device was fitted on, or None (inside it, or the lane counts are unknown).

        The lane term ``b / L`` (docs/timing.md, "Fitting") is a line through the fitted lane
        counts only: outside them it is an extrapolation, and a ``b`` the runs do not tell from 0
        (the desktop's -0.094 ± 0.064) then predicts fewer lanes faster.
        """
        if not self.lanes or min(self.lanes) <= lanes <= max(self.lanes):
            return None
        b = self.params["b"]
        se = "" if b.se is None else f" ± {b.se:.3f}"
        fitted = ", ".join(str(n) for n in self.lanes)
        return (f"--io-threads {lanes} is outside the lane counts the device was fitted on "
                f"({fitted}): its lane term b/L (b = {b.value:.3f}{se} ms*lane/MiB) is "
                f"extrapolated there, not measured")

    def compute_floor(self, model: str, where: str = "") -> float:
        """``C[model]`` in ms/token.

        Raises
        ------
        ConfigError
            The device was not fitted on that model (names the models it knows).
        """
        if model not in self.compute:
            known = ", ".join(sorted(self.compute)) or "none"
            raise ConfigError(f"{where or 'device'}: model {model!r} was not among the fitted runs "
                              f"(known: {known}); its compute floor is unknown")
        return self.compute[model].value

    def token_ms(self, x: np.ndarray, model: str, lanes: int, overlap: bool, cache: bool,
                 where: str = "") -> dict:
        """Predicted ms of each token reading ``x`` MiB ((n,) float64).

        Returns a dict of (n,) float64 arrays: ``cpu``, ``io`` (serial flash time, also under
        overlap, for reference), ``stall`` (zeros when serial), each as the robust fit gives it,
        and ``wall`` = ``tail * (cpu + io or stall)``.

        Raises
        ------
        ConfigError
            Unknown model; a serial (overlap) prediction from a device fitted on no serial
            (overlap) run.
        """
        if overlap and not self.overlap_runs:
            raise ConfigError(f"{where or 'device'}: an --overlap run, but the device was fitted on "
                              f"serial runs only: its overlap stall is unknown")
        if not overlap and not self.serial_runs:
            raise ConfigError(f"{where or 'device'}: a serial run, but the device was fitted on "
                              f"--overlap runs only: its serial flash time is unknown")
        x = np.asarray(x, dtype=np.float64)
        c = self.compute_floor(model, where)
        v = self.value
        cpu = c + (v("m0") + v("m1") * x if cache else 0.0) + (v("kappa") * x if overlap else 0.0)
        cpu = np.broadcast_to(cpu, x.shape).astype(np.float64)
        io = v("i0") + x * (v("a") + v("b") / lanes)
        if overlap:
            stall = np.maximum(0.0, v("s0") + v("s1") * x - v("h") * c)
            wall = cpu + stall
        else:
            stall = np.zeros_like(x)
            wall = cpu + io
        wall = v("tail") * wall
        if not (wall > 0).all():
            raise ConfigError(f"{where or 'device'}: the device model predicts a time <= 0 ms for a "
                              f"token reading {float(x[np.argmin(wall)]):g} MiB; its parameters are "
                              f"not a device's")
        return {"cpu": cpu, "io": io, "stall": stall, "wall": wall}

    def to_json(self, allow_nan: bool = False) -> str:
        """The device file's text. A non-finite number raises ``ValueError`` unless ``allow_nan``
        (then it is written ``NaN``/``Infinity``, which :func:`parse_device` refuses by name)."""
        def p(par: Param) -> dict:
            return {"value": par.value, "se": par.se, "identified": par.identified}
        doc = {
            "format": FORMAT,
            "name": self.name,
            "trim": self.trim,
            "fitted_on": list(self.fitted_on),
            "serial_runs": self.serial_runs,
            "overlap_runs": self.overlap_runs,
            "units": {k: u for k, (u, _) in PARAMS.items()} | {"compute_ms": "ms/token"},
            "params": {k: p(self.params[k]) for k in PARAMS},
            "compute_ms": {m: p(c) for m, c in sorted(self.compute.items())},
            "notes": list(self.notes),
        }
        if self.lanes:
            doc["lanes"] = list(self.lanes)
        if self.requests is not None:
            doc["requests"] = self.requests
        if self.position_cost:
            doc["position_cost"] = self.position_cost
        if self.noise is not None:
            doc["noise"] = self.noise
        if self.replicates:
            doc["replicates"] = list(self.replicates)
        return json.dumps(doc, indent=2, allow_nan=allow_nan) + "\n"


REQ_PARAMS = {
    "i0": ("ms/token", "serial flash time per token, fixed part"),
    "a": ("ms/MiB", "per window MiB, whatever the lane (the device's shared bandwidth)"),
    "b": ("ms/MiB", "per MiB on the busiest lane of each layer batch (a lane's own bandwidth)"),
    "c": ("ms/round", "per request round of a batch's busiest lane (a request's latency)"),
    "d": ("ms/batch", "per layer batch with a read (publish, wake the lanes, wait for the drain)"),
}
"""The request term's parameters: (unit, meaning), in column order."""


def _num(path: str, where: str, value, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or abs(value) > MAX_ABS_PARAM:
        raise ConfigError(f"{path}: {where}: expected a finite number of magnitude <= "
                          f"{MAX_ABS_PARAM:g}, got {value!r}")
    return float(value)


def _short_json(value) -> str:
    """``value`` as JSON text, cut at 60 characters (for a message)."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _param(path: str, where: str, obj) -> Param:
    if not isinstance(obj, dict) or set(obj) != {"value", "se", "identified"}:
        raise ConfigError(f"{path}: {where}: expected an object with keys value, se, identified")
    if not isinstance(obj["identified"], bool):
        raise ConfigError(f"{path}: {where}.identified: expected true or false")
    se = _num(path, f"{where}.se", obj["se"], allow_none=True)
    if se is not None and se < 0:
        raise ConfigError(f"{path}: {where}.se: expected >= 0, got {se!r}")
    return Param(_num(path, f"{where}.value", obj["value"]), se, obj["identified"])


def read_requests_doc(path: str, doc) -> tuple:
    """Validate a device file's optional ``requests`` object (the request/lane term of
    :mod:`refsim.timing.requests`; untrusted input) and return ``(params, tail, held, loo)``:
    ``params`` a dict of :data:`REQ_PARAMS` name -> :class:`Param`, ``tail`` a float, ``held`` a
    tuple of names, ``loo`` a dict or None. The device file's format lives here, with the rest of
    it; :func:`refsim.timing.requests.requests_from_json` builds the model from these.

    Raises
    ------
    ConfigError
        Naming the file and the key.
    """
    if not isinstance(doc, dict) or set(doc) != {"params", "tail", "held", "loo"}:
        raise ConfigError(f"{path}: requests: expected an object with keys params, tail, held, loo")
    ps = doc["params"]
    if not isinstance(ps, dict) or set(ps) != set(REQ_PARAMS):
        raise ConfigError(f"{path}: requests.params: expected exactly the keys {', '.join(REQ_PARAMS)}")
    params = {}
    for k in REQ_PARAMS:
        o = ps[k]
        if not isinstance(o, dict) or set(o) != {"value", "se", "identified"} or \
                not isinstance(o["identified"], bool):
            raise ConfigError(f"{path}: requests.params.{k}: expected value, se, identified")
        v = _num(path, f"requests.params.{k}.value", o["value"])
        if v < 0:
            raise ConfigError(f"{path}: requests.params.{k}.value: expected >= 0, got {v!r}")
        se = _num(path, f"requests.params.{k}.se", o["se"], allow_none=True)
        if se is not None and se < 0:
            raise ConfigError(f"{path}: requests.params.{k}.se: expected >= 0, got {se!r}")
        params[k] = Param(v, se, o["identified"])
    tail = _num(path, "requests.tail", doc["tail"])
    if not MIN_TAIL <= tail <= MAX_TAIL:
        raise ConfigError(f"{path}: requests.tail: expected {MIN_TAIL:g}..{MAX_TAIL:g}, got {tail!r}")
    held = doc["held"]
    if not isinstance(held, list) or not all(isinstance(h, str) and h in REQ_PARAMS for h in held):
        raise ConfigError(f"{path}: requests.held: expected a list of parameter names")
    loo = doc["loo"]
    if loo is not None:
        ok = isinstance(loo, dict) and set(loo) == {"runs", "per_mib", "requests"} and \
            isinstance(loo["runs"], int) and not isinstance(loo["runs"], bool) and all(
                isinstance(loo[m], dict) and set(loo[m]) == {"median_pct", "worst_pct"}
                for m in ("per_mib", "requests"))
        if not ok:
            raise ConfigError(f"{path}: requests.loo: expected null or an object with runs, "
                              f"per_mib and requests ({{median_pct, worst_pct}})")
        for m in ("per_mib", "requests"):
            for key in ("median_pct", "worst_pct"):
                if _num(path, f"requests.loo.{m}.{key}", loo[m][key]) < 0:
                    raise ConfigError(f"{path}: requests.loo.{m}.{key}: expected >= 0")
    return params, tail, tuple(held), loo


POSITION_WIDTHS = tuple(range(2, 10))
"""Verify widths (``1 + --draft``, draft 1..8) a device file's ``position_cost`` gives the
tensor-size reading at."""
MAX_EPS = 10.0
"""Bound on an ``eps`` figure in a device file (one extra position costing ten whole decodes is
not a device: the shared prefills give at most 4.7 at an end, docs/whatif-terms.md)."""
MAX_REPLICATES = 2000
"""Bound on a device file's stored bootstrap refits (``timing fit --boot``)."""
MAX_PROMPT = 1 << 20
"""Bound on the identifying prefill's positions ``n_prompt``."""


def _triple(path: str, where: str, obj, hi: float = MAX_EPS) -> list:
    if not isinstance(obj, list) or len(obj) != 3:
        raise ConfigError(f"{path}: {where}: expected [value, lo, hi]")
    v, lo, up = (_num(path, f"{where}[{i}]", x) for i, x in enumerate(obj))
    if not 0.0 <= lo <= v <= up <= hi:
        raise ConfigError(f"{path}: {where}: expected 0 <= lo <= value <= hi <= {hi:g}, got {obj!r}")
    return [v, lo, up]


def _text(path: str, where: str, value) -> str:
    if not isinstance(value, str) or len(value) > 4096:
        raise ConfigError(f"{path}: {where}: expected a string of at most 4096 characters")
    return value


def read_position_cost_doc(path: str, doc) -> dict:
    """Validate a device file's optional ``position_cost`` object (untrusted input) and return it
    as read. Per model file name (1..:data:`MAX_MODELS`), an object with:

    - ``eps_prefill``: ``[value, lo, hi]``, ``eps`` at the prefill's width (refsim.timing.positions,
      ``prefill_eps``), each in ``0..MAX_EPS``;
    - ``n_prompt``: the prefill's positions ``P`` (2..:data:`MAX_PROMPT`);
    - ``work_ratio``: a verify position's multiplies over a prefill position's (>= 1, <= 100);
    - ``bytes_eps``: ``null`` (no tensor table) or one ``[value, lo, hi]`` in ``0..1`` per width of
      :data:`POSITION_WIDTHS`, the tensor-size reading;
    - ``source``: what identified it (text).

    Raises
    ------
    ConfigError
        Naming the file and the key.
    """
    keys = {"eps_prefill", "n_prompt", "work_ratio", "bytes_eps", "source"}
    if not isinstance(doc, dict) or not 1 <= len(doc) <= MAX_MODELS:
        raise ConfigError(f"{path}: position_cost: expected an object of 1..{MAX_MODELS} models")
    for m, o in doc.items():
        at = f"position_cost[{m!r}]"
        if not isinstance(o, dict) or set(o) != keys:
            raise ConfigError(f"{path}: {at}: expected an object with keys {', '.join(sorted(keys))}")
        _triple(path, f"{at}.eps_prefill", o["eps_prefill"])
        n = o["n_prompt"]
        if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= MAX_PROMPT:
            raise ConfigError(f"{path}: {at}.n_prompt: expected an integer 2..{MAX_PROMPT}, got {n!r}")
        r = _num(path, f"{at}.work_ratio", o["work_ratio"])
        if not 1.0 <= r <= 100.0:
            raise ConfigError(f"{path}: {at}.work_ratio: expected 1..100, got {r!r}")
        b = o["bytes_eps"]
        if b is not None:
            if not isinstance(b, list) or len(b) != len(POSITION_WIDTHS):
                raise ConfigError(f"{path}: {at}.bytes_eps: expected null or {len(POSITION_WIDTHS)} "
                                  f"[value, lo, hi] (widths {POSITION_WIDTHS[0]}..{POSITION_WIDTHS[-1]})")
            for w, t in zip(POSITION_WIDTHS, b):
                _triple(path, f"{at}.bytes_eps[w={w}]", t, hi=1.0)
        _text(path, f"{at}.source", o["source"])
    return doc


MAX_NOISE_SD = 1.0
"""Bound on a device file's stored noise (sd of ln tok/s of one run; ``refsim whatif
--noise-pct`` takes at most 100 %): the engine's repeats give 0.7-8.4 % (docs/whatif-terms.md)."""
MAX_REPEAT_RUNS = 1024
"""Bound on the runs of one stored repeat, and on the stored repeats."""
NOISE_KEYS = ("value", "lo", "hi", "unit", "df", "repeats")
REPEAT_KEYS = ("name", "tok_s", "mib_per_token", "note")


def read_noise_doc(path: str, doc) -> dict:
    """Validate a device file's optional ``noise`` object (untrusted input; the layout of
    :func:`refsim.timing.noise.noise_doc`) and return it as read:

    - ``value``, ``lo``, ``hi``: finite, ``0 <= lo <= value <= hi <=`` :data:`MAX_NOISE_SD`,
      and :func:`refsim.timing.noise.log_sigma` of the stored repeats (relative 1e-9: the value is
      what its repeats give, not a free number);
    - ``unit``: :data:`refsim.timing.noise.NOISE_UNIT`;
    - ``df``: an integer, the repeats' ``sum (runs - 1)``;
    - ``repeats``: 1..:data:`MAX_REPEAT_RUNS` objects of ``name`` (text), ``tok_s`` (2..
      :data:`MAX_REPEAT_RUNS` numbers, each > 0 and <= :data:`MAX_ABS_PARAM`), ``mib_per_token``
      (>= 0, <= :data:`MAX_ABS_PARAM`) and ``note`` (text).

    Raises
    ------
    ConfigError
        Naming the file and the key.
    """
    from refsim.timing.noise import NOISE_UNIT, degrees_of_freedom, log_sigma, stored_repeats
    if not isinstance(doc, dict) or set(doc) != set(NOISE_KEYS):
        raise ConfigError(f"{path}: noise: expected an object with keys {', '.join(NOISE_KEYS)}")
    v, lo, hi = (_num(path, f"noise.{k}", doc[k]) for k in ("value", "lo", "hi"))
    if not 0.0 <= lo <= v <= hi <= MAX_NOISE_SD:
        raise ConfigError(f"{path}: noise: expected 0 <= lo <= value <= hi <= {MAX_NOISE_SD:g} "
                          f"(sd of ln tok/s), got {lo!r}, {v!r}, {hi!r}")
    if doc["unit"] != NOISE_UNIT:
        raise ConfigError(f"{path}: noise.unit: expected {NOISE_UNIT!r}, got {doc['unit']!r}")
    reps = doc["repeats"]
    if not isinstance(reps, list) or not 1 <= len(reps) <= MAX_REPEAT_RUNS:
        raise ConfigError(f"{path}: noise.repeats: expected a list of 1..{MAX_REPEAT_RUNS} repeats")
    for i, r in enumerate(reps):
        at = f"noise.repeats[{i}]"
        if not isinstance(r, dict) or set(r) != set(REPEAT_KEYS):
            raise ConfigError(f"{path}: {at}: expected an object with keys {', '.join(REPEAT_KEYS)}")
        _text(path, f"{at}.name", r["name"])
        _text(path, f"{at}.note", r["note"])
        ts = r["tok_s"]
        if not isinstance(ts, list) or not 2 <= len(ts) <= MAX_REPEAT_RUNS:
            raise ConfigError(f"{path}: {at}.tok_s: expected a list of 2..{MAX_REPEAT_RUNS} runs' "
                              f"tok/s")
        for j, t in enumerate(ts):
            if _num(path, f"{at}.tok_s[{j}]", t) <= 0:
                raise ConfigError(f"{path}: {at}.tok_s[{j}]: expected > 0, got {t!r}")
        if _num(path, f"{at}.mib_per_token", r["mib_per_token"]) < 0:
            raise ConfigError(f"{path}: {at}.mib_per_token: expected >= 0, got "
                              f"{r['mib_per_token']!r}")
    rs = stored_repeats(doc)
    df = doc["df"]
    if isinstance(df, bool) or not isinstance(df, int) or df != degrees_of_freedom(rs):
        raise ConfigError(f"{path}: noise.df: expected {degrees_of_freedom(rs)} (the repeats' "
                          f"runs less one each), got {df!r}")
    t = log_sigma(rs)
    for k, want in (("value", t.value), ("lo", t.lo), ("hi", t.hi)):
        if not math.isclose(doc[k], want, rel_tol=1e-9, abs_tol=1e-15):
            raise ConfigError(f"{path}: noise.{k}: {doc[k]!r} is not what the stored repeats give "
                              f"({want!r}: the pooled sd of ln tok/s, refsim.timing.noise)")
    return doc


def read_replicates_doc(path: str, doc, compute_keys) -> tuple:
    """Validate a device file's optional ``replicates`` list (untrusted input): at most
    :data:`MAX_REPLICATES` objects ``{"params": {every key of PARAMS: number}, "compute_ms": {the
    file's compute_ms keys: number > 0}}``, each number finite and bounded as the point fit's
    (``h`` in 0..1, ``tail`` in its range). Returns them as a tuple.

    Raises
    ------
    ConfigError
        Naming the file, the item and the key.
    """
    if not isinstance(doc, list) or not 1 <= len(doc) <= MAX_REPLICATES:
        raise ConfigError(f"{path}: replicates: expected a list of 1..{MAX_REPLICATES} refits")
    keys = set(compute_keys)
    for i, r in enumerate(doc):
        at = f"replicates[{i}]"
        if not isinstance(r, dict) or set(r) != {"params", "compute_ms"}:
            raise ConfigError(f"{path}: {at}: expected an object with keys params, compute_ms")
        ps, cs = r["params"], r["compute_ms"]
        if not isinstance(ps, dict) or set(ps) != set(PARAMS):
            raise ConfigError(f"{path}: {at}.params: expected exactly the keys {', '.join(PARAMS)}")
        for k in PARAMS:
            v = _num(path, f"{at}.params.{k}", ps[k])
            lim = {"h": (0.0, 1.0), "tail": (MIN_TAIL, MAX_TAIL)}.get(k)
            if lim and not lim[0] <= v <= lim[1]:
                raise ConfigError(f"{path}: {at}.params.{k}: expected {lim[0]:g}..{lim[1]:g}, "
                                  f"got {v!r}")
        if not isinstance(cs, dict) or set(cs) != keys:
            raise ConfigError(f"{path}: {at}.compute_ms: expected the keys of compute_ms "
                              f"({', '.join(sorted(keys))})")
        for m in cs:
            if _num(path, f"{at}.compute_ms[{m!r}]", cs[m]) <= 0:
                raise ConfigError(f"{path}: {at}.compute_ms[{m!r}]: expected > 0")
    return tuple(doc)


MAX_DEVICE_BYTES = 1 << 20
"""Largest device file read (1 MiB = 2^20 bytes)."""


def load_device(path: str) -> DeviceModel:
    """Read a device file written by ``refsim timing fit`` (validated: untrusted input).

    Raises
    ------
    ConfigError
        Naming the file: unreadable, and :func:`parse_device`'s refusals.
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_DEVICE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the device file: {exc.strerror}") from None
    return parse_device(path, raw)


def parse_device(path: str, raw: bytes) -> DeviceModel:
    """A device file's bytes ``raw`` as :class:`DeviceModel`, through every check of the format
    (``path`` names it in messages): what :func:`load_device` reads, and what ``refsim timing fit``
    checks its device against before writing it (a file its own reader refuses is never written).

    Raises
    ------
    ConfigError
        Naming ``path`` and the key: larger than :data:`MAX_DEVICE_BYTES`, not JSON (``NaN`` and
        ``Infinity`` are read as text, so refused as numbers), another format, a missing or extra
        key, a value of the wrong type or out of bounds (:data:`MAX_ABS_PARAM`,
        :data:`MAX_MODELS`, ``h`` in 0..1, ``tail`` in :data:`MIN_TAIL`..:data:`MAX_TAIL`, ...).
    """
    if len(raw) > MAX_DEVICE_BYTES:
        raise ConfigError(f"{path}: larger than 1 MiB; not a device file")
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=lambda c: c)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise ConfigError(f"{path}: not a JSON device file{where}") from None
    except RecursionError:              # nesting deeper than the parser's stack: no device file
        raise ConfigError(f"{path}: JSON nested too deeply; not a device file") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(f"{path}: expected a JSON object with \"format\": \"{FORMAT}\" "
                          f"(written by refsim timing fit)")
    need = {"format", "name", "trim", "fitted_on", "serial_runs", "overlap_runs", "units",
            "params", "compute_ms", "notes"}
    need |= {"requests"} & set(doc)         # optional: the request term (timing fit --io-model)
    need |= {"lanes"} & set(doc)            # optional: the runs' lane counts (older files lack it)
    need |= {"position_cost"} & set(doc)    # optional: eps identified (timing fit --gguf)
    need |= {"replicates"} & set(doc)       # optional: bootstrap refits (timing fit --boot)
    need |= {"noise"} & set(doc)            # optional: the runs' own repeats (timing fit)
    if set(doc) != need:
        extra, missing = sorted(set(doc) - need), sorted(need - set(doc))
        raise ConfigError(f"{path}: keys differ from a device file's (missing {missing}, "
                          f"unexpected {extra})")
    params = doc["params"]
    if not isinstance(params, dict) or set(params) != set(PARAMS):
        raise ConfigError(f"{path}: params: expected exactly the keys {', '.join(PARAMS)}")
    comp = doc["compute_ms"]
    if not isinstance(comp, dict) or not 1 <= len(comp) <= MAX_MODELS:
        raise ConfigError(f"{path}: compute_ms: expected an object of 1..{MAX_MODELS} models")
    for key in ("trim", "serial_runs", "overlap_runs"):
        v = doc[key]
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 1 << 31:
            raise ConfigError(f"{path}: {key}: expected an integer 0..2^31, got {v!r}")
    if doc["serial_runs"] + doc["overlap_runs"] == 0:
        raise ConfigError(f"{path}: serial_runs + overlap_runs is 0: fitted on no run")
    for key in ("fitted_on", "notes"):
        if not isinstance(doc[key], list) or not all(isinstance(s, str) for s in doc[key]):
            raise ConfigError(f"{path}: {key}: expected a list of strings")
    if not isinstance(doc["name"], str):
        raise ConfigError(f"{path}: name: expected a string")
    pars = {k: _param(path, f"params.{k}", params[k]) for k in PARAMS}
    for key, lo, hi in (("h", 0.0, 1.0), ("tail", MIN_TAIL, MAX_TAIL)):
        v = pars[key].value
        if not lo <= v <= hi:
            raise ConfigError(f"{path}: params.{key}.value: expected {lo:g}..{hi:g} "
                              f"({PARAMS[key][1]}), got {v!r}")
    compute = {}
    for m, obj in comp.items():
        c = _param(path, f"compute_ms[{m!r}]", obj)
        if c.value <= 0:
            raise ConfigError(f"{path}: compute_ms[{m!r}].value: expected > 0, got {c.value!r}")
        compute[m] = c
    lanes = doc.get("lanes", [])
    # absent: a file from before the key (lane counts unknown); present, it lists at least the
    # one lane count every fit has (to_json writes it only then): [] would hide lanes_warning
    if not isinstance(lanes, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 1 << 31 for n in lanes) \
            or lanes != sorted(set(lanes)) or ("lanes" in doc and not lanes):
        raise ConfigError(f"{path}: lanes: expected a sorted list of distinct integers 1..2^31 "
                          f"(the runs' io_threads), at least one, got {_short_json(lanes)}")
    dev = DeviceModel(params=pars, compute=compute, name=doc["name"], trim=doc["trim"],
                      fitted_on=tuple(doc["fitted_on"]), serial_runs=doc["serial_runs"],
                      overlap_runs=doc["overlap_runs"], notes=tuple(doc["notes"]),
                      lanes=tuple(lanes))
    from dataclasses import replace
    if "requests" in doc:
        read_requests_doc(path, doc["requests"])          # validated here, kept as read
        dev = replace(dev, requests=doc["requests"])
    if "position_cost" in doc:
        dev = replace(dev, position_cost=read_position_cost_doc(path, doc["position_cost"]))
    if "noise" in doc:
        dev = replace(dev, noise=read_noise_doc(path, doc["noise"]))
    if "replicates" in doc:
        dev = replace(dev, replicates=read_replicates_doc(path, doc["replicates"], compute))
    return dev
