#!/usr/bin/env python3
"""Quality cost of the lossy verify-routing variants on the trained MoEs (docs/spec-policies.md,
issue 30 item 3): ``cap:U`` and ``consensus:T`` against the unmodified model and against
``--drop-cold-experts 0.75``, with docs/real-moe.md's measures (held-out nats/token, top-1 and
free-running greedy agreement) and the decode MiB/token each costs.

    PYTHONPATH=. python3 tools/verify_routing_study.py [--budget small|full]

Models: ``models/tiny-moe-q8_0.gguf`` (qwen3moe) and ``models/tiny-moe35-q8_0.gguf`` (qwen35moe),
the two trained MoEs of docs/real-moe.md (same corpus and tokenizer); held-out text from the
training script's split (``tools/real_moe_studies.py``'s ``held_out_texts``, prose and code).

Teacher-forced verify batches: each held-out window is decoded as the loop decodes a verify
batch whose ``--draft 3`` drafts are all right: the BOS is prefilled, then every target decode
feeds ``[tok, d1, d2, d3]`` = the next four held-out tokens (:class:`OracleDraft`), through
:func:`refsim.spec.run_generation` with an :class:`~refsim.cache.ExpertCache` of
``real_moe_studies.CACHE_MB`` MiB; every logits row is scored against the next held-out token
(``real_moe_studies.TeacherForced``: nats = ``logsumexp(z) - z[next]``). So every decode is a verify
decode the variants act on, and the rows scored are the same tokens for every row of the table.
Baseline = the same batches unmodified; ``drop 0.75`` = the same with ``--drop-cold-experts 0.75``
armed (decode graphs); the variants run without drop (:mod:`refsim.streaming.verify_route`
refuses the pair). Weight discarded = of the routing weight of the decodes' routed slots, the part
the drops or the moves took (for drop: the dropped slots' weight, from the events).

Greedy agreement: free-running ``--ngram`` (draft 3, min-match 3) runs on held-out prompts with
the variant against the unmodified run (which is greedy's tokens): the share of positions with
the same token, and the first position that differs in each run (n = none).

Every number is refsim's (simulated, never a device's); every variant row is lossy.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODELS = {"tiny-moe": REPO / "models" / "tiny-moe-q8_0.gguf",
          "tiny-moe35": REPO / "models" / "tiny-moe35-q8_0.gguf"}
DRAFT = 3
DROP = 0.75


@dataclass(frozen=True)
class Budget:
    n_windows: int      # teacher-forced windows per kind (prose, code)
    window: int         # tokens per window
    n_prompts: int      # free-running prompts per kind
    prompt_len: int
    n_gen: int
    variants: tuple     # verify-routing variants (besides the baseline and drop 0.75)
    models: tuple


BUDGETS = {
    "small": Budget(1, 40, 1, 40, 16, ("cap:32", "cap:6", "consensus:0.2"), ("tiny-moe",)),
    "full": Budget(4, 160, 4, 96, 64, ("cap:8", "cap:6", "cap:5", "cap:4", "consensus:0.1",
                                       "consensus:0.2", "consensus:0.3"), tuple(MODELS)),
}


def _real_moe():
    spec = importlib.util.spec_from_file_location("real_moe_studies", REPO / "tools" / "real_moe_studies.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod                 # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


class OracleDraft:
    """A draft source that proposes the held-out continuation: at ``n_past`` it drafts
    ``stream[n_past + 1 : n_past + 1 + n_max]`` (the loop's teacher-forced target then accepts it
    all). No model, no reads, no events."""

    name = "ngram"          # any name but 'off': the loop drafts

    def __init__(self, stream: np.ndarray):
        self.stream = np.asarray(stream, np.int64)

    def draft(self, ctx, last, n_past, n_max):
        from refsim.spec.draft import Draft
        return Draft(tokens=self.stream[n_past + 1:n_past + 1 + n_max].astype(np.int32))

    def accept(self, n_acc):
        return ()


def _target(model, variant):
    from refsim.spec.forward_target import ForwardTarget
    from refsim.streaming.hooks import LayerHooks
    from refsim.streaming.verify_route import VerifyRouter
    router = None if variant in (None, "drop") else VerifyRouter(variant)
    return ForwardTarget(model, "exact", hooks=LayerHooks(verify=router)), router


def _cache(model, variant, cache_mb):
    from refsim.cache import ExpertCache
    from refsim.streaming.knobs import StreamKnobs
    spec = model.spec
    eb = [model.expert_bytes(il) for il in range(spec.n_layer)]
    knobs = StreamKnobs(drop_frac=DROP) if variant == "drop" else None
    return ExpertCache(eb, spec.n_expert, ExpertCache.mib_to_bytes(cache_mb), knobs)


def _discarded(res, router) -> tuple[float, float]:
    """(discarded, total) routing weight of the run's target decodes."""
    from refsim.events import DecodeKind
    lost = tot = 0.0
    for e in res.events:
        if e.kind not in (DecodeKind.PLAIN, DecodeKind.VERIFY) or e.weights is None:
            continue
        w = e.weights.astype(np.float64)
        tot += float(w[e.routes >= 0].sum())
        if router is None and e.dropped is not None:
            lost += float(w[e.dropped].sum())
    if router is not None:
        lost = router.weight_discarded
    return lost, tot


