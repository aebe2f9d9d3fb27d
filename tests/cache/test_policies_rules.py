"""Hand-worked cases: one per policy rule (bmoe-engine.md §3.2, §5), on both replay paths."""

import random

import numpy as np
import pytest

from refsim.cache import ExpertCache
from refsim.cache.batches import NEVER, BatchTrace
from refsim.cache.policy import (POLICIES, Policy, PolicyResult, get_policy, reference_replay,
                                 replay_policy)
from refsim.errors import ConfigError
from refsim.events import DecodeEvent, DecodeKind

A, B, C, D, E = range(5)


def one_layer(batches, n_expert=5, size=1):
    """Each inner list is one event (= one batch, n_layer 1), ids token-major."""
    evs = [DecodeEvent(DecodeKind.PLAIN, np.arange(len(ids), dtype=np.int64),
                       np.array(ids, np.int16).reshape(-1, 1, 1)) for ids in batches]
    return BatchTrace.from_events(evs, [size], n_expert)


def both(bt, name, budget, **params) -> PolicyResult:
    fast = replay_policy(bt, get_policy(name, **params), budget)
    ref = reference_replay(bt, get_policy(name, **params), budget)
    for f in ("lookups", "hits", "read_bytes"):
        assert np.array_equal(getattr(fast, f), getattr(ref, f)), f
    assert (fast.evictions, fast.resident_bytes) == (ref.evictions, ref.resident_bytes)
    return fast


def test_registry_has_the_engines_six_policies_in_order():
    get_policy("lru")
    assert list(POLICIES)[:6] == ["lru", "lfu", "belady", "random", "layer", "layerlfu"]


def test_unknown_policy_and_parameter_are_config_errors():
    with pytest.raises(ConfigError, match="unknown policy 'mru'.*lru"):
        get_policy("mru")
    with pytest.raises(ConfigError, match="takes no parameter 'seed'"):
        get_policy("lru", seed=3)
    with pytest.raises(ConfigError, match="positive"):
        replay_policy(one_layer([[A]]), "lru", 0)


def test_batch_trace_frames_one_batch_per_layer_token_major_with_next_use():
    ev = DecodeEvent(DecodeKind.PREFILL, np.arange(2, dtype=np.int64),
                     np.array([[[1, 2], [0, -1]], [[2, 3], [1, 0]]], np.int16))
    ev2 = DecodeEvent(DecodeKind.PLAIN, np.array([2]), np.array([[[3, 4], [0, 1]]], np.int16),
                      dropped=np.array([[[False, True], [False, False]]]))
    bt = BatchTrace.from_events([ev, ev2], [10, 20], n_expert=5)
    # layer 0 keys 1,2,2,3 ; layer 1 keys 5+0, 5+1, 5+0 ; layer 0: 3 (4 dropped) ; layer 1: 5, 6
    assert bt.keys.tolist() == [1, 2, 2, 3, 5, 6, 5, 3, 5, 6]
    assert bt.batch_start.tolist() == [0, 4, 7, 8, 10]
    assert bt.batch_layer.tolist() == [0, 1, 0, 1]
    assert bt.batch_kind.tolist() == [0, 0, 1, 1]
    assert bt.next_use.tolist() == [NEVER, NEVER, NEVER, 2, 3, 3, 3, NEVER, NEVER, NEVER]
    assert bt.tokens == 1


def test_lru_evicts_the_oldest_stamp_and_equals_the_engine_cache():
    # budget 2: [A B] [C] evicts A; [A] evicts B; [B] evicts C; [C] evicts A -> no hits
    bt = one_layer([[A, B], [C], [A], [B], [C]])
    r = both(bt, "lru", 2)
    assert (r.lookups.sum(), r.hits.sum(), r.evictions) == (6, 0, 4)
    # a repeated id only promotes: [A B A] leaves A most recent, so [C] evicts B
    r = both(one_layer([[A, B, A], [C], [A]]), "lru", 2)
    assert (r.lookups.sum(), r.hits.sum()) == (4, 1)
    c = ExpertCache([1], 5, 2)
    for ids in [[A, B, A], [C], [A]]:
        c.apply(DecodeEvent(DecodeKind.PLAIN, np.arange(len(ids)),
                            np.array(ids, np.int16).reshape(-1, 1, 1)))
    assert c.stats.total("hits") == 1


def test_the_batch_own_entries_are_protected_so_the_cache_can_stay_over_budget():
    r = both(one_layer([[A, B, C]]), "lru", 1)
    assert (r.resident_bytes, r.evictions) == (3, 0)
    r = both(one_layer([[A, B, C], [D]]), "lru", 1)     # then all three go, D stays
    assert (r.resident_bytes, r.evictions) == (1, 3)


