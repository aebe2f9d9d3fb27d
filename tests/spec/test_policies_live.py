"""Draft policies live: on the built-in random-weight model and the committed trained MoEs
(models/tiny-moe*.gguf, docs/real-moe.md) every policy emits greedy's tokens exactly, and a
live run of each policy replays from its own route trace to the same counters."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refsim.session import RunConfig, simulate
from refsim.spec import SpecConfig
from refsim.studies.replay import replay_trace
from refsim.trace import read_trace

REPO = Path(__file__).resolve().parents[2]
TRAINED = {"tiny-moe": REPO / "models" / "tiny-moe-q8_0.gguf",
           "tiny-moe35": REPO / "models" / "tiny-moe35-q8_0.gguf"}
CODE = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return f(x) + f(x)\n\n\ndef h(x):\n    return "
POLICIES = ["fixed", "backoff:patience=1,cooldown=2", "cost", "union:mib=0", "union"]


@pytest.fixture(scope="module", autouse=True)
def _builtin_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("REFSIM_CACHE", str(tmp_path_factory.mktemp("refsim-cache")))
    yield
    mp.undo()


def _run(model, prompt, n, policy=None, draft=3, cache_mb=None, trace=None, mtp=False):
    spec = (SpecConfig() if policy is None else
            SpecConfig.from_flags(ngram=not mtp, mtp=mtp, draft=draft, spec_policy=policy))
    cfg = RunConfig(model=None if model is None else str(model), prompt_tokens=prompt
                    if not isinstance(prompt, str) else None,
                    prompt=prompt if isinstance(prompt, str) else None, n_predict=n, spec=spec,
                    cache_mb=cache_mb, route_trace=trace)
    return simulate(cfg, warn=lambda line: None)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.integers(3, 40), min_size=4, max_size=12), st.integers(1, 5),
       st.sampled_from(POLICIES), st.sampled_from([1.0, 4.0]))
def test_policies_are_greedy_on_the_random_model(prompt, draft, policy, cache_mb):
    prompt = prompt * 3                    # repeated text so the n-gram drafter proposes
    ref = _run(None, prompt, 24, cache_mb=cache_mb)
    got = _run(None, prompt, 24, policy, draft, cache_mb)
    assert got.result.tokens.tolist() == ref.result.tokens.tolist()


@pytest.mark.parametrize("name", list(TRAINED))
@pytest.mark.parametrize("policy", POLICIES)
def test_policies_are_greedy_on_the_trained_moes_and_replay(name, policy, tmp_path):
    model = TRAINED[name]
    ref = _run(model, CODE, 24)
    trace = tmp_path / "run.route.csv"
    got = _run(model, CODE, 24, policy, 4, trace=str(trace))
    assert got.result.tokens.tolist() == ref.result.tokens.tolist()
    steps = got.result.steps
    assert any(s.n_draft for s in steps)
    rep = replay_trace(read_trace(trace), got.budget_bytes)
    st_ = got.result.cache.stats
    assert (rep.summary.lookups, rep.summary.hits, rep.summary.read_bytes) == (
        st_.total("lookups"), st_.total("hits"), st_.total("read_bytes"))
    assert rep.residency_agree == rep.residency_rows > 0


@pytest.mark.parametrize("policy", POLICIES)
def test_policies_with_the_mtp_head_are_greedy_and_replay(policy, tmp_path):
    """--mtp on the trained qwen35moe (its MTP head drafts): every policy emits greedy's tokens; the
    run's events (the head's decodes included) replay to the same counters, and its route trace
    holds the run's target decodes. (An --mtp route trace holds no head rows, as the engine's,
    docs/trace-format.md, so a trace replay lacks the head's lookups: the counters are the events'.)"""
    from refsim.cache import ExpertCache
    from refsim.events import DecodeKind
    from refsim.model import open_model
    from refsim.spec import run_generation
    from refsim.spec.mtp import mtp_source_for
    from refsim.trace import TraceHeader
    path = TRAINED["tiny-moe35"]
    ref = _run(path, CODE, 24)
    model = open_model(str(path))
    cfg = SpecConfig.from_flags(mtp=True, draft=3, spec_policy=policy)
    target, source = mtp_source_for(model, cfg)
    eb = [model.expert_bytes(il) for il in range(target.n_layer)]
    live = ExpertCache(eb, model.spec.n_expert, 2 << 20)
    res = run_generation(target, source, ref.prompt, 24, cache=live, draft_max=3, policy=cfg.make_policy())
    assert res.tokens.tolist() == ref.result.tokens.tolist()
    assert any(s.n_draft for s in res.steps)
    again = ExpertCache(eb, model.spec.n_expert, 2 << 20)
    for e in res.events:
        again.apply(e)
    for name in ("lookups", "hits", "read_bytes"):
        assert again.stats.total(name) == live.stats.total(name), name
    trace = tmp_path / "run.route.csv"
    s = model.spec
    res.write_trace(str(trace), TraceHeader(model=str(path), arch=s.arch, n_layer=target.n_layer,
                                            n_expert=s.n_expert, n_expert_used=s.n_expert_used,
                                            expert_bytes=eb,
                                            dense_bytes=[model.dense_bytes(il) for il in range(target.n_layer)]))
    target_events = [e for e in res.events if not e.kind.draft_context]
    assert [(e.kind, e.positions.tolist()) for e in read_trace(trace).events] == [
        (e.kind, e.positions.tolist()) for e in target_events]
    assert any(e.kind is DecodeKind.VERIFY for e in target_events)
