"""Hand-worked cases: one per policy rule (bmoe-engine.md §3.2, §5), on both replay paths."""

import random

import numpy as np
import pytest

from refsim.cache import ExpertCache
from refsim.cache.batches import NEVER, BatchTrace
from refsim.cache.policies import POLICIES, Policy, get_policy
from refsim.cache.replay import reference_replay, replay_policy
from refsim.cache.result import PolicyResult
from refsim.errors import ConfigError, UsageError
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


# ---- the admit-protocol policies (refsim.cache.policies.fifo ... tinylfu): one hand-worked case each,
# one layer, unit sizes, one lookup per batch (the per-request setting); letters are keys.

def replay_one(name, ids, budget, **params):
    pol = get_policy(name, **params)
    r = reference_replay(one_layer([[x] for x in ids], n_expert=8), pol, budget)
    assert r.lookups.sum() == len(ids)
    return r, pol


F, G = 5, 6


def test_fifo_a_hit_does_not_reorder():
    # budget 2: A B, A hits, C evicts A (oldest in), A evicts B -> one hit; lru keeps A: two
    ids = [A, B, A, C, A]
    assert replay_one("fifo", ids, 2)[0].hits.sum() == 1
    assert replay_one("lru", ids, 2)[0].hits.sum() == 2


def test_clock_gives_a_referenced_entry_a_second_chance():
    # budget 2: A B; A hits (bit 1); C: A's bit cleared, A to the head, B evicted; A hits
    # (bit 1 again); B: A spared again, C evicted -> hits on both A's; fifo evicts A at C
    ids = [A, B, A, C, A, B]
    r, pol = replay_one("clock", ids, 2)
    assert r.hits.sum() == 2 and list(pol.q) == [A, B] and pol.q[A] == 0
    assert replay_one("fifo", ids, 2)[0].hits.sum() == 1


def test_slru_promotes_by_segment_and_evicts_from_the_lowest():
    # segments=2, budget 4 -> 2 per segment. A B -> seg0, C -> seg1 (seg0 full), A hit -> seg1,
    # D -> seg0, E evicts seg0's tail B, A hit (top), B evicts seg0's tail D, C hit: 3 hits
    ids = [A, B, C, A, D, E, A, B, C]
    r, pol = replay_one("slru", ids, 4, segments=2)
    assert r.hits.sum() == 3
    assert [list(s) for s in pol.seg] == [[E, B], [A, C]]
    assert replay_one("lru", ids, 4)[0].hits.sum() == 2


def test_2q_sends_a1out_ghosts_to_am():
    # budget 4: A1in 1, A1out 2, Am 3 entries. A B (A1in), A hits in A1in (no move), C D fill;
    # E pushes A to A1out; A (ghost) -> Am after B goes to A1out; A hits in Am; F: C to A1out;
    # B (ghost) -> Am after D to A1out; G: E to A1out (C dropped); A hits: 3 hits
    ids = [A, B, A, C, D, E, A, A, F, B, G, A]
    r, pol = replay_one("2q", ids, 4)
    assert r.hits.sum() == 3
    assert (list(pol.ain), list(pol.aout), list(pol.am)) == ([F, G], [D, E], [B, A])


def test_arc_adapts_p_on_ghost_hits():
    # budget 2: A, A (T1 -> T2), B (T1), C evicts B into B1, A hits, B from B1: p 0 -> 1 and
    # REPLACE takes T2's A (|T1| = 1 = p, B did not come from B2) into B2; A from B2: p -> 0,
    # REPLACE takes T1's C into B1; B and A end in T2
    ids = [A, A, B, C, A, B, A]
    r, pol = replay_one("arc", ids, 2)
    assert r.hits.sum() == 2
    assert (list(pol.t1), list(pol.t2), list(pol.b1), list(pol.b2), pol.p) == \
        ([], [B, A], [C], [], 0.0)


def test_s3fifo_small_main_ghost():
    # small=0.5, ghost=0.5, budget 4 -> S 2, M 2, G 2 entries. A, A (count 1), B: S = [A B];
    # C, D: S full before any eviction -> M = [C D]; E evicts from S: A (count 1 < 2) to G;
    # A from G -> M after B goes to G; C hits (count 1); F: M over (3 > 2), C reinserted at
    # count 0, D evicted; D evicts S's E into G; A hits in M: 3 hits
    ids = [A, A, B, C, D, E, A, C, F, D, A]
    r, pol = replay_one("s3fifo", ids, 4, small=0.5, ghost=0.5)
    assert r.hits.sum() == 3
    assert (list(pol.s), list(pol.m), list(pol.g)) == ([F, D], [A, C], [B, E])
    assert dict(pol.m) == {A: 1, C: 0}