def teacher_forced_batches(rm, model, stream, variant) -> dict:
    """One window through verify batches of DRAFT + 1 held-out tokens (module docstring)."""
    from refsim.cache.summary import CacheSummary
    from refsim.spec import run_generation
    inner, router = _target(model, variant)
    inner.eos_ids = frozenset()                   # held-out text crosses </s>: score through it
    tgt = rm.TeacherForced(inner, stream)
    cache = _cache(model, variant, rm.CACHE_MB)
    n_gen = stream.size - 1
    res = run_generation(tgt, OracleDraft(stream), stream[:1], n_gen, cache=cache, draft_max=DRAFT)
    assert res.tokens.tolist() == stream[1:].tolist()
    s = CacheSummary.from_stats(cache.stats, cache.budget_bytes, n_gen, model.t_bytes())
    lost, tot = _discarded(res, router)
    return dict(nll=tgt.nll, top1=tgt.top1, read_mib=s.decode_read_mib, tokens=n_gen, lost=lost, tot=tot,
                decodes=len(res.steps))


def free_running(rm, model, prompt, n_gen, variant) -> list[int]:
    """``refsim run --ngram`` (draft 3) with the variant, in process: the emitted tokens."""
    from refsim.spec import run_generation
    from refsim.spec.draft import NgramDraft
    tgt, _ = _target(model, variant)
    res = run_generation(tgt, NgramDraft(), prompt, n_gen, cache=_cache(model, variant, rm.CACHE_MB),
                         draft_max=DRAFT)
    return res.tokens.tolist()


def study(name: str, budget: Budget, rm) -> list[dict]:
    from refsim.model import open_model
    from refsim.model.tokenizer import Tokenizer
    model = open_model(str(MODELS[name]))
    tok = Tokenizer.from_model(model)
    windows = rm.held_out_texts(tok, budget.n_windows, budget.window)
    prompts = rm.held_out_texts(tok, budget.n_prompts, budget.prompt_len)
    variants = (None, "drop") + tuple(budget.variants)
    base_top1, base_greedy = {}, {}
    rows = []
    for v in variants:
        r = dict(model=name, variant="unmodified" if v is None else
                 f"--drop-cold-experts {DROP:g}" if v == "drop" else f"{v} (lossy)",
                 nll=0.0, n=0, read_mib=0.0, tokens=0, lost=0.0, tot=0.0, top1_same=0,
                 greedy_same=0, greedy_n=0, first=[])
        for kind, items in windows.items():
            for i, (_n, ids) in enumerate(items):
                tf = teacher_forced_batches(rm, model, ids, v)
                if v is None:
                    base_top1[(kind, i)] = tf["top1"]
                r["nll"] += sum(tf["nll"])
                r["n"] += len(tf["nll"])
                r["read_mib"] += tf["read_mib"]
                r["tokens"] += tf["tokens"]
                r["lost"] += tf["lost"]
                r["tot"] += tf["tot"]
                r["top1_same"] += sum(a == b for a, b in zip(tf["top1"], base_top1[(kind, i)]))
        for kind, items in prompts.items():
            for i, (_n, ids) in enumerate(items):
                toks = free_running(rm, model, ids, budget.n_gen, v)
                if v is None:
                    base_greedy[(kind, i)] = toks
                ref = base_greedy[(kind, i)]
                same = [a == b for a, b in zip(toks, ref)]
                r["greedy_same"] += sum(same)
                r["greedy_n"] += len(ref)
                r["first"].append(same.index(False) if False in same else len(same))
        r["nats"] = r["nll"] / r["n"]
        r["mib_per_token"] = r["read_mib"] / r["tokens"]
        r["discarded_pct"] = 100.0 * r["lost"] / r["tot"] if r["tot"] else 0.0
        r["top1_pct"] = 100.0 * r["top1_same"] / r["n"]
        r["greedy_pct"] = 100.0 * r["greedy_same"] / r["greedy_n"]
        rows.append(r)
    b = rows[0]
    for r in rows:
        r["d_nats"] = r["nats"] - b["nats"]
        r["read_saved_pct"] = 100.0 * (1 - r["read_mib"] / b["read_mib"])
    return rows


def table(rows: list[dict]) -> str:
    out = ["| model | routing | decode MiB/token | read saved % | weight discarded % | nats/token | Δ nats | "
           "top-1 = unmodified % | greedy tokens = unmodified % | first divergence |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['variant']} | {r['mib_per_token']:.3f} | {r['read_saved_pct']:.1f} | "
                   f"{r['discarded_pct']:.2f} | {r['nats']:.3f} | {r['d_nats']:+.3f} | {r['top1_pct']:.1f} | "
                   f"{r['greedy_pct']:.1f} | {','.join(map(str, r['first']))} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", choices=tuple(BUDGETS), default="full")
    a = ap.parse_args(argv)
    budget = BUDGETS[a.budget]
    rm = _real_moe()
    rows = [r for name in budget.models for r in study(name, budget, rm)]
    print(table(rows))
    return 0 if all(math.isfinite(r["nats"]) for r in rows) else 1


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(main))
