"""What a recorded run's prefill tells about a many-position decode.

Every shared run decodes one position per decode, but each starts with a **prefill**: the prompt
(``n_prompt`` = P tokens) decoded as one batch (the engine's ``n_batch`` = ``n_ctx`` >= P and
``n_ubatch`` = ``n_batch`` by default, so one ubatch: bmoe-engine.md §2), on a cold expert cache.
That is the only place the engine's recorded data varies the positions per decode. Its time is
in the ``# summary`` trailer (``n_prompt``, ``prefill_s``: v1) or the stdout log's ``prefill:``
line (legacy runs: :mod:`refsim.telemetry.log_reader`). Its flash read is not recorded, but it is
recoverable exactly from the first decode row:

**The prefill's lookups.** ``cache_hit_pct`` is cumulative and includes prefill (bmoe-engine.md
§3.7); a prefill batch looks up each distinct routed expert of a layer once (§3.2) and, on a cold
cache, misses every one. The first decode token looks up ``l = n_layer x k`` experts (one per
routed slot; the first decode token is never dropped, §3.6) and misses ``m = read_bytes / e`` of
them (``e``: one expert entry's bytes). With ``p`` its row's cumulative hit fraction::

    p = (l - m) / (L0 + l)      =>      L0 = (l - m) / p - l

``L0`` is the prefill's distinct (layer, expert) lookups, and its flash read is ``U = L0 x e``
MiB. On the shared Qwen3-30B route trace's own metrics file (k = 6, 28-token prompt) this gives
2647 lookups against the 2662 distinct (layer, expert) pairs its prefill rows hold (2664 with the
trace's exact first-row miss count instead of its bytes at the mean entry), and 7211 MiB against
the 7275 MiB they read (``tests/timing/test_terms_positions.py``). ``e`` differs between the
layers of a mixed-quant
model: the first row's misses are converted at the smallest and at the largest entry for the
interval of ``L0`` (with the hit percentage's rounding, two decimals); ``U`` is ``L0`` times the
mean entry (a prefill's union is spread over every layer: on the trace the mean entry is 0.3 %
off the exact bytes), or, when only the smallest and largest entries are known
(:meth:`ExpertSizes.from_range`), anything between them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim import MIB
from refsim.errors import ConfigError
from refsim.timing.terms import Term

HIT_PCT_ROUNDING = 0.005
"""Half the last printed digit of ``cache_hit_pct`` (``%.2f``), percent."""


@dataclass(frozen=True)
class ExpertSizes:
    """What converts a decode token's flash bytes into expert lookups.

    Attributes
    ----------
    lookups_per_token : int
        ``n_layer x k``: distinct experts one decode token looks up (trunk layers x top-k).
    bytes_min, bytes_max, bytes_mean : float
        One expert entry's bytes: smallest and largest layer, and the mean over a token's routed
        slots (``T / lookups_per_token``).
    source : str
        Where the sizes come from (a GGUF's tensor table, a trace preamble, a published figure).
    mean_exact : bool
        False when only the smallest and largest entries are known (which layers have which is
        not): the mean is their midpoint and anything between them.
    """

    lookups_per_token: int
    bytes_min: float
    bytes_max: float
    bytes_mean: float
    source: str
    mean_exact: bool = True

    def __post_init__(self):
        if self.lookups_per_token < 1:
            raise ConfigError(f"expert sizes: lookups_per_token {self.lookups_per_token}, expected >= 1")
        if not 0 < self.bytes_min <= self.bytes_mean <= self.bytes_max:
            raise ConfigError(f"expert sizes: expected 0 < min <= mean <= max, got {self.bytes_min}, "
                              f"{self.bytes_mean}, {self.bytes_max}")

    @classmethod
    def from_model_bytes(cls, model_bytes, k: int, source: str = "the GGUF's tensor table"):
        """From :class:`refsim.model.ModelBytes` (trunk layers only; ``k`` experts per token)."""
        trunk = [lb for lb in model_bytes.layers if not lb.is_nextn and lb.n_expert]
        n = len(trunk) * min(k, min(lb.n_expert for lb in trunk))
        return cls(n, float(min(lb.expert_bytes for lb in trunk)),
                   float(max(lb.expert_bytes for lb in trunk)), model_bytes.t_bytes(k) / n, source)

    @classmethod
    def from_range(cls, n_layer: int, k: int, bytes_min: float, bytes_max: float, source: str):
        """From the smallest and largest entry of a model whose layer mix is unknown (a published
        pair of sizes, bmoe-engine.md §3.1): the mean is anything between them."""
        return cls(n_layer * k, float(bytes_min), float(bytes_max), 0.5 * (bytes_min + bytes_max),
                   source, mean_exact=False)

    @classmethod
    def from_layer_bytes(cls, expert_bytes, k: int, source: str):
        """From one entry size per MoE layer (e.g. a route trace's ``# layer=... expert_bytes=``
        preamble) and ``k`` experts per token."""
        eb = np.asarray(expert_bytes, dtype=np.float64)
        return cls(int(eb.size) * k, float(eb.min()), float(eb.max()), float(eb.mean()), source)


def prefill_union(run, sizes: ExpertSizes, label: str | None = None) -> Term:
    """The prefill's flash read ``U`` (MiB) from the run's first decode row (module docstring).

    Parameters
    ----------
    run : MetricsRun
        A one-shot run (the first row belongs to turn 0, after a cold prefill) with an expert
        cache and no prefetch (prefetch reads would join the first row's ``read_bytes``).
    sizes : ExpertSizes
    label : str, optional
        Names the run in messages (default: its path).

    Returns
    -------
    Term
        ``U`` in MiB; value at the mean entry size and the printed hit %, interval over the entry
        sizes and the hit % rounding. Its ``note`` carries the lookups ``L0``.

    Raises
    ------
    ConfigError
        No rows, no cache (``cache_hit_pct`` -1), a first-row hit of 0 % (nothing to solve), a
        prefetching run, or a solution below 0 lookups (the sizes do not fit the run).
    """
    label = label or run.path
    hit = run.column("cache_hit_pct")
    read = run.column("read_bytes")
    if hit is None or read is None or run.n_rows == 0:
        raise ConfigError(f"{label}: no decode rows with cache_hit_pct and read_bytes")
    if run.number("prefetch", 0) or run.number("predict_prefetch", 0):
        raise ConfigError(f"{label}: a prefetching run (its first row's read_bytes include prefetch "
                          f"reads); the prefill's lookups cannot be recovered")
    p, rb, l = float(hit[0]), float(read[0]), sizes.lookups_per_token
    if p == -1:
        raise ConfigError(f"{label}: no expert cache (cache_hit_pct -1); the prefill's flash read is "
                          f"not recorded")
    if not p > HIT_PCT_ROUNDING:
        raise ConfigError(f"{label}: first decode row hit {p:g} %; the prefill's lookups cannot be "
                          f"solved from a zero hit")

    def lookups(e: float, pct: float) -> float:
        return (l - rb / e) / (pct / 100.0) - l

    corners = [lookups(e, q) for e in (sizes.bytes_min, sizes.bytes_max)
               for q in (p - HIT_PCT_ROUNDING, p + HIT_PCT_ROUNDING)]
    l0 = lookups(sizes.bytes_mean, p)
    if l0 < 0 or min(corners) < 0:
        raise ConfigError(f"{label}: the first row ({rb:.0f} bytes read, {p:g} % hit) gives fewer than 0 "
                          f"prefill lookups with entries of {sizes.bytes_min:.0f}..{sizes.bytes_max:.0f} "
                          f"bytes; the expert sizes do not fit this run")
    e = sizes.bytes_mean / MIB
    e_lo, e_hi = ((e, e) if sizes.mean_exact else (sizes.bytes_min / MIB, sizes.bytes_max / MIB))
    return Term("U", l0 * e, min(corners) * e_lo, max(corners) * e_hi, "MiB", "fitted",
                f"{label}: first decode row ({p:.2f} % cumulative hit, {rb / MIB:.1f} MiB read, {l} "
                f"lookups) and {sizes.source}",
                f"L0 = {l0:.0f} prefill lookups [{min(corners):.0f}, {max(corners):.0f}] x the mean "
                f"entry {sizes.bytes_mean / MIB:.4f} MiB")


@dataclass(frozen=True)
class PrefillObs:
    """One run's prefill as the device model sees it.

    Attributes
    ----------
    label : str
    model : str
        The model file (the compute floor's key).
    n_prompt : int
        P: positions of the prefill batch.
    prefill_ms : float
        Measured prefill wall time, ms.
    union : Term
        ``U``: the prefill's flash read, MiB (:func:`prefill_union`, or a sibling run's with the
        same model and prompt when this run has no cache).
    lanes : int
    overlap : bool
    cache : bool
    threads : int or None
        Compute threads (``threads=`` of the preamble; None for legacy files).
    floor : Term
        The same run's compute floor ``C`` for one position, ms (session calibration on its own
        decode tokens: refsim.timing.calibrate).
    io_ms_per_mib : float or None
        The same run's decode flash time per MiB (sum ``io_ms`` / sum read MiB over the kept
        tokens): serial wall time, or under ``--overlap`` summed lane-busy time; None without
        reads.
    first_mgmt_ms_per_mib : float or None
        The same run's first decode row's ``mgmt_ms`` per MiB read: the bookkeeping of a cache
        the prefill just filled (cold page commits, and evictions when the prefill overflowed the
        budget); None without an ``mgmt_ms`` column (legacy files fold it into ``compute_ms``).
    """

    label: str
    model: str
    n_prompt: int
    prefill_ms: float
    union: Term
    lanes: int
    overlap: bool
    cache: bool
    threads: int | None
    floor: Term
    io_ms_per_mib: float | None
    first_mgmt_ms_per_mib: float | None = None


def prefill_figures(run, log=None, label: str | None = None) -> tuple[int, float]:
    """``(n_prompt, prefill_ms)`` of a one-shot run: its first ``# summary`` trailer, else the
    stdout log's ``prefill:`` line (:class:`refsim.telemetry.log_reader.EngineLog`).

    Raises
    ------
    ConfigError
        Neither gives them (names what to supply).
    """
    label = label or run.path
    if run.summaries and "n_prompt" in run.summaries[0] and "prefill_s" in run.summaries[0]:
        s = run.summaries[0]
        return int(s["n_prompt"]), 1000.0 * float(s["prefill_s"])
    if log is not None and log.n_prompt is not None:
        return log.n_prompt, 1000.0 * log.prefill_s
    raise ConfigError(f"{label}: no prefill figures (no '# summary' trailer with n_prompt and "
                      f"prefill_s, and no engine log with a 'prefill:' line)")


def prefill_obs(run, data, device, union: Term, log=None, label: str | None = None) -> PrefillObs:
    """Build a :class:`PrefillObs` for a one-shot run.

    Parameters
    ----------
    run : MetricsRun
        The run as read (its trailer or ``log`` gives ``n_prompt`` and ``prefill_s``; its preamble
        ``threads=``).
    data : RunData
        The same run as the device model sees it (:func:`refsim.timing.runs.run_data`).
    device : DeviceModel
        The device its decode tokens calibrate: the run's own floor ``C`` is the Huber location
        of its CPU column less the device's other CPU terms
        (:func:`refsim.timing.calibrate.calibrate_floor`, ``method='column'``: the compute of a
        typical position, as the prefill's compute is compared with it).
    union : Term
        The prefill's flash read ``U`` in MiB (:func:`prefill_union` of this run or of a run of
        the same model and prompt).
    log : EngineLog, optional

    Raises
    ------
    ConfigError
        No prefill figures; the calibration's refusals.
    """
    from refsim.timing.calibrate import calibrate_floor
    label = label or data.label
    n_prompt, ms = prefill_figures(run, log, label)
    cal = calibrate_floor(device, data, method="column")
    x = float(data.x.sum())
    rate = float(data.io.sum()) / x if x > 0 and float(data.io.sum()) > 0 else None
    threads = run.config.get("threads")
    mgmt, read = run.column("mgmt_ms"), run.column("read_bytes")
    first = (float(mgmt[0]) / (float(read[0]) / MIB) if mgmt is not None and read is not None
             and run.n_rows and read[0] > 0 else None)
    return PrefillObs(label=label, model=data.model, n_prompt=n_prompt, prefill_ms=ms, union=union,
                      lanes=data.lanes, overlap=data.overlap, cache=data.cache,
                      threads=int(threads) if threads is not None else None, floor=cal.floor,
                      io_ms_per_mib=rate, first_mgmt_ms_per_mib=first)
