"""``ExpertCache.apply_block`` (one kernel call over an EventBlock) against ``apply`` of each
event: the same records, counters and cache state, in any mix of the two."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.cache import ExpertCache
from refsim.streaming.knobs import StreamKnobs
from refsim.errors import ConfigError
from refsim.events import EventBlock
from refsim.testing.traces import event_streams

RECORD_FIELDS = ("kind", "first_position", "n_pos", "lookups", "hits", "read_bytes",
                 "resident_bytes", "experts_dropped", "spec_read_bytes")


def _same_records(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert [getattr(x, f) for f in RECORD_FIELDS] == [getattr(y, f) for f in RECORD_FIELDS]
        assert np.array_equal(x.residency, y.residency)
        assert x.residency.dtype == y.residency.dtype == np.int8
        assert np.array_equal(x.charged_bytes, y.charged_bytes)
        assert (x.dropped is None) == (y.dropped is None)
        if x.dropped is not None:
            assert np.array_equal(x.dropped, y.dropped)


def _same_state(a: ExpertCache, b: ExpertCache):
    for name in ("lookups", "hits", "read_bytes", "events", "experts_routed", "experts_dropped",
                 "spec_read_bytes", "spec_experts", "spec_useful"):
        assert np.array_equal(getattr(a.stats, name), getattr(b.stats, name)), name
    assert (a.stats.evictions, a.stats.rereads, a.stats.resident_bytes) == (
        b.stats.evictions, b.stats.rereads, b.stats.resident_bytes)
    assert a.resident_keys() == b.resident_keys()          # the LRU order too
    assert np.array_equal(a.layer_lookups, b.layer_lookups)
    assert np.array_equal(a.layer_hits, b.layer_hits)
    assert np.array_equal(a._learned, b._learned) and a._decodes == b._decodes
    assert np.array_equal(a._lru.prev_ids, b._lru.prev_ids)
    assert np.array_equal(a._lru.has_prev, b._lru.has_prev)


def _with_drops(events, seed):
    rng = np.random.default_rng(seed)
    out = []
    for ev in events:
        if seed and ev.routes.shape[2] > 1 and rng.random() < 0.5:
            mask = (rng.random(ev.routes.shape) < 0.4) & (ev.routes >= 0)
            mask[:, :, 0] = False                     # the top slot is never dropped
            ev = dataclasses.replace(ev, dropped=mask)
        out.append(ev)
    return out


@settings(max_examples=80, deadline=None)
@given(stream=event_streams(), budget=st.integers(1, 80), drop_seed=st.integers(0, 3),
       cut=st.integers(0, 12), middle=st.booleans())
def test_apply_block_is_apply_of_each_event(stream, budget, drop_seed, cut, middle):
    h = stream.header
    events = _with_drops(stream.events, drop_seed)
    one = ExpertCache(h.expert_bytes, h.n_expert, budget)
    want = [one.apply(ev) for ev in events]
    two = ExpertCache(h.expert_bytes, h.n_expert, budget)
    cut = min(cut, len(events))
    got = list(two.apply_block(EventBlock.from_events(events[:cut], h.n_layer, h.n_expert_used)))
    rest = events[cut:]
    if middle and rest:                           # one event through apply() between two blocks
        got.append(two.apply(rest[0]))
        rest = rest[1:]
    got += list(two.apply_block(EventBlock.from_events(rest, h.n_layer, h.n_expert_used)))
    _same_records(got, want)
    _same_state(one, two)


def test_apply_block_by_hand():
    # one layer of entry size 4, budget 8 (two entries), k = 1: experts 0, 1, 0, 2, 1
    routes = np.array([0, 1, 0, 2, 1], np.int16).reshape(5, 1, 1)
    block = EventBlock(positions=np.arange(5), routes=routes,
                       weights=np.full(routes.shape, np.nan, np.float32), dropped=None,
                       event_start=np.arange(6), kind=np.ones(5, np.int8),
                       turn=np.zeros(5, np.int64), accepted=np.full(5, -1, np.int64))
    cache = ExpertCache([4], 3, 8)
    recs = cache.apply_block(block)
    # 0 miss, 1 miss, 0 hit, 2 miss (evicts 1), 1 miss (evicts 0)
    assert [r.hits for r in recs] == [0, 0, 1, 0, 0]
    assert [r.read_bytes for r in recs] == [4, 4, 0, 4, 4]
    assert recs.residency[:, 0, 0].tolist() == [0, 0, 1, 0, 0]
    assert cache.resident_keys() == [(0, 1), (0, 2)]
    assert cache.stats.evictions == 2 and cache.stats.rereads == 1
    assert int(cache.stats.read_bytes[1]) == 16 and int(cache.stats.events[1]) == 5


def test_apply_block_refuses_knobs_and_misfits():
    block = EventBlock.from_events([], 2, 1)
    with pytest.raises(ConfigError, match="knobs"):
        ExpertCache([4, 4], 3, 8, StreamKnobs(prefetch=1)).apply_block(block)
    with pytest.raises(ConfigError, match="n_layer=3"):
        ExpertCache([4, 4, 4], 3, 8).apply_block(block)
