"""The engine's per-token metrics CSV, ``bmoe_metrics v2`` (bmoe-engine.md §4.1), written
atomically.

Layout: five ``#`` preamble lines (magic, engine, model, streaming, sampling + speculation),
the 29-column header, one row per emitted token, and the ``# summary key=value ...`` trailer.

What refsim fills and what it writes as the engine writes "unmeasured":

- measured by the simulator: ``wall_ms`` (the target decode), ``compute_ms`` (= wall, since
  I/O and management are 0), ``loop_overhead_ms``, ``mtp_draft_ms``;
- from the cache model (:class:`refsim.cache.ExpertCache` records): ``read_bytes`` (the
  decode's misses × entry size, unaligned), ``cache_hit_pct`` (lifetime, prefill included;
  -1 without a cache), ``cache_budget_mib``;
- from the loop: ``step``, ``steps``, ``mtp_batch``, ``turn`` (0);
- unmeasured: ``io_ms``, ``stall_ms``, ``mgmt_ms`` (these three, ``wall_ms`` and
  ``compute_ms`` are a device model's predictions when one is given:
  :mod:`refsim.telemetry.predicted`), ``cpu_ms``, ``majflt`` and ``majflt_mib`` (0 =
  unmeasured, as the engine writes majflt), ``dense_resident_frac`` (-1 = unmeasured), the
  process/device memory columns (0.0), and the overlap/route-ahead waits (0.000).

Group accounting (bmoe-engine.md §2 step 8): a decode's whole cost (wall, I/O, compute,
majflt, cpu, read bytes, loop overhead, drafting) sits on the group's first row; the other
rows carry 0; every row of the group carries ``mtp_batch`` = tokens the decode confirmed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from refsim import MIB, __version__
from refsim.errors import ConfigError
from refsim.fileio import write_text_atomic
from refsim.telemetry.constants import METRICS_COLUMNS, METRICS_MAGIC, SUMMARY_KEYS
from refsim.telemetry.stats import RunStats


def _g4(x: float) -> str:
    return "%.4g" % x


@dataclass(frozen=True)
class MetricsPreamble:
    """The preamble's keys (bmoe-engine.md §4.1, lines 2-5). Defaults describe a refsim run:
    features refsim does not simulate are written off (0), engine defaults where a flag has
    one (``cache_floor_mb`` 1536, ``io_threads`` 4, ``predict_spec_max`` 2).
    """

    engine: str = f"refsim-{__version__}"
    model: str = ""
    arch: str = ""
    n_layer: int = 0
    n_expert: int = 0
    n_expert_used: int = 0
    threads: int = 1
    n_ctx: int = 0
    n_ubatch: int = 0
    chatml: int = 0
    moe_stream: int = 0
    cache_mb: int = 0
    cache_auto: int = 0
    cache_floor_mb: int = 1536
    cache_ceil_mb: int = 0
    force_cache: int = 0
    load_all: int = 0
    io_threads: int = 4
    o_direct: int = 0
    overlap: int = 0
    io_two_wave: int = 0
    prefetch: int = 0
    route_ahead: int = 0
    predict_prefetch: int = 0
    predict_log: int = 0
    predict_spec_max: int = 2
    prefetch_sync: int = 0
    dense_weights: str = "mmap"
    drop_cold_frac: float = 0.0
    drop_renorm: int = 1
    drop_prefill: int = 0
    temp: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    compute_trace_layers: int = 0
    spec: str = "off"
    spec_draft_max: int = 0
    mtp_p_min: float = 0.0
    ngram_min_match: int = 3

    @classmethod
    def for_run(cls, result, config=None, **overrides) -> "MetricsPreamble":
        """Preamble of a :class:`refsim.spec.RunResult`: model dims from its events, cache from
        its cache, speculation from ``config`` (a :class:`refsim.spec.SpecConfig`) or the run.

        ``overrides`` set any other key (``model=``, ``arch=``, ``n_ctx=``, ...).
        """
        kw: dict = {}
        ev = result.first_event if result.first_event is not None else (
            result.events[0] if result.events else None)
        if ev is not None:
            kw["n_layer"] = ev.n_layer
            kw["n_expert_used"] = int(ev.routes.shape[2])
        if result.cache is not None:
            kw.update(n_expert=result.cache.n_expert, moe_stream=1,
                      cache_mb=result.cache.budget_bytes // MIB,
                      prefetch=result.cache.knobs.prefetch,
                      route_ahead=result.cache.knobs.route_ahead,
                      predict_prefetch=int(result.cache.knobs.predict_prefetch),
                      predict_spec_max=result.cache.knobs.predict_spec_max,
                      drop_cold_frac=result.cache.knobs.drop_frac)
        kw["spec"] = result.spec
        kw["spec_draft_max"] = result.draft_max
        if config is not None:
            kw.update(spec=config.spec, spec_draft_max=config.preamble_draft_max,
                      mtp_p_min=config.mtp_p_min, ngram_min_match=config.ngram_min_match,
                      temp=config.temp)
        kw.update(overrides)
        known = {f.name for f in fields(cls)}
        bad = sorted(set(kw) - known)
        if bad:
            raise ConfigError(f"metrics preamble: unknown key {bad[0]!r}")
        return cls(**kw)

    def lines(self) -> list[str]:
        """The five preamble lines."""
        p = self
        return [
            METRICS_MAGIC,
            f"# engine={p.engine}",
            f"# model={os.path.basename(p.model)} arch={p.arch} n_layer={p.n_layer} "
            f"n_expert={p.n_expert} n_expert_used={p.n_expert_used} threads={p.threads} "
            f"n_ctx={p.n_ctx} n_ubatch={p.n_ubatch} chatml={p.chatml}",
            f"# moe_stream={p.moe_stream} cache_mb={p.cache_mb} cache_auto={p.cache_auto} "
            f"cache_floor_mb={p.cache_floor_mb} cache_ceil_mb={p.cache_ceil_mb} "
            f"force_cache={p.force_cache} load_all={p.load_all} io_threads={p.io_threads} "
            f"o_direct={p.o_direct} overlap={p.overlap} io_two_wave={p.io_two_wave} "
            f"prefetch={p.prefetch} route_ahead={p.route_ahead} "
            f"predict_prefetch={p.predict_prefetch} predict_log={p.predict_log} "
            f"predict_spec_max={p.predict_spec_max} prefetch_sync={p.prefetch_sync} "
            f"dense_weights={p.dense_weights} drop_cold_frac={_g4(p.drop_cold_frac)} "
            f"drop_renorm={p.drop_renorm} drop_prefill={p.drop_prefill}",
            f"# temp={_g4(p.temp)} top_k={p.top_k} top_p={_g4(p.top_p)} seed={p.seed} "
            f"compute_trace_layers={p.compute_trace_layers} spec={p.spec} "
            f"spec_draft_max={p.spec_draft_max} mtp_p_min={_g4(p.mtp_p_min)} "
            f"ngram_min_match={p.ngram_min_match}",
        ]


def metric_rows(result, times=None) -> list[str]:
    """One CSV row per emitted token (no newline), group cost on the group's first row.

    ``times`` (:class:`refsim.telemetry.predicted.PredictedTimes`, one entry per step): the time
    columns are the device's predictions and the simulator's seconds (loop overhead, drafting)
    are written 0 (docs/telemetry.md, "Predicted times")."""
    cache = result.cache
    budget_mib = cache.budget_bytes / MIB if cache is not None else 0.0
    if times is not None and len(times.wall_ms) != len(result.steps):
        raise ConfigError(f"predicted times: {len(times.wall_ms)} decodes, the run has "
                          f"{len(result.steps)}")
    rows: list[str] = []
    step = 0
    for i, s in enumerate(result.steps):
        hit = 100.0 * s.cum_hits / s.cum_lookups if cache is not None and s.cum_lookups \
            else (0.0 if cache is not None else -1.0)
        if times is None:
            wall, io, compute, stall, mgmt = s.wall_s * 1e3, 0.0, s.wall_s * 1e3, 0.0, 0.0
            # mtp_draft_ms: the MTP head's time only, as RunStats.draft_s (an n-gram lookup is
            # not timed by the engine: 0)
            loop, draft = s.loop_overhead_s * 1e3, (s.draft_s * 1e3 if result.spec == "mtp" else 0.0)
        else:
            wall, io, compute = times.wall_ms[i], times.io_ms[i], times.compute_ms[i]
            stall, mgmt, loop, draft = times.stall_ms[i], times.mgmt_ms[i], 0.0, 0.0
        for r in range(s.n_emitted):
            step += 1
            f = 1.0 if r == 0 else 0.0      # the group's cost on its first row
            rows.append(
                f"{step},{result.n_predict},{wall * f:.3f},{io * f:.3f},{compute * f:.3f},"
                f"{s.read_bytes if r == 0 else 0},{hit:.2f},{stall * f:.3f},{mgmt * f:.3f},0,"
                f"{0.0:.3f},{-1.0:.3f},0,{0.0:.2f},{budget_mib:.1f},"
                f"{0.0:.1f},{0.0:.1f},{0.0:.1f},{0.0:.1f},{0.0:.1f},{0.0:.1f},{0.0:.1f},"
                f"{loop * f:.3f},{s.batch},{draft * f:.3f},"
                f"{0.0:.3f},{0.0:.3f},{0.0:.3f},{0.0:.3f}")
    return rows


def engine_number(x: float | None) -> float:
    """A rate for a file in the engine's numeric format: the engine's 0 where the rate is over
    zero events (``None``; the engine's ``x / y if y else 0``). Text reports print ``n/a``
    instead (docs/telemetry.md)."""
    return 0.0 if x is None else x


def predicted_split(s: RunStats, times) -> dict[str, float]:
    """Seconds per token of the predicted split (``compute``, ``mgmt``, ``io``, ``stall``) and
    the total ``io_s``; all 0 without ``times`` (unmeasured)."""
    if times is None:
        return {"compute": s.s_per_tok, "mgmt": 0.0, "io": 0.0, "stall": 0.0, "io_s": 0.0}
    per = {k: _per_token(times.total_s(f"{k}_ms"), s.tokens) for k in ("compute", "mgmt", "io", "stall")}
    return {**per, "io_s": times.total_s("io_ms")}


def _per_token(x: float, tokens: int) -> float | None:
    return x / tokens if tokens else None


def summary_values(s: RunStats, times=None) -> dict[str, float | int]:
    """The trailer's values by key (unmeasured quantities are 0, a rate over zero events is the
    engine's 0: :func:`engine_number`). With ``times`` (predicted) the times are theirs
    (:meth:`refsim.telemetry.predicted.PredictedTimes.stats`)."""
    if times is not None:
        s = times.stats(s)
    cache_mib = s.resident_bytes / MIB
    t = predicted_split(s, times)
    vals = {
        "tokens": s.tokens, "s/tok": s.s_per_tok, "tok/s": s.tok_s, "read_MiB": s.read_mib,
        "io_s": t["io_s"], "compute_s/tok": t["compute"], "io_s/tok": t["io"],
        "cache_hit_pct": s.cache_hit_pct, "n_prompt": s.n_prompt, "load_s": s.load_s,
        "prefill_s": s.prefill_s, "prefill_tps": s.prefill_tps, "stall_s/tok": t["stall"],
        "mgmt_s/tok": t["mgmt"], "cache_resident_MiB": cache_mib,
        "cache_budget_MiB": s.budget_bytes / MIB, "cache_resizes": 0,
        "spec_read_MiB": s.spec_read_bytes / MIB, "spec_experts": s.spec_experts,
        "spec_useful": s.spec_useful, "majflt/tok": 0.0, "cpu_s/tok": 0.0,
        "token_demand_MiB": s.token_demand_bytes / MIB,
        "layer_demand_MiB": s.layer_demand_bytes / MIB, "experts_routed": s.experts_routed,
        "experts_dropped": s.experts_dropped, "loop_overhead_s/tok": s.loop_overhead_s_per_tok,
        "mtp_drafted": s.drafted, "mtp_accepted": s.accepted, "mtp_decodes": s.decodes,
        "mtp_draft_s/tok": s.draft_s_per_tok, "drafted_steps": s.drafted_steps,
        "ra_committed": 0, "ra_passthrough": 0, "ra_agree_pct": 0.0, "ra_gemv_ms/tok": 0.0,
        "ra_issue_ms/tok": 0.0, "ra_wd_ms/tok": 0.0, "drain_s/tok": 0.0, "adopt_s/tok": 0.0,
        "evictions": s.evictions, "rereads": s.rereads,
    }
    return {k: engine_number(v) for k, v in vals.items()}


def summary_trailer(s: RunStats, times=None) -> str:
    """The ``# summary key=value ...`` line (no newline); ``times`` as in :func:`summary_values`."""
    vals = summary_values(s, times)
    return "# summary " + " ".join(f"{k}={format(vals[k], fmt)}" for k, fmt in SUMMARY_KEYS)


def format_metrics_csv(result, stats: RunStats | None = None,
                       preamble: MetricsPreamble | None = None, times=None) -> str:
    """The whole CSV text (newline-terminated lines).

    Parameters
    ----------
    result : refsim.spec.RunResult
    stats : RunStats, optional
        Default ``RunStats.from_run(result)``.
    preamble : MetricsPreamble, optional
        Default ``MetricsPreamble.for_run(result)``.
    times : refsim.telemetry.predicted.PredictedTimes, optional
        A device model's predictions: they fill the time columns and the trailer's times, the
        preamble gains ``# times=predicted device=<name>``, and every simulator second is 0.
    """
    stats = stats if stats is not None else RunStats.from_run(result)
    preamble = preamble if preamble is not None else MetricsPreamble.for_run(result)
    head = preamble.lines()
    if times is not None:
        head.append(times.preamble_line())
    lines = head + [",".join(METRICS_COLUMNS)] + metric_rows(result, times) + \
        [summary_trailer(stats, times)]
    return "\n".join(lines) + "\n"


def write_metrics_csv(path, result, stats: RunStats | None = None,
                      preamble: MetricsPreamble | None = None, times=None) -> None:
    """Write :func:`format_metrics_csv` to ``path`` atomically (temp file + rename).

    Raises
    ------
    ConfigError
        If the folder cannot be written (names ``--csv`` and the path).
    """
    write_text_atomic(path, format_metrics_csv(result, stats, preamble, times), what="--csv")
