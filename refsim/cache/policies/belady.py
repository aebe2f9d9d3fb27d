"""``belady``: Belady's furthest-next-use, an oracle bound (route-replay.py's table,
bmoe-engine.md §5).

Built from the whole trace (``BatchTrace.next_use``, the next batch index that uses a key), so
it is a bound, not a runnable cache. Ties (several keys with the same next use, e.g. never
again) go to the oldest-resident key; on the qwen trace every tie-break tried gives the same
curve (docs/cache-studies.md). The fast path (:func:`belady_kernel`) keeps keys in buckets by
next use, O(1) amortised per occurrence.
"""

from __future__ import annotations

import numpy as np

from refsim.cache.batches import _next_use
from refsim.cache.policies.base import Policy
from refsim.cache.policies.kernel_base import (OUT_EVICT, OUT_RESIDENT, batch_lookups,
                                               count_batch, lowest_bit, msb64, new_batch_marks,
                                               replay_partitions)
from refsim.jit import njit


class Belady(Policy, name="belady"):
    """Belady's furthest-next-use: evict the key whose next use (batch index) is furthest;
    never used again = infinity. Ties go to the oldest-resident key. An oracle: it is built
    from the whole trace (``BatchTrace.next_use``), so it is a bound, not a runnable cache."""

    def reset(self, batches):
        self.next_use: dict[int, int] = {}

    def on_access(self, key, clock, next_use):
        self.next_use[key] = next_use

    def to_evict(self, candidates):
        return max(candidates, key=self.next_use.__getitem__)   # first maximum wins

    def fast_replay(self, batches, budget_bytes, out):
        """:func:`belady_kernel` over the whole trace, or (partitioned) once per layer
        sub-trace at the layer's share with the sub-trace's own next uses (its batch indices:
        the same order, ``NEVER`` kept)."""
        bt = batches
        if not self.partitioned:
            belady_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.next_use,
                          bt.expert_bytes, bt.n_expert, budget_bytes, out)
            return
        n_keys = bt.n_layer * bt.n_expert
        replay_partitions(bt, self.shares(bt, budget_bytes), out,
                          lambda keys, start, layers, kinds, share, part: belady_kernel(
                              keys, start, layers, kinds, _next_use(keys, start, n_keys),
                              bt.expert_bytes, bt.n_expert, share, part))


@njit(cache=True)
def belady_kernel(keys, batch_start, batch_layer, batch_kind, next_use, expert_bytes,
                  n_expert, budget_bytes, out):
    """:class:`Belady` (global budget) over a whole BatchTrace: evict the untouched resident
    key of furthest next use, ties to the first resident (smallest insertion rank); O(1)
    amortised per occurrence, no heap; counters added to ``out``.

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
    touched, looked, _ = new_batch_marks(n_keys, keys.size)
    nuse = np.zeros(n_keys, np.int64)
    rank = np.zeros(n_keys, np.int64)
    cnt = np.zeros(n_batch + 1, np.int64)            # resident keys per finite next use
    qbits = np.zeros(n_batch // 64 + 1, np.uint64)   # non-empty buckets
    n_rank = keys.size + 1
    nbits = np.zeros(n_rank // 64 + 1, np.uint64)    # ranks of the NEVER bucket
    key_of = np.zeros(n_rank + 1, np.int64)
    topw = -1                                        # >= the highest non-zero word of qbits
    loww = nbits.size                                # <= the lowest non-zero word of nbits
    n_never = 0
    n_ins = 0
    res_bytes = 0
    for b in range(n_batch):
        kd = batch_kind[b]
        eb = expert_bytes[batch_layer[b]]
        lo = batch_start[b]
        hi = batch_start[b + 1]
        n_look = batch_lookups(keys, lo, hi, b, touched, looked)
        n_m = 0
        for j in range(n_look):                      # a miss enters after the evictions (in
            n_m += not resident[looked[j]]           # no bucket, it is never a victim)
        count_batch(out, kd, eb, n_look, n_m)
        res_bytes += n_m * eb
        while res_bytes > budget_bytes:
            if n_never > 0:
                while nbits[loww] == 0:
                    loww += 1
                w = nbits[loww]
                x = loww * 64 + lowest_bit(w)
                nbits[loww] = w & (w - np.uint64(1))
                n_never -= 1
                k = key_of[x]
            else:
                while topw >= 0 and qbits[topw] == 0:
                    topw -= 1
                if topw < 0:
                    break
                q = topw * 64 + msb64(qbits[topw])
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
        for i in range(lo, hi):                         # the batch's keys to their buckets, each
            key = keys[i]                               # at its first occurrence (its next use)
            if not resident[key]:                       # a miss: resident, ranked in order
                resident[key] = True
                n_ins += 1
                rank[key] = n_ins
                key_of[n_ins] = key
            elif nuse[key] == b:                        # a hit leaves bucket b
                cnt[b] -= 1
            else:
                continue                                # moved already
            nv = next_use[i]
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
