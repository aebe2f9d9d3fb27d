"""``refsim analyze TRACE --view V``: the views of the engine's route-analyze.py, from refsim."""

from __future__ import annotations

import argparse
import json

from refsim.analysis import FRAMINGS, VIEWS, AnalyzeOptions, analyze, format_text, parse_span
from refsim.analysis.report import CELL_MODES
from refsim.cache import ExpertCache
from refsim.cli.common import cache_mib, check_outputs, nonneg_int, positive_int
from refsim.errors import ConfigError, UsageError
from refsim.trace import read_trace

PLOT_VIEWS = ("reuse", "workset", "overlap")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "analyze", help="views of a route trace: matrix, hot, reuse, overlap, workset, cache, "
                        "entropy, bytes",
        description="The views of the engine's route-analyze.py on a route_trace v1 file, per "
                    "decode (refsim's framing: a verify batch is one unit) or per position "
                    "(--framing position: the script's). Definitions: docs/analysis.md.")
    p.add_argument("trace", help="route trace file (route_trace v1)")
    p.add_argument("--view", required=True, choices=VIEWS, help="which view")
    p.add_argument("--framing", default="decode", choices=FRAMINGS,
                   help="units: one per decode event (default) or one per context position "
                        "(route-analyze.py's)")
    p.add_argument("--phase", default="decode", choices=["decode", "prefill", "all"],
                   help="trace phase (default decode)")
    p.add_argument("--turn", type=nonneg_int, default=None, metavar="N",
                   help="session turn (default: all)")
    p.add_argument("--steps", default=None, metavar="A-B",
                   help="positions: 'A-B', 'A..B', 'N' or a comma list (decode framing keeps "
                        "decodes whose first position is inside; matrix: rows to show)")
    p.add_argument("--layers", default=None, metavar="A-B", help="layers, same syntax")
    p.add_argument("--top", type=positive_int, default=8, metavar="N",
                   help="hot view: experts listed per layer (default 8)")
    p.add_argument("--max-steps", type=nonneg_int, default=20, metavar="N",
                   help="matrix view: units shown when --steps is absent (default 20, 0 = all)")
    p.add_argument("--cells", default="experts", choices=CELL_MODES,
                   help="matrix view: what a cell shows (default experts)")
    p.add_argument("--cache-mb", default=None, metavar="N", type=cache_mib,
                   help="cache view: also replay the trace through refsim's LRU at N MiB")
    p.add_argument("--json", action="store_true", help="print the view as one JSON object")
    p.add_argument("--plot", metavar="OUT.png",
                   help="reuse, workset, overlap: also write a figure, .png, .pdf or .svg by the "
                        "extension (needs matplotlib)")
    p.set_defaults(func=run)


def options_from_args(args: argparse.Namespace) -> AnalyzeOptions:
    """Flags to :class:`AnalyzeOptions` (validated)."""
    budget = ExpertCache.mib_to_bytes(args.cache_mb) if args.cache_mb is not None else None
    if budget is not None and args.view != "cache":
        raise UsageError("--cache-mb: only the cache view replays (use --view cache)")
    try:
        steps, layers = parse_span(args.steps, "--steps"), parse_span(args.layers, "--layers")
    except ConfigError as exc:          # the flag's text alone: a usage error (docs/cli.md)
        raise UsageError(str(exc)) from None
    return AnalyzeOptions(view=args.view, framing=args.framing, phase=args.phase,
                          turn=args.turn, steps=steps, layers=layers, top=args.top,
                          max_steps=args.max_steps, cells=args.cells, budget_bytes=budget)


def run(args) -> int:
    opt = options_from_args(args)
    if args.plot is not None:
        if args.view not in PLOT_VIEWS:
            raise UsageError(f"--plot: only the {', '.join(PLOT_VIEWS)} views plot "
                             f"(got --view {args.view})")
        from refsim.analysis.plot import require_matplotlib
        require_matplotlib()
    check_outputs({"--plot": args.plot}, {"TRACE": args.trace})
    if args.plot is not None:
        from refsim.studies.plot import plot_format
        plot_format(args.plot)          # the extension names a format we write, before any work
    trace = read_trace(args.trace)
    trace.require_rows("analyze")
    rep = analyze(trace, opt)
    if args.plot is not None:
        from refsim.analysis.plot import plot_analysis
        plot_analysis(trace, opt, args.plot)
    if args.json:
        print(json.dumps(rep))
    else:
        print(format_text(rep), end="")
    return 0
