"""ExpertCache: the engine's LRU expert cache fed with decode events, and its flash account.

Counters and their definitions (docs/cache-studies.md, docs/telemetry.md):

- lookup: one unique (layer, expert) per layer batch (duplicates in the batch are not lookups);
- hit: a lookup whose entry was resident before the batch;
- read bytes: ``expert_bytes(layer)`` per missed lookup (unaligned; the engine's O_DIRECT reads
  round each slice up to 4 KiB windows, +0.2-0.4 %, bmoe-engine.md §3.1);
- resident bytes: sum of the entry sizes resident after the event;
- with ``--drop-cold-experts`` / ``--prefetch`` (:class:`~refsim.streaming.knobs.StreamKnobs`):
  ``experts_routed`` / ``experts_dropped`` (router_hook.cpp) and ``spec_read_bytes`` (a subset
  of read bytes), ``spec_experts`` (prefetched entries integrated), ``spec_useful`` (of those,
  the ones a later real lookup hit) (expert_stream_source.cpp);
- every counter is kept per decode kind (prefill, plain, verify, draft) and per event.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from refsim import MAX_CACHE_MIB, MIB
from refsim.cache import lru as _lru
from refsim.cache.linked import keys_newest_first
from refsim.cache.lru import EventArrays, lru_apply_event_tuples
from refsim.errors import ConfigError, UsageError, value_message
from refsim.events import N_KINDS, DecodeEvent, DecodeKind, EventBlock
from refsim.streaming.knobs import StreamKnobs


@dataclass(frozen=True)
class EventRecord:
    """What one event did to the cache.

    Attributes
    ----------
    kind : DecodeKind
    first_position : int
        Position of the event's first token (trace ``step``).
    n_pos : int
    lookups, hits : int
        Unique (layer, expert) lookups of the event and how many hit.
    read_bytes : int
        Bytes read from flash by the event's misses.
    resident_bytes : int
        Resident entry bytes after the event (after eviction).
    residency : (n_pos, n_layer, k) int8 ndarray
        Per slot: 1 resident before its layer batch, 0 not, -1 not routed or dropped.
    charged_bytes : (n_pos, n_layer, k) int64 ndarray
        Per slot: the entry size on the first non-dropped occurrence of a missed id, else 0.
    dropped : (n_pos, n_layer, k) bool ndarray or None
        Slots dropped in this event (recorded, or decided by ``--drop-cold-experts``); None
        when nothing was dropped.
    experts_dropped, spec_read_bytes : int
        Slots the drop policy dropped in this event; bytes prefetch read in this event (also
        in ``read_bytes``).
    """

    kind: DecodeKind
    first_position: int
    n_pos: int
    lookups: int
    hits: int
    read_bytes: int
    resident_bytes: int
    residency: np.ndarray
    charged_bytes: np.ndarray
    dropped: np.ndarray | None = None
    experts_dropped: int = 0
    spec_read_bytes: int = 0

    def trace_residency(self) -> np.ndarray:
        """Residency as a route trace records it: a dropped slot keeps the router's residency,
        which is 0 (a slot drops only on a miss; §3.6 "Trace columns"), instead of -1."""
        if self.dropped is None:
            return self.residency
        return np.where(self.dropped, np.int8(0), self.residency).astype(np.int8)


class BlockRecords(Sequence):
    """The :class:`EventRecord` of every event of an :class:`~refsim.events.EventBlock`
    (:meth:`ExpertCache.apply_block`), as arrays; ``records[i]`` builds event ``i``'s record
    with views of them.

    Attributes
    ----------
    block : EventBlock
    delta : (n_events, N_COUNTERS) int64 ndarray
        Each event's counters (:mod:`refsim.cache.lru` ``C_*``).
    resident_after : (n_events,) int64 ndarray
        Resident bytes after each event.
    residency, charged_bytes, dropped : (P, n_layer, k) ndarray
        int8, int64, bool: :class:`EventRecord`'s arrays laid end to end as the block's
        positions are.
    """

    def __init__(self, block: EventBlock, delta: np.ndarray, resident_after: np.ndarray,
                 residency: np.ndarray, charged_bytes: np.ndarray, dropped: np.ndarray):
        self.block = block
        self.delta = delta
        self.resident_after = resident_after
        self.residency = residency
        self.charged_bytes = charged_bytes
        self.dropped = dropped

    def __len__(self) -> int:
        return self.block.n_events

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        a, b = int(self.block.event_start[i]), int(self.block.event_start[i + 1])
        d = self.delta[i]
        drop = self.dropped[a:b]
        return EventRecord(
            kind=DecodeKind(int(self.block.kind[i])),
            first_position=int(self.block.positions[a]) if b > a else -1, n_pos=b - a,
            lookups=int(d[_lru.C_LOOKUPS]), hits=int(d[_lru.C_HITS]),
            read_bytes=int(d[_lru.C_READ]), resident_bytes=int(self.resident_after[i]),
            residency=self.residency[a:b], charged_bytes=self.charged_bytes[a:b],
            dropped=drop if drop.any() else None, experts_dropped=int(d[_lru.C_DROPPED]),
            spec_read_bytes=int(d[_lru.C_SPEC_READ]))


@dataclass
class CacheStats:
    """Lifetime counters of an :class:`ExpertCache`, split by :class:`DecodeKind`.

    Arrays are indexed by ``DecodeKind`` value (0 prefill, 1 plain, 2 verify, 3 draft,
    4 draft-context prefill).
    """

    lookups: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    hits: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    read_bytes: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    events: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    experts_routed: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    experts_dropped: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    spec_read_bytes: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    spec_experts: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    spec_useful: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    evictions: int = 0
    rereads: int = 0
    resident_bytes: int = 0

    def total(self, name: str, kinds: Iterable[DecodeKind] | None = None) -> int:
        """Sum of counter ``name`` over ``kinds`` (default: all kinds)."""
        arr = getattr(self, name)
        if kinds is None:
            return int(arr.sum())
        return int(sum(arr[int(k)] for k in kinds))


CACHE_MB_RANGE = "a number of MiB from 2^-20 (one byte) to 2^40 (1 EiB)"
"""What ``--cache-mb`` accepts (:meth:`ExpertCache.mib_to_bytes`), in every command's message."""

