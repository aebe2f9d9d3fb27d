"""``arc``: ARC (Megiddo & Modha, FAST 2003), as libCacheSim ``ARC.c`` states it, under the
engine's batch rules, in bytes (:mod:`refsim.cache.policies`).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from refsim.cache.linked import NONE, new_lists, oldest_free, push_head, tail, unlink
from refsim.cache.policies.base import AdmitPolicy, pop_oldest
from refsim.cache.policies.kernel_base import (OUT_EVICT, OUT_RESIDENT, batch_lookups,
                                               count_batch, new_batch_marks)
from refsim.jit import njit


class ARC(AdmitPolicy, name="arc"):
    """ARC (Megiddo & Modha, FAST 2003) as libCacheSim ``ARC.c`` states it, in bytes.

    T1 and T2 are LRU lists of resident entries (seen once / at least twice since entering),
    B1 and B2 their ghost lists, ``p`` the adaptive target for T1 (bytes, a float). A hit in T1
    moves the entry to T2's head, in T2 to T2's head. A miss found in B1 raises
    ``p`` by ``max(|B2| / |B1|, 1)`` (sizes in bytes, before the key leaves B1) up to the budget;
    found in B2 lowers it by ``max(|B1| / |B2|, 1)`` down to 0; either way the key leaves the
    ghost list and is inserted at T2's head after REPLACE makes room, REPLACE evicting T1's tail
    into B1 if T1 is non-empty and (|T1| > p or (|T1| = p and the key came from B2)) or T2 is
    empty, else T2's tail into B2. Any other miss enters T1's head, after case IV of the
    paper: if ``|T1| + |B1| + size > budget``, drop B1's oldest and REPLACE when B1 is
    non-empty, else evict T1's tail without a ghost; otherwise, when all four lists hold at least
    ``2 × budget`` bytes, drop B2's oldest (if any), then REPLACE. libCacheSim's sizes are bytes
    where the paper counts pages; the ghost deltas are ratios of byte sizes. No parameters."""

    def fast_replay(self, batches, budget_bytes, out):
        """Numba fast path (:func:`arc_kernel`)."""
        bt, budget = batches, budget_bytes
        arc_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                   bt.n_expert, budget, out)

    def setup(self):
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()
        self.t1_bytes = self.t2_bytes = self.b1_bytes = self.b2_bytes = 0
        self.p = 0.0
        self.ghost_of: dict[int, int] = {}       # pending miss -> 1 (from B1) or 2 (from B2)
        self.cur = 0

    def hit(self, key, protected):
        if key in self.t1:
            del self.t1[key]
            size = self.size(key)
            self.t1_bytes -= size
            self.t2[key] = None
            self.t2_bytes += size
        else:
            self.t2.move_to_end(key)
        return []

    def miss(self, key):
        size = self.size(key)
        c = self.budget_bytes
        if key in self.b1:
            delta = max(self.b2_bytes / self.b1_bytes, 1.0)
            self.p = min(self.p + delta, float(c))
            self.b1_bytes -= size
            del self.b1[key]
            self.ghost_of[key] = 1
        elif key in self.b2:
            delta = max(self.b1_bytes / self.b2_bytes, 1.0)
            self.p = max(self.p - delta, 0.0)
            self.b2_bytes -= size
            del self.b2[key]
            self.ghost_of[key] = 2

    def admit(self, key, size, protected, occupied):
        self.cur = self.ghost_of.pop(key, 0)
        got = super().admit(key, size, protected, occupied)
        self.cur = 0                             # (also when the entry was not admitted)
        return got

    def _evict_list(self, one: bool, protected, ghost: bool = True):
        got = pop_oldest(self.t1 if one else self.t2, protected)
        if got is None:
            return None
        k = got[0]
        size = self.size(k)
        if one:
            self.t1_bytes -= size
            if ghost:
                self.b1[k] = None
                self.b1_bytes += size
        else:
            self.t2_bytes -= size
            self.b2[k] = None
            self.b2_bytes += size
        return k

    def _replace(self, protected):
        t1 = self.t1_bytes
        from_t1 = (t1 > 0 and (t1 > self.p or (t1 == self.p and self.cur == 2))) \
            or self.t2_bytes == 0
        v = self._evict_list(from_t1, protected)
        return v if v is not None else self._evict_list(not from_t1, protected)

    def _drop_ghost(self, one: bool):
        g = self.b1 if one else self.b2
        k, _ = g.popitem(last=False)
        if one:
            self.b1_bytes -= self.size(k)
        else:
            self.b2_bytes -= self.size(k)

    def evict(self, protected, incoming):
        c = self.budget_bytes
        if self.cur:
            return self._replace(protected)
        if self.t1_bytes + self.b1_bytes + incoming > c:
            if self.b1_bytes > 0:
                self._drop_ghost(True)
                return self._replace(protected)
            v = self._evict_list(True, protected, ghost=False)
            return v if v is not None else self._replace(protected)
        if self.t1_bytes + self.b1_bytes + self.t2_bytes + self.b2_bytes >= 2 * c \
                and self.b2_bytes > 0:
            self._drop_ghost(False)
        return self._replace(protected)

    def insert(self, key, size, protected):
        if self.cur:
            self.t2[key] = None
            self.t2_bytes += size
        else:
            self.t1[key] = None
            self.t1_bytes += size
        self.cur = 0
        return True, []


# arc_kernel's lists: T1 (0), T2 (1), their ghosts B1 (2), B2 (3); p = ARC's adaptive target
# for T1 (bytes, a float).

@njit(cache=True, inline="always")
def _arc_evict_list(one, b, touched, L, lbytes, key_bytes,
                    n_expert, ghost):
    """Evict the oldest untouched key of T1 (``one``) or T2 into B1/B2 (lists 0..3 = T1, T2,
    B1, B2); NONE if that list has none."""
    lst = 0 if one else 1
    k = oldest_free(L, lst, touched, b)
    if k == NONE:
        return NONE
    size = key_bytes[k // n_expert]
    unlink(L, k)
    lbytes[lst] -= size
    if ghost:
        push_head(L, lst + 2, k)
        lbytes[lst + 2] += size
    return k


@njit(cache=True, inline="always")
def _arc_replace(cur, p, b, touched, L, lbytes, key_bytes,
                 n_expert):
    t1 = lbytes[0]
    from_t1 = (t1 > 0 and (t1 > p or (t1 == p and cur == 2))) or lbytes[1] == 0
    v = _arc_evict_list(from_t1, b, touched, L, lbytes,
                        key_bytes, n_expert, True)
    if v == NONE:
        v = _arc_evict_list(not from_t1, b, touched, L, lbytes,
                            key_bytes, n_expert, True)
    return v


@njit(cache=True, inline="always")
def _arc_evict(cur, p, incoming, budget, b, touched, L, lbytes,
               key_bytes, n_expert):
    if cur != 0:
        return _arc_replace(cur, p, b, touched, L, lbytes,
                            key_bytes, n_expert)
    if lbytes[0] + lbytes[2] + incoming > budget:
        if lbytes[2] > 0:
            g = tail(L, 2)
            unlink(L, g)
            lbytes[2] -= key_bytes[g // n_expert]
            return _arc_replace(cur, p, b, touched, L, lbytes,
                                key_bytes, n_expert)
        v = _arc_evict_list(True, b, touched, L, lbytes,
                            key_bytes, n_expert, False)
        if v != NONE:
            return v
        return _arc_replace(cur, p, b, touched, L, lbytes,
                            key_bytes, n_expert)
    if lbytes[0] + lbytes[1] + lbytes[2] + lbytes[3] >= 2 * budget and lbytes[3] > 0:
        g = tail(L, 3)
        unlink(L, g)
        lbytes[3] -= key_bytes[g // n_expert]
    return _arc_replace(cur, p, b, touched, L, lbytes,
                        key_bytes, n_expert)


@njit(cache=True)
def arc_kernel(keys, batch_start, batch_layer, batch_kind, key_bytes, n_expert, budget, out):
    """:class:`ARC` over a whole trace; counters added to ``out``."""
    n_keys = key_bytes.size * n_expert
    L = new_lists(n_keys, 4)
    lbytes = np.zeros(4, np.int64)
    touched, looked, pending = new_batch_marks(n_keys, keys.size)
    ghost_of = np.zeros(n_keys, np.int8)
    p = 0.0
    fbudget = float(budget)
    occ = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = key_bytes[batch_layer[b]]
        n_look = batch_lookups(keys, batch_start[b], batch_start[b + 1], b, touched, looked)
        n_p = 0
        for j in range(n_look):
            key = looked[j]
            w = L[key, 0]
            if w == 0 or w == 1:                     # a hit: to T2's head
                unlink(L, key)
                push_head(L, 1, key)
                if w == 0:
                    lbytes[0] -= eb
                    lbytes[1] += eb
                continue
            if w == 2:                               # found in B1: p up
                delta = lbytes[3] / lbytes[2]
                if delta < 1.0:
                    delta = 1.0
                p = min(p + delta, fbudget)
                lbytes[2] -= eb
                unlink(L, key)
                ghost_of[key] = 1
            elif w == 3:                             # found in B2: p down
                delta = lbytes[2] / lbytes[3]
                if delta < 1.0:
                    delta = 1.0
                p = max(p - delta, 0.0)
                lbytes[3] -= eb
                unlink(L, key)
                ghost_of[key] = 2
            pending[n_p] = key
            n_p += 1
        count_batch(out, kd, eb, n_look, n_p)
        for q in range(n_p + 1):
            if q < n_p:
                key = pending[q]
                cur = ghost_of[key]
                ghost_of[key] = 0
                if eb > budget:
                    continue
                need = eb
            else:
                key = NONE
                cur = 0
                need = 0
            while occ + need > budget:
                v = _arc_evict(cur, p, need, budget, b, touched, L, lbytes, key_bytes, n_expert)
                if v == NONE:
                    break
                occ -= key_bytes[v // n_expert]
                out[OUT_EVICT] += 1
            if key != NONE:
                lst = 1 if cur != 0 else 0
                push_head(L, lst, key)
                lbytes[lst] += eb
                occ += eb
    out[OUT_RESIDENT] = occ
