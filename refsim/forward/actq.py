"""Activation quantisation of the ``ggml`` numerics mode (what llama.cpp's CPU path does to ``x``).

Before a matrix product with a quantized weight, ggml's CPU backend converts the activation
row to the weight type's ``vec_dot_type`` and multiplies integer blocks
(ggml/src/ggml-cpu/ggml-cpu.c ``type_traits_cpu[...].vec_dot_type``):

=====================================  ==================  ==========================
weight type                            vec_dot_type        :data:`ACT_*` code here
=====================================  ==================  ==========================
F32                                    F32 (unchanged)     ``ACT_NONE``
F16                                    F16                 ``ACT_F16``
BF16                                   BF16                ``ACT_BF16``
Q4_0, Q5_0, Q8_0, MXFP4, IQ4_NL        Q8_0                ``ACT_Q8_0``
Q4_1, Q5_1                             Q8_1                ``ACT_Q8_1``
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS,  Q8_K                ``ACT_Q8_K``
TQ1_0, TQ2_0, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
IQ2_S, IQ3_XXS, IQ3_S
=====================================  ==================  ==========================

Q8_1 quantizes exactly as Q8_0 (the same ``q`` and f16 ``d``) and adds each block's rounded sum
``s`` (:class:`refsim.kernels.qdot.QActs`), so its round trip ``d * q`` is Q8_0's.

For the Q8_0/Q8_K weight types refsim multiplies exactly as ggml does: the activation is
quantized to int8 blocks (:func:`refsim.kernels.qdot.quantize_acts`) and each block's integer sum
is scaled in float64 (:mod:`refsim.kernels.qdot`). :func:`quantize_activations` returns the
*round trip* ``x -> quantize -> dequantize`` (float32) of the same quantizer, used before the
float products (F16/BF16 weights) and by tests: a product of round-tripped values is the same
real number llama.cpp computes as integers times scales, so what separates refsim from llama.cpp
is llama.cpp's float32 rounding of its accumulation (about 1e-6 relative).

Rules (source: ggml/src/ggml-cpu/arch/x86/quants.c ``quantize_row_q8_0`` (AVX2 path, the one a
``GGML_NATIVE`` x86 build runs) and ggml/src/ggml-quants.c ``quantize_row_q8_K_ref``):

- Q8_0, blocks of 32: ``amax = max|x|``; ``d = amax / 127`` (float32) stored as f16;
  ``q = round_half_even(x * (127 / amax))`` (0 when ``amax == 0``); value = ``f16(d) * q``.
- Q8_K, blocks of 256: ``max`` = the element of largest ``|x|`` (first one on ties), signed;
  ``iscale = -127 / max``; ``q = min(127, nearest_int(iscale * x))`` (round half to even);
  ``d = 1 / iscale`` (float32, not rounded to f16); value = ``d * q`` (float32).
  An all-zero block gives zeros.
- F16 / BF16: round to nearest even (BF16: ggml's ``GGML_FP32_TO_BF16``, which rounds to
  nearest even and quiets NaN).
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q

from refsim.kernels.qdot import quantize_acts
from refsim.kernels.registry import KERNELS

ACT_NONE, ACT_F16, ACT_BF16, ACT_Q8_0, ACT_Q8_K, ACT_Q8_1 = 0, 1, 2, 3, 4, 5

# ggml type id -> ACT_* of its vec_dot_type (the registry's QuantKernel.vec_dot_type)
_ACT = {Q.F32: ACT_NONE, Q.F16: ACT_F16, Q.BF16: ACT_BF16, Q.Q8_0: ACT_Q8_0, Q.Q8_1: ACT_Q8_1, Q.Q8_K: ACT_Q8_K}
_VEC_DOT = {k.kind: _ACT[k.vec_dot_type] for k in KERNELS.values()}


def act_kind(qtype: int) -> int:
    """The activation round trip (``ACT_*``) ggml applies before a product with weight ``qtype``.

    Raises
    ------
    KeyError
        For a ggml type refsim has no kernel for (cannot happen for an opened model).
    """
    return _VEC_DOT[int(qtype)]


def _bf16_round(x: np.ndarray) -> np.ndarray:
    u = x.view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = np.where(nan, (u >> 16) | 64, (u + 0x7FFF + ((u >> 16) & 1)) >> 16)
    return (r.astype(np.uint32) << np.uint32(16)).view(np.float32)


def quantize_activations(x: np.ndarray, kind: int, tie: int = 0) -> np.ndarray:
    """Round-trip activation rows as ggml's CPU path would before a quantized product.

    Parameters
    ----------
    x : (n_pos, n_cols) float32 ndarray
    kind : int
        ``ACT_NONE``, ``ACT_F16``, ``ACT_BF16``, ``ACT_Q8_0``, ``ACT_Q8_1`` or ``ACT_Q8_K`` (see
        :func:`act_kind`).
    tie : {0, 1, 2}, default 0
        Halves of ``x * scale``: 0 rounds exact halves to even (ggml's rule); 1 / 2 round halves
        and values one float32 ulp from a half up / down (:func:`refsim.kernels.qdot.round_tie`).
        refsim's activations differ from llama.cpp's in the last bits (its float32 sums), so a value
        refsim computes at or next to a half can fall on either side in llama.cpp; the oracle tests
        accept either (docs/forward.md, "Activation near-ties").

    Returns
    -------
    (n_pos, n_cols) float32 ndarray
        Each row quantized and dequantized independently of the others (batch-invariant).
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    if kind == ACT_NONE:
        return x
    if kind == ACT_F16:
        return x.astype(np.float16).astype(np.float32)
    if kind == ACT_BF16:
        return _bf16_round(x)
    if kind == ACT_Q8_0 or kind == ACT_Q8_1:
        return quantize_acts(x, 32, tie).dequantize()
    if kind == ACT_Q8_K:
        return quantize_acts(x, 256, tie).dequantize()
    raise ValueError(f"unknown activation kind {kind}")


__all__ = ["ACT_NONE", "ACT_F16", "ACT_BF16", "ACT_Q8_0", "ACT_Q8_1", "ACT_Q8_K", "act_kind",
           "quantize_activations"]
