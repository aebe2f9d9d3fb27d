"""``refsim run [MODEL.gguf] [--prompt TEXT | --prompt-tokens IDS] -n N [--cache-mb M] ...``:
greedy (optionally n-gram speculative) generation with refsim's reference forward pass, every
decode fed to the engine's expert-cache model.

The command builds a :class:`refsim.session.RunConfig` from its flags (:func:`config_from_args`),
runs :func:`refsim.session.simulate` and prints the :class:`~refsim.session.RunReport`: text, or
``--json`` (:meth:`~refsim.session.RunReport.as_dict`). A dense model (``n_expert == 0``, the real
Gemma-3-270M) runs the same loop without an expert cache (refsim.session).
"""

from __future__ import annotations

import contextlib
import json
import sys

from refsim import MIB
from refsim.errors import UsageError
from refsim.fmt import budget_mib, num, pct_text


def add_parser(sub) -> None:
    from refsim.cli.common import (add_knob_args, add_spec_args, cache_mib, nonneg_int,
                                   positive_int, token_ids)
    from refsim.forward.builtin import BUILTIN_CACHE_MB
    p = sub.add_parser(
        "run", help="generate with the reference forward pass and count expert-cache traffic",
        description="Greedy generation with refsim's reference forward pass; every decode is fed to "
                    "the engine's LRU expert cache. With no MODEL, a small synthetic qwen3moe is made "
                    "once (under $REFSIM_CACHE or ~/.cache/refsim) and used.")
    p.add_argument("model", nargs="?", help="GGUF model, or gemma-3-270m: the real Gemma-3-270M "
                                            "Q4_K_M from its installed package, assembled once "
                                            "(default, or builtin: the built-in synthetic qwen3moe)")
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
    p.add_argument("--baseline-plain", action="store_true",
                   help="with --mtp: also run the plain decode of the same prompt and split the "
                        "MTP run's flash bytes into baseline, verify widening and head "
                        "(docs/speculation.md)")
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


def config_from_args(args):
    """The :class:`refsim.session.RunConfig` of the parsed flags: every refusal the flags alone
    decide (the speculation flags, then the run's flag combinations, then the knobs), before any
    file is touched; the model's own refusals are :func:`refsim.session.simulate`'s.

    Raises
    ------
    UsageError
        A flag value or combination the command refuses (:class:`~refsim.spec.SpecConfig`,
        :func:`refsim.session.check_run_flags`, :func:`refsim.cli.common.knobs_from_args`).
    """
    from refsim.cli.common import knobs_from_args
    from refsim.session import RunConfig, check_run_flags
    from refsim.spec import SpecConfig
    from refsim.timing.device_options import DeviceOptions
    spec = SpecConfig.from_args(args)
    check_run_flags(spec, args.ubatch, args.route_ahead, args.predict_prefetch, args.predict_log)
    knobs = knobs_from_args(args, None, traced=args.route_trace is not None)
    return RunConfig(model=args.model, prompt=args.prompt, prompt_tokens=args.prompt_tokens,
                     n_predict=args.n_predict, numerics=args.numerics, spec=spec,
                     cache_mb=args.cache_mb, knobs=knobs, ubatch=args.ubatch,
                     route_trace=args.route_trace, csv=args.csv, predict_log=args.predict_log,
                     device=DeviceOptions.from_args(args))


def _stop_note(result) -> str:
    if not result.eog:
        return ""
    return (f" (stopped at the end-of-generation token {result.eog_token} before -n "
            f"{result.n_predict}; ngram-whatif replays it with --eog {result.eog_token} "
            f"-n {result.n_predict})")


def _warn(line: str) -> None:
    print(line, file=sys.stderr)


