"""libCacheSim (PyPI ``libcachesim``) as an outside oracle for the cache policies.

On a trace whose every layer batch holds exactly one lookup (one MoE layer, top-1), the batch
rules reduce to the classic per-request setting, where libCacheSim's ``cache.get(request)``
and :func:`refsim.cache.replay.reference_replay` must count the same hits.

Mapping (one request per lookup): ``obj_id = key + 1`` (libCacheSim reserves nothing, the +1
keeps ids positive), ``obj_size`` = the layer's entry bytes, ``cache_size`` = the budget in
bytes; policies and parameters as :data:`LIBCACHESIM`. ``hashpower=16`` sizes the hash table
only (2**16 buckets); it changes no decision.
"""

from __future__ import annotations

import numpy as np

from refsim.cache.batches import BatchTrace
from refsim.events import DecodeEvent, DecodeKind

LIBCACHESIM = {
    "lru": ("LRU", {}),
    "fifo": ("FIFO", {}),
    "clock": ("Clock", {"bits": "n_bit_counter", "init": "init_freq"}),
    "slru": ("SLRU", {}),
    "2q": ("TwoQ", {"kin": "a_in_size_ratio", "kout": "a_out_size_ratio"}),
    "arc": ("ARC", {}),
    "tinylfu": ("WTinyLFU", {"window": "window_size"}),
    "s3fifo": ("S3FIFO", {"small": "small_size_ratio", "ghost": "ghost_size_ratio",
                          "threshold": "move_to_main_threshold"}),
}
"""refsim policy name -> (libcachesim class, {refsim parameter: libcachesim keyword}). slru's
``segments`` has no keyword in the Python binding (its default, 4, is libCacheSim's);
tinylfu compares on unit sizes only (:func:`comparable`). lirs is not here: libCacheSim's LIRS
is not a cache of its budget (refsim.cache.policies.lirs.LIRS)."""


def one_lookup_batches(ids, size: int, n_expert: int | None = None) -> BatchTrace:
    """A one-layer, top-1 BatchTrace: one PLAIN decode (= one batch = one lookup) per id.

    Parameters
    ----------
    ids : (n,) int array-like
        Expert ids (>= 0, < 2**15).
    size : int
        Entry bytes of the one layer.
    n_expert : int, optional
        Defaults to ``max(ids) + 1``.
    """
    ids = np.asarray(ids, dtype=np.int64)
    n_expert = int(ids.max()) + 1 if n_expert is None else n_expert
    evs = [DecodeEvent(DecodeKind.PLAIN, np.array([i], np.int64),
                       np.array([[[x]]], np.int16)) for i, x in enumerate(ids.tolist())]
    return BatchTrace.from_events(evs, [size], n_expert)


def lookup_stream(batches: BatchTrace) -> np.ndarray:
    """The keys of every lookup of ``batches`` in order (first occurrence in each batch):
    a real trace's key stream, to replay as one-lookup batches."""
    out = []
    keys, start = batches.keys, batches.batch_start
    for b in range(batches.n_batch):
        seg = keys[start[b]:start[b + 1]]
        _, first = np.unique(seg, return_index=True)
        out.append(seg[np.sort(first)])
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def comparable(name: str, budget: int, params: dict | None = None, size: int = 1) -> bool:
    """False where libcachesim 0.3.5 cannot be built: S3FIFO with an empty small or main FIFO
    (it logs "Invalid cache size configuration" and exits the process); and W-TinyLFU with
    sizes other than 1 (libCacheSim sizes its sketch by bytes: see refsim's TinyLFU)."""
    if name == "tinylfu":                      # and SLRU's first segment of main must be > 0
        window = int(budget * (params or {}).get("window", 0.01))
        return size == 1 and int(1.0 / 5 * (budget - window)) > 0
    if name == "s3fifo":
        small = int(budget * (params or {}).get("small", 0.1))
        return small > 0 and budget - small > 0
    return True


def libcachesim_hits(name: str, ids, size: int, budget: int, params: dict | None = None) -> int:
    """Hits of libCacheSim's ``name`` on one request per id (sizes ``size``, ``budget`` bytes)."""
    import libcachesim

    cls, mapping = LIBCACHESIM[name]
    kw = {mapping[k]: v for k, v in (params or {}).items()}
    cache = getattr(libcachesim, cls)(budget, hashpower=16, **kw)
    get, req = cache.get, libcachesim.Request
    return int(sum(get(req(obj_size=size, obj_id=int(x) + 1)) for x in np.asarray(ids).tolist()))
