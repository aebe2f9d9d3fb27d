"""Integer block products for the further weight types (the ``ggml`` mode's products for Q4_1, Q5_1,
IQ4_NL, Q2_K, Q3_K, IQ4_XS, TQ1_0, TQ2_0, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S).

The one-row references of the types whose registry ``dot`` is :data:`refsim.kernels.registry.QDOT_EXT`, with
the same contract as :mod:`refsim.kernels.qdot` (both are reached through :mod:`refsim.kernels.ggml_matmul`'s
:func:`~refsim.kernels.ggml_matmul.qdot_matmul` and :func:`~refsim.kernels.ggml_matmul.qdot_pairs`): the
activation row is quantized to the weight type's
``vec_dot_type`` (ggml/src/ggml-cpu/ggml-cpu.c ``type_traits_cpu``: Q8_1 for Q4_1/Q5_1, Q8_0 for
IQ4_NL, Q8_K for the others), each block's integer sum is exact, and the block terms of
ggml/src/ggml-cpu/quants.c ``ggml_vec_dot_*_generic`` are formed and summed in float64 in block order,
rounded once to float32:

==========  ========  ============================================================================================
weight      acts      term added per block ``b`` (``d``, ``m``, ``dmin``: the weight's f16 fields)
==========  ========  ============================================================================================
Q4_1        Q8_1      ``(f64(d) * f64(d_x)) * isum + f64(m) * f64(s_x)``, ``isum = sum_j q_j x_j``, ``q`` = nibble
Q5_1        Q8_1      the same with ``q = nibble | high_bit << 4`` (0..31)
IQ4_NL      Q8_0      ``(f64(d) * f64(d_x)) * isum``, ``q = kvalues_iq4nl[nibble]``
IQ4_XS      Q8_K      ``(f64(d) * f64(d_x)) * sum_ib (ls_ib - 32) isum_ib`` over the 8 sub-blocks of 32
Q3_K        Q8_K      ``(f64(d) * f64(d_x)) * sum_g sc_g isum_g`` over the 16 sub-blocks of 16, ``q`` in -4..3
Q2_K        Q8_K      ``(f64(d) * f64(d_x)) * sum_g (sc_g & 15) isum_g - (f64(dmin) * f64(d_x)) * sum_g (sc_g >> 4)
                      bsum_g`` over the 16 sub-blocks of 16 (``bsum_g``: sum of the activation's int8 values)
TQ1_0/TQ2_0 Q8_K      ``(f64(d) * f64(d_x)) * isum``, ``q = code - 1`` in -1..1
IQ2_*,      Q8_K      ``(f64(d) * f64(d_x)) * sum_e (2 s + 1) grid_e sign_e x_e`` (``s`` the 4-bit sub-block scale,
IQ3_*                 ``grid_e`` the lattice value as an integer); the row's sum is then scaled by 1/8 (IQ2), 1/4
                      (IQ3_XXS) or 1 (IQ3_S), exactly in float64 (quants.c ``*s = 0.125f * sumf`` etc.)
IQ1_S       Q8_K      ``(f64(d) * f64(d_x)) * sum_ib (2 s + 1) (8 sum grid x + sign_ib sum x)`` over the 8
                      sub-blocks of 32, the row scaled by 1/8 (``IQ1S_DELTA`` = 1/8)
==========  ========  ============================================================================================

Q8_1 is Q8_0 (the same ``q`` and f16 ``d_x``; arch/x86/quants.c ``quantize_row_q8_1``) plus
``s_x = f16(float32(d * sum_j q_j))`` with ``d = amax / 127`` in float32 before its f16 rounding
(:attr:`refsim.kernels.qdot.QActs.s`). So Q4_1/Q5_1's ``m`` term uses llama.cpp's rounded block sum,
not ``f16(d_x) * sum q``.

Contiguous rows of Q4_1, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, TQ1_0 and TQ2_0 (the registry's ``rows4``) go four
at a time in :mod:`refsim.kernels.simd_ext`, equal to :func:`ext_row` bit for bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from refsim.kernels.iq4 import KVALUES_IQ4, iq4_xs_scale
from refsim.kernels.iq_grid import GRID_IQ1_S, GRID_IQ2_S, GRID_IQ2_XS, GRID_IQ2_XXS, GRID_IQ3_S, GRID_IQ3_XXS, KSIGNS
from refsim.kernels.k_quants import q3_k_quant, q3_k_scale, two_bit
from refsim.kernels.registry import (IQ1_S, IQ2_S, IQ2_XS, IQ2_XXS, IQ3_S, IQ3_XXS, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_1,
                                     Q5_1, TQ1_0, TQ2_0, TYPE_SIZE)
from refsim.kernels.ternary import tq1_0_code

_KV = KVALUES_IQ4.astype(np.int64)
_G2XXS, _G2XS, _G2S = (g.astype(np.int64) for g in (GRID_IQ2_XXS, GRID_IQ2_XS, GRID_IQ2_S))
_G3XXS, _G3S, _G1S = (g.astype(np.int64) for g in (GRID_IQ3_XXS, GRID_IQ3_S, GRID_IQ1_S))
_KS = KSIGNS.astype(np.int64)


@njit(cache=True)
def _u32(row, o):
    return (np.int64(row[o]) | (np.int64(row[o + 1]) << 8) | (np.int64(row[o + 2]) << 16)
            | (np.int64(row[o + 3]) << 24))


@njit(cache=True)
def _signed(v, bits, j):
    return -v if (bits >> j) & 1 else v


@njit(cache=True)
def _iq_superblock(kind, row, o, xq, xo):
    """Integer ``sum_e (2 s + 1) grid_e sign_e x_e`` of one IQ2/IQ3 super-block at ``row[o]``."""
    acc = 0
    if kind == IQ2_XXS or kind == IQ3_XXS:
        for ib in range(8):
            w = _u32(row, o + 66 + 4 * ib) if kind == IQ3_XXS else _u32(row, o + 2 + 8 * ib + 4)
            isum = 0
            for l in range(4):
                bits = _KS[(w >> (7 * l)) & 127]
                for j in range(8):
                    if kind == IQ2_XXS:
                        g = _G2XXS[np.int64(row[o + 2 + 8 * ib + l]), j]
                    else:
                        g = _G3XXS[np.int64(row[o + 2 + 8 * ib + 2 * l + (j >> 2)]), j & 3]
                    isum += _signed(g, bits, j) * np.int64(xq[xo + 32 * ib + 8 * l + j])
            acc += (2 * (w >> 28) + 1) * isum
    elif kind == IQ2_XS or kind == IQ2_S:
        for gi in range(32):
            if kind == IQ2_XS:
                q = np.int64(row[o + 2 + 2 * gi]) | (np.int64(row[o + 3 + 2 * gi]) << 8)
                grid = _G2XS[q & 511]
                bits = _KS[q >> 9]
                s = (np.int64(row[o + 66 + (gi >> 2)]) >> (4 * ((gi >> 1) & 1))) & 15
            else:
                idx = np.int64(row[o + 2 + gi]) | (((np.int64(row[o + 66 + (gi >> 2)]) >> (2 * (gi & 3))) & 3) << 8)
                grid = _G2S[idx]
                bits = np.int64(row[o + 34 + gi])
                s = (np.int64(row[o + 74 + (gi >> 2)]) >> (4 * ((gi >> 1) & 1))) & 15
            isum = 0
            for j in range(8):
                isum += _signed(grid[j], bits, j) * np.int64(xq[xo + 8 * gi + j])
            acc += (2 * s + 1) * isum
    elif kind == IQ1_S:
        for ib in range(8):
            qh = np.int64(row[o + 34 + 2 * ib]) | (np.int64(row[o + 35 + 2 * ib]) << 8)
            gsum = 0
            xsum = 0
            for l in range(4):
                idx = np.int64(row[o + 2 + 4 * ib + l]) | (((qh >> (3 * l)) & 7) << 8)
                for j in range(8):
                    x = np.int64(xq[xo + 32 * ib + 8 * l + j])
                    gsum += _G1S[idx, j] * x
                    xsum += x
            acc += (2 * ((qh >> 12) & 7) + 1) * (8 * gsum + (-xsum if qh & 0x8000 else xsum))
    else:                                                 # IQ3_S
        for k in range(8):
            s = (np.int64(row[o + 106 + (k >> 1)]) >> (4 * (k & 1))) & 15
            isum = 0
            for m in range(8):
                i = 8 * k + m
                idx = np.int64(row[o + 2 + i]) | (((np.int64(row[o + 66 + k]) >> m) & 1) << 8)
                for t in range(4):
                    e = 4 * i + t
                    isum += _signed(_G3S[idx, t], np.int64(row[o + 74 + (e >> 3)]), e & 7) * np.int64(xq[xo + e])
            acc += (2 * s + 1) * isum
    return acc


@njit(cache=True)
def _half(row, o, table):
    return np.float64(table[np.int64(row[o]) | (np.int64(row[o + 1]) << 8)])


@njit(cache=True)
def ext_row(kind, row, n_cols, xq, xd, xs, table):
    """float64 dot of one quantized row with one quantized activation (module table), before rounding.

    Parameters
    ----------
    kind : int
        ggml type id in :data:`refsim.kernels.registry.EXT_TYPES`.
    row : (row_bytes,) uint8 ndarray
    n_cols : int
    xq : (n_cols,) int8 ndarray
    xd : (n_cols // block,) float32 ndarray
        Activation block scales (f16 values for Q8_0/Q8_1, float32 for Q8_K).
    xs : (n_cols // 32,) float32 ndarray
        Q8_1's ``s`` (f16 values); unused for the other types.
    table : (65536,) float32 ndarray
        Half -> float.
    """
    s = 0.0
    if kind == Q4_1 or kind == Q5_1:
        size = 20 if kind == Q4_1 else 24
        qo = 4 if kind == Q4_1 else 8
        for b in range(n_cols // 32):
            o = b * size
            qh = 0
            if kind == Q5_1:
                qh = (np.int64(row[o + 4]) | (np.int64(row[o + 5]) << 8) | (np.int64(row[o + 6]) << 16)
                      | (np.int64(row[o + 7]) << 24))
            isum = 0
            for j in range(16):
                c = np.int64(row[o + qo + j])
                lo = (c & 15) | (((qh >> j) & 1) << 4)
                hi = (c >> 4) | (((qh >> (j + 16)) & 1) << 4)
                isum += lo * np.int64(xq[b * 32 + j]) + hi * np.int64(xq[b * 32 + j + 16])
            s += (_half(row, o, table) * np.float64(xd[b])) * np.float64(isum) \
                + _half(row, o + 2, table) * np.float64(xs[b])
    elif kind == IQ4_NL:
        for b in range(n_cols // 32):
            o = b * 18
            isum = 0
            for j in range(16):
                c = np.int64(row[o + 2 + j])
                isum += _KV[c & 15] * np.int64(xq[b * 32 + j]) + _KV[c >> 4] * np.int64(xq[b * 32 + j + 16])
            s += (_half(row, o, table) * np.float64(xd[b])) * np.float64(isum)
    elif kind == IQ4_XS:
        for b in range(n_cols // 256):
            o = b * 136
            acc = 0
            for ib in range(8):
                isum = 0
                base = o + 8 + 16 * ib
                xo = b * 256 + 32 * ib
                for j in range(16):
                    c = np.int64(row[base + j])
                    isum += _KV[c & 15] * np.int64(xq[xo + j]) + _KV[c >> 4] * np.int64(xq[xo + j + 16])
                acc += iq4_xs_scale(row, o, ib) * isum
            s += (_half(row, o, table) * np.float64(xd[b])) * np.float64(acc)
    elif kind == Q3_K:
        for b in range(n_cols // 256):
            o = b * 110
            acc = 0
            for g in range(16):
                isum = 0
                for t in range(16):
                    e = g * 16 + t
                    isum += q3_k_quant(row, o, e) * np.int64(xq[b * 256 + e])
                acc += q3_k_scale(row, o + 96, g) * isum
            s += (_half(row, o + 108, table) * np.float64(xd[b])) * np.float64(acc)
    elif kind == Q2_K:
        for b in range(n_cols // 256):
            o = b * 84
            acc = 0
            accm = 0
            for g in range(16):
                isum = 0
                bsum = 0
                for t in range(16):
                    e = g * 16 + t
                    x = np.int64(xq[b * 256 + e])
                    isum += two_bit(row, o + 16, e) * x
                    bsum += x
                sc = np.int64(row[o + g])
                acc += (sc & 15) * isum
                accm += (sc >> 4) * bsum
            dx = np.float64(xd[b])
            s += ((_half(row, o + 80, table) * dx) * np.float64(acc)
                  - (_half(row, o + 82, table) * dx) * np.float64(accm))
    elif kind == TQ2_0:
        for b in range(n_cols // 256):
            o = b * 66
            isum = 0
            for e in range(256):
                isum += (two_bit(row, o, e) - 1) * np.int64(xq[b * 256 + e])
            s += (_half(row, o + 64, table) * np.float64(xd[b])) * np.float64(isum)
    elif kind == TQ1_0:
        for b in range(n_cols // 256):
            o = b * 54
            isum = 0
            for e in range(256):
                isum += (tq1_0_code(row, o, e) - 1) * np.int64(xq[b * 256 + e])
            s += (_half(row, o + 52, table) * np.float64(xd[b])) * np.float64(isum)
    elif kind == IQ2_XXS or kind == IQ2_XS or kind == IQ2_S or kind == IQ3_XXS or kind == IQ3_S or kind == IQ1_S:
        size = TYPE_SIZE[kind]
        for b in range(n_cols // 256):
            acc = _iq_superblock(kind, row, b * size, xq, b * 256)
            s += (_half(row, b * size, table) * np.float64(xd[b])) * np.float64(acc)
        s *= 0.125 if (kind == IQ2_XXS or kind == IQ2_XS or kind == IQ2_S or kind == IQ1_S) else (
            0.25 if kind == IQ3_XXS else 1.0)
    else:
        raise ValueError("qdot_ext: unsupported ggml type id")
    return s


__all__ = ["ext_row"]
