"""MXFP4 row decoder (blocks of 32, 17 B: one E8M0 exponent byte, 16 B of e2m1 nibbles).

value = 2**(e - 128) * KVALUES[nibble], where KVALUES are the doubled e2m1 values
{0, 1, 2, 3, 4, 6, 8, 12, and negatives}; element j < 16 is byte j's low nibble, j + 16 its high
nibble. ``2**(e - 128)`` is exactly gguf-py's ``e8m0_to_fp32_half`` for every e in 0..255
(e < 2 gives the subnormals 2**-128, 2**-127).

Source: gguf-py ``quants.py`` ``MXFP4``; ggml ``ggml_e8m0_to_fp32_half``.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


@njit(cache=True)
def decode_row_mxfp4(row, n_cols, kvalues, out):
    """row : (n_cols / 32 * 17,) uint8 -> out : (n_cols,) float32; ``kvalues`` = :data:`KVALUES`."""
    for b in range(n_cols // 32):
        o = b * 17
        d = np.float32(math.ldexp(1.0, np.int64(row[o]) - 128))
        for j in range(16):
            q = np.int64(row[o + 1 + j])
            out[b * 32 + j] = d * kvalues[q & 15]
            out[b * 32 + j + 16] = d * kvalues[q >> 4]
