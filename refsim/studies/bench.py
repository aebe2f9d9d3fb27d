"""Throughput and device-pressure statistics of recorded runs (``refsim bench``).

Input: :class:`refsim.telemetry.metrics_reader.MetricsRun` (the engine's per-token CSV and its
``.metrics`` sidecar). Definitions (docs/analysis.md, "refsim bench"; the first two tables are
those of the engine's ``scripts/bench-analyze.py``, same numbers on single-turn runs without
speculation):

- a token's time ``t_i`` (ms) is its share of its decode: the group's first-row ``wall_ms /
  mtp_batch`` (telemetry.md, ``mtp_batch``); ``wall_ms`` itself without speculation;
- decode tok/s **mean** = tokens / Σ ``wall_ms`` s; per-token tok/s = 1000 / ``t_i`` over tokens
  with ``t_i`` > 0, and its min, max, median, p5, p95 (linear interpolation between order
  statistics, as ``trace_io.percentile``);
- prefill tok/s, TTFT (= ``load_s + prefill_s``) and cache hit % from the ``# summary`` trailer
  (hit: the last turn's lifetime figure; ``-1`` = no cache, printed as none);
- flash read per token = Σ ``read_bytes`` / 2^20 / tokens (MiB);
- ``stall``, ``compute``, ``io``, ``mgmt`` ms/token = Σ column / tokens; effective flash
  bandwidth = Σ ``read_bytes`` / 2^20 / (Σ ``io_ms`` / 1000) MiB/s (the engine's ``moe-stream:``
  figure; under ``--overlap`` ``io_ms`` is summed lane-busy time, so this is per-lane-second);
- pressure from the sidecar: peak RSS = ``peak_rss_kb`` / 2^20 GiB, free-RAM floor =
  ``mem_avail_floor_kb`` / 2^20 GiB, CPU start / max ``cpu_temp_*_mC`` / 1000 °C and their rise,
  battery max ``batt_temp_max_dC`` / 10 °C;
- the trimmed per-token mean of ``t_i`` after the first ``trim`` tokens, with a percentile
  bootstrap 95 % CI (``resamples`` resamples of the trimmed tokens with replacement,
  ``numpy.random.default_rng(seed)``), as the engine authors' drop-cold findings computed it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from refsim import MIB
from refsim.errors import ConfigError
from refsim.fmt import NA, num

DEFAULT_TRIM = 50
"""Warm-up tokens dropped before the per-token mean (phone-2026-07-22-drop-cold/findings.md:
"first 50 tokens trimmed (cache warm-up, plus the one token the hook spends learning the
graph)")."""
DEFAULT_RESAMPLES = 2000
"""Bootstrap resamples (the same findings: "2000-sample bootstrap on the mean")."""
DEFAULT_SEED = 0
MAX_RESAMPLES = 100_000
_CHUNK_VALUES = 1 << 22          # resample in chunks of at most this many drawn values


def percentile_linear(sorted_values: np.ndarray, q: float) -> float:
    """Linear-interpolated ``q``-quantile (0 <= q <= 1) of an ascending array: position
    ``q (n - 1)`` between its neighbours (numpy's default ``linear`` method); 0.0 when empty."""
    if sorted_values.size == 0:
        return 0.0
    return float(np.percentile(sorted_values, 100.0 * q))


