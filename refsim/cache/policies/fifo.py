"""``fifo``: first in, first out, as libCacheSim ``FIFO.c`` states it, under the engine's batch
rules, byte-weighted (the rules of every eviction algorithm here: :mod:`refsim.cache.policies`).

A hit changes nothing; the victim is the entry resident longest, passing over the batch's own.
The fast path (:func:`fifo_clock_kernel`) is CLOCK's kernel with no counter bits (a FIFO is a
CLOCK whose entries never earn a second chance), so :mod:`refsim.cache.policies.clock` runs it too.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from refsim.cache.linked import NONE, new_lists, oldest_free, push_head, unlink
from refsim.cache.policies.base import AdmitPolicy, pop_oldest
from refsim.cache.policies.kernel_base import (OUT_EVICT, OUT_RESIDENT, batch_lookups,
                                               count_batch, new_batch_marks)
from refsim.jit import njit


class FIFO(AdmitPolicy, name="fifo"):
    """First in, first out: evict the entry resident longest; a hit changes nothing
    (libCacheSim ``FIFO.c``)."""

    def fast_replay(self, batches, budget_bytes, out):
        """Numba fast path (:func:`fifo_clock_kernel`, no counter bits)."""
        bt, budget = batches, budget_bytes
        fifo_clock_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind,
                          bt.expert_bytes, bt.n_expert, budget, 0, 0, out)

    def setup(self):
        self.q: OrderedDict[int, None] = OrderedDict()

    def evict(self, protected, incoming):
        got = pop_oldest(self.q, protected)
        return None if got is None else got[0]

    def insert(self, key, size, protected):
        self.q[key] = None
        return True, []


@njit(cache=True)
def fifo_clock_kernel(keys, batch_start, batch_layer, batch_kind, key_bytes, n_expert, budget,
                      max_freq, init, out):
    """FIFO (``max_freq`` = 0) or CLOCK with counters up to ``max_freq`` starting at ``init``
    (:class:`FIFO`, :class:`~refsim.cache.policies.clock.Clock`) over a whole trace; counters
    added to ``out``. One list (0) holds the resident keys, head = newest."""
    n_keys = key_bytes.size * n_expert
    L = new_lists(n_keys, 1)
    freq = np.zeros(n_keys, np.int32)
    touched, looked, pending = new_batch_marks(n_keys, keys.size)
    occ = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = key_bytes[batch_layer[b]]
        n_look = batch_lookups(keys, batch_start[b], batch_start[b + 1], b, touched, looked)
        n_p = 0
        for j in range(n_look):
            key = looked[j]
            if L[key, 0] == 0:                         # a hit: CLOCK's counter up
                if freq[key] < max_freq:
                    freq[key] += 1
            else:
                pending[n_p] = key
                n_p += 1
        count_batch(out, kd, eb, n_look, n_p)
        for p in range(n_p + 1):
            if p < n_p:
                key = pending[p]
                if eb > budget:
                    continue
                need = eb
            else:
                key = NONE
                need = 0                               # the after-batch rule
            while occ + need > budget:
                k = oldest_free(L, 0, touched, b)
                victim = NONE
                while k != NONE:
                    nxt = L[k, 2]
                    if freq[k] >= 1:
                        freq[k] -= 1
                        unlink(L, k)
                        push_head(L, 0, k)
                        if nxt == NONE:                # a full round: again from the tail
                            k = oldest_free(L, 0, touched, b)
                        else:
                            k = nxt
                            while k != NONE and touched[k] == b:
                                k = L[k, 2]
                        continue
                    victim = k
                    break
                if victim == NONE:
                    break
                unlink(L, victim)
                occ -= key_bytes[victim // n_expert]
                out[OUT_EVICT] += 1
            if key != NONE:
                push_head(L, 0, key)
                freq[key] = init
                occ += eb
    out[OUT_RESIDENT] = occ