def run(args) -> int:
    if args.prompts is not None:
        from refsim.scale.prompts import run_prompts
        return run_prompts(args, lambda: config_from_args(args))
    if args.out_dir is not None or args.workers != 1 or args.dask_scheduler is not None:
        raise UsageError("--out-dir, --workers and --dask-scheduler: with --prompts only (one "
                         "prompt runs in this process)")
    from refsim.cli.common import report_stream
    from refsim.session import simulate
    config = config_from_args(args)
    if args.baseline_plain and config.spec.spec != "mtp":
        raise UsageError("argument --baseline-plain: needs --mtp (it splits the MTP run's flash "
                         "bytes)")
    report = simulate(config, warn=_warn)
    split = None
    if args.baseline_plain:
        from refsim.session import baseline_plain
        split = baseline_plain(report)
    # the outputs are written: the report goes to stderr if one of them went to stdout
    with contextlib.redirect_stdout(report_stream({"--route-trace": args.route_trace,
                                                   "--csv": args.csv})):
        if args.json:
            doc = report.as_dict()
            if split is not None:
                doc["baseline_plain"] = split.as_dict()
            print(json.dumps(doc))
        elif report.dense:
            _print_dense(report)
        else:
            _print_text(report, split)
    if not args.json and not report.dense and args.route_trace is not None:
        _print_trace_note(report)
    return 0


def _print_dense(report) -> None:
    """A dense model's run: no expert cache; every target decode reads every tensor once,
    ``file_tensor_bytes`` (docs/real-model.md, "Byte accounting"; the prefill is not counted, as
    in the engine's per-token figure)."""
    from refsim.telemetry import summary_lines
    spec, result, stats = report.model.spec, report.result, report.stats
    per_decode, read = report.dense_bytes_per_decode, report.read_bytes
    mib_per_token = read / MIB / result.n_gen if result.n_gen else None
    print(f"model: {report.model_path} arch={spec.arch} n_layer={spec.n_layer} dense (n_expert=0) "
          f"numerics={report.config.numerics}")
    print(f"prompt: {len(report.prompt)} tokens; generated {result.n_gen}{_stop_note(result)}: "
          f"{report.text!r}")
    print(f"tokens: {' '.join(str(t) for t in result.tokens.tolist())}")
    for line in summary_lines(stats):
        print(line)
    per_tok = "n/a (no tokens)" if mib_per_token is None else f"{num(mib_per_token, 2)} MiB/token"
    print(f"dense: no expert cache (a dense model routes no experts; --cache-mb does not apply): "
          f"every decode reads all {per_decode} B = {num(per_decode / MIB, 2)} MiB of tensors; "
          f"{stats.decodes} decodes read {num(read / MIB, 2)} MiB, {per_tok} "
          f"(decode reads / generated tokens)")
    print(f"simulator: {num(report.sim_tok_per_s, 2)} tok/s decode ({stats.decodes} decodes), "
          f"{num(report.sim_total_tok_per_s, 2)} tok/s incl. prefill; smallest top-1/top-2 logit "
          f"margin {report.min_margin:.4g}")


