"""Outside oracle: on one-lookup batches (one layer, top-1) every shared policy counts exactly
libCacheSim's hits and misses, on the real qwen key stream and on drawn streams, with unit and
byte sizes (mapping: refsim.testing.libcachesim_oracle)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.cache.batches import BatchTrace
from refsim.cache.policies import get_policy
from refsim.cache.replay import reference_replay, replay_policy
from refsim.testing.libcachesim_oracle import (LIBCACHESIM, comparable, libcachesim_hits,
                                               lookup_stream, one_lookup_batches)

pytest.importorskip("libcachesim")
SHARED = sorted(LIBCACHESIM)


def ours(bt, name, budget, **params):
    """Hits of the reference definition, checked equal to the Numba fast path's."""
    r = reference_replay(bt, get_policy(name, **params), budget)
    f = replay_policy(bt, get_policy(name, **params), budget)
    assert r.lookups.sum() == f.lookups.sum() == bt.n_batch
    assert f.hits.tolist() == r.hits.tolist() and f.evictions == r.evictions
    return int(r.hits.sum())


@pytest.fixture(scope="module")
def qwen_stream(qwen_trace):
    h = qwen_trace.header
    bt = BatchTrace.from_events(qwen_trace.events, h.expert_bytes, h.n_expert)
    keys = lookup_stream(bt)
    # one entry per lookup of the engine's batches (counted by the LRU kernel), every key kept
    assert keys.size == replay_policy(bt, "lru", 1 << 40).lookups.sum() == 39526
    assert np.array_equal(np.unique(keys), np.unique(bt.keys))
    return keys[:12000], int(h.expert_bytes[0])


@pytest.mark.parametrize("name", SHARED)
def test_qwen_key_stream_equals_libcachesim_unit_and_byte_sizes(qwen_stream, name):
    keys, eb = qwen_stream
    for size in (1, eb):
        bt = one_lookup_batches(keys, size, n_expert=6144)
        for n_entries in (40, 300, 1000):          # below, near and above the working set
            budget = n_entries * size + (size // 3 if size > 1 else 0)
            if comparable(name, budget, size=size):
                assert ours(bt, name, budget) == libcachesim_hits(name, keys, size, budget), \
                    (name, size, budget)


streams = st.tuples(st.integers(2, 40), st.integers(1, 400), st.integers(0, 2**32 - 1),
                    st.sampled_from([1, 3, 100]), st.integers(1, 45), st.integers(0, 99),
                    st.booleans())


@settings(max_examples=25, deadline=None)
@given(streams, st.sampled_from(SHARED))
def test_drawn_streams_equal_libcachesim(s, name):
    n, m, seed, size, entries, extra, zipf = s
    rng = np.random.default_rng(seed)
    if zipf:
        p = 1.0 / np.arange(1, n + 1) ** 1.2
        ids = rng.choice(n, m, p=p / p.sum())
    else:
        ids = rng.integers(0, n, m)
    budget = entries * size + extra % size
    if name == "tinylfu":                       # (unit sizes only; a window needs >= 100)
        size, budget = 1, 100 + entries * 7 + extra
    if not comparable(name, budget, size=size):
        return
    bt = one_lookup_batches(ids, size, n_expert=n)
    assert ours(bt, name, budget) == libcachesim_hits(name, ids, size, budget)


@pytest.mark.parametrize("name,params", [
    ("s3fifo", {"small": 0.25, "ghost": 0.5, "threshold": 1}),
    ("2q", {"kin": 0.4, "kout": 1.0}),
    ("clock", {"bits": 2, "init": 1}),
    ("tinylfu", {"window": 0.2}),
])
def test_parameters_map_onto_libcachesim_keywords(name, params):
    rng = np.random.default_rng(7)
    p = 1.0 / np.arange(1, 61) ** 1.1
    ids = rng.choice(60, 3000, p=p / p.sum())
    size = 1 if name == "tinylfu" else 5
    bt = one_lookup_batches(ids, size, n_expert=60)
    for budget in (50, 101, 160):
        budget = budget // 5 if name == "tinylfu" else budget
        got = ours(bt, name, budget, **params)
        assert got == libcachesim_hits(name, ids, size, budget, params)
        assert got != ours(bt, name, budget) or budget in (160, 32)  # the parameters matter


def test_libcachesim_lirs_is_not_a_cache_of_its_size_so_lirs_is_checked_against_belady():
    # libCacheSim's LIRS.c (its hit_RD_HIRinQ demotes an LIR key whose move into Q can evict the
    # hit key itself, which then stays "resident" uncounted) beats Belady's optimum here, at 2
    # entries, which no 2-entry cache can; refsim's lirs (the paper's) never does
    ids = [2, 0, 1, 1, 1, 1, 2, 0, 1, 0, 0, 2, 1, 0, 2, 1, 1, 0]
    bt = one_lookup_batches(ids, 1, n_expert=3)
    belady = int(replay_policy(bt, "belady", 2).hits.sum())
    import libcachesim
    cache = libcachesim.LIRS(2, hashpower=10)
    theirs = sum(cache.get(libcachesim.Request(obj_size=1, obj_id=x + 1)) for x in ids)
    assert (theirs, belady) == (13, 11)
    assert ours(bt, "lirs", 2) <= belady


@settings(max_examples=40, deadline=None)
@given(streams, st.sampled_from(SHARED + ["lirs"]))
def test_no_policy_beats_belady_per_request_with_one_size(s, name):
    n, m, seed, size, entries, extra, zipf = s
    ids = np.random.default_rng(seed).integers(0, n, m)
    bt = one_lookup_batches(ids, size, n_expert=n)
    budget = entries * size + extra % size
    assert ours(bt, name, budget) <= replay_policy(bt, "belady", budget).hits.sum()
