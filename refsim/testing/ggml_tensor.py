"""ggml's tensor header as a ctypes structure: how the oracle tools read llama.cpp's tensors.

llama.cpp's eval callback (``cb_eval``, a ``ggml_backend_sched_eval_callback``) hands every graph
node to Python as a ``struct ggml_tensor *``. The layout below is ggml/include/ggml.h's
``struct ggml_tensor`` with ``GGML_MAX_DIMS`` 4, ``GGML_MAX_SRC`` 10 and ``GGML_MAX_NAME`` 64, as
built into llama-cpp-python 0.3.36 (the ``oracle`` extra). Only ctypes and NumPy are needed, so
the module imports without llama.cpp; the callers (tools/oracle_llamacpp.py,
tools/oracle_qwen35moe.py, tests/data/gemma3_make_tensor_digests.py) import llama_cpp themselves.
"""

from __future__ import annotations

import ctypes

import numpy as np

GGML_TYPE_F32 = 0
GGML_TYPE_I32 = 26
"""``enum ggml_type`` values of the two node types the tools read."""


class GgmlTensor(ctypes.Structure):
    """``struct ggml_tensor`` (ggml/include/ggml.h): ``ne`` = elements per dimension (ne[0] the
    fastest), ``nb`` = stride in bytes per dimension, ``data`` = address of element 0 in host
    memory (CPU backend), ``name`` = the graph node name (e.g. ``ffn_moe_topk-3``)."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4),
                ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16), ("flags", ctypes.c_int32),
                ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p),
                ("name", ctypes.c_char * 64), ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8)]


def tensor_at(t_ptr) -> GgmlTensor:
    """The tensor behind the callback's pointer argument (no copy: valid during the callback)."""
    return ctypes.cast(t_ptr, ctypes.POINTER(GgmlTensor)).contents


def tensor_name(t: GgmlTensor) -> str:
    """The node name, decoded (invalid UTF-8 replaced)."""
    return t.name.decode(errors="replace")


def read_tensor(t: GgmlTensor, dtype) -> np.ndarray:
    """Copy a (possibly strided, non-contiguous) host tensor out of llama.cpp's memory.

    Parameters
    ----------
    t : GgmlTensor
        A node handed to the eval callback after it was computed (``ask == False``).
    dtype : numpy dtype
        Element type matching ``t.type`` (``np.float32`` for F32, ``np.int32`` for I32).

    Returns
    -------
    ndarray, shape ``(ne[3], ne[2], ne[1], ne[0])``
        A C-contiguous copy in NumPy's axis order (ggml's ne[0] last).

    Raises
    ------
    ValueError
        If ``t.data`` is NULL (the tensor lives off the host or was not computed).
    """
    if not t.data:
        raise ValueError(f"tensor {tensor_name(t)!r}: no host data")
    itemsize = np.dtype(dtype).itemsize
    ne = [int(t.ne[i]) for i in range(4)]
    nb = [int(t.nb[i]) for i in range(4)]
    span = sum((ne[i] - 1) * nb[i] for i in range(4)) + itemsize
    buf = (ctypes.c_char * span).from_address(t.data)
    return np.ndarray(ne[::-1], dtype=dtype, buffer=buf, strides=nb[::-1]).copy()
