"""``tinylfu``: W-TinyLFU (Einziger, Friedman & Manes, ACM TOS 2017), as libCacheSim
``WTinyLFU.c`` states it, under the engine's batch rules, in bytes (:mod:`refsim.cache.policies`);
its main cache is :class:`~refsim.cache.policies.slru.SLRU` with two segments, its frequency
sketch libCacheSim's counting Bloom filter (:class:`_CountingBloomFilter`).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from refsim.cache.linked import NONE, new_lists, oldest_free, push_head, tail, unlink
from refsim.cache.policies.base import AdmitPolicy, check_ratio, pop_oldest
from refsim.cache.policies.kernel_base import (OUT_EVICT, OUT_RESIDENT, batch_lookups,
                                               count_batch, new_batch_marks)
from refsim.cache.policies.slru import SLRU
from refsim.jit import njit


class _CountingBloomFilter:
    """libCacheSim's ``minimalIncrementCBF`` (dataStructure/minimalIncrementCBF.c): counters
    sized for ``entries`` at false-positive rate ``error``; key ``k`` maps to counters
    ``(a + i*b) mod n`` (32-bit unsigned arithmetic), ``a``/``b`` the low 32 bits of XXH64 of
    the 8-byte little-endian object id with seeds 0x12345678 / 0x12344321 (hash.h HASH_SEED0/1).
    ``add`` increments every hashed counter; ``estimate`` is their minimum; ``decay`` halves."""

    SEED0, SEED1 = 0x12345678, 0x12344321

    def __init__(self, entries: int, error: float = 0.001):
        import math

        import xxhash

        self._xxh = xxhash.xxh64_intdigest
        bpe = -math.log(error) / 0.480453013918201
        self.hashes = int(math.ceil(0.693147180559945 * bpe))
        n = int(min(math.ceil(bpe * entries), 2**31 - 1))
        if n < self.hashes:
            n = self.hashes * 2
        self.n = n
        self.bf = [0] * n
        self._idx: dict[int, list[int]] = {}

    def slot_table(self, n_keys: int):
        """(n_keys, hashes) int32 array: the counters of key ``k`` (object id ``k + 1``); the
        filter has fewer than 2**31 counters, so an index fits."""
        return np.array([self._slots(k + 1) for k in range(n_keys)], dtype=np.int32).reshape(
            n_keys, self.hashes)

    def _slots(self, obj_id: int) -> list[int]:
        got = self._idx.get(obj_id)
        if got is None:
            raw = obj_id.to_bytes(8, "little")
            a = self._xxh(raw, self.SEED0) & 0xFFFFFFFF
            b = self._xxh(raw, self.SEED1) & 0xFFFFFFFF
            got = [((a + i * b) & 0xFFFFFFFF) % self.n for i in range(self.hashes)]
            self._idx[obj_id] = got
        return got

    def estimate(self, obj_id: int) -> int:
        bf = self.bf
        return min(bf[x] for x in self._slots(obj_id))

    def add(self, obj_id: int) -> None:
        bf = self.bf
        for x in self._slots(obj_id):
            bf[x] += 1

    def decay(self) -> None:
        self.bf = [v >> 1 for v in self.bf]


_SLOTS: dict = {}


def _cbf_slots(entries: int, n_keys: int):
    """(counters, hashes, (n_keys, hashes) slot table) of a filter sized for ``entries``,
    cached: the table depends only on the filter size and the keys."""
    got = _SLOTS.get((entries, n_keys))
    if got is None:
        if len(_SLOTS) > 256:
            _SLOTS.clear()
        f = _CountingBloomFilter(entries)
        got = _SLOTS[(entries, n_keys)] = (f.n, f.hashes, f.slot_table(n_keys))
    return got


class TinyLFU(AdmitPolicy, name="tinylfu"):
    """W-TinyLFU (Einziger, Friedman & Manes, ACM TOS 2017) as libCacheSim ``WTinyLFU.c``
    states it: a window LRU of ``int(window × budget)`` bytes in front of a main segmented LRU
    (two segments, 1:4, libCacheSim ``SLRU`` with ``seg-size=1:4``, as :class:`SLRU`), and a
    counting Bloom filter of the keys' frequencies (:class:`_CountingBloomFilter`) deciding
    which of the window's victim and the main's victim stays.

    - A hit in the window moves the key to the window's head; a hit in main promotes it as
      :class:`SLRU` does and counts it in the filter (every ``32 × main entries`` main hits all
      counters are halved).
    - A miss enters the window's head and is counted. To make room for it, one eviction at a
      time: take the window's least recent key W (counted again): while main has room, W
      moves to main and the next W is taken; else with M = main's victim (its lowest non-empty
      segment's least recent key), if W's estimate is above M's, M is evicted and W moves to
      main, otherwise W is evicted. An empty window evicts main's victim. The window may hold
      more than its share (only the total is bounded). An entry larger than the window or
      main's first segment is not admitted.

    Default ``window=0.01`` (the paper's and libCacheSim's 1 %). The filter is sized for the
    main part in entries (``entries = main bytes // smallest entry``, error 0.001); libCacheSim
    sizes it (and the decay period) by the main part in *bytes*, which is the same for unit
    sizes and, for MiB-sized entries, asks for 2**31 counters; so refsim equals libCacheSim
    on unit sizes (tests) and deliberately differs with byte sizes."""

    params = {"window": 0.01}

    def check_params(self):
        check_ratio(self, "window")

    def setup(self):
        c = self.budget_bytes
        self.w_max = int(c * self.window)
        self.m_cap = c - self.w_max
        self.win: OrderedDict[int, None] = OrderedDict()
        self.w_bytes = 0
        main = SLRU(segments=2)
        main._eb, main._ne, main.budget_bytes = self._eb, self._ne, self.m_cap
        main.setup()
        main.seg_max = [int(1.0 / 5 * self.m_cap), int(4.0 / 5 * self.m_cap)]
        self.main = main
        unit = min(self._eb)
        self.cbf = _CountingBloomFilter(self.m_cap // unit)
        self.max_requests = 32 * (self.m_cap // unit)
        self.requests = 0

    def _main_bytes(self):
        return sum(self.main.seg_bytes)

    def fast_replay(self, batches, budget_bytes, out):
        """Numba fast path (:func:`tinylfu_kernel`); the sizes are :meth:`setup`'s, the
        filter's slots come from :func:`_cbf_slots` (cached)."""
        bt, budget = batches, budget_bytes
        w_max = int(budget * self.window)
        m_cap = budget - w_max
        unit = int(bt.expert_bytes.min())
        n, hashes, slots = _cbf_slots(m_cap // unit, bt.n_layer * bt.n_expert)
        # the counters are the kernel's hot random accesses (``hashes`` per count): int32 halves
        # their footprint. A count is a main hit, an insert or a window departure (<= 2 per
        # lookup) and raises a counter by at most ``hashes``, so 2 x hashes x occurrences
        # bound every counter (int64 beyond 2**31)
        bf = np.zeros(n, np.int32 if 2 * hashes * bt.keys.size < 2**31 else np.int64)
        tinylfu_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                       bt.n_expert, budget, w_max, int(1.0 / 5 * m_cap), int(4.0 / 5 * m_cap),
                       32 * (m_cap // unit), slots, bf, out)

    def hit(self, key, protected):
        if key in self.win:
            self.win.move_to_end(key)
            return []
        out = self.main.hit(key, protected)
        self.cbf.add(key + 1)
        self.requests += 1
        if self.requests >= self.max_requests:
            self.requests = 0
            self.cbf.decay()
        return out

    def can_insert(self, size):
        return size <= self.budget_bytes and size <= self.w_max and \
            size <= self.m_cap and size <= self.main.seg_max[0]

    def evict(self, protected, incoming):
        """One ``WTinyLFU_evict`` call: window victims move to main while it has room, then one
        key is evicted (the window's victim or, if that one is the more frequent, main's)."""
        while True:
            got = pop_oldest(self.win, protected)
            if got is None:
                return self.main.evict(protected, 0)
            w = got[0]
            size = self.size(w)
            self.w_bytes -= size
            if self._main_bytes() + size <= self.m_cap:
                self.main.insert(w, size, protected)
                self.cbf.add(w + 1)
                continue
            m = next((k for seg in self.main.seg for k in seg if k not in protected), None)
            if m is not None and self.cbf.estimate(w + 1) > self.cbf.estimate(m + 1):
                v = self.main.evict(protected, 0)
                self.main.insert(w, size, protected)
                self.cbf.add(w + 1)
                return v
            self.cbf.add(w + 1)
            return w

    def insert(self, key, size, protected):
        self.win[key] = None
        self.w_bytes += size
        self.cbf.add(key + 1)
        return True, []


# tinylfu_kernel's lists: the window (0), main's segments 0 (1) and 1 (2).
W = 0

@njit(cache=True, inline="always")
def _cbf_estimate(bf, slots, key):
    m = bf[slots[key, 0]]
    for j in range(1, slots.shape[1]):
        v = bf[slots[key, j]]
        if v < m:
            m = v
    return m


@njit(cache=True, inline="always")
def _cbf_add(bf, slots, key):
    for j in range(slots.shape[1]):
        bf[slots[key, j]] += 1


@njit(cache=True, inline="always")
def _main_evict(b, touched, L, lbytes, key_bytes, n_expert):
    """Main SLRU's victim (segments 1, 2 = lists 1, 2): the lowest non-empty segment's oldest
    untouched key, removed; NONE if none."""
    for s in range(1, 3):
        if lbytes[s] > 0:
            k = oldest_free(L, s, touched, b)
            if k != NONE:
                unlink(L, k)
                lbytes[s] -= key_bytes[k // n_expert]
                return k
    return NONE


@njit(cache=True)
def tinylfu_kernel(keys, batch_start, batch_layer, batch_kind, key_bytes, n_expert, budget,
                   w_max, seg0_max, seg1_max, max_requests, slots, bf, out):
    """:class:`TinyLFU` over a whole trace; counters added to ``out``. ``slots[key]`` = the
    key's counters in the Bloom filter ``bf`` (from :class:`_CountingBloomFilter`)."""
    n_keys = key_bytes.size * n_expert
    L = new_lists(n_keys, 3)
    lbytes = np.zeros(3, np.int64)
    seg_max = np.array([w_max, seg0_max, seg1_max], np.int64)
    n_counters = bf.size
    touched, looked, pending = new_batch_marks(n_keys, keys.size)
    seen = np.full(n_keys, -1, np.int32)        # hits may evict: touched grows as they run
    m_cap = budget - w_max
    requests = 0
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
            if w == W:                                   # a window hit: to its head
                unlink(L, key)
                push_head(L, W, key)
                continue
            if w == 2:                                   # top segment of main
                unlink(L, key)
                push_head(L, 2, key)
            else:                                        # promote, cool 2 -> 1 -> evict
                unlink(L, key)
                lbytes[1] -= eb
                push_head(L, 2, key)
                lbytes[2] += eb
                stuck = False
                while lbytes[2] > seg_max[2]:
                    k = tail(L, 2)
                    sz = key_bytes[k // n_expert]
                    unlink(L, k)
                    lbytes[2] -= sz
                    push_head(L, 1, k)
                    lbytes[1] += sz
                    while lbytes[1] > seg_max[1] and not stuck:
                        v = _main_evict(b, touched, L, lbytes, key_bytes, n_expert)
                        if v == NONE:
                            stuck = True
                        else:
                            occ -= key_bytes[v // n_expert]
                            out[OUT_EVICT] += 1
            _cbf_add(bf, slots, key)                     # a main hit is counted
            requests += 1
            if requests >= max_requests:
                requests = 0
                for q in range(n_counters):
                    bf[q] >>= 1
        count_batch(out, kd, eb, n_look, n_p)
        for q in range(n_p + 1):
            if q < n_p:
                key = pending[q]
                if not (eb <= budget and eb <= w_max and eb <= m_cap and eb <= seg0_max):
                    continue
                need = eb
            else:
                key = NONE
                need = 0
            while occ + need > budget:
                v = NONE
                while True:                              # one WTinyLFU_evict
                    wk = oldest_free(L, W, touched, b)
                    if wk == NONE:
                        v = _main_evict(b, touched, L, lbytes,
                                        key_bytes, n_expert)
                        break
                    sz = key_bytes[wk // n_expert]
                    unlink(L, wk)
                    lbytes[W] -= sz
                    if lbytes[1] + lbytes[2] + sz <= m_cap:
                        nth = 1 if lbytes[1] + sz <= seg_max[1] else (
                            2 if lbytes[2] + sz <= seg_max[2] else 1)
                        push_head(L, nth, wk)
                        lbytes[nth] += sz
                        _cbf_add(bf, slots, wk)
                        continue
                    mk = NONE
                    for s in range(1, 3):
                        mk = oldest_free(L, s, touched, b)
                        if mk != NONE:
                            break
                    if mk != NONE and _cbf_estimate(bf, slots, wk) > _cbf_estimate(bf, slots, mk):
                        v = _main_evict(b, touched, L, lbytes,
                                        key_bytes, n_expert)
                        nth = 1 if lbytes[1] + sz <= seg_max[1] else (
                            2 if lbytes[2] + sz <= seg_max[2] else 1)
                        push_head(L, nth, wk)
                        lbytes[nth] += sz
                        _cbf_add(bf, slots, wk)
                        break
                    _cbf_add(bf, slots, wk)
                    v = wk
                    break
                if v == NONE:
                    break
                occ -= key_bytes[v // n_expert]
                out[OUT_EVICT] += 1
            if key != NONE:
                push_head(L, W, key)
                lbytes[W] += eb
                _cbf_add(bf, slots, key)
                occ += eb
    out[OUT_RESIDENT] = occ
