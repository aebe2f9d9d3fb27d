"""``refsim union TRACE --window 1..8 [--cache-mb N]``: the verify-batch widening study."""

from __future__ import annotations

from refsim.cache import ExpertCache
from refsim.cli.common import cache_mib, int_list
from refsim.fmt import NA, budget_mib, num, ratio
from refsim.studies.union import union_study
from refsim.trace import read_trace


def add_parser(sub) -> None:
    p = sub.add_parser(
        "union", help="per-layer expert union and flash MiB of verify batches of width w",
        description="For windows of w consecutive decode positions: the per-layer union of the "
                    "top-k sets (mean, p50, p90) and, with --cache-mb, the flash MiB a verify "
                    "batch of width w would read (decode positions replayed in batches of w).")
    p.add_argument("trace", help="route trace file (route_trace v1)")
    p.add_argument("--window", type=int_list(1), default=list(range(1, 9)), metavar="W",
                   help="window widths: N, N,M,... or A..B (default 1..8)")
    p.add_argument("--cache-mb", metavar="N", type=cache_mib,
                   help="cache budget in MiB for the replay (omit: union sizes only)")
    p.set_defaults(func=run)


def run(args) -> int:
    budget = ExpertCache.mib_to_bytes(args.cache_mb) if args.cache_mb is not None else None
    trace = read_trace(args.trace)
    rows = union_study(trace, args.window, budget)
    h = trace.header
    print(f"trace: {trace.path} ({h.n_layer} layers, {h.n_expert} experts, "
          f"top-{h.n_expert_used})")
    head = f"{'w':>2}  {'windows':>7}  {'union':>6}  {'p50':>5}  {'p90':>5}  {'union_MiB':>9}"
    if budget is not None:
        print(f"replay at {budget_mib(budget)} MiB; decode positions in batches of w")
        head += f"  {'decodes':>7}  {'read_MiB':>9}  {'MiB/token':>9}  {'x w=1':>6}  {'hit_dec%':>8}"
    print(head)
    base = None
    for r in rows:
        line = (f"{r.window:>2}  {r.n_windows:>7}  {r.union_mean:>6.2f}  {r.union_p50:>5.1f}  "
                f"{r.union_p90:>5.1f}  {num(r.union_mib_mean, 1):>9}")
        if budget is not None:
            if r.window == 1:
                base = r.mib_per_token
            rel = num(ratio(r.mib_per_token, base), 2) if r.mib_per_token is not None and base else NA
            line += (f"  {r.decodes:>7}  {num(r.read_mib, 1):>9}  {num(r.mib_per_token, 2):>9}  {rel:>6}  "
                     f"{num(r.hit_pct_decode, 3):>8}")
        print(line)
    return 0
