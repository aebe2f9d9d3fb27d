"""Numba fast paths of the admit-protocol policies (fifo, clock, arc, s3fifo).

Each kernel replays a whole :class:`~refsim.cache.batches.BatchTrace` under exactly the rules
of :func:`refsim.cache.policy.reference_replay` for its policy (the classes in
:mod:`refsim.cache.admit_policies` are the definitions; the property tests check every counter
of both paths on drawn streams). The queues are doubly linked lists in one table ``L``
(:mod:`refsim.cache.linked`), one membership per key (``L[key, 0]``: which list, or -1),
head = newest, tail = oldest; ``L[k, 1]`` points toward the tail, ``L[k, 2]`` toward the head.
"The oldest untouched entry" walks from the tail toward the head, passing over keys the batch
touched, which is how the reference passes over protected entries in place.

Counters go to ``out`` with the layout of :mod:`refsim.cache.policy_kernel` (``N_COUNTERS``).
"""

from __future__ import annotations

from refsim.jit import njit
import numpy as np

from refsim.cache.policy_kernel import OUT_EVICT, OUT_HITS, OUT_READ, OUT_RESIDENT

from refsim.cache.linked import (NONE, head, oldest_free, push_head, tail,  # noqa: F401
                                 unlink, new_batch_marks, new_lists)


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
    """S3FIFO (:class:`refsim.cache.admit_policies.S3FIFO`) over a whole trace."""
    S, M = 0, 1
    n_keys = key_bytes.size * n_expert
    L = new_lists(n_keys, 3)
    lbytes = np.zeros(3, np.int64)
    freq = np.zeros(n_keys, np.int32)
    touched, pending = new_batch_marks(n_keys, keys.size)
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
        n_p = 0
        for i in range(batch_start[b], batch_start[b + 1]):
            key = keys[i]
            if touched[key] == b:
                continue
            touched[key] = b
            out[kd] += 1
            if resident[key]:
                out[OUT_HITS + kd] += 1
                freq[key] += 1
            else:
                out[OUT_READ + kd] += eb
                if g_max > 0 and L[key, 0] == 2:
                    unlink(L, key)
                    lbytes[2] -= eb
                    from_ghost[key] = True
                pending[n_p] = key
                n_p += 1
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


@njit(cache=True)
def fifo_clock_kernel(keys, batch_start, batch_layer, batch_kind, key_bytes, n_expert, budget,
                      max_freq, init, out):
    """FIFO (``max_freq`` = 0) or CLOCK with counters up to ``max_freq``
    (:class:`~refsim.cache.admit_policies.FIFO`, :class:`~refsim.cache.admit_policies.Clock`)."""
    n_keys = key_bytes.size * n_expert
    L = new_lists(n_keys, 1)
    freq = np.zeros(n_keys, np.int32)
    touched, pending = new_batch_marks(n_keys, keys.size)
    occ = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = key_bytes[batch_layer[b]]
        n_p = 0
        for i in range(batch_start[b], batch_start[b + 1]):
            key = keys[i]
            if touched[key] == b:
                continue
            touched[key] = b
            out[kd] += 1
            if L[key, 0] == 0:
                out[OUT_HITS + kd] += 1
                if freq[key] < max_freq:
                    freq[key] += 1
            else:
                out[OUT_READ + kd] += eb
                pending[n_p] = key
                n_p += 1
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
    """ARC (:class:`refsim.cache.admit_policies.ARC`) over a whole trace."""
    n_keys = key_bytes.size * n_expert
    L = new_lists(n_keys, 4)
    lbytes = np.zeros(4, np.int64)
    touched, pending = new_batch_marks(n_keys, keys.size)
    ghost_of = np.zeros(n_keys, np.int8)
    p = 0.0
    fbudget = float(budget)
    occ = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = key_bytes[batch_layer[b]]
        n_p = 0
        for i in range(batch_start[b], batch_start[b + 1]):
            key = keys[i]
            if touched[key] == b:
                continue
            touched[key] = b
            out[kd] += 1
            w = L[key, 0]
            if w == 0 or w == 1:
                out[OUT_HITS + kd] += 1
                unlink(L, key)
                push_head(L, 1, key)
                if w == 0:
                    lbytes[0] -= eb
                    lbytes[1] += eb
                continue
            out[OUT_READ + kd] += eb
            if w == 2:
                delta = lbytes[3] / lbytes[2]
                if delta < 1.0:
                    delta = 1.0
                p = min(p + delta, fbudget)
                lbytes[2] -= eb
                unlink(L, key)
                ghost_of[key] = 1
            elif w == 3:
                delta = lbytes[2] / lbytes[3]
                if delta < 1.0:
                    delta = 1.0
                p = max(p - delta, 0.0)
                lbytes[3] -= eb
                unlink(L, key)
                ghost_of[key] = 2
            pending[n_p] = key
            n_p += 1
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


