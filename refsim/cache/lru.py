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

The cache is one :class:`LruState` (its sizes and state arrays; the LRU order is a doubly
linked list of :mod:`refsim.cache.linked`), an event one :class:`EventArrays`, and one Numba
kernel, :func:`lru_apply_event`, applies a whole event (every layer) per call, so a live run
and a trace replay run the same code.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from refsim.cache.linked import NONE, push_head, push_tail, tail, unlink
from refsim.jit import njit
from refsim.streaming.drop import drop_row, row_best

# counter slots of :attr:`LruState.counters`
C_LOOKUPS, C_HITS, C_READ, C_RESIDENT, C_EVICTIONS, C_REREADS = range(6)
C_ROUTED, C_DROPPED, C_SPEC_READ, C_SPEC_EXPERTS, C_SPEC_USEFUL = range(6, 11)
N_COUNTERS = 11


class LruState(NamedTuple):
    """The engine cache as the kernels take it: its sizes and every array of its state (one
    argument; :func:`new_state` builds it, :class:`~refsim.cache.ExpertCache` keeps it). Keys
    are ``layer * n_expert + expert``; ``n_keys = n_layer * n_expert``.

    Attributes
    ----------
    expert_bytes : (n_layer,) int64 ndarray
        Entry size per layer, bytes.
    n_expert : int
    budget_bytes : int
        The cache budget, bytes.
    resident, ever_evicted, spec, queued, hot : (n_keys,) bool ndarray
        Per key: resident; evicted at least once (a later miss is a re-read); integrated by a
        speculative read and not hit since; in the speculative-read queue; queued to be
        integrated at the hot end (route-ahead) instead of the cold end (prefetch).
    touched_gen, charged_gen : (n_keys,) int64 ndarray
        Generation (layer batch count) of the batch that last touched / charged each key.
    first_res : (n_keys,) int8 ndarray
        Scratch: a key's residency at its first occurrence in the current batch.
    links : (n_keys + 1, 3) int32 ndarray
        The LRU order, one list of :mod:`refsim.cache.linked` (head = most recent).
    queue : (n_keys,) int64 ndarray, queue_len : (1,) int64 ndarray
        The speculative-read queue and its length (kept between calls).
    prev_ids : (n_layer, k) int16 ndarray, has_prev : (n_layer,) bool ndarray
        The previous graph's last routed position per layer (``--prefetch``'s hint).
    pend : (n_layer, 2, k) int16 ndarray, pend_n : (n_layer, 2) int64 ndarray
        ``--predict-prefetch``'s kept / speculated ids per target layer, between the snapshot
        (layer t-2) and the issue (after layer t-1's load), and their counts.
    counters : (N_COUNTERS,) int64 ndarray
        Lifetime counters, slots ``C_*``: lookups, hits, read_bytes (demand + speculative),
        resident_bytes (absolute), evictions, rereads, experts_routed, experts_dropped,
        spec_read_bytes, spec_experts (integrated), spec_useful.
    layer_lookups, layer_hits : (n_layer,) int64 ndarray
        Lifetime lookups and hits per layer.
    """

    expert_bytes: np.ndarray
    n_expert: int
    budget_bytes: int
    resident: np.ndarray
    ever_evicted: np.ndarray
    spec: np.ndarray
    queued: np.ndarray
    hot: np.ndarray
    touched_gen: np.ndarray
    charged_gen: np.ndarray
    first_res: np.ndarray
    links: np.ndarray
    queue: np.ndarray
    queue_len: np.ndarray
    prev_ids: np.ndarray
    has_prev: np.ndarray
    pend: np.ndarray
    pend_n: np.ndarray
    counters: np.ndarray
    layer_lookups: np.ndarray
    layer_hits: np.ndarray


def new_state(expert_bytes: np.ndarray, n_expert: int, budget_bytes: int) -> LruState:
    """An empty cache's :class:`LruState` (``prev_ids`` and ``pend`` sized for k = 0:
    :meth:`LruState._replace` them when an event's k is known)."""
    n_layer = int(expert_bytes.size)
    n_keys = n_layer * int(n_expert)
    return LruState(
        expert_bytes=expert_bytes, n_expert=int(n_expert), budget_bytes=int(budget_bytes),
        resident=np.zeros(n_keys, np.bool_), ever_evicted=np.zeros(n_keys, np.bool_),
        spec=np.zeros(n_keys, np.bool_), queued=np.zeros(n_keys, np.bool_),
        hot=np.zeros(n_keys, np.bool_), touched_gen=np.zeros(n_keys, np.int64),
        charged_gen=np.zeros(n_keys, np.int64), first_res=np.zeros(n_keys, np.int8),
        links=np.full((n_keys + 1, 3), NONE, np.int32), queue=np.zeros(n_keys, np.int64),
        queue_len=np.zeros(1, np.int64), prev_ids=np.full((n_layer, 0), -1, np.int16),
        has_prev=np.zeros(n_layer, np.bool_), pend=np.zeros((n_layer, 2, 0), np.int16),
        pend_n=np.zeros((n_layer, 2), np.int64), counters=np.zeros(N_COUNTERS, np.int64),
        layer_lookups=np.zeros(n_layer, np.int64), layer_hits=np.zeros(n_layer, np.int64))


