"""The engine's ``--drop-cold-experts`` rule for one layer's rows, shared by the cache (which
decides drops in a replay) and the forward pass (which decides them live and edits its own
routing). Source: router_hook.cpp ``apply_drop``; bmoe-engine.md §3.6; engine-docs/
expert-dropping.md.

Per token row with k slots and final weights ``w``: ``best`` = the routed slot with the largest
weight (ties to the lowest slot); slot s is dropped iff ``s != best``, its entry is not resident
(residency 0; a prefetched entry counts as resident) and ``w[s] < F / k`` (float32). A dropped
slot's weight becomes 0 and its id the best slot's id; with renormalisation (the default) the
survivors are scaled by ``total / kept`` (float32, summed in slot order).
"""

from __future__ import annotations

import numpy as np

from refsim.jit import njit

@njit(cache=True)
def row_best(ids, w):
    """Best slot of one token row: the routed slot with the largest weight, ties to the lowest
    slot index. -1 if the row routes nothing or a routed weight is not finite.
    ``ids``: (k,) int16, ``w``: (k,) float32."""
    best = -1
    for s in range(ids.size):
        if ids[s] < 0:
            continue
        if not np.isfinite(w[s]):
            return -1
        if best < 0 or w[s] > w[best]:
            best = s
    return best


@njit(cache=True)
def drop_row(ids, w, resident, thr, out):
    """Write into ``out`` (k,) bool the slots of one row the rule drops; returns how many.
    ``resident`` (k,) bool: the slot's entry is resident (or prefetched) before the layer's load."""
    best = row_best(ids, w)
    n = 0
    for s in range(ids.size):
        d = ids[s] >= 0 and s != best and not resident[s] and w[s] < thr
        out[s] = d
        n += d
    return n


def drop_rows(ids: np.ndarray, weights: np.ndarray, resident: np.ndarray,
              thr: np.float32) -> np.ndarray:
    """The rule over a layer's rows: (n, k) int16 ids, float32 weights, bool residency -> (n, k)
    bool dropped."""
    ids = np.ascontiguousarray(ids, np.int16)
    weights = np.ascontiguousarray(weights, np.float32)
    resident = np.ascontiguousarray(resident, np.bool_)
    out = np.zeros(ids.shape, np.bool_)
    for p in range(ids.shape[0]):
        drop_row(ids[p], weights[p], resident[p], np.float32(thr), out[p])
    return out


def apply_drop(ids: np.ndarray, weights: np.ndarray, dropped: np.ndarray,
               renorm: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The routing the expert matmul then applies: dropped weights 0, dropped ids rewritten to
    the row's best id, survivors scaled by ``total / kept`` when ``renorm`` (float32).

    Parameters
    ----------
    ids : (n, k) int array; weights : (n, k) float32; dropped : (n, k) bool

    Returns
    -------
    (ids, weights) : new arrays of the same shapes and dtypes.
    """
    ids = np.array(ids, copy=True)
    w = np.array(weights, dtype=np.float32, copy=True)
    for p in range(ids.shape[0]):
        if not dropped[p].any():
            continue
        best = row_best(np.ascontiguousarray(ids[p], np.int16), np.ascontiguousarray(w[p]))
        total = np.float32(0)
        kept = np.float32(0)
        for s in range(ids.shape[1]):
            total = np.float32(total + w[p, s])
            if not dropped[p, s]:
                kept = np.float32(kept + w[p, s])
        for s in range(ids.shape[1]):
            if dropped[p, s]:
                w[p, s] = 0
                ids[p, s] = ids[p, best]
        if renorm and kept > 0:
            g = np.float32(total / kept)
            for s in range(ids.shape[1]):
                if not dropped[p, s]:
                    w[p, s] = np.float32(w[p, s] * g)
    return ids, w


def gate_layer(gate, il: int, rows, ids: np.ndarray, weights: np.ndarray):
    """One MoE layer through the drop seam (docs/architecture.md, "The drop seam"): ask the
    ``gate`` (a :class:`refsim.cache.expert_cache.LayerFeed`, or any object with
    ``drop_threshold``, ``resident``, ``drop_renorm`` and ``routed``) whether the rule applies
    here and which ids are resident, apply the rule, report the router's routing and the drops.

    Parameters
    ----------
    gate : LayerFeed-like
    il : int
        Layer index.
    rows : (n,) int array
        Event positions (indices into the fed tokens) these rows belong to.
    ids : (n, k) int array; weights : (n, k) float32
        The router's selection and final weights.

    Returns
    -------
    ids, weights : (n, k) arrays
        What the expert matmul applies (the router's when nothing dropped).
    dropped : (n, k) bool ndarray
    """
    ids16 = np.ascontiguousarray(ids, np.int16)
    w = np.ascontiguousarray(weights, np.float32)
    thr = gate.drop_threshold(il)
    dropped = np.zeros(ids16.shape, np.bool_)
    if thr is not None:
        dropped = drop_rows(ids16, w, gate.resident(il, ids16), thr)
    gate.routed(il, rows, ids16, w, dropped)
    if not dropped.any():
        return ids, weights, dropped
    new_ids, new_w = apply_drop(ids, w, dropped, gate.drop_renorm)
    return new_ids, new_w, dropped
