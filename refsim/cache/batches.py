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
from refsim.events import DecodeEvent

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
        """Flatten ``events`` (iterable of DecodeEvent) into layer batches.

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
        from refsim.events import confirmed_tokens

        eb = np.asarray(expert_bytes, dtype=np.int64)
        if eb.ndim != 1 or eb.size == 0 or (eb <= 0).any():
            raise ConfigError(f"expert_bytes must be a non-empty list of positive sizes, got {eb}")
        n_layer = int(eb.size)
        chunks, counts, kinds, tokens = [], [], [], 0
        layer_base = (np.arange(n_layer, dtype=np.int64) * n_expert)[:, None, None]
        for ev in events:
            if not isinstance(ev, DecodeEvent):
                raise ConfigError(f"expected DecodeEvent, got {type(ev).__name__}")
            if ev.n_layer != n_layer:
                raise ConfigError(f"event routes {ev.n_layer} layers, expected n_layer={n_layer}")
            routes = ev.routes
            if ev.dropped is not None:       # a dropped slot carries its row's best id (§3.6)
                w = (ev.weights if ev.weights is not None
                     else np.full(routes.shape, np.nan, np.float32))
                routes = effective_routes(routes, np.ascontiguousarray(w, np.float32),
                                          np.ascontiguousarray(ev.dropped, np.bool_))
            r = routes.transpose(1, 0, 2).astype(np.int64)          # [n_layer, n_pos, k]
            if r.size and int(r.max()) >= n_expert:
                raise ConfigError(
                    f"event routes expert {int(r.max())}, expected ids < n_expert={n_expert}")
            keep = r >= 0
            chunks.append((r + layer_base)[keep])                    # layer-major, token-major
            counts.append(keep.reshape(n_layer, -1).sum(axis=1))
            kinds.append(np.full(n_layer, int(ev.kind), dtype=np.int8))
            tokens += confirmed_tokens(ev)
        keys = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
        cnt = np.concatenate(counts) if counts else np.zeros(0, np.int64)
        start = np.zeros(cnt.size + 1, dtype=np.int64)
        np.cumsum(cnt, out=start[1:])
        n_batch = cnt.size
        layer = np.tile(np.arange(n_layer, dtype=np.int32), n_batch // n_layer)
        kind = np.concatenate(kinds) if kinds else np.zeros(0, np.int8)
        nxt = _next_use(keys, start, n_layer * n_expert)
        return cls(keys=keys, batch_start=start, batch_layer=layer, batch_kind=kind,
                   next_use=nxt, expert_bytes=eb, n_expert=int(n_expert), tokens=tokens)


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
