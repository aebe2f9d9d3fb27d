"""Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 row decoders (blocks of 32; f16 scale ``d`` first).

Layouts (gguf-py ``quants.py``; ggml ``block_q4_0``/``block_q5_0``/``block_q8_0``):

- Q4_0 (18 B): d, 16 B nibbles; element j < 16 is the low nibble of byte j, element j + 16 its
  high nibble; value = d * (q - 8).
- Q5_0 (22 B): d, u32 high bits ``qh`` (bit j is element j's bit 4), 16 B nibbles as Q4_0;
  value = d * (q - 16).
- Q8_0 (34 B): d, 32 int8; value = d * q.
- Q4_1 (20 B): d, f16 min ``m``, 16 B nibbles as Q4_0; value = d * q + m (q in 0..15).
- Q5_1 (24 B): d, m, u32 ``qh``, 16 B nibbles as Q5_0; value = d * q + m (q in 0..31).

Every product is one float32 multiply of ``d`` by the integer as float32, as in gguf-py; Q4_1/Q5_1
then add ``m`` in a second float32 rounding (no fused multiply-add, as gguf-py's NumPy
``(d * qs) + m``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _half(row, o, table):
    return table[np.int64(row[o]) | (np.int64(row[o + 1]) << 8)]


@njit(cache=True)
def decode_row_q4_0(row, n_cols, table, out):
    """row : (n_cols / 32 * 18,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 32):
        o = b * 18
        d = _half(row, o, table)
        for j in range(16):
            q = np.int64(row[o + 2 + j])
            out[b * 32 + j] = d * np.float32((q & 15) - 8)
            out[b * 32 + j + 16] = d * np.float32((q >> 4) - 8)


@njit(cache=True)
def decode_row_q5_0(row, n_cols, table, out):
    """row : (n_cols / 32 * 22,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 32):
        o = b * 22
        d = _half(row, o, table)
        qh = (np.int64(row[o + 2]) | (np.int64(row[o + 3]) << 8) | (np.int64(row[o + 4]) << 16)
              | (np.int64(row[o + 5]) << 24))
        for j in range(16):
            q = np.int64(row[o + 6 + j])
            lo = (q & 15) | (((qh >> j) & 1) << 4)
            hi = (q >> 4) | (((qh >> (j + 16)) & 1) << 4)
            out[b * 32 + j] = d * np.float32(lo - 16)
            out[b * 32 + j + 16] = d * np.float32(hi - 16)


@njit(cache=True)
def decode_row_q8_0(row, n_cols, table, out):
    """row : (n_cols / 32 * 34,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 32):
        o = b * 34
        d = _half(row, o, table)
        for j in range(32):
            q = np.int64(row[o + 2 + j])
            if q >= 128:
                q -= 256
            out[b * 32 + j] = d * np.float32(q)


@njit(cache=True)
def decode_row_q4_1(row, n_cols, table, out):
    """row : (n_cols / 32 * 20,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 32):
        o = b * 20
        d = _half(row, o, table)
        m = _half(row, o + 2, table)
        for j in range(16):
            q = np.int64(row[o + 4 + j])
            out[b * 32 + j] = d * np.float32(q & 15) + m
            out[b * 32 + j + 16] = d * np.float32(q >> 4) + m


@njit(cache=True)
def decode_row_q5_1(row, n_cols, table, out):
    """row : (n_cols / 32 * 24,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 32):
        o = b * 24
        d = _half(row, o, table)
        m = _half(row, o + 2, table)
        qh = (np.int64(row[o + 4]) | (np.int64(row[o + 5]) << 8) | (np.int64(row[o + 6]) << 16)
              | (np.int64(row[o + 7]) << 24))
        for j in range(16):
            q = np.int64(row[o + 8 + j])
            lo = (q & 15) | (((qh >> j) & 1) << 4)
            hi = (q >> 4) | (((qh >> (j + 16)) & 1) << 4)
            out[b * 32 + j] = d * np.float32(lo) + m
            out[b * 32 + j + 16] = d * np.float32(hi) + m
