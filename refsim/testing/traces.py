"""Hypothesis strategies for decode-event streams and route-trace headers, plus a tiny LRU model.

Use them to property-test a cache model or a trace reader of your own::

    from hypothesis import given
    from refsim.testing.traces import event_streams

    @given(event_streams())
    def test_mine(stream): ...
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from refsim.events import NOT_ROUTED, DecodeEvent, DecodeKind
from refsim.trace import TraceHeader


@dataclass(frozen=True)
class EventStream:
    """A header and a list of events that fit it (prefill first, then decodes)."""

    header: TraceHeader
    events: list[DecodeEvent]


@st.composite
def trace_headers(draw, max_layer: int = 4, max_expert: int = 8) -> TraceHeader:
    """Headers with 2..max_layer layers, mixed per-layer entry sizes (bytes)."""
    n_layer = draw(st.integers(2, max_layer))
    n_expert = draw(st.integers(2, max_expert))
    k = draw(st.integers(1, min(3, n_expert)))
    sizes = draw(st.lists(st.sampled_from([3, 4, 5, 8]), min_size=n_layer, max_size=n_layer))
    dense = draw(st.lists(st.integers(0, 100), min_size=n_layer, max_size=n_layer))
    return TraceHeader(model="synthetic", arch="qwen3moe", n_layer=n_layer, n_expert=n_expert,
                       n_expert_used=k, expert_bytes=np.array(sizes, np.int64),
                       dense_bytes=np.array(dense, np.int64))


@st.composite
def _routes(draw, n_pos: int, n_layer: int, n_expert: int, k: int) -> np.ndarray:
    """(n_pos, n_layer, k) distinct-per-row expert ids."""
    out = np.empty((n_pos, n_layer, k), np.int16)
    for p in range(n_pos):
        for il in range(n_layer):
            ids = draw(st.permutations(range(n_expert)))[:k]
            out[p, il] = ids
    return out


@st.composite
def event_streams(draw, max_layer: int = 4, max_expert: int = 8, max_events: int = 12,
                  speculative: bool | None = None) -> EventStream:
    """A prefill (last layer routes only the last position) then plain/verify decodes.

    Positions follow the engine: a verify decode of width w at base p that accepted a drafts
    is followed by a decode at p + 1 + a. ``speculative=False`` gives plain decodes only.
    """
    header = draw(trace_headers(max_layer=max_layer, max_expert=max_expert))
    n_layer, n_expert, k = header.n_layer, header.n_expert, header.n_expert_used
    events: list[DecodeEvent] = []
    n_prompt = draw(st.integers(0, 4))
    pos = 0
    if n_prompt:
        routes = draw(_routes(n_prompt, n_layer, n_expert, k))
        routes[:-1, n_layer - 1, :] = NOT_ROUTED
        weights = np.where(routes >= 0, np.float32(0.5), np.float32(np.nan)).astype(np.float32)
        events.append(DecodeEvent(DecodeKind.PREFILL, np.arange(n_prompt, dtype=np.int64),
                                  routes, weights=weights))
        pos = n_prompt
    n_dec = draw(st.integers(1, max_events))
    spec_ok = speculative is not False
    for _ in range(n_dec):
        width = draw(st.integers(1, 3)) if spec_ok else 1
        routes = draw(_routes(width, n_layer, n_expert, k))
        w = draw(st.sampled_from([0.25, 0.125, 0.0904526, 1.0]))
        weights = np.full(routes.shape, w, np.float32)
        if width == 1:
            ev = DecodeEvent(DecodeKind.PLAIN, np.array([pos], np.int64), routes, weights=weights)
            pos += 1
        else:
            acc = draw(st.integers(0, width - 1))
            ev = DecodeEvent(DecodeKind.VERIFY, np.arange(pos, pos + width, dtype=np.int64),
                             routes, weights=weights, n_draft=width - 1, accepted=acc)
            pos += 1 + acc
        events.append(ev)
    return EventStream(header, events)


class ModelLRU:
    """A plain-Python model of the engine's LRU rules (about 30 lines), for differential tests.

    Keys are ``(layer, expert)``; ``load(layer, ids, size)`` applies one layer batch and
    returns the per-id residency before the batch.
    """

    def __init__(self, budget_bytes: int, sizes):
        self.budget = budget_bytes
        self.sizes = list(sizes)
        self.od: OrderedDict[tuple[int, int], int] = OrderedDict()
        self.lookups = self.hits = self.read = 0

    def load(self, layer: int, ids) -> list[int]:
        before = {key for key in self.od}
        res = []
        seen = set()
        for e in ids:
            key = (layer, int(e))
            res.append(1 if key in before else 0)
            if key not in seen:
                seen.add(key)
                self.lookups += 1
                if key in before:
                    self.hits += 1
                else:
                    self.read += self.sizes[layer]
                    self.od[key] = self.sizes[layer]
            self.od.move_to_end(key)
        while sum(self.od.values()) > self.budget:
            oldest = next(iter(self.od))
            if oldest in seen:
                break
            del self.od[oldest]
        return res


def trace_difference(a, b) -> str | None:
    """The first difference between two :class:`~refsim.trace.RouteTrace` s (header, counts,
    every event's fields and arrays with their dtypes, the recorded residency, bytes and line
    numbers), or None when they hold the same values: what the reader's fast and per-line paths
    must agree on (tests/trace/test_fast_path.py)."""
    ha, hb = a.header, b.header
    for name in ("model", "arch", "n_layer", "n_expert", "n_expert_used", "extra"):
        if getattr(ha, name) != getattr(hb, name):
            return f"header {name}: {getattr(ha, name)!r} != {getattr(hb, name)!r}"
    for name in ("expert_bytes", "dense_bytes"):
        if not np.array_equal(getattr(ha, name), getattr(hb, name)):
            return f"header {name} differs"
    for name in ("path", "n_rows", "speculative", "column_line", "has_dropped_column",
                 "has_pred_columns", "n_prompt", "unrouted_layers"):
        if getattr(a, name) != getattr(b, name):
            return f"{name}: {getattr(a, name)!r} != {getattr(b, name)!r}"
    if len(a.events) != len(b.events):
        return f"{len(a.events)} events != {len(b.events)}"
    for i, (x, y) in enumerate(zip(a.events, b.events)):
        for name in ("kind", "turn", "n_draft", "accepted"):
            if getattr(x, name) != getattr(y, name):
                return f"event {i} {name}: {getattr(x, name)!r} != {getattr(y, name)!r}"
        arrays = [(n, getattr(x, n), getattr(y, n)) for n in
                  ("positions", "routes", "weights", "dropped", "tokens", "pred_routes",
                   "pred_weights")]
        arrays += [(n, getattr(a, n)[i], getattr(b, n)[i]) for n in
                   ("residency", "charged_bytes", "line_numbers")]
        for name, u, v in arrays:
            if (u is None) != (v is None):
                return f"event {i} {name}: {'None' if u is None else 'an array'} != " \
                       f"{'None' if v is None else 'an array'}"
            if u is None:
                continue
            if u.dtype != v.dtype or u.shape != v.shape:
                return f"event {i} {name}: {u.dtype}{u.shape} != {v.dtype}{v.shape}"
            same = (u.view(np.uint32) == v.view(np.uint32)) if u.dtype == np.float32 else u == v
            if not same.all():
                return f"event {i} {name} differs"
    return None
