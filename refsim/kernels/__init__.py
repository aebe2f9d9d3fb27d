"""Numba kernels for GGUF weight types: dequantize rows, and quantized matrix x vector(s).

Registered types (:data:`KERNELS`, keyed by ``gguf.GGMLQuantizationType``): F32, F16, BF16, Q4_0,
Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL,
IQ4_XS, TQ1_0, TQ2_0, MXFP4. Dequantization is bit-exact against
``gguf.quants.dequantize``. Entry points take the raw rows (e.g. one expert's slice from
``Model.expert_raw``), never a whole tensor unless you pass one.

Every per-type fact is the registry's (:mod:`refsim.kernels.registry`). The modules are layered, each
importing only from those before it: :mod:`~refsim.kernels.simd` (block-dot primitives) and the dequantization
families -> :mod:`~refsim.kernels.registry` -> one row at a time (:mod:`~refsim.kernels.loops`,
:mod:`~refsim.kernels.qdot`, :mod:`~refsim.kernels.qdot_ext`) -> four rows at a time
(:mod:`~refsim.kernels.rows4`, :mod:`~refsim.kernels.simd_ext`, :mod:`~refsim.kernels.simd_exact`) ->
:mod:`~refsim.kernels.ggml_matmul` (the ``ggml`` numerics mode's products) and this module.

The Numba loops themselves (:mod:`refsim.kernels.loops`) take arrays and ints only; set
``NUMBA_DISABLE_JIT=1`` to run them as plain Python.
"""

from __future__ import annotations

# Before any kernel is decorated or run: OpenMP's idle-worker defaults (read when Numba starts its thread
# pool) and Numba's cache folder keyed by refsim's source (refsim.jitcache).
from refsim import jitcache

jitcache.configure_openmp()
jitcache.configure()

import numpy as np

from refsim.errors import ConfigError
from refsim.kernels.loops import dequantize_rows_kernel, matmul_kernel
from refsim.kernels.mxfp4 import KVALUES
from refsim.kernels.registry import F16_TO_F32, KERNELS, QuantKernel, kernel_for

__all__ = ["KERNELS", "QuantKernel", "dequantize_rows", "matmul", "matvec", "require_kernel", "row_bytes"]


def require_kernel(qtype, tensor: str, path) -> None:
    """Check that refsim can decode ``tensor`` (of ggml type ``qtype``, in file ``path``).

    Called where a model's tensors are bound for computing (:meth:`refsim.model.Model.dequantize`,
    the forward passes' weight loaders), so a type refsim can list (``refsim inspect``) but not
    compute fails before any product, naming the file, the tensor and the type.

    Raises
    ------
    ConfigError
        :func:`refsim.kernels.registry.kernel_for`'s ``"<path>: tensor '<name>': no kernel for
        ggml type T (id N) (supported: ...)"``.
    """
    kernel_for(qtype, f"{path}: tensor {tensor!r}")


def _entry(qtype) -> QuantKernel:
    return kernel_for(qtype)


def row_bytes(qtype, n_cols: int) -> int:
    """Bytes of one row of ``n_cols`` elements of ``qtype``.

    Raises
    ------
    ConfigError
        Unsupported type, or ``n_cols`` not a multiple of its block size.
    """
    k = _entry(qtype)
    if n_cols <= 0 or n_cols % k.block_size:
        raise ConfigError(f"n_cols {n_cols} is not a positive multiple of {k.qtype.name} block size {k.block_size}")
    return k.row_bytes(n_cols)


def _rows(raw: np.ndarray, qtype, n_cols: int) -> tuple[QuantKernel, np.ndarray]:
    k = _entry(qtype)
    rb = row_bytes(qtype, n_cols)
    raw = np.asarray(raw)
    if raw.dtype != np.uint8:
        raw = raw.view(np.uint8)
    if raw.ndim == 1:
        raw = raw.reshape(1, -1)
    if raw.ndim != 2 or raw.shape[1] != rb:
        raise ConfigError(f"raw rows have shape {raw.shape}; {k.qtype.name} rows of {n_cols} elements "
                          f"need (n_rows, {rb}) uint8")
    return k, np.ascontiguousarray(raw)


def dequantize_rows(raw: np.ndarray, qtype, n_cols: int) -> np.ndarray:
    """Dequantize rows.

    Parameters
    ----------
    raw : (n_rows, row_bytes) uint8 ndarray
        Packed rows (a memmap view is fine; only these bytes are read).
    qtype : gguf.GGMLQuantizationType or int
    n_cols : int
        Elements per row (GGUF ne0).

    Returns
    -------
    (n_rows, n_cols) float32 ndarray
        Bit-identical to ``gguf.quants.dequantize(raw, qtype)``.

    Raises
    ------
    ConfigError
        Unsupported type or a row length that does not match ``n_cols``.
    """
    k, raw = _rows(raw, qtype, n_cols)
    out = np.empty((raw.shape[0], n_cols), dtype=np.float32)
    dequantize_rows_kernel(k.kind, raw, n_cols, F16_TO_F32, KVALUES, out)
    return out


def matmul(raw: np.ndarray, qtype, n_cols: int, x: np.ndarray) -> np.ndarray:
    """``W @ x.T`` for a small batch: quantized rows times ``n_vec`` vectors.

    Parameters
    ----------
    raw : (n_rows, row_bytes) uint8 ndarray
        W, GGUF ``ne = {n_cols, n_rows}`` (e.g. one expert's ``ffn_up_exps`` slice).
    qtype : gguf.GGMLQuantizationType or int
    n_cols : int
    x : (n_vec, n_cols) float32 ndarray
        Input vectors (converted to float32 C order).

    Returns
    -------
    (n_vec, n_rows) float32 ndarray
        float64 accumulation of exact float64 products, rounded once to float32.
    """
    k, raw = _rows(raw, qtype, n_cols)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != n_cols:
        raise ConfigError(f"x has shape {x.shape}, expected (n_vec, {n_cols})")
    out = np.empty((x.shape[0], raw.shape[0]), dtype=np.float32)
    matmul_kernel(k.kind, raw, n_cols, F16_TO_F32, KVALUES, x, out)
    return out


def matvec(raw: np.ndarray, qtype, n_cols: int, x: np.ndarray) -> np.ndarray:
    """``W @ x`` for one vector ``x : (n_cols,)``; returns ``(n_rows,)`` float32 (see :func:`matmul`)."""
    return matmul(raw, qtype, n_cols, np.asarray(x).reshape(1, -1))[0]
