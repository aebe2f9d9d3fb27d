"""``refsim drop-replay TRACE... [--frac LIST] [--n-expert-used LIST] [--cache-mb N]``: the
engine's static drop bound (route-drop-replay.py) and, with a budget, the dynamic replay beside it
(:mod:`refsim.studies.drop_replay`)."""

from __future__ import annotations

import argparse
import json
import os

from refsim.cache import ExpertCache
from refsim.cli.common import cache_mib, fraction, int_list
from refsim.errors import ConfigError
from refsim.studies.drop_replay import (DEFAULT_FRACS, report_json, report_lines,
                                        require_study_weights)
from refsim.trace import read_trace


FRACS_RANGE = "fractions like 0.5,0.75,1.0, each a number in [0, 1]"


def _fracs(text: str) -> list[float]:
    """``type=`` validator of ``--frac``: comma-separated numbers in [0, 1] (ASCII, as every
    number flag: docs/cli.md "Conventions")."""
    return [fraction_of(part, text) for part in text.split(",")]


def fraction_of(part: str, text: str) -> float:
    try:
        return fraction(part.strip())
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected {FRACS_RANGE}, got {text!r}") from None


def add_parser(sub) -> None:
    p = sub.add_parser(
        "drop-replay", help="the --drop-cold-experts static bound (route-drop-replay.py) and "
                            "the dynamic replay",
        description="Replay route traces against the cache-aware dropping policy: the engine's "
                    "static upper bound (recorded residency; identical to route-drop-replay.py) "
                    "and, with --cache-mb, the dynamic replay through the LRU with the policy in "
                    "force (docs/streaming-knobs.md).")
    p.add_argument("traces", nargs="+", metavar="TRACE", help="route trace files (route_trace v1)")
    p.add_argument("--frac", type=_fracs, default=list(DEFAULT_FRACS), metavar="LIST",
                   help="thresholds as fractions of 1/k (default 0.25,0.5,0.75,1.0, the script's)")
    p.add_argument("--n-expert-used", type=int_list(1), default=None, metavar="LIST",
                   help="static top-k baselines, e.g. 3,5 (default k-1 down to 1, the script's)")
    p.add_argument("--cache-mb", metavar="N", type=cache_mib,
                   help="budget in MiB for the dynamic replay (omit: the static bound only)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object instead of the report (keys: docs/streaming-knobs.md)")
    p.set_defaults(func=run)


def run(args) -> int:
    budget = ExpertCache.mib_to_bytes(args.cache_mb) if args.cache_mb is not None else None
    keeps = args.n_expert_used
    traces = []
    for path in args.traces:           # every trace read and checked before any report is printed
        trace = read_trace(path)
        k = trace.header.n_expert_used
        if keeps is not None and not all(1 <= x < k for x in keeps):
            raise ConfigError(f"{path}: --n-expert-used: expected values in 1..{k - 1} (below the "
                              f"trace's top-k {k}), got {','.join(map(str, keeps))}")
        require_study_weights(trace)
        traces.append((path, trace))
    if args.json:
        print(json.dumps({"traces": [report_json(trace, os.path.basename(path), args.frac, keeps,
                                                 budget) for path, trace in traces]}))
        return 0
    for path, trace in traces:
        for line in report_lines(trace, os.path.basename(path), args.frac, keeps, budget):
            print(line)
    return 0
