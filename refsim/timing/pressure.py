"""Memory pressure: major faults per token from resident demand beyond RAM, and their cost
(issue 28 item 4; docs/memory-pressure.md).

The rule
--------
A run asks the device to keep ``D`` MiB resident (:mod:`refsim.cache.demand`: pinned + anon +
page cache); ``P`` MiB of it is evictable (anon + page cache). The device gives the process
``R`` MiB (``--ram-mb``: ``MemAvailable`` before the run) but the kernel does not let
``MemAvailable`` fall to 0: it reclaims to keep a reserve ``H`` MiB free (Android's kswapd at
swappiness 160 against anonymous memory: engine-docs bench-notes 2026-07-20 layer-lfu-verdict.md;
the runs below sit at ``MemAvailable`` ≈ H while the kernel swaps). So the kernel holds out::

    E = max(0, D + H - R)                    MiB evicted (zram, or page cache dropped)
    q = min(1, E / P)                        fraction of the evictable pool not resident

A decode token touches ``W`` MiB of the evictable pool (``ResidentDemand.touched_bytes``: cache
hits, the dense set unless pinned, the KV read, one recurrent slot). Each touched page that is not
resident is a major fault (swap-in from zram, or a re-read of a file page: engine-docs
telemetry.md, ``majflt``)::

    majflt/token = 256 * g * W * q           256 pages of 4 KiB per MiB (majflt_mib = majflt x page size)
    ms/token     = t_f * majflt/token

``g`` (the refault ratio) is what the kernel's choice of pages does: 1 if it took pages at random
from the pool, below 1 when it prefers pages no token touches (cold cache entries, load-time
buffers). ``t_f`` is the wall cost of one fault inside the decode (fault service billed to
``compute_ms``: telemetry.md).

Fitted (:func:`fit_pressure`) on the engine's runs that record ``majflt``, ``swap_mib``,
``rss_mib`` and ``mem_available_mib`` per token (the 2026-07-22 phone runs; ``--dense-weights
ahwb``, so the evictable pool is the process's RSS and ``E`` is its ``swap_mib``):

- ``H`` = each run's median ``mem_available_mib``; the term's interval spans the runs.
- ``g`` = Σ majflt / Σ (256 W q) over the kept tokens, with each token's measured
  ``q = swap / (rss + swap)``; pooled value, interval = the runs' own values. The runs do the same
  work at the same demand and differ 58x in faults per token (10.8 to 631.7): the spread is device
  state at entry (the authors' note, findings.md), which no configuration input carries; it stays
  in the interval.
- ``t_f`` = least squares of ``compute_ms + mgmt_ms`` on ``majflt`` with a per-run intercept and
  per-run slope on the flash read; interval = the leave-one-run-out refits.
- ``E0`` (:attr:`PressureFit.evicted`) = the runs' median ``swap_mib``: the eviction this phone
  showed at that recipe, used where a published cell gives no ``R``.

Not identified by these runs: the floor of faults without eviction (no token ran without swap),
``R`` of the runs (no sidecar), anything about ``mmap``/``anon`` dense (every run is ``ahwb``).

API (what a what-if calls)
--------------------------
- :func:`predict_majflt` ``(fit, demand_mib, ram_mib, touched_mib_per_token, evictable_mib=None)``
  -> :class:`~refsim.timing.terms.Term` in faults/token;
- :func:`pressure_term` ``(device_or_fit, demand_mib, ram_mib, touched_mib_per_token,
  evictable_mib=None)`` -> Term in ms/token (``t_f`` x the above, interval ends multiplied);
- :func:`majflt_at_excess` the same from an eviction ``E`` in MiB instead of ``R``;
- :func:`dense_mode_delta` the ``--dense-weights`` anon-vs-ahwb term (ms/token);
- :data:`PHONE_FIT` the fit on the shared phone runs, as numbers (``tests/timing/test_pressure.py``
  refits it from the files).

MiB = 2^20 bytes throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim.errors import ConfigError
from refsim.timing.terms import Term

PAGES_PER_MIB = 256
"""4 KiB pages per MiB (the engine's ``majflt_mib`` = majflt x page size; Android arm64 pages)."""

NEEDED_COLUMNS = ("majflt", "swap_mib", "rss_mib", "mem_available_mib", "read_bytes", "compute_ms")


@dataclass(frozen=True)
class RunPressure:
    """One recorded run's kept tokens as the fault model reads them (arrays of shape (n,), float64).

    Attributes
    ----------
    label : str
    majflt : major faults per token.
    ms : ``compute_ms + mgmt_ms`` per token (where fault service lands).
    read_mib : flash read per token, MiB.
    touched_mib : evictable MiB the token touched (``W``).
    evicted_mib : ``swap_mib`` (the process's anonymous pages in zram).
    resident_mib : ``rss_mib``.
    mem_available_mib : the device's ``MemAvailable``.
    """

    label: str
    majflt: np.ndarray
    ms: np.ndarray
    read_mib: np.ndarray
    touched_mib: np.ndarray
    evicted_mib: np.ndarray
    resident_mib: np.ndarray
    mem_available_mib: np.ndarray

    @property
    def n(self) -> int:
        return int(self.majflt.size)

    @property
    def evicted_fraction(self) -> np.ndarray:
        """``q`` per token: ``swap / (rss + swap)``."""
        return self.evicted_mib / np.maximum(self.resident_mib + self.evicted_mib, 1e-9)

    @property
    def exposure(self) -> np.ndarray:
        """``256 W q`` per token: the faults a refault ratio of 1 gives."""
        return PAGES_PER_MIB * self.touched_mib * self.evicted_fraction

    @property
    def refault(self) -> float:
        """This run's ``g``: Σ majflt / Σ exposure."""
        return float(self.majflt.sum() / max(self.exposure.sum(), 1e-300))


def run_pressure(run, demand, trim: int = 50, label: str | None = None) -> RunPressure:
    """Read one ``MetricsRun`` (refsim.telemetry.metrics_reader) for the fault model.

    Parameters
    ----------
    run : MetricsRun
        A v1/v2 metrics CSV, read (one turn).
    demand : refsim.cache.demand.ResidentDemand
        The run's resident demand (its dense mode decides whether the dense set is touched
        evictable memory).
    trim : int, default 50
        Warm-up tokens left out (the cache filling, docs/timing.md).

    Returns
    -------
    RunPressure
        ``W`` per token = ``max(0, token_demand_MiB - read)`` hits + ``demand.touched_bytes`` at
        ``n_past = n_prompt + step`` (the ``# summary``'s ``token_demand_MiB`` and ``n_prompt``).

    Raises
    ------
    ConfigError
        A missing column or summary key, ``majflt`` all 0 (the engine's "unmeasured"), fewer than
        2 tokens after the trim; the message names the file.
    """
    from refsim import MIB
    label = label or run.path
    missing = [c for c in NEEDED_COLUMNS if not run.has(c)]
    if missing:
        raise ConfigError(f"{label}: no {', '.join(missing)} column (a legacy or v1 file without the "
                          f"memory columns); expected a bmoe_metrics v1/v2 file that records them")
    summ = run.summary
    for key in ("token_demand_MiB", "n_prompt"):
        if key not in summ:
            raise ConfigError(f"{label}: the # summary line has no {key}=; expected the engine's trailer")
    d = run.data
    n = run.n_rows
    if n - trim < 2:
        raise ConfigError(f"{label}: {n} tokens, fewer than 2 left after trim {trim}")
    if not d["majflt"].any():
        raise ConfigError(f"{label}: majflt is 0 on every row (the engine's 'unmeasured'); expected "
                          f"a run that records major faults")
    keep = slice(trim, None)
    read = d["read_bytes"][keep].astype(np.float64) / MIB
    hits = np.maximum(float(summ["token_demand_MiB"]) - read, 0.0)
    n_past = int(summ["n_prompt"]) + d["step"][keep].astype(np.int64) if run.has("step") else \
        int(summ["n_prompt"]) + np.arange(trim, n)
    fixed = demand.touched_bytes(0.0, 0) / MIB
    kv = demand.kv_bytes_per_token / MIB
    mgmt = d["mgmt_ms"] if run.has("mgmt_ms") else np.zeros(n)
    return RunPressure(
        label=label, majflt=d["majflt"][keep].astype(np.float64),
        ms=(d["compute_ms"] + mgmt)[keep].astype(np.float64), read_mib=read,
        touched_mib=hits + fixed + kv * n_past, evicted_mib=d["swap_mib"][keep].astype(np.float64),
        resident_mib=d["rss_mib"][keep].astype(np.float64),
        mem_available_mib=d["mem_available_mib"][keep].astype(np.float64))


@dataclass(frozen=True)
class PressureFit:
    """The fault model's fitted terms (see the module docstring).

    Attributes
    ----------
    reserve : Term
        ``H``, MiB of ``MemAvailable`` the kernel keeps by reclaiming.
    refault : Term
        ``g``, faults per non-resident touched page.
    ms_per_fault : Term
        ``t_f``, ms of decode wall per major fault.
    evicted : Term
        ``E0``, the runs' median ``swap_mib`` (MiB evicted at the fitted recipe).
    source : str
        The runs it was fitted on.
    """

    reserve: Term
    refault: Term
    ms_per_fault: Term
    evicted: Term
    source: str

    def terms(self) -> tuple[Term, ...]:
        return (self.reserve, self.refault, self.ms_per_fault, self.evicted)

    def as_dict(self) -> dict:
        return {"source": self.source, **{t.name: t.as_dict() for t in self.terms()}}

    @classmethod
    def from_dict(cls, obj: dict, where: str = "pressure fit") -> "PressureFit":
        """Rebuild from :meth:`as_dict`'s output.

        Raises
        ------
        ConfigError
            A missing key or a term that is not valid (:class:`Term`'s checks), naming ``where``.
        """
        try:
            terms = {k: Term(**obj[k]) for k in ("H", "g", "t_f", "E0")}
            return cls(terms["H"], terms["g"], terms["t_f"], terms["E0"], str(obj["source"]))
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"{where}: expected keys source, H, g, t_f, E0 with Term fields, "
                              f"got {exc}") from None


