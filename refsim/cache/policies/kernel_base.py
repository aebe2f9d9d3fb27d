"""What every policy kernel shares: the counter layout, the per-batch lookups and their
counting, and the per-layer partition runs; plus the bit helpers of the belady and random
kernels.

A kernel replays a whole :class:`~refsim.cache.batches.BatchTrace` under its policy's rules
and the engine's batch rules (bmoe-engine.md §3.2): one lookup per unique key per batch, the
batch's own entries protected, eviction after the lookups. Its counters go to ``out`` (layout
below), which :func:`refsim.cache.replay.replay_policy` turns into a
:class:`~refsim.cache.result.PolicyResult`.

A batch's occurrences become lookups in one place, :func:`batch_lookups` (each key once, at
its first occurrence), and its lookups, hits and read bytes are counted in one place,
:func:`count_batch` (libCacheSim's ``cache_get_base`` bookkeeping); between the two a kernel
applies its policy's hit and miss rules (the reference class's ``hit`` / ``miss``) and queues
its misses. Only ``lru`` and ``lfu`` walk the occurrences themselves, because they act on every
occurrence (a repeat moves the key again); they count with :func:`count_batch` too. Written as
a driver calling per-policy hooks instead, the kernels were 1.3-2.7 x slower (measured on the
qwen trace: Numba's reference counting of the hooks' state tuple). The queues a policy keeps are
lists of :mod:`refsim.cache.linked`.
"""

from __future__ import annotations

import numpy as np

from refsim.events import N_KINDS
from refsim.jit import njit

NK = N_KINDS
OUT_HITS, OUT_READ = NK, 2 * NK
OUT_EVICT, OUT_RESIDENT, OUT_WORDS = 3 * NK, 3 * NK + 1, 3 * NK + 2
N_COUNTERS = 3 * NK + 3
"""Layout of the ``out`` counters (NK = number of DecodeKinds): ``[0:NK]`` lookups per kind,
``[NK:2NK]`` hits, ``[2NK:3NK]`` read bytes, ``[3NK]`` evictions, ``[3NK+1]`` resident bytes
at the end, ``[3NK+2]`` random words consumed (-1 = the word pool ran out; call again)."""


@njit(cache=True)
def new_batch_marks(n_keys, n_occ):
    """The per-batch scratch of a kernel: ``touched`` (int32 per key, the batch index that last
    looked it up, -1 = none: compared with the current batch, so never cleared), ``looked``
    (int64, room for a batch's lookups) and ``pending`` (int32, room for its misses)."""
    n = max(1, n_occ)
    return np.full(n_keys, -1, np.int32), np.empty(n, np.int64), np.empty(n, np.int32)


@njit(cache=True, inline="always")
def batch_lookups(keys, lo, hi, b, marks, looked):
    """The lookups of batch ``b`` (occurrences ``lo .. hi - 1`` of ``keys``): each key once, at
    its first occurrence, in token-major order, written to ``looked``; returns their number.
    ``marks[key] = b`` marks a key found in the batch (a repeat is no lookup).

    A kernel then walks ``looked[:n]`` with its policy's hit and miss rules and queues its
    misses; :func:`count_batch` counts the batch. ``marks`` is the kernel's ``touched`` (the
    batch's keys, protected from eviction), except where a hit may evict during the walk (slru,
    tinylfu): there the reference protects only the keys looked up so far, so the kernel passes
    a separate array and marks ``touched`` as it walks.
    """
    n = 0
    for i in range(lo, hi):
        key = keys[i]
        if marks[key] != b:
            marks[key] = b
            looked[n] = key
            n += 1
    return n


@njit(cache=True, inline="always")
def count_batch(out, kd, eb, n_look, n_miss):
    """Count one batch of kind ``kd``: ``n_look`` lookups, ``n_look - n_miss`` hits and
    ``n_miss * eb`` read bytes (``eb`` = the batch layer's entry size)."""
    out[kd] += n_look
    out[OUT_HITS + kd] += n_look - n_miss
    out[OUT_READ + kd] += n_miss * eb


def replay_partitions(batches, shares, out, run) -> None:
    """Counters of a partitioned policy whose partitions are independent caches (a batch
    evicts only from its own layer): one ``run(keys, batch_start, batch_layer, batch_kind,
    share, part)`` per layer sub-trace (:func:`~refsim.cache.batches.layer_subtraces`) at its
    share of bytes, the parts summed into ``out``. The resident bytes at the end add up too."""
    from refsim.cache.batches import layer_subtraces

    part = np.zeros(N_COUNTERS, dtype=np.int64)
    for share, (keys, start, layers, kinds) in zip(shares, layer_subtraces(batches)):
        part[:] = 0
        run(keys, start, layers, kinds, int(share), part)
        out += part


@njit(cache=True, inline="always")
def popcount64(x):
    """Set bits of a uint64 (SWAR)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True, inline="always")
def lowest_bit(w):
    """Index of the lowest set bit of a non-zero uint64."""
    return popcount64((w & (~w + np.uint64(1))) - np.uint64(1))


@njit(cache=True, inline="always")
def msb64(x):
    """Index of the highest set bit of a non-zero uint64."""
    n = 0
    for sh in (32, 16, 8, 4, 2, 1):
        if x >> np.uint64(sh):
            x >>= np.uint64(sh)
            n += sh
    return n
