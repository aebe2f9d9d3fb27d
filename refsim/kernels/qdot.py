"""Quantized weight rows times int8-quantized activations by exact integer block dots (the ``ggml`` mode's products).

ggml's CPU backend quantizes an activation row to the weight type's ``vec_dot_type`` (Q8_0 for
Q4_0/Q5_0/Q8_0/MXFP4, Q8_K for Q4_K/Q5_K/Q6_K) and multiplies integer blocks
(ggml/src/ggml-cpu/ggml-cpu.c ``type_traits_cpu``; the ``ggml_vec_dot_*_q8_*`` functions of
ggml/src/ggml-cpu/arch/x86/quants.c). This module does the same over memory-mapped rows, never
dequantizing a weight:

==========  ===========================================================================================
weight      term added per block ``b`` (``isum`` exact in int32/int64; one float64 rounding per ``*``)
==========  ===========================================================================================
Q8_0        ``(f64(d_w) * f64(d_x)) * isum``, ``isum = sum_j q_j x_j`` over 32 (``q`` int8)
Q4_0        the same with ``q = nibble - 8``, summed as ``sum_j nibble_j x_j - 8 bsum`` (``bsum`` = sum of
            the block's ``x``; ggml's AVX2 ``vpmaddubsw`` form)
Q5_0        the same with ``q = (nibble | high_bit << 4) - 16``
MXFP4       ``(2^(e-128) * f64(d_x)) * isum`` with ``q`` = the doubled e2m1 value (ggml ``kvalues_mxfp4``)
Q4_K, Q5_K  ``(f64(d) * f64(d_x)) * sum_s sc_s isum_s - (f64(dmin) * f64(d_x)) * sum_s m_s bsum_s`` over
            the 8 sub-blocks of 32 (``bsum_s`` = sum of the activation's int8 values in sub-block ``s``)
Q6_K        ``(f64(d) * f64(d_x)) * sum_g sc_g isum_g`` over the 16 sub-blocks of 16, ``q = q6 - 32``
==========  ===========================================================================================

The further types (Q4_1, Q5_1 with Q8_1 activations; IQ4_NL with Q8_0; Q2_K, Q3_K, IQ4_XS, TQ1_0,
TQ2_0 and the IQ1_S/IQ2/IQ3 grid types with Q8_K) are multiplied by :mod:`refsim.kernels.qdot_ext`
(its table), reached through the same :func:`qdot_matmul` / :func:`qdot_pairs` and :func:`_qdot_rows` (the row
loop of the fused forward kernels of :mod:`refsim.forward.layers`); :data:`QDOT_TYPES` are this module's own
types, :data:`QDOT_ALL` every type with an integer product.

The terms are summed in float64 in block order and the sum is rounded once to float32. ``d_w *
d_x`` is exact in float64 (two halves, or a half/power of two and a float32); for Q8_0/Q4_0/Q5_0/MXFP4
the product with ``isum`` is exact too (at most 22 + 19 significant bits), so the only roundings are
the float64 additions. The value is the float64-accumulated product of the dequantized weight (as
gguf-py decodes it) and the round-tripped activation (:func:`quantize_acts` ``d * q``) up to float64
rounding, i.e. the same number :mod:`refsim.forward.actq` documents, computed the way llama.cpp does.

**Batch invariance**: ``out[v, r]`` depends only on row ``r`` and vector ``v``, computed by one
thread by the same instructions in the same order whatever the number of vectors, rows or
threads (rows are split over threads in fixed chunks of :data:`CHUNK`). The block dots are the
LLVM vector functions of :mod:`refsim.kernels.simd`; their sums are exact integers, so SIMD lane
order cannot change a bit. Contiguous rows of every type in the table go four at a time
(``simd.q4_0_rows4`` ... ``simd.q6_k_rows4``: lane ``i`` of one float64 accumulator is row ``i``'s sum,
with the one-row function's operations in its block order, and the next four rows are prefetched);
the rows left over (fewer than four in a chunk) take the one-row functions.

Activation quantisation (the same rules as :mod:`refsim.forward.actq`, which states their source):
Q8_0 per 32: ``amax``, ``q = round_half_even(x * (127/amax))``, ``d = f16(amax/127)``; Q8_K per 256:
``max`` (signed element of largest magnitude, first on ties), ``iscale = -127/max``,
``q = min(127, round_half_even(iscale * x))``, ``d = 1/iscale`` (float32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from refsim.errors import ConfigError
from refsim.kernels import qdot_ext
from refsim.kernels.k_quants import _scale_min
from refsim.kernels.registry import F16_TO_F32
from refsim.kernels.simd import (
    dot_bits32,
    dot_field32,
    dot_i8x32,
    dot_nib16x2,
    dot_nibu16x2,
    dot_q6x16,
    mxfp4_rows4,
    q4_0_rows4,
    q4_k_rows4,
    q5_0_rows4,
    q5_k_rows4,
    q6_k_rows4,
    q8_0_rows4,
)

# ggml type ids (gguf.GGMLQuantizationType values)
Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4 = 2, 6, 8, 12, 13, 14, 39
Q8_0_WEIGHTS = (Q4_0, Q5_0, Q8_0, MXFP4)
"""Weight types whose ``vec_dot_type`` is Q8_0 (activation blocks of 32)."""
Q8_K_WEIGHTS = (Q4_K, Q5_K, Q6_K)
"""Weight types whose ``vec_dot_type`` is Q8_K (activation blocks of 256)."""
QDOT_TYPES = Q8_0_WEIGHTS + Q8_K_WEIGHTS
"""The weight types this module's own row functions multiply."""
QDOT_ALL = QDOT_TYPES + qdot_ext.EXT_TYPES
"""Every weight type with an integer product (:func:`qdot_matmul` / :func:`qdot_pairs`, and the fused
one-position kernels of :mod:`refsim.forward.layers` through :func:`_qdot_rows`)."""

