"""TQ1_0 and TQ2_0 row decoders (ternary weights {-1, 0, 1} times an f16 scale; super-blocks of 256).

Layouts (gguf-py ``quants.py`` ``TQ1_0`` / ``TQ2_0``; ggml ``block_tq1_0`` / ``block_tq2_0``):

- TQ2_0 (66 B): 64 B of 2-bit codes, f16 d. Element ``e = 128 h + 32 s + l`` is bits ``2s..2s+1``
  of byte ``32 h + l``; value = d * (code - 1).
- TQ1_0 (54 B): 48 B ``qs``, 4 B ``qh``, f16 d; five (``qh``: four) base-3 digits per byte, stored
  as ``ceil(v * 256 / 243)``. Digit ``p`` of a byte ``c`` is ``((c * 3^p mod 256) * 3) >> 8``
  (uint8 wrap-around, then a 16-bit product). Elements 0..159: digit ``p`` of ``qs[m]``, element
  ``32 p + m`` (m < 32); 160..239: digit ``p`` of ``qs[32 + m]``, element ``160 + 16 p + m``
  (m < 16); 240..255: digit ``p < 4`` of ``qh[m]``, element ``240 + 4 p + m`` (m < 4).
  value = d * (digit - 1).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from refsim.kernels.k_quants import two_bit
from refsim.kernels.legacy import _half


@njit(cache=True)
def trit(c, p):
    """Base-3 digit ``p`` (0..4) of the packed TQ1_0 byte ``c``: 0, 1 or 2."""
    pw = 1
    for _ in range(p):
        pw *= 3
    return (((np.int64(c) * pw) & 255) * 3) >> 8


@njit(cache=True)
def tq1_0_code(row, o, e):
    """Digit (0..2) of element ``e`` of the TQ1_0 block at ``row[o]``."""
    if e < 160:
        return trit(row[o + (e & 31)], e >> 5)
    if e < 240:
        return trit(row[o + 32 + ((e - 160) & 15)], (e - 160) >> 4)
    return trit(row[o + 48 + ((e - 240) & 3)], (e - 240) >> 2)


@njit(cache=True)
def decode_row_tq1_0(row, n_cols, table, out):
    """row : (n_cols / 256 * 54,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 54
        d = _half(row, o + 52, table)
        for e in range(256):
            out[b * 256 + e] = d * np.float32(tq1_0_code(row, o, e) - 1)


@njit(cache=True)
def decode_row_tq2_0(row, n_cols, table, out):
    """row : (n_cols / 256 * 66,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 66
        d = _half(row, o + 64, table)
        for e in range(256):
            out[b * 256 + e] = d * np.float32(two_bit(row, o, e) - 1)
