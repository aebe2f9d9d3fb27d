"""``refsim run [MODEL.gguf] [--prompt TEXT | --prompt-tokens IDS] -n N [--cache-mb M] ...``:
greedy (optionally n-gram speculative) generation with refsim's reference forward pass, every
decode fed to the engine's expert-cache model."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

from refsim import MIB
from refsim.errors import ConfigError, RefsimError


def _token_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected token ids like '1,5,77', got {text!r}") from None
    if not ids or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"expected one or more token ids >= 0, got {text!r}")
    return ids


def add_parser(sub) -> None:
    from refsim.cli.common import add_knob_args, add_spec_args, nonneg_int, positive_int
    from refsim.forward.builtin import BUILTIN_CACHE_MB
    p = sub.add_parser(
        "run", help="generate with the reference forward pass and count expert-cache traffic",
        description="Greedy generation with refsim's reference forward pass; every decode is fed to "
                    "the engine's LRU expert cache. With no MODEL, a small synthetic qwen3moe is made "
                    "once (under $REFSIM_CACHE or ~/.cache/refsim) and used.")
    p.add_argument("model", nargs="?", help="GGUF model (default: the built-in synthetic qwen3moe)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--prompt", metavar="TEXT", help="prompt text (byte-level tokens of the file's vocab)")
    g.add_argument("--prompt-tokens", metavar="IDS", type=_token_ids, help="prompt token ids, e.g. 1,5,77")
    p.add_argument("-n", "--n-predict", type=positive_int, default=32, metavar="N",
                   help="tokens to generate (default 32); prompt + N must fit the model's "
                        "n_ctx_train")
    p.add_argument("--cache-mb", metavar="M",
                   help=f"expert cache budget in MiB (2^20 bytes); default {BUILTIN_CACHE_MB:g} for the "
                        f"built-in model, else half of all expert bytes")
    p.add_argument("--numerics", choices=("exact", "ggml"), default="exact",
                   help="exact: float64-accumulated reference; ggml: llama.cpp CPU activation "
                        "quantisation (Q8_0/Q8_K)")
    add_spec_args(p)
    p.add_argument("--ubatch", type=nonneg_int, default=0, metavar="N",
                   help="ubatch (default 0 = n_batch); with --ngram or --mtp it must hold the "
                        "verify batch (--draft + 1)")
    p.add_argument("--route-trace", metavar="OUT", help="write the run's route trace (route_trace v1)")
    p.add_argument("--csv", metavar="OUT", help="write the per-token metrics CSV (bmoe_metrics v2)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--predict-log", action="store_true",
                   help="score the stale-gate, previous-token and control predictors per layer "
                        "(the engine's expert-prediction.md; qwen3moe, qwen35moe)")
    add_knob_args(p, route_ahead=True)
    p.set_defaults(func=run)


def _ids_text(model, ids, tokenizer=None) -> str:
    """Text of generated ids when the file has an SPM vocabulary, else the ids in brackets."""
    from refsim.model.tokenizer import Tokenizer
    try:
        return (tokenizer or Tokenizer.from_model(model)).decode(ids)
    except RefsimError:
        return "".join(f"[{int(i)}]" for i in ids)


def run(args) -> int:
    from refsim.cache import ExpertCache
    from refsim.cache.summary import CacheSummary
    from refsim.cli.common import check_outputs, knobs_from_args, warn_below_token_cycle
    from refsim.forward import ForwardTarget
    from refsim.forward.builtin import BUILTIN_CACHE_MB, builtin_model_path
    from refsim.model import open_model
    from refsim.model.tokenizer import Tokenizer
    from refsim.spec import SpecConfig, draft_source_for, run_generation
    from refsim.telemetry import MetricsPreamble, RunStats, summary_lines, write_metrics_csv
    from refsim.trace import TraceHeader

    # every flag and output path is checked before the model is built or opened
    config = SpecConfig.from_args(args)
    if config.enabled and 0 < args.ubatch < config.draft_max + 1:
        raise ConfigError(f"--ubatch: expected 0 (= n_batch) or >= --draft + 1 = "
                          f"{config.draft_max + 1} (the verify batch), got {args.ubatch}")
    budget = None if args.cache_mb is None else ExpertCache.mib_to_bytes(args.cache_mb)
    check_outputs({"--route-trace": args.route_trace, "--csv": args.csv}, {"MODEL": args.model})
    builtin = args.model is None
    if not builtin and not os.path.exists(args.model):
        raise ConfigError(f"MODEL {args.model}: no such file")
    path = builtin_model_path() if builtin else args.model
    t0 = time.perf_counter()
    model = open_model(path)
    if not model.spec.n_expert:
        raise ConfigError(f"MODEL {path}: {model.spec.arch} is dense (no routed experts); refsim run "
                          f"simulates the expert cache of MoE models (qwen3moe, qwen35moe). For the "
                          f"dense Gemma-3 pass see examples/ngram_real_text.py")
    if config.spec == "mtp":
        from refsim.spec.mtp import mtp_source_for
        target, source = mtp_source_for(model, config, args.numerics, args.ubatch)
    else:
        target, source = ForwardTarget(model, args.numerics), draft_source_for(config)
    load_s = time.perf_counter() - t0
    spec = model.spec
    tokenizer = None
    if args.prompt_tokens is not None:
        prompt = args.prompt_tokens
        if max(prompt) >= spec.n_vocab:
            raise ConfigError(f"--prompt-tokens: ids must be < n_vocab {spec.n_vocab}, got {max(prompt)}")
    else:
        text_in = "Hello world, this is a streaming test." if args.prompt is None else args.prompt
        tokenizer = Tokenizer.from_model(model)
        prompt = tokenizer.encode(text_in).tolist()
    if len(prompt) + args.n_predict > spec.n_ctx_train:
        room = spec.n_ctx_train - len(prompt)
        fix = f"use -n <= {room}" if room >= 1 else "shorten the prompt"
        raise ConfigError(f"-n {args.n_predict}: the prompt ({len(prompt)} tokens) + {args.n_predict} = "
                          f"{len(prompt) + args.n_predict} tokens exceeds the model's n_ctx_train "
                          f"{spec.n_ctx_train} (positions past it are outside what the model was "
                          f"trained on); {fix}")
    expert_bytes = [model.expert_bytes(il) for il in range(target.n_layer)]  # + the MTP head with --mtp
    if budget is None:  # no --cache-mb
        budget = (ExpertCache.mib_to_bytes(BUILTIN_CACHE_MB) if builtin
                  else sum(expert_bytes) * spec.n_expert // 2)
    knobs = knobs_from_args(args, spec.n_expert_used, traced=args.route_trace is not None)
    if knobs.drop_on and config.spec == "mtp":
        raise ConfigError("--drop-cold-experts with --mtp: refsim does not run the MTP head's pass "
                          "through the drop seam yet; use --ngram or no speculation")
    cache = ExpertCache(expert_bytes, spec.n_expert, budget, knobs)
    ahead = None
    if knobs.route_ahead:
        if config.enabled:
            raise ConfigError("--route-ahead: mutually exclusive with speculation (--ngram, --mtp), "
                              "as the engine rejects it")
        if args.predict_log:
            raise ConfigError("--route-ahead and --predict-log: mutually exclusive (the probe would "
                              "grade a predictor against a routing rewritten from it)")
        if spec.arch != "qwen3moe":
            raise ConfigError(f"--route-ahead: refsim runs it live for qwen3moe only, not {spec.arch}")
        from refsim.route_ahead import RouteAhead
        ahead = target.route_ahead = RouteAhead(knobs.route_ahead)
    probe = None
    if args.predict_log:
        if not getattr(target, "supports_moe_gate", False) or config.spec == "mtp":
            raise ConfigError("--predict-log: refsim probes the qwen3moe and qwen35moe passes, without --mtp")
        from refsim.predict_stats import PredictProbe
        probe = target.predict_probe = PredictProbe(target.n_layer)
    t1 = time.perf_counter()
    result = run_generation(target, source, prompt, args.n_predict, cache=cache,
                            draft_max=config.draft_max)
    wall_s = time.perf_counter() - t1
    stats = dataclasses.replace(RunStats.from_run(result), load_s=load_s)
    t_bytes = model.t_bytes()
    summary = CacheSummary.from_stats(cache.stats, budget, result.n_gen, t_bytes)
    from refsim.cache.summary import KnobSummary
    knob_summary = KnobSummary.from_stats(cache.stats, knobs) if knobs.any_on else None
    warn_below_token_cycle("run", [budget], t_bytes)
    sim_tps = (result.n_gen + len(prompt)) / wall_s if wall_s > 0 else 0.0
    decode_tps = stats.tok_s
    if args.route_trace is not None:
        header = TraceHeader(model=path, arch=spec.arch, n_layer=target.n_layer, n_expert=spec.n_expert,
                             n_expert_used=spec.n_expert_used, expert_bytes=expert_bytes,
                             dense_bytes=[model.dense_bytes(il) for il in range(target.n_layer)],
                             extra=(("cache_mb", f"{budget / MIB:.10g}"),))   # the recording budget
        result.write_trace(args.route_trace, header)
    if args.csv is not None:
        import numba
        preamble = MetricsPreamble.for_run(
            result, config, model=path, arch=spec.arch, threads=numba.get_num_threads(),
            n_ubatch=args.ubatch)
        write_metrics_csv(args.csv, result, stats, preamble)
    text = _ids_text(model, result.tokens, tokenizer)
    out = {
        "model": path, "builtin": builtin, "numerics": args.numerics, "spec": result.spec,
        "prompt_tokens": [int(t) for t in prompt], "tokens": result.tokens.tolist(), "text": text,
        "decodes": stats.decodes, "drafted": stats.drafted, "accepted": stats.accepted,
        "hit_pct_cum": summary.hit_pct_cum, "hit_pct_decode": summary.hit_pct_decode,
        "read_mib": summary.read_mib, "mib_per_token": summary.mib_per_token,
        "budget_bytes": budget, "t_bytes": t_bytes,
        "sim_tok_per_s": decode_tps, "sim_total_tok_per_s": sim_tps,
        "min_margin": getattr(target, "inner", target).min_margin, "load_s": load_s, "wall_s": wall_s,
        "cache": summary.as_dict(),      # every counter, as `refsim replay --json` prints them
    }
    if knob_summary is not None:
        out["knobs"] = knob_summary.as_dict()
    if probe is not None:
        out["predict"] = {n: dataclasses.asdict(probe.total(n)) for n in probe.per_layer}
    if ahead is not None:
        out["route_ahead"] = {"n": ahead.n, "committed": ahead.committed,
                              "passthrough": ahead.passthrough, "agree_pct": ahead.agree_pct}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"model: {path}{' (built-in)' if builtin else ''} arch={spec.arch} n_layer={spec.n_layer} "
          f"n_expert={spec.n_expert} k={spec.n_expert_used} numerics={args.numerics}")
    from refsim.cache.ledger import memory_ledger
    led = memory_ledger(model, len(prompt) + args.n_predict, config.draft_max if config.enabled else 0,
                        config.spec == "mtp")
    print(f"memory: kv {led.kv_bytes / MIB:.2f} MiB, recurrent {led.recurrent_bytes / MIB:.2f} MiB "
          f"(1 + n_rs_seq {led.n_rs_seq} slots), draft context {(led.draft_kv_bytes + led.draft_buffer_bytes) / MIB:.2f} "
          f"MiB; speculation takes {led.speculation_bytes / MIB:.2f} MiB (refsim memory for the auto budget)")
    stop = (f" (stopped at an end-of-generation token before -n {args.n_predict})"
            if result.eog and result.n_gen < args.n_predict else "")
    print(f"prompt: {len(prompt)} tokens; generated {result.n_gen}{stop}: {text!r}")
    print(f"tokens: {' '.join(str(t) for t in result.tokens.tolist())}")
    for line in summary_lines(stats):
        print(line)
    if knob_summary is not None:
        from refsim.telemetry.lines import knob_lines
        for line in knob_lines(knob_summary):
            print(line)
    if probe is not None:
        for line in probe.lines():
            print(line)
    if ahead is not None:
        print(ahead.line())
    head = ", the MTP head's draft lookups" if config.spec == "mtp" else ""
    print(f"cache: budget {budget / MIB:.2f} MiB, T (one token cycle) {t_bytes / MIB:.2f} MiB; "
          f"{summary.hit_pct_cum:.1f}% hit cumulative (prefill{head} included), "
          f"{summary.hit_pct_decode:.1f}% decode-only (the target's decodes), "
          f"{summary.mib_per_token:.3f} MiB/token (decode reads / generated tokens)")
    draft = f", MTP head {summary.draft_read_bytes / MIB:.2f}" if config.spec == "mtp" else ""
    print(f"cache: {summary.lookups} lookups, {summary.hits} hits; read {summary.read_mib:.2f} MiB in all "
          f"(prefill {summary.prefill_read_bytes / MIB:.2f}, decode {summary.decode_read_mib:.2f}{draft}); "
          f"{summary.evictions} evictions, {summary.rereads} re-reads")
    print(f"simulator: {decode_tps:.2f} tok/s decode ({stats.decodes} decodes), "
          f"{sim_tps:.2f} tok/s incl. prefill; smallest top-1/top-2 logit margin "
          f"{getattr(target, 'inner', target).min_margin:.4g}")
    if args.route_trace is not None:
        flags = "".join(f" {f} {v}" for f, v, on in (
            ("--drop-cold-experts", f"{knobs.drop_frac:g}", knobs.drop_on),
            ("--prefetch", knobs.prefetch, knobs.prefetch > 0),
            ("--route-ahead", knobs.route_ahead, knobs.route_ahead > 0)) if on)
        flags += " --drop-in-prefill" if knobs.drop_on and knobs.drop_in_prefill else ""
        print(f"route trace: {args.route_trace} (refsim replay {args.route_trace} --cache-mb "
              f"{budget / MIB:.10g}{flags})", file=sys.stderr)
        if config.spec == "mtp":
            print("route trace: the MTP draft context's routings are not in it (the engine's format "
                  "omits them), so its replay differs from this run by the head's lookups and reads",
                  file=sys.stderr)
    return 0
