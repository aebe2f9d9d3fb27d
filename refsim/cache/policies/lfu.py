"""``lfu``: least frequently used (route-replay.py's table, bmoe-engine.md §5).

Pinned by reproducing every point of the engine authors' ``qwen-curve.csv`` exactly
(tests/cache/test_policies_qwen.py, docs/cache-studies.md): the count is of *lookups* (unique
per batch, not occurrences), and a key's count survives its eviction; the occurrence-count and
reset-on-evict variants miss 11 of 11 points. Ties on the count go to the least recent stamp.

The fast path (:func:`lfu_kernel`) keeps one recency list per count, O(1) amortised per
occurrence.
"""

from __future__ import annotations

import numpy as np

from refsim.cache.linked import NONE, new_lists, push_head, tail, unlink
from refsim.cache.policies.base import Policy
from refsim.cache.policies.kernel_base import (OUT_EVICT, OUT_RESIDENT, count_batch,
                                               replay_partitions)
from refsim.jit import njit


class LFU(Policy, name="lfu"):
    """Least frequently used: evict the smallest (lookups of the key so far, stamp).

    A lookup is the first occurrence of a key in a batch; the count is kept when the key is
    evicted and grows again if it returns. Ties on the count go to the least recent stamp."""

    def reset(self, batches):
        self.stamp: dict[int, int] = {}
        self.count: dict[int, int] = {}

    def on_lookup(self, key, hit):
        self.count[key] = self.count.get(key, 0) + 1

    def on_access(self, key, clock, next_use):
        self.stamp[key] = clock

    def to_evict(self, candidates):
        return min(candidates, key=lambda k: (self.count[k], self.stamp[k]))

    def fast_replay(self, batches, budget_bytes, out):
        """:func:`lfu_kernel` over the whole trace, or (partitioned: ``layerlfu``) once per
        layer sub-trace at the layer's share."""
        bt = batches

        def run(keys, start, layers, kinds, budget, part):
            lfu_kernel(keys, start, layers, kinds, bt.expert_bytes, bt.n_expert, budget, part)

        if not self.partitioned:
            run(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, budget_bytes, out)
        else:
            replay_partitions(bt, self.shares(bt, budget_bytes), out, run)


@njit(cache=True)
def lfu_kernel(keys, batch_start, batch_layer, batch_kind, expert_bytes, n_expert,
               budget_bytes, out):
    """:class:`LFU` (global budget) over a whole BatchTrace, O(1) amortised per occurrence;
    counters added to ``out``. Resident keys sit in one list per lookup count, each ordered by
    stamp (a key moves to its list's head on every occurrence, so the tail is the least
    recent); the victim is the tail-most untouched key of the lowest non-empty count, which is
    the reference's smallest (count, stamp) pair (stamps are unique, so there are no ties).
    Every occurrence moves its key, so the kernel walks the occurrences itself (not
    :func:`~refsim.cache.policies.kernel_base.batch_lookups`)."""
    n_keys = expert_bytes.size * n_expert
    max_c = batch_layer.size + 2
    L = new_lists(n_keys, max_c)
    count = np.zeros(n_keys, np.int64)
    resident = np.zeros(n_keys, np.bool_)
    touched = np.full(n_keys, -1, np.int64)
    minc = max_c
    res_bytes = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = expert_bytes[batch_layer[b]]
        n_look = 0
        n_miss = 0
        for i in range(batch_start[b], batch_start[b + 1]):
            key = keys[i]
            if resident[key]:                        # out of its count list
                unlink(L, key)
            if touched[key] != b:                    # a lookup
                touched[key] = b
                n_look += 1
                count[key] += 1
                if not resident[key]:
                    resident[key] = True
                    n_miss += 1
            c = count[key]                           # to the head of its count list
            push_head(L, c, key)
            if c < minc:
                minc = c
        count_batch(out, kd, eb, n_look, n_miss)
        res_bytes += n_miss * eb
        c = minc
        while res_bytes > budget_bytes and c < max_c:
            k = tail(L, c)
            while k != NONE and touched[k] == b:
                k = L[k, 2]
            if k == NONE:
                c += 1
                continue
            unlink(L, k)
            resident[k] = False
            res_bytes -= expert_bytes[k // n_expert]
            out[OUT_EVICT] += 1
        while minc < max_c and tail(L, minc) == NONE:
            minc += 1
    out[OUT_RESIDENT] = res_bytes
