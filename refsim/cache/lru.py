"""The engine's expert cache: one global LRU over (layer, expert) with a byte budget, and the two
knobs that act inside it: cache-aware dropping and temporal prefetch.

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

``--drop-cold-experts F`` (§3.6; router_hook.cpp ``apply_drop``), for a layer where the policy
is deferred to the terminal weight node: after settling speculation, per token row the *best*
slot (largest weight, ties to the lowest slot) is kept, and slot s is dropped iff s is not the
best, its entry is not resident (residency 0) and its weight is below ``F / k`` (float32). A
dropped slot's id is rewritten to the best slot's id, so ``load_layer`` sees a duplicate: no
lookup, no read, one more promotion of the best entry at that position.

``--prefetch K`` (§3.5; ``ExpertStreamSource::prefetch`` / ``quiesce_spec``): at layer l the
previous graph's last-position ids at layers l+1..l+K are queued unless resident or queued; a
queued read is charged to ``read_bytes`` and ``spec_read_bytes``. Completion model: every queued
read completes before the next settle (the next ``load_layer`` or drop decision), where it is
integrated at the **cold** end (the engine's stamp 0) with the speculative flag; the first real
lookup that hits it shows residency 2, clears the flag and counts ``spec_useful``. The hint is
issued after the layer's load, or before it (at the topk node) for a drop-deferred layer.

``--predict-prefetch`` (expert-prediction.md; router_hook.cpp ``predict_at_topk``,
``build_spec_lists``, ``predict_after_load``; ``ExpertStreamSource::retain``): the event carries
the stale-gate prediction for layer t (``pred_routes``/``pred_weights``, the batch's last
position: layer t's router on layer t-2's gate input, ranked, with the softmax over its top-k).
At the start of layer t-2 (before its settle and load) the prediction is split by residency
(resident entries only, a queued one is not): after the drop-aware filter (rank 0 always, else
predicted weight >= F/k when F > 0), resident ids are *kept*, the first ``spec_max`` others are
*speculated*. After layer t-1's load the kept ones still resident are promoted to the hot end
(retention: no lookup, no byte), then the speculated ones are queued as ``--prefetch`` queues
them (skipped if resident or queued; cold end at the next settle).

The state is a doubly linked list in arrays, and one Numba kernel applies a whole event
(every layer) per call, so a live run and a trace replay run the same code.
"""

from __future__ import annotations

import numpy as np

from refsim.jit import njit
from refsim.streaming.drop import drop_row, row_best

NIL = -1

# counter slots of ``lru_apply_event``'s ``counters`` array
C_LOOKUPS, C_HITS, C_READ, C_RESIDENT, C_EVICTIONS, C_REREADS = range(6)
C_ROUTED, C_DROPPED, C_SPEC_READ, C_SPEC_EXPERTS, C_SPEC_USEFUL = range(6, 11)
N_COUNTERS = 11


@njit(cache=True)
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


@njit(cache=True)
def _push_end(key, end, towards, away, head_tail):
    """Link ``key`` in at one end of the list: ``end`` 0 = head (most recent; ``towards`` =
    next_, ``away`` = prev) or 1 = tail (coldest; ``towards`` = prev, ``away`` = next_)."""
    h = head_tail[end]
    away[key] = NIL
    towards[key] = h
    if h != NIL:
        away[h] = key
    else:
        head_tail[1 - end] = key
    head_tail[end] = key


@njit(cache=True)
def _push_head(key, prev, next_, head_tail):
    _push_end(key, 0, next_, prev, head_tail)


@njit(cache=True)
def _push_tail(key, prev, next_, head_tail):
    _push_end(key, 1, prev, next_, head_tail)


@njit(cache=True)
def effective_routes(routes, weights, dropped):
    """The ids ``load_layer`` receives: a dropped slot rewritten to its row's best id (§3.6),
    or -1 (left out) when the row's weights are unknown. Shapes (n_pos, n_layer, k); returns
    an int16 copy."""
    out = routes.copy()
    n_pos, n_layer, k = routes.shape
    for p in range(n_pos):
        for il in range(n_layer):
            best = -2
            for s in range(k):
                if routes[p, il, s] < 0 or not dropped[p, il, s]:
                    continue
                if best == -2:
                    best = row_best(routes[p, il], weights[p, il])
                out[p, il, s] = routes[p, il, best] if best >= 0 else -1
    return out


