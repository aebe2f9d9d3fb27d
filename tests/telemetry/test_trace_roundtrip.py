"""A live run's route trace replays to the same counters (the one accounting path)."""

import numpy as np
import pytest

from refsim.cache import ExpertCache
from refsim.events import DecodeKind
from refsim.spec import NgramDraft, run_generation
from refsim.studies.replay import replay_trace
from refsim.telemetry import RunStats
from refsim.testing import DocumentScript, ScriptedRouter, ScriptedTarget, copy_heavy_document
from refsim.trace import TraceHeader, read_trace


@pytest.mark.parametrize("draft_max,min_match", [(3, 3), (1, 2), (8, 1)])
def test_live_run_and_replay_agree(tmp_path, draft_max, min_match):
    n_layer, n_expert, k = 4, 16, 2
    expert_bytes = np.array([3000, 2000, 3000, 2500], dtype=np.int64)
    router = ScriptedRouter(n_layer, n_expert, k, seed=3)
    doc = copy_heavy_document(120, n_vocab=40, seed=5)
    target = ScriptedTarget(DocumentScript(doc, eos=0), router, eos_ids=(0,))
    budget = 40_000
    cache = ExpertCache(expert_bytes, n_expert, budget)
    prompt = np.asarray(doc[:20])
    r = run_generation(target, NgramDraft(min_match=min_match), prompt, 80, cache=cache,
                       draft_max=draft_max)
    assert any(s.kind is DecodeKind.VERIFY for s in r.steps)
    header = TraceHeader(model="scripted", arch="scripted", n_layer=n_layer, n_expert=n_expert,
                         n_expert_used=k, expert_bytes=expert_bytes,
                         dense_bytes=np.zeros(n_layer, dtype=np.int64))
    path = tmp_path / "run.route.csv"
    r.write_trace(path, header)
    trace = read_trace(path)
    assert trace.n_prompt == prompt.size
    assert len(trace.events) == len(r.events)
    rep = replay_trace(trace, budget)
    st = cache.stats
    s = rep.summary
    assert (s.lookups, s.hits, s.read_bytes) == (st.total("lookups"), st.total("hits"),
                                                 st.total("read_bytes"))
    dec = (DecodeKind.PLAIN, DecodeKind.VERIFY)
    assert (s.decode_lookups, s.decode_hits) == (st.total("lookups", dec), st.total("hits", dec))
    stats = RunStats.from_run(r)
    assert s.hit_pct_cum == pytest.approx(stats.cache_hit_pct, abs=0)
    assert s.decode_read_bytes == stats.read_bytes
    assert rep.residency_agree == rep.residency_rows > 0
    # verify decodes are framed as one event each, with their accepted counts recovered
    live_acc = [e.accepted for e in r.events if e.kind is DecodeKind.VERIFY]
    read_acc = [e.accepted for e in trace.events if e.kind is DecodeKind.VERIFY]
    assert read_acc[:-1] == live_acc[:len(read_acc) - 1]


# ---- every streaming knob: the run's trace replays to the run's numbers -----------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from refsim.streaming.knobs import StreamKnobs  # noqa: E402
from refsim.cache.summary import KnobSummary  # noqa: E402


def knob_run(tmp_path, knobs, budget, seed=3, k=3, draft=True):
    n_layer, n_expert = 4, 16
    expert_bytes = np.array([3000, 2000, 3000, 2500], dtype=np.int64)
    router = ScriptedRouter(n_layer, n_expert, k, seed=seed)
    doc = copy_heavy_document(120, n_vocab=40, seed=5)
    target = ScriptedTarget(DocumentScript(doc, eos=0), router, eos_ids=(0,))
    if knobs.predict_prefetch:                 # the scripted stale gate ranks layer il+2 ahead
        from refsim.streaming.stale_gate import PredictPrefetch
        target.hooks.predictor = PredictPrefetch()
    cache = ExpertCache(expert_bytes, n_expert, budget, knobs)
    r = run_generation(target, NgramDraft(min_match=2) if draft else None, np.asarray(doc[:20]),
                       60, cache=cache, draft_max=3)
    header = TraceHeader(model="scripted", arch="scripted", n_layer=n_layer, n_expert=n_expert,
                         n_expert_used=k, expert_bytes=expert_bytes,
                         dense_bytes=np.zeros(n_layer, dtype=np.int64))
    path = tmp_path / "knobs.route.csv"
    r.write_trace(path, header)
    return r, cache, read_trace(path)


def assert_replays(r, cache, trace, budget, knobs):
    rep = replay_trace(trace, budget, knobs=knobs)
    st_, s = cache.stats, rep.summary
    assert (s.lookups, s.hits, s.read_bytes, s.decode_read_bytes, s.evictions, s.rereads,
            s.resident_bytes) == (st_.total("lookups"), st_.total("hits"),
                                  st_.total("read_bytes"), RunStats.from_run(r).read_bytes,
                                  st_.evictions, st_.rereads, st_.resident_bytes)
    if knobs.any_on:
        assert rep.knobs == KnobSummary.from_stats(st_, knobs)
    assert rep.residency_agree == rep.residency_rows > 0
    # the dropped column the run wrote is what the replay's policy decided again
    for live, rec in zip(r.records, rep.records):
        assert (live.dropped is None) == (rec.dropped is None)
        if live.dropped is not None:
            assert (live.dropped == rec.dropped).all()
    return rep


