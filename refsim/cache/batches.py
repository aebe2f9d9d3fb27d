"""Decode events flattened into the engine's layer batches (one ``load_layer`` call each).

A :class:`BatchTrace` is what every policy kernel and the one-pass curve read: the token-major
expert keys of each (event, layer) batch, laid end to end in one array, with the batch's layer
and decode kind, and for each occurrence the index of the next batch that uses the same key
(what Belady needs). It is built once per trace, so the replays themselves touch no Python
objects.

Framing (bmoe-engine.md §3.2, "LRU mode"): one batch per streamed layer per event, in event
order then layer order, *including* layers that route nothing in an event (the engine still
runs its eviction step after such a call, and so does :class:`~refsim.cache.ExpertCache`).
For a non-speculative single-turn trace this equals the engine's ``route-replay.py``
reconstruction (prefill: one batch per layer, token-major; decode: one batch per layer per
step); for speculative traces refsim keeps the engine's per-decode framing (one batch per layer
for the whole verify decode), where route-replay.py splits a verify decode into per-step batches
(bmoe-engine.md §5, "Gaps").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim.jit import njit
from refsim.cache.lru import effective_routes
from refsim.errors import ConfigError
from refsim.events import DecodeEvent, EventBlock

NEVER = np.iinfo(np.int64).max
"""``next_use`` of an occurrence whose key is never used again (Belady's infinity)."""


@njit(cache=True)
def _next_use(keys, batch_start, n_keys):
    """Per occurrence: index of the next batch (after its own) holding the same key."""
    n_batch = batch_start.size - 1
    nxt = np.empty(keys.size, dtype=np.int64)
    seen = np.full(n_keys, NEVER, dtype=np.int64)
    for b in range(n_batch - 1, -1, -1):
        lo, hi = batch_start[b], batch_start[b + 1]
        for i in range(lo, hi):
            nxt[i] = seen[keys[i]]
        for i in range(lo, hi):
            seen[keys[i]] = b
    return nxt


@dataclass(frozen=True, eq=False)
class BatchTrace:
    """Layer batches of a sequence of decode events, as flat arrays.

    Attributes
    ----------
    keys : (n_occ,) int64 ndarray
        Key ``layer * n_expert + expert`` of every routed slot, batch by batch, token-major
        inside a batch (position, then slot); duplicates kept. A dropped slot holds its row's
        best id, as the engine rewrites it (``refsim.cache.lru.effective_routes``), or is left
        out when the row's weights are unknown.
    batch_start : (n_batch + 1,) int64 ndarray
        Batch ``b`` is ``keys[batch_start[b]:batch_start[b + 1]]``.
    batch_layer : (n_batch,) int32 ndarray
        Layer of each batch.
    batch_kind : (n_batch,) int8 ndarray
        :class:`~refsim.events.DecodeKind` value of the batch's event.
    next_use : (n_occ,) int64 ndarray
        Index of the next batch after this one that holds the same key; ``NEVER`` if none.
    expert_bytes : (n_layer,) int64 ndarray
        Entry size per layer, bytes.
    n_expert : int
    tokens : int
        Confirmed tokens of the events (``confirmed_tokens`` summed).
    """

    keys: np.ndarray
    batch_start: np.ndarray
    batch_layer: np.ndarray
    batch_kind: np.ndarray
    next_use: np.ndarray
    expert_bytes: np.ndarray
    n_expert: int
    tokens: int = 0

    @property
    def n_layer(self) -> int:
        """Streamed layer span."""
        return int(self.expert_bytes.size)

    @property
    def n_batch(self) -> int:
        """Number of layer batches."""
        return int(self.batch_layer.size)

    @classmethod
    def from_events(cls, events, expert_bytes, n_expert: int) -> "BatchTrace":
        """Flatten ``events`` (iterable of DecodeEvent) into layer batches
        (:meth:`from_block` of their :class:`~refsim.events.EventBlock`).

        Parameters
        ----------
        events : iterable of DecodeEvent
        expert_bytes : (n_layer,) int array-like
            Entry size per layer in bytes (``TraceHeader.expert_bytes``).
        n_expert : int

        Raises
        ------
        ConfigError
            If an event's layer span differs from ``len(expert_bytes)`` or it routes an expert
            id ``>= n_expert``, or a size is not positive.
        """
        eb = _entry_sizes(expert_bytes)
        events = list(events)
        k = 0
        for ev in events:
            if not isinstance(ev, DecodeEvent):
                raise ConfigError(f"expected DecodeEvent, got {type(ev).__name__}")
            if ev.n_layer != eb.size:
                raise ConfigError(f"event routes {ev.n_layer} layers, expected n_layer={eb.size}")
            k = ev.routes.shape[2]
        if len({ev.routes.shape[2] for ev in events}) > 1:    # blocks hold one k: batch by parts
            parts = [cls.from_events([ev], eb, n_expert) for ev in events]
            return cls._joined(parts, eb, n_expert)
        return cls.from_block(EventBlock.from_events(events, int(eb.size), k), eb, n_expert)

    @classmethod
    def from_block(cls, block: EventBlock, expert_bytes, n_expert: int) -> "BatchTrace":
        """Flatten a block's events into layer batches, in one pass without Python per event.

        Raises
        ------
        ConfigError
            As :meth:`from_events`.
        """
        eb = _entry_sizes(expert_bytes)
        n_layer = int(eb.size)
        if block.routes.shape[1] != n_layer:
            raise ConfigError(f"event routes {block.routes.shape[1]} layers, expected "
                              f"n_layer={n_layer}")
        routes = block.routes
        if routes.size and int(routes.max()) >= n_expert:
            raise ConfigError(
                f"event routes expert {int(routes.max())}, expected ids < n_expert={n_expert}")
        if block.dropped is not None:        # a dropped slot carries its row's best id (§3.6)
            routes = effective_routes(np.ascontiguousarray(routes, np.int16),
                                      np.ascontiguousarray(block.weights, np.float32),
                                      np.ascontiguousarray(block.dropped, np.bool_))
        keys = np.empty(int(np.count_nonzero(routes >= 0)), np.int64)
        start = np.zeros(block.n_events * n_layer + 1, np.int64)
        _batch_keys(np.ascontiguousarray(block.event_start, np.int64),
                    np.ascontiguousarray(routes, np.int16), n_expert, keys, start[1:])
        np.cumsum(start, out=start)
        layer = np.tile(np.arange(n_layer, dtype=np.int32), block.n_events)
        kind = np.repeat(block.kind.astype(np.int8), n_layer)
        nxt = _next_use(keys, start, n_layer * n_expert)
        return cls(keys=keys, batch_start=start, batch_layer=layer, batch_kind=kind,
                   next_use=nxt, expert_bytes=eb, n_expert=int(n_expert),
                   tokens=block.confirmed_tokens())

    @classmethod
    def _joined(cls, parts: list["BatchTrace"], eb: np.ndarray, n_expert: int) -> "BatchTrace":
        keys = np.concatenate([p.keys for p in parts]) if parts else np.zeros(0, np.int64)
        counts = np.concatenate([np.diff(p.batch_start) for p in parts]) if parts else \
            np.zeros(0, np.int64)
        start = np.zeros(counts.size + 1, np.int64)
        np.cumsum(counts, out=start[1:])
        return cls(keys=keys, batch_start=start,
                   batch_layer=np.concatenate([p.batch_layer for p in parts]),
                   batch_kind=np.concatenate([p.batch_kind for p in parts]),
                   next_use=_next_use(keys, start, int(eb.size) * n_expert), expert_bytes=eb,
                   n_expert=int(n_expert), tokens=sum(p.tokens for p in parts))


def _entry_sizes(expert_bytes) -> np.ndarray:
    eb = np.asarray(expert_bytes, dtype=np.int64)
    if eb.ndim != 1 or eb.size == 0 or (eb <= 0).any():
        raise ConfigError(f"expert_bytes must be a non-empty list of positive sizes, got {eb}")
    return eb


@njit(cache=True)
def _batch_keys(event_start, routes, n_expert, keys, counts):
    """The keys of every (event, layer) batch, layer-major within an event and token-major
    (position, then slot) within a batch, routed slots only; ``counts[b]`` = batch b's size."""
    n_layer = routes.shape[1]
    k = routes.shape[2]
    o = 0
    b = 0
    for e in range(event_start.size - 1):
        for il in range(n_layer):
            c = 0
            for p in range(event_start[e], event_start[e + 1]):
                for s in range(k):
                    r = routes[p, il, s]
                    if r >= 0:
                        keys[o] = il * n_expert + r
                        o += 1
                        c += 1
            counts[b] = c
            b += 1


def layer_subtraces(batches: "BatchTrace", with_index: bool = False) -> list[tuple]:
    """Per layer ``l``: ``(keys, batch_start, batch_layer, batch_kind)`` of the layer's own
    batches, in order (what a per-layer partition sees: a batch evicts only from its layer),
    and with ``with_index`` also the occurrence indices into ``batches.keys`` (to slice
    ``next_use``). Built once per BatchTrace and kept with it."""
    cached = _SUBTRACES.get(batches)
    if cached is None:
        bt = batches
        counts = np.diff(bt.batch_start)
        cached = []
        for il in range(bt.n_layer):
            sel = np.flatnonzero(bt.batch_layer == il)
            c = counts[sel]
            start = np.zeros(sel.size + 1, np.int64)
            np.cumsum(c, out=start[1:])
            idx = np.repeat(bt.batch_start[sel] - start[:-1], c) + np.arange(int(start[-1]))
            cached.append((bt.keys[idx], start, bt.batch_layer[sel], bt.batch_kind[sel], idx))
        _SUBTRACES[batches] = cached
    return cached if with_index else [t[:4] for t in cached]


import weakref  # noqa: E402

_SUBTRACES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