@njit(cache=True)
def _queue_read(key, nbytes, queued, queue, qn, ever_evicted, counters):
    """Queue one speculative read of ``nbytes`` (charged to read and speculative bytes; a
    re-read if the entry was ever evicted); returns the new queue length."""
    queued[key] = True
    queue[qn] = key
    counters[C_READ] += nbytes
    counters[C_SPEC_READ] += nbytes
    if ever_evicted[key]:
        counters[C_REREADS] += 1
    return qn + 1


@njit(cache=True)
def _issue_prefetch(il, depth, prev_ids, has_prev, expert_bytes, n_expert, resident, queued,
                    queue, qn, ever_evicted, counters):
    n_layer = expert_bytes.size
    for t in range(il + 1, min(il + depth, n_layer - 1) + 1):
        if not has_prev[t]:
            continue
        for s in range(prev_ids.shape[1]):
            e = prev_ids[t, s]
            if e < 0:
                continue
            key = t * n_expert + e
            if resident[key] or queued[key]:
                continue                      # already resident or already queued
            qn = _queue_read(key, expert_bytes[t], queued, queue, qn, ever_evicted, counters)
    return qn


@njit(cache=True)
def _issue_filter(s, w, thr):
    """The drop-aware filter of a predicted or committed ranking (router_hook.cpp
    ``build_spec_lists`` and the route-ahead worker): rank 0 always passes; with F > 0
    (``thr`` = F/k > 0) rank s passes iff its predicted weight ``w`` >= thr (NaN fails)."""
    return s == 0 or thr <= 0 or w >= thr


@njit(cache=True)
def _issue_committed(t, src, src_w, thr, expert_bytes, n_expert, resident, queued, hot, queue,
                     qn, ever_evicted, prev, next_, head_tail, counters):
    """Route-ahead's early reads of layer t's committed experts (route-ahead.md, "The early
    reads"): of the committed ids ``src[:, t]`` that pass the drop-aware filter (predicted
    weights ``src_w``, threshold ``thr``), a resident one is retained (promoted, zero bytes), a
    miss is queued for the hot end and charged to read and speculative bytes."""
    n_pos, _, k = src.shape
    for p in range(n_pos):
        for s in range(k):
            e = src[p, t, s]
            if e < 0 or not _issue_filter(s, src_w[p, t, s], thr):
                continue
            key = t * n_expert + e
            if resident[key]:
                _unlink(key, prev, next_, head_tail)
                _push_head(key, prev, next_, head_tail)
                continue
            if queued[key]:
                continue
            hot[key] = True
            qn = _queue_read(key, expert_bytes[t], queued, queue, qn, ever_evicted, counters)
    return qn


@njit(cache=True)
def _predict_snapshot(t, pred_routes, pred_w, thr, spec_max, n_expert, resident, pend, pend_n):
    """``--predict-prefetch`` at layer t-2's topk: split the last predicted position's ranking
    for layer t into kept (resident now) and speculated (the first ``spec_max`` others) ids,
    after the drop-aware filter; stored in ``pend[t, 0]`` / ``pend[t, 1]`` with counts
    ``pend_n[t, 0..1]``."""
    pend_n[t, 0] = 0
    pend_n[t, 1] = 0
    n_pos, _, k = pred_routes.shape
    for p in range(n_pos - 1, -1, -1):
        if pred_routes[p, t, 0] < 0:
            continue
        for s in range(k):
            e = pred_routes[p, t, s]
            if e < 0 or not _issue_filter(s, pred_w[p, t, s], thr):
                continue
            if resident[t * n_expert + e]:
                pend[t, 0, pend_n[t, 0]] = e
                pend_n[t, 0] += 1
            elif pend_n[t, 1] < spec_max:
                pend[t, 1, pend_n[t, 1]] = e
                pend_n[t, 1] += 1
        return


@njit(cache=True)
def _predict_issue(t, pend, pend_n, expert_bytes, n_expert, resident, queued, queue, qn,
                   ever_evicted, prev, next_, head_tail, counters):
    """``--predict-prefetch`` after layer t-1's load: retain the kept ids still resident
    (promoted to the hot end, no lookup), then queue the speculated ones (skipped if resident
    or queued) for the cold end."""
    for i in range(pend_n[t, 0]):
        key = t * n_expert + pend[t, 0, i]
        if resident[key]:
            _unlink(key, prev, next_, head_tail)
            _push_head(key, prev, next_, head_tail)
    for i in range(pend_n[t, 1]):
        key = t * n_expert + pend[t, 1, i]
        if resident[key] or queued[key]:
            continue
        qn = _queue_read(key, expert_bytes[t], queued, queue, qn, ever_evicted, counters)
    pend_n[t, 0] = 0
    pend_n[t, 1] = 0
    return qn


