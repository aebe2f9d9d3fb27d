"""The counters of one replay under one policy at one budget (:class:`PolicyResult`): what
:func:`refsim.cache.replay.replay_policy`, :func:`refsim.cache.replay.reference_replay` and
the one-pass LRU curve (:mod:`refsim.cache.mrc`) return. A module of its own, below the
policies and the curve, so that both can build one without importing each other."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim.cache.expert_cache import CacheStats
from refsim.cache.summary import CacheSummary
from refsim.events import N_KINDS


@dataclass(frozen=True)
class PolicyResult:
    """Counters of one replay under one policy at one budget.

    Attributes
    ----------
    policy : str
    budget_bytes : int
    lookups, hits, read_bytes : (4,) int64 ndarray
        Per :class:`~refsim.events.DecodeKind` value (prefill, plain, verify, draft).
    evictions : int
    resident_bytes : int
        Resident entry bytes after the last batch.
    tokens : int
        Confirmed tokens of the replayed events.
    """

    policy: str
    budget_bytes: int
    lookups: np.ndarray
    hits: np.ndarray
    read_bytes: np.ndarray
    evictions: int
    resident_bytes: int
    tokens: int

    @classmethod
    def from_counters(cls, policy: str, budget_bytes: int, out: np.ndarray,
                      tokens: int) -> "PolicyResult":
        """The result held in a kernel's ``out`` counters (layout
        :data:`refsim.cache.policies.kernel_base.N_COUNTERS`: lookups, hits and read bytes per
        kind, then evictions and resident bytes)."""
        nk = N_KINDS
        return cls(policy, budget_bytes, out[:nk].copy(), out[nk:2 * nk].copy(),
                   out[2 * nk:3 * nk].copy(), int(out[3 * nk]), int(out[3 * nk + 1]), tokens)

    def summary(self, t_bytes: int) -> CacheSummary:
        """The :class:`CacheSummary` of this replay (``t_bytes`` = one token cycle)."""
        stats = CacheStats(lookups=self.lookups.copy(), hits=self.hits.copy(),
                           read_bytes=self.read_bytes.copy(), evictions=self.evictions,
                           resident_bytes=self.resident_bytes)
        return CacheSummary.from_stats(stats, self.budget_bytes, self.tokens, t_bytes)
