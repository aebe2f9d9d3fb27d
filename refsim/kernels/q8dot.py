"""Integer dot products of Q8_0 weight rows with Q8_0-quantized activations (the ``ggml`` mode's big matmul).

ggml's CPU path multiplies a Q8_0 weight by an activation it first quantizes to Q8_0
(``vec_dot_type``): per 32-block, ``d_w * d_x * sum(q_w * q_x)`` (ggml-cpu ``ggml_vec_dot_q8_0_q8_0``).
This module does the same product over a memory-mapped weight without dequantizing it: it is what
makes Gemma-3's tied 262144 x 640 output projection (178 MB of Q8_0) affordable per decode.

Accumulation: ``d_w * d_x`` is exact in float64 (two halves), ``isum`` is an exact int64, their
product has at most 42 significant bits (exact in float64); the block terms are summed in float64
in block order and rounded once to float32. The result therefore equals
:func:`refsim.kernels.matmul` of the round-tripped activation (``d_x * q_x``) up to float64 summation
rounding, far below float32 resolution (tests/forward/test_gemma3_numerics.py checks it).

Q8_0 activation rule (the same as :mod:`refsim.forward.actq`, which documents its source):
``amax = max|x|`` per 32-block, ``d = f16(amax / 127)``, ``q = round_half_even(x * (127 / amax))``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from refsim.errors import ConfigError
from refsim.kernels.registry import F16_TO_F32

Q8_0_BLOCK = 32
Q8_0_TYPE_SIZE = 34  # f16 scale + 32 int8
_CHUNK = 256  # rows per parallel work item; each out[v, r] is computed by one thread in a fixed order


@njit(cache=True, parallel=True)
def q8_0_q8_0_matmul_kernel(raw, wq, xq, xd, table, out):
    """out[v, r] = sum_b f16(raw[r, b].d) * xd[v, b] * sum_j wq[r, b*34+2+j] * xq[v, b*32+j].

    Parameters
    ----------
    raw : (n_rows, n_blocks * 34) uint8 ndarray
        Q8_0 rows (memmap view).
    wq : (n_rows, n_blocks * 34) int8 ndarray
        The same bytes viewed as int8.
    xq : (n_vec, n_blocks * 32) int8 ndarray
    xd : (n_vec, n_blocks) float32 ndarray
    table : (65536,) float32 ndarray
        Half -> float.
    out : (n_vec, n_rows) float32 ndarray
        Written in place; float64 accumulation over blocks, one rounding.
    """
    n_rows = raw.shape[0]
    n_vec = xq.shape[0]
    nb = xd.shape[1]
    n_chunks = (n_rows + _CHUNK - 1) // _CHUNK
    for ch in prange(n_chunks):
        for r in range(ch * _CHUNK, min(n_rows, (ch + 1) * _CHUNK)):
            rowu = raw[r]
            row = wq[r]
            for v in range(n_vec):
                xv = xq[v]
                s = 0.0
                for b in range(nb):
                    o = b * 34 + 2
                    isum = 0
                    for j in range(32):
                        isum += row[o + j] * xv[b * 32 + j]
                    dw = table[np.int64(rowu[o - 2]) | (np.int64(rowu[o - 1]) << 8)]
                    s += np.float64(dw) * np.float64(xd[v, b]) * np.float64(isum)
                out[v, r] = np.float32(s)


def quantize_q8_0(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quantize activation rows to Q8_0.

    Parameters
    ----------
    x : (n_vec, n_cols) float32 ndarray
        ``n_cols`` a multiple of 32.

    Returns
    -------
    q : (n_vec, n_cols) int8 ndarray
    d : (n_vec, n_cols // 32) float32 ndarray
        Block scales (values of f16). ``d[:, b] * q[:, 32b:32b+32]`` is the round trip.

    Raises
    ------
    ConfigError
        ``x`` not 2-D or ``n_cols`` not a multiple of 32.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] % Q8_0_BLOCK:
        raise ConfigError(f"x has shape {x.shape}; expected (n_vec, n_cols) with n_cols a multiple of 32")
    xb = x.reshape(x.shape[0], -1, Q8_0_BLOCK)                               # [n_vec, n_blocks, 32]
    amax = np.abs(xb).max(axis=2)                                            # [n_vec, n_blocks]
    d = (amax / np.float32(127.0)).astype(np.float16).astype(np.float32)
    with np.errstate(divide="ignore"):
        iden = np.where(amax != 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    q = np.rint((xb * iden[:, :, None]).astype(np.float32)).astype(np.int8).reshape(x.shape)
    return q, d


def q8_0_matmul_q8_0(raw: np.ndarray, n_cols: int, x: np.ndarray) -> np.ndarray:
    """``W @ x.T`` with W a Q8_0 tensor and ``x`` quantized to Q8_0 first (ggml's CPU rule).

    Parameters
    ----------
    raw : (n_rows, n_cols / 32 * 34) uint8 ndarray
        Q8_0 rows, e.g. ``Model.raw('token_embd.weight')`` (memory-mapped; never copied).
    n_cols : int
        Elements per row (GGUF ne0).
    x : (n_vec, n_cols) float32 ndarray

    Returns
    -------
    (n_vec, n_rows) float32 ndarray

    Raises
    ------
    ConfigError
        Shapes that disagree with ``n_cols``.
    """
    raw = np.asarray(raw)
    nb = n_cols // Q8_0_BLOCK
    if n_cols % Q8_0_BLOCK or raw.ndim != 2 or raw.dtype != np.uint8 or raw.shape[1] != nb * Q8_0_TYPE_SIZE:
        raise ConfigError(f"raw has shape {raw.shape} {raw.dtype}; Q8_0 rows of {n_cols} elements need "
                          f"(n_rows, {nb * Q8_0_TYPE_SIZE}) uint8")
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != n_cols:
        raise ConfigError(f"x has shape {x.shape}, expected (n_vec, {n_cols})")
    q, d = quantize_q8_0(x)
    out = np.empty((x.shape[0], raw.shape[0]), dtype=np.float32)
    q8_0_q8_0_matmul_kernel(raw, raw.view(np.int8), q, d, F16_TO_F32, out)
    return out


__all__ = ["quantize_q8_0", "q8_0_matmul_q8_0"]
