"""Run-to-run noise: how far two runs of the same configuration differ in tok/s.

The engine's own repeats measure it (no model is involved):

- **published** (bmoe-engine.md §7; engine-docs/mtp.md): the phone MTP table's two ``off`` runs
  "did byte-identical work and still differ by 5.6 %" (5.82 / 6.14); the phone n-gram table's
  prose ``off`` and its repeat (5.17 / 4.59 at the same 82.5 MiB/token, thermally gated); the
  host's prose and copy ``off`` cells and their repeats (5.80 / 6.59 at 46.0 / 34.5 MiB/token;
  5.45 / 5.65 at 58.1 / 48.0), where ``--cache-mb auto`` sized the cache differently, so the
  reads differ and part of the difference is the reads';
- **in the shared runs** (:func:`shared_repeats`): runs whose per-token flash reads are
  byte-identical and whose configurations differ only in keys the device fit finds dead
  (``io_threads`` on the desktop: its lanes' term is zero within its error, docs/timing.md) —
  desktop pc-E and pc-F.

A repeat whose runs read different MiB/token is compared after the device's own prediction of
that difference (:func:`residual_logs`), so only what the model cannot explain counts as noise.

The noise of one run's mean tok/s is ``sigma``, the pooled standard deviation of ``ln tok/s``
within repeat groups (:func:`log_sigma`): ``sigma^2 = sum_g sum_i (r_gi - mean_g r)^2 /
sum_g (n_g - 1)``. A difference between two runs then has ``sqrt(2) sigma``.

The prefill repeats (every desktop run prefills the same prompt cold; the four phone drop-cold
runs likewise) measure a single event's noise, larger than a 256-token mean's; they enter the
per-position cost's interval (refsim.timing.positions), not this term.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from refsim.errors import ConfigError
from refsim.timing.terms import Term


@dataclass(frozen=True)
class Repeat:
    """Runs of one configuration recorded more than once.

    Attributes
    ----------
    name : str
    device : str
        Which device class it measures (``host``/``desktop``, ``phone``).
    tok_s : tuple of float
        Each run's decode tok/s.
    mib_per_token : tuple of float
        Each run's flash MiB per token (equal: the same reads).
    source : str
    note : str
    """

    name: str
    device: str
    tok_s: tuple
    mib_per_token: tuple
    source: str
    note: str = ""

    def __post_init__(self):
        if len(self.tok_s) < 2 or len(self.tok_s) != len(self.mib_per_token):
            raise ConfigError(f"repeat {self.name}: expected >= 2 runs with a MiB/token each")
        if not all(t > 0 and math.isfinite(t) for t in self.tok_s):
            raise ConfigError(f"repeat {self.name}: tok/s must be finite and > 0")

    @property
    def same_reads(self) -> bool:
        return len(set(self.mib_per_token)) == 1


PUBLISHED_REPEATS = (
    Repeat("phone mtp off", "phone", (5.82, 6.14), (69.3, 69.3),
           "engine-docs/mtp.md: 'The two off runs did byte-identical work and still differ by 5.6%'"),
    Repeat("phone prose off", "phone", (5.17, 4.59), (82.5, 82.5),
           "bmoe-engine.md §7, n-gram phone table (thermally gated): prose off and its repeat",
           "majflt/token 299 vs 480"),
    Repeat("host prose off", "host", (5.80, 6.59), (46.0, 34.5),
           "bmoe-engine.md §7, n-gram vs MTP host table: prose off and its repeat",
           "--cache-mb auto: the repeat's cache read 25 % less"),
    Repeat("host copy off", "host", (5.45, 5.65), (58.1, 48.0),
           "bmoe-engine.md §7, n-gram vs MTP host table: copy off and its repeat",
           "--cache-mb auto: the repeat's cache read 17 % less"),
)
"""The engine's published repeats of an ``off`` configuration."""


