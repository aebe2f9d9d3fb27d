"""``random``: evict a uniformly drawn candidate, with the engine's generator (route-replay.py's
table, bmoe-engine.md §5).

Pinned by reproducing every point of the engine authors' ``qwen-curve.csv`` exactly
(tests/cache/test_policies_qwen.py, docs/cache-studies.md): the victim is
``random.Random(1234).choice`` over the unprotected resident keys in the order they became
resident (a hit does not reorder them). The fast paths (:func:`random_kernel`, and
:func:`random_partitioned_kernel` for a per-layer variant) replay CPython's own Mersenne Twister
words through CPython's ``_randbelow`` rule, so both paths pick the same victims.
"""

from __future__ import annotations

import random

import numpy as np

from refsim.cache.policies.base import Policy
from refsim.cache.policies.kernel_base import (OUT_EVICT, OUT_RESIDENT, OUT_WORDS, batch_lookups,
                                               count_batch, lowest_bit, new_batch_marks)
from refsim.errors import UsageError, value_message
from refsim.jit import njit


class RandomPolicy(Policy, name="random"):
    """Evict ``rng.choice(candidates)`` with ``rng = random.Random(seed)`` (default 1234, the
    engine's), candidates oldest-resident first. The fast path replays CPython's Mersenne
    Twister words, so both paths pick the same victims."""

    params = {"seed": 1234}

    def check_params(self):
        if self.seed < 0:       # random.Random(-1) seeds with abs(-1): the same victims as seed=1
            raise UsageError(value_message("--policy", "random:seed= an integer >= 0 (random.Random takes "
                                           "the absolute value of a negative seed)", self.seed))

    def reset(self, batches):
        self.rng = random.Random(self.seed)

    def to_evict(self, candidates):
        return self.rng.choice(candidates)

    def fast_replay(self, batches, budget_bytes, out):
        """:func:`random_kernel` (or, partitioned, :func:`random_partitioned_kernel`) on the
        first 2**17 words of the generator, run again on twice as many while a run reports the
        words ran out."""
        bt = batches
        shares = np.asarray(self.shares(bt, budget_bytes) if self.partitioned else [0], np.int64)
        words = self.fast_args()["words"]
        while True:
            out[:] = 0
            if not self.partitioned:
                random_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind,
                              bt.expert_bytes, bt.n_expert, budget_bytes, words, out)
            else:
                random_partitioned_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind,
                                          bt.expert_bytes, bt.n_expert, shares, words, out)
            if out[OUT_WORDS] >= 0:
                return
            words = self.fast_args(n_words=2 * max(words.size, 1024))["words"]

    def fast_args(self, n_words: int = 1 << 17) -> dict:
        """``{"words": w}``: the first ``n_words`` 32-bit outputs of ``random.Random(seed)``.

        ``getrandbits(32 * n)`` fills its result with successive 32-bit outputs, least
        significant first (CPython ``_randommodule.c``), so the little-endian words are the
        outputs in order (checked against ``getrandbits(32)`` in the tests). The stream of a
        seed never changes, so it is kept (read-only) per ``(seed, n_words)``: drawing 2**17
        words costs ~2 ms, more than the replay itself."""
        got = _WORDS.get((self.seed, n_words))
        if got is None:
            if len(_WORDS) > 16:
                _WORDS.clear()
            big = random.Random(self.seed).getrandbits(32 * n_words)
            got = np.frombuffer(big.to_bytes(4 * n_words, "little"), dtype="<u4")
            got.flags.writeable = False
            _WORDS[(self.seed, n_words)] = got
        return {"words": got}


_WORDS: dict[tuple[int, int], np.ndarray] = {}
"""MT19937 output words of ``random.Random(seed)`` per ``(seed, n_words)`` (RandomPolicy)."""


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
    return pos * 64 + lowest_bit(w)


