"""Hand-worked cases for each rule of the engine's LRU (bmoe-engine.md §3.2)."""

import numpy as np
import pytest

from refsim.cache import ExpertCache
from refsim.errors import ConfigError
from refsim.events import NOT_ROUTED, DecodeEvent, DecodeKind


def ev(rows, kind=DecodeKind.PLAIN, pos0=0):
    """rows: per position, per layer, a list of k ids."""
    routes = np.array(rows, dtype=np.int16)
    return DecodeEvent(kind, np.arange(pos0, pos0 + routes.shape[0], dtype=np.int64), routes)


def test_three_entry_budget_evicts_least_recent():
    # one layer, 1-expert batches, entry 10 bytes, budget 30 bytes = three entries
    c = ExpertCache([10], n_expert=8, budget_bytes=30)
    seq = [1, 2, 3, 1, 4, 2, 5, 1]
    hits = [c.apply(ev([[[e]]])).hits for e in seq]
    # 1 2 3 miss; 1 hit (order 2,3,1); 4 miss evicts 2 (order 3,1,4); 2 miss evicts 3
    # (order 1,4,2); 5 miss evicts 1 (order 4,2,5); 1 miss
    assert hits == [0, 0, 0, 1, 0, 0, 0, 0]
    assert c.stats.total("lookups") == 8
    assert c.stats.total("read_bytes") == 7 * 10
    assert c.resident_keys() == [(0, 1), (0, 5), (0, 2)]
    assert c.stats.evictions == 4
    assert c.stats.rereads == 2  # 2 and 1 were evicted, then read again


def test_duplicates_in_a_batch_are_one_lookup_and_refresh_recency():
    c = ExpertCache([10], n_expert=8, budget_bytes=30)
    # one prefill batch of three positions with k=2: ids token-major 1,2 | 3,1 | 2,1
    rec = c.apply(ev([[[1, 2]], [[3, 1]], [[2, 1]]], kind=DecodeKind.PREFILL))
    assert (rec.lookups, rec.hits, rec.read_bytes) == (3, 0, 30)
    # every duplicate of a missed id shows residency 0; bytes only on the first occurrence
    assert rec.residency[:, 0, :].tolist() == [[0, 0], [0, 0], [0, 0]]
    assert rec.charged_bytes[:, 0, :].tolist() == [[10, 10], [10, 0], [0, 0]]
    # last occurrences: 3 (pos1), 2 (pos2 slot0), 1 (pos2 slot1) -> MRU order 1, 2, 3
    assert c.resident_keys() == [(0, 1), (0, 2), (0, 3)]
    rec = c.apply(ev([[[4, 4]]]))  # the duplicate 4 is one miss; evicts 3, the LRU tail
    assert (rec.lookups, rec.hits) == (1, 0)
    assert c.resident_keys() == [(0, 4), (0, 1), (0, 2)]


def test_eviction_never_removes_an_entry_the_batch_touched():
    # budget of two entries, a batch that needs three: all three stay (over budget)
    c = ExpertCache([10], n_expert=8, budget_bytes=20)
    c.apply(ev([[[7]]]))
    rec = c.apply(ev([[[1, 2, 3]]]))
    assert rec.resident_bytes == 30  # 7 evicted, the batch's own three protected
    assert sorted(c.resident_keys()) == [(0, 1), (0, 2), (0, 3)]
    # the next batch touches 3 only: evict tail 1 -> 20 bytes, fits
    rec = c.apply(ev([[[3, 3, 3]]]))
    assert rec.hits == 1
    assert rec.resident_bytes == 20
    assert c.resident_keys() == [(0, 3), (0, 2)]


