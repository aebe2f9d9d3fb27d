"""``refsim view TRACE [--metrics RUN.csv] --html OUT.html``: one self-contained HTML page."""

from __future__ import annotations

from refsim.analysis.viewer import metrics_of_trace, write_page
from refsim.cli.common import check_outputs, report_stream
from refsim.errors import ConfigError
from refsim.fmt import num
from refsim.trace import read_trace


def add_parser(sub) -> None:
    p = sub.add_parser(
        "view", help="one self-contained HTML page of a route trace (matrix, hit/miss, widening)",
        description="Pack a route trace (and optionally the run's per-token metrics CSV) into one "
                    "HTML page that opens offline: the step x layer matrix coloured by cache "
                    "outcome, per-decode reads and hit rate, verify batches, the union widening per "
                    "layer and hot experts. docs/analysis.md, 'refsim view'.")
    p.add_argument("trace", help="route trace file (route_trace v1)")
    p.add_argument("--html", required=True, metavar="OUT.html", help="page to write (- = stdout)")
    p.add_argument("--metrics", metavar="RUN.csv",
                   help="per-token metrics CSV of the same run (# bmoe_metrics v2 or v1)")
    p.set_defaults(func=run)


def run(args) -> int:
    check_outputs({"--html": args.html}, {"TRACE": args.trace, "--metrics": args.metrics})
    trace = read_trace(args.trace)
    if trace.n_rows == 0:
        raise ConfigError(f"{args.trace}: the trace has a preamble but no rows (nothing to show)")
    metrics = metrics_of_trace(args.metrics, trace) if args.metrics is not None else None
    size = write_page(trace, args.html, metrics)
    print(f"wrote {args.html} ({num(size / 1024, 1)} KiB)", file=report_stream({"--html": args.html}))
    return 0
