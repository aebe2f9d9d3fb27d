"""``s3fifo``: S3-FIFO (Yang et al., SOSP 2023), as libCacheSim ``S3FIFO.c`` states it, under the
engine's batch rules, in bytes (:mod:`refsim.cache.policies`).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from refsim.cache.linked import NONE, new_lists, oldest_free, push_head, tail, unlink
from refsim.cache.policies.base import AdmitPolicy, check_ratio
from refsim.cache.policies.kernel_base import (OUT_EVICT, OUT_RESIDENT, batch_lookups,
                                               count_batch, new_batch_marks)
from refsim.errors import ConfigError
from refsim.jit import njit


class S3FIFO(AdmitPolicy, name="s3fifo"):
    """S3-FIFO (Yang et al., SOSP 2023) as libCacheSim ``S3FIFO.c`` states it, in bytes.

    A small FIFO S of ``int(small × budget)`` bytes, a main FIFO M of the rest, a ghost FIFO G of
    ``int(ghost × budget)`` bytes of keys evicted from S. Each resident entry has a counter: a
    hit adds 1 (uncapped in S and M). A miss whose key is in G (removed from it at the lookup)
    enters M's head with counter 0; any other miss enters S's head with counter 0. Eviction:
    from M while M is over its size or S is empty, else from S. From S: the tail with counter
    ``>= threshold`` moves to M's head with counter 0 (no eviction, continue); else it is
    evicted into G. From M: the tail with counter ``>= 1`` is reinserted at M's head with
    counter ``min(counter, 3) - 1``; else it is evicted. Defaults ``small=0.1``, ``ghost=0.9``,
    ``threshold=2`` (libCacheSim's ``fifo-size-ratio``, ``ghost-size-ratio``,
    ``move-to-main-threshold``).

    libCacheSim's variant, matched here: until the first eviction, a miss that finds S full
    (``|S| >= small × budget``) enters M instead (warm-up); a key leaving S moves to M at counter >= 2 (the paper
    says > 1 on a 2-bit counter, the same), M's counter is capped at 3 only on reinsertion; an
    entry of size > the small FIFO is not admitted (and with size = the small FIFO, room is made
    and then the entry is still not admitted); so below ``1 / small`` entries of budget nothing
    is ever cached."""

    params = {"small": 0.1, "ghost": 0.9, "threshold": 2}

    def check_params(self):
        check_ratio(self, "small")
        if not 0.0 <= self.ghost <= 10.0:
            raise ConfigError(f"--policy s3fifo: ghost={self.ghost} is not in [0, 10]")
        if self.threshold < 1:
            raise ConfigError(f"--policy s3fifo: threshold={self.threshold} is not >= 1")

    def fast_replay(self, batches, budget_bytes, out):
        """Numba fast path (:func:`s3fifo_kernel`)."""
        bt, budget = batches, budget_bytes
        s3fifo_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                      bt.n_expert, budget, float(self.small), float(self.ghost),
                      int(self.threshold), out)

    def setup(self):
        c = self.budget_bytes
        self.s_max = int(c * self.small)
        self.m_max = c - self.s_max
        self.g_max = int(c * self.ghost)
        self.s: OrderedDict[int, int] = OrderedDict()
        self.m: OrderedDict[int, int] = OrderedDict()
        self.g: OrderedDict[int, None] = OrderedDict()
        self.s_bytes = self.m_bytes = self.g_bytes = 0
        self.from_ghost: set[int] = set()
        self.has_evicted = False

    def can_insert(self, size):
        return size <= self.s_max and size <= self.budget_bytes

    def hit(self, key, protected):
        if key in self.s:
            self.s[key] += 1
        else:
            self.m[key] += 1
        return []

    def miss(self, key):
        if self.g_max > 0 and key in self.g:
            del self.g[key]
            self.g_bytes -= self.size(key)
            self.from_ghost.add(key)

    def _to_ghost(self, key):
        size = self.size(key)
        if self.g_max <= 0 or size > self.g_max:
            return
        while self.g_bytes + size > self.g_max:
            k, _ = self.g.popitem(last=False)
            self.g_bytes -= self.size(k)
        self.g[key] = None
        self.g_bytes += size

    def _evict_small(self, protected):
        s, skipped, victim = self.s, [], None
        while s:
            k, f = s.popitem(last=False)
            if k in protected:
                skipped.append((k, f))
                continue
            size = self.size(k)
            self.s_bytes -= size
            if f >= self.threshold:
                self.m[k] = 0
                self.m_bytes += size
                continue
            self._to_ghost(k)
            victim = k
            break
        for k, f in reversed(skipped):
            s[k] = f
            s.move_to_end(k, last=False)
        return victim

    def _evict_main(self, protected):
        m, skipped, victim = self.m, [], None
        while m:
            k, f = m.popitem(last=False)
            if k in protected:
                skipped.append((k, f))
                continue
            if f >= 1:
                m[k] = min(f, 3) - 1
                continue
            self.m_bytes -= self.size(k)
            victim = k
            break
        for k, f in reversed(skipped):
            m[k] = f
            m.move_to_end(k, last=False)
        return victim

    def evict(self, protected, incoming):
        self.has_evicted = True
        if self.m_bytes > self.m_max or self.s_bytes == 0:
            return self._evict_main(protected)
        v = self._evict_small(protected)
        return v if v is not None else self._evict_main(protected)

    def insert(self, key, size, protected):
        if key in self.from_ghost:
            self.from_ghost.discard(key)
            self.m[key] = 0
            self.m_bytes += size
            return True, []
        if size >= self.s_max:
            return False, []
        if not self.has_evicted and self.s_bytes >= self.s_max:
            self.m[key] = 0                       # warm-up: S full before any eviction
            self.m_bytes += size
            return True, []
        self.s[key] = 0
        self.s_bytes += size
        return True, []


# s3fifo_kernel's lists: S (0), M (1), the ghost G (2).

@njit(cache=True, inline="always")
def _s3fifo_evict(b, touched, L, lbytes, freq, key_bytes,
                  n_expert, s_max, m_max, g_max, threshold):
    """One S3FIFO eviction (S=0, M=1, G=2); returns the victim or NONE."""
    S, M, G = 0, 1, 2
    use_main = lbytes[M] > m_max or lbytes[S] == 0
    if not use_main:
        k = oldest_free(L, S, touched, b)
        while k != NONE:
            nxt = L[k, 2]
            size = key_bytes[k // n_expert]
            unlink(L, k)
            lbytes[S] -= size
            if freq[k] >= threshold:
                push_head(L, M, k)
                lbytes[M] += size
                freq[k] = 0
                k = nxt
                while k != NONE and touched[k] == b:
                    k = L[k, 2]
                continue
            if g_max > 0 and size <= g_max:            # into the ghost FIFO
                while lbytes[G] + size > g_max:
                    g = tail(L, G)
                    unlink(L, g)
                    lbytes[G] -= key_bytes[g // n_expert]
                push_head(L, G, k)
                lbytes[G] += size
            return k
    k = oldest_free(L, M, touched, b)
    while k != NONE:
        nxt = L[k, 2]
        if freq[k] >= 1:
            f = freq[k]
            unlink(L, k)
            push_head(L, M, k)
            freq[k] = (f if f < 3 else 3) - 1
            if nxt == NONE:                            # a full round: again from the tail
                k = oldest_free(L, M, touched, b)
            else:
                k = nxt
                while k != NONE and touched[k] == b:
                    k = L[k, 2]
            continue
        unlink(L, k)
        lbytes[M] -= key_bytes[k // n_expert]
        return k
    return NONE


@njit(cache=True)
def s3fifo_kernel(keys, batch_start, batch_layer, batch_kind, key_bytes, n_expert, budget,
                  small, ghost, threshold, out):
    """:class:`S3FIFO` over a whole trace; counters added to ``out``."""
    S, M = 0, 1
    n_keys = key_bytes.size * n_expert
    L = new_lists(n_keys, 3)
    lbytes = np.zeros(3, np.int64)
    freq = np.zeros(n_keys, np.int32)
    touched, looked, pending = new_batch_marks(n_keys, keys.size)
    resident = np.zeros(n_keys, np.bool_)
    from_ghost = np.zeros(n_keys, np.bool_)
    s_max = np.int64(budget * small)
    m_max = budget - s_max
    g_max = np.int64(budget * ghost)
    has_evicted = False
    occ = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = key_bytes[batch_layer[b]]
        n_look = batch_lookups(keys, batch_start[b], batch_start[b + 1], b, touched, looked)
        n_p = 0
        for j in range(n_look):
            key = looked[j]
            if resident[key]:                        # a hit: its counter up
                freq[key] += 1
                continue
            if g_max > 0 and L[key, 0] == 2:         # a miss found in G leaves it (to M)
                unlink(L, key)
                lbytes[2] -= eb
                from_ghost[key] = True
            pending[n_p] = key
            n_p += 1
        count_batch(out, kd, eb, n_look, n_p)
        for p in range(n_p):
            key = pending[p]
            if not (eb <= s_max and eb <= budget):
                continue
            while occ + eb > budget:
                has_evicted = True
                v = _s3fifo_evict(b, touched, L, lbytes, freq,
                                  key_bytes, n_expert, s_max, m_max, g_max, threshold)
                if v == NONE:
                    break
                resident[v] = False
                occ -= key_bytes[v // n_expert]
                out[OUT_EVICT] += 1
            if from_ghost[key]:
                from_ghost[key] = False
                lst = M
            elif eb >= s_max:
                continue
            elif not has_evicted and lbytes[S] >= s_max:
                lst = M
            else:
                lst = S
            push_head(L, lst, key)
            lbytes[lst] += eb
            freq[key] = 0
            resident[key] = True
            occ += eb
        while occ > budget:
            has_evicted = True
            v = _s3fifo_evict(b, touched, L, lbytes, freq,
                              key_bytes, n_expert, s_max, m_max, g_max, threshold)
            if v == NONE:
                break
            resident[v] = False
            occ -= key_bytes[v // n_expert]
            out[OUT_EVICT] += 1
    out[OUT_RESIDENT] = occ