def _tf_lstsq(runs: list[RunPressure]) -> float:
    """Least squares ``ms = a_r + b_r * read + t_f * majflt``: per-run intercept and read slope,
    one fault cost."""
    blocks, y = [], []
    k = len(runs)
    for i, r in enumerate(runs):
        X = np.zeros((r.n, 2 * k + 1))
        X[:, i] = 1.0
        X[:, k + i] = r.read_mib
        X[:, 2 * k] = r.majflt
        blocks.append(X)
        y.append(r.ms)
    X = np.vstack(blocks)
    scale = np.maximum(np.abs(X).max(axis=0), 1e-300)
    if np.linalg.matrix_rank(X / scale) < X.shape[1]:
        raise ConfigError(f"pressure fit: t_f is not identified on {', '.join(r.label for r in runs)} "
                          f"(the faults are a per-run affine function of the flash read)")
    return float(np.linalg.lstsq(X, np.concatenate(y), rcond=None)[0][-1])


def fit_pressure(runs: list[RunPressure], source: str = "") -> PressureFit:
    """Fit ``H``, ``g``, ``t_f`` and ``E0`` on runs that record faults and memory.

    Parameters
    ----------
    runs : list of RunPressure
        At least 2 (the intervals are across runs).
    source : str
        What the runs are (for the terms' ``source``).

    Returns
    -------
    PressureFit

    Raises
    ------
    ConfigError
        Fewer than 2 runs, no fault in any run, or ``t_f`` not identified (in every run, or
        with one run left out, the faults are an affine function of the flash read).
    """
    if len(runs) < 2:
        raise ConfigError(f"pressure fit: {len(runs)} run(s), expected at least 2 (the intervals "
                          f"are across runs)")
    src = source or ", ".join(r.label for r in runs)
    h = np.array([np.median(r.mem_available_mib) for r in runs])
    g_runs = np.array([r.refault for r in runs])
    total_exposure = sum(float(r.exposure.sum()) for r in runs)
    if not total_exposure > 0 or not any(r.majflt.any() for r in runs):
        raise ConfigError("pressure fit: no run has both faults and evicted memory")
    g = sum(float(r.majflt.sum()) for r in runs) / total_exposure
    tf = _tf_lstsq(runs)
    loo = [_tf_lstsq(runs[:i] + runs[i + 1:]) for i in range(len(runs))] if len(runs) > 2 else [tf]
    e0 = np.array([np.median(r.evicted_mib) for r in runs])
    return PressureFit(
        reserve=Term("H", float(h.mean()), float(h.min()), float(h.max()), "MiB", "fitted", src,
                     "mean of the runs' median MemAvailable; interval: the runs' medians"),
        refault=Term("g", g, float(min(g_runs.min(), g)), float(max(g_runs.max(), g)),
                     "faults per non-resident touched page", "fitted", src,
                     "pooled sum(majflt) / sum(256 W q); interval: each run's own ratio (same "
                     "demand, device state at entry differs)"),
        ms_per_fault=Term("t_f", tf, float(max(0.0, min(min(loo), tf))), float(max(max(loo), tf)),
                          "ms/fault", "fitted", src,
                          "least squares of compute+mgmt ms on majflt (per-run intercept and read "
                          "slope); interval: leave-one-run-out refits, clipped at 0"),
        evicted=Term("E0", float(np.median(e0)), float(e0.min()), float(e0.max()), "MiB", "fitted",
                     src, "the runs' median swap_mib (evicted anon at the fitted recipe)"),
        source=src)