class EventArrays(NamedTuple):
    """One event's arrays as :func:`lru_apply_event` takes them (one argument). Shapes
    (n_pos, n_layer, k) unless said.

    Attributes
    ----------
    routes : int16 ndarray
        Router-selected expert ids; negative = not routed.
    weights : float32 ndarray
        Final routing weights (NaN = unknown); read by the drop rule and the row's best slot.
    dropped_in : bool ndarray
        Recorded drops, honoured on layers that are not ``deferred`` (or when the caller
        decided the drops: ``classify`` False).
    deferred : (n_layer,) bool ndarray
        Layers whose load is deferred to the drop decision point (armed and terminal node
        known): their prefetch hint is issued before the load instead of after it.
    pred_routes : int16 ndarray, pred_weights : float32 ndarray
        The stale ranking per (position, layer), -1 / NaN where none: route-ahead's committed
        ids and ``--predict-prefetch``'s prediction, with the softmax over the ranking's top-k
        (the drop-aware filter reads it when F > 0). Route-ahead reads ``routes`` where the
        caller has no ranking (pass ``routes`` itself).
    residency : int8 ndarray
        Written: residency before the batch (0 miss, 1 hit, 2 speculative hit), -1 where not
        routed or dropped.
    charged : int64 ndarray
        Written: the layer's entry size on the first non-dropped occurrence of a missed id.
    dropped : bool ndarray
        Written: the slots dropped (recorded or decided here).
    """

    routes: np.ndarray
    weights: np.ndarray
    dropped_in: np.ndarray
    deferred: np.ndarray
    pred_routes: np.ndarray
    pred_weights: np.ndarray
    residency: np.ndarray
    charged: np.ndarray
    dropped: np.ndarray


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
def _queue_read(st, key, nbytes, qn):
    """Queue one speculative read of ``nbytes`` (charged to read and speculative bytes; a
    re-read if the entry was ever evicted); returns the new queue length."""
    st.queued[key] = True
    st.queue[qn] = key
    st.counters[C_READ] += nbytes
    st.counters[C_SPEC_READ] += nbytes
    if st.ever_evicted[key]:
        st.counters[C_REREADS] += 1
    return qn + 1


@njit(cache=True)
def _issue_prefetch(st, il, depth, qn):
    """``--prefetch K`` at layer il: queue the previous graph's last-position ids of layers
    il+1..il+K unless resident or queued."""
    n_layer = st.expert_bytes.size
    for t in range(il + 1, min(il + depth, n_layer - 1) + 1):
        if not st.has_prev[t]:
            continue
        for s in range(st.prev_ids.shape[1]):
            e = st.prev_ids[t, s]
            if e < 0:
                continue
            key = t * st.n_expert + e
            if st.resident[key] or st.queued[key]:
                continue                      # already resident or already queued
            qn = _queue_read(st, key, st.expert_bytes[t], qn)
    return qn


@njit(cache=True)
def _issue_filter(s, w, thr):
    """The drop-aware filter of a predicted or committed ranking (router_hook.cpp
    ``build_spec_lists`` and the route-ahead worker): rank 0 always passes; with F > 0
    (``thr`` = F/k > 0) rank s passes iff its predicted weight ``w`` >= thr (NaN fails)."""
    return s == 0 or thr <= 0 or w >= thr


@njit(cache=True)
def _issue_committed(st, t, src, src_w, thr, qn):
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
            key = t * st.n_expert + e
            if st.resident[key]:
                unlink(st.links, key)
                push_head(st.links, 0, key)
                continue
            if st.queued[key]:
                continue
            st.hot[key] = True
            qn = _queue_read(st, key, st.expert_bytes[t], qn)
    return qn