def residual_logs(rep: Repeat, predict=None) -> np.ndarray:
    """``ln tok/s`` of each run of ``rep`` less the device's predicted ``ln tok/s`` at its
    MiB/token (``predict(mib_per_token) -> tok/s``); the bare logs when the reads are the same
    or no predictor is given.

    Raises
    ------
    ConfigError
        Different reads and no predictor (the difference would be counted as noise).
    """
    logs = np.log(np.asarray(rep.tok_s, dtype=np.float64))
    if rep.same_reads:
        return logs
    if predict is None:
        raise ConfigError(f"repeat {rep.name}: its runs read different MiB/token "
                          f"({', '.join(f'{m:g}' for m in rep.mib_per_token)}); give the device's "
                          f"prediction so that only the unexplained part counts as noise")
    return logs - np.log(np.asarray([predict(m) for m in rep.mib_per_token], dtype=np.float64))


def log_sigma(reps, predict=None, name: str = "noise") -> Term:
    """The pooled run-to-run standard deviation of ``ln tok/s`` (module docstring), a ratio.

    ``predict`` is a callable ``(Repeat, mib_per_token) -> tok/s`` used for repeats whose reads
    differ (each repeat may need its own calibration). The interval spans the single groups'
    own estimates and the pooled one.

    Raises
    ------
    ConfigError
        No repeat.
    """
    reps = list(reps)
    if not reps:
        raise ConfigError("noise: no repeated configuration")
    ss, each = 0.0, []
    df = degrees_of_freedom(reps)
    for rep in reps:
        r = residual_logs(rep, None if predict is None or rep.same_reads else
                          (lambda m, rep=rep: predict(rep, m)))
        d = float(np.sum((r - r.mean()) ** 2))
        ss += d
        each.append(math.sqrt(d / (r.size - 1)))
    sigma = math.sqrt(ss / df)
    return Term(name, sigma, min(each + [sigma]), max(each + [sigma]), "sd of ln tok/s (one run)",
                "fitted", "; ".join(f"{rep.name} ({', '.join(f'{t:g}' for t in rep.tok_s)} tok/s)"
                                    for rep in reps),
                f"pooled over {len(reps)} repeat(s), {df} degree(s) of freedom; interval: the "
                f"single repeats' own estimates ({', '.join(f'{e:.4f}' for e in each)})")


def degrees_of_freedom(reps) -> int:
    """The degrees of freedom of :func:`log_sigma`'s pooled estimate: ``sum_g (n_g - 1)``."""
    return sum(len(rep.tok_s) - 1 for rep in reps)


def shared_repeats(runs, configs: dict, dead_keys=(), device: str = "") -> list[Repeat]:
    """Repeats among recorded runs: runs with byte-identical per-token flash reads (``x``) and
    the same mode, model, cache and I/O lanes, whose configurations differ at most in
    ``dead_keys`` (``io_threads`` among them also lets the lanes differ).

    Parameters
    ----------
    runs : list of RunData
    configs : dict of str -> dict
        Each run's preamble configuration by label (``MetricsRun.config``).
    dead_keys : tuple of str
        Keys whose difference does not break a repeat: levers the device fit finds dead (the
        lanes when its ``b`` is zero within two standard errors: :func:`dead_levers`).
    device : str
        The device class the repeats measure.
    """
    groups: list[list] = []
    for r in runs:
        cfg = {k: v for k, v in configs.get(r.label, {}).items() if k not in dead_keys}
        for g in groups:
            h = g[0]
            if (h.model == r.model and h.overlap == r.overlap and h.cache == r.cache
                    and (h.lanes == r.lanes or "io_threads" in dead_keys)
                    and h.x.shape == r.x.shape and bool(np.array_equal(h.x, r.x))
                    and cfg == {k: v for k, v in configs.get(h.label, {}).items() if k not in dead_keys}):
                g.append(r)
                break
        else:
            groups.append([r])
    out = []
    for g in groups:
        if len(g) < 2:
            continue
        differ = sorted({k for k in dead_keys for r in g
                         if configs.get(r.label, {}).get(k) != configs.get(g[0].label, {}).get(k)}
                        | ({"io_threads"} if len({r.lanes for r in g}) > 1 else set()))
        out.append(Repeat(" / ".join(r.label.rsplit("/", 1)[-1] for r in g), device,
                          tuple(r.measured_tok_s for r in g),
                          tuple(float(r.x.mean()) for r in g),
                          "recorded runs with byte-identical per-token reads",
                          f"differ only in {', '.join(differ)}" if differ
                          else "identical configurations"))
    return out


