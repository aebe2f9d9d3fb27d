"""Draft width 1..4 for --mtp vs --ngram vs off on a synthetic qwen35moe (with its MTP block).

One command::

    python examples/spec_study.py [--n-predict 32] [--cache-frac 0.3] [--ram-mb 8000]

Traffic columns come from live runs of refsim's reference pass on a seeded synthetic hybrid
(4 trunk layers + the nextn block, 8 experts top-2), every decode fed to the engine's LRU at
``--cache-frac`` of the streamed expert bytes. The memory columns are the ledger
(:mod:`refsim.cache.ledger`) of a header-only file with Qwen3.6-35B-A3B's real widths (40
layers, 256 experts, Q4_K_M-like), at ``n_ctx = 4096`` and ``--ram-mb``: the rollback snapshots
(``n_rs_seq = draft``) and the ``--cache-mb auto`` budget left. Random weights make the MTP head
a poor drafter (acceptance near 0): the traffic split, not the speed-up, is what this shows.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.cache.ledger import memory_ledger
from refsim.model import open_model, write_synthetic
from refsim.spec import NgramDraft, SpecConfig, run_generation
from refsim.spec.forward_target import ForwardTarget
from refsim.spec.mtp import mtp_source_for
from refsim.telemetry import RunStats
from refsim.testing.twins import qwen36_twin as twin

PROMPT = [1, 5, 77, 123, 42, 299, 7, 260, 33, 150, 1, 5, 77, 123, 42, 299, 7, 260]  # a repeat for n-gram


def cell(model, spec: str, draft: int, n_predict: int, frac: float):
    n_span = model.spec.n_layer_all if spec == "mtp" else model.spec.n_layer
    eb = np.array([model.expert_bytes(il) for il in range(n_span)], np.int64)
    cache = ExpertCache(eb, model.spec.n_expert, int(frac * eb.sum() * model.spec.n_expert))
    if spec == "mtp":
        target, source = mtp_source_for(model, SpecConfig.from_flags(mtp=True, draft=draft))
    else:
        target, source = ForwardTarget(model), (NgramDraft() if spec == "ngram" else None)
    r = run_generation(target, source, PROMPT, n_predict, cache=cache, draft_max=draft)
    return RunStats.from_run(r)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-predict", type=int, default=32)
    ap.add_argument("--cache-frac", type=float, default=0.3)
    ap.add_argument("--ram-mb", type=float, default=8000.0)
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        model = open_model(write_synthetic(os.path.join(d, "h.gguf"), "qwen35moe", "Q8_0", nextn=True, seed=a.seed))
        big = open_model(twin(os.path.join(d, "q36.gguf")))
        base = memory_ledger(big, 4096, 0, False, ram_mb=a.ram_mb)
        print(f"synthetic qwen35moe seed {a.seed}, {a.n_predict} tokens, cache {a.cache_frac:.0%} of streamed experts; "
              f"memory columns: Qwen3.6-35B-A3B widths, n_ctx 4096, --ram-mb {a.ram_mb:g} "
              f"(auto budget without speculation {base.budget_bytes // MIB} MiB)")
        print("| cell | accept | tok/verify | MiB/tok | head MiB/tok | verify MiB/tok | head share | "
              "snapshot MiB | spec MiB | auto budget MiB |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for spec, draft in [("off", 1)] + [(s, w) for s in ("mtp", "ngram") for w in (1, 2, 3, 4)]:
            s = cell(model, spec, draft, a.n_predict, a.cache_frac)
            led = memory_ledger(big, 4096, 0 if spec == "off" else draft, spec == "mtp", ram_mb=a.ram_mb)
            head = s.draft_read_bytes / MIB / s.tokens
            tot = s.mib_per_token
            acc = f"{s.acceptance_pct:.1f} %" if s.drafted else "—"
            share = f"{100 * s.draft_read_bytes / s.read_bytes:.1f} %" if s.read_bytes else "—"
            name = "off" if spec == "off" else f"{spec} {draft}"
            print(f"| {name} | {acc} | {s.tokens_per_decode:.2f} | {tot:.3f} | {head:.3f} | {tot - head:.3f} | {share} | "
                  f"{led.snapshot_bytes / MIB:.1f} | {led.speculation_bytes / MIB:.1f} | {led.budget_bytes // MIB} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
