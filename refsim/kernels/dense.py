"""Float32 weight x activation rows with float64 accumulation (weights dequantized once, kept in RAM).

Used where a model's dense weights are small enough to decode once at load instead of on every
product (Gemma-3-270M: 18 blocks of 5.57 M weights = 100.3 M float32 = 401 MB RSS; see
:mod:`refsim.forward.gemma3`). The numbers are the dequantized weights (bit-exact with gguf-py),
so a product differs from :func:`refsim.forward.layers.linear` only by the order of its float64
sum: here the compiler may vectorise the sum over ``c`` (``fastmath``), but the order is fixed by
the compiled loop, so each ``out[v, r]`` is the same whatever ``n_vec`` is (batch-invariant).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from refsim.errors import ConfigError


@njit(cache=True, fastmath=True)
def f32_matmul_kernel(w, x, out):
    """out[v, r] = float32(sum_c float64(w[r, c]) * float64(x[v, c])).

    Parameters
    ----------
    w : (n_rows, n_cols) float32 ndarray
    x : (n_vec, n_cols) float32 ndarray
    out : (n_vec, n_rows) float32 ndarray
        Written in place.
    """
    n_rows, n_cols = w.shape
    for r in range(n_rows):
        wr = w[r]
        for v in range(x.shape[0]):
            xv = x[v]
            s = 0.0
            for c in range(n_cols):
                s += np.float64(wr[c]) * np.float64(xv[c])
            out[v, r] = np.float32(s)


def f32_matmul(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``x @ w.T`` for float32 ``w : (n_rows, n_cols)`` and ``x : (n_vec, n_cols)``; returns ``(n_vec, n_rows)`` float32.

    Raises
    ------
    ConfigError
        Shapes that disagree, or ``w`` not a C-contiguous float32 2-D array.
    """
    if w.dtype != np.float32 or w.ndim != 2 or not w.flags.c_contiguous:
        raise ConfigError(f"w must be a C-contiguous (n_rows, n_cols) float32 array, got {w.dtype} {w.shape}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != w.shape[1]:
        raise ConfigError(f"x has shape {x.shape}, expected (n_vec, {w.shape[1]})")
    out = np.empty((x.shape[0], w.shape[0]), dtype=np.float32)
    f32_matmul_kernel(w, x, out)
    return out


__all__ = ["f32_matmul"]
