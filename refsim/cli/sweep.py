"""``refsim sweep TRACE --cache-mb LIST --policy LIST [--csv OUT] [--plot OUT.png]``."""

from __future__ import annotations

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.cache.batches import BatchTrace
from refsim.cache.policy import parse_policy_list
from refsim.cli.common import (add_knob_args, check_outputs, knobs_from_args, report_stream,
                               warn_below_token_cycle)
from refsim.cli.device import (add_device_args, device_figures, load_device_args,
                               tokens_per_decode)
from refsim.fmt import num
from refsim.studies.sweep import (DEFAULT_BUDGETS_MIB, format_table, known_policies,
                                  parse_budgets_mib, sweep_budgets, sweep_knobs,
                                  write_sweep_csv)
from refsim.trace import read_trace


def add_parser(sub) -> None:
    p = sub.add_parser(
        "sweep", help="hit %% and flash MiB of a route trace at many budgets under many policies",
        description="Replay a route trace at every cache budget under every policy (exact; the "
                    "lru column from the one-pass curve). Output as the engine's route-replay.py.")
    p.add_argument("trace", help="route trace file (route_trace v1)")
    p.add_argument("--cache-mb", metavar="LIST",
                   default=",".join(str(b) for b in DEFAULT_BUDGETS_MIB),
                   help="budgets in MiB: N,N,... or START:STOP:STEP; a repeated budget is "
                        "dropped (first kept) (default: %(default)s)")
    p.add_argument("--policy", metavar="LIST", default=None,
                   help="policies, comma-separated, each NAME or NAME:KEY=VALUE[,KEY=VALUE] "
                        "(e.g. lru,s3fifo:small=0.2,ghost=0.9,arc); a repeated one is dropped "
                        f"(first kept) (default: all: {','.join(known_policies())})")
    p.add_argument("--csv", metavar="OUT",
                   help="write budget_mib,policy,hit_pct_cum,hit_pct_decode,read_mib,over_budget "
                        "to OUT (- = stdout)")
    p.add_argument("--plot", metavar="OUT.png",
                   help="write a plot of hit %% and MiB/token against the budget (matplotlib); "
                        "the format is the extension's: .png, .pdf or .svg")
    add_knob_args(p, route_ahead=True)
    add_device_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    budgets = parse_budgets_mib(args.cache_mb)
    policies = parse_policy_list(args.policy) if args.policy is not None else known_policies()
    check_outputs({"--csv": args.csv, "--plot": args.plot}, {"TRACE": args.trace})
    if args.plot is not None:
        from refsim.studies.plot import plot_format, require_matplotlib
        plot_format(args.plot)  # the extension names a format we write
        require_matplotlib()  # before the sweep, not after it
    device = load_device_args(args)
    trace = read_trace(args.trace)
    trace.require_rows("sweep")
    h = trace.header
    knobs = knobs_from_args(args, h.n_expert_used)
    if knobs.any_on:
        if args.policy is None:
            policies = ["lru"]                    # the knobs exist for the engine's LRU only
        result = sweep_knobs(trace, budgets, knobs, policies)
    else:
        batches = BatchTrace.from_events(trace.events, h.expert_bytes, h.n_expert)
        result = sweep_budgets(batches, budgets, policies, h.token_cycle_bytes)
    warn_below_token_cycle("sweep", [ExpertCache.mib_to_bytes(b) for b in budgets], h.token_cycle_bytes)
    out = report_stream({"--csv": args.csv})   # stderr when the CSV goes to stdout
    print(f"model: {h.model} arch={h.arch}", file=out)
    print(f"shape: {h.n_layer} layers, {h.n_expert} experts, top-{h.n_expert_used}, "
          f"{num(h.expert_bytes[0] / MIB, 2)} MiB/expert (layer 0)", file=out)
    print(f"batches: {result.n_batch} ({trace.n_prompt} prompt positions, "
          f"{result.tokens} decoded tokens); T = {num(h.token_cycle_bytes / MIB, 1)} MiB", file=out)
    if knobs.any_on:
        print(f"knobs: --drop-cold-experts {knobs.drop_frac:g} --prefetch {knobs.prefetch} "
              f"--route-ahead {knobs.route_ahead}; "
              f"one ExpertCache replay per budget (dropped, spec_MiB, useful: decode only)", file=out)
    tok_s = None
    if device is not None:
        tpd = tokens_per_decode(trace, result.tokens)
        tok_s = [device_figures(args, device, r.summary.mib_per_token or 0.0, tpd).predicted_tok_s
                 for r in result.rows]
        d = device_figures(args, device, 0.0)
        print(f"pred_tok/s: device {args.device} (predicted, not measured; {d.io_threads} lanes, "
              f"{'--overlap' if d.overlap else 'serial'}, compute floor of {d.model})", file=out)
    for line in format_table(result, tok_s):
        print(line, file=out)
    if args.csv is not None:
        write_sweep_csv(args.csv, result, tok_s)
    if args.plot is not None:
        from refsim.studies.plot import plot_sweep
        plot_sweep(result, args.plot, title=f"{h.model.rsplit('/', 1)[-1]}: cache budget sweep",
                   tok_s=tok_s)
    return 0