def dead_levers(device) -> tuple:
    """Configuration keys the device fit finds dead: ``io_threads`` when the lanes' term ``b`` is
    not identified (one lane count) or zero within two standard errors (the desktop's: -0.094
    +- 0.064, docs/timing.md). ``device`` is a :class:`refsim.timing.model.DeviceModel`."""
    b = device.params["b"]
    if not b.identified or (b.se is not None and abs(b.value) <= 2.0 * b.se):
        return ("io_threads",)
    return ()


def device_repeats(runs, device, configs: dict | None = None, name: str = "") -> list[Repeat]:
    """The repeats among one device's recorded runs, by one rule wherever they are looked for
    (``timing fit``'s device file, :func:`refsim.timing.identify.identify_device`): runs of
    byte-identical per-token reads whose configurations differ only in the levers ``device``
    (fitted on ``runs``) finds dead (:func:`shared_repeats` with :func:`dead_levers`).

    Parameters
    ----------
    runs : list of RunData
    device : DeviceModel
    configs : dict of str -> dict, optional
        Each run's preamble configuration by label; default: read from each run's file
        (``MetricsRun.config``).
    name : str
        The device class the repeats measure.

    Raises
    ------
    MetricsFormatError, ConfigError
        Reading a run's file (``configs`` not given and the run carries no ``config``).
    """
    if configs is None:
        from refsim.telemetry.metrics_reader import read_metrics
        configs = {r.label: (r.config if getattr(r, "config", None) is not None
                             else read_metrics(r.label).config) for r in runs}
    return shared_repeats(runs, configs, dead_levers(device), name)


NOISE_UNIT = "sd of ln tok/s (one run)"
"""The unit of :func:`log_sigma`'s value, as a device file's ``noise.unit`` states it."""


def noise_doc(reps) -> dict:
    """A device file's ``noise`` entry (``timing fit``) from the repeats among its runs
    (:func:`device_repeats`; each of byte-identical reads): ``value``, ``lo``, ``hi``
    (:func:`log_sigma`'s, :data:`NOISE_UNIT`), ``unit``, ``df`` (:func:`degrees_of_freedom`) and
    ``repeats``: per repeat its ``name``, each run's ``tok_s`` (mean decode tok/s over the kept
    tokens), ``mib_per_token`` (their common flash read, MiB = 2^20 bytes) and ``note``.
    :func:`refsim.timing.model.read_noise_doc` validates it; :func:`stored_noise` reads it back.

    Raises
    ------
    ConfigError
        No repeat, or a repeat whose runs read different MiB/token (its difference would count as
        noise).
    """
    reps = list(reps)
    for rep in reps:
        if not rep.same_reads:
            raise ConfigError(f"repeat {rep.name}: its runs read different MiB/token; a device "
                              f"file stores the noise of byte-identical repeats only")
    t = log_sigma(reps)
    return {"value": t.value, "lo": t.lo, "hi": t.hi, "unit": NOISE_UNIT,
            "df": degrees_of_freedom(reps),
            "repeats": [{"name": rep.name, "tok_s": list(rep.tok_s),
                         "mib_per_token": rep.mib_per_token[0], "note": rep.note} for rep in reps]}


def with_device_noise(device, runs, configs: dict | None = None, name: str = ""):
    """``device`` (fitted on ``runs``) with its own run-to-run noise stored (``noise``:
    :func:`noise_doc` of :func:`device_repeats`), or ``device`` unchanged when ``runs`` hold no
    repeat (its file then has no ``noise`` key: the bytes it had before the key existed).
    ``timing fit`` and :func:`refsim.api.fit_device` write their device through it.

    Raises
    ------
    MetricsFormatError, ConfigError
        :func:`device_repeats`'.
    """
    from dataclasses import replace
    reps = device_repeats(runs, device, configs, name)
    return replace(device, noise=noise_doc(reps)) if reps else device


def stored_repeats(doc: dict, device: str = "") -> list[Repeat]:
    """The :class:`Repeat` s of a device file's ``noise`` entry (:func:`noise_doc`'s layout)."""
    return [Repeat(r["name"], device, tuple(float(t) for t in r["tok_s"]),
                   (float(r["mib_per_token"]),) * len(r["tok_s"]),
                   "the device file's repeats (refsim timing fit)", r["note"])
            for r in doc["repeats"]]