def test_eviction_stops_at_a_touched_tail():
    # the batch hits the LRU tail entry and misses a new one: the tail is protected, so the
    # cache stays over budget although an untouched entry sits in the middle
    c = ExpertCache([10], n_expert=8, budget_bytes=20)
    c.apply(ev([[[1]]]))
    c.apply(ev([[[2]]]))            # order 2, 1
    rec = c.apply(ev([[[5, 1]]]))  # 5 miss, 1 hit -> order 1, 5, 2; tail 2 untouched
    assert rec.resident_bytes == 20 and c.resident_keys() == [(0, 1), (0, 5)]


def test_layers_with_different_entry_sizes():
    # layer 0 entries cost 3 bytes, layer 1 entries 5 bytes; budget 11 bytes
    c = ExpertCache([3, 5], n_expert=4, budget_bytes=11)
    rec = c.apply(ev([[[0], [0]]]))  # reads 3 + 5
    assert (rec.lookups, rec.read_bytes, rec.resident_bytes) == (2, 8, 8)
    rec = c.apply(ev([[[1], [1]]]))  # layer 0: +3 = 11 fits; layer 1: +5 = 16 -> evict (0,0)
    assert rec.read_bytes == 8
    # after layer 1's batch: order (1,1),(0,1),(1,0),(0,0); 16 > 11 evict (0,0): 13 > 11,
    # evict (1,0): 8 <= 11
    assert c.resident_keys() == [(1, 1), (0, 1)]
    assert rec.resident_bytes == 8
    assert c.layer_lookups.tolist() == [2, 2] and c.layer_hits.tolist() == [0, 0]


def test_not_routed_and_dropped_slots_are_never_looked_up():
    routes = np.array([[[1, 2], [NOT_ROUTED, NOT_ROUTED]], [[1, 3], [2, 3]]], np.int16)
    dropped = np.zeros(routes.shape, bool)
    dropped[1, 1, 1] = True  # (pos 1, layer 1, slot 1) = expert 3 dropped
    e = DecodeEvent(DecodeKind.PREFILL, np.array([0, 1]), routes, dropped=dropped)
    c = ExpertCache([4, 4], n_expert=4, budget_bytes=1000)
    rec = c.apply(e)
    assert rec.lookups == 3 + 1  # layer 0: 1,2,3; layer 1: 2
    assert rec.residency[0, 1].tolist() == [-1, -1]
    assert rec.residency[1, 1].tolist() == [0, -1]


def test_kinds_are_counted_apart():
    c = ExpertCache([10], n_expert=4, budget_bytes=1000)
    c.apply(ev([[[1]], [[2]]], kind=DecodeKind.PREFILL))
    c.apply(ev([[[1]]], pos0=2))
    c.apply(ev([[[1]], [[3]]], kind=DecodeKind.VERIFY, pos0=3))
    st = c.stats
    assert st.lookups.tolist() == [2, 1, 2, 0, 0]
    assert st.hits.tolist() == [0, 1, 1, 0, 0]
    assert st.read_bytes.tolist() == [20, 0, 10, 0, 0]


@pytest.mark.parametrize("budget", [0, -5, 1.5])
def test_bad_budget_is_a_config_error(budget):
    with pytest.raises(ConfigError, match="budget"):
        ExpertCache([10], n_expert=4, budget_bytes=budget)


@pytest.mark.parametrize("text", ["0", "-1", "abc", "nan", "inf"])
def test_bad_cache_mb_is_a_config_error(text):
    with pytest.raises(ConfigError, match="--cache-mb"):
        ExpertCache.mib_to_bytes(text)


def test_cache_mb_is_mib():
    assert ExpertCache.mib_to_bytes("4000") == 4000 * 2**20
    assert ExpertCache.mib_to_bytes(0.5) == 2**19


def test_event_that_does_not_fit_is_rejected():
    c = ExpertCache([10, 10], n_expert=4, budget_bytes=100)
    with pytest.raises(ConfigError, match="n_expert=4"):
        c.apply(ev([[[5], [1]]]))
    with pytest.raises(ConfigError, match="n_layer=2"):
        c.apply(ev([[[1]]]))
