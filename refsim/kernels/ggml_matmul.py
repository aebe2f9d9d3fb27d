"""The ``ggml`` mode's matrix products: quantized weight rows times int8-quantized activations, each row by the
one-row reference of its type (:mod:`refsim.kernels.qdot`, :mod:`refsim.kernels.qdot_ext`) or four at a time by
its walker (:mod:`refsim.kernels.rows4`, :mod:`refsim.kernels.simd_ext`), over threads.

Which path a type takes is the registry's (:class:`refsim.kernels.registry.QuantKernel` ``dot`` and ``rows4``,
through the int tuples :data:`QDOT_TYPES`, :data:`EXT_TYPES` and ``ROWS4_TYPES`` the Numba loops compare
against); the rows are checked against the registry's block and type size.

**Batch invariance**: ``out[v, r]`` depends only on row ``r`` and vector ``v``, computed by one
thread by the same instructions in the same order whatever the number of vectors, rows or
threads (rows are split over threads in fixed chunks of :data:`CHUNK`). Contiguous rows of a type with a
walker go four at a time (lane ``i`` of one float64 accumulator is row ``i``'s sum, with the one-row
function's operations in its block order, and the next four rows are prefetched); the rows left over
(fewer than four in a chunk), and every row of the other types, take the one-row functions.

Layers: primitives (:mod:`refsim.kernels.simd`) -> one-row references -> four-row walkers -> this dispatch.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q
from numba import njit, prange

from refsim.errors import ConfigError
from refsim.kernels.qdot import QActs, row_mxfp4, row_q4_0, row_q5_0, row_q6_k, row_q8_0, row_q45_k
from refsim.kernels.qdot_ext import ext_row
from refsim.kernels.registry import (BLOCK_SIZE, EXT_TYPES, F16_TO_F32, KERNELS, MXFP4, Q4_0, Q4_K, Q5_0, Q5_K, Q6_K,
                                     Q8_0, QDOT_ALL, QDOT_TYPES, ROWS4_TYPES, QuantKernel)
from refsim.kernels.rows4 import mxfp4_rows4, q4_0_rows4, q4_k_rows4, q5_0_rows4, q5_k_rows4, q6_k_rows4, q8_0_rows4
from refsim.kernels.simd_ext import ext_rows4

CHUNK = 16
"""Rows per parallel work item."""


# --- the types of refsim.kernels.qdot ------------------------------------------------------------

@njit(cache=True)
def qdot_rows(kind, raw, rawi, n_cols, xq, xd, xs, table, out, r0, r1, xs1):
    """``out[v, r] = float32(dot(raw[r], x[v]))`` for rows ``r0..r1-1`` of any type of :data:`QDOT_ALL`
    (``xs``: int32 block sums; ``xs1``: Q8_1's float32 block sums, read by Q4_1 / Q5_1 only; the types of
    :data:`EXT_TYPES` go to :func:`_ext_rows`). The row loop of every product of this module and of the fused
    one-position kernels of :mod:`refsim.forward.layers`."""
    if kind not in QDOT_TYPES:
        _ext_rows(kind, raw, n_cols, xq, xd, xs1, table, out, r0, r1)
        return
    # one loop per type, each with its row function inlined (a shared call costs ~1.7x here)
    scratch = np.empty(32, dtype=np.int8)
    n_vec = xq.shape[0]
    if raw.strides[1] == 1 and kind in ROWS4_TYPES:
        # four rows at a time (rows4.q4_0_rows4 and the like: the same float64 sums as the row functions,
        # bit for bit); the rows left over go one at a time below
        nb = n_cols // BLOCK_SIZE[kind]
        r = r0
        while r + 4 <= r1:
            for v in range(n_vec):
                if kind == Q4_0:
                    s4 = q4_0_rows4(raw, r, nb, xq[v], xd[v], xs[v], table)
                elif kind == Q8_0:
                    s4 = q8_0_rows4(raw, r, nb, xq[v], xd[v], xs[v], table)
                elif kind == Q4_K:
                    s4 = q4_k_rows4(raw, r, nb, xq[v], xd[v], xs[v], table)
                elif kind == Q6_K:
                    s4 = q6_k_rows4(raw, r, nb, xq[v], xd[v], xs[v], table)
                elif kind == MXFP4:
                    s4 = mxfp4_rows4(raw, r, nb, xq[v], xd[v], xs[v], table)
                elif kind == Q5_K:
                    s4 = q5_k_rows4(raw, r, nb, xq[v], xd[v], xs[v], table)
                elif kind == Q5_0:
                    s4 = q5_0_rows4(raw, r, nb, xq[v], xd[v], xs[v], table)
                else:
                    raise ValueError("qdot: unsupported ggml type id")
                for i in range(4):
                    out[v, r + i] = np.float32(s4[i])
            r += 4
        r0 = r
    if kind == Q4_0:
        for r in range(r0, r1):
            for v in range(n_vec):
                out[v, r] = np.float32(row_q4_0(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, scratch))
    elif kind == Q8_0:
        for r in range(r0, r1):
            for v in range(n_vec):
                out[v, r] = np.float32(row_q8_0(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, scratch))
    elif kind == Q5_0:
        for r in range(r0, r1):
            for v in range(n_vec):
                out[v, r] = np.float32(row_q5_0(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, scratch))
    elif kind == MXFP4:
        for r in range(r0, r1):
            for v in range(n_vec):
                out[v, r] = np.float32(row_mxfp4(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, scratch))
    elif kind == Q4_K:
        for r in range(r0, r1):
            for v in range(n_vec):
                out[v, r] = np.float32(row_q45_k(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, False))
    elif kind == Q5_K:
        for r in range(r0, r1):
            for v in range(n_vec):
                out[v, r] = np.float32(row_q45_k(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, True))
    elif kind == Q6_K:
        for r in range(r0, r1):
            for v in range(n_vec):
                out[v, r] = np.float32(row_q6_k(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, scratch))
    else:
        raise ValueError("qdot: unsupported ggml type id")


@njit(cache=True)
def qdot_kernel(kind, raw, rawi, n_cols, xq, xd, xs, table, out):
    """``out[v, r] = float32(qdot_row(raw[r], x[v]))`` on one thread.

    Parameters
    ----------
    raw, rawi : (n_rows, row_bytes) uint8 / int8 ndarray
        The same rows as uint8 and int8.
    xq, xd, xs : the :class:`QActs` arrays (``n_vec`` rows)
    out : (n_vec, n_rows) float32 ndarray
        Written in place.
    """
    qdot_rows(kind, raw, rawi, n_cols, xq, xd, xs, table, out, 0, raw.shape[0], xd)


@njit(cache=True, parallel=True)
def qdot_kernel_parallel(kind, raw, rawi, n_cols, xq, xd, xs, table, out):
    """:func:`qdot_kernel` with rows split over threads in chunks of :data:`CHUNK` (same bits)."""
    n_rows = raw.shape[0]
    for ch in prange((n_rows + CHUNK - 1) // CHUNK):
        qdot_rows(kind, raw, rawi, n_cols, xq, xd, xs, table, out, ch * CHUNK, min(n_rows, (ch + 1) * CHUNK), xd)


@njit(cache=True)
def qdot_pairs_kernel(kind, raw3, rawi3, n_cols, ids, xq, xd, xs, table, out):
    """``out[i, r] = float32(qdot_row(raw3[ids[i], r], x[i]))`` on one thread (one vector per pair).

    Parameters
    ----------
    raw3, rawi3 : (n_expert, n_rows, row_bytes) uint8 / int8 ndarray
    ids : (m,) int64 ndarray
    xq, xd, xs : the :class:`QActs` arrays (``m`` rows)
    out : (m, n_rows) float32 ndarray
    """
    for i in range(ids.shape[0]):
        e = ids[i]
        qdot_rows(kind, raw3[e], rawi3[e], n_cols, xq[i:i + 1], xd[i:i + 1], xs[i:i + 1], table, out[i:i + 1],
                   0, raw3.shape[1], xd)


@njit(cache=True, parallel=True)
def qdot_pairs_kernel_parallel(kind, raw3, rawi3, n_cols, ids, xq, xd, xs, table, out):
    """:func:`qdot_pairs_kernel` with the rows of all pairs split over threads in chunks (same bits)."""
    n_rows = raw3.shape[1]
    per = (n_rows + CHUNK - 1) // CHUNK
    for job in prange(ids.shape[0] * per):
        i = job // per
        ch = job - i * per
        e = ids[i]
        qdot_rows(kind, raw3[e], rawi3[e], n_cols, xq[i:i + 1], xd[i:i + 1], xs[i:i + 1], table, out[i:i + 1],
                   ch * CHUNK, min(n_rows, (ch + 1) * CHUNK), xd)


# --- the further types (refsim.kernels.qdot_ext) -------------------------------------------------

@njit(cache=True)
def _ext_rows(kind, raw, n_cols, xq, xd, xs, table, out, r0, r1):
    """``out[v, r] = float32(ext_row(raw[r], x[v]))`` for rows ``r0..r1-1`` of a type of :data:`EXT_TYPES`:
    contiguous rows of the types with a walker in :mod:`refsim.kernels.simd_ext` four at a time (the same
    float64 sums, bit for bit), the rest one by one."""
    n_vec = xq.shape[0]
    r = r0
    if raw.strides[1] == 1 and kind in ROWS4_TYPES:
        nb = n_cols // BLOCK_SIZE[kind]
        while r + 4 <= r1:
            for v in range(n_vec):
                s4 = ext_rows4(kind, raw, r, nb, xq[v], xd[v], xs[v], table)
                for i in range(4):
                    out[v, r + i] = np.float32(s4[i])
            r += 4
    for rr in range(r, r1):
        for v in range(n_vec):
            out[v, rr] = np.float32(ext_row(kind, raw[rr], n_cols, xq[v], xd[v], xs[v], table))


@njit(cache=True)
def ext_kernel(kind, raw, n_cols, xq, xd, xs, table, out):
    """``out[v, r] = float32(ext_row(raw[r], x[v]))`` on one thread; ``out`` (n_vec, n_rows) float32."""
    _ext_rows(kind, raw, n_cols, xq, xd, xs, table, out, 0, raw.shape[0])


@njit(cache=True, parallel=True)
def ext_kernel_parallel(kind, raw, n_cols, xq, xd, xs, table, out):
    """:func:`ext_kernel` with rows split over threads in chunks of :data:`CHUNK` (same bits)."""
    n_rows = raw.shape[0]
    for ch in prange((n_rows + CHUNK - 1) // CHUNK):
        _ext_rows(kind, raw, n_cols, xq, xd, xs, table, out, ch * CHUNK, min(n_rows, (ch + 1) * CHUNK))


@njit(cache=True)
def ext_pairs_kernel(kind, raw3, n_cols, ids, xq, xd, xs, table, out):
    """``out[i, r] = float32(ext_row(raw3[ids[i], r], x[i]))`` on one thread."""
    for i in range(ids.shape[0]):
        _ext_rows(kind, raw3[ids[i]], n_cols, xq[i:i + 1], xd[i:i + 1], xs[i:i + 1], table, out[i:i + 1],
                  0, raw3.shape[1])


@njit(cache=True, parallel=True)
def ext_pairs_kernel_parallel(kind, raw3, n_cols, ids, xq, xd, xs, table, out):
    """:func:`ext_pairs_kernel` with the rows of all pairs split over threads in chunks (same bits)."""
    n_rows = raw3.shape[1]
    per = (n_rows + CHUNK - 1) // CHUNK
    for job in prange(ids.shape[0] * per):
        i = job // per
        ch = job - i * per
        _ext_rows(kind, raw3[ids[i]], n_cols, xq[i:i + 1], xd[i:i + 1], xs[i:i + 1], table, out[i:i + 1],
                  ch * CHUNK, min(n_rows, (ch + 1) * CHUNK))


# --- Python entry points -----------------------------------------------------------------------

PARALLEL_MIN_ELEMENTS = 1 << 20
"""Products of at least this many weight elements (``n_vec * n_rows * n_cols``, 1 Mi) are split over
threads; smaller ones run on one thread. Results are identical either way."""


_BY_ID: dict[int, QuantKernel] = {k.kind: k for k in KERNELS.values() if k.kind in QDOT_ALL}
"""The registry's facts of each type of :data:`QDOT_ALL`, keyed by its id (an int or a
``GGMLQuantizationType`` finds it: equal ints hash alike), read once per product."""
_ACT_BLOCK: dict[int, int] = {kind: k.act_block for kind, k in _BY_ID.items()}
_EXT = frozenset(EXT_TYPES)


def act_block(qtype: int) -> int:
    """Activation block of weight ``qtype``: 32 (Q8_0, Q8_1) or 256 (Q8_K), the block of the registry's
    ``vec_dot_type``.

    Raises
    ------
    ConfigError
        ``qtype`` is not in :data:`QDOT_ALL`.
    """
    block = _ACT_BLOCK.get(qtype)
    if block is None:
        raise ConfigError(f"qdot: ggml type {qtype} has no integer product (supported ids: {QDOT_ALL})")
    return block


def _check_rows(raw: np.ndarray, qtype: int, n_cols: int, ndim: int) -> np.ndarray:
    k = _BY_ID[qtype]
    block, size = k.block_size, k.type_size
    if n_cols <= 0 or n_cols % block:
        raise ConfigError(f"qdot: n_cols {n_cols} is not a positive multiple of ggml type {qtype}'s block {block}")
    rb = n_cols // block * size
    raw = np.asarray(raw)
    if raw.ndim != ndim or raw.dtype != np.uint8 or raw.shape[-1] != rb:
        raise ConfigError(f"qdot: rows have shape {raw.shape} {raw.dtype}; ggml type {qtype} rows of {n_cols} "
                          f"elements need {ndim}-D uint8 with last axis {rb}")
    return np.ascontiguousarray(raw)


def _q8_1_sums(acts: QActs, qtype: int) -> np.ndarray:
    """The ``s`` array :mod:`refsim.kernels.qdot_ext` reads: Q8_1's block sums for the types whose
    ``vec_dot_type`` is Q8_1 (Q4_1/Q5_1; ConfigError if ``acts`` lacks them), else a placeholder it never reads."""
    if _BY_ID[qtype].vec_dot_type == Q.Q8_1:
        if acts.s is None or acts.s.shape != acts.bsum.shape:
            raise ConfigError(f"qdot: ggml type {qtype} multiplies Q8_1 activations; these have no block sums "
                              "(make them with quantize_acts(x, 32))")
        return acts.s
    return np.zeros((acts.q.shape[0], 1), dtype=np.float32)


def qdot_matmul(raw: np.ndarray, qtype: int, n_cols: int, acts: QActs) -> np.ndarray:
    """``W @ x.T`` for quantized rows ``W`` and quantized activations (the rules of :mod:`refsim.kernels.qdot`
    and :mod:`refsim.kernels.qdot_ext`).

    Parameters
    ----------
    raw : (n_rows, row_bytes) uint8 ndarray
        Weight rows (a memory-mapped view; only these bytes are read).
    qtype : int
        ggml type id in :data:`QDOT_ALL`.
    n_cols : int
    acts : QActs
        From :func:`refsim.kernels.qdot.quantize_acts` with ``block = act_block(qtype)``.

    Returns
    -------
    (n_vec, n_rows) float32 ndarray

    Raises
    ------
    ConfigError
        Unsupported type, rows that do not hold ``n_cols`` elements, or activations of another
        width or block.
    """
    block = act_block(qtype)
    raw = _check_rows(raw, qtype, n_cols, 2)
    if acts.block != block or acts.q.shape[1] != n_cols:
        raise ConfigError(f"qdot: activations {acts.q.shape} in blocks of {acts.block}; need n_cols {n_cols} "
                          f"in blocks of {block}")
    out = np.empty((acts.q.shape[0], raw.shape[0]), dtype=np.float32)
    if acts.q.shape[0] and qtype in _EXT:
        big = acts.q.shape[0] * raw.shape[0] * n_cols >= PARALLEL_MIN_ELEMENTS
        kernel = ext_kernel_parallel if big else ext_kernel
        kernel(int(qtype), raw, n_cols, acts.q, acts.d, _q8_1_sums(acts, qtype), F16_TO_F32, out)
    elif acts.q.shape[0]:
        big = acts.q.shape[0] * raw.shape[0] * n_cols >= PARALLEL_MIN_ELEMENTS
        kernel = qdot_kernel_parallel if big else qdot_kernel
        kernel(int(qtype), raw, raw.view(np.int8), n_cols, acts.q, acts.d, acts.bsum, F16_TO_F32, out)
    return out


def qdot_pairs(raw3: np.ndarray, qtype: int, n_cols: int, ids: np.ndarray, acts: QActs) -> np.ndarray:
    """Per pair ``i``: ``W_{ids[i]} @ x[i]`` for a 3-D expert tensor, in one (threaded) call.

    Parameters
    ----------
    raw3 : (n_expert, n_rows, row_bytes) uint8 ndarray
        Memory-mapped expert slices (only the slices in ``ids`` are read).
    qtype : int
    n_cols : int
    ids : (m,) int array
        Expert ids in ``0..n_expert-1``.
    acts : QActs
        ``m`` quantized rows.

    Returns
    -------
    (m, n_rows) float32 ndarray
        Bit-identical to ``qdot_matmul(raw3[ids[i]], ..., acts row i)`` for each ``i``.

    Raises
    ------
    ConfigError
        As :func:`qdot_matmul`, or ids out of range / not one per activation row.
    """
    block = act_block(qtype)
    raw3 = _check_rows(raw3, qtype, n_cols, 3)
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if acts.block != block or acts.q.shape != (ids.size, n_cols):
        raise ConfigError(f"qdot: activations {acts.q.shape} in blocks of {acts.block}; need ({ids.size}, {n_cols}) "
                          f"in blocks of {block}")
    if ids.size and (ids.min() < 0 or ids.max() >= raw3.shape[0]):
        raise ConfigError(f"qdot: expert ids must be in 0..{raw3.shape[0] - 1}, got {ids.min()}..{ids.max()}")
    out = np.empty((ids.size, raw3.shape[1]), dtype=np.float32)
    if ids.size and qtype in _EXT:
        big = ids.size * raw3.shape[1] * n_cols >= PARALLEL_MIN_ELEMENTS
        kernel = ext_pairs_kernel_parallel if big else ext_pairs_kernel
        kernel(int(qtype), raw3, n_cols, ids, acts.q, acts.d, _q8_1_sums(acts, qtype), F16_TO_F32, out)
    elif ids.size:
        big = ids.size * raw3.shape[1] * n_cols >= PARALLEL_MIN_ELEMENTS
        kernel = qdot_pairs_kernel_parallel if big else qdot_pairs_kernel
        kernel(int(qtype), raw3, raw3.view(np.int8), n_cols, ids, acts.q, acts.d, acts.bsum, F16_TO_F32, out)
    return out


__all__ = [
    "CHUNK",
    "EXT_TYPES",
    "PARALLEL_MIN_ELEMENTS",
    "QDOT_ALL",
    "QDOT_TYPES",
    "act_block",
    "ext_kernel",
    "ext_kernel_parallel",
    "ext_pairs_kernel",
    "ext_pairs_kernel_parallel",
    "qdot_kernel",
    "qdot_kernel_parallel",
    "qdot_matmul",
    "qdot_pairs",
    "qdot_pairs_kernel",
    "qdot_pairs_kernel_parallel",
    "qdot_rows",
]