@njit(cache=True, inline="always")
def _slru_evict(b, touched, L, lbytes, key_bytes, n_expert, n_seg):
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
    """SLRU (:class:`refsim.cache.admit_policies.SLRU`) over a whole trace."""
    n_keys = key_bytes.size * n_expert
    L = new_lists(n_keys, n_seg)
    lbytes = np.zeros(n_seg, np.int64)
    seg_max = budget // n_seg
    touched, pending = new_batch_marks(n_keys, keys.size)
    occ = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = key_bytes[batch_layer[b]]
        n_p = 0
        for i in range(batch_start[b], batch_start[b + 1]):
            key = keys[i]
            if touched[key] == b:
                continue
            touched[key] = b
            out[kd] += 1
            w = L[key, 0]
            if w == NONE:
                out[OUT_READ + kd] += eb
                pending[n_p] = key
                n_p += 1
                continue
            out[OUT_HITS + kd] += 1
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
                        v = _slru_evict(b, touched, L, lbytes,
                                        key_bytes, n_expert, n_seg)
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
                v = _slru_evict(b, touched, L, lbytes, key_bytes,
                                n_expert, n_seg)
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


@njit(cache=True)
def twoq_kernel(keys, batch_start, batch_layer, batch_kind, key_bytes, n_expert, budget, kin,
                kout, out):
    """2Q (:class:`refsim.cache.admit_policies.TwoQ`) over a whole trace: lists A1in (0),
    A1out (1, ghost), Am (2)."""
    AIN, AOUT, AM = 0, 1, 2
    n_keys = key_bytes.size * n_expert
    L = new_lists(n_keys, 3)
    lbytes = np.zeros(3, np.int64)
    touched, pending = new_batch_marks(n_keys, keys.size)
    from_ghost = np.zeros(n_keys, np.bool_)
    ain_max = np.int64(budget * kin)
    aout_max = np.int64(budget * kout)
    am_max = budget - ain_max
    occ = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = key_bytes[batch_layer[b]]
        n_p = 0
        for i in range(batch_start[b], batch_start[b + 1]):
            key = keys[i]
            if touched[key] == b:
                continue
            touched[key] = b
            out[kd] += 1
            w = L[key, 0]
            if w == AIN or w == AM:
                out[OUT_HITS + kd] += 1
                if w == AM:
                    unlink(L, key)
                    push_head(L, AM, key)
                continue
            out[OUT_READ + kd] += eb
            if w == AOUT:
                unlink(L, key)
                lbytes[AOUT] -= eb
                from_ghost[key] = True
            pending[n_p] = key
            n_p += 1
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


