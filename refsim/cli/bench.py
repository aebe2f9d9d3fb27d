"""``refsim bench RUN.csv... [--md OUT] [--json] [--compare] [--plot OUT.png]``: throughput,
pressure, the trimmed per-token mean with its bootstrap CI and the time split of the engine's
recorded runs."""

from __future__ import annotations

import json
import os
import sys

from refsim.cli.common import check_outputs, int_in, nonneg_int, report_stream, seed
from refsim.errors import ConfigError
from refsim.fileio import write_text_atomic
from refsim.studies.bench import (DEFAULT_RESAMPLES, DEFAULT_SEED, DEFAULT_TRIM, MAX_RESAMPLES,
                                  bench_run, compare_runs, format_markdown, format_text)
from refsim.telemetry.metrics_reader import read_metrics


_resamples = int_in(1, MAX_RESAMPLES)
"""``--resamples``: an integer in 1..MAX_RESAMPLES (docs/cli.md "Conventions")."""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bench", help="throughput and device-pressure tables of the engine's metrics CSVs",
        description="Read the engine's per-token metrics CSVs (bmoe_metrics v2, v1 or the legacy "
                    "layout, with the .metrics sidecar when present) and print the tables of the "
                    "engine's bench-analyze.py (throughput, device pressure) plus the per-token "
                    "mean after warm-up with its bootstrap 95% CI, the compute / I/O / stall "
                    "split and the effective flash bandwidth. Definitions: docs/analysis.md.")
    p.add_argument("runs", nargs="+", metavar="RUN.csv", help="per-token metrics CSV(s)")
    p.add_argument("--md", metavar="OUT", help="also write the tables as Markdown to OUT (- = stdout)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--compare", action="store_true",
                   help="exactly two runs A B: print B - A with the CI of the difference and say "
                        "whether the two CIs overlap")
    p.add_argument("--trim", type=nonneg_int, default=DEFAULT_TRIM, metavar="N",
                   help=f"warm-up tokens left out of the per-token mean (default {DEFAULT_TRIM})")
    p.add_argument("--resamples", type=_resamples, default=DEFAULT_RESAMPLES, metavar="N",
                   help=f"bootstrap resamples (default {DEFAULT_RESAMPLES}, at most {MAX_RESAMPLES})")
    p.add_argument("--seed", type=seed, default=DEFAULT_SEED, metavar="N",
                   help=f"bootstrap seed for numpy.random.default_rng (default {DEFAULT_SEED})")
    p.add_argument("--plot", metavar="OUT.png",
                   help="figure (.png, .pdf or .svg by the extension): tok/s per token with the "
                        "trimmed mean and CI, and the compute / flash wait / mgmt split per token "
                        "(needs matplotlib)")
    p.set_defaults(func=run)


def _labels(paths: list[str]) -> list[str]:
    """File names, or the paths as given when two runs share a file name."""
    names = [os.path.basename(p) for p in paths]
    return names if len(set(names)) == len(names) else list(paths)


def run(args) -> int:
    if args.compare and len(args.runs) != 2:
        raise ConfigError(f"--compare: expected exactly two runs A B, got {len(args.runs)}")
    check_outputs({"--md": args.md, "--plot": args.plot},
                  {f"RUN {p}": p for p in args.runs})
    if args.plot is not None:
        from refsim.studies.plot import plot_format, require_matplotlib
        plot_format(args.plot)          # the extension names a format we write, before any work
        require_matplotlib()
    runs = [read_metrics(p) for p in args.runs]
    labels = _labels(args.runs)
    for i, r in enumerate(runs):     # refsim run --device: times predicted, flagged in every table
        if r.predicted_by is not None:
            labels[i] += f" [predicted: {r.predicted_by}]"
            print(f"refsim bench: note: {r.path}: its times are predictions of device "
                  f"{r.predicted_by} (preamble times=predicted), not measurements", file=sys.stderr)
    rows = [bench_run(r, label, args.trim, args.resamples, args.seed)
            for r, label in zip(runs, labels)]
    comparison = (compare_runs(runs[0], rows[0], runs[1], rows[1], args.resamples, args.seed)
                  if args.compare else None)
    for r in rows:          # after the one refusal (--compare needs both means), before any output
        if r.untimed:
            print(f"refsim bench: note: {r.label}: {r.untimed}: its tok/s, wall ms/token and "
                  f"per-token mean and CI are n/a", file=sys.stderr)
        elif r.trimmed is None:
            print(f"refsim bench: note: {r.label}: --trim {args.trim} leaves {max(r.tokens - args.trim, 0)} of "
                  f"its {r.tokens} tokens; the per-token mean and its CI need at least 2 (n/a in the "
                  f"table; lower --trim)", file=sys.stderr)
    if args.md is not None:
        write_text_atomic(args.md, format_markdown(rows, comparison), what="--md")
    if args.plot is not None:
        from refsim.studies.bench_plot import MAX_PLOTTED_RUNS, plot_bench
        shown = plot_bench(runs, rows, args.plot)
        if shown < len(rows):
            print(f"refsim bench: note: --plot shows the first {MAX_PLOTTED_RUNS} runs only",
                  file=sys.stderr)
    report = report_stream({"--md": args.md})       # stderr when the Markdown went to stdout
    if args.json:
        out = {"runs": [r.as_dict() for r in rows]}
        if comparison is not None:
            out["comparison"] = comparison.as_dict()
        print(json.dumps(out), file=report)
    else:
        report.write(format_text(rows, comparison))
    return 0
