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

Such a policy runs in :func:`reference_replay` (pure Python, the readable definition). The
engine's six built-in policies (:mod:`refsim.cache.policies`) also name a Numba fast path
(:mod:`refsim.cache.policy_kernel`); the scan-resistant ones (:mod:`refsim.cache.admit_policies`,
on the :class:`AdmitPolicy` protocol) and ``layer-opt`` (:mod:`refsim.cache.layer_opt`) have
theirs too (``fast_replay``, :mod:`refsim.cache.admit_kernel`). :func:`replay_policy` uses the
fast path, and the tests check that it agrees with the reference on random traces. Parameters
come as ``--policy name:key=value,...`` (:func:`parse_policy_list`).

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
from refsim.errors import ConfigError, UsageError, value_message
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
    params : dict of str to default
        Keyword parameters the constructor takes, with their defaults (the type of the default
        is the parameter's type); others raise :class:`ConfigError`. On the command line they
        are ``--policy name:key=value,key=value`` (:func:`parse_policy_list`).

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
    params: ClassVar[dict[str, object]] = {}

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
        for key, default in self.params.items():
            setattr(self, key, params.get(key, default))
        self.set_params = dict(params)
        self.budget_bytes = 0
        self.check_params()

    def check_params(self) -> None:
        """Validate the parameters (raise :class:`ConfigError`); called by the constructor."""

    @property
    def label(self) -> str:
        """``name`` or ``name:key=value,...`` with the parameters given (the sweep's column)."""
        if not self.set_params:
            return self.name
        return self.name + ":" + ",".join(f"{k}={v}" for k, v in self.set_params.items())

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

    def shares(self, batches: BatchTrace, budget_bytes: int) -> list[int]:
        """Per-layer byte limits of a ``partitioned`` policy: ``budget_bytes // n_layer`` each
        (``layer-opt`` overrides it)."""
        return [budget_bytes // batches.n_layer] * batches.n_layer

    def fast_args(self) -> dict:
        """Extra inputs of the Numba fast path (built-in policies only)."""
        return {}


class AdmitPolicy(Policy):
    """Base of the policies that keep their own queues and choose where a miss goes (fifo,
    clock, slru, 2q, arc, s3fifo: :mod:`refsim.cache.admit_policies`).

    The cache (:func:`reference_replay`) resolves a batch's lookups first (``hit`` on a
    resident key, ``miss`` on another, each once per batch, in order of first occurrence),
    then admits the batch's misses in that order with :meth:`admit`; if the cache is still over
    budget (a previous batch's union exceeded it) it then evicts with ``evict(protected, 0)``
    until it is not, as the engine's after-batch rule does. ``protected`` is the set of keys
    the batch touched (never a victim). On one-lookup batches this is exactly the per-request
    (libCacheSim) order: look up, make room, insert. Subclasses implement ``setup`` (state, with
    ``self.budget_bytes`` set), ``evict`` and ``insert``, and optionally ``hit``, ``miss`` and
    ``can_insert``. ``size(key)`` is the key's entry bytes.
    """

    def reset(self, batches: BatchTrace) -> None:
        self._eb = [int(x) for x in batches.expert_bytes]
        self._ne = int(batches.n_expert)
        self.setup()

    def size(self, key: int) -> int:
        """Entry bytes of ``key`` (its layer's ``expert_bytes``)."""
        return self._eb[key // self._ne]

    def setup(self) -> None:
        """Create the state for a replay at ``self.budget_bytes``."""

    def hit(self, key: int, protected: set) -> list[int]:
        """Promote resident ``key`` on a hit; return keys evicted by the promotion (rare)."""
        return []

    def miss(self, key: int) -> None:
        """``key`` missed (before any admission of the batch): consult ghost lists."""

    def can_insert(self, size: int) -> bool:
        """Whether an entry of ``size`` bytes is admitted at all (no room is made if not)."""
        return size <= self.budget_bytes

    @abstractmethod
    def evict(self, protected: set, incoming: int) -> int | None:
        """Evict one resident key not in ``protected`` (making room for ``incoming`` bytes) and
        return it, or None if every resident key is protected."""

    @abstractmethod
    def insert(self, key: int, size: int, protected: set) -> tuple[bool, list[int]]:
        """Place missed ``key`` after room was made; return (admitted, keys evicted by it)."""

    def admit(self, key: int, size: int, protected: set, occupied: int) -> tuple[bool, list[int]]:
        """Make room as the per-request policy would (evict while ``occupied + size >
        budget``), then insert; returns (admitted, evicted keys in order)."""
        if not self.can_insert(size):
            return False, []
        out = []
        while occupied + size > self.budget_bytes:
            v = self.evict(protected, size)
            if v is None:
                break
            out.append(v)
            occupied -= self.size(v)
        ok, more = self.insert(key, size, protected)
        return ok, out + more

    def to_evict(self, candidates):  # pragma: no cover - the admit protocol is used instead
        # a guard, not a stub: replay_policy sends every AdmitPolicy to _admit_replay, which
        # calls admit(); a caller of the victim-list protocol has the wrong replay loop
        raise TypeError(f"policy {self.name!r} chooses its victims in admit(); replay it with "
                        f"refsim.cache.policy.replay_policy")


def _admit_replay(batches: BatchTrace, policy: AdmitPolicy, budget: int) -> PolicyResult:
    """:func:`reference_replay` for an :class:`AdmitPolicy` (same counters and batch rules)."""
    eb = [int(x) for x in batches.expert_bytes]
    n_expert = batches.n_expert
    lookups, hits, read = (np.zeros(N_KINDS, np.int64) for _ in range(3))
    resident: set[int] = set()
    res_bytes = evictions = 0
    keys, start = batches.keys.tolist(), batches.batch_start.tolist()
    layers, kinds = batches.batch_layer.tolist(), batches.batch_kind.tolist()
    policy.reset(batches)

    def drop(victims, protected):
        nonlocal res_bytes, evictions
        for v in victims:
            if v in protected or v not in resident:
                raise AssertionError(f"policy {policy.name!r} evicted {v}, which is "
                                     f"{'protected' if v in protected else 'not resident'}")
            resident.remove(v)
            res_bytes -= eb[v // n_expert]
            evictions += 1

    for b in range(batches.n_batch):
        il, kd = layers[b], kinds[b]
        size = eb[il]
        touched: set[int] = set()
        pending = []
        for key in keys[start[b]:start[b + 1]]:
            if key in touched:
                continue
            touched.add(key)
            lookups[kd] += 1
            if key in resident:
                hits[kd] += 1
                drop(policy.hit(key, touched), touched)
            else:
                read[kd] += size
                policy.miss(key)
                pending.append(key)
        for key in pending:
            ok, victims = policy.admit(key, size, touched, res_bytes)
            drop(victims, touched)
            if ok:
                resident.add(key)
                res_bytes += size
        while res_bytes > budget:          # still over (an earlier batch's union): the engine's
            v = policy.evict(touched, 0)   # after-batch rule, victims as for a 0-byte miss
            if v is None:
                break
            drop([v], touched)
    return PolicyResult(policy.label, budget, lookups, hits, read, evictions, res_bytes,
                        batches.tokens)


def _coerce(name: str, key: str, text: str, default):
    kind = type(default)
    try:
        if kind is bool:
            if text.lower() not in ("0", "1", "true", "false"):
                raise ValueError
            return text.lower() in ("1", "true")
        if kind is int:
            return int(text)
        return kind(text)
    except ValueError:
        what = 'an integer' if kind is int else 'a number' if kind is float else kind.__name__
        raise UsageError(value_message("--policy", f"{name}:{key}= {what} (default {default})",
                                       text)) from None


def parse_policy_list(text: str) -> list[Policy]:
    """Parse ``--policy`` text: comma-separated policies, each ``name`` or
    ``name:key=value[,key=value...]``; an item with ``=`` and no ``:`` continues the previous
    policy's parameters (``lru,s3fifo:small=0.2,ghost=0.9,arc``). Values take the type of the
    parameter's default (:attr:`Policy.params`).

    Returns
    -------
    list of Policy
        Instances in the given order.

    Raises
    ------
    UsageError
        ``argument --policy: expected ..., got '...'`` (docs/cli.md, "Conventions"): on an empty
        list, an empty item (``lru,,arc``) or an unknown name (``expected comma-separated names
        from ...``), an unknown
        parameter, a malformed ``key=value``, a value of the wrong type or range, or a parameter
        before any policy.
    """
    import refsim.cache.policies  # noqa: F401  (registers the built-ins)

    specs: list[tuple[str, dict[str, str]]] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            raise UsageError(value_message("--policy", f"comma-separated names from {','.join(POLICIES)} "
                                           f"with no empty item", text))
        if ":" in item:
            name, _, kv = item.partition(":")
            specs.append((name.strip(), {}))
            item = kv
            if not item.strip():
                continue
        elif "=" not in item:
            specs.append((item, {}))
            continue
        if not specs:
            raise UsageError(value_message("--policy", "NAME[:KEY=VALUE,...]: a parameter after its "
                                           "policy name", item))
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(value_message("--policy", "NAME:KEY=VALUE parameters (key=value)", item))
        specs[-1][1][key.strip()] = value.strip()
    if not specs:
        raise UsageError(value_message("--policy", f"comma-separated names from {','.join(POLICIES)}",
                                       text))
    out = []
    for name, raw in specs:
        cls = POLICIES.get(name)
        if cls is None:
            raise UsageError(value_message("--policy", f"comma-separated names from "
                                                       f"{','.join(POLICIES)}", name))
        unknown = sorted(set(raw) - set(cls.params))
        if unknown:
            raise UsageError(value_message(
                "--policy", f"{name}'s parameters ({', '.join(cls.params) or 'none'})", unknown[0]))
        out.append(cls(**{k: _coerce(name, k, v, cls.params[k]) for k, v in raw.items()}))
    return out


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
    lookups, hits, read = (np.zeros(N_KINDS, np.int64) for _ in range(3))
    policy.budget_bytes = budget
    if isinstance(policy, AdmitPolicy):
        return _admit_replay(batches, policy, budget)
    resident: dict[int, None] = {}              # insertion order = residency order
    layer_res = [0] * n_layer
    res_bytes = evictions = clock = 0
    keys, start, nxt = batches.keys.tolist(), batches.batch_start.tolist(), batches.next_use
    policy.reset(batches)
    share = policy.shares(batches, budget) if policy.partitioned else []
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
        while (layer_res[il] > share[il]) if policy.partitioned else (res_bytes > budget):
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
    return PolicyResult(policy.label, budget, lookups, hits, read, evictions, res_bytes,
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
    from refsim.cache.batches import layer_subtraces
    from refsim.cache.policy_kernel import (KIND_BELADY, KIND_LFU, KIND_LRU, KIND_RANDOM,
                                            N_COUNTERS, OUT_EVICT, OUT_HITS, OUT_READ,
                                            OUT_RESIDENT, OUT_WORDS, belady_kernel,
                                            lfu_kernel, lru_kernel, random_kernel,
                                            replay_kernel)

    if isinstance(policy, str):
        policy = get_policy(policy)
    budget = _check_budget(budget_bytes)
    fast = getattr(policy, "fast_replay", None)
    if fast is not None:                       # an AdmitPolicy with a Numba kernel
        out = np.zeros(N_COUNTERS, dtype=np.int64)
        fast(batches, budget, out)
        return PolicyResult(policy.label, budget, out[:OUT_HITS].copy(),
                            out[OUT_HITS:OUT_READ].copy(), out[OUT_READ:OUT_EVICT].copy(),
                            int(out[OUT_EVICT]), int(out[OUT_RESIDENT]), batches.tokens)
    if policy.kernel is None:
        return reference_replay(batches, policy, budget)
    out = np.zeros(N_COUNTERS, dtype=np.int64)
    bt = batches
    if policy.kernel == KIND_LRU and not policy.partitioned:
        lru_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                   bt.n_expert, budget, out)
    elif policy.kernel == KIND_LRU:
        # per-layer LRU: each partition is the engine's LRU over its layer's own batches at its
        # share, so the counters are the sums of one lru_kernel run per layer
        part = np.zeros(N_COUNTERS, dtype=np.int64)
        for share, (keys, start, layers, kinds) in zip(policy.shares(bt, budget),
                                                       layer_subtraces(bt)):
            part[:] = 0
            lru_kernel(keys, start, layers, kinds, bt.expert_bytes, bt.n_expert, int(share),
                       part)
            out += part
    elif policy.kernel == KIND_LFU:
        # count lists; partitioned = one global run per layer sub-trace at its share
        runs = ([(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, budget)]
                if not policy.partitioned else
                [(k, s, la, ki, int(sh)) for sh, (k, s, la, ki) in
                 zip(policy.shares(bt, budget), layer_subtraces(bt))])
        part = np.zeros(N_COUNTERS, dtype=np.int64)
        for k, s, la, ki, b in runs:
            part[:] = 0
            lfu_kernel(k, s, la, ki, bt.expert_bytes, bt.n_expert, b, part)
            out += part
    elif policy.kernel == KIND_BELADY:
        # next-use buckets per (sub-)trace; partitioned = one global run per layer at its share,
        # with the sub-trace's own next uses (its batch indices: the same order, NEVER kept)
        from refsim.cache.batches import _next_use
        n_keys = bt.n_layer * bt.n_expert
        runs = ([(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.next_use, budget)]
                if not policy.partitioned else
                [(k, s, la, ki, _next_use(k, s, n_keys), int(sh)) for sh, (k, s, la, ki) in
                 zip(policy.shares(bt, budget), layer_subtraces(bt))])
        part = np.zeros(N_COUNTERS, dtype=np.int64)
        for k, s, la, ki, nu, b in runs:
            part[:] = 0
            belady_kernel(k, s, la, ki, nu, bt.expert_bytes, bt.n_expert, b, part)
            out += part
    elif policy.kernel == KIND_RANDOM and not policy.partitioned:
        words = policy.fast_args().get("words", np.zeros(0, np.uint32))
        while True:
            out[:] = 0
            random_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind,
                          bt.expert_bytes, bt.n_expert, budget, words, out)
            if out[OUT_WORDS] >= 0:
                break
            words = policy.fast_args(n_words=2 * max(words.size, 1024))["words"]
    else:
        words = policy.fast_args().get("words", np.zeros(0, np.uint32))
        shares = np.asarray(policy.shares(bt, budget) if policy.partitioned else [0], np.int64)
        while True:
            out[:] = 0
            replay_kernel(policy.kernel, policy.partitioned, bt.keys, bt.batch_start,
                          bt.batch_layer, bt.batch_kind, bt.next_use, bt.expert_bytes,
                          bt.n_expert, budget, shares, words, out)
            if out[OUT_WORDS] >= 0:
                break
            words = policy.fast_args(n_words=2 * max(words.size, 1024))["words"]
    return PolicyResult(policy.label, budget, out[:OUT_HITS].copy(), out[OUT_HITS:OUT_READ].copy(),
                        out[OUT_READ:OUT_EVICT].copy(), int(out[OUT_EVICT]), int(out[OUT_RESIDENT]),
                        batches.tokens)


# The built-in policies register themselves when their modules run; importing them here makes
# the registry complete whenever this module is (refsim.cache imports its submodules lazily), in
# the order lru, lfu, ..., layerlfu, the admission policies, layer-opt (refsim.cache.mrc imports
# this module inside its functions, so that importing it first is no import cycle).
import refsim.cache.policies  # noqa: E402,F401
