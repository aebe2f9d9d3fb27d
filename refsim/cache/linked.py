"""Doubly linked lists in arrays for the Numba cache kernels (admit_kernel, policy_kernel).

Several lists share one table ``L`` (:func:`new_lists`): ``L[key, 0]`` is the key's list (or
``NONE``), ``L[key, 1]`` points toward the tail (older) and ``L[key, 2]`` toward the head
(newer); :func:`_head`/:func:`_tail` give a list's newest/oldest key. All O(1).
"""

from __future__ import annotations

from refsim.jit import njit
import numpy as np

NONE = -1


@njit(cache=True)
def new_lists(n_keys, n_lists):
    """Empty lists over keys ``0 .. n_keys - 1``: one (n_keys + n_lists, 3) int32 table, all
    ``NONE``. Row ``k`` is key ``k``: ``[where, older, newer]``; row ``n_keys + n_lists - 1 -
    lst`` is list ``lst``'s header: ``[-, tail, head]``. One table, not five arrays: every
    array a helper takes costs reference-count updates at each (inlined) call, which made a
    move-to-head ~5 x slower than the same code written out (measured: 60 against 13 ns)."""
    return np.full((n_keys + n_lists, 3), NONE, np.int32)


@njit(cache=True, inline="always")
def _head(L, lst):
    """Newest key of list ``lst`` (or ``NONE``)."""
    return L[L.shape[0] - 1 - lst, 2]


@njit(cache=True, inline="always")
def _tail(L, lst):
    """Oldest key of list ``lst`` (or ``NONE``)."""
    return L[L.shape[0] - 1 - lst, 1]


@njit(cache=True)
def new_batch_marks(n_keys, n_occ):
    """``touched`` (the batch index that last looked a key up, -1 = none: compared with the
    current batch, so it is never cleared) and ``pending`` (room for a batch's misses), int32."""
    return np.full(n_keys, -1, np.int32), np.empty(max(1, n_occ), np.int32)


@njit(cache=True, inline="always")
def _push_head(L, lst, key):
    r = L.shape[0] - 1 - lst
    h = L[r, 2]
    L[key, 1] = h
    L[key, 2] = NONE
    if h != NONE:
        L[h, 2] = key
    else:
        L[r, 1] = key
    L[r, 2] = key
    L[key, 0] = lst


@njit(cache=True, inline="always")
def _unlink(L, key):
    r = L.shape[0] - 1 - L[key, 0]
    o = L[key, 1]
    n = L[key, 2]
    if n != NONE:
        L[n, 1] = o
    else:
        L[r, 2] = o
    if o != NONE:
        L[o, 2] = n
    else:
        L[r, 1] = n
    L[key, 0] = NONE


@njit(cache=True, inline="always")
def _oldest_free(L, lst, touched, b):
    k = L[L.shape[0] - 1 - lst, 1]
    while k != NONE and touched[k] == b:
        k = L[k, 2]
    return k
