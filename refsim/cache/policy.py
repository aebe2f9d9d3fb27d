"""Cache policies behind one small interface, a registry, and the replay entry point.

A policy only *orders* entries; the cache owns the budget, the resident bytes, the batch rules
and the counters (bmoe-engine.md §3.2): one lookup per unique key per layer batch, eviction
after the batch, never an entry the batch touched. A new policy is one subclass of
:class:`Policy` with a ``name=`` class keyword, which registers it in :data:`POLICIES`::

    class MRU(Policy, name="mru"):
        def reset(self, batches):
            self.stamp = {}
        def on_access(self, key, clock, next_use):
            self.stamp[key] = clock
        def to_evict(self, candidates):
            return max(candidates, key=self.stamp.__getitem__)

Such a policy runs in :func:`reference_replay` (pure Python, the readable definition). The six
built-in policies (:mod:`refsim.cache.policies`) also name a Numba fast path
(:mod:`refsim.cache.policy_kernel`); :func:`replay_policy` uses it, and the tests check that it
agrees with the reference on random traces.

Keys are ``layer * n_expert + expert`` (ints), as in :class:`~refsim.cache.ExpertCache`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from refsim.cache.batches import BatchTrace
from refsim.cache.expert_cache import CacheStats
from refsim.cache.summary import CacheSummary
from refsim.errors import ConfigError
from refsim.events import N_KINDS

POLICIES: dict[str, type["Policy"]] = {}
"""Registered policies by name, in registration order (the sweep's default order)."""


class Policy(ABC):
    """Base of every cache policy: hooks called by the cache, plus the victim choice.

    Class keywords
    --------------
    name : str
        Registry name (``--policy`` value). Must be unique.

    Class attributes
    ----------------
    partitioned : bool
        If True the budget is split per layer (``budget_bytes // n_layer``, n_layer = the
        trace's streamed layer span) and a batch evicts only from its own layer.
    kernel : int or None
        ``KIND_*`` code of the Numba fast path in :mod:`refsim.cache.policy_kernel`, or None
        (reference replay only).
    params : tuple of str
        Keyword parameters the constructor takes; others raise :class:`ConfigError`.

    Hooks (all optional but ``to_evict``)
    -------------------------------------
    ``reset(batches)`` before a replay; ``on_access(key, clock, next_use)`` on every occurrence
    of a key (``clock`` counts occurrences from 1; ``next_use`` is the next batch index using
    the key, ``BatchTrace`` ``NEVER`` if none); ``on_lookup(key, hit)`` on the first
    occurrence in a batch, before ``on_access``; ``on_insert(key, n_bytes)`` on a miss;
    ``on_evict(key)``; ``to_evict(candidates) -> key`` with the unprotected resident keys in
    the order they became resident (oldest first).
    """

    name: ClassVar[str] = ""
    partitioned: ClassVar[bool] = False
    kernel: ClassVar[int | None] = None
    params: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, name: str | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if name is not None:
            if name in POLICIES:
                raise ConfigError(f"policy {name!r} is registered twice")
            cls.name = name
            POLICIES[name] = cls

    def __init__(self, **params):
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise ConfigError(f"policy {self.name!r} takes no parameter {unknown[0]!r} "
                              f"(accepted: {', '.join(self.params) or 'none'})")
        for key, value in params.items():
            setattr(self, key, value)

    def reset(self, batches: BatchTrace) -> None:
        """Forget all state before a replay of ``batches``."""

    def on_lookup(self, key: int, hit: bool) -> None:
        """First occurrence of ``key`` in a batch (one lookup)."""

    def on_access(self, key: int, clock: int, next_use: int) -> None:
        """Every occurrence of ``key`` (duplicates in a batch included)."""

    def on_insert(self, key: int, n_bytes: int) -> None:
        """``key`` became resident (a miss), ``n_bytes`` charged."""

    def on_evict(self, key: int) -> None:
        """``key`` was evicted."""

    @abstractmethod
    def to_evict(self, candidates: list[int]) -> int:
        """The key to evict among ``candidates`` (non-empty, oldest-resident first)."""

    def fast_args(self) -> dict:
        """Extra inputs of the Numba fast path (built-in policies only)."""
        return {}


def get_policy(name: str, **params) -> Policy:
    """Instantiate a registered policy.

    Raises
    ------
    ConfigError
        If ``name`` is not registered (the message lists the known names) or a parameter is
        not accepted.
    """
    import refsim.cache.policies  # noqa: F401  (registers the built-ins)

    try:
        cls = POLICIES[name]
    except KeyError:
        raise ConfigError(f"--policy: unknown policy {name!r} "
                          f"(expected one of {', '.join(POLICIES)})") from None
    return cls(**params)


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

    def summary(self, t_bytes: int) -> CacheSummary:
        """The :class:`CacheSummary` of this replay (``t_bytes`` = one token cycle)."""
        stats = CacheStats(lookups=self.lookups.copy(), hits=self.hits.copy(),
                           read_bytes=self.read_bytes.copy(), evictions=self.evictions,
                           resident_bytes=self.resident_bytes)
        return CacheSummary.from_stats(stats, self.budget_bytes, self.tokens, t_bytes)


def _check_budget(budget_bytes) -> int:
    if int(budget_bytes) != budget_bytes or budget_bytes <= 0:
        raise ConfigError(f"cache budget must be a positive number of bytes, got {budget_bytes}")
    return int(budget_bytes)


def reference_replay(batches: BatchTrace, policy: Policy, budget_bytes: int) -> PolicyResult:
    """Replay ``batches`` under ``policy`` in pure Python (the readable definition).

    Parameters
    ----------
    batches : BatchTrace
    policy : Policy
    budget_bytes : int
        Cache budget, bytes.

    Returns
    -------
    PolicyResult

    Raises
    ------
    ConfigError
        If the budget is not a positive integer.

    Notes
    -----
    Batch rules: bmoe-engine.md §3.2 ("LRU mode") and §5 (route-replay.py's simulator).
    """
    budget = _check_budget(budget_bytes)
    eb = [int(x) for x in batches.expert_bytes]
    n_expert, n_layer = batches.n_expert, batches.n_layer
    share = budget // n_layer
    lookups, hits, read = (np.zeros(N_KINDS, np.int64) for _ in range(3))
    resident: dict[int, None] = {}              # insertion order = residency order
    layer_res = [0] * n_layer
    res_bytes = evictions = clock = 0
    keys, start, nxt = batches.keys.tolist(), batches.batch_start.tolist(), batches.next_use
    policy.reset(batches)
    for b in range(batches.n_batch):
        il, kd = int(batches.batch_layer[b]), int(batches.batch_kind[b])
        touched: set[int] = set()
        for i in range(start[b], start[b + 1]):
            key = keys[i]
            clock += 1
            if key not in touched:
                touched.add(key)
                hit = key in resident
                lookups[kd] += 1
                policy.on_lookup(key, hit)
                if hit:
                    hits[kd] += 1
                else:
                    resident[key] = None
                    res_bytes += eb[il]
                    layer_res[il] += eb[il]
                    read[kd] += eb[il]
                    policy.on_insert(key, eb[il])
            policy.on_access(key, clock, int(nxt[i]))
        while (layer_res[il] > share) if policy.partitioned else (res_bytes > budget):
            cands = [k for k in resident if k not in touched
                     and (not policy.partitioned or k // n_expert == il)]
            if not cands:
                break
            victim = policy.to_evict(cands)
            del resident[victim]
            size = eb[victim // n_expert]
            res_bytes -= size
            layer_res[victim // n_expert] -= size
            evictions += 1
            policy.on_evict(victim)
    return PolicyResult(policy.name, budget, lookups, hits, read, evictions, res_bytes,
                        batches.tokens)


def replay_policy(batches: BatchTrace, policy: Policy | str, budget_bytes: int) -> PolicyResult:
    """Replay ``batches`` under ``policy`` at ``budget_bytes``, on the Numba fast path if the
    policy has one, else with :func:`reference_replay`.

    Parameters
    ----------
    batches : BatchTrace
    policy : Policy or str
        A policy instance or a registered name (default parameters).
    budget_bytes : int
        Cache budget, bytes.

    Raises
    ------
    ConfigError
        If the policy is unknown or the budget is not a positive integer.
    """
    from refsim.cache.policy_kernel import (KIND_LRU, N_COUNTERS, OUT_EVICT, OUT_HITS, OUT_READ,
                                            OUT_RESIDENT, OUT_WORDS, lru_kernel, replay_kernel)

    if isinstance(policy, str):
        policy = get_policy(policy)
    budget = _check_budget(budget_bytes)
    if policy.kernel is None:
        return reference_replay(batches, policy, budget)
    out = np.zeros(N_COUNTERS, dtype=np.int64)
    bt = batches
    if policy.kernel == KIND_LRU and not policy.partitioned:
        lru_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                   bt.n_expert, budget, out)
    else:
        words = policy.fast_args().get("words", np.zeros(0, np.uint32))
        while True:
            out[:] = 0
            replay_kernel(policy.kernel, policy.partitioned, bt.keys, bt.batch_start,
                          bt.batch_layer, bt.batch_kind, bt.next_use, bt.expert_bytes,
                          bt.n_expert, budget, words, out)
            if out[OUT_WORDS] >= 0:
                break
            words = policy.fast_args(n_words=2 * max(words.size, 1024))["words"]
    return PolicyResult(policy.name, budget, out[:OUT_HITS].copy(), out[OUT_HITS:OUT_READ].copy(),
                        out[OUT_READ:OUT_EVICT].copy(), int(out[OUT_EVICT]), int(out[OUT_RESIDENT]),
                        batches.tokens)
