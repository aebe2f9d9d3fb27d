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
