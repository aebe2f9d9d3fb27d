"""Hypothesis strategies for cache-policy and curve tests: streams that stress the batch rules.

Unlike :func:`refsim.testing.traces.event_streams` these allow a single layer (consecutive
batches then share keys: the one case where the LRU stack property needs its exception, see
:mod:`refsim.cache.mrc`), big prefill batches with repeated ids, unrouted and dropped slots,
draft-context decodes and strongly mixed entry sizes. Use them with ``cache_budgets`` to reach
tiny budgets (below one batch's union) as well as budgets that hold everything::

    @given(cache_streams().flatmap(lambda s: st.tuples(st.just(s), cache_budgets(s.header))))
    def test_mine(stream_budget): ...
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from refsim.events import NOT_ROUTED, DecodeEvent, DecodeKind
from refsim.testing.traces import EventStream
from refsim.trace import TraceHeader


@st.composite
def cache_headers(draw, max_layer: int = 3, max_expert: int = 6) -> TraceHeader:
    """Headers with 1..max_layer layers and per-layer entry sizes from {1, 2, 3, 5, 8} bytes."""
    n_layer = draw(st.integers(1, max_layer))
    n_expert = draw(st.integers(1, max_expert))
    k = draw(st.integers(1, min(3, n_expert)))
    sizes = draw(st.lists(st.sampled_from([1, 2, 3, 5, 8]), min_size=n_layer, max_size=n_layer))
    return TraceHeader(model="synthetic", arch="qwen3moe", n_layer=n_layer, n_expert=n_expert,
                       n_expert_used=k, expert_bytes=np.array(sizes, np.int64),
                       dense_bytes=np.zeros(n_layer, np.int64))


@st.composite
def _event(draw, header: TraceHeader, kind: DecodeKind, n_pos: int, pos: int) -> DecodeEvent:
    n_layer, n_expert, k = header.n_layer, header.n_expert, header.n_expert_used
    routes = np.empty((n_pos, n_layer, k), np.int16)
    for p in range(n_pos):
        for il in range(n_layer):
            routes[p, il] = draw(st.lists(st.integers(0, n_expert - 1), min_size=k, max_size=k,
                                          unique=True))
    holes = draw(st.sampled_from(["none", "unrouted", "dropped"]))
    dropped = None
    if holes != "none":
        mask = np.array(draw(st.lists(st.booleans(), min_size=routes.size,
                                      max_size=routes.size)), bool).reshape(routes.shape)
        if holes == "unrouted":
            routes[mask] = NOT_ROUTED
        else:
            dropped = mask
    return DecodeEvent(kind, np.arange(pos, pos + n_pos, dtype=np.int64), routes,
                       dropped=dropped, n_draft=n_pos - 1 if kind is DecodeKind.VERIFY else 0,
                       accepted=0 if kind is DecodeKind.VERIFY else None)


@st.composite
def cache_streams(draw, max_layer: int = 3, max_expert: int = 6, max_events: int = 10,
                  max_prefill: int = 6) -> EventStream:
    """A header, an optional prefill of up to ``max_prefill`` positions (one big batch per
    layer, ids repeating across positions), then plain, verify (2..4 positions) and draft
    decodes; each event is added while a drawn "another?" is True (shrinks well)."""
    header = draw(cache_headers(max_layer=max_layer, max_expert=max_expert))
    events: list[DecodeEvent] = []
    pos = 0
    n_prompt = draw(st.integers(0, max_prefill))
    if n_prompt:
        events.append(draw(_event(header, DecodeKind.PREFILL, n_prompt, 0)))
        pos = n_prompt
    while len(events) < max_events and draw(st.booleans()):
        kind = draw(st.sampled_from([DecodeKind.PLAIN, DecodeKind.VERIFY, DecodeKind.DRAFT]))
        n_pos = draw(st.integers(2, 4)) if kind is DecodeKind.VERIFY else 1
        events.append(draw(_event(header, kind, n_pos, pos)))
        pos += 1
    return EventStream(header, events)


@st.composite
def cache_budgets(draw, header: TraceHeader) -> int:
    """Budgets in bytes from 1 (below any entry) to a little above every entry of the model."""
    total = int(header.expert_bytes.sum()) * header.n_expert
    return draw(st.one_of(st.integers(1, max(1, 2 * int(header.expert_bytes.max()))),
                          st.integers(1, total + 8)))
