"""``lirs``: LIRS (Jiang & Zhang, SIGMETRICS 2002), the paper's algorithm in bytes, under the
engine's batch rules (:mod:`refsim.cache.policies`); where and why it departs from libCacheSim's
``LIRS.c`` is on the class.
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


class LIRS(AdmitPolicy, name="lirs"):
    """LIRS (Jiang & Zhang, SIGMETRICS 2002), the paper's algorithm in bytes.

    Keys are LIR (low inter-reference recency: resident, the bulk of the budget) or HIR
    (resident in the small list Q, or non-resident but still remembered in the recency stack
    S). S orders keys by recency (LIR, resident HIR and non-resident HIR), and its bottom is
    always an LIR key (*pruning* removes HIR keys from the bottom). Sizes: the resident HIR part
    is ``max(int(hir × budget), largest entry)`` bytes, the LIR part the rest (none if negative).

    - Hit on an LIR key: it moves to the top of S (then prune).
    - Hit on a resident HIR key: it moves to the top of S. If it was in S, it becomes LIR and
      leaves Q, and while the LIR part is over its size the bottom LIR key of S is demoted to
      HIR at the end of Q (and leaves S; then prune). If it was not in S, it stays HIR and moves
      to the end of Q.
    - Miss: room is made by evicting Q's front (if the key is in S it stays there as
      non-resident HIR). A key remembered in S as non-resident HIR becomes LIR at the top of S,
      with demotions as above; a new key becomes LIR while the LIR part has room (warm-up),
      else resident HIR at the top of S and the end of Q.
    - S is bounded to ``stack × budget`` bytes of keys by forgetting the oldest non-resident HIR
      keys (libCacheSim's limitStack; the paper leaves S unbounded). A hit never evicts.

    Defaults ``hir=0.01`` (the paper's and libCacheSim's 1 %), ``stack=2.0``. When Q holds only
    protected keys (batches), the bottom-most untouched LIR key is evicted instead.

    Not equal to libCacheSim's ``LIRS.c``, which departs from the paper in two ways: a hit on a
    resident HIR key outside S demotes an LIR key first (the paper demotes none), and when that
    demotion evicts Q's front and the front is the hit key itself, the key is evicted from Q yet
    stays "resident" in S without being counted in the occupied bytes, so the cache holds more
    than its budget; on some traces libCacheSim's LIRS then has more hits than Belady's optimum
    (tests/cache/test_policies_libcachesim.py shows one), which no cache of that size can have.
    """

    params = {"hir": 0.01, "stack": 2.0}
    LIR, HIR, NONRES = 0, 1, 2

    def check_params(self):
        if not 0.0 < self.hir < 1.0:
            raise ConfigError(f"--policy lirs: hir={self.hir} is not in (0, 1)")
        if not self.stack >= 1.0:
            raise ConfigError(f"--policy lirs: stack={self.stack} is not >= 1")

    def fast_replay(self, batches, budget_bytes, out):
        """Numba fast path (:func:`lirs_kernel`)."""
        bt, budget = batches, budget_bytes
        lirs_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                    bt.n_expert, budget, float(self.hir), float(self.stack), out)

    def setup(self):
        c = self.budget_bytes
        self.hir_max = max(int(c * self.hir), max(self._eb))
        self.lir_max = max(0, c - self.hir_max)    # (a budget under two entries: no LIR part)
        self.s: OrderedDict[int, int] = OrderedDict()      # key -> LIR/HIR/NONRES; last = top
        self.q: OrderedDict[int, None] = OrderedDict()     # resident HIR; last = end
        self.nh: OrderedDict[int, None] = OrderedDict()    # non-resident HIR in S, oldest first
        self.s_bytes = self.lir_bytes = self.hir_bytes = 0
        self.s_max = int(self.stack * c)

    def _prune(self):
        s = self.s
        while s:
            k = next(iter(s))
            st = s[k]
            if st == self.LIR:
                return
            del s[k]
            self.s_bytes -= self.size(k)
            if st == self.NONRES:
                del self.nh[k]

    def _demote_bottom(self):
        self._prune()                             # (HIR keys can sit below when no LIR was)
        k = next(iter(self.s))                    # the bottom-most LIR key
        size = self.size(k)
        del self.s[k]
        self.s_bytes -= size
        self.lir_bytes -= size
        self.q[k] = None
        self.hir_bytes += size
        self._prune()

    def _limit_stack(self):
        while self.s_bytes > self.s_max and self.nh:
            k, _ = self.nh.popitem(last=False)
            del self.s[k]
            self.s_bytes -= self.size(k)

    def _to_lir(self, key, size):
        self.s[key] = self.LIR
        self.s.move_to_end(key)
        self.lir_bytes += size
        while self.lir_bytes > self.lir_max:
            self._demote_bottom()

    def hit(self, key, protected):
        size = self.size(key)
        st = self.s.get(key)
        if st == self.LIR:
            self.s.move_to_end(key)
            self._prune()
        elif st == self.HIR:
            del self.q[key]
            self.hir_bytes -= size
            self._to_lir(key, size)
        else:                                     # resident HIR not in S
            self.s[key] = self.HIR
            self.s_bytes += size
            self.q.move_to_end(key)
            self._limit_stack()
        return []

    def evict(self, protected, incoming):
        got = pop_oldest(self.q, protected)
        if got is not None:
            k = got[0]
            self.hir_bytes -= self.size(k)
            if k in self.s:
                self.s[k] = self.NONRES
                self.nh[k] = None
            return k
        for k, st in self.s.items():              # only protected HIR keys: an untouched LIR
            if st == self.LIR and k not in protected:
                size = self.size(k)
                del self.s[k]
                self.s_bytes -= size
                self.lir_bytes -= size
                self._prune()
                return k
        return None

    def insert(self, key, size, protected):
        st = self.s.get(key)
        if st == self.NONRES:
            del self.nh[key]
            self._to_lir(key, size)
        elif self.lir_bytes + size <= self.lir_max:
            self.s[key] = self.LIR
            self.s_bytes += size
            self.lir_bytes += size
        else:
            self.s[key] = self.HIR
            self.s_bytes += size
            self.q[key] = None
            self.hir_bytes += size
        self._limit_stack()
        return True, []


# lirs_kernel's three lists, each in its own table: the stack S (LS), Q (LQ, resident HIR) and
# NH (LH, non-resident HIR in S, oldest first); ``state`` per key: NONE not in S, LIR, HIR
# (resident) or NONRES; ``s_bytes``, ``lir_bytes``, ``hir_bytes`` = the bytes of S, of the LIR
# part and of the resident HIR part.
LIR, HIR, NONRES = 0, 1, 2


@njit(cache=True, inline="always")
def _lirs_prune(state, LS, LH, key_bytes, n_expert):
    """Remove HIR keys from the bottom of S (a non-resident one is forgotten); returns the
    bytes removed from S."""
    removed = 0
    while tail(LS, 0) != NONE and state[tail(LS, 0)] != LIR:
        k = tail(LS, 0)
        if state[k] == NONRES:
            unlink(LH, k)
        unlink(LS, k)
        state[k] = NONE
        removed += key_bytes[k // n_expert]
    return removed


@njit(cache=True, inline="always")
def _demote_while_over(state, LS, LQ, LH, s_bytes, lir_bytes, hir_bytes, lir_max, key_bytes,
                       n_expert):
    """While the LIR part is over its size, the bottom LIR key of S becomes resident HIR at the
    end of Q (:meth:`LIRS._demote_bottom`); returns the new (s_bytes, lir_bytes, hir_bytes)."""
    while lir_bytes > lir_max:
        s_bytes -= _lirs_prune(state, LS, LH, key_bytes, n_expert)
        k = tail(LS, 0)
        sz = key_bytes[k // n_expert]
        unlink(LS, k)
        state[k] = NONE
        s_bytes -= sz
        lir_bytes -= sz
        push_head(LQ, 0, k)
        hir_bytes += sz
        s_bytes -= _lirs_prune(state, LS, LH, key_bytes, n_expert)
    return s_bytes, lir_bytes, hir_bytes


@njit(cache=True, inline="always")
def _limit_stack(state, LS, LH, s_bytes, s_max, key_bytes, n_expert):
    """Forget the oldest non-resident HIR keys while S holds more than ``s_max`` bytes; returns
    the new s_bytes."""
    while s_bytes > s_max and tail(LH, 0) != NONE:
        k = tail(LH, 0)
        unlink(LH, k)
        unlink(LS, k)
        state[k] = NONE
        s_bytes -= key_bytes[k // n_expert]
    return s_bytes


@njit(cache=True)
def lirs_kernel(keys, batch_start, batch_layer, batch_kind, key_bytes, n_expert, budget,
                hir, stack, out):
    """:class:`LIRS` over a whole trace; counters added to ``out``."""
    n_keys = key_bytes.size * n_expert
    state = np.full(n_keys, NONE, np.int32)
    LS = new_lists(n_keys, 1)
    LQ = new_lists(n_keys, 1)
    LH = new_lists(n_keys, 1)
    touched, looked, pending = new_batch_marks(n_keys, keys.size)
    hir_max = max(np.int64(budget * hir), key_bytes.max())
    lir_max = max(np.int64(0), budget - hir_max)
    s_max = np.int64(stack * budget)
    s_bytes = 0
    lir_bytes = 0
    hir_bytes = 0
    occ = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = key_bytes[batch_layer[b]]
        n_look = batch_lookups(keys, batch_start[b], batch_start[b + 1], b, touched, looked)
        n_p = 0
        for j in range(n_look):
            key = looked[j]
            if not (state[key] == LIR or LQ[key, 0] == 0):
                pending[n_p] = key
                n_p += 1
                continue
            if state[key] == LIR:                    # a hit (LIRS.hit; a hit never evicts)
                unlink(LS, key)
                push_head(LS, 0, key)
                s_bytes -= _lirs_prune(state, LS, LH, key_bytes, n_expert)
            elif state[key] == HIR:
                unlink(LQ, key)
                hir_bytes -= eb
                unlink(LS, key)
                push_head(LS, 0, key)
                state[key] = LIR
                lir_bytes += eb
                s_bytes, lir_bytes, hir_bytes = _demote_while_over(
                    state, LS, LQ, LH, s_bytes, lir_bytes, hir_bytes, lir_max, key_bytes, n_expert)
            else:                                    # resident HIR not in S
                state[key] = HIR
                push_head(LS, 0, key)
                s_bytes += eb
                unlink(LQ, key)
                push_head(LQ, 0, key)
                s_bytes = _limit_stack(state, LS, LH, s_bytes, s_max, key_bytes, n_expert)
        count_batch(out, kd, eb, n_look, n_p)
        for q in range(n_p + 1):
            if q < n_p:
                key = pending[q]
                if eb > budget:
                    continue
                need = eb
            else:
                key = NONE
                need = 0
            while occ + need > budget:
                k = oldest_free(LQ, 0, touched, b)
                if k != NONE:
                    sz = key_bytes[k // n_expert]
                    unlink(LQ, k)
                    hir_bytes -= sz
                    if state[k] != NONE:
                        state[k] = NONRES
                        push_head(LH, 0, k)
                else:                                # only protected in Q: an untouched LIR
                    k = tail(LS, 0)
                    while k != NONE and not (state[k] == LIR and touched[k] != b):
                        k = LS[k, 2]
                    if k == NONE:
                        break
                    sz = key_bytes[k // n_expert]
                    unlink(LS, k)
                    state[k] = NONE
                    s_bytes -= sz
                    lir_bytes -= sz
                    s_bytes -= _lirs_prune(state, LS, LH, key_bytes, n_expert)
                occ -= sz
                out[OUT_EVICT] += 1
            if key == NONE:
                continue
            if state[key] == NONRES:
                unlink(LH, key)
                unlink(LS, key)
                push_head(LS, 0, key)
                state[key] = LIR
                lir_bytes += eb
                s_bytes, lir_bytes, hir_bytes = _demote_while_over(
                    state, LS, LQ, LH, s_bytes, lir_bytes, hir_bytes, lir_max, key_bytes, n_expert)
            elif lir_bytes + eb <= lir_max:
                state[key] = LIR
                push_head(LS, 0, key)
                s_bytes += eb
                lir_bytes += eb
            else:
                state[key] = HIR
                push_head(LS, 0, key)
                s_bytes += eb
                push_head(LQ, 0, key)
                hir_bytes += eb
            s_bytes = _limit_stack(state, LS, LH, s_bytes, s_max, key_bytes, n_expert)
            occ += eb
    out[OUT_RESIDENT] = occ
