"""Draft policies (refsim/spec/policies/): hand-worked rules, the registry and parser, and the
lossless property -- every policy emits exactly greedy's tokens -- on scripted targets."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.cache import ExpertCache
from refsim.errors import UsageError
from refsim.events import DecodeKind
from refsim.spec import NgramDraft, SpecConfig, run_generation
from refsim.spec.policies import (POLICIES, AcceptStats, RouteMemory, StepView, extra_bytes,
                                  parse_spec_policy)
from refsim.spec.policies.backoff import BackoffPolicy
from refsim.spec.policies.cost import CostPolicy
from refsim.spec.policies.union import UnionPolicy
from refsim.testing import greedy_reference
from refsim.testing.strategies import prompts, scripted_targets

MIB = 1 << 20


def _view(candidate, draft_max=3, resident=None, eb=None, pred=None, stats=None):
    return StepView(candidate=np.asarray(candidate, np.int64), probs=None, draft_max=draft_max,
                    resident=resident, expert_bytes=eb, pred_routes=pred,
                    stats=stats if stats is not None else AcceptStats())


def test_registry_order_and_names():
    assert list(POLICIES) == ["fixed", "backoff", "cost", "union"]
    for name, cls in POLICIES.items():
        assert cls.name == name and not cls.lossy


def test_parse_spec_policy_values_and_errors():
    p = parse_spec_policy("backoff:patience=3,cooldown=0")
    assert isinstance(p, BackoffPolicy) and p.params == {"patience": 3, "cooldown": 0, "min_width": 1}
    assert p.label() == "backoff:patience=3,cooldown=0"
    assert parse_spec_policy("union:mib=2.5").params["mib"] == 2.5
    for bad, msg in (("nope", "expected one of fixed, backoff, cost, union"),
                     ("backoff:patience=0", "key 'patience' expects an integer >= 1, got '0'"),
                     ("cost:mibs=x", "key 'mibs' expects a number > 0, got 'x'"),
                     ("union:width=3", "union expects key=value with key one of mib, unknown"),
                     ("fixed:a=1", "fixed expects key=value")):
        with pytest.raises(UsageError, match=msg):
            parse_spec_policy(bad)


def test_spec_config_policy_flag():
    assert SpecConfig.from_flags(ngram=True).make_policy() is None          # fixed = today's path
    assert isinstance(SpecConfig.from_flags(ngram=True, spec_policy="cost").make_policy(),
                      CostPolicy)
    with pytest.raises(UsageError, match="--spec-policy without a draft source"):
        SpecConfig.from_flags(spec_policy="union")
    with pytest.raises(UsageError, match="argument --spec-policy"):
        SpecConfig(spec="ngram", policy="bogus")


def test_accept_stats_hand_worked():
    s = AcceptStats()
    s.observe(3, 1)     # positions 1, 2 tried; 1 passed
    s.observe(2, 2)     # 1, 2 tried and passed
    s.observe(0, 0)     # a plain decode: nothing
    assert (s.steps, s.drafted, s.accepted) == (2, 5, 3)
    assert s.tried[:4].tolist() == [2, 2, 0, 0]
    assert s.passed[:4].tolist() == [2, 1, 0, 0]
    assert s.p_accept(0) == pytest.approx(3 / 4)     # (2 + 1) / (2 + 2)
    assert s.p_accept(1) == pytest.approx(2 / 4)
    assert s.p_accept(2) == pytest.approx(1 / 2)     # no data: the prior


def test_extra_bytes_hand_worked():
    # 2 layers, 4 experts, k = 2; layer 0 entries cost 10, layer 1 cost 100
    eb = np.array([10, 100], np.int64)
    resident = np.zeros((2, 4), bool)
    resident[0, 3] = True
    pred = np.array([[[0, 1], [0, 1]],      # tok: its own set (never extra)
                     [[1, 2], [2, 3]],      # d1: adds (0,2) 10 + (1,2) 100 + (1,3) 100
                     [[3, 2], [2, 0]],      # d2: (0,3) resident, the rest seen -> 0
                     [[-1, -1], [-1, -1]]],  # d3: unknown -> 7 bytes charged
                    np.int16)
    assert extra_bytes(pred, resident, eb, 7.0).tolist() == [0, 210, 210, 217]


def test_route_memory_last_occurrence_wins():
    m = RouteMemory(1, 2)
    m.record(np.array([5, 6, 5]), np.array([[[1, 2]], [[3, 4]], [[0, 3]]], np.int16))
    assert m.predict([5, 6, 9]).tolist() == [[[0, 3]], [[3, 4]], [[-1, -1]]]


def test_backoff_rules():
    p = BackoffPolicy(patience=2, cooldown=2, min_width=1)
    v = _view([1, 2, 3, 4], draft_max=4)
    assert p.width(v) == 4
    p.observe(4, 1)                  # rejected at position 2: width n_acc + 1 = 2
    assert p.width(v) == 2
    p.observe(2, 2)                  # all accepted: grow by one
    assert p.width(v) == 3
    p.observe(3, 0)                  # a miss
    assert p.width(v) == 1
    p.observe(1, 0)                  # second consecutive miss: off for 2 candidate steps
    assert [p.width(v), p.width(v)] == [0, 0]
    assert p.width(v) == 1           # re-probe at min_width
    p.observe(1, 1)
    assert p.width(v) == 2
    assert p.width(_view([7], draft_max=4)) == 1     # never wider than the candidate


def test_cost_hand_worked():
    # no cache: T(w) = 20 + w; with the prior p = 1/2 everywhere, E = 1, 1.5, 1.75, 1.875
    p = CostPolicy()
    e = p.expected_tokens(3)
    assert e.tolist() == pytest.approx([1, 1.5, 1.75, 1.875])
    rate = e / (20 + np.arange(4))
    assert p.width(_view([1, 2, 3])) == int(np.argmax(rate)) == 3
    # one expert of 30 MiB at 1000 MiB/s costs 30 ms: a width-1 draft no longer pays
    eb = np.array([30 * MIB], np.int64)
    pred = np.array([[[0]], [[1]], [[1]], [[1]]], np.int16)
    v = _view([1, 2, 3], resident=np.zeros((1, 4), bool), eb=eb, pred=pred)
    assert p.predicted_ms(v).tolist() == pytest.approx([20, 51, 52, 53])
    # rates 1/20, 1.5/51, 1.75/52, 1.875/53: plain wins
    assert p.width(v) == 0
    v2 = _view([1, 2, 3], resident=np.ones((1, 4), bool), eb=eb, pred=pred)
    assert p.width(v2) == 3


def test_union_hand_worked():
    eb = np.array([MIB, 2 * MIB], np.int64)
    resident = np.zeros((2, 4), bool)
    pred = np.array([[[0], [0]], [[0], [1]], [[1], [1]], [[2], [2]]], np.int16)
    # extra: 0, 2 MiB, 3 MiB, 6 MiB
    for mib, w in ((0, 0), (1.9, 0), (2, 1), (3, 2), (5.9, 2), (6, 3)):
        assert UnionPolicy(mib=mib).width(_view([1, 2, 3], resident=resident, eb=eb, pred=pred)) == w
    assert UnionPolicy(mib=0).width(_view([1, 2, 3])) == 3      # no cache: nothing predicted


POLICY_TEXTS = st.sampled_from(["fixed", "backoff", "backoff:patience=1,cooldown=0",
                                "backoff:cooldown=3,min_width=2", "cost", "cost:mibs=0.01",
                                "cost:ms_pos=5,unknown=0", "union", "union:mib=0",
                                "union:mib=0.002,unknown=0"])


@settings(max_examples=80, deadline=None)
@given(scripted_targets(routed=True), prompts(), st.integers(1, 8), st.integers(1, 3),
       st.integers(1, 40), st.integers(1, 12), POLICY_TEXTS)
def test_every_policy_is_greedy(target, prompt, draft_max, min_match, n_predict, budget_kb,
                                text):
    ref = greedy_reference(target.script, prompt, n_predict, target.eos_ids)
    eb = np.arange(1, target.n_layer + 1) * 1000
    cache = ExpertCache(eb, target.n_expert, budget_kb * 1000)
    pol = parse_spec_policy(text)
    r = run_generation(target.fresh(), NgramDraft(min_match=min_match), prompt, n_predict,
                       cache=cache, draft_max=draft_max, policy=pol)
    assert r.tokens.tolist() == ref.tolist()
    for a, b in zip(r.steps, r.steps[1:]):
        assert b.n_past == a.n_past + 1 + a.n_acc
    assert all(0 <= s.n_draft <= draft_max for s in r.steps)
    assert pol.stats.drafted == sum(s.n_draft for s in r.steps)
    assert pol.stats.accepted == sum(s.n_acc for s in r.steps)


@settings(max_examples=40, deadline=None)
@given(scripted_targets(routed=True), prompts(), st.integers(1, 8), st.integers(1, 40),
       st.integers(1, 12))
def test_fixed_equals_no_policy_byte_for_byte(target, prompt, draft_max, n_predict, budget_kb):
    eb = np.arange(1, target.n_layer + 1) * 1000
    runs = []
    for pol in (None, parse_spec_policy("fixed")):
        cache = ExpertCache(eb, target.n_expert, budget_kb * 1000)
        r = run_generation(target.fresh(), NgramDraft(min_match=1), prompt, n_predict,
                           cache=cache, draft_max=draft_max, policy=pol, clock=lambda: 0.0)
        runs.append((r, cache))
    (a, ca), (b, cb) = runs
    assert a.tokens.tolist() == b.tokens.tolist()
    assert a.steps == b.steps
    assert [(e.kind, e.positions.tolist(), e.tokens.tolist(), e.routes.tobytes()) for e in a.events] \
        == [(e.kind, e.positions.tolist(), e.tokens.tolist(), e.routes.tobytes()) for e in b.events]
    for name in ("lookups", "hits", "read_bytes"):
        assert ca.stats.total(name) == cb.stats.total(name)


def test_union_zero_reads_no_more_than_fixed_on_a_copy_document():
    from refsim.testing import DocumentScript, ScriptedRouter, ScriptedTarget, copy_heavy_document
    doc = copy_heavy_document(300, n_vocab=64, seed=1)
    out = {}
    for text in ("fixed", "union:mib=0"):
        cache = ExpertCache(np.full(4, MIB), 16, 20 * MIB)
        r = run_generation(ScriptedTarget(DocumentScript(doc), ScriptedRouter(4, 16, 2, seed=1)),
                           NgramDraft(min_match=2), doc[:40], 200, cache=cache, draft_max=4,
                           policy=parse_spec_policy(text))
        dec = (DecodeKind.PLAIN, DecodeKind.VERIFY)
        out[text] = (r.tokens.tolist(), cache.stats.total("read_bytes", dec),
                     sum(s.n_draft for s in r.steps))
    assert out["fixed"][0] == out["union:mib=0"][0]
    assert out["union:mib=0"][1] < out["fixed"][1]
    assert out["union:mib=0"][2] < out["fixed"][2]
