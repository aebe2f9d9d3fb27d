"""The one-pass LRU curve equals per-budget replays of the engine's cache, exactly."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.cache.batches import NEVER, BatchTrace
from refsim.cache.mrc import LruCurve, lru_curve, stack_distances
from refsim.cache.replay import replay_policy
from refsim.events import DecodeEvent, DecodeKind
from refsim.testing.cache_streams import cache_streams


def ev(*layers, kind=DecodeKind.PLAIN):
    """One event; each argument is one layer's token-major ids (one slot per position)."""
    n_pos = len(layers[0])
    routes = np.array(layers, np.int16).T.reshape(n_pos, len(layers), 1)
    return DecodeEvent(kind, np.arange(n_pos, dtype=np.int64), routes)


def engine(events, sizes, n_expert, budget):
    c = ExpertCache(sizes, n_expert, budget)
    for e in events:
        c.apply(e)
    return c.stats


def dists(bt):
    return stack_distances(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind,
                           bt.expert_bytes, bt.n_expert)[0].tolist()


def test_mixed_sizes_distance_is_the_byte_prefix_down_to_the_key():
    # layers sized 1 and 3. Batches: L0{0} L1{0} L0{0} L1{1}: at the third batch the stack is
    # (1,0) [3 B] over (0,0) [1 B], so D = 4: a hit from 4 bytes up, a miss at 3
    evs = [ev([0], [0]), ev([0], [1])]
    bt = BatchTrace.from_events(evs, [1, 3], n_expert=2)
    assert dists(bt) == [NEVER, NEVER, 4, NEVER]
    for budget, hits in ((3, 0), (4, 1)):
        assert engine(evs, [1, 3], 2, budget).total("hits") == hits
        assert lru_curve(bt, [budget])[0].hits.sum() == hits


def test_a_key_of_the_previous_over_budget_batch_hits_at_every_budget():
    # one layer, 1-byte entries, budget 1: [A B] leaves both resident (protected, over budget),
    # so [A] hits although its stack distance (2) exceeds the budget: the one exception to the
    # stack property, which the pass records as distance 0
    evs = [ev([0, 1]), ev([0])]
    bt = BatchTrace.from_events(evs, [1], n_expert=2)
    assert dists(bt) == [NEVER, NEVER, 0]
    assert engine(evs, [1], 2, 1).total("hits") == 1
    assert lru_curve(bt, [1])[0].hits.sum() == 1
    # one batch later the exception is gone: [A B] [C] [A] -> A's distance is 3 (C, B, A)
    evs = [ev([0, 1]), ev([2]), ev([0])]
    bt = BatchTrace.from_events(evs, [1], n_expert=3)
    assert dists(bt) == [NEVER, NEVER, NEVER, 3]
    for budget in (1, 2, 3):
        assert engine(evs, [1], 3, budget).total("hits") == int(budget >= 3)
        assert lru_curve(bt, [budget])[0].hits.sum() == int(budget >= 3)


def test_duplicates_in_a_batch_order_the_stack_by_last_occurrence():
    # [A B A] then [C]: the stack is C, A, B; then [B] has distance 3 and [A] (next) 3 as well
    evs = [ev([0, 1, 0]), ev([2]), ev([1]), ev([0])]
    bt = BatchTrace.from_events(evs, [1], n_expert=3)
    assert dists(bt) == [NEVER, NEVER, NEVER, 3, 3]


def all_step_budgets(bt):
    curve = LruCurve.from_batches(bt)
    steps = curve.steps.tolist()
    return sorted({1, *steps, *(s - 1 for s in steps if s > 1), *(s + 1 for s in steps)})


@given(cache_streams())
def test_curve_equals_a_replay_at_every_step_of_the_curve(stream):
    h = stream.header
    bt = BatchTrace.from_events(stream.events, h.expert_bytes, h.n_expert)
    budgets = all_step_budgets(bt)
    points = lru_curve(bt, budgets)
    curve = LruCurve.from_batches(bt)
    prev = -1
    for budget, p in zip(budgets, points):
        st_ = engine(stream.events, h.expert_bytes, h.n_expert, budget)
        assert p.lookups.tolist() == st_.lookups.tolist()
        assert p.hits.tolist() == st_.hits.tolist(), budget
        assert p.read_bytes.tolist() == st_.read_bytes.tolist()
        q = curve.at(budget)
        assert q.hits.tolist() == p.hits.tolist() and q.read_bytes.tolist() == p.read_bytes.tolist()
        assert p.hits.sum() >= prev            # LRU under the batch rules is a stack policy
        prev = p.hits.sum()


@given(cache_streams(), st.lists(st.integers(1, 200), min_size=1, max_size=6))
def test_curve_keeps_the_callers_budget_order(stream, budgets):
    h = stream.header
    bt = BatchTrace.from_events(stream.events, h.expert_bytes, h.n_expert)
    points = lru_curve(bt, budgets)
    assert [p.budget_bytes for p in points] == budgets
    for b, p in zip(budgets, points):
        assert p.hits.tolist() == replay_policy(bt, "lru", b).hits.tolist()


def test_curve_equals_replays_on_the_real_trace(qwen_trace):
    h = qwen_trace.header
    bt = BatchTrace.from_events(qwen_trace.events, h.expert_bytes, h.n_expert)
    curve = LruCurve.from_batches(bt)
    steps = curve.steps
    # 32 sweep budgets, plus budgets on both sides of 40 steps spread over the curve
    budgets = [b * MIB for b in range(250, 8001, 250)]
    picks = steps[np.linspace(0, steps.size - 1, 40).astype(int)].tolist()
    budgets += picks + [s - 1 for s in picks]
    for b, p in zip(budgets, lru_curve(bt, budgets)):
        r = replay_policy(bt, "lru", b)
        assert p.lookups.tolist() == r.lookups.tolist()
        assert p.hits.tolist() == r.hits.tolist(), b
        assert p.read_bytes.tolist() == r.read_bytes.tolist()
    # the cliff: no hit below T - (k - 1) x the largest entry = 770.1 MiB. The first reuse
    # possible is a layer-47-sized expert routed in the last slot of its batch and again one
    # token later: above it sit its own entry and the other 47 layers' 6 entries, i.e. T minus
    # the 5 entries ranked after it (bmoe-engine.md §3.2 says "0 % below T"; exactly, the
    # step is 5 entries below T)
    first = h.token_cycle_bytes - (h.n_expert_used - 1) * int(h.expert_bytes.max())
    assert first == 807505920 and steps[0] == first
    assert curve.at(first - 1).hits.sum() == 0 and curve.at(first).hits.sum() > 0
