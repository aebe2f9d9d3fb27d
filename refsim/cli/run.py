"""``refsim run [MODEL.gguf] [--prompt TEXT | --prompt-tokens IDS] -n N [--cache-mb M] ...``:
greedy (optionally n-gram speculative) generation with refsim's reference forward pass, every
decode fed to the engine's expert-cache model.

A dense model (``n_expert == 0``, the real Gemma-3-270M) runs the same loop without an expert
cache: every target decode reads every tensor of the file once (docs/real-model.md, "Byte
accounting"), so its flash bytes are ``decodes * file_tensor_bytes``; ``--cache-mb`` and
``--route-trace`` (whose rows are expert routings) are refused for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time

from refsim import MIB
from refsim.errors import ConfigError, RefsimError, UsageError
from refsim.fmt import budget_mib, num, pct_text, ratio


def add_parser(sub) -> None:
    from refsim.cli.common import (add_knob_args, add_spec_args, cache_mib, nonneg_int,
                                   positive_int, token_ids)
    from refsim.forward.builtin import BUILTIN_CACHE_MB
    p = sub.add_parser(
        "run", help="generate with the reference forward pass and count expert-cache traffic",
        description="Greedy generation with refsim's reference forward pass; every decode is fed to "
                    "the engine's LRU expert cache. With no MODEL, a small synthetic qwen3moe is made "
                    "once (under $REFSIM_CACHE or ~/.cache/refsim) and used.")
    p.add_argument("model", nargs="?", help="GGUF model (default: the built-in synthetic qwen3moe)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--prompt", metavar="TEXT", help="prompt text (byte-level tokens of the file's vocab)")
    g.add_argument("--prompt-tokens", metavar="IDS", type=token_ids, help="prompt token ids, e.g. 1,5,77")
    p.add_argument("-n", "--n-predict", type=positive_int, default=32, metavar="N",
                   help="tokens to generate (default 32); prompt + N must fit the model's "
                        "n_ctx_train")
    p.add_argument("--cache-mb", metavar="M", type=cache_mib,
                   help=f"expert cache budget in MiB (2^20 bytes); default {BUILTIN_CACHE_MB:g} for the "
                        f"built-in model, else half of all expert bytes (MoE models only: a dense "
                        f"model has no expert cache)")
    p.add_argument("--numerics", choices=("exact", "ggml", "llamacpp"), default="exact",
                   help="exact: float64-accumulated reference; ggml: llama.cpp CPU activation "
                        "quantisation (Q8_0/Q8_K); llamacpp (gemma3 only): llama.cpp's x86 CPU "
                        "arithmetic bit for bit, F32 KV cache")
    add_spec_args(p)
    p.add_argument("--ubatch", type=nonneg_int, default=0, metavar="N",
                   help="ubatch (default 0 = n_batch); with --ngram or --mtp it must hold the "
                        "verify batch (--draft + 1)")
    p.add_argument("--route-trace", metavar="OUT",
                   help="write the run's route trace (route_trace v1; MoE models only) to OUT "
                        "(- = stdout)")
    p.add_argument("--csv", metavar="OUT",
                   help="write the per-token metrics CSV (bmoe_metrics v2) to OUT (- = stdout)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--predict-log", action="store_true",
                   help="score the stale-gate, previous-token and control predictors per layer "
                        "(the engine's expert-prediction.md; qwen3moe, qwen35moe)")
    add_knob_args(p, route_ahead=True, predict=True)
    from refsim.cli.device import add_device_args
    add_device_args(p)
    g = p.add_argument_group("many prompts (docs/scale.md)")
    g.add_argument("--prompts", metavar="FILE",
                   help="run every prompt of FILE (one a line, UTF-8, at most 10000 lines of 65536 "
                        "bytes), writing DIR/prompt-NNNN.csv and DIR/prompt-NNNN.route.csv per prompt "
                        "(NNNN = the 0-based line index), then a summary; needs --out-dir")
    g.add_argument("--out-dir", metavar="DIR",
                   help="with --prompts: the folder of the per-prompt outputs (made if missing)")
    from refsim.scale.executor import add_executor_args
    add_executor_args(p)
    p.set_defaults(func=run)


def _ids_text(model, ids, tokenizer=None) -> str:
    """Text of generated ids when the file has an SPM vocabulary, else the ids in brackets."""
    from refsim.model.tokenizer import Tokenizer
    try:
        return (tokenizer or Tokenizer.from_model(model)).decode(ids)
    except RefsimError:
        return "".join(f"[{int(i)}]" for i in ids)


def refuse_cache_flags(args, path: str, model) -> None:
    """A dense model has no expert cache: refuse the flags that size or record one.

    Raises
    ------
    ConfigError
        ``--cache-mb``, ``--route-trace``, a streaming knob or ``--predict-log`` given for a model
        with ``n_expert == 0``.
    """
    why = (f"MODEL {path} is {model.spec.arch}, a dense model (no routed experts): it has no "
           f"expert cache, every decode reads all {num(model.bytes.file_tensor_bytes / MIB, 2)} MiB "
           f"of its tensors")
    if args.cache_mb is not None:
        raise ConfigError(f"--cache-mb {args.cache_mb:g}: {why}; drop --cache-mb")
    if args.route_trace is not None:
        raise ConfigError(f"--route-trace {args.route_trace}: {why}, and a route trace records "
                          f"expert routings; drop --route-trace (--csv writes the per-token metrics)")
    for flag, on in (("--drop-cold-experts", args.drop_cold_experts > 0),
                     ("--prefetch", args.prefetch > 0), ("--route-ahead", args.route_ahead > 0),
                     ("--predict-prefetch", args.predict_prefetch),
                     ("--predict-log", args.predict_log), ("--device", args.device is not None)):
        if on:
            raise ConfigError(f"{flag}: {why}; the streaming knobs act on an expert cache")


def stop_fields(result) -> dict:
    """``--json`` keys of how the generation stopped: ``stop`` (``'eog'`` or ``'n_predict'``,
    :attr:`refsim.spec.RunResult.stop_reason`) and ``eog_token`` (the end-of-generation id, never
    emitted; ``None`` when the run stopped at ``-n``). ``refsim ngram-whatif --eog ID -n N``
    replays such a run."""
    return {"stop": result.stop_reason, "n_predict": result.n_predict,
            "eog_token": int(result.eog_token) if result.eog else None}


def _stop_note(result) -> str:
    if not result.eog:
        return ""
    return (f" (stopped at the end-of-generation token {result.eog_token} before -n "
            f"{result.n_predict}; ngram-whatif replays it with --eog {result.eog_token} "
            f"-n {result.n_predict})")


def _write_metrics(args, result, stats, config, path: str, arch: str, device=None) -> None:
    """``--csv``: the per-token metrics CSV (bmoe_metrics v2), when asked; with ``--device`` its
    times are the device's predictions, labelled so (refsim.telemetry.predicted)."""
    if args.csv is None:
        return
    import numba
    from refsim.cli.device import run_times
    from refsim.telemetry import MetricsPreamble, write_metrics_csv
    times = run_times(args, device, result)
    lanes = {} if times is None else dict(io_threads=times.io_threads, overlap=int(times.overlap))
    preamble = MetricsPreamble.for_run(
        result, config, model=path, arch=arch, threads=numba.get_num_threads(),
        n_ubatch=args.ubatch, **lanes)
    write_metrics_csv(args.csv, result, stats, preamble, times)


