"""Loading a pass's tensors from a GGUF: memory-mapped quantized matrices, float32 norm vectors and
a layer's routed experts, with a one-line error naming the file and the tensor (shared by every
arch: qwen3moe, qwen35moe, gemma3).

Nothing is dequantized whole except the (small) vectors: matrices stay the file's raw rows
(:class:`refsim.forward.layers.QWeight`), read by the products one row at a time.
"""

from __future__ import annotations

import numpy as np

from refsim.errors import ModelFormatError
from refsim.forward.layers import ExpertWeights, QWeight
from refsim.kernels import require_kernel
from refsim.model import Model


def qweight(model: Model, name: str) -> QWeight:
    """Tensor ``name`` as raw quantized rows (``ne = {n_in, n_out}``; a memory-mapped view).

    Raises
    ------
    ModelFormatError
        A ggml type without a kernel (:func:`refsim.kernels.require_kernel`).
    """
    ti = model.tensor(name)
    require_kernel(ti.ggml_type, name, model.path)
    return QWeight(model.raw(name), int(ti.ggml_type), int(ti.shape_gguf[0]))


def vector(model: Model, name: str, n: int) -> np.ndarray:
    """Tensor ``name`` of GGUF shape ``[n]`` as a ``(n,)`` float32 ndarray (a norm weight, a bias).

    Raises
    ------
    ModelFormatError
        Another shape.
    """
    ti = model.tensor(name)
    if tuple(ti.shape_gguf) != (n,):
        raise ModelFormatError(f"{model.path}: {name} has shape {list(ti.shape_gguf)}, expected [{n}]")
    return np.ascontiguousarray(model.dequantize(name).reshape(-1), dtype=np.float32)


def expert_weights(model: Model, il: int) -> ExpertWeights:
    """Layer ``il``'s routed experts ``blk.{il}.ffn_{gate,up,down}_exps`` as ``(n_expert, rows, row_bytes)``
    views of the file (llama.cpp's separate gate/up/down tensors).

    Raises
    ------
    ModelFormatError
        A missing tensor (the fused ``ffn_gate_up_exps`` layout is not supported) or a ggml type
        without a kernel.
    """
    s = model.spec
    raws, types = [], []
    for part in ("gate", "up", "down"):
        name = f"blk.{il}.ffn_{part}_exps.weight"
        if name not in model.tensors:
            raise ModelFormatError(f"{model.path}: {name} missing (fused ffn_gate_up_exps is not supported yet)")
        ti = model.tensor(name)
        require_kernel(ti.ggml_type, name, model.path)
        raws.append(model.raw(name).reshape(s.n_expert, ti.shape_gguf[1], ti.row_bytes))
        types.append(int(ti.ggml_type))
    return ExpertWeights(raws[0], raws[1], raws[2], types[0], types[1], types[2], s.n_embd, s.n_ff_exp)
