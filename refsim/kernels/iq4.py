"""IQ4_NL and IQ4_XS row decoders (4-bit indices into a fixed non-linear table of 16 int8 values).

Layouts (gguf-py ``quants.py`` ``IQ4_NL`` / ``IQ4_XS``; ggml ``block_iq4_nl`` / ``block_iq4_xs``):

- IQ4_NL (18 B, blocks of 32): f16 d, 16 B of nibbles; element j < 16 is byte j's low nibble,
  j + 16 its high nibble; value = d * KVALUES_IQ4[nibble].
- IQ4_XS (136 B, super-blocks of 256): f16 d, u16 ``scales_h``, 4 B ``scales_l``, 128 B nibbles.
  Sub-block ``ib`` (32 elements): scale ``ls = (scales_l[ib // 2] >> 4 (ib % 2)) & 15 | ((scales_h >>
  2 ib) & 3) << 4``; its 16 bytes at ``8 + 16 ib`` hold elements as IQ4_NL's;
  value = (d * (ls - 32)) * KVALUES_IQ4[nibble].

Each parenthesis and product is one float32 rounding, as gguf-py's NumPy expressions.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from refsim.kernels.legacy import _half


KVALUES_IQ4 = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)
"""The IQ4 value table (ggml-common.h ``kvalues_iq4nl``; gguf-py ``IQ4_NL.kvalues``)."""

_KV = KVALUES_IQ4.astype(np.float32)


@njit(cache=True)
def iq4_xs_scale(row, o, ib):
    """Signed 6-bit scale ``ls - 32`` of sub-block ``ib`` (0..7) of the IQ4_XS block at ``row[o]``."""
    lo = (np.int64(row[o + 4 + (ib >> 1)]) >> (4 * (ib & 1))) & 15
    sh = np.int64(row[o + 2]) | (np.int64(row[o + 3]) << 8)
    return (lo | (((sh >> (2 * ib)) & 3) << 4)) - 32


@njit(cache=True)
def decode_row_iq4_nl(row, n_cols, table, out):
    """row : (n_cols / 32 * 18,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 32):
        o = b * 18
        d = _half(row, o, table)
        for j in range(16):
            q = np.int64(row[o + 2 + j])
            out[b * 32 + j] = d * _KV[q & 15]
            out[b * 32 + j + 16] = d * _KV[q >> 4]


@njit(cache=True)
def decode_row_iq4_xs(row, n_cols, table, out):
    """row : (n_cols / 256 * 136,) uint8 -> out : (n_cols,) float32."""
    for b in range(n_cols // 256):
        o = b * 136
        d = _half(row, o, table)
        for ib in range(8):
            dl = d * np.float32(iq4_xs_scale(row, o, ib))
            base = o + 8 + 16 * ib
            e = b * 256 + 32 * ib
            for j in range(16):
                q = np.int64(row[base + j])
                out[e + j] = dl * _KV[q & 15]
                out[e + j + 16] = dl * _KV[q >> 4]