def _report_dense(args, model, path, prompt, tokenizer, result, stats, config, decode_tps,
                  sim_tps, load_s, wall_s, margin) -> int:
    """Print (or ``--json``) a dense model's run: no expert cache; every target decode reads
    every tensor once, ``file_tensor_bytes`` (docs/real-model.md, "Byte accounting"; the prefill
    is not counted, as in the engine's per-token figure)."""
    from refsim.telemetry import summary_lines
    spec = model.spec
    per_decode = model.bytes.file_tensor_bytes
    read = stats.decodes * per_decode
    mib_per_token = read / MIB / result.n_gen if result.n_gen else None
    text = _ids_text(model, result.tokens, tokenizer)
    if args.json:
        print(json.dumps({
            "model": path, "builtin": False, "arch": spec.arch, "dense": True,
            "numerics": args.numerics, "spec": result.spec,
            "prompt_tokens": [int(t) for t in prompt], "tokens": result.tokens.tolist(),
            "text": text, **stop_fields(result),
            "decodes": stats.decodes, "drafted": stats.drafted, "accepted": stats.accepted,
            "dense_bytes_per_decode": per_decode, "read_bytes": read, "read_mib": read / MIB,
            "mib_per_token": mib_per_token, "cache": None,
            "sim_tok_per_s": decode_tps, "sim_total_tok_per_s": sim_tps,
            "min_margin": margin, "load_s": load_s, "wall_s": wall_s}))
        return 0
    print(f"model: {path} arch={spec.arch} n_layer={spec.n_layer} dense (n_expert=0) "
          f"numerics={args.numerics}")
    print(f"prompt: {len(prompt)} tokens; generated {result.n_gen}{_stop_note(result)}: {text!r}")
    print(f"tokens: {' '.join(str(t) for t in result.tokens.tolist())}")
    for line in summary_lines(stats):
        print(line)
    per_tok = "n/a (no tokens)" if mib_per_token is None else f"{num(mib_per_token, 2)} MiB/token"
    print(f"dense: no expert cache (a dense model routes no experts; --cache-mb does not apply): "
          f"every decode reads all {per_decode} B = {num(per_decode / MIB, 2)} MiB of tensors; "
          f"{stats.decodes} decodes read {num(read / MIB, 2)} MiB, {per_tok} "
          f"(decode reads / generated tokens)")
    print(f"simulator: {num(decode_tps, 2)} tok/s decode ({stats.decodes} decodes), "
          f"{num(sim_tps, 2)} tok/s incl. prefill; smallest top-1/top-2 logit margin {margin:.4g}")
    return 0


