"""Q4_0, Q5_0 and Q8_0 row decoders (blocks of 32; f16 scale ``d`` first).

Layouts (gguf-py ``quants.py``; ggml ``block_q4_0``/``block_q5_0``/``block_q8_0``):

- Q4_0 (18 B): d, 16 B nibbles; element j < 16 is the low nibble of byte j, element j + 16 its
  high nibble; value = d * (q - 8).
- Q5_0 (22 B): d, u32 high bits ``qh`` (bit j is element j's bit 4), 16 B nibbles as Q4_0;
  value = d * (q - 16).
- Q8_0 (34 B): d, 32 int8; value = d * q.

Every product is one float32 multiply of ``d`` by the integer as float32, as in gguf-py.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q
from numba import njit

from refsim.kernels.registry import register

for _t in (Q.Q4_0, Q.Q5_0, Q.Q8_0):
    register(_t, __name__)


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
