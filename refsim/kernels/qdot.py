"""One quantized weight row times one int8-quantized activation by exact integer block dots: the one-row
references of the ``ggml`` mode's products, and the activation quantisation every such product reads.

ggml's CPU backend quantizes an activation row to the weight type's ``vec_dot_type`` (Q8_0 for
Q4_0/Q5_0/Q8_0/MXFP4, Q8_K for Q4_K/Q5_K/Q6_K; :attr:`refsim.kernels.registry.QuantKernel.vec_dot_type`) and
multiplies integer blocks (ggml/src/ggml-cpu/ggml-cpu.c ``type_traits_cpu``; the ``ggml_vec_dot_*_q8_*``
functions of ggml/src/ggml-cpu/arch/x86/quants.c). :func:`qdot_row` does the same for one memory-mapped row,
never dequantizing a weight, for the types whose registry ``dot`` is :data:`refsim.kernels.registry.QDOT`:

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
TQ2_0 and the IQ1_S/IQ2/IQ3 grid types with Q8_K) have their one-row reference in
:mod:`refsim.kernels.qdot_ext`. Matrices of rows (one or four at a time, over threads) are
:mod:`refsim.kernels.ggml_matmul`'s (:func:`~refsim.kernels.ggml_matmul.qdot_matmul`,
:func:`~refsim.kernels.ggml_matmul.qdot_pairs`).

The terms are summed in float64 in block order and the sum is rounded once to float32. ``d_w *
d_x`` is exact in float64 (two halves, or a half/power of two and a float32); for Q8_0/Q4_0/Q5_0/MXFP4
the product with ``isum`` is exact too (at most 22 + 19 significant bits), so the only roundings are
the float64 additions. The value is the float64-accumulated product of the dequantized weight (as
gguf-py decodes it) and the round-tripped activation (:func:`quantize_acts` ``d * q``) up to float64
rounding, i.e. the same number :mod:`refsim.forward.actq` documents, computed the way llama.cpp does.
The block dots are the LLVM vector functions of :mod:`refsim.kernels.simd`; their sums are exact
integers, so SIMD lane order cannot change a bit.

Activation quantisation (the same rules as :mod:`refsim.forward.actq`, which states their source):
Q8_0 per 32: ``amax``, ``q = round_half_even(x * (127/amax))``, ``d = f16(amax/127)``; Q8_K per 256:
``max`` (signed element of largest magnitude, first on ties), ``iscale = -127/max``,
``q = min(127, round_half_even(iscale * x))``, ``d = 1/iscale`` (float32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from refsim.errors import ConfigError
from refsim.kernels.k_quants import _scale_min
from refsim.kernels.registry import MXFP4, Q4_0, Q4_K, Q5_0, Q5_K, Q6_K, Q8_0
from refsim.kernels.simd import dot_bits32, dot_field32, dot_i8x32, dot_nib16x2, dot_nibu16x2, dot_q6x16

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
#
# One function per weight type, each inlined where it is called (the dispatch of
# refsim.kernels.ggml_matmul runs one loop per type with its row function inlined: a shared call costs
# ~1.7x there); qdot_row dispatches on the type id. Arguments as qdot_row's; ``row_q45_k`` takes ``five``
# (True for Q5_K) in place of ``scratch``.

@njit(cache=True)
def _half(row, o, table):
    return np.float64(table[np.int64(row[o]) | (np.int64(row[o + 1]) << 8)])


@njit(cache=True, inline="always")
def row_q4_0(row, rowi, n_cols, xq, xd, xs, table, scratch):
    s = 0.0
    for b in range(n_cols // 32):
        o = b * 18
        isum = np.int64(dot_nibu16x2(row, o + 2, xq, b * 32)) - 8 * np.int64(xs[b])
        s += (_half(row, o, table) * np.float64(xd[b])) * np.float64(isum)
    return s


@njit(cache=True, inline="always")
def row_q8_0(row, rowi, n_cols, xq, xd, xs, table, scratch):
    s = 0.0
    for b in range(n_cols // 32):
        o = b * 34
        s += (_half(row, o, table) * np.float64(xd[b])) * np.float64(dot_i8x32(rowi, o + 2, xq, b * 32))
    return s


@njit(cache=True, inline="always")
def row_q5_0(row, rowi, n_cols, xq, xd, xs, table, scratch):
    s = 0.0
    for b in range(n_cols // 32):
        o = b * 22
        qh = (np.uint32(row[o + 2]) | (np.uint32(row[o + 3]) << np.uint32(8))
              | (np.uint32(row[o + 4]) << np.uint32(16)) | (np.uint32(row[o + 5]) << np.uint32(24)))
        isum = np.int64(dot_nib16x2(row, o + 6, 16, xq, b * 32)) + 16 * np.int64(dot_bits32(qh, xq, b * 32))
        s += (_half(row, o, table) * np.float64(xd[b])) * np.float64(isum)
    return s


@njit(cache=True, inline="always")
def row_mxfp4(row, rowi, n_cols, xq, xd, xs, table, scratch):
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
def row_q45_k(row, rowi, n_cols, xq, xd, xs, table, five):
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
def row_q6_k(row, rowi, n_cols, xq, xd, xs, table, scratch):
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
        ggml type id (one of :data:`refsim.kernels.registry.QDOT_TYPES`).
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
        return row_q4_0(row, rowi, n_cols, xq, xd, xs, table, scratch)
    if kind == Q8_0:
        return row_q8_0(row, rowi, n_cols, xq, xd, xs, table, scratch)
    if kind == Q5_0:
        return row_q5_0(row, rowi, n_cols, xq, xd, xs, table, scratch)
    if kind == MXFP4:
        return row_mxfp4(row, rowi, n_cols, xq, xd, xs, table, scratch)
    if kind == Q4_K or kind == Q5_K:
        return row_q45_k(row, rowi, n_cols, xq, xd, xs, table, kind == Q5_K)
    if kind == Q6_K:
        return row_q6_k(row, rowi, n_cols, xq, xd, xs, table, scratch)
    raise ValueError("qdot: unsupported ggml type id")


__all__ = [
    "KVALUES_I8",
    "QActs",
    "f16_round",
    "qdot_row",
    "quantize_acts",
    "quantize_acts_into",
    "round_tie",
    "row_mxfp4",
    "row_q45_k",
    "row_q4_0",
    "row_q5_0",
    "row_q6_k",
    "row_q8_0",
]