@pytest.mark.parametrize("knobs", [
    StreamKnobs(drop_frac=1.0),
    StreamKnobs(drop_frac=0.75, drop_renorm=False),
    StreamKnobs(drop_frac=0.75, drop_in_prefill=True),
    StreamKnobs(prefetch=2),
    StreamKnobs(drop_frac=1.0, prefetch=1),
    StreamKnobs(predict_prefetch=True),
    StreamKnobs(predict_prefetch=True, predict_spec_max=0),
    StreamKnobs(predict_prefetch=True, predict_spec_max=8, drop_frac=0.75),
], ids=["drop1", "drop.75-norenorm", "drop.75-prefill", "prefetch2", "drop1-prefetch1",
        "predict", "predict-retain-only", "predict8-drop.75"])
def test_live_run_with_knobs_replays_to_the_same_numbers(tmp_path, knobs):
    budget = 60_000
    r, cache, trace = knob_run(tmp_path, knobs, budget)
    assert any(s.kind is DecodeKind.VERIFY for s in r.steps)      # speculative verify batches
    rep = assert_replays(r, cache, trace, budget, knobs)
    if knobs.drop_on:
        assert trace.has_dropped_column and rep.knobs.experts_dropped > 0
    if knobs.prefetch or (knobs.predict_prefetch and knobs.predict_spec_max):
        assert rep.knobs.spec_experts > 0
    if knobs.predict_prefetch:
        assert trace.has_pred_columns
        assert rep.knobs.spec_read_bytes <= rep.summary.decode_read_bytes
        assert rep.knobs.spec_useful <= rep.knobs.spec_experts


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 50), st.integers(8_000, 120_000), st.sampled_from([0.0, 0.75, 1.0]),
       st.integers(0, 8), st.integers(2, 4), st.booleans())
def test_predict_prefetch_run_equals_replay_and_keeps_its_invariants(seed, budget, frac, spec_max,
                                                                     k, draft):
    # run == replay of its own trace (the prediction is in the pred_* columns); speculative
    # bytes are a subset of read bytes; useful <= prefetched; at most spec_max entries are
    # speculated per (decode, layer); spec max 0 reads exactly the bytes of no prefetch plus
    # nothing (retention moves no byte of its own)
    import tempfile
    from pathlib import Path
    knobs = StreamKnobs(drop_frac=frac, predict_prefetch=True, predict_spec_max=spec_max)
    with tempfile.TemporaryDirectory() as d:
        r, cache, trace = knob_run(Path(d), knobs, budget, seed=seed, k=k, draft=draft)
        rep = assert_replays(r, cache, trace, budget, knobs)
        s = cache.stats
        for kind in range(len(s.read_bytes)):
            assert 0 <= s.spec_read_bytes[kind] <= s.read_bytes[kind]
            assert s.spec_useful[kind] <= s.spec_experts[kind]
        n_pred = sum(int((e.pred_routes[:, :, 0] >= 0).sum()) for e in trace.events)
        assert rep.knobs.spec_experts <= spec_max * n_pred
        if spec_max == 0:
            assert s.total("spec_read_bytes") == 0 and s.total("spec_experts") == 0


def test_predict_spec_max_zero_without_eviction_pressure_is_no_prefetch_byte_for_byte(tmp_path):
    # retention only moves resident entries; with a budget that never evicts, it changes no
    # lookup, hit or byte: the replay equals the bare replay on every counter
    knobs = StreamKnobs(predict_prefetch=True, predict_spec_max=0)
    r, cache, trace = knob_run(tmp_path, knobs, 10**9)
    a = replay_trace(trace, 10**9, knobs=knobs).summary
    b = replay_trace(trace, 10**9).summary
    assert a == b


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 50), st.integers(8_000, 120_000), st.sampled_from([0.0, 0.5, 0.75, 1.0]),
       st.integers(0, 3), st.booleans(), st.integers(2, 4), st.booleans())
def test_run_equals_replay_for_every_knob(seed, budget, frac, depth, in_prefill, k, draft):
    import tempfile
    from pathlib import Path
    knobs = StreamKnobs(drop_frac=frac, prefetch=depth, drop_in_prefill=in_prefill)
    with tempfile.TemporaryDirectory() as d:
        r, cache, trace = knob_run(Path(d), knobs, budget, seed=seed, k=k, draft=draft)
        assert_replays(r, cache, trace, budget, knobs)


def test_metrics_csv_carries_the_knob_counters(tmp_path):
    from refsim.telemetry import MetricsPreamble, format_metrics_csv
    knobs = StreamKnobs(drop_frac=1.0, prefetch=1)
    r, cache, _ = knob_run(tmp_path, knobs, 60_000)
    k = KnobSummary.from_stats(cache.stats, knobs)
    text = format_metrics_csv(r, RunStats.from_run(r), MetricsPreamble.for_run(r))
    trailer = dict(kv.split("=", 1) for kv in text.splitlines()[-1].split()[2:])
    assert trailer["experts_routed"] == str(k.experts_routed) and k.experts_dropped > 0
    assert trailer["experts_dropped"] == str(k.experts_dropped)
    assert (trailer["spec_experts"], trailer["spec_useful"]) == (str(k.spec_experts),
                                                                 str(k.spec_useful))
    assert trailer["spec_read_MiB"] == f"{k.spec_read_mib:.1f}"
    assert " prefetch=1 " in text and " drop_cold_frac=1 " in text
