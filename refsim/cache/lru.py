"""The engine's expert cache: one global LRU over (layer, expert) with a byte budget.

Rules (bmoe-engine.md §3.2, "LRU mode"; the engine's expert_stream_source.cpp):

1. One ``load_layer`` call per layer per decode graph. Its ids are token-major (position,
   then slot). Each *unique* id is one lookup: a hit promotes the entry to most recent; a
   miss reads ``expert_bytes(layer)`` from flash, makes the entry resident and most recent.
   A repeated id in the same call is no lookup; it only promotes again, so after the call
   the touched entries are ordered by their last occurrence.
2. Eviction runs after the call: while resident bytes exceed the budget, the least recent
   entry is evicted unless the call touched it, in which case eviction stops (the touched
   entries are the most recent ones, so nothing older is left). A call whose union exceeds
   the budget therefore leaves the cache over budget until a later call.
3. Residency of a slot is queried before the call: every duplicate of a missed id shows 0.

The state is a doubly linked list in arrays, and one Numba kernel applies a whole event
(every layer) per call, so a live run and a trace replay run the same code.
"""

from __future__ import annotations

import numba as nb

NIL = -1


@nb.njit(cache=True)
def _unlink(key, prev, next_, head_tail):
    p = prev[key]
    n = next_[key]
    if p != NIL:
        next_[p] = n
    else:
        head_tail[0] = n
    if n != NIL:
        prev[n] = p
    else:
        head_tail[1] = p
    prev[key] = NIL
    next_[key] = NIL


@nb.njit(cache=True)
def _push_head(key, prev, next_, head_tail):
    h = head_tail[0]
    prev[key] = NIL
    next_[key] = h
    if h != NIL:
        prev[h] = key
    else:
        head_tail[1] = key
    head_tail[0] = key


@nb.njit(cache=True)
def lru_apply_event(routes, dropped, expert_bytes, n_expert, budget_bytes,
                    resident, ever_evicted, touched_gen, first_res, prev, next_, head_tail,
                    gen, counters, residency_out, charged_out, layer_lookups, layer_hits):
    """Apply one event's per-layer batches to the LRU state (in place).

    Parameters
    ----------
    routes : (n_pos, n_layer, k) int16 ndarray
        Expert ids; negative = not routed.
    dropped : (n_pos, n_layer, k) bool ndarray
        Dropped slots (never looked up).
    expert_bytes : (n_layer,) int64 ndarray
        Entry size per layer, bytes.
    n_expert : int
    budget_bytes : int
    resident, ever_evicted : (n_layer * n_expert,) bool ndarray
        Key ``layer * n_expert + expert``.
    touched_gen : (n_keys,) int64 ndarray
        Generation of the last batch that touched each key.
    first_res : (n_keys,) int8 ndarray
        Scratch: residency of a key at its first occurrence in the current batch.
    prev, next_ : (n_keys,) int64 ndarray
        The LRU list (head = most recent).
    head_tail : (2,) int64 ndarray
        Head and tail keys (NIL = -1 when empty).
    gen : int
        Generation of the last batch applied before this event.
    counters : (6,) int64 ndarray
        Accumulated in place: lookups, hits, read_bytes, resident_bytes (absolute),
        evictions, rereads.
    residency_out : (n_pos, n_layer, k) int8 ndarray
        Written: residency before the batch (0/1), -1 where not routed or dropped.
    charged_out : (n_pos, n_layer, k) int64 ndarray
        Written: the layer's entry size on the first occurrence of a missed id, else 0.
    layer_lookups, layer_hits : (n_layer,) int64 ndarray
        Accumulated per layer.

    Returns
    -------
    int
        The generation after this event.
    """
    n_pos, n_layer, k = routes.shape
    for il in range(n_layer):
        gen += 1
        eb = expert_bytes[il]
        for p in range(n_pos):
            for s in range(k):
                e = routes[p, il, s]
                if e < 0 or dropped[p, il, s]:
                    residency_out[p, il, s] = -1
                    charged_out[p, il, s] = 0
                    continue
                key = il * n_expert + e
                if touched_gen[key] != gen:
                    touched_gen[key] = gen
                    counters[0] += 1
                    layer_lookups[il] += 1
                    if resident[key]:
                        counters[1] += 1
                        layer_hits[il] += 1
                        first_res[key] = 1
                        charged_out[p, il, s] = 0
                        _unlink(key, prev, next_, head_tail)
                    else:
                        first_res[key] = 0
                        resident[key] = True
                        counters[2] += eb
                        counters[3] += eb
                        charged_out[p, il, s] = eb
                        if ever_evicted[key]:
                            counters[5] += 1
                else:
                    charged_out[p, il, s] = 0
                    _unlink(key, prev, next_, head_tail)
                residency_out[p, il, s] = first_res[key]
                _push_head(key, prev, next_, head_tail)
        # evict after the batch, never an entry this batch touched
        while counters[3] > budget_bytes:
            t = head_tail[1]
            if t == NIL or touched_gen[t] == gen:
                break
            _unlink(t, prev, next_, head_tail)
            resident[t] = False
            ever_evicted[t] = True
            counters[3] -= expert_bytes[t // n_expert]
            counters[4] += 1
    return gen
