"""ExpertCache: the engine's LRU expert cache fed with decode events, and its flash account.

Counters and their definitions (docs/cache-studies.md, docs/telemetry.md):

- lookup: one unique (layer, expert) per layer batch (duplicates in the batch are not lookups);
- hit: a lookup whose entry was resident before the batch;
- read bytes: ``expert_bytes(layer)`` per missed lookup (unaligned; the engine's O_DIRECT reads
  round each slice up to 4 KiB windows, +0.2-0.4 %, bmoe-engine.md §3.1);
- resident bytes: sum of the entry sizes resident after the event;
- every counter is kept per decode kind (prefill, plain, verify, draft) and per event.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from refsim import MIB
from refsim.cache.lru import NIL, lru_apply_event
from refsim.errors import ConfigError, UsageError, value_message
from refsim.events import N_KINDS, DecodeEvent, DecodeKind



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
        Per slot: the entry size on the first occurrence of a missed id, else 0.
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
    evictions: int = 0
    rereads: int = 0
    resident_bytes: int = 0

    def total(self, name: str, kinds: Iterable[DecodeKind] | None = None) -> int:
        """Sum of counter ``name`` over ``kinds`` (default: all kinds)."""
        arr = getattr(self, name)
        if kinds is None:
            return int(arr.sum())
        return int(sum(arr[int(k)] for k in kinds))


MAX_CACHE_MIB = 1 << 40
"""Largest ``--cache-mb`` accepted: 2**40 MiB = 1 EiB (byte counts stay far inside int64)."""

CACHE_MB_RANGE = "a number of MiB from 2^-20 (one byte) to 2^40 (1 EiB)"
"""What ``--cache-mb`` accepts (:meth:`ExpertCache.mib_to_bytes`), in every command's message."""

TARGET_DECODE_KINDS = (DecodeKind.PLAIN, DecodeKind.VERIFY)
"""Target-model decodes after prefill (the engine's 'decode' phase, trace phase 1)."""


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

    Raises
    ------
    ConfigError
        If the budget is not a positive integer or the sizes are not positive.

    Notes
    -----
    Rules: bmoe-engine.md §3.2 (see :mod:`refsim.cache.lru`). Keys are
    ``layer * n_expert + expert``.
    """

    def __init__(self, expert_bytes, n_expert: int, budget_bytes: int):
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
        n_keys = self.n_layer * self.n_expert
        self._resident = np.zeros(n_keys, dtype=np.bool_)
        self._ever_evicted = np.zeros(n_keys, dtype=np.bool_)
        self._touched_gen = np.zeros(n_keys, dtype=np.int64)
        self._first_res = np.zeros(n_keys, dtype=np.int8)
        self._prev = np.full(n_keys, NIL, dtype=np.int64)
        self._next = np.full(n_keys, NIL, dtype=np.int64)
        self._head_tail = np.full(2, NIL, dtype=np.int64)
        self._gen = 0
        self._counters = np.zeros(6, dtype=np.int64)
        self.layer_lookups = np.zeros(self.n_layer, dtype=np.int64)
        """(n_layer,) int64: lifetime lookups per layer."""
        self.layer_hits = np.zeros(self.n_layer, dtype=np.int64)
        """(n_layer,) int64: lifetime hits per layer."""
        self.stats = CacheStats()

    def resident_keys(self) -> list[tuple[int, int]]:
        """Resident (layer, expert) entries, most recent first."""
        out = []
        key = self._head_tail[0]
        while key != NIL:
            out.append((int(key // self.n_expert), int(key % self.n_expert)))
            key = self._next[key]
        return out

    def apply(self, event: DecodeEvent) -> EventRecord:
        """Load one event's per-layer batches; returns what it did.

        Raises
        ------
        ConfigError
            If the event's layer span or expert ids do not fit this cache.
        """
        routes = event.routes
        if routes.shape[1] != self.n_layer:
            raise ConfigError(
                f"event routes {routes.shape[1]} layers, the cache has n_layer={self.n_layer}")
        if routes.size and int(routes.max()) >= self.n_expert:
            raise ConfigError(
                f"event routes expert {int(routes.max())}, the cache has n_expert={self.n_expert}")
        dropped = event.dropped if event.dropped is not None else np.zeros(routes.shape, np.bool_)
        residency = np.empty(routes.shape, dtype=np.int8)
        charged = np.empty(routes.shape, dtype=np.int64)
        before = self._counters.copy()
        self._gen = lru_apply_event(
            routes, dropped, self.expert_bytes, self.n_expert, self.budget_bytes,
            self._resident, self._ever_evicted, self._touched_gen, self._first_res,
            self._prev, self._next, self._head_tail, self._gen, self._counters,
            residency, charged, self.layer_lookups, self.layer_hits)
        delta = self._counters - before
        kind = int(event.kind)
        st = self.stats
        st.lookups[kind] += delta[0]
        st.hits[kind] += delta[1]
        st.read_bytes[kind] += delta[2]
        st.events[kind] += 1
        st.evictions = int(self._counters[4])
        st.rereads = int(self._counters[5])
        st.resident_bytes = int(self._counters[3])
        return EventRecord(
            kind=event.kind, first_position=int(event.positions[0]) if event.n_pos else -1,
            n_pos=event.n_pos, lookups=int(delta[0]), hits=int(delta[1]),
            read_bytes=int(delta[2]), resident_bytes=int(self._counters[3]),
            residency=residency, charged_bytes=charged)

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
