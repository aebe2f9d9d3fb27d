"""Q2_K, Q3_K, Q4_K, Q5_K and Q6_K row decoders (super-blocks of 256).

Layouts (gguf-py ``quants.py``; ggml ``block_q4_K`` / ``block_q5_K`` / ``block_q6_K``):

- Q4_K (144 B): f16 d, f16 dmin, 12 B packed 6-bit scale/min for 8 sub-blocks of 32, 128 B of
  nibbles (32-byte chunk c holds sub-block 2c in low nibbles, 2c + 1 in high nibbles).
  value = (d * sc) * q - (dmin * m): each parenthesis and each operation rounded to float32.
- Q5_K (176 B): d, dmin, 12 B scales, 32 B high bits (bit j of byte i: element i of sub-block j),
  128 B nibbles as Q4_K; q has 5 bits.
- Q6_K (210 B): 128 B low nibbles, 64 B 2-bit highs, 16 int8 scales (sub-blocks of 16), f16 d;
  value = (d * sc) * (q - 32).
- Q2_K (84 B): 16 scale bytes (sub-blocks of 16: low nibble scale, high nibble min), 64 B of 2-bit
  quants, f16 d, f16 dmin. Element ``e = 128 h + 32 s + l`` is bits ``2s..2s+1`` of byte
  ``32 h + l``; value = (d * sc) * q - (dmin * m).
- Q3_K (110 B): 32 B ``hmask``, 64 B of 2-bit quants (laid out as Q2_K's), 12 B of 6-bit scales
  (sub-blocks of 16, stored minus 32), f16 d. Element ``e``'s high bit is bit ``e // 32`` of
  ``hmask[e % 32]``; q = low2 - 4 if that bit is clear, else low2; value = (d * sc) * q.
  Scale ``i``: low nibble of byte ``i`` (i < 8) or high nibble of byte ``i - 8``, with bits
  ``2 (i // 4)`` of byte ``8 + i % 4`` as bits 4..5.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _half(row, o, table):
    return table[np.int64(row[o]) | (np.int64(row[o + 1]) << 8)]


@njit(cache=True)
def _scale_min(row, o, j):
    """6-bit (scale, min) of sub-block j from the 12 scale bytes at ``row[o:o + 12]``."""
    if j < 4:
        sc = np.int64(row[o + j]) & 63
        m = np.int64(row[o + 4 + j]) & 63
    else:
        sc = (np.int64(row[o + 4 + j]) & 15) | ((np.int64(row[o + j - 4]) >> 6) << 4)
        m = (np.int64(row[o + 4 + j]) >> 4) | ((np.int64(row[o + j]) >> 6) << 4)
    return sc, m


@njit(cache=True)
def two_bit(row, o, e):
    """2-bit field of element ``e`` (0..255) in the 64-byte QK_K layout at ``row[o]`` (Q2_K, Q3_K, TQ2_0):
    bits ``2 s`` of byte ``32 h + l`` for ``e = 128 h + 32 s + l``."""
    return (np.int64(row[o + (e >> 7) * 32 + (e & 31)]) >> (2 * ((e >> 5) & 3))) & 3


@njit(cache=True)
def decode_row_q4_k(row, n_cols, table, out):
    """row : (n_cols / 256 * 144,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 144
        d = _half(row, o, table)
        dmin = _half(row, o + 2, table)
        for j in range(8):
            sc, m = _scale_min(row, o + 4, j)
            dj = d * np.float32(sc)
            mj = dmin * np.float32(m)
            base = o + 16 + (j >> 1) * 32
            shift = 4 * (j & 1)
            for i in range(32):
                q = (np.int64(row[base + i]) >> shift) & 15
                out[b * 256 + j * 32 + i] = dj * np.float32(q) - mj


@njit(cache=True)
def decode_row_q5_k(row, n_cols, table, out):
    """row : (n_cols / 256 * 176,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 176
        d = _half(row, o, table)
        dmin = _half(row, o + 2, table)
        for j in range(8):
            sc, m = _scale_min(row, o + 4, j)
            dj = d * np.float32(sc)
            mj = dmin * np.float32(m)
            base = o + 48 + (j >> 1) * 32
            shift = 4 * (j & 1)
            for i in range(32):
                q = ((np.int64(row[base + i]) >> shift) & 15) | (((np.int64(row[o + 16 + i]) >> j) & 1) << 4)
                out[b * 256 + j * 32 + i] = dj * np.float32(q) - mj


@njit(cache=True)
def decode_row_q6_k(row, n_cols, table, out):
    """row : (n_cols / 256 * 210,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 210
        d = _half(row, o + 208, table)
        for k in range(256):
            h = k >> 7
            kk = k & 127
            nib = (np.int64(row[o + h * 64 + (kk & 63)]) >> (4 * (kk >> 6))) & 15
            hi = (np.int64(row[o + 128 + h * 32 + (kk & 31)]) >> (2 * (kk >> 5))) & 3
            sc = np.int64(row[o + 192 + (k >> 4)])
            if sc >= 128:
                sc -= 256
            out[b * 256 + k] = (d * np.float32(sc)) * np.float32((nib | (hi << 4)) - 32)


@njit(cache=True)
def decode_row_q2_k(row, n_cols, table, out):
    """row : (n_cols / 256 * 84,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 84
        d = _half(row, o + 80, table)
        dmin = _half(row, o + 82, table)
        for g in range(16):
            sc = np.int64(row[o + g])
            dl = d * np.float32(sc & 15)
            ml = dmin * np.float32(sc >> 4)
            for t in range(16):
                e = g * 16 + t
                out[b * 256 + e] = dl * np.float32(two_bit(row, o + 16, e)) - ml


@njit(cache=True)
def q3_k_scale(row, o, i):
    """Signed 6-bit scale ``i`` (0..15) of the Q3_K block whose 12 scale bytes start at ``row[o]``."""
    lo = (np.int64(row[o + (i & 7)]) >> (4 * (i >> 3))) & 15
    hi = (np.int64(row[o + 8 + (i & 3)]) >> (2 * (i >> 2))) & 3
    return (lo | (hi << 4)) - 32


@njit(cache=True)
def q3_k_quant(row, o, e):
    """Signed 3-bit quant (-4..3) of element ``e`` of the Q3_K block at ``row[o]``."""
    low = two_bit(row, o + 32, e)
    high = (np.int64(row[o + (e & 31)]) >> (e >> 5)) & 1
    return low - 4 * (1 - high)


@njit(cache=True)
def decode_row_q3_k(row, n_cols, table, out):
    """row : (n_cols / 256 * 110,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 110
        d = _half(row, o + 108, table)
        for g in range(16):
            dl = d * np.float32(q3_k_scale(row, o + 96, g))
            for t in range(16):
                e = g * 16 + t
                out[b * 256 + e] = dl * np.float32(q3_k_quant(row, o, e))
