"""IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S row decoders (super-blocks of 256; values from fixed grids).

Each group of 8 (IQ2) or 4 (IQ3) weights is one row of a lattice ``grid`` (ggml-common.h
``iq2xxs_grid`` etc.; the tables used here are gguf-py's ``quants.py`` copies, unpacked by its
``init_grid``), times a sign per weight and a float32 sub-block scale ``db``:

- IQ2_XXS (66 B): f16 d; per 32 elements two u32: ``w0`` = 4 grid indices (bytes), ``w1`` = four
  7-bit sign indices (bits 7l..7l+6, into ``ksigns``) and the scale ``s = w1 >> 28``;
  ``db = (d * (0.5 + s)) * 0.25``.
- IQ2_XS (74 B): f16 d, 32 u16 (index ``q & 511``, sign index ``q >> 9``), 8 B of 4-bit scales
  (one per 16 elements); ``db`` as IQ2_XXS.
- IQ2_S (82 B): f16 d, 32 B index low bytes, 32 B sign bytes, 8 B index high bits (2 per group),
  8 B scales as IQ2_XS.
- IQ3_XXS (98 B): f16 d, 64 grid indices (4 values each), 8 u32 as IQ2_XXS's ``w1``;
  ``db = (d * (0.5 + s)) * 0.5``.
- IQ3_S (110 B): f16 d, 64 B index low bytes, 8 B index high bits, 32 B sign bits, 4 B scales
  (one nibble per 32); ``db = d * (1 + 2 s)``.

value = (db * grid) * sign, each product one float32 rounding (gguf-py's ``db * grid * signs``).

- IQ1_S (50 B): f16 d, 32 B index low bytes, 8 u16 ``qh`` (one per 32 elements: bits 3l..3l+2 the
  high index bits of group l, bits 12..14 the scale ``s``, bit 15 the sign of ``delta = 0.125``);
  grid values -1, 0, 1 (ggml ``iq1s_grid``); value = (d * (2 s + 1)) * (grid + delta).
- IQ1_M (56 B): 32 B index low bytes, 16 B of nibbles (group g: nibble g; bits 0..2 the high index
  bits, bit 3 the sign of delta), 4 u16 holding sixteen 3-bit scales (scale i: bits 3 (i % 4) of
  u16 i // 4, one per 16 elements) and, in their top nibbles, the f16 ``d`` (u16 k's top nibble is
  bits 4k..4k+3 of d); value = (d * (2 s + 1)) * (grid + delta).
"""

from __future__ import annotations

import numpy as np
from gguf import quants as _gq
from numba import njit

from refsim.kernels.legacy import _half


def _grid(cls) -> np.ndarray:
    cls.init_grid()
    return np.ascontiguousarray(cls.grid.reshape(cls.grid_shape), dtype=np.float32)


GRID_IQ2_XXS = _grid(_gq.IQ2_XXS)
"""(256, 8) float32 (ggml ``iq2xxs_grid``)."""
GRID_IQ2_XS = _grid(_gq.IQ2_XS)
"""(512, 8) float32 (ggml ``iq2xs_grid``)."""
GRID_IQ2_S = _grid(_gq.IQ2_S)
"""(1024, 8) float32 (ggml ``iq2s_grid``)."""
GRID_IQ3_XXS = _grid(_gq.IQ3_XXS)
"""(256, 4) float32 (ggml ``iq3xxs_grid``)."""
GRID_IQ3_S = _grid(_gq.IQ3_S)
"""(512, 4) float32 (ggml ``iq3s_grid``)."""
GRID_IQ1_S = _grid(_gq.IQ1_S)
"""(2048, 8) float32 of -1, 0, 1 (ggml ``iq1s_grid``)."""
IQ1S_DELTA = np.float32(0.125)
"""ggml ``IQ1S_DELTA`` (gguf-py ``IQ1_S.delta``)."""
KSIGNS = np.frombuffer(_gq.IQ2_XXS.ksigns, dtype=np.uint8).copy()
"""(128,) uint8: 7-bit sign index -> 8 sign bits (ggml ``ksigns_iq2xs``)."""


@njit(cache=True)
def _u32(row, o):
    return (np.int64(row[o]) | (np.int64(row[o + 1]) << 8) | (np.int64(row[o + 2]) << 16)
            | (np.int64(row[o + 3]) << 24))


@njit(cache=True)
def _sgn(bits, j):
    return np.float32(-1.0) if (bits >> j) & 1 else np.float32(1.0)