def _print_text(report, split=None) -> None:
    """An MoE model's run: the model, memory, prompt and tokens, the engine's summary lines, the
    knobs' and predictors' lines, the cache and the simulator's speed."""
    from refsim.telemetry import summary_lines
    spec, result, stats, summary = report.model.spec, report.result, report.stats, report.cache
    config = report.config
    mtp = config.spec.spec == "mtp"
    print(f"model: {report.model_path}{' (built-in)' if config.builtin else ''} arch={spec.arch} "
          f"n_layer={spec.n_layer} n_expert={spec.n_expert} k={spec.n_expert_used} "
          f"numerics={config.numerics}")
    led = report.ledger()
    print(f"memory: kv {num(led.kv_bytes / MIB, 2)} MiB, recurrent {num(led.recurrent_bytes / MIB, 2)} MiB "
          f"(1 + n_rs_seq {led.n_rs_seq} slots), draft context "
          f"{num((led.draft_kv_bytes + led.draft_buffer_bytes) / MIB, 2)} MiB; speculation takes "
          f"{num(led.speculation_bytes / MIB, 2)} MiB (refsim memory for the auto budget)")
    print(f"prompt: {len(report.prompt)} tokens; generated {result.n_gen}{_stop_note(result)}: "
          f"{report.text!r}")
    print(f"tokens: {' '.join(str(t) for t in result.tokens.tolist())}")
    from refsim.telemetry.lines import drafted_decodes_line
    for line in summary_lines(stats):
        print(line)
        if split is not None and line.startswith("mtp: of "):
            print(split.line())             # after the engine's own flash-split line
        if " tokens per verify decode (" in line:   # the engine's figure is per decode: say so
            extra = drafted_decodes_line(stats)
            if extra is not None:
                print(extra)
    if config.spec.policy != "fixed":
        s = result.steps
        print(f"draft policy: {config.spec.policy} (lossless: it picks the width only); "
              f"{sum(x.n_draft for x in s)} draft tokens verified in "
              f"{sum(1 for x in s if x.n_draft)} verify decodes of {len(s)}")
    if report.knobs is not None:
        from refsim.telemetry.lines import knob_lines
        for line in knob_lines(report.knobs):
            print(line)
    if report.predict is not None:
        for line in report.predict.lines():
            print(line)
    if report.route_ahead is not None:
        print(report.route_ahead.line())
    head = ", the MTP head's draft lookups" if mtp else ""
    print(f"cache: budget {budget_mib(report.budget_bytes)} MiB, T (one token cycle) "
          f"{num(report.t_bytes / MIB, 2)} MiB; "
          f"{pct_text(summary.hit_pct_cum)} hit cumulative (prefill{head} included), "
          f"{pct_text(summary.hit_pct_decode)} decode-only (the target's decodes), "
          f"{num(summary.mib_per_token, 3)} MiB/token (decode reads / generated tokens)")
    draft = f", MTP head {num(summary.draft_read_bytes / MIB, 2)}" if mtp else ""
    print(f"cache: {summary.lookups} lookups, {summary.hits} hits; read {num(summary.read_mib, 2)} MiB in all "
          f"(prefill {num(summary.prefill_read_bytes / MIB, 2)}, decode {num(summary.decode_read_mib, 2)}{draft}); "
          f"{summary.evictions} evictions, {summary.rereads} re-reads")
    print(f"simulator: {num(report.sim_tok_per_s, 2)} tok/s decode ({stats.decodes} decodes), "
          f"{num(report.sim_total_tok_per_s, 2)} tok/s incl. prefill; smallest top-1/top-2 logit margin "
          f"{report.min_margin:.4g}")
    if report.device is not None:
        print(report.device.line())
        if report.result.spec != "off":
            print(f"  {_eps_words(report)}")


def _eps_words(report) -> str:
    """Where the device line's extra-position cost comes from (``--position-cost``, the device
    file's eps at the run's verify width, or the labelled default): refsim.cli.device.eps_line."""
    from refsim.cli.device import eps_line
    from refsim.timing import load_device
    from refsim.timing.whatif import resolve_model, run_width
    opts = report.config.device
    dev = load_device(opts.device)
    w = run_width(report.result)
    model = report.device.model if report.device is not None else \
        resolve_model(dev, opts.device_model)          # the floor the run was priced with
    return eps_line(opts, (dev, opts.device, model), [w]) + \
        f" (verify decodes of {w} positions)"


def _print_trace_note(report) -> None:
    """On stderr: how to replay the route trace the run wrote (its budget and knobs)."""
    knobs, path = report.config.knobs, report.config.route_trace
    flags = "".join(f" {f} {v}" for f, v, on in (
        ("--drop-cold-experts", f"{knobs.drop_frac:g}", knobs.drop_on),
        ("--prefetch", knobs.prefetch, knobs.prefetch > 0),
        ("--route-ahead", knobs.route_ahead, knobs.route_ahead > 0),
        ("--predict-prefetch --predict-spec-max", knobs.predict_spec_max,
         knobs.predict_prefetch)) if on)
    flags += " --drop-in-prefill" if knobs.drop_on and knobs.drop_in_prefill else ""
    print(f"route trace: {path} (refsim replay {path} --cache-mb "
          f"{budget_mib(report.budget_bytes)}{flags})", file=sys.stderr)
    if report.config.spec.spec == "mtp":
        print("route trace: the MTP draft context's routings are not in it (the engine's format "
              "omits them), so its replay differs from this run by the head's lookups and reads",
              file=sys.stderr)
