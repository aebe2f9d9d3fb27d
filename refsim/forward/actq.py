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
Q4_0, Q5_0, Q8_0, MXFP4                Q8_0                ``ACT_Q8_0``
Q4_K, Q5_K, Q6_K                       Q8_K                ``ACT_Q8_K``
=====================================  ==================  ==========================

refsim emulates this by a *round trip*: ``x -> quantize -> dequantize`` (float32), then the
ordinary float64-accumulated product. Products of two dequantized values are the same real
numbers llama.cpp multiplies as integers times scales, so what is left is float32 rounding of
its accumulation (about 1e-6 relative).

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
from numba import njit

ACT_NONE, ACT_F16, ACT_BF16, ACT_Q8_0, ACT_Q8_K = 0, 1, 2, 3, 4

# ggml type ids (gguf.GGMLQuantizationType values)
_VEC_DOT = {0: ACT_NONE, 1: ACT_F16, 30: ACT_BF16, 2: ACT_Q8_0, 6: ACT_Q8_0, 8: ACT_Q8_0,
            39: ACT_Q8_0, 12: ACT_Q8_K, 13: ACT_Q8_K, 14: ACT_Q8_K}


def act_kind(qtype: int) -> int:
    """The activation round trip (``ACT_*``) ggml applies before a product with weight ``qtype``.

    Raises
    ------
    KeyError
        For a ggml type refsim has no kernel for (cannot happen for an opened model).
    """
    return _VEC_DOT[int(qtype)]


@njit(cache=True)
def block_amax_kernel(x, block, out):
    """out[p, b] = max |x[p, b*block:(b+1)*block]| (float32)."""
    for p in range(x.shape[0]):
        for b in range(x.shape[1] // block):
            amax = np.float32(0.0)
            for j in range(block):
                a = abs(x[p, b * block + j])
                if a > amax:
                    amax = a
            out[p, b] = amax


@njit(cache=True)
def _round(v, tie):
    # nearest integer; exact halves: tie 0 = to even (ggml), 1 = up, 2 = down
    r = np.rint(v)
    if tie != 0 and abs(v - np.floor(v) - 0.5) == 0:
        r = np.floor(v) + 1 if tie == 1 else np.floor(v)
    return r


@njit(cache=True)
def q8_0_kernel(x, amax, dh, out, tie=0):
    """Q8_0 round trip given per-block ``amax`` and the f16-rounded scale ``dh`` (float32)."""
    for p in range(x.shape[0]):
        for b in range(x.shape[1] // 32):
            a = amax[p, b]
            iden = np.float32(127.0) / a if a != 0 else np.float32(0.0)
            for j in range(32):
                q = _round(np.float32(x[p, b * 32 + j] * iden), tie)
                out[p, b * 32 + j] = dh[p, b] * np.float32(q)


@njit(cache=True)
def q8_k_kernel(x, out, tie=0):
    """Q8_K round trip (``quantize_row_q8_K_ref`` then ``d * q``), rows of 256-blocks."""
    for p in range(x.shape[0]):
        for b in range(x.shape[1] // 256):
            o = b * 256
            amax = np.float32(0.0)
            mx = np.float32(0.0)
            for j in range(256):
                a = abs(x[p, o + j])
                if a > amax:
                    amax = a
                    mx = x[p, o + j]
            if amax == 0:
                for j in range(256):
                    out[p, o + j] = np.float32(0.0)
                continue
            iscale = np.float32(np.float32(-127.0) / mx)
            d = np.float32(np.float32(1.0) / iscale)
            for j in range(256):
                v = _round(np.float32(iscale * x[p, o + j]), tie)
                if v > 127:
                    v = 127
                out[p, o + j] = np.float32(d * np.float32(v))


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
        ``ACT_NONE``, ``ACT_F16``, ``ACT_BF16``, ``ACT_Q8_0`` or ``ACT_Q8_K`` (see :func:`act_kind`).
    tie : {0, 1, 2}, default 0
        Exact halves of ``x * scale``: 0 rounds to even (ggml's rule), 1 up, 2 down. refsim's
        activations differ from llama.cpp's in the last bits (its float32 sums), so a value refsim
        computes as an exact half can fall on either side in llama.cpp; the oracle tests accept
        either (docs/forward.md, "Activation near-ties").

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
    out = np.empty_like(x)
    if kind == ACT_Q8_0:
        amax = np.empty((x.shape[0], x.shape[1] // 32), dtype=np.float32)
        block_amax_kernel(x, 32, amax)
        d = (amax / np.float32(127.0)).astype(np.float32)
        q8_0_kernel(x, amax, d.astype(np.float16).astype(np.float32), out, tie)
    elif kind == ACT_Q8_K:
        q8_k_kernel(x, out, tie)
    else:
        raise ValueError(f"unknown activation kind {kind}")
    return out


__all__ = ["ACT_NONE", "ACT_F16", "ACT_BF16", "ACT_Q8_0", "ACT_Q8_K", "act_kind",
           "quantize_activations"]