TARGET_DECODE_KINDS = (DecodeKind.PLAIN, DecodeKind.VERIFY)
"""Target-model decodes after prefill (the engine's 'decode' phase, trace phase 1)."""

_STAT_COUNTERS = (("lookups", _lru.C_LOOKUPS), ("hits", _lru.C_HITS),
                  ("read_bytes", _lru.C_READ), ("experts_routed", _lru.C_ROUTED),
                  ("experts_dropped", _lru.C_DROPPED), ("spec_read_bytes", _lru.C_SPEC_READ),
                  ("spec_experts", _lru.C_SPEC_EXPERTS), ("spec_useful", _lru.C_SPEC_USEFUL))
"""The per-kind :class:`CacheStats` arrays and the kernel counter each sums."""


class ExpertCache:
    """One global LRU over (layer, expert) entries with a byte budget (the engine's cache).

    Parameters
    ----------
    expert_bytes : (n_layer,) int array-like
        Bytes of one expert entry per layer (cost of a miss, cache charge per entry).
    n_expert : int
        Experts per layer.
    budget_bytes : int
        Cache budget in bytes (the engine's ``--cache-mb`` × 2**20).
    knobs : StreamKnobs, optional
        ``--drop-cold-experts`` and ``--prefetch`` (default: both off, the bare cache).

    Raises
    ------
    ConfigError
        If the budget is not a positive integer or the sizes are not positive.

    Notes
    -----
    Rules: bmoe-engine.md §3.2 (see :mod:`refsim.cache.lru`). Keys are
    ``layer * n_expert + expert``.
    """

    def __init__(self, expert_bytes, n_expert: int, budget_bytes: int,
                 knobs: StreamKnobs | None = None):
        eb = np.asarray(expert_bytes, dtype=np.int64)
        if eb.ndim != 1 or eb.size == 0 or (eb <= 0).any():
            raise ConfigError(f"expert_bytes must be a non-empty list of positive sizes, got {eb}")
        if n_expert < 1:
            raise ConfigError(f"n_expert must be >= 1, got {n_expert}")
        if int(budget_bytes) != budget_bytes or budget_bytes <= 0:
            raise ConfigError(f"cache budget must be a positive number of bytes, got {budget_bytes}")
        self.expert_bytes = eb
        self.n_layer = int(eb.size)
        self.n_expert = int(n_expert)
        self.budget_bytes = int(budget_bytes)
        self._set_state(_lru.new_state(eb, self.n_expert, self.budget_bytes))
        self._gen = 0
        self.knobs = knobs if knobs is not None else StreamKnobs()
        self._learned = np.zeros(self.n_layer, dtype=np.bool_)   # terminal weight node known
        self._decodes = 0                      # target decode graphs applied (route-ahead)
        self.layer_lookups = self._lru.layer_lookups
        """(n_layer,) int64: lifetime lookups per layer."""
        self.layer_hits = self._lru.layer_hits
        """(n_layer,) int64: lifetime hits per layer."""
        self.stats = CacheStats()

    def resident_keys(self) -> list[tuple[int, int]]:
        """Resident (layer, expert) entries, most recent first."""
        return [(key // self.n_expert, key % self.n_expert)
                for key in keys_newest_first(self._lru.links, 0)]

    def resident_mask(self) -> np.ndarray:
        """(n_layer, n_expert) bool: a copy of which entries are resident now (the draft
        policies' view, :mod:`refsim.spec.policies`)."""
        return self._lru.resident.reshape(self.n_layer, self.n_expert).copy()

    def apply(self, event: DecodeEvent) -> EventRecord:
        """Load one event's per-layer batches; returns what it did.

        With ``--drop-cold-experts`` armed, the rule decides each deferred layer's drops from
        the cache state (a recorded ``dropped`` column is not used); otherwise a recorded
        ``dropped`` column is honoured.

        Raises
        ------
        ConfigError
            If the event's layer span or expert ids do not fit this cache, or the policy needs
            a weight the event lacks.
        """
        ctx = self._begin(event.kind, event.positions, event.routes, event.weights,
                          None if self.knobs.drop_on else event.dropped,
                          event.pred_routes, event.pred_weights)
        kn = self.knobs
        if kn.predict_prefetch and event.pred_routes is None and not ctx.kind.draft_context:
            raise ConfigError(
                f"--predict-prefetch: the event at position {int(event.positions[0])} carries no "
                f"stale-gate prediction (a trace needs the pred_expert/pred_weight columns, which "
                f"`refsim run --predict-prefetch --route-trace` writes)")
        if ctx.ahead and kn.drop_on and event.pred_weights is None:
            raise ConfigError(
                f"--route-ahead with --drop-cold-experts: the decode at position "
                f"{int(event.positions[0])} has no stale-ranking weights for the drop-aware "
                f"early-read filter (a trace needs the pred_weight column, which `refsim run "
                f"--route-ahead N --drop-cold-experts F --route-trace` writes)")
        a = ctx.arrays
        if a.deferred.any():
            look = (a.routes >= 0) & a.deferred[None, :, None]
            if not np.isfinite(a.weights[look]).all():
                raise ConfigError(
                    "--drop-cold-experts: the policy needs every routed slot's final weight, and "
                    f"an event at position {int(event.positions[0])} has none (weight 'nan')")
        self._run(ctx, 0, self.n_layer, classify=True)
        return self._finish(ctx)

    def open_event(self, kind: DecodeKind, positions, k: int) -> "LayerFeed":
        """Feed one event layer by layer, as a live forward pass produces it (the engine's
        hook calls ``load_layer`` per layer); see :class:`LayerFeed`."""
        return LayerFeed(self, kind, positions, k)

    def _begin(self, kind, positions, routes, weights, dropped, pred_routes=None,
               pred_weights=None):
        routes = np.ascontiguousarray(routes, np.int16)
        self._fit(routes)
        n_pos, n_layer, k = routes.shape
        armed = self.knobs.armed(DecodeKind(kind).phase)
        routed_layers = (routes >= 0).any(axis=(0, 2))
        deferred = (self._learned & routed_layers) if armed else np.zeros(n_layer, np.bool_)
        w = (np.ascontiguousarray(weights, np.float32) if weights is not None
             else np.full(routes.shape, np.nan, np.float32))
        d = (np.ascontiguousarray(dropped, np.bool_) if dropped is not None
             else np.zeros(routes.shape, np.bool_))
        kind = DecodeKind(kind)
        # route-ahead commits in target decodes after the run's first (route-ahead.md)
        ahead = self.knobs.route_ahead if kind in TARGET_DECODE_KINDS and self._decodes else 0
        if pred_routes is None:    # no stale ranking: route-ahead reads the committed routes
            pr, pw = routes, np.full(routes.shape, np.nan, np.float32)
        else:
            pr = np.ascontiguousarray(pred_routes, np.int16)
            pw = np.ascontiguousarray(pred_weights, np.float32)
        arrays = EventArrays(routes=routes, weights=w, dropped_in=d, deferred=deferred,
                             pred_routes=pr, pred_weights=pw,
                             residency=np.full(routes.shape, -1, np.int8),
                             charged=np.zeros(routes.shape, np.int64),
                             dropped=np.zeros(routes.shape, np.bool_))
        return _EventCtx(kind=kind, positions=np.asarray(positions, np.int64), ahead=ahead,
                         armed=armed, arrays=arrays, before=self._lru.counters.copy())

    def _fit(self, routes: np.ndarray) -> None:
        """Check that ``routes`` (n_pos, n_layer, k) fit this cache and size the per-slot state
        (the previous graph's ids, the prediction lists) for its ``k``.

        Raises
        ------
        ConfigError
            If the layer span or an expert id does not fit.
        """
        if routes.shape[1] != self.n_layer:
            raise ConfigError(
                f"event routes {routes.shape[1]} layers, the cache has n_layer={self.n_layer}")
        if routes.size and int(routes.max()) >= self.n_expert:
            raise ConfigError(
                f"event routes expert {int(routes.max())}, the cache has n_expert={self.n_expert}")
        k = routes.shape[2]
        st = self._lru
        if st.prev_ids.shape[1] != k:
            st.has_prev[:] = False
            st.pend_n[:] = 0
            self._set_state(st._replace(prev_ids=np.full((self.n_layer, k), -1, np.int16),
                                        pend=np.zeros((self.n_layer, 2, k), dtype=np.int16)))

    def _set_state(self, st: "_lru.LruState") -> None:
        """Keep the kernels' :class:`~refsim.cache.lru.LruState` (the LRU order, residency,
        queues), and its fields as a plain tuple
        (:func:`~refsim.cache.lru.lru_apply_event_tuples`)."""
        self._lru = st
        self._lru_fields = tuple(st)

    def apply_block(self, block: EventBlock) -> "BlockRecords":
        """Apply a block's events in order, as :meth:`apply` of each would, in one kernel call
        (:func:`refsim.cache.lru.lru_apply_block`: the same per-event kernel, state and
        counters; tests/cache/test_apply_block.py checks every record and the cache state
        against :meth:`apply`). For a cache whose knobs are all off (the plain LRU replay of a
        trace; a recorded ``dropped`` mask is honoured).

        Returns
        -------
        BlockRecords
            The events' records.

        Raises
        ------
        ConfigError
            If a knob is on, or the block's layer span or expert ids do not fit this cache.
        """
        if self.knobs.any_on:
            raise ConfigError("ExpertCache.apply_block: the streaming knobs need apply() per event")
        routes = np.ascontiguousarray(block.routes, np.int16)
        self._fit(routes)
        shape = routes.shape
        weights = np.ascontiguousarray(block.weights, np.float32)
        dropped = (np.ascontiguousarray(block.dropped, np.bool_) if block.dropped is not None
                   else np.zeros(shape, np.bool_))
        residency = np.full(shape, -1, np.int8)
        charged = np.zeros(shape, np.int64)
        dropped_out = np.zeros(shape, np.bool_)
        before = self._lru.counters.copy()
        after = np.zeros((block.n_events, _lru.N_COUNTERS), np.int64)
        arrays = EventArrays(routes, weights, dropped, np.zeros(self.n_layer, np.bool_), routes,
                             weights, residency, charged, dropped_out)
        self._gen = _lru.lru_apply_block(np.ascontiguousarray(block.event_start, np.int64),
                                         arrays, self._lru, self._gen, after)
        delta = np.diff(np.vstack([before[None, :], after]), axis=0)
        kind = block.kind.astype(np.int64)
        st = self.stats
        per_kind = np.zeros((N_KINDS, _lru.N_COUNTERS), np.int64)
        np.add.at(per_kind, kind, delta)         # exact int64 sums per kind
        for name, c in _STAT_COUNTERS:
            getattr(st, name)[:] += per_kind[:, c]
        st.events += np.bincount(kind, minlength=N_KINDS)
        self._absolute_stats()
        if self.knobs.traced:                  # as _finish: these graphs showed their weights
            self._learned |= (routes >= 0).any(axis=(0, 2))
        self._decodes += int(np.isin(kind, [int(k) for k in TARGET_DECODE_KINDS]).sum())
        return BlockRecords(block, delta, after[:, _lru.C_RESIDENT], residency, charged,
                            dropped_out)

    def _absolute_stats(self) -> None:
        st, counters = self.stats, self._lru.counters
        st.evictions = int(counters[_lru.C_EVICTIONS])
        st.rereads = int(counters[_lru.C_REREADS])
        st.resident_bytes = int(counters[_lru.C_RESIDENT])

    def _run(self, ctx, l0: int, l1: int, classify: bool) -> None:
        kn = self.knobs
        self._gen = lru_apply_event_tuples(
            tuple(ctx.arrays), self._lru_fields, l0, l1, self._gen,
            kn.drop_threshold(ctx.arrays.routes.shape[2]), classify, kn.drop_on, kn.prefetch,
            ctx.ahead, kn.spec_max)

    def _finish(self, ctx) -> EventRecord:
        if self.knobs.traced or ctx.armed:           # this graph showed its weight chain
            self._learned |= (ctx.arrays.routes >= 0).any(axis=(0, 2))
        self._decodes += ctx.kind in TARGET_DECODE_KINDS
        delta = self._lru.counters - ctx.before
        kind = int(ctx.kind)
        st = self.stats
        for name, c in _STAT_COUNTERS:
            getattr(st, name)[kind] += delta[c]
        st.events[kind] += 1
        self._absolute_stats()
        a = ctx.arrays
        n_pos = a.routes.shape[0]
        return EventRecord(
            kind=ctx.kind, first_position=int(ctx.positions[0]) if n_pos else -1,
            n_pos=n_pos, lookups=int(delta[_lru.C_LOOKUPS]), hits=int(delta[_lru.C_HITS]),
            read_bytes=int(delta[_lru.C_READ]),
            resident_bytes=int(self._lru.counters[_lru.C_RESIDENT]),
            residency=a.residency, charged_bytes=a.charged,
            dropped=a.dropped if a.dropped.any() else None,
            experts_dropped=int(delta[_lru.C_DROPPED]),
            spec_read_bytes=int(delta[_lru.C_SPEC_READ]))

    @staticmethod
    def mib_to_bytes(cache_mb: float) -> int:
        """``--cache-mb`` value to bytes (MiB = 2**20 bytes, rounded down to whole bytes).

        Accepted: :data:`CACHE_MB_RANGE`, a finite number ``2**-20 <= v <= 2**40`` (at least one
        byte, at most :data:`MAX_CACHE_MIB`); text is read as ``float`` reads it.

        Raises
        ------
        UsageError
            ``"argument --cache-mb: expected <CACHE_MB_RANGE>, got '<value>'"`` otherwise
            (a :class:`ConfigError`; the CLI exits 2).
        """
        try:
            value = float(cache_mb)
        except (TypeError, ValueError):
            value = math.nan
        if not (np.isfinite(value) and 1 <= value * MIB and value <= MAX_CACHE_MIB):
            raise UsageError(value_message("--cache-mb", CACHE_MB_RANGE, cache_mb))
        return int(value * MIB)


@dataclass
class _EventCtx:
    """One event being applied (internal to ExpertCache and LayerFeed): its arrays as the
    kernel takes them (written in place, layer by layer for a LayerFeed) and the counters
    before it."""

    kind: DecodeKind
    positions: np.ndarray
    ahead: int
    armed: bool
    arrays: EventArrays
    before: np.ndarray

class LayerFeed:
    """One event fed to the cache layer by layer by a live forward pass: the seam through which
    the pass asks "which of these ids are resident now?" before a layer's FFN, and reports what
    it routed. The pass never sees a byte count; the cache applies each layer with the same
    kernel as :meth:`ExpertCache.apply` (docs/architecture.md, "The drop seam").

    Use: for each MoE layer in order, ``drop_threshold(il)`` (None: do not drop at this layer),
    ``resident(il, ids)``, then ``routed(il, rows, ids, weights, dropped)`` with the router's
    ids and weights and the slots the pass dropped; finally :meth:`close` with the event.
    """

    def __init__(self, cache: ExpertCache, kind: DecodeKind, positions, k: int):
        positions = np.asarray(positions, np.int64)
        shape = (positions.size, cache.n_layer, int(k))
        self.cache = cache
        self.ctx = cache._begin(kind, positions, np.full(shape, -1, np.int16), None, None,
                                np.full(shape, -1, np.int16), np.full(shape, np.nan, np.float32))
        self.ctx.arrays.deferred[:] = cache._learned if self.ctx.armed else False
        self._next = 0

    @property
    def drop_renorm(self) -> bool:
        """``--drop-no-renorm`` not given: survivors are rescaled after a drop."""
        return self.cache.knobs.drop_renorm

    def drop_threshold(self, il: int):
        """``F / k`` (float32) when the drop rule applies at layer ``il`` of this event (armed
        for its phase and the layer's decision point known), else None."""
        a = self.ctx.arrays
        return self.cache.knobs.drop_threshold(a.routes.shape[2]) if a.deferred[il] else None

    def resident(self, il: int, ids: np.ndarray) -> np.ndarray:
        """Per id of layer ``il`` (any shape, -1 allowed): resident now or a prefetch that will
        have landed when the layer loads (the engine settles speculation first)."""
        self._catch_up(il)
        ids = np.asarray(ids, np.int64)
        keys = il * self.cache.n_expert + np.maximum(ids, 0)
        st = self.cache._lru
        return (ids >= 0) & (st.resident[keys] | st.queued[keys])

    def predicted(self, t: int, rows, ids, weights) -> None:
        """The pass ranked layer ``t``'s router on an earlier layer's gate input (the stale
        gate: route-ahead's committed ids, ``--predict-prefetch``'s prediction): ``ids`` (n, k)
        ranked, ``weights`` (n, k) the softmax over that top-k, for event positions ``rows``.
        Must come before the layer the cache acts on it at is fed (t-N, t-2)."""
        if t < self._next:
            raise ConfigError(f"layer {t}: predicted after it was fed (next is {self._next})")
        self.ctx.arrays.pred_routes[rows, t] = ids
        self.ctx.arrays.pred_weights[rows, t] = weights

    def routed(self, il: int, rows, ids, weights, dropped=None) -> None:
        """Layer ``il`` routed ``ids`` / ``weights`` ((n, k), the router's) for event positions
        ``rows``; ``dropped`` (n, k) bool = the slots the pass dropped. Loads the layer."""
        if il < self._next:
            raise ConfigError(f"layer {il} fed twice or out of order (next is {self._next})")
        c = self.ctx.arrays
        c.routes[rows, il] = ids
        c.weights[rows, il] = weights
        if dropped is not None:
            c.dropped_in[rows, il] = dropped
        self._catch_up(il + 1)

    def _catch_up(self, il: int) -> None:
        if il > self._next:
            c = self.ctx.arrays    # a layer that routed nothing loads as apply() would load it
            c.deferred[self._next:il] &= (c.routes[:, self._next:il] >= 0).any(axis=(0, 2))
            self.cache._run(self.ctx, self._next, il, classify=False)
            self._next = il

    def close(self, event: DecodeEvent) -> EventRecord:
        """Finish the event (layers never fed route nothing) and return its record; ``event``
        must carry the routes fed."""
        self._catch_up(self.cache.n_layer)
        if not np.array_equal(event.routes, self.ctx.arrays.routes):
            raise ConfigError("LayerFeed.close: the event's routes differ from the layers fed")
        if event.pred_routes is not None and not np.array_equal(event.pred_routes,
                                                                self.ctx.arrays.pred_routes):
            raise ConfigError("LayerFeed.close: the event's predictions differ from those fed")
        return self.cache._finish(self.ctx)