@njit(cache=True)
def decode_row_iq2_xxs(row, n_cols, table, out):
    """row : (n_cols / 256 * 66,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 66
        d = _half(row, o, table)
        for ib in range(8):
            w0 = o + 2 + 8 * ib
            w1 = _u32(row, w0 + 4)
            db = (d * (np.float32(0.5) + np.float32(w1 >> 28))) * np.float32(0.25)
            for l in range(4):
                g = GRID_IQ2_XXS[np.int64(row[w0 + l])]
                bits = np.int64(KSIGNS[(w1 >> (7 * l)) & 127])
                for j in range(8):
                    out[b * 256 + 32 * ib + 8 * l + j] = (db * g[j]) * _sgn(bits, j)


@njit(cache=True)
def decode_row_iq2_xs(row, n_cols, table, out):
    """row : (n_cols / 256 * 74,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 74
        d = _half(row, o, table)
        for gi in range(32):
            q = np.int64(row[o + 2 + 2 * gi]) | (np.int64(row[o + 3 + 2 * gi]) << 8)
            s = (np.int64(row[o + 66 + (gi >> 2)]) >> (4 * ((gi >> 1) & 1))) & 15
            db = (d * (np.float32(0.5) + np.float32(s))) * np.float32(0.25)
            g = GRID_IQ2_XS[q & 511]
            bits = np.int64(KSIGNS[q >> 9])
            for j in range(8):
                out[b * 256 + 8 * gi + j] = (db * g[j]) * _sgn(bits, j)


@njit(cache=True)
def decode_row_iq2_s(row, n_cols, table, out):
    """row : (n_cols / 256 * 82,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 82
        d = _half(row, o, table)
        for gi in range(32):
            idx = np.int64(row[o + 2 + gi]) | (((np.int64(row[o + 66 + (gi >> 2)]) >> (2 * (gi & 3))) & 3) << 8)
            s = (np.int64(row[o + 74 + (gi >> 2)]) >> (4 * ((gi >> 1) & 1))) & 15
            db = (d * (np.float32(0.5) + np.float32(s))) * np.float32(0.25)
            g = GRID_IQ2_S[idx]
            bits = np.int64(row[o + 34 + gi])
            for j in range(8):
                out[b * 256 + 8 * gi + j] = (db * g[j]) * _sgn(bits, j)


@njit(cache=True)
def decode_row_iq3_xxs(row, n_cols, table, out):
    """row : (n_cols / 256 * 98,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 98
        d = _half(row, o, table)
        for ib in range(8):
            w = _u32(row, o + 66 + 4 * ib)
            db = (d * (np.float32(0.5) + np.float32(w >> 28))) * np.float32(0.5)
            for l in range(4):
                bits = np.int64(KSIGNS[(w >> (7 * l)) & 127])
                for k in range(2):
                    g = GRID_IQ3_XXS[np.int64(row[o + 2 + 8 * ib + 2 * l + k])]
                    for t in range(4):
                        j = 4 * k + t
                        out[b * 256 + 32 * ib + 8 * l + j] = (db * g[t]) * _sgn(bits, j)


@njit(cache=True)
def decode_row_iq3_s(row, n_cols, table, out):
    """row : (n_cols / 256 * 110,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 110
        d = _half(row, o, table)
        for i in range(64):
            idx = np.int64(row[o + 2 + i]) | (((np.int64(row[o + 66 + (i >> 3)]) >> (i & 7)) & 1) << 8)
            k = i >> 3                                    # sub-block of 32
            s = (np.int64(row[o + 106 + (k >> 1)]) >> (4 * (k & 1))) & 15
            db = d * np.float32(1 + 2 * s)
            g = GRID_IQ3_S[idx]
            for t in range(4):
                e = 4 * i + t
                bits = np.int64(row[o + 74 + (e >> 3)])
                out[b * 256 + e] = (db * g[t]) * _sgn(bits, e & 7)


@njit(cache=True)
def decode_row_iq1_s(row, n_cols, table, out):
    """row : (n_cols / 256 * 50,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 50
        d = _half(row, o, table)
        for ib in range(8):
            qh = np.int64(row[o + 34 + 2 * ib]) | (np.int64(row[o + 35 + 2 * ib]) << 8)
            dl = d * np.float32(2 * ((qh >> 12) & 7) + 1)
            delta = -IQ1S_DELTA if qh & 0x8000 else IQ1S_DELTA
            for l in range(4):
                g = GRID_IQ1_S[np.int64(row[o + 2 + 4 * ib + l]) | (((qh >> (3 * l)) & 7) << 8)]
                for j in range(8):
                    out[b * 256 + 32 * ib + 8 * l + j] = dl * (g[j] + delta)


@njit(cache=True)
def iq1_m_d_bits(row, o):
    """The f16 bits of IQ1_M's ``d``, gathered from the top nibbles of the 4 scale u16 at ``row[o + 48]``."""
    h = 0
    for k in range(4):
        h |= (np.int64(row[o + 49 + 2 * k]) >> 4) << (4 * k)
    return h


@njit(cache=True)
def iq1_m_scale(row, o, i):
    """3-bit scale ``i`` (0..15) of the IQ1_M block at ``row[o]``."""
    w = np.int64(row[o + 48 + 2 * (i >> 2)]) | (np.int64(row[o + 49 + 2 * (i >> 2)]) << 8)
    return (w >> (3 * (i & 3))) & 7


@njit(cache=True)
def decode_row_iq1_m(row, n_cols, table, out):
    """row : (n_cols / 256 * 56,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 56
        d = table[iq1_m_d_bits(row, o)]
        for gi in range(32):
            dl = d * np.float32(2 * iq1_m_scale(row, o, gi >> 1) + 1)
            nib = (np.int64(row[o + 32 + (gi >> 1)]) >> (4 * (gi & 1))) & 15
            delta = -IQ1S_DELTA if nib & 8 else IQ1S_DELTA
            g = GRID_IQ1_S[np.int64(row[o + gi]) | ((nib & 7) << 8)]
            for j in range(8):
                out[b * 256 + 8 * gi + j] = dl * (g[j] + delta)
