"""The exact LRU curve for every budget from one pass: byte-weighted stack distances.

Theorem (the engine's LRU under its batch rules, bmoe-engine.md §3.2; proof in
docs/cache-studies.md). Order all keys ever looked up by their last occurrence, most recent
first (the *recency stack*; a batch promotes its keys in the order of their last occurrence).
For a lookup of key ``x`` in batch ``t`` let ``D(x)`` be the bytes of the keys at or above
``x`` in the stack as it stood after batch ``t - 1`` (``x``'s own size included), and
``D = inf`` for a first lookup. Then at every budget ``B > 0``:

    the lookup hits  <=>  D(x) <= B   or   x was in batch t - 1's union.

Why: after every batch the resident set is a *prefix* of the stack: the longest prefix whose
bytes are <= B, but never shorter than the batch's own union (eviction stops at the first
protected entry, and the protected entries are exactly the top of the stack). So the cache can
sit above B after a batch whose union exceeds B -- those entries are resident whatever B is,
which is the one place the classic stack property breaks, and only for the very next batch.
Keys carry their layer, and consecutive batches are different layers, so on a multi-layer trace
``x`` in batch ``t - 1`` only happens with ``n_layer == 1``; the exception is handled exactly
(such lookups count as hits at every budget), so no per-budget fallback is needed. Mixed entry
sizes change nothing: "resident" is a byte prefix, and the prefix sums are monotone.

The pass keeps a Fenwick tree over occurrence stamps holding each key's size at its latest
stamp; ``D(x)`` = bytes at stamps >= stamp(x). O(occurrences × log occurrences), Numba.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim.jit import njit
from refsim.cache.batches import NEVER, BatchTrace
from refsim.cache.result import PolicyResult
from refsim.errors import ConfigError
from refsim.events import N_KINDS


@njit(cache=True)
def _distances(keys, batch_start, batch_layer, batch_kind, expert_bytes, n_expert,
               dist, kind, size, budgets, hits, hit_bytes, lookups, look_bytes, bucket):
    """The pass behind :func:`stack_distances` and :func:`lru_curve` (see their docs).

    Stamps are occurrence indices 1..n_occ. The Fenwick tree is built by appending: node t
    is created when stamp t is assigned, as its own size plus its children t-1, t-2, t-4, ...
    below ``lowbit(t)``; a removal at stamp s updates only the nodes that exist (<= the
    latest stamp). Both walks are short for recent stamps, which most lookups are.
    """
    n_keys = expert_bytes.size * n_expert
    n_occ = keys.size
    tree = np.zeros(n_occ + 1, dtype=np.int64)
    last = np.zeros(n_keys, dtype=np.int64)            # latest stamp, 0 = never seen
    touched = np.full(n_keys, -2, dtype=np.int64)      # last batch holding the key
    m = budgets.size
    n_look = 0
    live = 0
    t = 0
    for b in range(batch_layer.size):
        eb = expert_bytes[batch_layer[b]]
        kd = batch_kind[b]
        lo, hi = batch_start[b], batch_start[b + 1]
        for i in range(lo, hi):                        # lookups, against the stack after b - 1
            key = keys[i]
            if touched[key] == b:
                continue
            prev_b = touched[key]
            touched[key] = b
            s = last[key]
            if s == 0:
                d = NEVER
            elif prev_b == b - 1:
                d = 0
            else:
                below = 0                              # bytes at stamps < s
                j = s - 1
                while j > 0:
                    below += tree[j]
                    j -= j & -j
                d = live - below
            if bucket:
                lookups[kd] += 1
                look_bytes[kd] += eb
                a, z = 0, m                            # first j with budgets[j] >= d
                while a < z:
                    mid = (a + z) >> 1
                    if budgets[mid] < d:
                        a = mid + 1
                    else:
                        z = mid
                if a < m:
                    hits[a, kd] += 1
                    hit_bytes[a, kd] += eb
            else:
                dist[n_look] = d
                kind[n_look] = kd
                size[n_look] = eb
            n_look += 1
        for i in range(lo, hi):                        # promotions, in occurrence order
            key = keys[i]
            s = last[key]
            if s > 0:
                j = s
                while j <= t:
                    tree[j] -= eb
                    j += j & -j
            else:
                live += eb
            t += 1
            v = eb                                     # append node t
            low = t & -t
            c = 1
            while c < low:
                v += tree[t - c]
                c <<= 1
            tree[t] = v
            last[key] = t
    if bucket:
        for j in range(1, m):
            for q in range(hits.shape[1]):
                hits[j, q] += hits[j - 1, q]
                hit_bytes[j, q] += hit_bytes[j - 1, q]
    return n_look


def stack_distances(keys, batch_start, batch_layer, batch_kind, expert_bytes, n_expert):
    """Byte-weighted stack distance of every lookup, in lookup order.

    Parameters
    ----------
    keys, batch_start, batch_layer, batch_kind : ndarray
        The :class:`~refsim.cache.batches.BatchTrace` arrays.
    expert_bytes : (n_layer,) int64 ndarray
        Entry size per layer, bytes.
    n_expert : int

    Returns
    -------
    dist : (n_lookup,) int64 ndarray
        ``D(x)`` in bytes; 0 for a key in the previous batch's union (a hit at every budget);
        ``NEVER`` for a first lookup (a miss at every budget).
    kind : (n_lookup,) int8 ndarray
        DecodeKind value of the lookup's batch.
    size : (n_lookup,) int64 ndarray
        Entry size of the key, bytes (what a miss reads).
    """
    n = keys.size
    dist, kind, size = np.empty(n, np.int64), np.empty(n, np.int8), np.empty(n, np.int64)
    z1, z2 = np.zeros((1, N_KINDS), np.int64), np.zeros(N_KINDS, np.int64)
    n_look = _distances(keys, batch_start, batch_layer, batch_kind, expert_bytes, n_expert,
                        dist, kind, size, np.zeros(1, np.int64), z1, z1.copy(), z2, z2.copy(),
                        False)
    return dist[:n_look], kind[:n_look], size[:n_look]


def _budgets(budgets_bytes) -> np.ndarray:
    b = np.asarray(budgets_bytes, dtype=np.int64).ravel()
    if b.size == 0 or (b <= 0).any() or not np.array_equal(b, np.asarray(budgets_bytes).ravel()):
        raise ConfigError(f"budgets must be positive integers (bytes), got {budgets_bytes!r}")
    return b


def lru_curve(batches: BatchTrace, budgets_bytes) -> list[PolicyResult]:
    """Exact LRU counters at each budget, from one pass over ``batches``.

    Parameters
    ----------
    batches : BatchTrace
    budgets_bytes : (m,) int array-like
        Budgets in bytes, any order, each > 0.

    Returns
    -------
    list of PolicyResult
        One per budget, in the given order, policy ``"lru"``; equal to
        ``replay_policy(batches, "lru", B)`` in lookups, hits and read bytes. ``evictions``
        and ``resident_bytes`` are not tracked by the pass and are -1.

    Raises
    ------
    ConfigError
        If a budget is not a positive integer.
    """
    b = _budgets(budgets_bytes)
    order = np.argsort(b, kind="stable")
    sb = b[order]
    bt = batches
    hits = np.zeros((sb.size, N_KINDS), np.int64)
    hit_bytes = np.zeros((sb.size, N_KINDS), np.int64)
    lookups = np.zeros(N_KINDS, np.int64)
    look_bytes = np.zeros(N_KINDS, np.int64)
    e = np.zeros(0, np.int64)
    _distances(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
               bt.n_expert, e, e.astype(np.int8), e, sb, hits, hit_bytes, lookups, look_bytes,
               True)
    out: list[PolicyResult | None] = [None] * sb.size
    for j, idx in enumerate(order):
        out[idx] = PolicyResult("lru", int(sb[j]), lookups.copy(), hits[j].copy(),
                                look_bytes - hit_bytes[j], -1, -1, bt.tokens)
    return out  # type: ignore[return-value]


@dataclass(frozen=True, eq=False)
class LruCurve:
    """LRU hits and read bytes as exact step functions of the budget.

    Build with :meth:`from_batches`; query any budget with :meth:`at`, or get the budgets
    where the hit count changes from :attr:`steps`.

    Attributes
    ----------
    dist : (n_lookup,) int64 ndarray
        Stack distances (bytes), sorted ascending; ``NEVER`` = cold miss.
    kind : (n_lookup,) int8 ndarray
        DecodeKind of each lookup, in the same (sorted) order.
    size : (n_lookup,) int64 ndarray
        Entry bytes of each lookup, same order.
    tokens : int
    """

    dist: np.ndarray
    kind: np.ndarray
    size: np.ndarray
    tokens: int

    @classmethod
    def from_batches(cls, batches: BatchTrace) -> "LruCurve":
        bt = batches
        dist, kind, size = stack_distances(bt.keys, bt.batch_start, bt.batch_layer,
                                           bt.batch_kind, bt.expert_bytes, bt.n_expert)
        o = np.argsort(dist, kind="stable")
        return cls(dist[o], kind[o], size[o], bt.tokens)

    @property
    def steps(self) -> np.ndarray:
        """(n_step,) int64: the distinct finite distances (bytes), ascending. The hit count
        is constant on ``[steps[i], steps[i+1])``."""
        d = self.dist[(self.dist > 0) & (self.dist != NEVER)]
        return np.unique(d)

    def at(self, budget_bytes: int) -> PolicyResult:
        """Counters at one budget (bytes > 0), exact."""
        b = int(_budgets([budget_bytes])[0])
        n_hit = int(np.searchsorted(self.dist, b, side="right"))
        lookups = np.bincount(self.kind, minlength=N_KINDS).astype(np.int64)[:N_KINDS]
        hits = np.bincount(self.kind[:n_hit], minlength=N_KINDS).astype(np.int64)[:N_KINDS]
        tot = np.bincount(self.kind, weights=self.size, minlength=N_KINDS)[:N_KINDS]
        hit_b = np.bincount(self.kind[:n_hit], weights=self.size[:n_hit], minlength=N_KINDS)[:N_KINDS]
        read = np.rint(tot - hit_b).astype(np.int64)
        return PolicyResult("lru", b, lookups, hits, read, -1, -1, self.tokens)