def stored_noise(device) -> Term | None:
    """The run-to-run noise stored in a device file (``timing fit`` on runs with repeats), as
    :func:`log_sigma`'s Term of the stored repeats; None when the file stores none. ``device`` is
    a :class:`refsim.timing.model.DeviceModel` (its ``noise``, validated by
    :func:`refsim.timing.model.read_noise_doc`)."""
    if device.noise is None:
        return None
    return log_sigma(stored_repeats(device.noise, device.name), name="noise")


def band_noise(device=None) -> tuple[Term, str]:
    """The run-to-run noise of a what-if band when none is given (``refsim whatif`` without
    ``--noise-pct``), and a line saying where it came from.

    The engine's published byte-identical repeats (:data:`PUBLISHED_REPEATS`, 2 degrees of
    freedom), **pooled** with the device file's own repeats when ``timing fit`` stored some
    (:func:`stored_noise`): :func:`log_sigma` over both, so each repeat counts by its degrees of
    freedom. A device's own repeats alone would set the band from as little as one pair of runs
    (the desktop set's pc-E / pc-F: 0.70 %, 1 degree of freedom, whose normal-theory 90 % interval
    spans 0.51-16 x the value); pooled, a file's many repeats outweigh the published two, and one
    pair moves the published figure by its share. ``device`` is a
    :class:`refsim.timing.model.DeviceModel` or None.
    """
    from refsim.fmt import plural
    published = [r for r in PUBLISHED_REPEATS if r.same_reads]
    own = [] if device is None or device.noise is None else stored_repeats(device.noise, device.name)
    t = log_sigma(own + published)
    if not own:
        return t, f"published byte-identical repeats: {t.source}"
    return t, (f"pooled: the device file's {plural(len(own), 'repeat')} "
               f"({plural(degrees_of_freedom(own), 'degree')} of freedom) and the published "
               f"byte-identical repeats ({degrees_of_freedom(published)}): {t.source}")


def auto_budget_sigma(paths, name: str = "auto_budget_sigma") -> Term:
    """Run-to-run spread of the ``--cache-mb auto`` budget on one device: the standard deviation
    (``ddof = 1``) of ``ln cache_mb`` over the recorded runs whose preamble says ``cache_auto=1``.

    The engine sizes the cache once at load from the memory the system reports available
    (bmoe-engine.md §3.3), so two runs of one configuration get different budgets ("auto sized
    itself differently per run (5.3-7.4 GiB, tracking free RAM)": the desktop findings). A cell
    priced against another cell of an auto session ran at a budget that differs by this spread
    (``sqrt(2) sigma`` for two runs), which :mod:`refsim.timing.noise`'s ``sigma`` leaves out:
    there the reads are given. The interval: the leave-one-out estimates' extremes.

    Parameters
    ----------
    paths : iterable of str
        Metrics CSVs (``path@overrides`` specs are cut at ``@``).

    Raises
    ------
    ConfigError
        Fewer than three auto runs (no leave-one-out spread); a file's reader errors.
    """
    from refsim.telemetry.metrics_reader import read_metrics
    got = []
    for spec in paths:
        run = read_metrics(str(spec).split("@")[0], sidecar=False)
        if run.config.get("cache_auto") == "1" and run.config.get("cache_mb", "0") != "0":
            got.append((os.path.basename(run.path), float(run.config["cache_mb"])))
    if len(got) < 3:
        raise ConfigError(f"auto budget spread: {len(got)} run(s) with cache_auto=1, expected >= 3")
    logs = np.log([b for _, b in got])
    loo = [float(np.std(np.delete(logs, i), ddof=1)) for i in range(logs.size)]
    sd = float(np.std(logs, ddof=1))
    return Term(name, sd, min(loo + [sd]), max(loo + [sd]), "sd of ln cache_mb (one run)", "fitted",
                "cache_mb of the --cache-mb auto runs: "
                + ", ".join(f"{n} {b:g}" for n, b in got),
                f"{len(got)} runs; interval: the leave-one-out estimates")