@njit(cache=True)
def _settle(queue, qn, queued, hot, resident, spec, expert_bytes, n_expert, prev, next_,
            head_tail, counters):
    for i in range(qn):
        key = queue[i]
        queued[key] = False
        if resident[key]:
            hot[key] = False
            continue
        resident[key] = True
        spec[key] = True
        if hot[key]:                                 # route-ahead: adopted at the hot end
            hot[key] = False
            _push_head(key, prev, next_, head_tail)
        else:
            _push_tail(key, prev, next_, head_tail)  # prefetch: the cold end, first evicted
        counters[C_RESIDENT] += expert_bytes[key // n_expert]
        counters[C_SPEC_EXPERTS] += 1
    return 0


@njit(cache=True)
def lru_apply_event(routes, weights, dropped_in, drop_thr, deferred, classify, count_routed,
                    prefetch_depth, prev_ids, has_prev, expert_bytes, n_expert, budget_bytes,
                    resident, ever_evicted, touched_gen, first_res, charged_gen, spec, queued,
                    queue, qstate, prev, next_, head_tail, gen, counters, residency_out,
                    charged_out, dropped_out, layer_lookups, layer_hits, l0, l1, ahead, hot,
                    pred_routes, pred_w, spec_max, pend, pend_n):
    """Apply an event's per-layer batches ``l0 <= il < l1`` to the LRU state (in place).

    Parameters
    ----------
    routes : (n_pos, n_layer, k) int16 ndarray
        Router-selected expert ids; negative = not routed.
    weights : (n_pos, n_layer, k) float32 ndarray
        Final routing weights (NaN = unknown); read by the drop rule and the row's best slot.
    dropped_in : (n_pos, n_layer, k) bool ndarray
        Recorded drops, honoured on layers where ``deferred`` is False.
    drop_thr : float32
        ``F / k`` of ``--drop-cold-experts`` (float32, as the engine computes it).
    deferred : (n_layer,) bool ndarray
        Layers whose load is deferred to the drop decision point (armed and terminal node
        known): their prefetch hint is issued before the load instead of after it.
    classify : bool
        Decide the drops of deferred layers here (a replay); False when the caller decided them
        (a live run's forward pass) and passes them in ``dropped_in``.
    count_routed : bool
        Count routed slots into ``experts_routed`` (the engine does so while F > 0).
    prefetch_depth : int
        ``--prefetch K`` (0 = off).
    prev_ids : (n_layer, k) int16 ndarray, has_prev : (n_layer,) bool ndarray
        The previous graph's last routed position per layer (updated in place).
    expert_bytes : (n_layer,) int64 ndarray
        Entry size per layer, bytes.
    n_expert : int
    budget_bytes : int
    resident, ever_evicted, spec, queued : (n_layer * n_expert,) bool ndarray
        Key ``layer * n_expert + expert``; ``spec`` = integrated by prefetch, not yet hit.
    touched_gen, charged_gen : (n_keys,) int64 ndarray
        Generation of the last batch that touched / charged each key.
    first_res : (n_keys,) int8 ndarray
        Scratch: residency of a key at its first occurrence in the current batch.
    queue : (n_keys,) int64 ndarray, qstate : (1,) int64 ndarray
        The prefetch queue and its length (kept between calls).
    prev, next_ : (n_keys,) int64 ndarray
        The LRU list (head = most recent).
    head_tail : (2,) int64 ndarray
        Head and tail keys (NIL = -1 when empty).
    gen : int
        Generation of the last batch applied before this event.
    counters : (N_COUNTERS,) int64 ndarray
        Accumulated in place, slots ``C_*``: lookups, hits, read_bytes (demand + speculative),
        resident_bytes (absolute), evictions, rereads, experts_routed, experts_dropped,
        spec_read_bytes, spec_experts (integrated), spec_useful.
    residency_out : (n_pos, n_layer, k) int8 ndarray
        Written: residency before the batch (0 miss, 1 hit, 2 speculative hit), -1 where not
        routed or dropped.
    charged_out : (n_pos, n_layer, k) int64 ndarray
        Written: the layer's entry size on the first non-dropped occurrence of a missed id.
    dropped_out : (n_pos, n_layer, k) bool ndarray
        Written: the slots dropped (recorded or decided here).
    layer_lookups, layer_hits : (n_layer,) int64 ndarray
        Accumulated per layer.
    l0, l1 : int
        The layer range applied (the whole event: 0, n_layer).
    ahead : int
        ``--route-ahead N`` when this event commits (a decode graph after the first), else 0:
        after layer il's load, layer il+N's routed experts are read early
        (:func:`_issue_committed`).
    hot : (n_keys,) bool ndarray
        Queued entries to integrate at the hot end (route-ahead).
    pred_routes : (n_pos, n_layer, k) int16 ndarray, pred_w : float32 ndarray
        The stale ranking per (position, layer), -1 / NaN where none: route-ahead's committed
        ids and ``--predict-prefetch``'s prediction, with the softmax over the ranking's top-k
        (the drop-aware filter reads it when F > 0). Route-ahead reads ``routes`` where the
        caller has no ranking (pass ``routes`` itself).
    spec_max : int
        ``--predict-spec-max`` when ``--predict-prefetch`` is on, else -1 (off).
    pend : (n_layer, 2, k) int16 ndarray, pend_n : (n_layer, 2) int64 ndarray
        ``--predict-prefetch``'s kept / speculated ids per target layer, between the snapshot
        (layer t-2) and the issue (after layer t-1's load); kept between calls.

    Returns
    -------
    int
        The generation after this event.
    """
    n_pos, n_layer, k = routes.shape
    qn = qstate[0]
    res_row = np.zeros(k, np.bool_)
    for il in range(l0, l1):
        gen += 1
        eb = expert_bytes[il]
        if spec_max >= 0 and il + 2 < n_layer:     # predict-prefetch: snapshot before the load
            _predict_snapshot(il + 2, pred_routes, pred_w, drop_thr, spec_max, n_expert,
                              resident, pend, pend_n)
        if count_routed:
            for p in range(n_pos):
                for s in range(k):
                    if routes[p, il, s] >= 0:
                        counters[C_ROUTED] += 1
        if deferred[il] and prefetch_depth > 0:   # hinted at the topk, before the deferred load
            qn = _issue_prefetch(il, prefetch_depth, prev_ids, has_prev, expert_bytes, n_expert,
                                 resident, queued, queue, qn, ever_evicted, counters)
        qn = _settle(queue, qn, queued, hot, resident, spec, expert_bytes, n_expert, prev, next_,
                     head_tail, counters)
        # classify every slot of every row against the residency before the call, then load
        for p in range(n_pos):
            if deferred[il] and classify:
                for s in range(k):
                    e = routes[p, il, s]
                    res_row[s] = e >= 0 and resident[il * n_expert + e]
                counters[C_DROPPED] += drop_row(routes[p, il], weights[p, il], res_row, drop_thr,
                                                dropped_out[p, il])
            else:
                for s in range(k):
                    dropped_out[p, il, s] = routes[p, il, s] >= 0 and dropped_in[p, il, s]
                    if deferred[il] and dropped_out[p, il, s]:
                        counters[C_DROPPED] += 1
        for p in range(n_pos):
            best = -2                                  # the row's best slot, found when needed
            for s in range(k):
                e = routes[p, il, s]
                write = True
                if e >= 0 and dropped_out[p, il, s]:
                    write = False
                    if best == -2:
                        best = row_best(routes[p, il], weights[p, il])
                    e = routes[p, il, best] if best >= 0 else -1   # rewritten to the best id
                if not write or e < 0:
                    residency_out[p, il, s] = -1
                    charged_out[p, il, s] = 0
                    if e < 0:
                        continue
                key = il * n_expert + e
                if touched_gen[key] != gen:
                    touched_gen[key] = gen
                    counters[C_LOOKUPS] += 1
                    layer_lookups[il] += 1
                    if resident[key]:
                        counters[C_HITS] += 1
                        layer_hits[il] += 1
                        if spec[key]:
                            first_res[key] = 2
                            spec[key] = False
                            counters[C_SPEC_USEFUL] += 1
                        else:
                            first_res[key] = 1
                        _unlink(key, prev, next_, head_tail)
                    else:
                        first_res[key] = 0
                        resident[key] = True
                        counters[C_READ] += eb
                        counters[C_RESIDENT] += eb
                        if ever_evicted[key]:
                            counters[C_REREADS] += 1
                else:
                    _unlink(key, prev, next_, head_tail)
                _push_head(key, prev, next_, head_tail)
                if write:
                    residency_out[p, il, s] = first_res[key]
                    if first_res[key] == 0 and charged_gen[key] != gen:
                        charged_gen[key] = gen
                        charged_out[p, il, s] = eb
                    else:
                        charged_out[p, il, s] = 0
        # evict after the batch, never an entry this batch touched
        while counters[C_RESIDENT] > budget_bytes:
            t = head_tail[1]
            if t == NIL or touched_gen[t] == gen:
                break
            _unlink(t, prev, next_, head_tail)
            resident[t] = False
            spec[t] = False
            ever_evicted[t] = True
            counters[C_RESIDENT] -= expert_bytes[t // n_expert]
            counters[C_EVICTIONS] += 1
        if not deferred[il] and prefetch_depth > 0:   # hinted after the layer's load
            qn = _issue_prefetch(il, prefetch_depth, prev_ids, has_prev, expert_bytes, n_expert,
                                 resident, queued, queue, qn, ever_evicted, counters)
        if spec_max >= 0 and il + 1 < n_layer:      # predict-prefetch: layer il+1's prediction
            qn = _predict_issue(il + 1, pend, pend_n, expert_bytes, n_expert, resident, queued,
                                queue, qn, ever_evicted, prev, next_, head_tail, counters)
        if ahead > 0 and il + ahead < n_layer:        # route-ahead: layer il+N's committed reads
            qn = _issue_committed(il + ahead, pred_routes, pred_w, drop_thr, expert_bytes,
                                  n_expert, resident, queued, hot, queue, qn, ever_evicted, prev,
                                  next_, head_tail, counters)
        for p in range(n_pos - 1, -1, -1):            # the batch's last routed token
            routed = False
            for s in range(k):
                routed = routed or routes[p, il, s] >= 0
            if routed:
                for s in range(k):
                    prev_ids[il, s] = routes[p, il, s]
                has_prev[il] = True
                break
    qstate[0] = qn
    return gen


@njit(cache=True)
def lru_apply_block(event_start, routes, weights, dropped_in, prev_ids, has_prev, expert_bytes,
                    n_expert, budget_bytes, resident, ever_evicted, touched_gen, first_res,
                    charged_gen, spec, queued, queue, qstate, prev, next_, head_tail, gen,
                    counters, residency_out, charged_out, dropped_out, layer_lookups, layer_hits,
                    hot, pend, pend_n, after):
    """:func:`lru_apply_event` of every event of a block in order, with every knob off (no drop
    policy, prefetch, route-ahead or prediction: a recorded ``dropped`` mask is honoured), in
    one call instead of one Python call per event.

    Parameters
    ----------
    event_start : (n_events + 1,) int64 ndarray
        Event ``e`` is positions ``event_start[e]:event_start[e + 1]`` of the (P, n_layer, k)
        arrays ``routes``, ``weights``, ``dropped_in`` and the outputs.
    after : (n_events, N_COUNTERS) int64 ndarray
        Written: ``counters`` after each event (its record is the difference with the row
        before).

    The other arguments are :func:`lru_apply_event`'s. Returns the generation after the last
    event.
    """
    n_layer = routes.shape[1]
    deferred = np.zeros(n_layer, np.bool_)
    for e in range(event_start.size - 1):
        a = event_start[e]
        b = event_start[e + 1]
        r = routes[a:b]
        gen = lru_apply_event(r, weights[a:b], dropped_in[a:b], np.float32(0.0), deferred, True,
                              False, 0, prev_ids, has_prev, expert_bytes, n_expert,
                              budget_bytes, resident, ever_evicted, touched_gen, first_res,
                              charged_gen, spec, queued, queue, qstate, prev, next_, head_tail,
                              gen, counters, residency_out[a:b], charged_out[a:b],
                              dropped_out[a:b], layer_lookups, layer_hits, 0, n_layer, 0, hot, r,
                              weights[a:b], -1, pend, pend_n)
        after[e, :] = counters
    return gen
