"""F32, F16 and BF16 row decoders.

- F32: the row's bytes viewed as little-endian float32.
- F16: half bits -> float32 by table (:data:`refsim.kernels.registry.F16_TO_F32`).
- BF16: ``bits << 16`` reinterpreted as float32 (gguf-py ``BF16.dequantize_blocks``).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def decode_row_f32(row, n_cols, out):
    """row : (4 n_cols,) uint8 -> out : (n_cols,) float32."""
    v = row.view(np.float32)
    for i in range(n_cols):
        out[i] = v[i]


@njit(cache=True)
def decode_row_f16(row, n_cols, table, out):
    """row : (2 n_cols,) uint8 -> out : (n_cols,) float32, via the half table."""
    for i in range(n_cols):
        out[i] = table[np.int64(row[2 * i]) | (np.int64(row[2 * i + 1]) << 8)]


@njit(cache=True)
def decode_row_bf16(row, n_cols, out):
    """row : (2 n_cols,) uint8 -> out : (n_cols,) float32 (written through a uint32 view)."""
    bits = out.view(np.uint32)
    for i in range(n_cols):
        bits[i] = (np.uint32(row[2 * i]) | (np.uint32(row[2 * i + 1]) << np.uint32(8))) << np.uint32(16)
