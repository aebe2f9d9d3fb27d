"""N-gram speculation on a scripted copy-heavy target, with the engine's telemetry.

The target recites a seeded copy-heavy document (about 60 % of it copies earlier spans) and
routes each position to deterministic experts (a scripted router: 8 layers, 32 experts, top-4,
Qwen3-30B-A3B's 3059712-byte entries), so the expert cache has something to count. The run
prints the engine's summary lines (including the three ``ngram:`` lines), writes a
``bmoe_metrics v2`` CSV and a route trace, then replays the trace through the same LRU and
checks that lookups, hits and read bytes are the live run's.

Run:  python examples/ngram_scripted.py [--out DIR] [--draft 3] [--min-match 3]
Then: refsim replay DIR/ngram.route.csv --cache-mb 256
Times printed are the simulator's own seconds, not a device's.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.spec import SpecConfig, draft_source_for, run_generation
from refsim.studies.replay import replay_trace
from refsim.telemetry import (MetricsPreamble, RunStats, done_line, summary_lines,
                              write_metrics_csv)
from refsim.testing import DocumentScript, ScriptedRouter, ScriptedTarget, copy_heavy_document
from refsim.trace import TraceHeader, read_trace

N_LAYER, N_EXPERT, K = 8, 32, 4
EXPERT_BYTES = 3059712
CACHE_MB = 256
PROMPT_LEN, N_PREDICT = 64, 192


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="output folder (default: a temp folder)")
    ap.add_argument("--draft", type=int, default=3)
    ap.add_argument("--min-match", type=int, default=3)
    args = ap.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="refsim-ngram-")
    os.makedirs(out, exist_ok=True)

    doc = copy_heavy_document(PROMPT_LEN + N_PREDICT + 8, n_vocab=64, seed=7)
    router = ScriptedRouter(N_LAYER, N_EXPERT, K, seed=7)
    config = SpecConfig.from_flags(ngram=True, draft=args.draft,
                                   ngram_min_match=args.min_match)
    expert_bytes = np.full(N_LAYER, EXPERT_BYTES, dtype=np.int64)
    budget = ExpertCache.mib_to_bytes(CACHE_MB)

    for cfg in (SpecConfig(), config):
        target = ScriptedTarget(DocumentScript(doc, eos=0), router, eos_ids=(0,))
        cache = ExpertCache(expert_bytes, N_EXPERT, budget)
        result = run_generation(target, draft_source_for(cfg), doc[:PROMPT_LEN], N_PREDICT,
                                cache=cache, draft_max=cfg.draft_max)
        stats = RunStats.from_run(result)
        name = cfg.spec
        print(f"=== {name} ===")
        print("\n".join(summary_lines(stats)))
        print(done_line(stats, id=name))
        preamble = MetricsPreamble.for_run(result, cfg, model="scripted-copy-heavy.gguf",
                                           arch="scripted")
        csv_path = os.path.join(out, f"{name}.metrics.csv")
        write_metrics_csv(csv_path, result, stats, preamble)
        header = TraceHeader(model="scripted-copy-heavy.gguf", arch="scripted", n_layer=N_LAYER,
                             n_expert=N_EXPERT, n_expert_used=K, expert_bytes=expert_bytes,
                             dense_bytes=np.zeros(N_LAYER, dtype=np.int64))
        trace_path = os.path.join(out, f"{name}.route.csv")
        result.write_trace(trace_path, header)
        replay = replay_trace(read_trace(trace_path), budget).summary
        st = cache.stats
        same = (replay.lookups, replay.hits, replay.read_bytes) == \
            (st.total("lookups"), st.total("hits"), st.total("read_bytes"))
        print(f"replay of {trace_path}: {replay.hit_pct_cum:.1f}% hit, {replay.lookups} "
              f"lookups, {replay.read_bytes} bytes read -> "
              f"{'same as the live run' if same else 'DIFFERENT from the live run'}")
        print(f"wrote {csv_path}")
        if not same:
            return 1
    print(f"budget {budget / MIB:.0f} MiB; one token cycle T = "
          f"{K * EXPERT_BYTES * N_LAYER / MIB:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