CHUNK = 16
"""Rows per parallel work item."""

KVALUES_I8 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int8)
"""MXFP4 e2m1 values doubled, as int8 (ggml ``kvalues_mxfp4``)."""


# --- activation quantisation -------------------------------------------------------------------

@njit(cache=True)
def round_tie(v, tie):
    """Nearest integer of the float32 value ``v`` (returned as a float).

    ``tie`` 0: exact halves to even (ggml's rule). ``tie`` 1 / 2: exact halves, and values one
    float32 ulp from a half, up / down. refsim's activations differ from llama.cpp's in their last
    bit (llama.cpp sums in float32), so a value at or next to a half in refsim may be on either side
    in llama.cpp: the other rules let a test see both (docs/forward.md, "Activation near-ties").
    """
    r = np.rint(v)
    if tie != 0:
        f = np.floor(v)
        ulp = math.ldexp(1.0, math.frexp(v)[1] - 24)     # one float32 ulp of v
        if abs(v - f - 0.5) <= ulp:
            r = f + 1 if tie == 1 else f
    return r


@njit(cache=True)
def _q8_0_kernel(x, tie, q, amax, bsum):
    for p in range(x.shape[0]):
        for b in range(x.shape[1] // 32):
            a = np.float32(0.0)
            for j in range(32):
                v = abs(x[p, b * 32 + j])
                if v > a:
                    a = v
            amax[p, b] = a
            iden = np.float32(127.0) / a if a != 0 else np.float32(0.0)
            t = 0
            for j in range(32):
                v = np.int8(round_tie(np.float32(x[p, b * 32 + j] * iden), tie))
                q[p, b * 32 + j] = v
                t += np.int64(v)
            bsum[p, b] = t


@njit(cache=True)
def _q8_k_kernel(x, tie, q, d, bsum):
    for p in range(x.shape[0]):
        for b in range(x.shape[1] // 256):
            o = b * 256
            amax = np.float32(0.0)
            mx = np.float32(0.0)
            for j in range(256):
                a = abs(x[p, o + j])
                if a > amax:
                    amax = a
                    mx = x[p, o + j]
            if amax == 0:
                d[p, b] = np.float32(0.0)
                for j in range(256):
                    q[p, o + j] = 0
            else:
                iscale = np.float32(np.float32(-127.0) / mx)
                d[p, b] = np.float32(np.float32(1.0) / iscale)
                for j in range(256):
                    v = round_tie(np.float32(iscale * x[p, o + j]), tie)
                    q[p, o + j] = np.int8(min(v, 127.0))
        for s in range(x.shape[1] // 32):
            t = 0
            for j in range(32):
                t += np.int64(q[p, s * 32 + j])
            bsum[p, s] = t


@njit(cache=True)
def f16_round(v):
    """``float32(float16(v))`` for a float32 ``v``: round to nearest half, ties to even (NumPy's
    ``astype(np.float16)``), overflow to ``inf``; in float64, where every step is exact."""
    a = abs(np.float64(v))
    if math.isnan(a) or a == 0.0 or a == np.inf:
        return np.float32(v)
    e = math.frexp(a)[1]                          # a in [2^(e-1), 2^e)
    ulp = math.ldexp(1.0, max(e - 11, -24))       # 11 significant bits; subnormal halves below 2^-14
    r = np.rint(a / ulp) * ulp
    if r > 65504.0:
        r = np.inf
    return np.float32(r if v >= 0 else -r)


@njit(cache=True)
def quantize_acts_into(x, block, tie, q, d, bsum, s=None):
    """:func:`quantize_acts` inside Numba, into preallocated ``q``, ``d``, ``bsum`` (same bits), and for
    ``block`` 32 Q8_1's block sums into ``s`` when given (``(n_vec, n_cols // 32)`` float32, :class:`QActs` ``s``)."""
    if block == 32:
        _q8_0_kernel(x, tie, q, d, bsum)
        for p in range(d.shape[0]):
            for b in range(d.shape[1]):
                d32 = np.float32(d[p, b] / np.float32(127.0))
                if s is not None:
                    s[p, b] = f16_round(np.float32(d32 * np.float32(bsum[p, b])))
                d[p, b] = f16_round(d32)
    else:
        _q8_k_kernel(x, tie, q, d, bsum)


@dataclass(frozen=True)
class QActs:
    """Activation rows quantized to a ``vec_dot_type``.

    Attributes
    ----------
    q : (n_vec, n_cols) int8 ndarray
    d : (n_vec, n_cols // block) float32 ndarray
        Block scales (Q8_0: values of f16, block 32; Q8_K: float32, block 256).
    bsum : (n_vec, n_cols // 32) int32 ndarray
        Sum of ``q`` over each 32 (the K-quant mins' term; Q4_0's ``- 8 * bsum``).
    block : int
        32 (Q8_0) or 256 (Q8_K).
    s : (n_vec, n_cols // 32) float32 ndarray or None
        Block 32 from :func:`quantize_acts`: Q8_1's ``s = f16(float32(amax / 127 * bsum))`` (f16
        values; arch/x86/quants.c ``quantize_row_q8_1``), which makes these activations Q8_1 as well
        as Q8_0 (the two share ``q`` and ``d``). None otherwise.
    """

    q: np.ndarray
    d: np.ndarray
    bsum: np.ndarray
    block: int
    s: np.ndarray | None = None

    def dequantize(self) -> np.ndarray:
        """The round trip ``d * q`` as float32 ``(n_vec, n_cols)`` (what :mod:`refsim.forward.actq` returns)."""
        n_vec, n_cols = self.q.shape
        qb = self.q.reshape(n_vec, -1, self.block).astype(np.float32)
        return (self.d[:, :, None] * qb).astype(np.float32).reshape(n_vec, n_cols)


def quantize_acts(x: np.ndarray, block: int, tie: int = 0) -> QActs:
    """Quantize activation rows to Q8_0 (``block`` 32) or Q8_K (``block`` 256), row by row.

    Parameters
    ----------
    x : (n_vec, n_cols) float32 ndarray
        ``n_cols`` a multiple of ``block``.
    block : {32, 256}
    tie : {0, 1, 2}, default 0
        Exact halves round to even (0, ggml), up (1) or down (2).

    Returns
    -------
    QActs

    Raises
    ------
    ConfigError
        ``x`` not 2-D, ``n_cols`` not a multiple of ``block``, or another block size.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    if block not in (32, 256) or x.ndim != 2 or x.shape[1] % block:
        raise ConfigError(f"activations of shape {x.shape} cannot be quantized in blocks of {block} "
                          "(need (n_vec, n_cols) with n_cols a multiple of 32 for Q8_0 or 256 for Q8_K)")
    n_vec, n_cols = x.shape
    q = np.empty((n_vec, n_cols), dtype=np.int8)
    if block == 32:
        amax = np.empty((n_vec, n_cols // 32), dtype=np.float32)
        bsum = np.empty((n_vec, n_cols // 32), dtype=np.int32)
        _q8_0_kernel(x, int(tie), q, amax, bsum)
        d32 = (amax / np.float32(127.0)).astype(np.float32)
        d = d32.astype(np.float16).astype(np.float32)
        s = (d32 * bsum.astype(np.float32)).astype(np.float32).astype(np.float16).astype(np.float32)
        return QActs(q, d, bsum, 32, s)
    d = np.empty((n_vec, n_cols // 256), dtype=np.float32)
    bsum = np.empty((n_vec, n_cols // 32), dtype=np.int32)
    _q8_k_kernel(x, int(tie), q, d, bsum)
    return QActs(q, d, bsum, 256)


# --- one row times one quantized vector --------------------------------------------------------

@njit(cache=True)
def _half(row, o, table):
    return np.float64(table[np.int64(row[o]) | (np.int64(row[o + 1]) << 8)])


@njit(cache=True, inline="always")
def _row_q4_0(row, rowi, n_cols, xq, xd, xs, table, scratch):
    s = 0.0
    for b in range(n_cols // 32):
        o = b * 18
        isum = np.int64(dot_nibu16x2(row, o + 2, xq, b * 32)) - 8 * np.int64(xs[b])
        s += (_half(row, o, table) * np.float64(xd[b])) * np.float64(isum)
    return s


@njit(cache=True, inline="always")
def _row_q8_0(row, rowi, n_cols, xq, xd, xs, table, scratch):
    s = 0.0
    for b in range(n_cols // 32):
        o = b * 34
        s += (_half(row, o, table) * np.float64(xd[b])) * np.float64(dot_i8x32(rowi, o + 2, xq, b * 32))
    return s


@njit(cache=True, inline="always")
def _row_q5_0(row, rowi, n_cols, xq, xd, xs, table, scratch):
    s = 0.0
    for b in range(n_cols // 32):
        o = b * 22
        qh = (np.uint32(row[o + 2]) | (np.uint32(row[o + 3]) << np.uint32(8))
              | (np.uint32(row[o + 4]) << np.uint32(16)) | (np.uint32(row[o + 5]) << np.uint32(24)))
        isum = np.int64(dot_nib16x2(row, o + 6, 16, xq, b * 32)) + 16 * np.int64(dot_bits32(qh, xq, b * 32))
        s += (_half(row, o, table) * np.float64(xd[b])) * np.float64(isum)
    return s


@njit(cache=True, inline="always")
def _row_mxfp4(row, rowi, n_cols, xq, xd, xs, table, scratch):
    s = 0.0
    for b in range(n_cols // 32):
        o = b * 17
        for j in range(16):
            v = np.int64(row[o + 1 + j])
            scratch[j] = KVALUES_I8[v & 15]
            scratch[j + 16] = KVALUES_I8[v >> 4]
        dw = math.ldexp(1.0, np.int64(row[o]) - 128)
        s += (dw * np.float64(xd[b])) * np.float64(dot_i8x32(scratch, 0, xq, b * 32))
    return s


@njit(cache=True, inline="always")
def _row_q45_k(row, rowi, n_cols, xq, xd, xs, table, five):
    size = 176 if five else 144
    nib = 48 if five else 16
    s = 0.0
    for b in range(n_cols // 256):
        o = b * size
        acc_sc = 0
        acc_m = 0
        for j in range(8):
            sc, m = _scale_min(row, o + 4, j)
            xo = b * 256 + j * 32
            isum = np.int64(dot_field32(row, o + nib + (j >> 1) * 32, 4 * (j & 1), 15, xq, xo))
            if five:
                isum += 16 * np.int64(dot_field32(row, o + 16, j, 1, xq, xo))
            acc_sc += sc * isum
            acc_m += m * np.int64(xs[b * 8 + j])
        dx = np.float64(xd[b])
        s += (_half(row, o, table) * dx) * np.float64(acc_sc) - (_half(row, o + 2, table) * dx) * np.float64(acc_m)
    return s


@njit(cache=True, inline="always")
def _row_q6_k(row, rowi, n_cols, xq, xd, xs, table, scratch):
    s = 0.0
    for b in range(n_cols // 256):
        o = b * 210
        acc = 0
        for g in range(16):
            h = g >> 3
            kk = (g & 7) * 16
            isum = dot_q6x16(row, o + h * 64 + (kk & 63), 4 * (kk >> 6), o + 128 + h * 32 + (kk & 31),
                             2 * (kk >> 5), xq, b * 256 + g * 16)
            acc += np.int64(rowi[o + 192 + g]) * np.int64(isum)
        s += (_half(row, o + 208, table) * np.float64(xd[b])) * np.float64(acc)
    return s


@njit(cache=True)
def qdot_row(kind, row, rowi, n_cols, xq, xd, xs, table, scratch):
    """float64 dot of one quantized row with one quantized activation (module table), before rounding.

    Parameters
    ----------
    kind : int
        ggml type id (one of :data:`QDOT_TYPES`).
    row, rowi : (row_bytes,) uint8 / int8 ndarray
        The row, and the same bytes viewed as int8.
    n_cols : int
    xq : (n_cols,) int8 ndarray
    xd : (n_cols // block,) float32 ndarray
    xs : int32 ndarray
        Q8_K sub-block sums (``n_cols // 32``); unused for Q8_0 activations.
    table : (65536,) float32 ndarray
        Half -> float.
    scratch : (32,) int8 ndarray
        Work space (MXFP4).
    """
    if kind == Q4_0:
        return _row_q4_0(row, rowi, n_cols, xq, xd, xs, table, scratch)
    if kind == Q8_0:
        return _row_q8_0(row, rowi, n_cols, xq, xd, xs, table, scratch)
    if kind == Q5_0:
        return _row_q5_0(row, rowi, n_cols, xq, xd, xs, table, scratch)
    if kind == MXFP4:
        return _row_mxfp4(row, rowi, n_cols, xq, xd, xs, table, scratch)
    if kind == Q4_K or kind == Q5_K:
        return _row_q45_k(row, rowi, n_cols, xq, xd, xs, table, kind == Q5_K)
    if kind == Q6_K:
        return _row_q6_k(row, rowi, n_cols, xq, xd, xs, table, scratch)
    raise ValueError("qdot: unsupported ggml type id")


@njit(cache=True)
def _qdot_rows(kind, raw, rawi, n_cols, xq, xd, xs, table, out, r0, r1, xs1):
    """``out[v, r] = float32(dot(raw[r], x[v]))`` for rows ``r0..r1-1`` of any type of :data:`QDOT_ALL`
    (``xs``: int32 block sums; ``xs1``: Q8_1's float32 block sums, read by Q4_1 / Q5_1 only; the types of
    :mod:`refsim.kernels.qdot_ext` go to its row loop)."""
    if not (kind == Q4_0 or kind == Q8_0 or kind == Q5_0 or kind == MXFP4 or kind == Q4_K or kind == Q5_K
            or kind == Q6_K):
        qdot_ext._rows(kind, raw, n_cols, xq, xd, xs1, table, out, r0, r1)
        return
    # one loop per type, each with its row function inlined (a shared call costs ~1.7x here)
    scratch = np.empty(32, dtype=np.int8)
    n_vec = xq.shape[0]
    if raw.strides[1] == 1:
        # four rows at a time (simd.q4_0_rows4 and the like: the same float64 sums as the row functions,
        # bit for bit); the rows left over go one at a time below
        nb = n_cols // 32 if kind == Q4_0 or kind == Q8_0 or kind == Q5_0 or kind == MXFP4 else n_cols // 256
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
                out[v, r] = np.float32(_row_q4_0(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, scratch))
    elif kind == Q8_0:
        for r in range(r0, r1):
            for v in range(n_vec):
                out[v, r] = np.float32(_row_q8_0(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, scratch))
    elif kind == Q5_0:
        for r in range(r0, r1):
            for v in range(n_vec):
                out[v, r] = np.float32(_row_q5_0(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, scratch))
    elif kind == MXFP4:
        for r in range(r0, r1):
            for v in range(n_vec):
                out[v, r] = np.float32(_row_mxfp4(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, scratch))
    elif kind == Q4_K:
        for r in range(r0, r1):
            for v in range(n_vec):
                out[v, r] = np.float32(_row_q45_k(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, False))
    elif kind == Q5_K:
        for r in range(r0, r1):
            for v in range(n_vec):
                out[v, r] = np.float32(_row_q45_k(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, True))
    elif kind == Q6_K:
        for r in range(r0, r1):
            for v in range(n_vec):
                out[v, r] = np.float32(_row_q6_k(raw[r], rawi[r], n_cols, xq[v], xd[v], xs[v], table, scratch))
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
    _qdot_rows(kind, raw, rawi, n_cols, xq, xd, xs, table, out, 0, raw.shape[0], xd)


@njit(cache=True, parallel=True)
def qdot_kernel_parallel(kind, raw, rawi, n_cols, xq, xd, xs, table, out):
    """:func:`qdot_kernel` with rows split over threads in chunks of :data:`CHUNK` (same bits)."""
    n_rows = raw.shape[0]
    for ch in prange((n_rows + CHUNK - 1) // CHUNK):
        _qdot_rows(kind, raw, rawi, n_cols, xq, xd, xs, table, out, ch * CHUNK, min(n_rows, (ch + 1) * CHUNK), xd)


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
        _qdot_rows(kind, raw3[e], rawi3[e], n_cols, xq[i:i + 1], xd[i:i + 1], xs[i:i + 1], table, out[i:i + 1],
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
        _qdot_rows(kind, raw3[e], rawi3[e], n_cols, xq[i:i + 1], xd[i:i + 1], xs[i:i + 1], table, out[i:i + 1],
                   ch * CHUNK, min(n_rows, (ch + 1) * CHUNK), xd)


# --- Python entry points -----------------------------------------------------------------------

PARALLEL_MIN_ELEMENTS = 1 << 20
"""Products of at least this many weight elements (``n_vec * n_rows * n_cols``, 1 Mi) are split over
threads; smaller ones run on one thread. Results are identical either way."""


def act_block(qtype: int) -> int:
    """Activation block of weight ``qtype``: 32 (Q8_0, Q8_1) or 256 (Q8_K).

    Raises
    ------
    ConfigError
        ``qtype`` is not in :data:`QDOT_ALL`.
    """
    if qtype in Q8_0_WEIGHTS or qtype in qdot_ext.Q8_0_WEIGHTS or qtype in qdot_ext.Q8_1_WEIGHTS:
        return 32
    if qtype in Q8_K_WEIGHTS or qtype in qdot_ext.Q8_K_WEIGHTS:
        return 256
    raise ConfigError(f"qdot: ggml type {qtype} has no integer product (supported ids: {QDOT_ALL})")


_BLOCK_BYTES = {Q4_0: (32, 18), Q5_0: (32, 22), Q8_0: (32, 34), MXFP4: (32, 17), Q4_K: (256, 144), Q5_K: (256, 176),
                Q6_K: (256, 210)}
"""ggml type id -> (elements, bytes) per block (``gguf.GGML_QUANT_SIZES``; tests/kernels check they agree)."""


def _check_rows(raw: np.ndarray, qtype: int, n_cols: int, ndim: int) -> np.ndarray:
    block, size = _BLOCK_BYTES[qtype] if qtype in _BLOCK_BYTES else qdot_ext.BLOCK_BYTES[qtype]
    if n_cols <= 0 or n_cols % block:
        raise ConfigError(f"qdot: n_cols {n_cols} is not a positive multiple of ggml type {qtype}'s block {block}")
    rb = n_cols // block * size
    raw = np.asarray(raw)
    if raw.ndim != ndim or raw.dtype != np.uint8 or raw.shape[-1] != rb:
        raise ConfigError(f"qdot: rows have shape {raw.shape} {raw.dtype}; ggml type {qtype} rows of {n_cols} "
                          f"elements need {ndim}-D uint8 with last axis {rb}")
    return np.ascontiguousarray(raw)


def _q8_1_sums(acts: QActs, qtype: int) -> np.ndarray:
    """The ``s`` array :mod:`refsim.kernels.qdot_ext` reads: Q8_1's block sums for Q4_1/Q5_1 (ConfigError
    if ``acts`` lacks them), else a placeholder it never reads."""
    if qtype in qdot_ext.Q8_1_WEIGHTS:
        if acts.s is None or acts.s.shape != acts.bsum.shape:
            raise ConfigError(f"qdot: ggml type {qtype} multiplies Q8_1 activations; these have no block sums "
                              "(make them with quantize_acts(x, 32))")
        return acts.s
    return np.zeros((acts.q.shape[0], 1), dtype=np.float32)


def qdot_matmul(raw: np.ndarray, qtype: int, n_cols: int, acts: QActs) -> np.ndarray:
    """``W @ x.T`` for quantized rows ``W`` and quantized activations (module table).

    Parameters
    ----------
    raw : (n_rows, row_bytes) uint8 ndarray
        Weight rows (a memory-mapped view; only these bytes are read).
    qtype : int
        ggml type id in :data:`QDOT_ALL`.
    n_cols : int
    acts : QActs
        From :func:`quantize_acts` with ``block = act_block(qtype)``.

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
    if acts.q.shape[0] and qtype in qdot_ext.EXT_TYPES:
        big = acts.q.shape[0] * raw.shape[0] * n_cols >= PARALLEL_MIN_ELEMENTS
        kernel = qdot_ext.ext_kernel_parallel if big else qdot_ext.ext_kernel
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
    if ids.size and qtype in qdot_ext.EXT_TYPES:
        big = ids.size * raw3.shape[1] * n_cols >= PARALLEL_MIN_ELEMENTS
        kernel = qdot_ext.ext_pairs_kernel_parallel if big else qdot_ext.ext_pairs_kernel
        kernel(int(qtype), raw3, n_cols, ids, acts.q, acts.d, _q8_1_sums(acts, qtype), F16_TO_F32, out)
    elif ids.size:
        big = ids.size * raw3.shape[1] * n_cols >= PARALLEL_MIN_ELEMENTS
        kernel = qdot_pairs_kernel_parallel if big else qdot_pairs_kernel
        kernel(int(qtype), raw3, raw3.view(np.int8), n_cols, ids, acts.q, acts.d, acts.bsum, F16_TO_F32, out)
    return out


__all__ = [
    "CHUNK",
    "PARALLEL_MIN_ELEMENTS",
    "QDOT_ALL",
    "Q8_0_WEIGHTS",
    "Q8_K_WEIGHTS",
    "QDOT_TYPES",
    "QActs",
    "act_block",
    "f16_round",
    "qdot_matmul",
    "qdot_pairs",
    "quantize_acts",
    "quantize_acts_into",
]