def run(args) -> int:
    if args.prompts is not None:
        from refsim.scale.prompts import run_prompts
        return run_prompts(args)
    if args.out_dir is not None or args.workers != 1 or args.dask_scheduler is not None:
        raise UsageError("--out-dir, --workers and --dask-scheduler: with --prompts only (one "
                         "prompt runs in this process)")
    with contextlib.ExitStack() as report:
        return _run(args, report)


def _run(args, report: contextlib.ExitStack, quiet: bool = False):
    """Run one generation and print its report; with ``quiet`` (``--prompts``' workers) write the
    outputs, print nothing and return the ``--json`` object instead of an exit code."""
    from refsim.cache import ExpertCache
    from refsim.cache.summary import CacheSummary
    from refsim.cli.common import check_outputs, knobs_from_args, report_stream, warn_below_token_cycle
    from refsim.forward.builtin import BUILTIN_CACHE_MB, builtin_model_file, builtin_model_path
    from refsim.model import open_model
    from refsim.model.tokenizer import Tokenizer
    from refsim.spec import SpecConfig, draft_source_for, run_generation
    from refsim.spec.forward_target import ForwardTarget
    from refsim.telemetry import RunStats, summary_lines
    from refsim.trace import TraceHeader

    # every flag and output path is checked before the model is built or opened
    config = SpecConfig.from_args(args)
    if config.enabled and 0 < args.ubatch < config.draft_max + 1:
        raise UsageError(f"argument --ubatch: expected 0 (= n_batch) or an integer >= --draft + 1 = "
                         f"{config.draft_max + 1} (the verify batch), got '{args.ubatch}'")
    if args.predict_prefetch and config.spec == "mtp":
        raise UsageError("--predict-prefetch with --mtp: refsim's MTP head pass has no stale-gate "
                         "seam (docs/streaming-knobs.md); use --ngram or no speculation")
    if args.route_ahead and config.enabled:
        raise UsageError("--route-ahead: mutually exclusive with speculation (--ngram, --mtp), "
                         "as the engine rejects it")
    if args.route_ahead and args.predict_log:
        raise UsageError("--route-ahead and --predict-log: mutually exclusive (the probe would "
                         "grade a predictor against a routing rewritten from it)")
    budget = None if args.cache_mb is None else ExpertCache.mib_to_bytes(args.cache_mb)
    builtin = args.model is None
    check_outputs({"--route-trace": args.route_trace, "--csv": args.csv},
                  {"MODEL": args.model} if not builtin else {"built-in MODEL": builtin_model_file()})
    from refsim.cli.device import device_figures, load_device_args
    device = load_device_args(args)
    if not builtin and not os.path.exists(args.model):
        raise ConfigError(f"MODEL {args.model}: no such file")
    path = builtin_model_path() if builtin else args.model
    t0 = time.perf_counter()
    model = open_model(path)
    dense = not model.spec.n_expert
    if dense:
        refuse_cache_flags(args, path, model)
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
    cache = knobs = ahead = probe = None
    if not dense:
        expert_bytes = [model.expert_bytes(il) for il in range(target.n_layer)]  # + the MTP head with --mtp
        if budget is None:  # no --cache-mb
            budget = (ExpertCache.mib_to_bytes(BUILTIN_CACHE_MB) if builtin
                      else sum(expert_bytes) * spec.n_expert // 2)
        knobs = knobs_from_args(args, spec.n_expert_used, traced=args.route_trace is not None)
        cache = ExpertCache(expert_bytes, spec.n_expert, budget, knobs)
        if (knobs.route_ahead or knobs.predict_prefetch) and target.hooks is None:
            flag = "--route-ahead" if knobs.route_ahead else "--predict-prefetch"
            raise ConfigError(f"{flag}: refsim runs the stale gate live in the qwen3moe and qwen35moe "
                              f"passes (exact/ggml numerics), not {spec.arch} --numerics {args.numerics}")
        if args.predict_log and (target.hooks is None or config.spec == "mtp"):
            raise ConfigError("--predict-log: refsim probes the qwen3moe and qwen35moe passes, without --mtp")
        if target.hooks is not None:      # the pass's streaming hooks (refsim.streaming.hooks.LayerHooks)
            target.hooks.arm(knobs, target.n_layer, args.predict_log)
            ahead, probe = target.hooks.ahead, target.hooks.probe
    writer = contextlib.nullcontext()
    if args.route_trace is not None and not dense:
        from refsim.trace import TraceWriter
        header = TraceHeader(model=path, arch=spec.arch, n_layer=target.n_layer, n_expert=spec.n_expert,
                             n_expert_used=spec.n_expert_used, expert_bytes=expert_bytes,
                             dense_bytes=[model.dense_bytes(il) for il in range(target.n_layer)],
                             extra=(("cache_mb", budget_mib(budget)),))   # the recording budget, exact
        # the prediction columns exactly when the run has a ranking to record (docs/trace-format.md)
        writer = TraceWriter(args.route_trace, header,
                             pred=bool(knobs and (knobs.predict_prefetch or knobs.route_ahead)))
    # the trace's rows are written as the events arrive (temp file renamed at the end): the run
    # keeps no event (keep_events=False), only the first and last the telemetry reads
    with writer as trace_out:
        t1 = time.perf_counter()
        result = run_generation(target, source, prompt, args.n_predict, cache=cache,
                                draft_max=config.draft_max, keep_events=False,
                                on_event=trace_out.write_record if trace_out is not None else None)
        wall_s = time.perf_counter() - t1
    stats = dataclasses.replace(RunStats.from_run(result), load_s=load_s)
    sim_tps = ratio(result.n_gen + len(prompt), wall_s)    # None (n/a, null) if no time was measured
    decode_tps = stats.tok_s
    to_stdout = report_stream({"--route-trace": args.route_trace, "--csv": args.csv})
    if dense:
        _write_metrics(args, result, stats, config, path, model.spec.arch)
        if quiet:
            return {"prompt_tokens": prompt, "tokens": result.tokens.tolist(), "dense": True,
                    "decodes": stats.decodes, "drafted": stats.drafted, "accepted": stats.accepted,
                    "read_bytes": stats.decodes * model.bytes.file_tensor_bytes, "cache": None}
        # the outputs are written: the report goes to stderr if one of them went to stdout
        report.enter_context(contextlib.redirect_stdout(to_stdout))
        return _report_dense(args, model, path, prompt, tokenizer, result, stats, config,
                             decode_tps, sim_tps, load_s, wall_s,
                             getattr(target, "inner", target).min_margin)
    t_bytes = model.t_bytes()
    summary = CacheSummary.from_stats(cache.stats, budget, result.n_gen, t_bytes)
    from refsim.cache.summary import KnobSummary
    knob_summary = KnobSummary.from_stats(cache.stats, knobs) if knobs.any_on else None
    warn_below_token_cycle("run", [budget], t_bytes)
    _write_metrics(args, result, stats, config, path, spec.arch, device)
    if not quiet:
        # the outputs are written: the report goes to stderr if one of them went to stdout
        report.enter_context(contextlib.redirect_stdout(to_stdout))
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
        "dense": False, **stop_fields(result),
    }
    # drafting is not a term of the device model: effective tok/s there equals tok/s
    timed = device_figures(args, device, summary.mib_per_token or 0.0,
                           max(1.0, result.n_gen / stats.decodes) if stats.decodes else 1.0)
    if timed is not None:
        out["device"] = timed.as_dict()
    if knob_summary is not None:
        out["knobs"] = knob_summary.as_dict()
    if probe is not None:
        out["predict"] = {n: dataclasses.asdict(probe.total(n)) for n in probe.per_layer}
    if ahead is not None:
        out["route_ahead"] = {"n": ahead.n, "committed": ahead.committed,
                              "passthrough": ahead.passthrough, "agree_pct": ahead.agree_pct}
    if quiet:
        return out
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"model: {path}{' (built-in)' if builtin else ''} arch={spec.arch} n_layer={spec.n_layer} "
          f"n_expert={spec.n_expert} k={spec.n_expert_used} numerics={args.numerics}")
    from refsim.cache.ledger import memory_ledger
    led = memory_ledger(model, len(prompt) + args.n_predict, config.draft_max if config.enabled else 0,
                        config.spec == "mtp")
    print(f"memory: kv {num(led.kv_bytes / MIB, 2)} MiB, recurrent {num(led.recurrent_bytes / MIB, 2)} MiB "
          f"(1 + n_rs_seq {led.n_rs_seq} slots), draft context "
          f"{num((led.draft_kv_bytes + led.draft_buffer_bytes) / MIB, 2)} MiB; speculation takes "
          f"{num(led.speculation_bytes / MIB, 2)} MiB (refsim memory for the auto budget)")
    print(f"prompt: {len(prompt)} tokens; generated {result.n_gen}{_stop_note(result)}: {text!r}")
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
    print(f"cache: budget {budget_mib(budget)} MiB, T (one token cycle) {num(t_bytes / MIB, 2)} MiB; "
          f"{pct_text(summary.hit_pct_cum)} hit cumulative (prefill{head} included), "
          f"{pct_text(summary.hit_pct_decode)} decode-only (the target's decodes), "
          f"{num(summary.mib_per_token, 3)} MiB/token (decode reads / generated tokens)")
    draft = f", MTP head {num(summary.draft_read_bytes / MIB, 2)}" if config.spec == "mtp" else ""
    print(f"cache: {summary.lookups} lookups, {summary.hits} hits; read {num(summary.read_mib, 2)} MiB in all "
          f"(prefill {num(summary.prefill_read_bytes / MIB, 2)}, decode {num(summary.decode_read_mib, 2)}{draft}); "
          f"{summary.evictions} evictions, {summary.rereads} re-reads")
    print(f"simulator: {num(decode_tps, 2)} tok/s decode ({stats.decodes} decodes), "
          f"{num(sim_tps, 2)} tok/s incl. prefill; smallest top-1/top-2 logit margin "
          f"{getattr(target, 'inner', target).min_margin:.4g}")
    if timed is not None:
        print(timed.line())
    if args.route_trace is not None:
        flags = "".join(f" {f} {v}" for f, v, on in (
            ("--drop-cold-experts", f"{knobs.drop_frac:g}", knobs.drop_on),
            ("--prefetch", knobs.prefetch, knobs.prefetch > 0),
            ("--route-ahead", knobs.route_ahead, knobs.route_ahead > 0),
            ("--predict-prefetch --predict-spec-max", knobs.predict_spec_max,
             knobs.predict_prefetch)) if on)
        flags += " --drop-in-prefill" if knobs.drop_on and knobs.drop_in_prefill else ""
        print(f"route trace: {args.route_trace} (refsim replay {args.route_trace} --cache-mb "
              f"{budget_mib(budget)}{flags})", file=sys.stderr)
        if config.spec == "mtp":
            print("route trace: the MTP draft context's routings are not in it (the engine's format "
                  "omits them), so its replay differs from this run by the head's lookups and reads",
                  file=sys.stderr)
    return 0
