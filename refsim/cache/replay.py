"""Replaying a :class:`~refsim.cache.batches.BatchTrace` under a cache policy: the readable
definition (:func:`reference_replay`, pure Python over the policy's hooks) and the entry point
(:func:`replay_policy`, the policy's Numba fast path when it has one).

The batch rules are the cache's, not the policy's (bmoe-engine.md §3.2, "LRU mode", and §5,
route-replay.py's simulator): one lookup per unique key per layer batch, in token-major order
of first occurrence; the batch's misses read their layer's entry size; eviction after the batch
(or, for an :class:`~refsim.cache.policies.AdmitPolicy`, to make room for each admitted miss),
never of an entry the batch touched.
"""

from __future__ import annotations

import numpy as np

from refsim.cache.batches import BatchTrace
from refsim.cache.policies import AdmitPolicy, Policy, get_policy
from refsim.cache.policies.kernel_base import N_COUNTERS
from refsim.cache.result import PolicyResult
from refsim.errors import ConfigError
from refsim.events import N_KINDS


def check_budget(budget_bytes) -> int:
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
    budget = check_budget(budget_bytes)
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


def _admit_replay(batches: BatchTrace, policy: AdmitPolicy, budget: int) -> PolicyResult:
    """:func:`reference_replay` for an :class:`~refsim.cache.policies.AdmitPolicy` (same
    counters and batch rules; the admission order is the class's docstring's)."""
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


def replay_policy(batches: BatchTrace, policy: Policy | str, budget_bytes: int) -> PolicyResult:
    """Replay ``batches`` under ``policy`` at ``budget_bytes``, on the policy's Numba fast path
    (``fast_replay``) if it has one, else with :func:`reference_replay`.

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
    if isinstance(policy, str):
        policy = get_policy(policy)
    budget = check_budget(budget_bytes)
    if policy.fast_replay is None:
        return reference_replay(batches, policy, budget)
    out = np.zeros(N_COUNTERS, dtype=np.int64)
    policy.fast_replay(batches, budget, out)
    return PolicyResult.from_counters(policy.label, budget, out, batches.tokens)