_PHONE = "phone 2026-07-22 drop-cold"
PHONE_FIT = PressureFit(
    reserve=Term("H", 1323.6875, 1283.0500000000002, 1357.3, "MiB", "fitted", _PHONE,
                 "mean of the runs' median MemAvailable; interval: the runs' medians"),
    refault=Term("g", 0.024496398711526726, 0.0011276671297858237, 0.05467132545019337,
                 "faults per non-resident touched page", "fitted", _PHONE,
                 "pooled sum(majflt) / sum(256 W q); interval: each run's own ratio (same demand, "
                 "device state at entry differs)"),
    ms_per_fault=Term("t_f", 0.05311831161231709, 0.03489995682968372, 0.07117603366758253,
                      "ms/fault", "fitted", _PHONE,
                      "least squares of compute+mgmt ms on majflt (per-run intercept and read slope); "
                      "interval: leave-one-run-out refits, clipped at 0"),
    evicted=Term("E0", 281.9, 276.3, 318.25, "MiB", "fitted", _PHONE,
                 "the runs' median swap_mib (evicted anon at the fitted recipe)"),
    source=_PHONE)
"""The fit on the four shared phone runs (Qwen3.6-35B-A3B Q4_K_M, cache 3000 MiB, ``ahwb``,
``--overlap``, 4 lanes, n_ctx 4096, trim 50): :func:`fit_pressure` of
:func:`refsim.testing.pressure_runs.drop_cold_runs`, as numbers so that a what-if needs no shared
folder (tests/timing/test_pressure.py refits it and compares)."""


