"""``lru``: least recently used, the engine's own policy (bmoe-engine.md §3.2; route-replay.py's
table, §5).

The reference definition (:class:`LRU`) evicts the smallest stamp, a clock bumped on every
occurrence, so a batch leaves its keys ordered by last occurrence; it equals
:class:`~refsim.cache.ExpertCache` (whose kernel, :mod:`refsim.cache.lru`, states the batch
rules). The fast path (:func:`lru_kernel`) keeps the order as a log of occurrences, O(1) each.
"""

from __future__ import annotations

import numpy as np

from refsim.cache.batches import BatchTrace
from refsim.cache.policies.base import Policy
from refsim.cache.policies.kernel_base import (OUT_EVICT, OUT_RESIDENT, count_batch,
                                               replay_partitions)
from refsim.jit import njit


class LRU(Policy, name="lru"):
    """Least recently used: evict the smallest stamp; the stamp is a clock bumped on every
    occurrence, so a batch leaves its keys ordered by last occurrence. This is the engine's
    cache (bmoe-engine.md §3.2) and equals :class:`~refsim.cache.ExpertCache`."""

    def reset(self, batches: BatchTrace) -> None:
        self.stamp: dict[int, int] = {}

    def on_access(self, key, clock, next_use):
        self.stamp[key] = clock

    def to_evict(self, candidates):
        return min(candidates, key=self.stamp.__getitem__)

    def fast_replay(self, batches, budget_bytes, out):
        """:func:`lru_kernel` over the whole trace; a partitioned subclass (``layer``,
        ``layer-opt``) runs it once per layer sub-trace at the layer's share, each partition
        being the engine's LRU over its layer's own batches."""
        bt = batches
        if not self.partitioned:
            lru_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                       bt.n_expert, budget_bytes, out)
            return
        replay_partitions(bt, self.shares(bt, budget_bytes), out,
                          lambda keys, start, layers, kinds, share, part: lru_kernel(
                              keys, start, layers, kinds, bt.expert_bytes, bt.n_expert, share,
                              part))


@njit(cache=True)
def lru_kernel(keys, batch_start, batch_layer, batch_kind, expert_bytes, n_expert,
               budget_bytes, out):
    """The engine's LRU over a whole BatchTrace (the rules and counters of :class:`LRU` and of
    :class:`~refsim.cache.ExpertCache`), O(1) per occurrence; counters added to ``out``
    (:data:`~refsim.cache.policies.kernel_base.N_COUNTERS`).

    The recency order is kept as a log of occurrences (occurrence i writes its key at
    ``log[i]`` = ``keys[i]`` and the key's stamp becomes i); an entry of the log is live while
    its key is resident and still carries that stamp. The least recent resident key is the first
    live entry from the front, so eviction advances a front pointer; nothing is ever unlinked.
    The stamp also answers both batch questions: an occurrence is the key's first in batch ``b``
    (a lookup) iff the key's stamp is below the batch's first occurrence index, and a live entry
    belongs to the batch (protected) iff its stamp is at or above it. The lookup loop is
    branch-free (hit/miss outcomes are data-dependent and would defeat the branch predictor),
    which is why this kernel walks the occurrences itself instead of
    :func:`~refsim.cache.policies.kernel_base.batch_lookups` (docs/cache-studies.md, "Speed").
    """
    n_keys = expert_bytes.size * n_expert
    resident = np.zeros(n_keys, dtype=np.int64)          # 0/1
    stamp = np.full(n_keys, -1, dtype=np.int64)
    front = 0
    res_bytes = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = expert_bytes[batch_layer[b]]
        lo = batch_start[b]
        hi = batch_start[b + 1]
        n_look = 0
        n_hit = 0
        for i in range(lo, hi):
            key = keys[i]
            first = np.int64(stamp[key] < lo)              # first occurrence in the batch
            n_look += first
            n_hit += first & resident[key]
            resident[key] = 1
            stamp[key] = i
        count_batch(out, kd, eb, n_look, n_look - n_hit)
        res_bytes += (n_look - n_hit) * eb
        while res_bytes > budget_bytes and front < hi:
            key = keys[front]
            s = stamp[key]
            if s == front and resident[key] == 1:          # a live entry: the least recent
                if s >= lo:
                    break                                  # the tail is the batch's own: stop
                resident[key] = 0
                res_bytes -= expert_bytes[key // n_expert]
                out[OUT_EVICT] += 1
            front += 1
    out[OUT_RESIDENT] = res_bytes