def test_lfu_counts_lookups_kept_across_evictions_ties_to_the_least_recent():
    # budget 2. counts: A 2 after [A][A]; [B] ; [C] evicts B (1 < 2); [B] (count 2) evicts C;
    # [C] (count 2): A and B tie at 2, A is less recent -> A; [A] misses (B would hit if
    # counts were reset on eviction: then [C] would evict B and [A] hit).
    bt = one_layer([[A], [A], [B], [C], [B], [C], [A]])
    r = both(bt, "lfu", 2)
    assert (r.lookups.sum(), r.hits.sum(), r.evictions) == (7, 1, 4)
    # duplicates in a batch are one lookup: [B B B] counts 1, so [C] evicts B, not A (count 2)
    r = both(one_layer([[A], [A], [B, B, B], [C], [A]]), "lfu", 2)
    assert r.hits.sum() == 2


def test_belady_evicts_the_furthest_next_use_never_again_is_infinite_ties_oldest_first():
    # budget 2: [A B] [C] -> next uses A@2, B@3: evict B. [A] hits. [B]: A and C are never
    # used again (tie at infinity) -> evict the oldest resident, A.
    bt = one_layer([[A, B], [C], [A], [B], [C]])
    r = both(bt, "belady", 2)
    assert (r.lookups.sum(), r.hits.sum()) == (6, 2)   # [A] and the last [C] hit


def test_random_is_random_1234_choice_over_the_oldest_first_candidates():
    bt = one_layer([[A], [B], [C], [D], [E], [A]])
    rng = random.Random(1234)
    resident = [A, B]
    for new in (C, D, E):                               # budget 2: one eviction per batch
        resident.append(new)
        resident.remove(rng.choice([k for k in resident if k != new]))
    expect_hit = 1 if A in resident else 0
    r = both(bt, "random", 2)
    assert r.hits.sum() == expect_hit and r.evictions == 4 - expect_hit
    other = both(bt, "random", 2, seed=7)
    assert other.lookups.sum() == 6


def test_random_word_stream_is_cpythons_getrandbits_sequence():
    words = get_policy("random").fast_args(n_words=64)["words"]
    rng = random.Random(1234)
    assert words.tolist() == [rng.getrandbits(32) for _ in range(64)]


def test_layer_partition_is_budget_floor_divided_by_n_layer_and_evicts_in_its_layer():
    ev = lambda a, b: DecodeEvent(DecodeKind.PLAIN, np.array([0]),  # noqa: E731
                                  np.array([[[a], [b]]], np.int16))
    evs = [ev(0, 0), ev(1, 1), ev(2, 0), ev(0, 1)]
    bt = BatchTrace.from_events(evs, [1, 2], n_expert=3)
    # budget 7 -> share 3 per layer: layer 0 keeps its 3 entries (hit on the last 0), layer 1
    # holds one 2-byte entry, so it misses 4 times
    r = both(bt, "layer", 7)
    assert (r.lookups.sum(), r.hits.sum()) == (8, 1)
    # global LRU at 6 bytes keeps layer 1's entries instead: 2 hits
    assert both(bt, "lru", 6).hits.sum() == 2


def test_layerlfu_uses_lfu_order_inside_the_partition():
    ev = lambda a: DecodeEvent(DecodeKind.PLAIN, np.array([0]),  # noqa: E731
                               np.array([[[a], [0]]], np.int16))
    evs = [ev(A), ev(A), ev(B), ev(C), ev(A)]
    bt = BatchTrace.from_events(evs, [1, 1], n_expert=5)
    # budget 5 -> share 2; layer 0: [C] evicts B (count 1) under lfu, A (older) under lru
    assert both(bt, "layerlfu", 5).hits.sum() - 4 == 2   # layer 1's 4 hits, + A twice
    assert both(bt, "layer", 5).hits.sum() - 4 == 1


def test_a_user_policy_is_one_class_and_runs_on_the_reference_path():
    class MRU(Policy, name="test-mru"):
        def reset(self, batches):
            self.stamp = {}

        def on_access(self, key, clock, next_use):
            self.stamp[key] = clock

        def to_evict(self, candidates):
            return max(candidates, key=self.stamp.__getitem__)

    try:
        bt = one_layer([[A], [B], [C], [A], [B]])
        r = replay_policy(bt, "test-mru", 2)           # [C] evicts B (most recent): A hits
        assert (r.hits.sum(), r.policy) == (1, "test-mru")
    finally:
        del POLICIES["test-mru"]