def bootstrap_mean_ci(values: np.ndarray, resamples: int = DEFAULT_RESAMPLES,
                      seed: int = DEFAULT_SEED, level: float = 0.95) -> tuple[float, float]:
    """Percentile-bootstrap CI on the mean of ``values``.

    Parameters
    ----------
    values : (n,) float ndarray, n >= 2
    resamples : int
        Resamples, each ``n`` draws with replacement (indices from
        ``numpy.random.default_rng(seed).integers(0, n)``, drawn in row-major chunks).
    seed : int
    level : float
        Two-sided coverage; the bounds are the ``(1 - level)/2`` and ``(1 + level)/2`` quantiles
        (linear) of the resampled means.

    Returns
    -------
    (lo, hi) : float, float
    """
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    if n < 2:
        raise ConfigError(f"bootstrap: need at least 2 values, got {n}")
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, _CHUNK_VALUES // n)
    for a in range(0, resamples, chunk):
        b = min(resamples, a + chunk)
        means[a:b] = x[rng.integers(0, n, size=(b - a, n))].mean(axis=1)
    lo, hi = np.percentile(means, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


@dataclass(frozen=True)
class TrimmedMean:
    """Per-token decode time after warm-up: mean with its bootstrap CI, and median (ms/token)."""

    trim: int
    n: int
    mean_ms: float
    median_ms: float
    ci_lo_ms: float
    ci_hi_ms: float
    resamples: int
    seed: int
    level: float = 0.95

    @property
    def tok_s(self) -> float:
        """1000 / mean_ms."""
        return 1000.0 / self.mean_ms if self.mean_ms > 0 else 0.0


def trimmed_mean(token_ms: np.ndarray, trim: int = DEFAULT_TRIM,
                 resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> TrimmedMean | None:
    """:class:`TrimmedMean` of ``token_ms[trim:]`` ((n,) float ms), or None if fewer than 2
    tokens remain."""
    t = np.asarray(token_ms, dtype=np.float64)[trim:]
    if t.size < 2:
        return None
    lo, hi = bootstrap_mean_ci(t, resamples, seed)
    return TrimmedMean(trim=trim, n=int(t.size), mean_ms=float(t.mean()),
                       median_ms=float(np.median(t)), ci_lo_ms=lo, ci_hi_ms=hi,
                       resamples=resamples, seed=seed)


@dataclass(frozen=True)
class BenchRow:
    """One run's figures (units in the names; None = not in the file / unmeasured).

    ``untimed`` is the reason the decode times are n/a (every row's ``wall_ms`` is 0: nothing was
    timed), else None; then every tok/s, the wall per token and the trimmed mean are None, not
    0.00 tok/s and a CI of [0.0, 0.0] (issue 26 C6).
    """

    label: str
    path: str
    layout: str
    tokens: int
    turns: int
    complete: bool
    overlap: bool | None
    decode_s: float
    tok_s_mean: float | None
    tok_s_min: float | None
    tok_s_max: float | None
    tok_s_median: float | None
    tok_s_p5: float | None
    tok_s_p95: float | None
    prefill_tps: float | None
    load_s: float | None
    prefill_s: float | None
    ttft_s: float | None
    cache_hit_pct: float | None
    read_mib_per_token: float
    wall_ms_per_token: float | None
    compute_ms_per_token: float | None
    io_ms_per_token: float | None
    stall_ms_per_token: float | None
    mgmt_ms_per_token: float | None
    flash_mib_s: float | None
    peak_rss_gib: float | None
    mem_floor_gib: float | None
    cpu_temp_start_c: float | None
    cpu_temp_max_c: float | None
    cpu_temp_rise_c: float | None
    batt_temp_max_c: float | None
    rows_peak_rss_mib: float | None
    rows_mem_available_floor_mib: float | None
    cache_budget_mib: float | None
    cache_resident_mib: float | None
    spec_read_mib_per_token: float | None
    spec_useful_pct: float | None
    trimmed: TrimmedMean | None
    untimed: str | None = None

    @property
    def flash_wait_ms_per_token(self) -> float | None:
        """The wall-additive flash term (telemetry.md: read it from ``io_ms`` in serial mode and
        from ``stall_ms`` under overlap)."""
        return self.stall_ms_per_token if self.overlap else self.io_ms_per_token

    def as_dict(self) -> dict:
        d = asdict(self)
        d["flash_wait_ms_per_token"] = self.flash_wait_ms_per_token
        return d


def _per_token(run, name: str) -> float | None:
    col = run.column(name)
    return float(col.sum()) / run.n_rows if col is not None and run.n_rows else None


def _side(run, key: str, scale: float) -> float | None:
    if run.sidecar is None or key not in run.sidecar:
        return None
    return run.sidecar[key] / scale


UNTIMED = "wall_ms is 0 in every row (no decode time was measured)"
"""Why a run's decode tok/s and per-token mean are n/a (:attr:`BenchRow.untimed`)."""


def bench_run(run, label: str | None = None, trim: int = DEFAULT_TRIM,
              resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> BenchRow:
    """The figures of one :class:`~refsim.telemetry.metrics_reader.MetricsRun` (definitions in the
    module docstring).

    Raises
    ------
    ConfigError
        If the run has no rows.
    """
    n = run.n_rows
    if n == 0:
        raise ConfigError(f"{run.path}: the file has no per-token rows (nothing to measure)")
    token_ms = run.token_wall_ms()
    decode_s = float(run.data["wall_ms"].sum()) / 1000.0
    rates = np.sort(1000.0 / token_ms[token_ms > 0])
    untimed = None if decode_s > 0 else UNTIMED

    def timed(value):
        return None if untimed else value
    summ = run.summaries
    first = summ[0] if summ else {}
    last = summ[-1] if summ else {}
    if len(summ) == 1:
        prefill_tps = first.get("prefill_tps")
    elif summ:
        n_prompt = sum(s.get("n_prompt", 0.0) for s in summ)
        pre_s = sum(s.get("prefill_s", 0.0) for s in summ)
        prefill_tps = n_prompt / pre_s if pre_s > 0 else None     # n/a: no measured second
    else:
        prefill_tps = None
    load_s, prefill_s = first.get("load_s"), first.get("prefill_s")
    ttft = load_s + prefill_s if load_s is not None and prefill_s is not None else None
    hit = last.get("cache_hit_pct", float(run.data["cache_hit_pct"][-1]))
    read_mib = float(run.data["read_bytes"].sum()) / MIB
    io = run.column("io_ms")
    io_s = float(io.sum()) / 1000.0 if io is not None else 0.0
    cpu0 = _side(run, "cpu_temp_before_mC", 1000.0)
    cpu_max = _side(run, "cpu_temp_max_mC", 1000.0)
    rss = run.column("rss_mib")
    avail = run.column("mem_available_mib")
    spec_read = sum(x.get("spec_read_MiB", 0.0) for x in summ)
    spec_experts = sum(x.get("spec_experts", 0.0) for x in summ)
    spec_useful = sum(x.get("spec_useful", 0.0) for x in summ)
    return BenchRow(
        label=label if label is not None else run.path, path=run.path, layout=run.layout,
        tokens=n, turns=run.n_turns, complete=run.complete, overlap=run.overlap,
        decode_s=decode_s, tok_s_mean=timed(n / decode_s if decode_s > 0 else 0.0),
        tok_s_min=timed(float(rates[0]) if rates.size else 0.0),
        tok_s_max=timed(float(rates[-1]) if rates.size else 0.0),
        tok_s_median=timed(float(np.median(rates)) if rates.size else 0.0),
        tok_s_p5=timed(percentile_linear(rates, 0.05)),
        tok_s_p95=timed(percentile_linear(rates, 0.95)),
        prefill_tps=prefill_tps, load_s=load_s, prefill_s=prefill_s, ttft_s=ttft,
        cache_hit_pct=None if hit == -1 else hit,
        read_mib_per_token=read_mib / n, wall_ms_per_token=timed(float(token_ms.sum()) / n),
        compute_ms_per_token=_per_token(run, "compute_ms"), io_ms_per_token=_per_token(run, "io_ms"),
        stall_ms_per_token=_per_token(run, "stall_ms"), mgmt_ms_per_token=_per_token(run, "mgmt_ms"),
        flash_mib_s=read_mib / io_s if io_s > 0 else None,
        peak_rss_gib=_side(run, "peak_rss_kb", float(1 << 20)),
        mem_floor_gib=_side(run, "mem_avail_floor_kb", float(1 << 20)),
        cpu_temp_start_c=cpu0, cpu_temp_max_c=cpu_max,
        cpu_temp_rise_c=cpu_max - cpu0 if cpu0 is not None and cpu_max is not None else None,
        batt_temp_max_c=_side(run, "batt_temp_max_dC", 10.0),
        rows_peak_rss_mib=float(rss.max()) if rss is not None and rss.max() > 0 else None,
        rows_mem_available_floor_mib=float(avail.min()) if avail is not None and avail.max() > 0
        else None,
        cache_budget_mib=last.get("cache_budget_MiB") or None,
        cache_resident_mib=last.get("cache_resident_MiB"),
        spec_read_mib_per_token=spec_read / n if spec_read > 0 else None,
        spec_useful_pct=100.0 * spec_useful / spec_experts if spec_read > 0 and spec_experts
        else None,
        trimmed=timed(trimmed_mean(token_ms, trim, resamples, seed)), untimed=untimed)


@dataclass(frozen=True)
class Comparison:
    """Run B against run A: differences B − A (ms/token for the trimmed means, with a bootstrap
    CI of the difference from independent resamples of both runs' trimmed tokens)."""

    a: str
    b: str
    tok_s_mean_delta: float
    tok_s_mean_delta_pct: float
    mean_ms_delta: float
    mean_ms_delta_pct: float
    delta_ci_lo_ms: float
    delta_ci_hi_ms: float
    ci_overlap: bool
    trim: int
    resamples: int
    seed: int

    def as_dict(self) -> dict:
        return asdict(self)


def compare_runs(run_a, row_a: BenchRow, run_b, row_b: BenchRow, resamples: int = DEFAULT_RESAMPLES,
                 seed: int = DEFAULT_SEED) -> Comparison:
    """B − A (see :class:`Comparison`); the CI of the difference is the percentile interval of
    ``mean(B*) − mean(A*)`` over ``resamples`` pairs of resamples (A's drawn first, then B's, from
    one ``default_rng(seed)``).

    Raises
    ------
    ConfigError
        If either run has fewer than 2 tokens after the trim.
    """
    ta, tb = row_a.trimmed, row_b.trimmed
    if ta is None or tb is None:
        short = row_a if ta is None else row_b
        if short.untimed:
            raise ConfigError(f"--compare: {short.label}: {short.untimed}; nothing to compare")
        raise ConfigError(f"--compare: {short.label} has fewer than 2 tokens after --trim; "
                          f"lower --trim")
    xa = run_a.token_wall_ms()[ta.trim:]
    xb = run_b.token_wall_ms()[tb.trim:]
    rng = np.random.default_rng(seed)
    ma, mb = np.empty(resamples), np.empty(resamples)
    for x, out in ((xa, ma), (xb, mb)):
        chunk = max(1, _CHUNK_VALUES // x.size)
        for s in range(0, resamples, chunk):
            e = min(resamples, s + chunk)
            out[s:e] = x[rng.integers(0, x.size, size=(e - s, x.size))].mean(axis=1)
    lo, hi = np.percentile(mb - ma, [2.5, 97.5])
    d_ms = tb.mean_ms - ta.mean_ms
    d_tok = row_b.tok_s_mean - row_a.tok_s_mean
    return Comparison(
        a=row_a.label, b=row_b.label, tok_s_mean_delta=d_tok,
        tok_s_mean_delta_pct=100.0 * d_tok / row_a.tok_s_mean if row_a.tok_s_mean else 0.0,
        mean_ms_delta=d_ms, mean_ms_delta_pct=100.0 * d_ms / ta.mean_ms,
        delta_ci_lo_ms=float(lo), delta_ci_hi_ms=float(hi),
        ci_overlap=bool(ta.ci_lo_ms <= tb.ci_hi_ms and tb.ci_lo_ms <= ta.ci_hi_ms),
        trim=ta.trim, resamples=resamples, seed=seed)


# --- tables -------------------------------------------------------------------------------------


def _f(v, fmt: str, none: str = "—") -> str:
    """A cell: ``fmt`` (``"d"``, or ``".Nf"``: N decimals, more for a small nonzero value so it
    keeps two significant digits, :func:`refsim.fmt.num`: 0.18 MiB/token printed ``0`` at
    ``.0f``), or ``none`` for an absent value."""
    if v is None:
        return none
    if fmt.endswith("f"):
        return num(v, int(fmt[1:-1]))
    return format(v, fmt)


def _timed_f(row: BenchRow, v, fmt: str) -> str:
    """:func:`_f`, with ``n/a`` for a time of an untimed run (:attr:`BenchRow.untimed`)."""
    return NA if v is None and row.untimed else _f(v, fmt)


THROUGHPUT = (("tokens", "tokens", "d"), ("mean", "tok_s_mean", ".2f"), ("min", "tok_s_min", ".2f"),
              ("max", "tok_s_max", ".2f"), ("median", "tok_s_median", ".2f"), ("p5", "tok_s_p5", ".2f"),
              ("p95", "tok_s_p95", ".2f"), ("prefill tok/s", "prefill_tps", ".2f"),
              ("TTFT s", "ttft_s", ".1f"), ("hit %", "cache_hit_pct", ".0f"),
              ("read MiB/tok", "read_mib_per_token", ".0f"), ("stall ms/tok", "stall_ms_per_token", ".1f"))
PRESSURE = (("peak RSS GiB", "peak_rss_gib", ".2f"), ("free-RAM floor GiB", "mem_floor_gib", ".2f"),
            ("CPU start °C", "cpu_temp_start_c", ".1f"), ("CPU max °C", "cpu_temp_max_c", ".1f"),
            ("CPU rise °C", "cpu_temp_rise_c", ".1f"), ("battery max °C", "batt_temp_max_c", ".1f"),
            ("rows: peak RSS MiB", "rows_peak_rss_mib", ".0f"),
            ("rows: MemAvailable floor MiB", "rows_mem_available_floor_mib", ".0f"))
SPLIT = (("wall", "wall_ms_per_token", ".1f"), ("compute", "compute_ms_per_token", ".1f"),
         ("io", "io_ms_per_token", ".1f"), ("stall", "stall_ms_per_token", ".1f"),
         ("mgmt", "mgmt_ms_per_token", ".1f"), ("flash wait", "flash_wait_ms_per_token", ".1f"),
         ("flash MiB/s", "flash_mib_s", ".0f"))


CACHE = (("cache budget MiB", "cache_budget_mib", ".0f"), ("resident MiB", "cache_resident_mib", ".0f"),
         ("prefetch useful %", "spec_useful_pct", ".0f"),
         ("prefetch read MiB/tok", "spec_read_mib_per_token", ".0f"))


def _cells(row: BenchRow, spec) -> list[str]:
    return [_timed_f(row, getattr(row, attr), fmt) for _, attr, fmt in spec]


def _trim_cells(row: BenchRow) -> list[str]:
    t = row.trimmed
    if t is None:            # fewer than 2 tokens after --trim: no mean, no CI (the CLI says why)
        return [NA, NA, NA, NA]
    return [str(t.n), f"{t.median_ms:.1f}", f"{t.mean_ms:.1f}", f"[{t.ci_lo_ms:.1f}, {t.ci_hi_ms:.1f}]"]


def tables(rows: list[BenchRow]) -> list[tuple[str, list[str], list[list[str]]]]:
    """The tables as (title, header, rows of cells): throughput, pressure, per-token after
    warm-up, time split, and (when a run has a cache budget or prefetch reads in its trailer)
    cache sizing."""
    t = next((r.trimmed for r in rows if r.trimmed is not None), None)
    trim_title = ("Per-token decode time after warm-up" + (
        f" (first {t.trim} tokens trimmed; percentile bootstrap, {t.resamples} resamples, "
        f"numpy default_rng(seed={t.seed}))" if t else ""))
    return [
        ("Throughput (decode tok/s: mean = tokens / decode seconds; min..p95 over per-token "
         "1000 / ms)", ["run"] + [h for h, _, _ in THROUGHPUT],
         [[r.label] + _cells(r, THROUGHPUT) for r in rows]),
        ("Device pressure (the .metrics sidecar; GiB = 2^30 bytes; rows: the CSV's memory "
         "columns)", ["run"] + [h for h, _, _ in PRESSURE],
         [[r.label] + _cells(r, PRESSURE) for r in rows]),
        (trim_title, ["run", "tokens kept", "median ms/tok", "mean ms/tok", "95% CI on the mean"],
         [[r.label] + _trim_cells(r) for r in rows]),
        ("Time split (ms/token = column sum / tokens; flash wait = io serial, stall under "
         "overlap; flash MiB/s = read MiB / io seconds)", ["run", "overlap"] + [h for h, _, _ in SPLIT],
         [[r.label, "?" if r.overlap is None else ("yes" if r.overlap else "no")]
          + [(_timed_f(r, r.wall_ms_per_token, f) if a == "wall_ms_per_token"
              else _f(getattr(r, a), f)) for _, a, f in SPLIT] for r in rows]),
    ] + _cache_table(rows)


def _cache_table(rows: list[BenchRow]) -> list:
    """bench-analyze.py's third table, for the runs with a budget or prefetch reads (a fixed run
    without prefetch has budget = resident and nothing speculative: uninformative)."""
    sized = [r for r in rows if r.cache_budget_mib is not None or r.spec_read_mib_per_token]
    if not sized:
        return []
    return [("Cache sizing and prefetch (the last trailer's cache_budget_MiB, cache_resident_MiB; "
             "spec_useful / spec_experts; spec_read_MiB / tokens)", ["run"] + [h for h, _, _ in CACHE],
             [[r.label] + _cells(r, CACHE) for r in sized])]


def comparison_lines(c: Comparison) -> list[str]:
    """The ``--compare`` lines."""
    sign = lambda v: f"{v:+.1f}"   # noqa: E731
    verdict = ("the two 95% CIs overlap: no separable difference at this level"
               if c.ci_overlap else "the two 95% CIs are disjoint: the difference is separable")
    return [
        f"compare: B = {c.b} against A = {c.a}",
        f"  decode tok/s mean: {c.tok_s_mean_delta:+.2f} tok/s ({c.tok_s_mean_delta_pct:+.1f}%)",
        f"  per-token mean after {c.trim} warm-up tokens: {sign(c.mean_ms_delta)} ms/token "
        f"({c.mean_ms_delta_pct:+.1f}%), 95% CI of the difference [{c.delta_ci_lo_ms:+.1f}, "
        f"{c.delta_ci_hi_ms:+.1f}] ms (bootstrap, {c.resamples} resamples, seed {c.seed})",
        f"  {verdict}",
    ]


def format_text(rows: list[BenchRow], comparison: Comparison | None = None) -> str:
    """Plain-text tables (columns aligned), then the comparison when given."""
    out: list[str] = []
    for title, head, body in tables(rows):
        widths = [max(len(x) for x in col) for col in zip(head, *body)]
        out.append(title)
        for cells in [head] + body:
            out.append("  ".join(c.ljust(w) if k == 0 else c.rjust(w)
                                 for k, (c, w) in enumerate(zip(cells, widths))).rstrip())
        out.append("")
    for r in rows:
        if not r.complete:
            out.append(f"note: {r.label}: the last turn has no '# summary' line (the run stopped "
                       f"early); prefill, TTFT and hit are from the turns that have one")
    if comparison is not None:
        out.extend(comparison_lines(comparison))
    return "\n".join(out).rstrip("\n") + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def format_markdown(rows: list[BenchRow], comparison: Comparison | None = None) -> str:
    """The same tables as Markdown (one ``**title**`` paragraph and one table each)."""
    out: list[str] = []
    for title, head, body in tables(rows):
        out += [f"**{title}**", "", "| " + " | ".join(head) + " |",
                "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
        out += ["| " + " | ".join([_md_escape(cells[0])] + cells[1:]) + " |" for cells in body]
        out.append("")
    if comparison is not None:
        out += ["**Comparison**", ""] + [ln.strip() for ln in comparison_lines(comparison)]
    return "\n".join(out).rstrip("\n") + "\n"
