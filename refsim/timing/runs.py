"""What the device model sees of one recorded run: per-token counters and the configuration.

A recorded run (:class:`refsim.telemetry.metrics_reader.MetricsRun`) becomes a :class:`RunData`:
the decode tokens after the warm-up trim, each with its flash read ``x`` (MiB = 2^20 bytes read
since the previous row, the ``read_bytes`` column) and its measured times, plus the four
configuration values the model depends on: the model file (``model=``), the I/O lanes
(``io_threads=``), ``--overlap`` (``overlap=``) and whether an expert cache was on (``cache_mb=``
> 0). v1/v2 files carry all four in their preamble (bmoe-engine.md §4.1, engine-docs/telemetry.md);
the legacy header-less layout carries none, so the user states them after the path:
``RUN.csv@model=qwen3-30b,io_threads=2,overlap=1,cache_mb=2000``. Only what the file lacks may be
given after ``@``: a value the preamble states differently is refused (one model's runs split
into two compute floors by a stray ``@model=``, issue 26 C3); the same value is accepted. Without ``overlap=``, a run with some ``stall_ms`` > 0 is taken as an
overlap run (``stall_ms`` is 0 in serial mode, telemetry.md); without ``cache_mb=``, a run whose
``cache_hit_pct`` is -1 throughout (the engine's "no cache") has no cache.

Runs without flash streaming (``moe_stream=0``, or a legacy mmap run: no bytes read and no cache)
are outside the model: their time is page-fault-bound and no counter measures it
(:class:`UnmodelledRun`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import numpy as np

from refsim import MIB
from refsim.errors import ConfigError

OVERRIDE_KEYS = ("model", "io_threads", "overlap", "cache_mb")
"""Configuration keys a run may be given after ``@`` (``RUN.csv@key=value,...``)."""

MAX_LANES = 1024
"""Largest ``io_threads`` accepted (the engine's lanes are a handful of threads)."""


class UnmodelledRun(ConfigError):
    """A run the device model does not describe (no flash streaming: mmap mode)."""


@dataclass(frozen=True)
class RunData:
    """One run's decode tokens after the warm-up trim, as the device model uses them.

    Attributes
    ----------
    label : str
        The path as given (without the ``@`` overrides).
    model : str
        The model file (``model=``): the compute floor is fitted per model.
    lanes : int
        I/O lanes (``io_threads``), >= 1.
    overlap : bool
        ``--overlap`` (I/O of a layer overlapped with the FFN compute of the previous one).
    cache : bool
        An expert cache was on (``cache_mb`` > 0).
    x : (n,) float64
        Flash read per token, MiB (``read_bytes`` / 2^20).
    cpu, io, stall, wall : (n,) float64
        Measured ms per token: ``compute_ms + mgmt_ms`` (legacy files have no ``mgmt_ms``: their
        ``compute_ms`` includes it), ``io_ms``, ``stall_ms``, ``wall_ms``; each the token's share
        of its decode (the group's first row divided by ``mtp_batch``, telemetry.md).
    trim : int
        Warm-up tokens left out.
    config : dict or None
        The file's preamble configuration (``MetricsRun.config``, before ``@`` overrides) when read
        from a file (:func:`run_data`), so that what needs it (the repeats among runs,
        refsim.timing.noise) does not read the file again (a pipe reads once); None otherwise.
    """

    label: str
    model: str
    lanes: int
    overlap: bool
    cache: bool
    x: np.ndarray
    cpu: np.ndarray
    io: np.ndarray
    stall: np.ndarray
    wall: np.ndarray
    trim: int
    config: dict | None = field(default=None, compare=False, repr=False)

    @property
    def n(self) -> int:
        return int(self.x.size)

    @property
    def measured_ms(self) -> float:
        """Mean measured wall ms per token (over the kept tokens); > 0 (:func:`run_data` refuses a
        run whose kept tokens all have wall_ms 0)."""
        return float(self.wall.mean())

    @property
    def measured_tok_s(self) -> float:
        """Mean decode tok/s over the kept tokens: 1000 / mean ``wall_ms``."""
        return 1000.0 / self.measured_ms


def split_spec(spec: str) -> tuple[str, dict]:
    """Split ``PATH@key=value,...`` into the path and the overrides (validated keys and values).

    A path that exists as given is never split (a file name may hold ``@``).

    Raises
    ------
    ConfigError
        An unknown key, a malformed ``key=value`` or a value of the wrong type.
    """
    if "@" not in spec or os.path.exists(spec):
        return spec, {}
    path, _, tail = spec.rpartition("@")
    out: dict[str, str] = {}
    for item in tail.split(","):
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise ConfigError(f"{spec}: expected PATH@key=value[,key=value...] after '@', got "
                              f"{item!r}")
        if key not in OVERRIDE_KEYS:
            raise ConfigError(f"{spec}: unknown key {key!r} after '@' (expected one of "
                              f"{', '.join(OVERRIDE_KEYS)})")
        out[key] = value
    for key in ("io_threads", "overlap"):
        if key in out:
            _int_value(spec, key, out[key])
    if "cache_mb" in out:
        _float_value(spec, "cache_mb", out["cache_mb"])
    return path, out


def _int_value(where: str, key: str, value: str) -> int:
    try:
        v = int(value)
    except ValueError:
        raise ConfigError(f"{where}: {key}={value!r}, expected an integer") from None
    if key == "io_threads" and not 1 <= v <= MAX_LANES:
        raise ConfigError(f"{where}: io_threads={value!r}, expected 1..{MAX_LANES}")
    if key == "overlap" and v not in (0, 1):
        raise ConfigError(f"{where}: overlap={value!r}, expected 0 or 1")
    return v


def _float_value(where: str, key: str, value: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise ConfigError(f"{where}: {key}={value!r}, expected a number") from None
    if not np.isfinite(v) or v < 0:
        raise ConfigError(f"{where}: {key}={value!r}, expected a finite number >= 0")
    return v


def same_model(a: str, b: str) -> bool:
    """Whether two model names name one model: by file name (the engine's preamble writes the
    model file's base name, a route trace's ``model=`` may hold its path), exactly otherwise
    (case and quantisation count: ``Qwen3-30B-A3B-Q4_K_M.gguf`` is not
    ``Qwen_Qwen3.6-35B-A3B-Q4_K_M.gguf``)."""
    return os.path.basename(a) == os.path.basename(b)


def _same_value(key: str, stated: str, given: str) -> bool:
    """Whether ``key=given`` (after ``@``) says what the preamble's ``key=stated`` says: the
    model by its file name (:func:`same_model`), numbers by value (``2`` and ``2.0``), anything
    unreadable by its text."""
    if key == "model":
        return same_model(stated, given)
    try:
        return float(stated) == float(given)
    except ValueError:
        return stated == given


def run_data(run, overrides: dict | None = None, trim: int = 50, label: str | None = None) -> RunData:
    """Build the model's view of ``run`` (a ``MetricsRun``), keeping tokens ``trim:``.

    Raises
    ------
    ConfigError
        ``model``/``io_threads`` neither in the preamble nor given after ``@`` (the message says
        how to give them); a value after ``@`` that contradicts the preamble; fewer than 2 tokens
        after the trim; a measured decode time of 0 (``wall_ms`` 0 on every kept token: no tok/s,
        and every path that divides by :attr:`RunData.measured_ms` reads the run through here).
    UnmodelledRun
        A run without flash streaming.
    """
    label = label or run.path
    cfg = {k: v for k, v in run.config.items() if v != ""}
    for key, value in (overrides or {}).items():
        if key in cfg and not _same_value(key, cfg[key], value):
            raise ConfigError(f"{label}: {key}={value} after '@' contradicts the file's preamble "
                              f"({key}={cfg[key]}); give after '@' only what the file does not "
                              f"say")
        cfg.setdefault(key, value)          # the same value: the file's words kept
    if cfg.get("moe_stream") == "0":
        raise UnmodelledRun(f"{label}: moe_stream=0 (no flash streaming): not described by the "
                            f"device model")
    hit = run.column("cache_hit_pct")
    read = run.column("read_bytes")
    if "cache_mb" in cfg:
        cache = _float_value(label, "cache_mb", cfg["cache_mb"]) > 0
    else:
        cache = hit is not None and bool((hit != -1).any())
    if read is not None and not cache and not bool(read.any()):
        raise UnmodelledRun(f"{label}: no flash bytes read and no expert cache (an mmap run): "
                            f"its time is page-fault-bound; not described by the device model")
    missing = [k for k in ("model", "io_threads") if k not in cfg]
    if missing:
        given = ",".join(f"{k}=..." for k in missing)
        raise ConfigError(f"{label}: the file does not say {' or '.join(missing)} (a legacy "
                          f"layout); give it after the path: {label}@{given}")
    lanes = _int_value(label, "io_threads", cfg["io_threads"])
    if "overlap" in cfg:
        overlap = _int_value(label, "overlap", cfg["overlap"]) == 1
    else:
        overlap = bool(run.overlap)
    wall = run.token_wall_ms()
    n = wall.size
    if n - trim < 2:
        raise ConfigError(f"{label}: {n} tokens, fewer than 2 left after --trim {trim}; lower --trim")

    def col(name: str) -> np.ndarray:
        v = run.token_ms(name)
        return np.zeros(n) if v is None else v

    cpu = col("compute_ms") + col("mgmt_ms")
    # read_bytes is a per-decode count charged to the group's first row, like the times
    x = col("read_bytes") / MIB
    keep = slice(trim, None)
    if not wall[keep].mean() > 0:       # wall_ms >= 0 (the reader's rule): every kept row is 0
        raise ConfigError(f"{label}: measured decode time 0 ms/token (wall_ms 0 on all {n - trim} "
                          f"tokens after the first {trim}); expected a run with measured times "
                          f"(one whose decode time is 0 has no tok/s)")
    return RunData(label=label, model=str(cfg["model"]), lanes=lanes, overlap=overlap,
                   cache=cache, x=x[keep].astype(np.float64), cpu=cpu[keep], io=col("io_ms")[keep],
                   stall=col("stall_ms")[keep], wall=wall[keep], trim=trim,
                   config=dict(run.config))


def load_runs(specs: list[str], trim: int, skip_unmodelled: bool = False,
              leave_out=None) -> tuple[list[RunData], list[str]]:
    """Read every ``PATH[@overrides]`` in ``specs`` into :class:`RunData`, each file once (a pipe
    can be read only once).

    Returns the runs and, when ``skip_unmodelled``, one note per run left out as
    :class:`UnmodelledRun` (otherwise that error propagates). ``leave_out`` (optional) maps a
    file's ``(path, MetricsRun)`` to a note when the run is to be left out, None to keep it
    (:func:`refsim.timing.plain.load_plain_runs`: the speculation runs); those notes come first.

    Raises
    ------
    MetricsFormatError
        The file is not a valid metrics CSV (names the file and line).
    ConfigError
        A bad ``@`` override, a missing configuration value, an unmodelled run, or a file whose
        times are a device model's predictions (``times=predicted``: fitting on them is circular).
    """
    from refsim.telemetry.metrics_reader import read_metrics

    runs, notes, left = [], [], []
    seen: dict[str, str] = {}
    recorded: dict[bytes, str] = {}     # per-token reads and times -> the first spec recording them
    for spec in specs:
        path, overrides = split_spec(spec)
        real = os.path.realpath(path)
        if real in seen:
            raise ConfigError(f"{spec}: the same file as {seen[real]}; expected each run once")
        seen[real] = spec
        run = read_metrics(path)
        if run.predicted_by is not None:
            raise ConfigError(f"{path}: its times are predictions of device {run.predicted_by} "
                              f"(preamble times=predicted), not measurements; a device model is "
                              f"fitted to and checked against measured runs only (circular)")
        why = None if leave_out is None else leave_out(path, run)
        if why is not None:
            left.append(why)
            continue
        try:
            rd = run_data(run, overrides, trim, label=path)
        except UnmodelledRun as exc:
            if not skip_unmodelled:
                raise
            notes.append(f"left out: {exc}")
            continue
        # a copy of a run under another name: two recordings never time every token alike, and
        # counted twice it would weigh double in the fit and pose as a repeat of zero noise
        key = hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes()
                                      for a in (rd.x, rd.cpu, rd.io, rd.stall, rd.wall))).digest()
        if key in recorded:
            raise ConfigError(f"{spec}: the same per-token reads and times as {recorded[key]} (a "
                              f"copy of one run); expected each run once")
        recorded[key] = spec
        runs.append(rd)
    return runs, left + notes
