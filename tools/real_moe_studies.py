#!/usr/bin/env python3
"""The studies of docs/real-moe.md on the trained tiny-moe (issue 19, item 3): (a) n-gram
speculation on prose vs copy-heavy prompts, (b) routing statistics beside the engine's real
trace, (c) ``--drop-cold-experts F`` bytes saved vs held-out loss and greedy agreement, (d) the
stale-gate predictor per layer and route-ahead horizon.

    PYTHONPATH=. python3 tools/real_moe_studies.py --budget small|full [--json OUT] [--plot-dir DIR]

Prompts and held-out text come from the training script's own split
(``tools/train_tiny_moe.py``: ``load_corpus`` and ``is_held_out``): *prose* = held-out
library-reference topics (``doc/...``), *code* = held-out stdlib sources (``py/...``, the
copy-heavy text). Every run goes through refsim's own machinery, never a copy of it:
``refsim run --json`` in-process for live runs (plain, ``--ngram``, ``--drop-cold-experts``,
``--route-ahead``), :func:`refsim.spec.whatif.ngram_whatif` for acceptance and coverage,
:mod:`refsim.analysis.views` for routing statistics, and :func:`refsim.spec.run_generation`
with an :class:`~refsim.cache.ExpertCache` (the drop seam) and a
:class:`~refsim.streaming.predict.PredictProbe` for the teacher-forced passes, whose target is
:class:`TeacherForced` (the model's logits are scored, the held-out token is fed).

Budgets: ``small`` (CI: one short prompt and window per kind) and ``full`` (the docs' tables).
The cache budget of every study is :data:`CACHE_MB` MiB. Output: Markdown tables on stdout,
``--json`` the numbers, ``--plot-dir`` four PNGs (``real-moe-{ngram,routing,drop,predict}.png``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MODEL = REPO / "models" / "tiny-moe-q8_0.gguf"
REAL_TRACE = ("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")
"""The engine's recorded Qwen3-30B-A3B trace under the shared folder (refsim.testing.shared)."""
CACHE_MB = 2.0
"""Expert cache budget of every study, MiB: 40 of the 128 Q8_0 experts (31 %), 2.5 token cycles."""
DROP_FRACS = (0.0, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Budget:
    """How much of the held-out split one invocation uses."""

    n_prompts: int          # prompts per kind (a, b, c-agreement, d-horizon)
    prompt_len: int         # prompt tokens (BOS + the document's first tokens)
    n_gen: int              # tokens generated per run
    n_windows: int          # teacher-forced windows per kind (c, d)
    window: int             # tokens per window
    horizons: tuple         # route-ahead N values (d)


BUDGETS = {"small": Budget(1, 40, 24, 1, 48, (1,)), "full": Budget(4, 96, 64, 4, 160, (1, 2, 3))}


def _train_module():
    spec = importlib.util.spec_from_file_location("train_tiny_moe", REPO / "tools" / "train_tiny_moe.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def held_out_texts(tokenizer, n: int, length: int) -> dict[str, list[tuple[str, np.ndarray]]]:
    """Per kind (``prose``, ``code``) the first ``n`` held-out documents (by name) with at least
    ``length`` tokens, each as ``(name, ids[:length])`` (BOS first, as in training)."""
    tm = _train_module()
    out: dict[str, list] = {"prose": [], "code": []}
    for name, text in tm.load_corpus():
        if not tm.is_held_out(name):
            continue
        kind = "prose" if name.startswith("doc/") else "code"
        if len(out[kind]) >= n:
            continue
        ids = tokenizer.encode(text, add_bos=True)
        if ids.size >= length:
            out[kind].append((name, ids[:length].astype(np.int64)))
    return out


def cli_json(argv: list[str]) -> dict:
    """``refsim <argv> --json`` in this process; its JSON object."""
    from refsim.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        rc = main(argv + ["--json"])
    if rc != 0:
        raise RuntimeError(f"refsim {' '.join(argv)} exited {rc}")
    return json.loads(buf.getvalue())


def run_json(model, prompt, n, *flags, trace=None) -> dict:
    argv = ["run", str(model), "--prompt-tokens", ",".join(map(str, prompt)), "-n", str(n),
            "--cache-mb", f"{CACHE_MB:g}", *flags]
    if trace is not None:
        argv += ["--route-trace", str(trace)]
    return cli_json(argv)


# ── (a) n-gram speculation ──────────────────────────────────────────────────────────────────
def verify_union(trace_path) -> tuple[list[float], float, int]:
    """From a live ``--ngram`` run's trace (decode framing): per layer the mean number of distinct
    experts a verify decode (two or more positions) routed; the mean verify width (positions);
    the number of verify decodes."""
    from refsim.analysis.frame import frame_trace
    from refsim.trace import read_trace
    fr = frame_trace(read_trace(str(trace_path)), "decode", phase=1)
    verify = fr.unit_npos[fr.unit] > 1
    u, lay, e = fr.unit[verify], fr.layer[verify], fr.expert[verify]
    n_layer = int(fr.header.n_layer)
    if not u.size:
        return [float("nan")] * n_layer, float("nan"), 0
    trip = np.unique(np.stack([u, lay, e], 1)[e >= 0], axis=0)     # distinct (unit, layer, expert)
    ul, counts = np.unique(trip[:, :2], axis=0, return_counts=True)
    per_layer = [float(counts[ul[:, 1] == il].mean()) if (ul[:, 1] == il).any() else float("nan")
                 for il in range(n_layer)]
    units = np.unique(u)
    return per_layer, float(fr.unit_npos[units].mean()), int(units.size)


def study_ngram(prompts, budget: Budget, tmp: Path) -> dict:
    """Plain greedy and ``--ngram`` (draft 3, min-match 3: refsim's defaults) per prompt; the
    n-gram figures from :func:`ngram_whatif` on the plain stream, checked against the live run."""
    from refsim.spec.whatif import ngram_whatif
    out = {}
    for kind, items in prompts.items():
        agg = dict(prompts=len(items), tokens=0, decodes=0, drafted=0, accepted=0, drafted_steps=0,
                   plain_read_mib=0.0, spec_read_mib=0.0, spec_equals_greedy=True, whatif_equals_live=True,
                   union=[], width=[], verifies=0)
        runs = []
        for i, (name, ids) in enumerate(items):
            tp, ts = tmp / f"a-{kind}-{i}-plain.csv", tmp / f"a-{kind}-{i}-ngram.csv"
            plain = run_json(MODEL, ids, budget.n_gen, trace=tp)
            spec = run_json(MODEL, ids, budget.n_gen, "--ngram", trace=ts)
            runs.append(dict(name=name, prompt=ids.tolist(), plain=plain, trace=str(tp)))
            cell = ngram_whatif(np.r_[ids, plain["tokens"]], ids.size, [3], [3],
                                n_predict=budget.n_gen, eog=plain["eog_token"])[0]
            agg["spec_equals_greedy"] &= spec["tokens"] == plain["tokens"]
            agg["whatif_equals_live"] &= (cell.decodes, cell.drafted, cell.accepted) == (
                spec["decodes"], spec["drafted"], spec["accepted"])
            for key in ("tokens", "decodes", "drafted", "accepted", "drafted_steps"):
                agg[key] += getattr(cell, key)
            agg["plain_read_mib"] += plain["cache"]["decode_read_mib"]
            agg["spec_read_mib"] += spec["cache"]["decode_read_mib"]
            per_layer, width, nv = verify_union(ts)
            if nv:
                agg["union"].append((per_layer, nv))
                agg["width"].append((width, nv))
                agg["verifies"] += nv
        nv = agg["verifies"]
        agg["union_per_layer"] = ([sum(p[il] * w for p, w in agg["union"]) / nv
                                   for il in range(len(agg["union"][0][0]))] if nv else None)
        agg["verify_width"] = sum(x * w for x, w in agg["width"]) / nv if nv else None
        del agg["union"], agg["width"]
        agg["acceptance_pct"] = 100.0 * agg["accepted"] / agg["drafted"] if agg["drafted"] else None
        agg["coverage_pct"] = 100.0 * agg["drafted_steps"] / agg["decodes"]
        agg["tokens_per_decode"] = agg["tokens"] / agg["decodes"]
        agg["plain_mib_per_token"] = agg["plain_read_mib"] / agg["tokens"]
        agg["spec_mib_per_token"] = agg["spec_read_mib"] / agg["tokens"]
        out[kind] = dict(summary=agg, runs=runs)
    return out


# ── (c, d) teacher-forced passes ────────────────────────────────────────────────────────────
class TeacherForced:
    """A :class:`~refsim.forward.ForwardTarget` whose logits are scored against a fixed token
    stream and whose argmax is forced to that stream, so :func:`refsim.spec.run_generation`
    decodes held-out text one token per decode (every graph a decode graph, as the engine's
    generation; the drop seam and the predict probe see them all).

    ``nll`` collects, for each logits row predicting stream position ``p + 1``, the natural-log
    cross-entropy ``logsumexp(z) - z[stream[p + 1]]`` (nats); ``top1`` the model's own argmax
    there. Rows past the stream's end are not scored.
    """

    def __init__(self, inner, stream: np.ndarray):
        object.__setattr__(self, "inner", inner)
        object.__setattr__(self, "stream", np.asarray(stream, np.int64))
        object.__setattr__(self, "nll", [])
        object.__setattr__(self, "top1", [])
        object.__setattr__(self, "_n", 0)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __setattr__(self, name, value):       # the inner pass reads what the loop sets
        setattr(self.inner, name, value)

    def _force(self, out, last_positions):
        from refsim.spec.target import TargetOutput
        z = np.asarray(out.logits, np.float64)
        ids = np.empty(z.shape[0], np.int32)
        for r, p in enumerate(last_positions):
            nxt = p + 1
            if nxt < self.stream.size:
                m = z[r].max()
                self.nll.append(float(m + math.log(np.exp(z[r] - m).sum()) - z[r, self.stream[nxt]]))
                self.top1.append(int(z[r].argmax()))
                ids[r] = self.stream[nxt]
            else:
                ids[r] = int(z[r].argmax())
        return TargetOutput(ids=ids, routes=out.routes, weights=out.weights, dropped=out.dropped)

    def prefill(self, tokens):
        return self._force(self.inner.prefill(tokens), [len(tokens) - 1])

    def decode(self, tokens, positions):
        return self._force(self.inner.decode(tokens, positions), list(positions))


def teacher_forced(stream: np.ndarray, drop_frac: float, probe: bool = False, trace=None,
                   n_prefill: int = 1) -> dict:
    """Feed ``stream`` through the trained model: ``n_prefill`` tokens prefilled, the rest one per
    decode, through an :class:`ExpertCache` of :data:`CACHE_MB` MiB with ``--drop-cold-experts
    drop_frac`` armed (decode graphs only, the engine's default). Returns mean nats/token, the
    model's argmaxes, decode read MiB, experts dropped and (``probe``) the predict probe."""
    from refsim.cache import ExpertCache
    from refsim.streaming.knobs import StreamKnobs
    from refsim.cache.summary import CacheSummary, KnobSummary
    from refsim.spec.forward_target import ForwardTarget
    from refsim.model import open_model
    from refsim.streaming.predict import PredictProbe
    from refsim.spec import run_generation
    from refsim.trace import TraceHeader
    model = open_model(str(MODEL))
    inner = ForwardTarget(model, "exact")
    inner.eos_ids = frozenset()                   # held-out text crosses </s>: score through it
    tgt = TeacherForced(inner, stream)
    spec = model.spec
    eb = [model.expert_bytes(il) for il in range(spec.n_layer)]
    knobs = StreamKnobs(drop_frac=drop_frac, traced=trace is not None)
    cache = ExpertCache(eb, spec.n_expert, ExpertCache.mib_to_bytes(CACHE_MB), knobs)
    pr = None
    if probe:
        pr = inner.hooks.probe = PredictProbe(spec.n_layer)
    n_gen = stream.size - n_prefill
    res = run_generation(tgt, None, stream[:n_prefill], n_gen, cache=cache)
    assert res.tokens.tolist() == stream[n_prefill:].tolist()
    if trace is not None:
        res.write_trace(str(trace), TraceHeader(
            model=str(MODEL), arch=spec.arch, n_layer=spec.n_layer, n_expert=spec.n_expert,
            n_expert_used=spec.n_expert_used, expert_bytes=eb,
            dense_bytes=[model.dense_bytes(il) for il in range(spec.n_layer)]))
    s = CacheSummary.from_stats(cache.stats, cache.budget_bytes, n_gen, model.t_bytes())
    ks = KnobSummary.from_stats(cache.stats, knobs) if knobs.any_on else None
    return dict(nll=tgt.nll, top1=tgt.top1, decode_read_mib=s.decode_read_mib, tokens=n_gen,
                experts_dropped=ks.experts_dropped if ks else 0,
                experts_routed=ks.experts_routed if ks else None, probe=pr)


def study_drop(windows, prompts_a, budget: Budget, tmp: Path) -> dict:
    """(c): per F, teacher-forced loss and decode read bytes over the held-out windows, top-1
    agreement with F = 0 there, and free-running greedy agreement with the plain run of (a)."""
    base = {}
    rows = {}
    for f in DROP_FRACS:
        r = dict(nll_sum=0.0, n=0, read_mib=0.0, tokens=0, dropped=0, routed=0, top1_agree=0,
                 greedy_same=0, greedy_n=0, greedy_prefix=[], by_kind={})
        for kind, items in windows.items():
            ks = r["by_kind"].setdefault(kind, dict(nll_sum=0.0, n=0))
            for i, (_name, ids) in enumerate(items):
                tf = teacher_forced(ids, f, probe=(f == 0.0),
                                    trace=tmp / f"c-{kind}-{i}.csv" if f == 0.0 else None)
                if f == 0.0:
                    base[(kind, i)] = tf
                r["nll_sum"] += sum(tf["nll"])
                ks["nll_sum"] += sum(tf["nll"])
                r["n"] += len(tf["nll"])
                ks["n"] += len(tf["nll"])
                r["read_mib"] += tf["decode_read_mib"]
                r["tokens"] += tf["tokens"]
                r["dropped"] += tf["experts_dropped"]
                r["routed"] += tf["experts_routed"] or 0
                r["top1_agree"] += sum(a == b for a, b in zip(tf["top1"], base[(kind, i)]["top1"]))
        for kind, a in prompts_a.items():
            for run in a["runs"]:
                plain = run["plain"]["tokens"]
                toks = plain if f == 0.0 else run_json(
                    MODEL, run["prompt"], len(plain), "--drop-cold-experts", f"{f:g}")["tokens"]
                same = [x == y for x, y in zip(toks, plain)]
                r["greedy_same"] += sum(same)
                r["greedy_n"] += len(plain)
                r["greedy_prefix"].append(same.index(False) if False in same else len(same))
        r["nats"] = r["nll_sum"] / r["n"]
        for ks in r["by_kind"].values():
            ks["nats"] = ks["nll_sum"] / ks["n"]
        r["mib_per_token"] = r["read_mib"] / r["tokens"]
        r["dropped_pct"] = 100.0 * r["dropped"] / r["routed"] if r["routed"] else 0.0
        r["top1_agree_pct"] = 100.0 * r["top1_agree"] / r["n"]
        r["greedy_agree_pct"] = 100.0 * r["greedy_same"] / r["greedy_n"]
        rows[f] = r
    b = rows[0.0]
    for r in rows.values():
        r["read_saved_pct"] = 100.0 * (1 - r["read_mib"] / b["read_mib"])
        r["d_nats"] = r["nats"] - b["nats"]
        r["ppl"] = math.exp(r["nats"])
    return dict(rows=rows, base=base)


# ── (b) routing statistics ──────────────────────────────────────────────────────────────────
def routing_stats(traces: list[str], phase: int = 1) -> dict:
    """Per layer over the given traces (position framing, ``phase``): lag-1 overlap (%),
    routing entropy (bits, of the renormalised weights), share of routings taken by the
    hottest E/8 experts (%, mean over traces; 12.5 % if uniform), reuse distance p50 / p90
    (steps). All from :mod:`refsim.analysis.views`."""
    from refsim.analysis.frame import frame_trace
    from refsim.analysis.views import overlap_values, reuse_distances, view_entropy, view_hot
    from refsim.trace import read_trace
    lag1: dict[int, list] = {}
    ent: dict[int, list] = {}
    hot: dict[int, list] = {}
    reuse: dict[int, list] = {}
    head = None
    for p in traces:
        fr = frame_trace(read_trace(p), "position", phase=phase)
        head = fr.header
        for il, v in overlap_values(fr, (1,)).items():
            lag1.setdefault(il, []).extend(v[1].tolist())
        for row in view_entropy(fr)["layers"]:
            ent.setdefault(row["layer"], []).append((row["entropy_bits"], row["cells"]))
        for row in view_hot(fr, top=max(1, head.n_expert // 8))["layers"]:
            hot.setdefault(row["layer"], []).append(row["coverage_pct"])
        for il, (d, _single) in reuse_distances(fr).items():
            reuse.setdefault(il, []).extend(d.tolist())
    layers = []
    for il in sorted(lag1):
        d = np.sort(np.asarray(reuse.get(il, []), np.int64))
        n = d.size
        e = ent.get(il, [])
        layers.append(dict(
            layer=il, lag1_pct=float(np.mean(lag1[il])) if lag1[il] else float("nan"),
            entropy_bits=sum(x * c for x, c in e) / sum(c for _, c in e) if e else float("nan"),
            hot_pct=float(np.mean(hot[il])) if hot.get(il) else float("nan"),
            reuse_p50=int(d[min(n - 1, n // 2)]) if n else None,
            reuse_p90=int(d[min(n - 1, 9 * n // 10)]) if n else None))
    allv = [x for il in lag1 for x in lag1[il]]
    return dict(k=int(head.n_expert_used), n_expert=int(head.n_expert),
                chance_pct=100.0 * head.n_expert_used / head.n_expert,
                lag1_all_pct=float(np.mean(allv)), layers=layers, traces=len(traces))


def random_twin(path: Path) -> Path:
    """The random-weight twin of the trained model (same shape, ``write_synthetic(seed=1)``, as
    tests/forward/test_tiny_moe.py and docs/real-moe.md use)."""
    from refsim.model import open_model
    from refsim.model.synth import write_synthetic
    s = open_model(str(MODEL)).spec
    dims = dict(n_layer=s.n_layer, n_embd=s.n_embd, n_head=s.n_head, n_head_kv=s.n_head_kv,
                head_dim=s.head_dim_k, n_expert=s.n_expert, n_expert_used=s.n_expert_used,
                n_ff_exp=s.n_ff_exp, n_ff=s.n_ff, n_vocab=s.n_vocab, n_ctx=s.n_ctx_train,
                eps=s.rms_eps, rope_base=s.rope_freq_base)
    write_synthetic(path, "qwen3moe", "Q8_0", seed=1, dims=dims)
    return path


def study_routing(a: dict, c: dict, budget: Budget, tmp: Path) -> dict:
    from refsim.testing.shared import shared_path
    out = {}
    for kind in a:
        out[f"tiny-moe greedy decode, {kind}"] = routing_stats([r["trace"] for r in a[kind]["runs"]])
        out[f"tiny-moe teacher-forced, {kind}"] = routing_stats(
            [str(tmp / f"c-{kind}-{i}.csv") for i in range(budget.n_windows)])
    twin = random_twin(tmp / "twin.gguf")
    tt = []
    for kind in a:
        for i, r in enumerate(a[kind]["runs"]):
            p = tmp / f"b-twin-{kind}-{i}.csv"
            run_json(twin, r["prompt"], budget.n_gen, trace=p)
            tt.append(str(p))
    out["random twin greedy decode, prose + code"] = routing_stats(tt)
    real = shared_path(*REAL_TRACE)
    if real.exists():
        out["Qwen3-30B-A3B engine trace, decode"] = routing_stats([str(real)])
    return out


# ── (d) predictors ──────────────────────────────────────────────────────────────────────────
def study_predict(c: dict, prompts_a: dict, budget: Budget) -> dict:
    """Stale-gate, previous-token (and the control) per layer from the teacher-forced F = 0
    passes' probes; the route-ahead horizon N's agreement from live ``--route-ahead N`` runs."""
    from refsim.streaming.predict import LIVE_PREDICTORS, PredictorStats
    per = {n: None for n in LIVE_PREDICTORS}
    for tf in c["base"].values():
        pr = tf["probe"]
        for n in LIVE_PREDICTORS:
            if per[n] is None:
                per[n] = [PredictorStats() for _ in pr.per_layer[n]]
            for acc, s in zip(per[n], pr.per_layer[n]):
                acc.merge(s)
    layers = {n: [dict(hit_pct=s.hit_pct, exact_pct=s.exact_pct, rows=s.rows) for s in v]
              for n, v in per.items()}
    totals = {}
    for n, v in per.items():
        t = PredictorStats()
        for s in v:
            t.merge(s)
        totals[n] = dict(hit_pct=t.hit_pct, exact_pct=t.exact_pct, rows=t.rows)
    horizon = {}
    for h in budget.horizons:
        agree = slots = 0.0
        for kind, a in prompts_a.items():
            for run in a["runs"]:
                ra = run_json(MODEL, run["prompt"], budget.n_gen, "--route-ahead", str(h))["route_ahead"]
                agree += ra["agree_pct"] * ra["committed"]
                slots += ra["committed"]
        horizon[h] = agree / slots if slots else None
    return dict(layers=layers, totals=totals, horizon=horizon)


# ── output ──────────────────────────────────────────────────────────────────────────────────
def _f(x, d=1):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"


def tables(res: dict) -> str:
    L = []
    a = res["ngram"]
    L += ["(a) n-gram speculation (--draft 3, --ngram-min-match 3), cache "
          f"{CACHE_MB:g} MiB", "",
          "| prompts | runs | tokens | decodes | acceptance % | coverage % | tokens/decode | "
          "verify width | union per layer (experts; k = 4) | MiB/token plain | MiB/token n-gram | "
          "spec == greedy |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for kind, v in a.items():
        s = v["summary"]
        u = " ".join(_f(x, 2) for x in s["union_per_layer"]) if s["union_per_layer"] else "-"
        L.append(f"| {kind} | {s['prompts']} | {s['tokens']} | {s['decodes']} | "
                 f"{_f(s['acceptance_pct'])} | {_f(s['coverage_pct'])} | {_f(s['tokens_per_decode'], 2)} | "
                 f"{_f(s['verify_width'], 2)} | {u} | {_f(s['plain_mib_per_token'], 3)} | "
                 f"{_f(s['spec_mib_per_token'], 3)} | {'yes' if s['spec_equals_greedy'] else 'NO'} |")
    L += ["", "(b) routing statistics (position framing; entropy of a routing's k renormalised "
          "weights, max log2 k; hot = share of routings on the hottest E/8 experts, 12.5 % if "
          "uniform; reuse distance in steps, median over layers of each layer's p50 / p90)", "",
          "| source | k/E | chance % | lag-1 overlap % | × chance | lag-1 % range over layers | "
          "entropy bits (max) | hot E/8 % | reuse p50 / p90 |", "|---|---|---|---|---|---|---|---|---|"]
    for src, s in res["routing"].items():
        ly = s["layers"]
        lag = [r["lag1_pct"] for r in ly]
        p50 = sorted(r["reuse_p50"] for r in ly if r["reuse_p50"] is not None)
        p90 = sorted(r["reuse_p90"] for r in ly if r["reuse_p90"] is not None)
        L.append(f"| {src} | {s['k']}/{s['n_expert']} | {_f(s['chance_pct'], 2)} | "
                 f"{_f(s['lag1_all_pct'])} | {_f(s['lag1_all_pct'] / s['chance_pct'], 2)} | "
                 f"{_f(min(lag))}–{_f(max(lag))} | "
                 f"{_f(float(np.mean([r['entropy_bits'] for r in ly])), 2)} ({_f(math.log2(s['k']), 2)}) | "
                 f"{_f(float(np.mean([r['hot_pct'] for r in ly])))} | "
                 f"{p50[len(p50) // 2] if p50 else '-'} / {p90[len(p90) // 2] if p90 else '-'} |")
    small = {k: v for k, v in res["routing"].items() if len(v["layers"]) <= 8}
    n = max(len(v["layers"]) for v in small.values())
    L += ["", "per layer (lag-1 % / entropy bits / hot %):", "",
          "| source | " + " | ".join(f"layer {i}" for i in range(n)) + " |", "|---|" + "---|" * n]
    for src, s in small.items():
        L.append(f"| {src} | " + " | ".join(
            f"{_f(r['lag1_pct'])} / {_f(r['entropy_bits'], 2)} / {_f(r['hot_pct'])}" for r in s["layers"]) + " |")
    L += ["", f"(c) --drop-cold-experts F at {CACHE_MB:g} MiB (teacher-forced held-out windows; "
          "greedy agreement on the (a) prompts)", "",
          "| F | decode MiB/token | read saved % | experts dropped % | nats/token (code / prose) | "
          "Δ nats | perplexity | top-1 = F0 % | greedy tokens = F0 % | first divergence |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for f, r in res["drop"]["rows"].items():
        bk = " / ".join(_f(r["by_kind"][k]["nats"], 3) for k in ("code", "prose"))
        L.append(f"| {float(f):g} | {_f(r['mib_per_token'], 3)} | {_f(r['read_saved_pct'])} | "
                 f"{_f(r['dropped_pct'])} | {_f(r['nats'], 3)} ({bk}) | {r['d_nats']:+.3f} | "
                 f"{_f(r['ppl'], 2)} | {_f(r['top1_agree_pct'])} | {_f(r['greedy_agree_pct'])} | "
                 f"{','.join(map(str, r['greedy_prefix']))} |")
    p = res["predict"]
    L += ["", "(d) predictors per layer (slot hit %; teacher-forced windows)", "",
          "| predictor | all | " + " | ".join(f"layer {i}" for i in range(len(p["layers"]["control"]))) + " |",
          "|---|---|" + "---|" * len(p["layers"]["control"])]
    for n, v in p["layers"].items():
        L.append(f"| {n} | {_f(p['totals'][n]['hit_pct'])} | " +
                 " | ".join(_f(x["hit_pct"]) if x["rows"] else "-" for x in v) + " |")
    L += ["", "| route-ahead horizon N | " + " | ".join(str(h) for h in p["horizon"]) + " |",
          "|---|" + "---|" * len(p["horizon"]),
          "| committed slots agreeing with the router % | " +
          " | ".join(_f(x) for x in p["horizon"].values()) + " |"]
    return "\n".join(L)


def plots(res: dict, out_dir: Path) -> list[str]:
    from refsim.studies.plot import _pyplot
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []

    def save(fig, name):
        p = out_dir / name
        fig.tight_layout()
        fig.savefig(p, dpi=80)
        plt.close(fig)
        paths.append(str(p))

    a = res["ngram"]
    fig, (x1, x2) = plt.subplots(1, 2, figsize=(8, 3))
    kinds = list(a)
    for j, key in enumerate(("acceptance_pct", "coverage_pct")):
        x1.bar(np.arange(len(kinds)) + 0.4 * j, [a[k]["summary"][key] or 0 for k in kinds], 0.4,
               label=key.replace("_pct", " %"))
    x1.set_xticks(np.arange(len(kinds)) + 0.2, kinds)
    x1.legend(fontsize=7)
    x1.set_title("n-gram draft 3, min-match 3", fontsize=9)
    for k in kinds:
        u = a[k]["summary"]["union_per_layer"]
        if u:
            x2.plot(range(len(u)), u, "o-", label=f"{k} (width {a[k]['summary']['verify_width']:.2f})")
    x2.axhline(4, color="grey", lw=0.8, ls=":")
    x2.set_xlabel("layer")
    x2.set_ylabel("distinct experts per verify")
    x2.legend(fontsize=7)
    save(fig, "real-moe-ngram.png")

    fig, ax = plt.subplots(figsize=(6, 3))
    for src, s in res["routing"].items():
        n = max(1, len(s["layers"]) - 1)
        ax.plot([r["layer"] / n for r in s["layers"]],
                [r["lag1_pct"] / s["chance_pct"] for r in s["layers"]], "o-", ms=3, label=src)
    ax.axhline(1, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("relative depth (layer / (n_layer - 1))")
    ax.set_ylabel("lag-1 overlap / chance (k/E)")
    ax.legend(fontsize=6)
    save(fig, "real-moe-routing.png")

    rows = res["drop"]["rows"]
    fig, ax = plt.subplots(figsize=(5, 3))
    fs = list(rows)
    ax.plot([rows[f]["read_saved_pct"] for f in fs], [rows[f]["d_nats"] for f in fs], "o-")
    for f in fs:
        ax.annotate(f"F={float(f):g}", (rows[f]["read_saved_pct"], rows[f]["d_nats"]), fontsize=7)
    ax.set_xlabel(f"decode read bytes saved % ({CACHE_MB:g} MiB cache)")
    ax.set_ylabel("Δ held-out nats/token")
    save(fig, "real-moe-drop.png")

    p = res["predict"]
    fig, ax = plt.subplots(figsize=(5, 3))
    for n, v in p["layers"].items():
        ax.plot(range(len(v)), [x["hit_pct"] if x["rows"] else np.nan for x in v], "o-", label=n)
    ax.axhline(88.6, color="grey", lw=0.8, ls=":", label="engine stale-gate, Qwen3-30B")
    ax.set_xlabel("layer")
    ax.set_ylabel("slot hit %")
    ax.legend(fontsize=7)
    save(fig, "real-moe-predict.png")
    return paths


def _jsonable(res: dict) -> dict:
    c = dict(res["drop"])
    c.pop("base")
    a = {k: dict(summary=v["summary"], runs=[dict(name=r["name"], prompt_tokens=len(r["prompt"]),
                                                   tokens=r["plain"]["tokens"]) for r in v["runs"]])
         for k, v in res["ngram"].items()}
    c["rows"] = {str(f): dict(r) for f, r in c["rows"].items()}
    return dict(budget=res["budget"], prompts=res["prompts"], windows=res["windows"], cache_mb=CACHE_MB,
                ngram=a, routing=res["routing"], drop=c, predict=dict(res["predict"], horizon={str(h): v for h, v in res["predict"]["horizon"].items()}))


def run_studies(budget_name: str, tmp: Path) -> dict:
    from refsim.model import open_model
    from refsim.model.tokenizer import Tokenizer
    budget = BUDGETS[budget_name]
    tok = Tokenizer.from_model(open_model(str(MODEL)))
    prompts = held_out_texts(tok, budget.n_prompts, budget.prompt_len)
    windows = held_out_texts(tok, budget.n_windows, budget.window)
    a = study_ngram(prompts, budget, tmp)
    c = study_drop(windows, a, budget, tmp)
    b = study_routing(a, c, budget, tmp)
    d = study_predict(c, a, budget)
    return dict(budget=budget_name, ngram=a, routing=b, drop=c, predict=d,
                prompts={k: [n for n, _ in v] for k, v in prompts.items()},
                windows={k: [n for n, _ in v] for k, v in windows.items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", choices=tuple(BUDGETS), default="small")
    ap.add_argument("--json", metavar="OUT", help="also write the numbers as JSON to OUT")
    ap.add_argument("--plot-dir", metavar="DIR", help="write the four PNGs there")
    ap.add_argument("--from-json", metavar="IN", help="print and plot a --json file again (no runs)")
    args = ap.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as fh:
            data = json.load(fh)
    else:
        with tempfile.TemporaryDirectory() as d:
            res = run_studies(args.budget, Path(d))
        data = _jsonable(res)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(data, fh, indent=1)
    print(f"prompts: {data['prompts']}\nwindows: {data['windows']}\n")
    print(tables(data))
    if args.plot_dir:
        for p in plots(data, Path(args.plot_dir)):
            print(f"wrote {p}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(main))
