"""Numba kernels that replay a whole :class:`~refsim.cache.batches.BatchTrace` in one call.

``replay_kernel`` runs every built-in policy (bmoe-engine.md §5, route-replay.py's table) under
the engine's batch rules (§3.2): one lookup per unique key per batch, eviction after the batch,
the batch's own entries protected. A victim is the candidate with the smallest priority pair;
candidates are scanned in residency-insertion order and the first smallest wins:

==========  ==========================================  =====================================
kind        priority (smallest evicted first)           notes
==========  ==========================================  =====================================
LRU         (stamp, 0)                                  stamp = clock bumped per occurrence
LFU         (lookups of the key, stamp)                 lookup count kept across evictions
BELADY      (-next use in batch index, 0)               never again = infinity; ties: first
                                                        resident in insertion order
RANDOM      ``Random(seed).choice(candidates)``         CPython's ``_randbelow`` on MT words
==========  ==========================================  =====================================

``partitioned`` restricts the budget to ``shares[layer]`` bytes per layer (``budget_bytes //
n_layer`` each for 'layer' and 'layerlfu', the optimal split for 'layer-opt') and the victims to
the batch's own layer ('layer', 'layerlfu').

``lru_kernel`` is the same LRU as the LRU row above and as :class:`~refsim.cache.ExpertCache`,
on a lazily cleaned occurrence log (O(1) per occurrence): the fast path of 'lru'.
"""

from __future__ import annotations

from refsim.jit import njit
import numpy as np

from refsim.cache.linked import push_head, tail, unlink, new_lists
from refsim.events import N_KINDS

KIND_LRU, KIND_LFU, KIND_BELADY, KIND_RANDOM = 0, 1, 2, 3

NK = N_KINDS
OUT_HITS, OUT_READ = NK, 2 * NK
OUT_EVICT, OUT_RESIDENT, OUT_WORDS = 3 * NK, 3 * NK + 1, 3 * NK + 2
N_COUNTERS = 3 * NK + 3
"""Layout of the ``out`` counters (NK = number of DecodeKinds): ``[0:NK]`` lookups per kind,
``[NK:2NK]`` hits, ``[2NK:3NK]`` read bytes, ``[3NK]`` evictions, ``[3NK+1]`` resident bytes
at the end, ``[3NK+2]`` random words consumed (-1 = the word pool ran out; call again)."""


@njit(cache=True)
def _randbelow(n, words, wpos):
    """CPython's ``Random._randbelow(n)`` (n >= 1) on a stream of 32-bit MT19937 outputs.

    ``getrandbits(k)`` for ``k <= 32`` is one output word shifted right by ``32 - k``; values
    ``>= n`` are rejected and redrawn. Returns (value, next word index), value -1 when the
    stream ran out.
    """
    k = 0
    m = n
    while m > 0:
        k += 1
        m >>= 1
    while True:
        if wpos >= words.size:
            return -1, wpos
        r = np.int64(words[wpos] >> np.uint32(32 - k))
        wpos += 1
        if r < n:
            return r, wpos


