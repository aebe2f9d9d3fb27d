"""Properties of every registered policy on drawn streams (mixed sizes, tiny budgets, big
batches, one-layer traces): the Numba fast path equals the reference definition, lru equals
the engine's ExpertCache, and the counters obey the batch rules."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from refsim.cache import ExpertCache
from refsim.cache.batches import BatchTrace
from refsim.cache.policies import POLICIES, get_policy
from refsim.cache.replay import reference_replay, replay_policy
from refsim.testing.cache_streams import cache_budgets, cache_streams

BUILTIN = [name for name, cls in POLICIES.items() if cls.fast_replay is not None]  # Numba path
ALL = list(POLICIES)   # every registered policy, the admit-protocol ones included


def streams_and_budgets():
    return cache_streams().flatmap(
        lambda s: st.tuples(st.just(s), cache_budgets(s.header)))


def batches_of(stream):
    h = stream.header
    return BatchTrace.from_events(stream.events, h.expert_bytes, h.n_expert)


@given(streams_and_budgets(), st.sampled_from(BUILTIN))
def test_fast_path_equals_the_reference_definition(sb, name):
    stream, budget = sb
    bt = batches_of(stream)
    fast = replay_policy(bt, name, budget)
    ref = reference_replay(bt, get_policy(name), budget)
    assert fast.lookups.tolist() == ref.lookups.tolist()
    assert fast.hits.tolist() == ref.hits.tolist()
    assert fast.read_bytes.tolist() == ref.read_bytes.tolist()
    assert (fast.evictions, fast.resident_bytes) == (ref.evictions, ref.resident_bytes)


@given(streams_and_budgets())
def test_lru_policy_equals_the_engine_cache(sb):
    stream, budget = sb
    h = stream.header
    cache = ExpertCache(h.expert_bytes, h.n_expert, budget)
    for ev in stream.events:
        cache.apply(ev)
    r = replay_policy(batches_of(stream), "lru", budget)
    assert r.lookups.tolist() == cache.stats.lookups.tolist()
    assert r.hits.tolist() == cache.stats.hits.tolist()
    assert r.read_bytes.tolist() == cache.stats.read_bytes.tolist()
    assert (r.evictions, r.resident_bytes) == (cache.stats.evictions,
                                               cache.stats.resident_bytes)


@given(streams_and_budgets(), st.sampled_from(ALL))
def test_counters_obey_the_batch_rules(sb, name):
    stream, budget = sb
    bt = batches_of(stream)
    r = replay_policy(bt, name, budget)
    # one lookup per unique key per batch, whatever the policy
    uniq = sum(len(set(bt.keys[bt.batch_start[b]:bt.batch_start[b + 1]].tolist()))
               for b in range(bt.n_batch))
    assert r.lookups.sum() == uniq
    assert (r.hits <= r.lookups).all()
    # every miss reads its layer's entry size
    sizes = bt.expert_bytes[bt.keys // bt.n_expert]
    assert r.read_bytes.sum() <= sizes.sum()
    if bt.n_batch:
        last = bt.keys[bt.batch_start[-2]:]
        protected = int(bt.expert_bytes[np.unique(last) // bt.n_expert].sum())
        if not POLICIES[name].partitioned:
            assert r.resident_bytes <= max(budget, protected)


@given(cache_streams(), st.sampled_from(ALL))
def test_a_budget_holding_every_entry_gives_only_compulsory_misses(stream, name):
    h = stream.header
    bt = batches_of(stream)
    # >= per-layer share too; x400 so that tinylfu's 1 % window, s3fifo's small FIFO (10 %)
    # and each of slru's 4 segments hold every entry as well
    budget = int(h.expert_bytes.sum()) * h.n_expert * h.n_layer * 400
    r = replay_policy(bt, name, budget)
    distinct = np.unique(bt.keys)
    assert r.lookups.sum() - r.hits.sum() == distinct.size
    assert r.read_bytes.sum() == int(bt.expert_bytes[distinct // bt.n_expert].sum())
    assert r.evictions == 0


@given(streams_and_budgets())
def test_belady_never_hits_less_than_lru_with_uniform_sizes(sb):
    # furthest-next-use is optimal for equal entry sizes; with mixed sizes it ignores size and is
    # not guaranteed (no counterexample was found in 3000 drawn mixed-size streams)
    stream, budget = sb
    h = stream.header
    if len(set(h.expert_bytes.tolist())) != 1:
        return
    bt = batches_of(stream)
    assert replay_policy(bt, "belady", budget).hits.sum() >= \
        replay_policy(bt, "lru", budget).hits.sum()


@given(streams_and_budgets(), st.sampled_from(ALL))
def test_each_replay_is_deterministic_and_one_layer_misses_read_one_entry_each(sb, name):
    # (the admit-protocol replay also raises if a policy evicts a protected or non-resident key)
    stream, budget = sb
    bt = batches_of(stream)
    a = replay_policy(bt, name, budget)
    b = replay_policy(bt, get_policy(name), budget)
    assert (a.hits.tolist(), a.evictions, a.resident_bytes) == \
        (b.hits.tolist(), b.evictions, b.resident_bytes)
    if bt.n_layer == 1:
        assert a.read_bytes.sum() == (a.lookups.sum() - a.hits.sum()) * int(bt.expert_bytes[0])


PARAMS = [("clock", {"bits": 2, "init": 1}), ("slru", {"segments": 2}),
          ("slru", {"segments": 3}), ("2q", {"kin": 0.5, "kout": 1.0}),
          ("s3fifo", {"small": 0.3, "ghost": 0.5, "threshold": 1}),
          ("lirs", {"hir": 0.2, "stack": 1.0}), ("tinylfu", {"window": 0.3}),
          ("layer-opt", {"fit": 0.5}), ("random", {"seed": 7})]


@given(streams_and_budgets(), st.sampled_from(PARAMS))
def test_fast_path_equals_the_reference_with_parameters(sb, spec):
    stream, budget = sb
    name, params = spec
    bt = batches_of(stream)
    fast = replay_policy(bt, get_policy(name, **params), budget)
    ref = reference_replay(bt, get_policy(name, **params), budget)
    assert (fast.hits.tolist(), fast.read_bytes.tolist(), fast.evictions,
            fast.resident_bytes) == (ref.hits.tolist(), ref.read_bytes.tolist(),
                                     ref.evictions, ref.resident_bytes)
