"""Regenerate traces/demo.route.csv: a small route trace made by refsim itself.

The routes come from refsim.testing.routes (a seeded synthetic router); the residency and
expert_bytes columns are what refsim's LRU records at the budget named in the model line
(``cache_mb=``), so `refsim replay traces/demo.route.csv --cache-mb 256` agrees on every row.
Shape: 8 MoE layers, 32 experts, top-4, entry sizes of Qwen3-30B-A3B-Q4_K_M's two type mixes
(3059712 / 2654208 bytes), 20 prompt tokens and 64 decoded tokens.

Usage: python tools/make_demo_trace.py [OUT]
"""

import sys

import numpy as np

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.testing.routes import synthetic_run_events
from refsim.trace import TraceHeader, write_trace

CACHE_MB = 256


def main(out: str = "traces/demo.route.csv") -> None:
    n_layer, n_expert, k = 8, 32, 4
    eb = np.array([3059712 if il % 3 == 0 else 2654208 for il in range(n_layer)], np.int64)
    db = np.where(eb == 3059712, 11953152, 11682816).astype(np.int64)
    header = TraceHeader(model="refsim-synthetic-router", arch="qwen3moe", n_layer=n_layer,
                         n_expert=n_expert, n_expert_used=k, expert_bytes=eb, dense_bytes=db,
                         extra=(("cache_mb", str(CACHE_MB)), ("seed", "7")))
    events = synthetic_run_events(20, 64, n_layer, n_expert, k, seed=7)
    cache = ExpertCache(eb, n_expert, CACHE_MB * MIB)
    recs = [cache.apply(e) for e in events]
    write_trace(out, header, events, [r.residency for r in recs], [r.charged_bytes for r in recs])


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(main, *sys.argv[1:]))
