"""Doubly linked lists in arrays for the Numba cache kernels (admit_kernel, policy_kernel).

Several lists share one set of arrays: ``where[key]`` is the key's list (or ``NONE``),
``head[lst]``/``tail[lst]`` its newest/oldest key, ``older[k]`` points toward the tail and
``newer[k]`` toward the head. All O(1).
"""

from __future__ import annotations

from refsim.jit import njit

NONE = -1


@njit(cache=True, inline="always")
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


@njit(cache=True, inline="always")
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


@njit(cache=True, inline="always")
def _oldest_free(lst, tail, newer, touched, b):
    k = tail[lst]
    while k != NONE and touched[k] == b:
        k = newer[k]
    return k
