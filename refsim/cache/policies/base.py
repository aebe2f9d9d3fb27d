"""The policy interface, the registry and the parameter parsing: what every policy module of
:mod:`refsim.cache.policies` builds on.

A policy only *orders* entries; the cache owns the budget, the resident bytes, the batch rules
and the counters (bmoe-engine.md §3.2): one lookup per unique key per layer batch, eviction
after the batch, never an entry the batch touched. A new policy is one subclass of
:class:`Policy` (or :class:`AdmitPolicy`) with a ``name=`` class keyword, which registers it in
:data:`POLICIES` when its class statement runs::

    class MRU(Policy, name="mru"):
        def reset(self, batches):
            self.stamp = {}
        def on_access(self, key, clock, next_use):
            self.stamp[key] = clock
        def to_evict(self, candidates):
            return max(candidates, key=self.stamp.__getitem__)

Such a policy runs in :func:`~refsim.cache.replay.reference_replay` (pure Python, the readable
definition); a built-in one also has a Numba fast path, ``fast_replay``, in its own module
(:mod:`refsim.cache.policies.lru`, ...), which :func:`~refsim.cache.replay.replay_policy` uses.
The package's ``__init__`` imports every built-in module, in the registry's order (the sweep's
default order). Parameters come as ``--policy name:key=value,...`` (:func:`parse_policy_list`)
and are checked by the class (:attr:`Policy.params`, ``check_params``), as libCacheSim's
``LRU_init`` rejects parameters it does not take.

Keys are ``layer * n_expert + expert`` (ints), as in :class:`~refsim.cache.ExpertCache`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from typing import ClassVar

from refsim.cache.batches import BatchTrace
from refsim.errors import ConfigError, UsageError, value_message

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
    fast_replay : method or None
        The Numba fast path, or None (reference replay only): ``fast_replay(batches,
        budget_bytes, out)`` replays ``batches`` at ``budget_bytes`` and writes the counters
        into ``out`` ((N_COUNTERS,) int64, zeroed; layout
        :data:`~refsim.cache.policies.kernel_base.N_COUNTERS`) exactly as
        :func:`~refsim.cache.replay.reference_replay` counts them (the property tests hold
        every built-in policy to that). A built-in policy's module holds its kernel beside its
        class.
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
    fast_replay: ClassVar[Callable | None] = None
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


class AdmitPolicy(Policy):
    """Base of the policies that keep their own queues and choose where a miss goes (fifo,
    clock, slru, 2q, arc, s3fifo, lirs, tinylfu: libCacheSim's eviction algorithms, one module
    each in this package).

    The cache (:func:`~refsim.cache.replay.reference_replay`) resolves a batch's lookups first (``hit`` on a
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
        # a guard, not a stub: reference_replay sends every AdmitPolicy to its admit loop, which
        # calls admit(); a caller of the victim-list protocol has the wrong replay loop
        raise TypeError(f"policy {self.name!r} chooses its victims in admit(); replay it with "
                        f"refsim.cache.replay.replay_policy")


def pop_oldest(q: OrderedDict, protected) -> tuple | None:
    """Remove and return ``(key, value)`` of the oldest entry of ``q`` (its first) whose key is
    not in ``protected``, or None; protected entries passed over keep their places (the
    reference side of :func:`refsim.cache.linked.oldest_free`)."""
    skipped = []
    found = None
    while q:
        k, v = q.popitem(last=False)
        if k in protected:
            skipped.append((k, v))
            continue
        found = (k, v)
        break
    for k, v in reversed(skipped):
        q[k] = v
        q.move_to_end(k, last=False)
    return found


def check_ratio(policy: Policy, key: str) -> None:
    """Raise UsageError unless parameter ``key`` of ``policy`` is a number in [0, 1]."""
    v = getattr(policy, key)
    if not 0.0 <= v <= 1.0:
        raise UsageError(value_message("--policy", f"{policy.name}:{key}= a number in [0, 1]", v))


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
        from ...``), an unknown parameter, a malformed ``key=value``, a value of the wrong type
        or range, or a parameter before any policy.
    """
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
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ConfigError(f"--policy: unknown policy {name!r} "
                          f"(expected one of {', '.join(POLICIES)})") from None
    return cls(**params)