@njit(cache=True)
def replay_kernel(kind, partitioned, keys, batch_start, batch_layer, batch_kind, next_use,
                  expert_bytes, n_expert, budget_bytes, shares, words, out):
    """Replay every batch under one policy; counters accumulate into ``out``.

    Parameters
    ----------
    kind : int
        ``KIND_LRU``, ``KIND_LFU``, ``KIND_BELADY`` or ``KIND_RANDOM``.
    partitioned : bool
        Per-layer budget ``budget_bytes // n_layer``, victims from the batch's layer only.
    keys, batch_start, batch_layer, batch_kind, next_use : ndarray
        The :class:`~refsim.cache.batches.BatchTrace` arrays.
    expert_bytes : (n_layer,) int64 ndarray
        Entry size per layer, bytes.
    n_expert, budget_bytes : int
    shares : (n_layer,) int64 ndarray
        Per-layer byte limits when ``partitioned`` (``Policy.shares``; ignored otherwise).
    words : (n_words,) uint32 ndarray
        MT19937 output words for ``KIND_RANDOM`` (ignored otherwise).
    out : (N_COUNTERS,) int64 ndarray
        Zeroed by the caller; see ``N_COUNTERS``.
    """
    n_layer = expert_bytes.size
    n_keys = n_layer * n_expert
    n_batch = batch_layer.size
    resident = np.zeros(n_keys, dtype=np.bool_)
    touched = np.full(n_keys, -1, dtype=np.int64)
    stamp = np.zeros(n_keys, dtype=np.int64)
    count = np.zeros(n_keys, dtype=np.int64)
    nuse = np.zeros(n_keys, dtype=np.int64)
    order = np.empty(n_keys, dtype=np.int64)       # resident keys in insertion order
    cand = np.empty(n_keys, dtype=np.int64)
    layer_res = np.zeros(n_layer, dtype=np.int64)
    n_res = 0
    res_bytes = 0
    clock = 0
    wpos = 0
    for b in range(n_batch):
        il = batch_layer[b]
        kd = batch_kind[b]
        eb = expert_bytes[il]
        for i in range(batch_start[b], batch_start[b + 1]):
            key = keys[i]
            clock += 1
            if touched[key] != b:                  # first occurrence in the batch: a lookup
                touched[key] = b
                out[kd] += 1
                count[key] += 1
                if resident[key]:
                    out[OUT_HITS + kd] += 1
                else:
                    resident[key] = True
                    order[n_res] = key
                    n_res += 1
                    res_bytes += eb
                    layer_res[il] += eb
                    out[OUT_READ + kd] += eb
            stamp[key] = clock
            nuse[key] = next_use[i]
        while True:                                # evict after the batch
            if partitioned:
                if layer_res[il] <= shares[il]:
                    break
            elif res_bytes <= budget_bytes:
                break
            n_c = 0
            best = -1
            bj = -1
            p1 = np.int64(0)
            p2 = np.int64(0)
            for j in range(n_res):
                key = order[j]
                if touched[key] == b:
                    continue                       # the batch's own entries are protected
                if partitioned and key // n_expert != il:
                    continue
                n_c += 1
                if kind == KIND_RANDOM:
                    cand[n_c - 1] = j
                    continue
                if kind == KIND_LRU:
                    q1 = stamp[key]
                    q2 = np.int64(0)
                elif kind == KIND_LFU:
                    q1 = count[key]
                    q2 = stamp[key]
                else:
                    q1 = -nuse[key]
                    q2 = np.int64(0)
                if best < 0 or q1 < p1 or (q1 == p1 and q2 < p2):
                    best = key
                    bj = j
                    p1 = q1
                    p2 = q2
            if n_c == 0:
                break                              # only protected entries left
            if kind == KIND_RANDOM:
                r, wpos = _randbelow(n_c, words, wpos)
                if r < 0:
                    out[OUT_WORDS] = -1
                    return
                bj = cand[r]
                best = order[bj]
            for q in range(bj, n_res - 1):
                order[q] = order[q + 1]
            n_res -= 1
            resident[best] = False
            sz = expert_bytes[best // n_expert]
            res_bytes -= sz
            layer_res[best // n_expert] -= sz
            out[OUT_EVICT] += 1
    out[OUT_RESIDENT] = res_bytes
    out[OUT_WORDS] = wpos


@njit(cache=True)
def lru_kernel(keys, batch_start, batch_layer, batch_kind, expert_bytes, n_expert,
               budget_bytes, out):
    """The engine's LRU over a whole BatchTrace (same rules and counters as ``replay_kernel``
    with ``KIND_LRU`` and as :class:`~refsim.cache.ExpertCache`), O(1) per occurrence.

    The recency order is kept as a log of occurrences (occurrence i writes its key at
    ``log[i]`` = ``keys[i]`` and the key's stamp becomes i); an entry of the log is live while
    its key is resident and still carries that stamp. The least recent resident key is the first
    live entry from the front, so eviction advances a front pointer; nothing is ever unlinked.
    The stamp also answers both batch questions: an occurrence is the key's first in batch ``b``
    (a lookup) iff the key's stamp is below the batch's first occurrence index, and a live entry
    belongs to the batch (protected) iff its stamp is at or above it. The lookup loop is
    branch-free (hit/miss outcomes are data-dependent and would defeat the branch predictor).
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
        miss_bytes = (n_look - n_hit) * eb
        out[kd] += n_look
        out[OUT_HITS + kd] += n_hit
        out[OUT_READ + kd] += miss_bytes
        res_bytes += miss_bytes
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


@njit(cache=True, inline="always")
def _popcount64(x):
    """Set bits of a uint64 (SWAR)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True, inline="always")
def _select(bits, tree, top, n_word, r):
    """Rank of the ``r``-th (1-based) resident entry: a Fenwick descent over the per-word counts
    ``tree`` (1-based words) to the word, then the bit inside the word's mask ``bits``."""
    pos = 0
    rem = r
    step = top
    while step > 0:
        nxt = pos + step
        if nxt <= n_word and tree[nxt] < rem:
            pos = nxt
            rem -= tree[nxt]
        step >>= 1
    w = bits[pos]                                    # word pos (0-based) holds the rem-th bit
    for _ in range(rem - 1):
        w &= w - np.uint64(1)
    return pos * 64 + _popcount64((w & (~w + np.uint64(1))) - np.uint64(1))


@njit(cache=True, inline="always")
def _msb64(x):
    """Index of the highest set bit of a non-zero uint64."""
    n = 0
    for sh in (32, 16, 8, 4, 2, 1):
        if x >> np.uint64(sh):
            x >>= np.uint64(sh)
            n += sh
    return n


@njit(cache=True)
def belady_kernel(keys, batch_start, batch_layer, batch_kind, next_use, expert_bytes,
                  n_expert, budget_bytes, out):
    """``KIND_BELADY`` exactly as :func:`replay_kernel` (global budget): evict the untouched
    resident key of furthest next use, ties to the first resident (smallest insertion rank);
    O(1) amortised per occurrence, no heap.

    Every resident key has a next use after the current batch ``b`` (an untouched one was not
    used in ``b``; a touched one's next use is after ``b``). Keys are kept in buckets by next
    use, and a key's move to its new bucket is deferred until after the batch's evictions, so
    during them the batch's hits still sit in bucket ``b`` (below every other resident's) and
    its misses in none: every bucket above ``b`` holds only candidates, and nothing is skipped.

    - ``NEVER`` (never used again, evicted first): a key stays there until evicted, so the
      bucket is a bit set over insertion ranks, taken from the lowest rank (the tie-break).
    - A finite next use ``q``: the members are the keys of batch ``q`` that are resident with
      next use ``q``, so only a count per bucket is kept (and a bit per non-empty bucket);
      the victim is the smallest-rank member, found by scanning batch ``q``'s keys.
    """
    n_keys = expert_bytes.size * n_expert
    n_batch = batch_layer.size
    never = next_use.dtype.type(np.iinfo(np.int64).max)
    resident = np.zeros(n_keys, np.bool_)
    touched = np.full(n_keys, -1, np.int64)
    nuse = np.zeros(n_keys, np.int64)
    rank = np.zeros(n_keys, np.int64)
    cnt = np.zeros(n_batch + 1, np.int64)            # resident keys per finite next use
    qbits = np.zeros(n_batch // 64 + 1, np.uint64)   # non-empty buckets
    n_rank = keys.size + 1
    nbits = np.zeros(n_rank // 64 + 1, np.uint64)    # ranks of the NEVER bucket
    key_of = np.zeros(n_rank + 1, np.int64)
    batch_keys = np.empty(keys.size + 1, np.int64)
    batch_nu = np.empty(keys.size + 1, np.int64)
    topw = -1                                        # >= the highest non-zero word of qbits
    loww = nbits.size                                # <= the lowest non-zero word of nbits
    n_never = 0
    n_ins = 0
    res_bytes = 0
    for b in range(n_batch):
        kd = batch_kind[b]
        eb = expert_bytes[batch_layer[b]]
        n_b = 0
        n_m = 0
        for i in range(batch_start[b], batch_start[b + 1]):
            key = keys[i]
            if touched[key] == b:
                continue
            touched[key] = b
            batch_keys[n_b] = key
            batch_nu[n_b] = next_use[i]                 # the same for all its occurrences here
            n_b += 1
            out[kd] += 1
            if resident[key]:
                out[OUT_HITS + kd] += 1
            else:
                resident[key] = True
                n_ins += 1
                rank[key] = n_ins
                key_of[n_ins] = key
                nuse[key] = -1                          # in no bucket until the batch ends
                n_m += 1
                res_bytes += eb
        out[OUT_READ + kd] += n_m * eb
        while res_bytes > budget_bytes:
            if n_never > 0:
                while nbits[loww] == 0:
                    loww += 1
                w = nbits[loww]
                x = loww * 64 + _popcount64((w & (~w + np.uint64(1))) - np.uint64(1))
                nbits[loww] = w & (w - np.uint64(1))
                n_never -= 1
                k = key_of[x]
            else:
                while topw >= 0 and qbits[topw] == 0:
                    topw -= 1
                if topw < 0:
                    break
                q = topw * 64 + _msb64(qbits[topw])
                if q <= b:
                    break                               # only the batch's own keys are left
                k = -1
                best = n_rank
                for i in range(batch_start[q], batch_start[q + 1]):
                    c = keys[i]
                    if resident[c] and nuse[c] == q and rank[c] < best:
                        best = rank[c]
                        k = c
                cnt[q] -= 1
                if cnt[q] == 0:
                    qbits[q >> 6] &= ~(np.uint64(1) << np.uint64(q & 63))
            resident[k] = False
            res_bytes -= expert_bytes[k // n_expert]
            out[OUT_EVICT] += 1
        for j in range(n_b):                            # the batch's keys to their buckets
            key = batch_keys[j]
            if nuse[key] == b:
                cnt[b] -= 1
            nv = batch_nu[j]
            if nv == never:
                x = rank[key]
                nbits[x >> 6] |= np.uint64(1) << np.uint64(x & 63)
                if (x >> 6) < loww:
                    loww = x >> 6
                n_never += 1
                nuse[key] = -2
            else:
                nuse[key] = nv
                cnt[nv] += 1
                qbits[nv >> 6] |= np.uint64(1) << np.uint64(nv & 63)
                if (nv >> 6) > topw:
                    topw = nv >> 6
        if cnt[b] == 0:
            qbits[b >> 6] &= ~(np.uint64(1) << np.uint64(b & 63))
    out[OUT_RESIDENT] = res_bytes


@njit(cache=True)
def random_kernel(keys, batch_start, batch_layer, batch_kind, expert_bytes, n_expert,
                  budget_bytes, words, out):
    """``KIND_RANDOM`` exactly as :func:`replay_kernel` (global budget), O(log n) per eviction
    and O(1) per lookup.

    Resident keys are bits over insertion ranks (rank = the count of insertions so far, so the
    ranks order them as the scan's insertion-order array does): a uint64 mask per 64 ranks and
    a Fenwick tree over the masks' counts. The batch's hits stay in the tree; with ``T`` = their
    ranks, the ``r``-th unprotected candidate is the smallest rank ``x`` whose count of residents
    at or below it, less ``|T ∩ [0, x]|``, is ``r + 1``: ``x = select(r + 1 + j)`` iterated from
    ``j = 0`` with ``j = |T ∩ [0, x]|`` until it stops changing (it only grows, and it stops at
    that ``x``). The batch's misses enter the tree after its evictions (they are protected). The
    draws are ``_randbelow(candidates)``, one per eviction, as in the scan.
    """
    n_keys = expert_bytes.size * n_expert
    n_rank = keys.size + 1
    n_word = n_rank // 64 + 1
    bits = np.zeros(n_word, np.uint64)
    tree = np.zeros(n_word + 1, np.int64)
    rank = np.zeros(n_keys, np.int64)
    key_of = np.zeros(n_rank + 1, np.int64)
    resident = np.zeros(n_keys, np.bool_)
    touched = np.full(n_keys, -1, np.int64)
    hit_rank = np.empty(keys.size + 1, np.int64)
    miss_key = np.empty(keys.size + 1, np.int64)
    top = 1
    while top * 2 <= n_word:
        top *= 2
    n_ins = 0
    total = 0                                        # resident keys in the tree
    res_bytes = 0
    wpos = 0
    for b in range(batch_layer.size):
        kd = batch_kind[b]
        eb = expert_bytes[batch_layer[b]]
        n_t = 0
        n_m = 0
        for i in range(batch_start[b], batch_start[b + 1]):
            key = keys[i]
            if touched[key] == b:
                continue
            touched[key] = b
            out[kd] += 1
            if resident[key]:
                out[OUT_HITS + kd] += 1
                hit_rank[n_t] = rank[key]
                n_t += 1
            else:
                resident[key] = True
                n_ins += 1
                rank[key] = n_ins
                key_of[n_ins] = key
                miss_key[n_m] = key
                n_m += 1
                res_bytes += eb
        out[OUT_READ + kd] += n_m * eb
        while res_bytes > budget_bytes and total > n_t:
            r, wpos = _randbelow(total - n_t, words, wpos)
            if r < 0:
                out[OUT_WORDS] = -1
                return
            j = 0
            while True:                              # the (r + 1)-th untouched resident
                x = _select(bits, tree, top, n_word, r + 1 + j)
                c = 0
                for q in range(n_t):
                    c += hit_rank[q] <= x
                if c == j:
                    break
                j = c
            k = key_of[x]
            bits[x >> 6] &= ~(np.uint64(1) << np.uint64(x & 63))
            w = (x >> 6) + 1
            while w <= n_word:
                tree[w] -= 1
                w += w & -w
            total -= 1
            resident[k] = False
            res_bytes -= expert_bytes[k // n_expert]
            out[OUT_EVICT] += 1
        for q in range(n_m):                         # the batch's misses become candidates
            x = rank[miss_key[q]]
            bits[x >> 6] |= np.uint64(1) << np.uint64(x & 63)
            w = (x >> 6) + 1
            while w <= n_word:
                tree[w] += 1
                w += w & -w
        total += n_m
    out[OUT_RESIDENT] = res_bytes
    out[OUT_WORDS] = wpos


@njit(cache=True)
def lfu_kernel(keys, batch_start, batch_layer, batch_kind, expert_bytes, n_expert,
               budget_bytes, out):
    """``KIND_LFU`` exactly as :func:`replay_kernel` (global budget), O(1) amortised per
    occurrence: resident keys sit in one list per lookup count, each ordered by stamp (a key
    moves to its list's head on every occurrence, so the tail is the least recent); the victim
    is the tail-most untouched key of the lowest non-empty count, which is the scan's smallest
    (count, stamp) pair (stamps are unique, so there are no ties)."""
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
        for i in range(batch_start[b], batch_start[b + 1]):
            key = keys[i]
            if resident[key]:                        # out of its count list
                unlink(L, key)
            if touched[key] != b:
                touched[key] = b
                out[kd] += 1
                count[key] += 1
                if resident[key]:
                    out[OUT_HITS + kd] += 1
                else:
                    resident[key] = True
                    res_bytes += eb
                    out[OUT_READ + kd] += eb
            c = count[key]                           # to the head of its count list
            push_head(L, c, key)
            if c < minc:
                minc = c
        c = minc
        while res_bytes > budget_bytes and c < max_c:
            k = tail(L, c)
            while k != -1 and touched[k] == b:
                k = L[k, 2]
            if k == -1:
                c += 1
                continue
            unlink(L, k)
            resident[k] = False
            res_bytes -= expert_bytes[k // n_expert]
            out[OUT_EVICT] += 1
        while minc < max_c and tail(L, minc) == -1:
            minc += 1
    out[OUT_RESIDENT] = res_bytes
