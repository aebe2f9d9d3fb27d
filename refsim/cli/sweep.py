"""``refsim sweep TRACE --cache-mb LIST --policy LIST [--csv OUT] [--plot OUT.png]``."""

from __future__ import annotations

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.cache.batches import BatchTrace
from refsim.cli.common import (add_knob_args, check_outputs, knobs_from_args,
                               warn_below_token_cycle)
from refsim.errors import ConfigError
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
                   help="policies, comma-separated; a repeated name is dropped (first kept) "
                        f"(default: all: {','.join(known_policies())})")
    p.add_argument("--csv", metavar="OUT",
                   help="write budget_mib,policy,hit_pct_cum,hit_pct_decode,read_mib to OUT")
    p.add_argument("--plot", metavar="OUT.png",
                   help="write a PNG of hit %% and MiB/token against the budget (matplotlib)")
    add_knob_args(p, route_ahead=True)
    p.set_defaults(func=run)


def run(args) -> int:
    budgets = parse_budgets_mib(args.cache_mb)
    if args.policy is not None and not args.policy.strip(", "):
        raise ConfigError(f"--policy: empty list; expected names from {','.join(known_policies())}")
    policies = ([x.strip() for x in args.policy.split(",") if x.strip()] if args.policy
                else known_policies())
    check_outputs({"--csv": args.csv, "--plot": args.plot}, {"TRACE": args.trace})
    if args.plot is not None:
        from refsim.studies.plot import require_matplotlib
        require_matplotlib()  # before the sweep, not after it
    trace = read_trace(args.trace)
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
    print(f"model: {h.model} arch={h.arch}")
    print(f"shape: {h.n_layer} layers, {h.n_expert} experts, top-{h.n_expert_used}, "
          f"{h.expert_bytes[0] / MIB:.2f} MiB/expert (layer 0)")
    print(f"batches: {result.n_batch} ({trace.n_prompt} prompt positions, "
          f"{result.tokens} decoded tokens); T = {h.token_cycle_bytes / MIB:.1f} MiB")
    if knobs.any_on:
        print(f"knobs: --drop-cold-experts {knobs.drop_frac:g} --prefetch {knobs.prefetch} "
              f"--route-ahead {knobs.route_ahead}; "
              f"one ExpertCache replay per budget (dropped, spec_MiB, useful: decode only)")
    for line in format_table(result):
        print(line)
    if args.csv is not None:
        write_sweep_csv(args.csv, result)
    if args.plot is not None:
        from refsim.studies.plot import plot_sweep
        plot_sweep(result, args.plot, title=f"{h.model.rsplit('/', 1)[-1]}: cache budget sweep")
    return 0
