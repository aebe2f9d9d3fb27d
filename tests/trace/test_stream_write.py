"""``refsim run --route-trace`` writes rows as the events arrive and keeps no events (issue 17,
item 1's writing half): the file is byte-identical to the one written from a run that kept every
event, and the events a run retains do not grow with the tokens."""

import dataclasses
import gc
import os
import weakref

import numpy as np
import pytest

from refsim.cache import ExpertCache
from refsim.streaming.knobs import StreamKnobs
from refsim.cli import main
from refsim.errors import ConfigError
from refsim.spec import NgramDraft, run_generation
from refsim.telemetry import RunStats
from refsim.testing import DocumentScript, ScriptedRouter, ScriptedTarget, copy_heavy_document
from refsim.trace import TraceHeader, TraceWriter

N_LAYER, N_EXPERT, K = 4, 16, 2
EXPERT_BYTES = np.array([3000, 2000, 3000, 2500], dtype=np.int64)
HEADER = TraceHeader(model="scripted", arch="scripted", n_layer=N_LAYER, n_expert=N_EXPERT,
                     n_expert_used=K, expert_bytes=EXPERT_BYTES,
                     dense_bytes=np.zeros(N_LAYER, dtype=np.int64))


def scripted_run(n_predict, knobs=None, **kw):
    doc = copy_heavy_document(400, n_vocab=40, seed=5)
    target = ScriptedTarget(DocumentScript(doc, eos=None), ScriptedRouter(N_LAYER, N_EXPERT, K, seed=3))
    cache = ExpertCache(EXPERT_BYTES, N_EXPERT, 40_000, knobs)
    return run_generation(target, NgramDraft(min_match=2), np.asarray(doc[:20]), n_predict,
                          cache=cache, draft_max=3, **kw)


@pytest.mark.parametrize("knobs", [None, StreamKnobs(prefetch=2, traced=True),
                                   StreamKnobs(drop_frac=0.9, traced=True)],   # drops 261 slots in 60 tokens
                         ids=["plain", "prefetch", "drop"])
def test_streamed_trace_is_the_kept_runs_trace_byte_for_byte(tmp_path, knobs):
    kept = scripted_run(120, knobs)
    kept.write_trace(tmp_path / "kept.route.csv", HEADER)          # every event kept, then written
    with TraceWriter(tmp_path / "streamed.route.csv", HEADER) as w:
        streamed = scripted_run(120, knobs, keep_events=False, on_event=w.write_record)
    assert (tmp_path / "streamed.route.csv").read_bytes() == (tmp_path / "kept.route.csv").read_bytes()
    assert w.events == sum(1 for e in kept.events if not e.kind.draft_context) > 20
    # the telemetry a run reports is the same without the events (timings aside: measured)
    timings = ("prefill_s", "decode_s", "draft_s", "loop_overhead_s")
    live = RunStats.from_run(streamed)
    assert dataclasses.replace(RunStats.from_run(kept), **{f: getattr(live, f) for f in timings}) == live
    assert streamed.events == [] and streamed.records == [] and streamed.n_events == len(kept.events)


def test_retained_events_do_not_grow_with_tokens():
    # count the DecodeEvents still alive after the run: weak references to every event it made
    def alive_after(n_predict):
        refs = []
        r = scripted_run(n_predict, keep_events=False,
                         on_event=lambda ev, rec: refs.append(weakref.ref(ev)))
        gc.collect()
        return len(refs), sum(ref() is not None for ref in refs), r
    made_short, alive_short, _ = alive_after(30)
    made_long, alive_long, r = alive_after(300)
    assert made_long > 5 * made_short
    assert alive_short == alive_long <= 2        # the first (prefill) and the last, whatever the length
    assert r.first_event is not None and r.last_event is not None


def test_a_run_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    out = tmp_path / "t.route.csv"
    out.write_text("old\n")

    def boom(ev, rec):
        if w.events >= 3:
            raise ConfigError("stop here")
        w.write_record(ev, rec)
    with pytest.raises(ConfigError, match="stop here"):
        with TraceWriter(out, HEADER) as w:
            scripted_run(40, keep_events=False, on_event=boom)
    assert out.read_text() == "old\n" and sorted(os.listdir(tmp_path)) == ["t.route.csv"]


def test_write_trace_refuses_a_run_without_events(tmp_path):
    r = scripted_run(10, keep_events=False)
    with pytest.raises(ConfigError, match="keep_events=False"):
        r.write_trace(tmp_path / "x.route.csv", HEADER)


@pytest.mark.slow
def test_cli_route_trace_equals_the_kept_run(tmp_path, capsys):
    # the built-in model, through the command: the streamed file is the kept run's file
    from refsim.spec.forward_target import ForwardTarget
    from refsim.forward.builtin import BUILTIN_CACHE_MB, builtin_model_path
    from refsim.model import open_model
    from refsim.model.tokenizer import Tokenizer
    from refsim.streaming.knobs import StreamKnobs
    out = tmp_path / "cli.route.csv"
    assert main(["run", "-n", "12", "--ngram", "--prompt", "abc abc abc abc",
                 "--route-trace", str(out)]) == 0
    path = builtin_model_path()
    model = open_model(path)
    target = ForwardTarget(model, "exact")
    eb = [model.expert_bytes(il) for il in range(target.n_layer)]
    budget = ExpertCache.mib_to_bytes(BUILTIN_CACHE_MB)
    cache = ExpertCache(eb, model.spec.n_expert, budget, StreamKnobs(traced=True))
    prompt = Tokenizer.from_model(model).encode("abc abc abc abc").tolist()
    r = run_generation(target, NgramDraft(min_match=3), prompt, 12, cache=cache, draft_max=3)
    from refsim.fmt import budget_mib
    h = TraceHeader(model=path, arch=model.spec.arch, n_layer=target.n_layer,
                    n_expert=model.spec.n_expert, n_expert_used=model.spec.n_expert_used,
                    expert_bytes=eb, dense_bytes=[model.dense_bytes(il) for il in range(target.n_layer)],
                    extra=(("cache_mb", budget_mib(budget)),))
    r.write_trace(tmp_path / "kept.route.csv", h)
    assert out.read_bytes() == (tmp_path / "kept.route.csv").read_bytes()
