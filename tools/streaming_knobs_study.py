"""The worked study of docs/streaming-knobs.md: hit %, MiB/token and experts dropped on a route
trace for every --drop-cold-experts F x cache budget x --prefetch K (refsim.studies.sweep.
sweep_knobs, one ExpertCache replay per point), printed as a Markdown table, optionally plotted.

    PYTHONPATH=. python3 tools/streaming_knobs_study.py TRACE [--frac 0,0.5,0.75,1.0]
        [--cache-mb 1000,2000,3000,4000] [--prefetch 0,1,2] [--plot OUT.png]
"""

from __future__ import annotations

import argparse
import sys

from refsim.streaming.knobs import StreamKnobs
from refsim.cli.common import int_range
from refsim.studies.sweep import parse_budgets_mib, sweep_knobs
from refsim.trace import read_trace


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--frac", default="0,0.5,0.75,1.0")
    ap.add_argument("--cache-mb", default="1000,2000,3000,4000")
    ap.add_argument("--prefetch", type=int_range, default=[0, 1, 2])
    ap.add_argument("--plot")
    args = ap.parse_args(argv)
    trace = read_trace(args.trace)
    budgets = parse_budgets_mib(args.cache_mb)
    fracs = [float(x) for x in args.frac.split(",")]
    results = {}
    for f in fracs:
        for k in args.prefetch:
            results[(f, k)] = sweep_knobs(trace, budgets, StreamKnobs(drop_frac=f, prefetch=k))
    print("| F | prefetch | budget MiB | hit % (decode) | hit % (cum.) | MiB/token | "
          "spec MiB/token | experts dropped | dropped % | useful / prefetched |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (f, k), res in results.items():
        for r in res.rows:
            s, kn = r.summary, r.knobs
            dropped = f"{kn.experts_dropped}" if kn else "0"
            pct = f"{kn.dropped_pct:.1f}" if kn else "0.0"
            spec = f"{kn.spec_read_mib / s.tokens:.2f}" if kn and s.tokens else "0.00"
            useful = f"{kn.spec_useful}/{kn.spec_experts}" if kn and k else "-"
            print(f"| {f:g} | {k} | {r.budget_mib:g} | {s.hit_pct_decode:.1f} | "
                  f"{s.hit_pct_cum:.1f} | {s.mib_per_token:.2f} | {spec} | {dropped} | {pct} | "
                  f"{useful} |")
    if args.plot:
        from refsim.studies.plot import plot_knob_grid
        plot_knob_grid(results, args.plot, title="qwen3-30b-a3b trace: drop x budget x prefetch")
    return 0


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(main))
