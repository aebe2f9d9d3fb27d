"""``slru``: segmented LRU, as libCacheSim ``SLRU.c`` states it, under the engine's batch rules,
byte-weighted (:mod:`refsim.cache.policies`). :mod:`refsim.cache.policies.tinylfu` uses it
(two segments) as its main cache.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from refsim.cache.linked import NONE, new_lists, oldest_free, push_head, tail, unlink
from refsim.cache.policies.base import AdmitPolicy, pop_oldest
from refsim.cache.policies.kernel_base import (OUT_EVICT, OUT_RESIDENT, batch_lookups,
                                               count_batch, new_batch_marks)
from refsim.errors import ConfigError
from refsim.jit import njit


class SLRU(AdmitPolicy, name="slru"):
    """Segmented LRU with ``segments`` LRU segments of ``budget // segments`` bytes each
    (libCacheSim ``SLRU.c``; default 4 segments, as there).

    A hit in the top segment moves the entry to that segment's head; a hit below promotes it to
    the head of the next segment up, and while a segment is over its size its tail is demoted to
    the head of the segment below; a demotion out of segment 0 is an eviction (of segment 0's
    oldest untouched entry). That eviction happens at the hit, inside the batch: the one place a
    policy here evicts before the batch ends (it needs mixed sizes or a budget not divisible by
    ``segments``, libCacheSim's SLRU_cool). A new entry goes to the head of the lowest segment
    with room for it, else of segment 0; eviction takes the tail of the lowest non-empty
    segment. An entry larger than one segment is not admitted. libCacheSim's variant differs
    from the paper's two-segment SLRU (probationary + protected) in the segment count and in
    inserting into any segment with room."""

    params = {"segments": 4}

    def check_params(self):
        if not 1 <= self.segments <= 64:
            raise ConfigError(f"--policy slru: segments={self.segments} is not in 1..64")

    def fast_replay(self, batches, budget_bytes, out):
        """Numba fast path (:func:`slru_kernel`)."""
        bt, budget = batches, budget_bytes
        slru_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                    bt.n_expert, budget, int(self.segments), out)

    def setup(self):
        n = self.segments
        self.seg = [OrderedDict() for _ in range(n)]
        self.seg_bytes = [0] * n
        self.seg_max = [self.budget_bytes // n] * n
        self.where: dict[int, int] = {}

    def can_insert(self, size):
        return size <= self.budget_bytes and size <= self.seg_max[0]

    def _move(self, key, src, dst):
        size = self.size(key)
        del self.seg[src][key]
        self.seg_bytes[src] -= size
        self.seg[dst][key] = None
        self.seg_bytes[dst] += size
        self.where[key] = dst

    def _cool(self, i, protected, out) -> bool:
        if i == 0:
            v = self.evict(protected, 0)
            if v is None:
                return False
            out.append(v)
            return True
        k = next(iter(self.seg[i]))
        self._move(k, i, i - 1)
        while self.seg_bytes[i - 1] > self.seg_max[i - 1]:
            if not self._cool(i - 1, protected, out):
                break
        return True

    def hit(self, key, protected):
        i = self.where[key]
        n = self.segments
        if i == n - 1:
            self.seg[i].move_to_end(key)
            return []
        self._move(key, i, i + 1)
        out: list[int] = []
        while self.seg_bytes[i + 1] > self.seg_max[i + 1]:
            if not self._cool(i + 1, protected, out):
                break
        return out

    def evict(self, protected, incoming):
        for i in range(self.segments):
            if self.seg_bytes[i] > 0:
                got = pop_oldest(self.seg[i], protected)
                if got is not None:
                    k = got[0]
                    self.seg_bytes[i] -= self.size(k)
                    del self.where[k]
                    return k
        return None

    def insert(self, key, size, protected):
        nth = 0
        for i in range(self.segments):
            if self.seg_bytes[i] + size <= self.seg_max[i]:
                nth = i
                break
        self.seg[nth][key] = None
        self.seg_bytes[nth] += size
        self.where[key] = nth
        return True, []


@njit(cache=True, inline="always")
def _slru_evict(b, touched, L, lbytes, key_bytes, n_expert, n_seg):
    """Evict the oldest untouched key of the lowest non-empty segment; NONE if none."""
    for i in range(n_seg):
        if lbytes[i] > 0:
            k = oldest_free(L, i, touched, b)
            if k != NONE:
                unlink(L, k)
                lbytes[i] -= key_bytes[k // n_expert]
                return k
    return NONE


@njit(cache=True)
def slru_kernel(keys, batch_start, batch_layer, batch_kind, key_bytes, n_expert, budget, n_seg,
                out):
    """:class:`SLRU` with ``n_seg`` segments over a whole trace; counters added to ``out``.
    Lists 0 .. n_seg - 1 are the segments (head = newest), ``lbytes`` their bytes."""
    n_keys = key_bytes.size * n_expert
    L = new_lists(n_keys, n_seg)
    lbytes = np.zeros(n_seg, np.int64)
    seg_max = budget // n_seg
    touched, looked, pending = new_batch_marks(n_keys, keys.size)
    seen = np.full(n_keys, -1, np.int32)        # hits may evict: touched grows as they run
    occ = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = key_bytes[batch_layer[b]]
        n_look = batch_lookups(keys, batch_start[b], batch_start[b + 1], b, seen, looked)
        n_p = 0
        for j in range(n_look):
            key = looked[j]
            touched[key] = b                        # protected from here on
            w = L[key, 0]
            if w == NONE:
                pending[n_p] = key
                n_p += 1
                continue
            if w == n_seg - 1:
                unlink(L, key)
                push_head(L, w, key)
                continue
            unlink(L, key)
            lbytes[w] -= eb
            push_head(L, w + 1, key)
            lbytes[w + 1] += eb
            # cool from segment w + 1 down, depth first (SLRU_cool); out of segment 0 = evict
            top = w + 1
            level = top
            stuck = False
            while True:
                if lbytes[level] > seg_max and not (level == 0 and stuck):
                    if level == 0:
                        v = _slru_evict(b, touched, L, lbytes, key_bytes, n_expert, n_seg)
                        if v == NONE:
                            stuck = True
                        else:
                            occ -= key_bytes[v // n_expert]
                            out[OUT_EVICT] += 1
                        continue
                    k = tail(L, level)
                    sz = key_bytes[k // n_expert]
                    unlink(L, k)
                    lbytes[level] -= sz
                    push_head(L, level - 1, k)
                    lbytes[level - 1] += sz
                    level -= 1
                    continue
                if level == top:
                    break
                level += 1
        count_batch(out, kd, eb, n_look, n_p)
        for q in range(n_p + 1):
            if q < n_p:
                key = pending[q]
                if eb > budget or eb > seg_max:
                    continue
                need = eb
            else:
                key = NONE
                need = 0
            while occ + need > budget:
                v = _slru_evict(b, touched, L, lbytes, key_bytes, n_expert, n_seg)
                if v == NONE:
                    break
                occ -= key_bytes[v // n_expert]
                out[OUT_EVICT] += 1
            if key != NONE:
                nth = 0
                for s in range(n_seg):
                    if lbytes[s] + eb <= seg_max:
                        nth = s
                        break
                push_head(L, nth, key)
                lbytes[nth] += eb
                occ += eb
    out[OUT_RESIDENT] = occ