@njit(cache=True)
def _predict_snapshot(st, t, pred_routes, pred_w, thr, spec_max):
    """``--predict-prefetch`` at layer t-2's topk: split the last predicted position's ranking
    for layer t into kept (resident now) and speculated (the first ``spec_max`` others) ids,
    after the drop-aware filter; stored in ``pend[t, 0]`` / ``pend[t, 1]`` with counts
    ``pend_n[t, 0..1]``."""
    pend, pend_n = st.pend, st.pend_n
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
            if st.resident[t * st.n_expert + e]:
                pend[t, 0, pend_n[t, 0]] = e
                pend_n[t, 0] += 1
            elif pend_n[t, 1] < spec_max:
                pend[t, 1, pend_n[t, 1]] = e
                pend_n[t, 1] += 1
        return


@njit(cache=True)
def _predict_issue(st, t, qn):
    """``--predict-prefetch`` after layer t-1's load: retain the kept ids still resident
    (promoted to the hot end, no lookup), then queue the speculated ones (skipped if resident
    or queued) for the cold end."""
    pend, pend_n = st.pend, st.pend_n
    for i in range(pend_n[t, 0]):
        key = t * st.n_expert + pend[t, 0, i]
        if st.resident[key]:
            unlink(st.links, key)
            push_head(st.links, 0, key)
    for i in range(pend_n[t, 1]):
        key = t * st.n_expert + pend[t, 1, i]
        if st.resident[key] or st.queued[key]:
            continue
        qn = _queue_read(st, key, st.expert_bytes[t], qn)
    pend_n[t, 0] = 0
    pend_n[t, 1] = 0
    return qn


