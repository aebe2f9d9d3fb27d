"""Doubly linked lists in arrays for the Numba cache kernels (admit_kernel, policy_kernel).

Several lists share one set of arrays: ``where[key]`` is the key's list (or ``NONE``),
``head[lst]``/``tail[lst]`` its newest/oldest key, ``older[k]`` points toward the tail and
``newer[k]`` toward the head. All O(1).
"""

from __future__ import annotations

import numba as nb
import numpy as np

NONE = -1


@nb.njit(cache=True)
def new_lists(n_keys, n_lists):
    """Empty lists: ``(where, older, newer)`` of ``n_keys`` and ``(head, tail)`` of ``n_lists``,
    all ``NONE``. int32 (a key index fits; half the cache footprint of int64, and the kernels
    are bound by these random accesses)."""
    return (np.full(n_keys, NONE, np.int32), np.full(n_keys, NONE, np.int32),
            np.full(n_keys, NONE, np.int32), np.full(n_lists, NONE, np.int32),
            np.full(n_lists, NONE, np.int32))


@nb.njit(cache=True)
def new_batch_marks(n_keys, n_occ):
    """``touched`` (the batch index that last looked a key up, -1 = none: compared with the
    current batch, so it is never cleared) and ``pending`` (room for a batch's misses), int32."""
    return np.full(n_keys, -1, np.int32), np.empty(max(1, n_occ), np.int32)


@nb.njit(cache=True, inline="always")
def _push_head(lst, key, where, older, newer, head, tail):
    h = head[lst]
    older[key] = h
    newer[key] = NONE
    if h != NONE:
        newer[h] = key
    else:
        tail[lst] = key
    head[lst] = key
    where[key] = lst


@nb.njit(cache=True, inline="always")
def _unlink(key, where, older, newer, head, tail):
    lst = where[key]
    o = older[key]
    n = newer[key]
    if n != NONE:
        older[n] = o
    else:
        head[lst] = o
    if o != NONE:
        newer[o] = n
    else:
        tail[lst] = n
    where[key] = NONE


@nb.njit(cache=True, inline="always")
def _oldest_free(lst, tail, newer, touched, b):
    k = tail[lst]
    while k != NONE and touched[k] == b:
        k = newer[k]
    return k