def test_s3fifo_refuses_an_entry_as_large_as_the_small_fifo():
    # budget 10 -> S = 1 entry: libCacheSim's S3FIFO_insert admits only size < |S|, so nothing
    # is ever resident and every lookup misses
    r, _ = replay_one("s3fifo", [A, A, A], 10)
    assert (r.hits.sum(), r.resident_bytes) == (0, 0)


def test_an_admit_policy_never_evicts_the_batch_own_entries():
    # budget 20: one batch of 25 distinct misses stays over budget (all protected, nothing
    # evicted); the next batch's one miss then evicts 6 of them to fit, as lru does
    first = list(range(25))
    for name in ["lru", "fifo", "clock", "slru", "2q", "arc", "s3fifo"]:
        bt = one_layer([first], n_expert=30)
        r = both(bt, name, 20) if name == "lru" else reference_replay(bt, get_policy(name), 20)
        assert (r.resident_bytes, r.evictions) == (25, 0), name
        bt = one_layer([first, [29]], n_expert=30)
        r = both(bt, name, 20) if name == "lru" else reference_replay(bt, get_policy(name), 20)
        assert (r.resident_bytes, r.evictions, r.hits.sum()) == (20, 6, 0), name


def test_policy_lists_parse_parameters_in_one_place():
    from refsim.cache.policies import parse_policy_list
    pols = parse_policy_list("lru, s3fifo:small=0.2,ghost=0.8 ,arc,2q:kin=0.3,clock:bits=2")
    assert [p.label for p in pols] == ["lru", "s3fifo:small=0.2,ghost=0.8", "arc", "2q:kin=0.3",
                                       "clock:bits=2"]
    assert (pols[1].small, pols[1].ghost, pols[1].threshold) == (0.2, 0.8, 2)
    assert pols[4].bits == 2 and isinstance(pols[4].bits, int)
    for bad, msg in [("s3fifo:small=x", r"expected s3fifo:small= a number \(default 0.1\), got 'x'"),
                     ("clock:bits=1.5", "expected clock:bits= an integer .*got '1.5'"),
                     ("small=0.1", "a parameter after its policy name, got 'small=0.1'"),
                     ("s3fifo:small", "expected NAME:KEY=VALUE parameters .*got 'small'"),
                     ("mru", "expected comma-separated names from lru,.*got 'mru'"),
                     ("arc:p=1", "expected arc's parameters .*got 'p'"),
                     ("s3fifo:small=2", r"s3fifo:small= a number in \[0, 1\], got '2.0'"),
                     (" , ", "comma-separated names from .*got ' , '"),
                     # accepted before (the empty item skipped; seed -1 replayed as seed 1)
                     ("lru,,arc", "comma-separated names from .* with no empty item, got 'lru,,arc'"),
                     ("lru,", "with no empty item, got 'lru,'"),
                     ("random:seed=-1", r"expected random:seed= an integer >= 0 \(random.Random takes the "
                                        r"absolute value of a negative seed\), got '-1'")]:
        with pytest.raises(UsageError, match=msg):   # a UsageError is a ConfigError: exit 2
            parse_policy_list(bad)


def test_lirs_demotes_the_bottom_lir_when_a_remembered_hir_returns():
    # budget 3 -> HIR part 1 entry, LIR part 2. A B become LIR, C resident HIR; A hits (top);
    # D evicts Q's C (remembered, non-resident), D HIR; C misses: D evicted (non-resident), C
    # returns as LIR and the bottom LIR B is demoted to Q; B hits in Q (back on S as HIR);
    # D misses: B evicted, D returns as LIR, bottom LIR A demoted: 2 hits
    r, pol = replay_one("lirs", [A, B, C, A, D, C, B, D], 3)
    assert r.hits.sum() == 2
    assert (dict(pol.s), list(pol.q), list(pol.nh)) == ({C: 0, B: 2, D: 0}, [A], [B])
    assert replay_one("lru", [A, B, C, A, D, C, B, D], 3)[0].hits.sum() == 3
