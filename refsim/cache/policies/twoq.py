"""``2q``: 2Q (Johnson & Shasha, VLDB 1994), as libCacheSim ``TwoQ.c`` states it, under the
engine's batch rules, byte-weighted (:mod:`refsim.cache.policies`).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from refsim.cache.linked import NONE, new_lists, oldest_free, push_head, tail, unlink
from refsim.cache.policies.base import AdmitPolicy, check_ratio, pop_oldest
from refsim.cache.policies.kernel_base import (OUT_EVICT, OUT_RESIDENT, batch_lookups,
                                               count_batch, new_batch_marks)
from refsim.jit import njit


class TwoQ(AdmitPolicy, name="2q"):
    """2Q (Johnson & Shasha, VLDB 1994), the full version with A1in, A1out and Am, as
    libCacheSim ``TwoQ.c`` states it.

    A1in is a FIFO of ``kin × budget`` bytes (truncated to an integer); A1out a ghost FIFO of
    keys evicted from A1in, ``kout × budget`` bytes of their sizes; Am an LRU of the rest. A hit
    in A1in changes nothing; a hit in Am moves the entry to Am's head. A miss whose key is in
    A1out (removed from it at the lookup) goes to Am (making room inside Am by its LRU order),
    any other miss to A1in. Eviction: A1in's oldest (into A1out) while A1in is over its size,
    else Am's least recent. Defaults ``kin=0.25``, ``kout=0.5`` (the paper's and libCacheSim's
    ``Ain-size-ratio``, ``Aout-size-ratio``). An entry larger than A1in is not admitted."""

    params = {"kin": 0.25, "kout": 0.5}

    def check_params(self):
        check_ratio(self, "kin")
        check_ratio(self, "kout")

    def fast_replay(self, batches, budget_bytes, out):
        """Numba fast path (:func:`twoq_kernel`)."""
        bt, budget = batches, budget_bytes
        twoq_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                    bt.n_expert, budget, float(self.kin), float(self.kout), out)

    def setup(self):
        c = self.budget_bytes
        self.ain_max = int(c * self.kin)
        self.aout_max = int(c * self.kout)
        self.am_max = c - self.ain_max
        self.ain: OrderedDict[int, None] = OrderedDict()
        self.aout: OrderedDict[int, None] = OrderedDict()
        self.am: OrderedDict[int, None] = OrderedDict()
        self.ain_bytes = self.aout_bytes = self.am_bytes = 0
        self.from_ghost: set[int] = set()

    def can_insert(self, size):
        return size <= self.ain_max

    def hit(self, key, protected):
        if key in self.am:
            self.am.move_to_end(key)
        return []

    def miss(self, key):
        if key in self.aout:
            del self.aout[key]
            self.aout_bytes -= self.size(key)
            self.from_ghost.add(key)

    def _to_ghost(self, key):
        size = self.size(key)
        if size > self.aout_max:
            return
        while self.aout_bytes + size > self.aout_max:
            k, _ = self.aout.popitem(last=False)
            self.aout_bytes -= self.size(k)
        self.aout[key] = None
        self.aout_bytes += size

    def _evict_ain(self, protected):
        got = pop_oldest(self.ain, protected)
        if got is None:
            return None
        k = got[0]
        self.ain_bytes -= self.size(k)
        self._to_ghost(k)
        return k

    def _evict_am(self, protected):
        got = pop_oldest(self.am, protected)
        if got is None:
            return None
        self.am_bytes -= self.size(got[0])
        return got[0]

    def evict(self, protected, incoming):
        if self.ain_bytes > self.ain_max:
            v = self._evict_ain(protected)
            if v is not None:
                return v
        v = self._evict_am(protected)
        return v if v is not None else self._evict_ain(protected)

    def insert(self, key, size, protected):
        if key in self.from_ghost:
            self.from_ghost.discard(key)
            if size > self.am_max:
                return False, []
            out = []
            while self.am_bytes + size > self.am_max:
                v = self._evict_am(protected)
                if v is None:
                    break
                out.append(v)
            self.am[key] = None
            self.am_bytes += size
            return True, out
        self.ain[key] = None
        self.ain_bytes += size
        return True, []


AIN, AOUT, AM = 0, 1, 2
"""twoq_kernel's lists: A1in, A1out (the ghost FIFO), Am."""


@njit(cache=True)
def twoq_kernel(keys, batch_start, batch_layer, batch_kind, key_bytes, n_expert, budget, kin,
                kout, out):
    """:class:`TwoQ` over a whole trace; counters added to ``out``."""
    n_keys = key_bytes.size * n_expert
    L = new_lists(n_keys, 3)
    lbytes = np.zeros(3, np.int64)
    touched, looked, pending = new_batch_marks(n_keys, keys.size)
    from_ghost = np.zeros(n_keys, np.bool_)
    ain_max = np.int64(budget * kin)
    aout_max = np.int64(budget * kout)
    am_max = budget - ain_max
    occ = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = key_bytes[batch_layer[b]]
        n_look = batch_lookups(keys, batch_start[b], batch_start[b + 1], b, touched, looked)
        n_p = 0
        for j in range(n_look):
            key = looked[j]
            w = L[key, 0]
            if w == AIN or w == AM:                  # a hit: Am's to its head
                if w == AM:
                    unlink(L, key)
                    push_head(L, AM, key)
                continue
            if w == AOUT:                            # a miss remembered in A1out: to Am
                unlink(L, key)
                lbytes[AOUT] -= eb
                from_ghost[key] = True
            pending[n_p] = key
            n_p += 1
        count_batch(out, kd, eb, n_look, n_p)
        for q in range(n_p + 1):
            if q < n_p:
                key = pending[q]
                if eb > ain_max:
                    continue
                need = eb
            else:
                key = NONE
                need = 0
            while occ + need > budget:
                v = NONE
                for attempt in range(3):         # A1in if over, Am, then A1in
                    if attempt == 0 and lbytes[AIN] <= ain_max:
                        continue
                    lst = AM if attempt == 1 else AIN
                    k = oldest_free(L, lst, touched, b)
                    if k == NONE:
                        continue
                    sz = key_bytes[k // n_expert]
                    unlink(L, k)
                    lbytes[lst] -= sz
                    if lst == AIN and sz <= aout_max:     # into the ghost FIFO
                        while lbytes[AOUT] + sz > aout_max:
                            g = tail(L, AOUT)
                            unlink(L, g)
                            lbytes[AOUT] -= key_bytes[g // n_expert]
                        push_head(L, AOUT, k)
                        lbytes[AOUT] += sz
                    v = k
                    break
                if v == NONE:
                    break
                occ -= key_bytes[v // n_expert]
                out[OUT_EVICT] += 1
            if key == NONE:
                continue
            if from_ghost[key]:
                from_ghost[key] = False
                if eb > am_max:
                    continue
                while lbytes[AM] + eb > am_max:
                    k = oldest_free(L, AM, touched, b)
                    if k == NONE:
                        break
                    unlink(L, k)
                    lbytes[AM] -= key_bytes[k // n_expert]
                    occ -= key_bytes[k // n_expert]
                    out[OUT_EVICT] += 1
                push_head(L, AM, key)
                lbytes[AM] += eb
            else:
                push_head(L, AIN, key)
                lbytes[AIN] += eb
            occ += eb
    out[OUT_RESIDENT] = occ