@njit(cache=True)
def random_kernel(keys, batch_start, batch_layer, batch_kind, expert_bytes, n_expert,
                  budget_bytes, words, out):
    """:class:`RandomPolicy` (global budget) over a whole BatchTrace, O(log n) per eviction and
    O(1) per lookup; counters added to ``out``, the words consumed in ``out[OUT_WORDS]`` (-1:
    ``words`` ran out, call again with more).

    Resident keys are bits over insertion ranks (rank = the count of insertions so far, so the
    ranks order them as the reference's oldest-resident-first list does): a uint64 mask per 64
    ranks and a Fenwick tree over the masks' counts. The batch's hits stay in the tree; with
    ``T`` = their ranks, the ``r``-th unprotected candidate is the smallest rank ``x`` whose count
    of residents at or below it, less ``|T ∩ [0, x]|``, is ``r + 1``: ``x = select(r + 1 + j)``
    iterated from ``j = 0`` with ``j = |T ∩ [0, x]|`` until it stops changing (it only grows,
    and it stops at that ``x``). The batch's misses enter the tree after its evictions (they are
    protected). The draws are ``_randbelow(candidates)``, one per eviction, as in the reference.
    """
    n_keys = expert_bytes.size * n_expert
    n_rank = keys.size + 1
    n_word = n_rank // 64 + 1
    bits = np.zeros(n_word, np.uint64)
    tree = np.zeros(n_word + 1, np.int64)
    rank = np.zeros(n_keys, np.int64)
    key_of = np.zeros(n_rank + 1, np.int64)
    resident = np.zeros(n_keys, np.bool_)
    touched, looked, miss_key = new_batch_marks(n_keys, keys.size)
    hit_rank = np.empty(keys.size + 1, np.int64)
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
        n_look = batch_lookups(keys, batch_start[b], batch_start[b + 1], b, touched, looked)
        n_t = 0
        n_m = 0
        for j in range(n_look):
            key = looked[j]
            if resident[key]:                        # a hit: its rank is protected
                hit_rank[n_t] = rank[key]
                n_t += 1
            else:                                    # a miss: resident at once, ranked
                resident[key] = True
                n_ins += 1
                rank[key] = n_ins
                key_of[n_ins] = key
                miss_key[n_m] = key
                n_m += 1
        count_batch(out, kd, eb, n_look, n_m)
        res_bytes += n_m * eb
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
def random_partitioned_kernel(keys, batch_start, batch_layer, batch_kind, expert_bytes,
                              n_expert, shares, words, out):
    """:class:`RandomPolicy` with a per-layer partition (``partitioned``: layer ``l`` holds
    ``shares[l]`` bytes and a batch evicts only from its own layer) over a whole BatchTrace,
    the reference's scan written out: the candidates are the batch layer's untouched resident
    keys in insertion order, one ``_randbelow`` draw per eviction from the one generator (so the
    layers cannot be replayed apart). Counters and words as :func:`random_kernel`."""
    n_layer = expert_bytes.size
    n_keys = n_layer * n_expert
    resident = np.zeros(n_keys, np.bool_)
    touched, looked, _ = new_batch_marks(n_keys, keys.size)
    order = np.empty(n_keys, np.int64)               # resident keys in insertion order
    cand = np.empty(n_keys, np.int64)
    layer_res = np.zeros(n_layer, np.int64)
    n_res = 0
    res_bytes = 0
    wpos = 0
    for b in range(batch_layer.size):
        il = batch_layer[b]
        kd = batch_kind[b]
        eb = expert_bytes[il]
        n_look = batch_lookups(keys, batch_start[b], batch_start[b + 1], b, touched, looked)
        n_m = 0
        for j in range(n_look):
            key = looked[j]
            if not resident[key]:                    # a miss: resident at once, last in order
                resident[key] = True
                order[n_res] = key
                n_res += 1
                n_m += 1
        count_batch(out, kd, eb, n_look, n_m)
        res_bytes += n_m * eb
        layer_res[il] += n_m * eb
        while layer_res[il] > shares[il]:          # evict after the batch, in its own layer
            n_c = 0
            for j in range(n_res):
                key = order[j]
                if touched[key] != b and key // n_expert == il:
                    cand[n_c] = j
                    n_c += 1
            if n_c == 0:
                break                              # only protected entries left
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
