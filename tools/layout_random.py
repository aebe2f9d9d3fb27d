"""Requests per token of random slice orders, the baseline beside ``refsim layout``'s table
(docs/io.md, "File layout"): the held-apart decodes of ``refsim layout``'s default split, read
at ``--merge-gap 0`` under 20 random per-layer orders (seed 0).

Usage: ``PYTHONPATH=. python3 tools/layout_random.py MODEL.gguf TRACE CACHE_MB [DATA_START]``
"""

import argparse
import sys

import numpy as np

from refsim.cli.layout import evaluate, split_events
from refsim.io.layout import layout_from_model
from refsim.io.requests import IoConfig
from refsim.model import open_model
from refsim.studies.replay import replay_trace
from refsim.trace import read_trace


def main(argv: list[str]) -> int:
    model, trace_path, mb = argv[0], argv[1], float(argv[2])
    data_start = int(argv[3]) if len(argv) > 3 else None
    lay = layout_from_model(open_model(model), data_start=data_start)
    trace = read_trace(trace_path)
    _, held = split_events(trace, argparse.Namespace(fit_turns=None, fit_fraction=None))
    records = replay_trace(trace, int(mb * 2**20)).records
    rng = np.random.default_rng(0)
    vals = []
    for _ in range(20):
        order = np.stack([rng.permutation(lay.n_expert) for _ in range(lay.n_layer)])
        s, _ = evaluate(trace, records, held, lay.permuted(order), IoConfig(4, False, 0))
        vals.append(s.requests_per_token)
    print(f"random orders: requests/token mean {np.mean(vals):.1f}, min {min(vals):.1f}, "
          f"max {max(vals):.1f}")
    return 0


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(main, sys.argv[1:]))
