"""The row loops shared by every type: dequantize rows, and multiply rows by vectors.

Each loop decodes one row at a time (``decode_row``, dispatching on the ggml type id ``kind`` to the
decoder :data:`refsim.kernels.registry.KERNELS` names for it) into a float32 buffer, so only the bytes
of the rows passed in are read: pass an expert's slice (``Model.expert_raw``) and nothing else of the
tensor is touched.

Accumulation (``matmul``): every product ``w * x`` is formed in float64 (exact, since both are
float32) and summed in float64 in column order; the sum is rounded once to float32.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from refsim.kernels.floats import decode_row_bf16, decode_row_f16, decode_row_f32
from refsim.kernels.iq4 import decode_row_iq4_nl, decode_row_iq4_xs
from refsim.kernels.iq_grid import (decode_row_iq1_m, decode_row_iq1_s, decode_row_iq2_s, decode_row_iq2_xs, decode_row_iq2_xxs,
                                    decode_row_iq3_s, decode_row_iq3_xxs)
from refsim.kernels.k_quants import (decode_row_q2_k, decode_row_q3_k, decode_row_q4_k, decode_row_q5_k,
                                     decode_row_q6_k)
from refsim.kernels.legacy import decode_row_q4_0, decode_row_q4_1, decode_row_q5_0, decode_row_q5_1, decode_row_q8_0
from refsim.kernels.mxfp4 import decode_row_mxfp4
from refsim.kernels.registry import (BF16, F16, F32, IQ1_M, IQ1_S, IQ2_S, IQ2_XS, IQ2_XXS, IQ3_S, IQ3_XXS, IQ4_NL,
                                     IQ4_XS, MXFP4, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0, TQ1_0,
                                     TQ2_0)
from refsim.kernels.ternary import decode_row_tq1_0, decode_row_tq2_0


@njit(cache=True)
def decode_row(kind, row, n_cols, table, kvalues, out):
    """Decode one row.

    Parameters
    ----------
    kind : int
        ggml type id.
    row : (row_bytes,) uint8 ndarray
    n_cols : int
        Elements in the row (a multiple of the block size).
    table : (65536,) float32 ndarray
        Half -> float table.
    kvalues : (16,) float32 ndarray
        MXFP4 e2m1 values.
    out : (n_cols,) float32 ndarray
        Written in place.
    """
    if kind == Q4_K:
        decode_row_q4_k(row, n_cols, table, out)
    elif kind == Q6_K:
        decode_row_q6_k(row, n_cols, table, out)
    elif kind == Q8_0:
        decode_row_q8_0(row, n_cols, table, out)
    elif kind == Q5_0:
        decode_row_q5_0(row, n_cols, table, out)
    elif kind == Q4_0:
        decode_row_q4_0(row, n_cols, table, out)
    elif kind == Q5_K:
        decode_row_q5_k(row, n_cols, table, out)
    elif kind == MXFP4:
        decode_row_mxfp4(row, n_cols, kvalues, out)
    elif kind == F32:
        decode_row_f32(row, n_cols, out)
    elif kind == F16:
        decode_row_f16(row, n_cols, table, out)
    elif kind == BF16:
        decode_row_bf16(row, n_cols, out)
    elif kind == Q4_1:
        decode_row_q4_1(row, n_cols, table, out)
    elif kind == Q5_1:
        decode_row_q5_1(row, n_cols, table, out)
    elif kind == IQ4_NL:
        decode_row_iq4_nl(row, n_cols, table, out)
    elif kind == IQ4_XS:
        decode_row_iq4_xs(row, n_cols, table, out)
    elif kind == Q3_K:
        decode_row_q3_k(row, n_cols, table, out)
    elif kind == Q2_K:
        decode_row_q2_k(row, n_cols, table, out)
    elif kind == TQ2_0:
        decode_row_tq2_0(row, n_cols, table, out)
    elif kind == TQ1_0:
        decode_row_tq1_0(row, n_cols, table, out)
    elif kind == IQ2_XXS:
        decode_row_iq2_xxs(row, n_cols, table, out)
    elif kind == IQ2_XS:
        decode_row_iq2_xs(row, n_cols, table, out)
    elif kind == IQ2_S:
        decode_row_iq2_s(row, n_cols, table, out)
    elif kind == IQ3_XXS:
        decode_row_iq3_xxs(row, n_cols, table, out)
    elif kind == IQ3_S:
        decode_row_iq3_s(row, n_cols, table, out)
    elif kind == IQ1_S:
        decode_row_iq1_s(row, n_cols, table, out)
    elif kind == IQ1_M:
        decode_row_iq1_m(row, n_cols, table, out)
    else:
        raise ValueError("unsupported ggml type id")


@njit(cache=True)
def dequantize_rows_kernel(kind, raw, n_cols, table, kvalues, out):
    """raw : (n_rows, row_bytes) uint8 -> out : (n_rows, n_cols) float32, bit-exact vs gguf-py."""
    for r in range(raw.shape[0]):
        decode_row(kind, raw[r], n_cols, table, kvalues, out[r])


@njit(cache=True)
def matmul_kernel(kind, raw, n_cols, table, kvalues, x, out):
    """out[v, r] = sum_c W[r, c] * x[v, c].

    Parameters
    ----------
    raw : (n_rows, row_bytes) uint8 ndarray
        Quantized weight rows W (GGUF ``ne = {n_cols, n_rows}``).
    x : (n_vec, n_cols) float32 ndarray
    out : (n_vec, n_rows) float32 ndarray
        Written in place. float64 accumulation, one rounding to float32.
    """
    n_rows = raw.shape[0]
    n_vec = x.shape[0]
    w = np.empty(n_cols, dtype=np.float32)
    for r in range(n_rows):
        decode_row(kind, raw[r], n_cols, table, kvalues, w)
        for v in range(n_vec):
            s = 0.0
            for c in range(n_cols):
                s += np.float64(w[c]) * np.float64(x[v, c])
            out[v, r] = np.float32(s)