@njit(cache=True)
def _settle(st, qn):
    """Integrate every queued read (before a layer's load or drop decision): at the hot end
    if route-ahead queued it, else at the cold end; an entry resident meanwhile is skipped.
    Returns the new queue length (0)."""
    for i in range(qn):
        key = st.queue[i]
        st.queued[key] = False
        if st.resident[key]:
            st.hot[key] = False
            continue
        st.resident[key] = True
        st.spec[key] = True
        if st.hot[key]:                              # route-ahead: adopted at the hot end
            st.hot[key] = False
            push_head(st.links, 0, key)
        else:
            push_tail(st.links, 0, key)              # prefetch: the cold end, first evicted
        st.counters[C_RESIDENT] += st.expert_bytes[key // st.n_expert]
        st.counters[C_SPEC_EXPERTS] += 1
    return 0


@njit(cache=True)
def lru_apply_event(ev, st, l0, l1, gen, drop_thr, classify, count_routed, prefetch_depth, ahead,
                    spec_max):
    """Apply an event's per-layer batches ``l0 <= il < l1`` to the LRU state (in place).

    Parameters
    ----------
    ev : EventArrays
        The event's routes and knob inputs; its ``residency``, ``charged`` and ``dropped`` are
        written for the layers applied.
    st : LruState
        The cache, updated in place.
    l0, l1 : int
        The layer range applied (the whole event: 0, n_layer).
    gen : int
        Generation (layer batches applied) before this call.
    drop_thr : float32
        ``F / k`` of ``--drop-cold-experts`` (float32, as the engine computes it).
    classify : bool
        Decide the drops of deferred layers here (a replay); False when the caller decided them
        (a live run's forward pass) and passes them in ``ev.dropped_in``.
    count_routed : bool
        Count routed slots into ``experts_routed`` (the engine does so while F > 0).
    prefetch_depth : int
        ``--prefetch K`` (0 = off).
    ahead : int
        ``--route-ahead N`` when this event commits (a decode graph after the first), else 0:
        after layer il's load, layer il+N's routed experts are read early
        (:func:`_issue_committed`).
    spec_max : int
        ``--predict-spec-max`` when ``--predict-prefetch`` is on, else -1 (off).

    Returns
    -------
    int
        The generation after this call.
    """
    routes, weights, deferred = ev.routes, ev.weights, ev.deferred
    residency_out, charged_out, dropped_out = ev.residency, ev.charged, ev.dropped
    resident, links, counters = st.resident, st.links, st.counters
    touched_gen, first_res, n_expert = st.touched_gen, st.first_res, st.n_expert
    spec, ever_evicted, charged_gen = st.spec, st.ever_evicted, st.charged_gen
    layer_lookups, layer_hits, expert_bytes = st.layer_lookups, st.layer_hits, st.expert_bytes
    budget_bytes = st.budget_bytes
    n_pos, n_layer, k = routes.shape
    qn = st.queue_len[0]
    res_row = np.zeros(k, np.bool_)
    for il in range(l0, l1):
        gen += 1
        eb = expert_bytes[il]
        if spec_max >= 0 and il + 2 < n_layer:     # predict-prefetch: snapshot before the load
            _predict_snapshot(st, il + 2, ev.pred_routes, ev.pred_weights, drop_thr, spec_max)
        if count_routed:
            for p in range(n_pos):
                for s in range(k):
                    if routes[p, il, s] >= 0:
                        counters[C_ROUTED] += 1
        if deferred[il] and prefetch_depth > 0:   # hinted at the topk, before the deferred load
            qn = _issue_prefetch(st, il, prefetch_depth, qn)
        if qn > 0:
            qn = _settle(st, qn)
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
                    dropped_out[p, il, s] = routes[p, il, s] >= 0 and ev.dropped_in[p, il, s]
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
                        unlink(links, key)
                    else:
                        first_res[key] = 0
                        resident[key] = True
                        counters[C_READ] += eb
                        counters[C_RESIDENT] += eb
                        if ever_evicted[key]:
                            counters[C_REREADS] += 1
                else:
                    unlink(links, key)
                push_head(links, 0, key)
                if write:
                    residency_out[p, il, s] = first_res[key]
                    if first_res[key] == 0 and charged_gen[key] != gen:
                        charged_gen[key] = gen
                        charged_out[p, il, s] = eb
                    else:
                        charged_out[p, il, s] = 0
        # evict after the batch, never an entry this batch touched
        while counters[C_RESIDENT] > budget_bytes:
            t = tail(links, 0)
            if t == NONE or touched_gen[t] == gen:
                break
            unlink(links, t)
            resident[t] = False
            spec[t] = False
            ever_evicted[t] = True
            counters[C_RESIDENT] -= expert_bytes[t // n_expert]
            counters[C_EVICTIONS] += 1
        if not deferred[il] and prefetch_depth > 0:   # hinted after the layer's load
            qn = _issue_prefetch(st, il, prefetch_depth, qn)
        if spec_max >= 0 and il + 1 < n_layer:      # predict-prefetch: layer il+1's prediction
            qn = _predict_issue(st, il + 1, qn)
        if ahead > 0 and il + ahead < n_layer:        # route-ahead: layer il+N's committed reads
            qn = _issue_committed(st, il + ahead, ev.pred_routes, ev.pred_weights, drop_thr, qn)
        for p in range(n_pos - 1, -1, -1):            # the batch's last routed token
            routed = False
            for s in range(k):
                routed = routed or routes[p, il, s] >= 0
            if routed:
                for s in range(k):
                    st.prev_ids[il, s] = routes[p, il, s]
                st.has_prev[il] = True
                break
    st.queue_len[0] = qn
    return gen


@njit(cache=True)
def lru_apply_event_tuples(ev, st, l0, l1, gen, drop_thr, classify, count_routed, prefetch_depth,
                           ahead, spec_max):
    """:func:`lru_apply_event` with ``ev`` and ``st`` given as plain tuples of the
    :class:`EventArrays` / :class:`LruState` fields (``tuple(ev)``, ``tuple(st)``): the entry
    called from Python. Numba types a namedtuple argument by its class and field names on every
    call, about 1 us more per call than a plain tuple (measured: 1.6 against 0.5 us for the
    fingerprint of an LruState), which a :class:`~refsim.cache.expert_cache.LayerFeed` pays once
    per layer."""
    return lru_apply_event(EventArrays(*ev), LruState(*st), l0, l1, gen, drop_thr, classify,
                           count_routed, prefetch_depth, ahead, spec_max)


@njit(cache=True)
def lru_apply_block(event_start, block, st, gen, after):
    """:func:`lru_apply_event` of every event of a block in order, with every knob off (no drop
    policy, prefetch, route-ahead or prediction: a recorded ``dropped`` mask is honoured), in
    one call instead of one Python call per event.

    Parameters
    ----------
    event_start : (n_events + 1,) int64 ndarray
        Event ``e`` is positions ``event_start[e]:event_start[e + 1]`` of the (P, n_layer, k)
        arrays of ``block``.
    block : EventArrays
        The block's events laid end to end (``deferred`` all False, ``pred_routes`` /
        ``pred_weights`` unused); outputs written as :func:`lru_apply_event` writes them.
    st : LruState
    gen : int
        Generation before the block.
    after : (n_events, N_COUNTERS) int64 ndarray
        Written: ``counters`` after each event (its record is the difference with the row
        before).

    Returns
    -------
    int
        The generation after the last event.
    """
    for e in range(event_start.size - 1):
        a = event_start[e]
        b = event_start[e + 1]
        r = block.routes[a:b]
        ev = EventArrays(r, block.weights[a:b], block.dropped_in[a:b], block.deferred, r,
                         block.weights[a:b], block.residency[a:b], block.charged[a:b],
                         block.dropped[a:b])
        gen = lru_apply_event(ev, st, 0, r.shape[1], gen, np.float32(0.0), True, False, 0, 0, -1)
        after[e, :] = st.counters
    return gen