def _check(name: str, v: float, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0 \
            or (positive and v == 0):
        raise ConfigError(f"memory pressure: {name} {v!r}, expected a finite number "
                          f"{'> 0' if positive else '>= 0'}")
    return float(v)


def _majflt(g: float, touched: float, excess: float, evictable: float) -> float:
    return PAGES_PER_MIB * g * touched * min(1.0, excess / evictable)


def majflt_at_excess(fit: PressureFit, excess_mib: float, evictable_mib: float,
                     touched_mib_per_token: float, excess_lo: float | None = None,
                     excess_hi: float | None = None) -> Term:
    """Major faults per token when ``excess_mib`` of an ``evictable_mib`` pool is held out.

    ``256 g W min(1, E/P)``; the interval takes ``g``'s ends and ``[excess_lo, excess_hi]``
    (default ``E`` itself). Raises ConfigError on a negative, non-finite or zero-pool input.
    """
    e = _check("excess MiB", excess_mib)
    p = _check("evictable MiB", evictable_mib, positive=True)
    w = _check("touched MiB/token", touched_mib_per_token)
    lo_e = e if excess_lo is None else _check("excess MiB (low)", excess_lo)
    hi_e = e if excess_hi is None else _check("excess MiB (high)", excess_hi)
    g = fit.refault
    return Term("majflt", _majflt(g.value, w, e, p), _majflt(g.lo, w, min(lo_e, e), p),
                _majflt(g.hi, w, max(hi_e, e), p), "faults/token", "fitted",
                fit.source, f"256 g W min(1, E/P): E {e:.0f} MiB of P {p:.0f}, W {w:.0f} MiB/token")


def predict_majflt(fit: PressureFit, demand_mib: float, ram_mib: float, touched_mib_per_token: float,
                   evictable_mib: float | None = None) -> Term:
    """Major faults per token of a configuration: ``E = max(0, D + H - R)``, then
    :func:`majflt_at_excess` (``H``'s interval carried into ``E``'s).

    Parameters
    ----------
    fit : PressureFit
    demand_mib : float
        ``D``, resident demand (``ResidentDemand.total_bytes`` / 2^20).
    ram_mib : float
        ``R``, MemAvailable before the run (``--ram-mb``).
    touched_mib_per_token : float
        ``W`` (``ResidentDemand.touched_bytes`` / 2^20).
    evictable_mib : float, optional
        ``P``; default ``demand_mib`` (nothing pinned).

    Returns
    -------
    Term
        faults/token with its interval.

    Raises
    ------
    ConfigError
        A negative or non-finite input, ``R`` or ``P`` equal to 0, ``P > D``.
    """
    d = _check("demand MiB", demand_mib)
    r = _check("ram MiB", ram_mib, positive=True)
    p = d if evictable_mib is None else _check("evictable MiB", evictable_mib)
    if p > d:
        raise ConfigError(f"memory pressure: evictable {p:g} MiB > demand {d:g} MiB")
    if p == 0:
        return Term("majflt", 0.0, 0.0, 0.0, "faults/token", "fitted", fit.source,
                    "nothing evictable (all pinned)")
    h = fit.reserve
    ex = lambda hh: max(0.0, d + hh - r)  # noqa: E731
    return majflt_at_excess(fit, ex(h.value), p, touched_mib_per_token, ex(h.lo), ex(h.hi))


def _as_fit(device_or_fit) -> PressureFit:
    if isinstance(device_or_fit, PressureFit):
        return device_or_fit
    fit = getattr(device_or_fit, "pressure", None)
    if isinstance(fit, PressureFit):
        return fit
    raise ConfigError(f"memory pressure: {type(device_or_fit).__name__} has no pressure fit; "
                      f"expected a PressureFit (e.g. refsim.timing.pressure.PHONE_FIT)")


def fault_time(fit: PressureFit, majflt: Term) -> Term:
    """``t_f x majflt`` in ms/token (interval ends multiplied: both factors are >= 0)."""
    t = fit.ms_per_fault
    return Term("pressure", t.value * majflt.value, t.lo * majflt.lo, t.hi * majflt.hi, "ms/token",
                "fitted", fit.source, f"t_f {t.value:.4g} ms/fault x {majflt.value:.4g} faults/token")


def pressure_term(device_or_fit, demand_mib: float, ram_mib: float, touched_mib_per_token: float,
                  evictable_mib: float | None = None) -> Term:
    """The memory-pressure term of a device what-if: ms per token of fault service.

    ``device_or_fit`` is a :class:`PressureFit` or an object with a ``pressure`` attribute holding
    one. Other arguments and errors as :func:`predict_majflt`.
    """
    fit = _as_fit(device_or_fit)
    return fault_time(fit, predict_majflt(fit, demand_mib, ram_mib, touched_mib_per_token, evictable_mib))


def dense_mode_delta(device_or_fit, anon, ahwb, hit_mib_per_token: float, n_past: int,
                     ram_mib: float | None = None) -> Term:
    """``--dense-weights anon`` minus ``ahwb``: ms/token the model adds for unpinned dense weights.

    Parameters
    ----------
    anon, ahwb : refsim.cache.demand.ResidentDemand
        The same configuration in both modes (equal total demand).
    hit_mib_per_token : float
        Expert-cache hits per token, MiB.
    n_past : int
        Context positions attended.
    ram_mib : float, optional
        ``R``; default: the fit's own eviction ``E0`` (its interval) held out of both pools.

    Returns
    -------
    Term
        ms/token: ``anon``'s pressure term minus ``ahwb``'s, both at the same ``g``, ``t_f`` and
        eviction; the interval takes the low ends of all three together, then the high ends (the
        difference grows with each when a token touches a larger share of the anon pool than of
        the ahwb pool, as the dense set makes it).

    Raises
    ------
    ConfigError
        The two demands are not one configuration in the two modes.
    """
    from refsim import MIB
    fit = _as_fit(device_or_fit)
    if anon.dense_weights != "anon" or ahwb.dense_weights != "ahwb" or anon.total_bytes != ahwb.total_bytes:
        raise ConfigError("dense_mode_delta: expected the same configuration with --dense-weights "
                          "anon and ahwb")
    g, t = fit.refault, fit.ms_per_fault
    h = fit.reserve

    def delta(gg: float, tt: float, end: str) -> float:
        out = 0.0
        for sign, d in ((1.0, anon), (-1.0, ahwb)):
            w = d.touched_bytes(hit_mib_per_token * MIB, n_past) / MIB
            p = d.evictable_bytes / MIB
            if ram_mib is None:
                e = getattr(fit.evicted, end)
            else:
                e = max(0.0, d.total_bytes / MIB + getattr(h, end) - _check("ram MiB", ram_mib, True))
            out += sign * tt * _majflt(gg, w, e, p) if p > 0 else 0.0
        return out

    ends = sorted([delta(g.lo, t.lo, "lo"), delta(g.hi, t.hi, "hi")])
    v = delta(g.value, t.value, "value")
    return Term("dense_anon_minus_ahwb", v, min(ends[0], v), max(ends[1], v), "ms/token", "fitted",
                fit.source, "pressure(anon) - pressure(ahwb) at the same g, t_f and E (both ends "
                            "of each together): the dense set joins the evictable pool and the "
                            "pages a token touches")
