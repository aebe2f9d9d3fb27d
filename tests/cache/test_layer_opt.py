"""layer-opt: the per-layer curves equal per-layer LRU replays, and the knapsack's shares are
optimal against brute force over every allocation on small traces."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.cache.batches import BatchTrace
from refsim.cache.policies import get_policy
from refsim.cache.policies.layer_opt import (FixedShares, _group_dp, group_tables, layer_curves,
                                             optimal_shares, slice_events)
from refsim.cache.replay import reference_replay, replay_policy
from refsim.testing.cache_streams import cache_budgets, cache_streams


def batches_of(stream):
    h = stream.header
    return BatchTrace.from_events(stream.events, h.expert_bytes, h.n_expert)


@settings(max_examples=60, deadline=None)
@given(cache_streams())
def test_each_layer_curve_is_that_layers_lru_at_every_share(stream):
    bt = batches_of(stream)
    curves = layer_curves(bt)
    for il, curve in enumerate(curves):
        for c in range(curve.size):
            shares = [0] * bt.n_layer
            shares[il] = c * int(bt.expert_bytes[il])
            r = replay_policy(bt, FixedShares(shares), 1)
            # layer il's hits: total hits minus the other layers' (each independent of il's share)
            base = replay_policy(bt, FixedShares([0] * bt.n_layer), 1)
            layer_hits = r.hits.sum() - base.hits.sum() + curves[il][0]
            assert layer_hits == curve[c], (il, c)


@settings(max_examples=60, deadline=None)
@given(cache_streams().flatmap(lambda s: st.tuples(st.just(s), cache_budgets(s.header))))
def test_knapsack_equals_brute_force_over_every_allocation(sb):
    stream, budget = sb
    bt = batches_of(stream)
    curves = layer_curves(bt)
    eb = [int(x) for x in bt.expert_bytes]
    best = max(sum(int(curves[l][c]) for l, c in enumerate(cs))
               for cs in itertools.product(*(range(cv.size) for cv in curves))
               if sum(c * e for c, e in zip(cs, eb)) <= budget)
    counts, hits = optimal_shares(curves, eb, budget)
    assert hits == best
    assert sum(c * e for c, e in zip(counts, eb)) <= budget
    # and the replay at those shares (the registered policy, both paths) gets exactly that
    fast = replay_policy(bt, "layer-opt", budget)
    ref = reference_replay(bt, get_policy("layer-opt"), budget)
    assert fast.hits.sum() == ref.hits.sum() == best
    assert best >= replay_policy(bt, "layer", budget).hits.sum()


@settings(max_examples=60, deadline=None)
@given(cache_streams().flatmap(lambda s: st.tuples(st.just(s), cache_budgets(s.header))))
def test_a_budget_only_truncates_the_group_tables(sb):
    # the DP over counts <= n never looks past n, so one budget-free table per trace serves
    # every budget: the DP stopped at budget // size is the full table's prefix, entry for entry
    stream, budget = sb
    bt = batches_of(stream)
    curves = layer_curves(bt)
    for size, layers, pm, arg, choice in group_tables(curves, bt.expert_bytes):
        flat = np.concatenate([curves[l] for l in layers]).astype(np.int64)
        offs = np.concatenate(([0], np.cumsum([curves[l].size for l in layers]))).astype(np.int64)
        n = min(int(pm.size) - 1, budget // size)
        best, ch = _group_dp(flat, offs, n)
        full, full_ch = _group_dp(flat, offs, int(pm.size) - 1)
        assert best.tolist() == full[:n + 1].tolist()
        assert ch.tolist() == full_ch[:, :n + 1].tolist()
        assert np.maximum.accumulate(best).tolist() == pm[:n + 1].tolist()
    tables = group_tables(curves, bt.expert_bytes)
    for b in (budget, budget // 2 + 1, 2 * budget):
        assert optimal_shares(curves, bt.expert_bytes, b, tables) == \
            optimal_shares(curves, bt.expert_bytes, b)


def test_hand_worked_allocation_gives_the_hot_layer_the_budget():
    # layer 0 cycles A B A B ... (2 entries hit every time from the 3rd event), layer 1 cycles
    # 5 keys (a repeat only every 5 events: 5 entries needed)
    from refsim.events import DecodeEvent, DecodeKind
    ids0 = [0, 1] * 4
    evs = [DecodeEvent(DecodeKind.PLAIN, np.array([i]), np.array([[[a], [i % 5]]], np.int16))
           for i, a in enumerate(ids0)]
    bt = BatchTrace.from_events(evs, [10, 10], n_expert=5)
    # uniform at 20 bytes: 10 per layer = one entry each: neither layer ever hits
    assert replay_policy(bt, "layer", 20).hits.sum() == 0
    counts, hits = optimal_shares(layer_curves(bt), [10, 10], 20)
    assert counts == [2, 0] and hits == 6 + 0   # layer 0: 6 hits; layer 1 at share 0: none
    assert replay_policy(bt, "layer-opt", 20).hits.sum() == 6


def test_slice_events_keeps_whole_events():
    from refsim.events import DecodeEvent, DecodeKind
    evs = [DecodeEvent(DecodeKind.PLAIN, np.array([i]), np.array([[[i % 3], [1]]], np.int16))
           for i in range(6)]
    bt = BatchTrace.from_events(evs, [1, 2], n_expert=3)
    tail = slice_events(bt, 4, 6)
    assert tail.n_batch == 4 and tail.keys.tolist() == [1, 4, 2, 4]
    assert tail.next_use.tolist() == [np.iinfo(np.int64).max, 3, np.iinfo(np.int64).max,
                                      np.iinfo(np.int64).max]