@njit(cache=True, inline="always")
def _lirs_prune(st, LS, LH, key_bytes, n_expert):
    """Remove HIR keys from the bottom of S (a non-resident one is forgotten); returns the
    bytes removed from S."""
    removed = 0
    while tail(LS, 0) != NONE and st[tail(LS, 0)] != 0:
        k = tail(LS, 0)
        if st[k] == 2:
            unlink(LH, k)
        unlink(LS, k)
        st[k] = NONE
        removed += key_bytes[k // n_expert]
    return removed


@njit(cache=True)
def lirs_kernel(keys, batch_start, batch_layer, batch_kind, key_bytes, n_expert, budget,
                hir, stack, out):
    """LIRS (:class:`refsim.cache.admit_policies.LIRS`) over a whole trace. Three lists with
    their own links: the stack S (state per key: -1 not in S, 0 LIR, 1 resident HIR,
    2 non-resident HIR), Q (resident HIR) and NH (non-resident HIR in S, oldest first)."""
    LIR, HIR, NONRES = 0, 1, 2
    n_keys = key_bytes.size * n_expert
    st = np.full(n_keys, NONE, np.int32)
    LS = new_lists(n_keys, 1)
    LQ = new_lists(n_keys, 1)
    LH = new_lists(n_keys, 1)
    touched, pending = new_batch_marks(n_keys, keys.size)
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
        n_p = 0
        for i in range(batch_start[b], batch_start[b + 1]):
            key = keys[i]
            if touched[key] == b:
                continue
            touched[key] = b
            out[kd] += 1
            if not (st[key] == LIR or LQ[key, 0] == 0):
                out[OUT_READ + kd] += eb
                pending[n_p] = key
                n_p += 1
                continue
            out[OUT_HITS + kd] += 1
            if st[key] == LIR:
                unlink(LS, key)
                push_head(LS, 0, key)
                promote = False
            elif st[key] == HIR:
                unlink(LQ, key)
                hir_bytes -= eb
                unlink(LS, key)
                push_head(LS, 0, key)
                st[key] = LIR
                lir_bytes += eb
                promote = True
            else:                                    # resident HIR not in S
                st[key] = HIR
                push_head(LS, 0, key)
                s_bytes += eb
                unlink(LQ, key)
                push_head(LQ, 0, key)
                promote = False
                while s_bytes > s_max and tail(LH, 0) != NONE:      # limit the stack
                    k = tail(LH, 0)
                    unlink(LH, k)
                    unlink(LS, k)
                    st[k] = NONE
                    s_bytes -= key_bytes[k // n_expert]
            if promote:
                while lir_bytes > lir_max:                     # demote the bottom LIR
                    s_bytes -= _lirs_prune(st, LS, LH, key_bytes, n_expert)
                    k = tail(LS, 0)
                    sz = key_bytes[k // n_expert]
                    unlink(LS, k)
                    st[k] = NONE
                    s_bytes -= sz
                    lir_bytes -= sz
                    push_head(LQ, 0, k)
                    hir_bytes += sz
                    s_bytes -= _lirs_prune(st, LS, LH, key_bytes, n_expert)
            elif st[key] == LIR:
                s_bytes -= _lirs_prune(st, LS, LH,
                                       key_bytes, n_expert)
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
                    if st[k] != NONE:
                        st[k] = NONRES
                        push_head(LH, 0, k)
                else:                                # only protected in Q: an untouched LIR
                    k = tail(LS, 0)
                    while k != NONE and not (st[k] == LIR and touched[k] != b):
                        k = LS[k, 2]
                    if k == NONE:
                        break
                    sz = key_bytes[k // n_expert]
                    unlink(LS, k)
                    st[k] = NONE
                    s_bytes -= sz
                    lir_bytes -= sz
                    s_bytes -= _lirs_prune(st, LS, LH, key_bytes, n_expert)
                occ -= sz
                out[OUT_EVICT] += 1
            if key == NONE:
                continue
            if st[key] == NONRES:
                unlink(LH, key)
                unlink(LS, key)
                push_head(LS, 0, key)
                st[key] = LIR
                lir_bytes += eb
                while lir_bytes > lir_max:
                    s_bytes -= _lirs_prune(st, LS, LH, key_bytes, n_expert)
                    k = tail(LS, 0)
                    sz = key_bytes[k // n_expert]
                    unlink(LS, k)
                    st[k] = NONE
                    s_bytes -= sz
                    lir_bytes -= sz
                    push_head(LQ, 0, k)
                    hir_bytes += sz
                    s_bytes -= _lirs_prune(st, LS, LH, key_bytes, n_expert)
            elif lir_bytes + eb <= lir_max:
                st[key] = LIR
                push_head(LS, 0, key)
                s_bytes += eb
                lir_bytes += eb
            else:
                st[key] = HIR
                push_head(LS, 0, key)
                s_bytes += eb
                push_head(LQ, 0, key)
                hir_bytes += eb
            while s_bytes > s_max and tail(LH, 0) != NONE:
                k = tail(LH, 0)
                unlink(LH, k)
                unlink(LS, k)
                st[k] = NONE
                s_bytes -= key_bytes[k // n_expert]
            occ += eb
    out[OUT_RESIDENT] = occ


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
    """W-TinyLFU (:class:`refsim.cache.admit_policies.TinyLFU`) over a whole trace: lists window
    (0), main segment 0 (1) and 1 (2); ``slots[key]`` = the key's counters in the Bloom
    filter (from :class:`~refsim.cache.admit_policies._CountingBloomFilter`)."""
    W = 0
    n_keys = key_bytes.size * n_expert
    L = new_lists(n_keys, 3)
    lbytes = np.zeros(3, np.int64)
    seg_max = np.array([w_max, seg0_max, seg1_max], np.int64)
    n_counters = bf.size
    touched, pending = new_batch_marks(n_keys, keys.size)
    m_cap = budget - w_max
    requests = 0
    occ = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = key_bytes[batch_layer[b]]
        n_p = 0
        for i in range(batch_start[b], batch_start[b + 1]):
            key = keys[i]
            if touched[key] == b:
                continue
            touched[key] = b
            out[kd] += 1
            w = L[key, 0]
            if w == NONE:
                out[OUT_READ + kd] += eb
                pending[n_p] = key
                n_p += 1
                continue
            out[OUT_HITS + kd] += 1
            if w == W:
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
                        v = _main_evict(b, touched, L, lbytes,
                                        key_bytes, n_expert)
                        if v == NONE:
                            stuck = True
                        else:
                            occ -= key_bytes[v // n_expert]
                            out[OUT_EVICT] += 1
            _cbf_add(bf, slots, key)
            requests += 1
            if requests >= max_requests:
                requests = 0
                for j in range(n_counters):
                    bf[j] >>= 1
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
