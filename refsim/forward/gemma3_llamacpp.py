"""gemma3 in ``llamacpp`` numerics: llama.cpp's CPU arithmetic bit for bit (issue #8).

The same graph as :mod:`refsim.forward.gemma3` (llama.cpp src/models/gemma3.cpp), with every op
computed as llama.cpp's x86 CPU backend computes it (:mod:`refsim.kernels.ggml_cpu` documents each
kernel, its source and the lane order). On the real Gemma-3-270M Q4_K_M this returns the same
float32 bits as llama.cpp (llama-cpp-python 0.3.36, AVX2/FMA build, flash attention off) for every
named tensor and for the logits, so free-running greedy decoding gives the same ids — with an F32
KV cache (``new_state(spec)``) or with llama.cpp's default F16 one (``new_state(spec, kv_type="f16")``,
the settings of the oracle README's run).

The KV type is a property of the cache, as ``type_k``/``type_v`` are of a llama.cpp context:
:class:`LlamaKVCache` stores K and V rounded to F16 (:func:`refsim.kernels.ggml_cpu.round_f16`) and
:func:`decode` then also rounds the scaled Q and the softmax rows to F16 before their products and
runs ``K x Q`` of a multi-row decode through tinyBLAS (:func:`attention`).

**Not batch-invariant**, on purpose: llama.cpp is not. The kernel, and with it the float32 rounding,
depends on the number of rows decoded together (``n_pos``):

- Q4_K (``attn_output``, half of ``ffn_down``): rows are quantized to Q8_K in groups of 4 by
  ``ggml_quantize_mat_q8_K_4x8`` (a ``+max``/``-max`` tie picks ``+``), the ``n_pos % 4`` last rows
  by ``quantize_row_q8_K_ref`` (the first extreme wins);
- Q6_K (the other ``ffn_down``): ``n_pos >= 8`` runs the tiled kernel (one float32 fma per
  superblock), fewer rows ``ggml_vec_dot_q6_K_q8_K`` (8 lanes);
- attention ``V x softmax``: ``n_pos >= 2`` runs llamafile's tinyBLAS (8 lanes), one row
  ``ggml_vec_dot_f32`` (32 lanes in 4 accumulators); with an F16 cache ``K x Q`` as well.

So decoding a prompt in one call and then one token per call (as llama-cpp-python's ``eval`` does)
reproduces llama.cpp run that way; decoding the same tokens split differently gives (slightly)
different logits, exactly as llama.cpp would.

What this depends on (checked by tests/forward/test_gemma3_bitexact.py; a different llama.cpp
build may differ): AVX2 + FMA + F16C kernels, no AVX512/VNNI; the CPU "repack" extra buffer on
(Q4_K weights with ``n_out % 8 == 0`` repacked to ``q4_K_8x8``); llamafile sgemm on; the tiled
K-quant path on (``GGML_CPU_TILED_MM`` unset); the KV cache F32 or F16 and padded to 256 cells;
F16C half conversions (round to nearest even); glibc's
``cosf``/``sinf``/``powf`` for RoPE and ``tanhf`` for the GELU table (called here through ctypes);
GCC's fused multiply-add contraction of ``rotate_pairs`` and ``ggml_gelu_f32`` (found by comparing
with llama.cpp's tensors and its GELU table; :mod:`refsim.kernels.ggml_cpu`). The thread count does
not matter (llama.cpp with 1 and 2 threads gives the same bits).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np
from gguf import GGMLQuantizationType as Q

from refsim.errors import ConfigError, ModelFormatError
from refsim.forward.gemma3 import build_layers
from refsim.forward.kv import KVCache
from refsim.forward.layers import decode_inputs, logit_margin
from refsim.forward.result import DecodeResult
from refsim.kernels import ggml_cpu as K
from refsim.kernels.registry import F16_TO_F32
from refsim.model import Model, ModelSpec

KV_PAD = 256
"""llama.cpp pads the attended KV length to a multiple of 256 cells (``llama_kv_cache::get_n_kv``)."""

Q6K_TILED_MIN_ROWS = 8
"""Rows from which a Q6_K product runs the tiled kernel (tiled/tiled.cpp ``ggml_tiled_min_batch``)."""

KV_TYPES = ("f32", "f16")
"""KV cache types the ``llamacpp`` numerics implement (llama.cpp ``type_k = type_v``; ``"f16"`` is
llama.cpp's and llama-cpp-python's default, ``"f32"`` the setting of refsim's other goldens)."""


# ------------------------------------------------------------------------------------------------
# weights


@dataclass(frozen=True)
class Q0Weight:
    """Q5_0 / Q8_0 weight as codes, :func:`refsim.kernels.ggml_cpu.interleave_q0` layout.

    ``w`` (n_groups, n_in, 16) int8, ``d`` (n_groups, n_in/32, 16) float32, ``n_out`` the real rows.
    """

    w: np.ndarray
    d: np.ndarray
    n_out: int


@dataclass(frozen=True)
class Q4KWeight:
    """Q4_K weight unpacked by :func:`refsim.kernels.ggml_cpu.unpack_q4_k`, rows interleaved by 16
    (:func:`refsim.kernels.ggml_cpu.interleave_rows`); ``n_out`` the real rows."""

    q: np.ndarray
    sc: np.ndarray
    mn: np.ndarray
    d: np.ndarray
    dmin: np.ndarray
    n_out: int


@dataclass(frozen=True)
class Q6KWeight:
    """Q6_K weight: :func:`refsim.kernels.ggml_cpu.unpack_q6_k` output ``q``, ``sc``, ``d`` (the tiled
    kernel's layout) and, for the vec_dot kernel, ``wq`` (:func:`refsim.kernels.ggml_cpu.q6k_lane_major`)
    with ``sc_il``/``d_il`` (rows interleaved by 16)."""

    q: np.ndarray
    sc: np.ndarray
    d: np.ndarray
    wq: np.ndarray
    sc_il: np.ndarray
    d_il: np.ndarray


def _unpack(model: Model, name: str, n_in: int, n_out: int):
    ti = model.tensor(name)
    if tuple(ti.shape_gguf) != (n_in, n_out):
        raise ModelFormatError(f"{model.path}: {name} has shape {list(ti.shape_gguf)}, expected [{n_in}, {n_out}]")
    raw = np.ascontiguousarray(model.raw(name))
    t = int(ti.ggml_type)
    if t in (Q.Q5_0, Q.Q8_0):
        q = np.empty((n_out, n_in), np.int8)
        d = np.empty((n_out, n_in // 32), np.float32)
        (K.unpack_q5_0 if t == Q.Q5_0 else K.unpack_q8_0)(raw, n_in, F16_TO_F32, q, d)
        return Q0Weight(*K.interleave_q0(q, d), n_out)
    if t == Q.Q4_K:
        if n_out % 8:
            raise ModelFormatError(f"{model.path}: {name}: Q4_K with {n_out} rows is not repacked by llama.cpp "
                                   f"(needs a multiple of 8); the llamacpp numerics do not model that path")
        q = np.empty((n_out, n_in), np.uint8)
        sc = np.empty((n_out, n_in // 32), np.int32)
        mn = np.empty((n_out, n_in // 32), np.int32)
        d = np.empty((n_out, n_in // 256), np.float32)
        dmin = np.empty((n_out, n_in // 256), np.float32)
        K.unpack_q4_k(raw, n_in, F16_TO_F32, q, sc, mn, d, dmin)
        il = K.interleave_rows
        return Q4KWeight(il(q), il(sc), il(mn), il(d), il(dmin), n_out)
    if t == Q.Q6_K:
        q = np.empty((n_out, n_in), np.uint8)
        sc = np.empty((n_out, n_in // 16), np.int32)
        d = np.empty((n_out, n_in // 256), np.float32)
        K.unpack_q6_k(raw, n_in, F16_TO_F32, q, sc, d)
        return Q6KWeight(q, sc, d, K.q6k_lane_major(q, sc), K.interleave_rows(sc), K.interleave_rows(d))
    raise ModelFormatError(f"{model.path}: {name} is {Q(t).name}; the llamacpp numerics implement "
                           f"Q5_0, Q8_0, Q4_K and Q6_K block weights")


@dataclass(frozen=True)
class LayerWeights:
    """One block: matrices as codes (:class:`Q0Weight`, :class:`Q4KWeight`, :class:`Q6KWeight`), norms float32."""

    attn_norm: np.ndarray
    attn_q: object
    attn_k: object
    attn_v: object
    attn_output: object
    attn_q_norm: np.ndarray
    attn_k_norm: np.ndarray
    post_attention_norm: np.ndarray
    ffn_norm: np.ndarray
    ffn_gate: object
    ffn_up: object
    ffn_down: object
    post_ffw_norm: np.ndarray
    window: int
    rope_base: float


@dataclass(frozen=True)
class Weights:
    """gemma3 weights for the ``llamacpp`` numerics.

    ``token_embd`` stays the memory-mapped Q8_0 rows (embedding lookups); ``output`` is the same
    tensor as codes for the tied output product (168 MB int8 + 21 MB scales for Gemma-3-270M).
    """

    spec: ModelSpec
    token_embd: np.ndarray
    output: Q0Weight
    output_norm: np.ndarray
    layers: tuple[LayerWeights, ...]
    embd_scale: np.float32
    eps: np.float32


def _vector(model: Model, name: str, n: int) -> np.ndarray:
    ti = model.tensor(name)
    if tuple(ti.shape_gguf) != (n,) or int(ti.ggml_type) != Q.F32:
        raise ModelFormatError(f"{model.path}: {name}: expected F32 [{n}]")
    return np.ascontiguousarray(model.dequantize(name).reshape(-1), dtype=np.float32)


def load_weights(model: Model) -> Weights:
    """Unpack a gemma3 model for :func:`decode` (block weights to codes, ~100 MB for Gemma-3-270M).

    Raises
    ------
    ModelFormatError
        Wrong arch, an untied ``output.weight``, ``n_rot != head_dim``, a tensor of an unexpected
        shape or a type this mode does not implement (``token_embd`` must be Q8_0).
    """
    s = model.spec
    if s.arch != "gemma3":
        raise ModelFormatError(f"{model.path}: arch {s.arch!r} is not gemma3")
    if "output.weight" in model.tensors:
        raise ModelFormatError(f"{model.path}: gemma3 with an untied output.weight is not supported")
    if s.n_rot != s.head_dim_k or s.head_dim_k != s.head_dim_v or s.n_layer == 62:
        raise ModelFormatError(f"{model.path}: llamacpp numerics implement gemma3 with n_rot == head_dim "
                               f"and the 1/sqrt(head_dim) attention scale")
    te = model.tensor("token_embd.weight")
    if int(te.ggml_type) != Q.Q8_0 or tuple(te.shape_gguf) != (s.n_embd, s.n_vocab):
        raise ModelFormatError(f"{model.path}: llamacpp numerics need a Q8_0 token_embd [{s.n_embd}, {s.n_vocab}]")
    layers = build_layers(model, LayerWeights, _unpack, _vector)
    te_raw = model.raw("token_embd.weight")
    output = Q0Weight(*K.interleave_q0(*K.q8_0_codes(te_raw, F16_TO_F32)), s.n_vocab)
    return Weights(spec=s, token_embd=te_raw, output=output,
                   output_norm=_vector(model, "output_norm.weight", s.n_embd), layers=layers,
                   embd_scale=np.float32(np.sqrt(np.float32(s.n_embd))), eps=np.float32(s.rms_eps))


class LlamaKVCache(KVCache):
    """:class:`refsim.forward.kv.KVCache` holding what a llama.cpp cache of ``type_k = type_v = kv_type`` holds.

    Parameters
    ----------
    n_layer, n_head_kv, head_dim_k, head_dim_v, capacity : as :class:`~refsim.forward.kv.KVCache`
    kv_type : {"f32", "f16"}, default "f32"
        ``"f16"``: :meth:`write` rounds K and V to half precision as llama.cpp's ``ggml_set_rows``
        into an F16 cache does (:func:`refsim.kernels.ggml_cpu.round_f16`). The rows are still
        kept in float32 arrays (every half is exactly a float32), so :meth:`view` returns float32
        ``(n, n_head_kv, head_dim)`` arrays in both types; :func:`decode` reads ``kv_type`` to run
        the F16 kernels.

    Raises
    ------
    ConfigError
        ``kv_type`` not in :data:`KV_TYPES`.
    """

    def __init__(self, n_layer: int, n_head_kv: int, head_dim_k: int, head_dim_v: int, capacity: int = 512,
                 kv_type: str = "f32"):
        if kv_type not in KV_TYPES:
            raise ConfigError(f"kv_type {kv_type!r}: the llamacpp numerics implement {', '.join(KV_TYPES)}")
        super().__init__(n_layer, n_head_kv, head_dim_k, head_dim_v, capacity)
        self.kv_type = kv_type

    def bytes_per_token(self) -> int:
        """KV bytes one position occupies over all layers in llama.cpp's cache (4 per F32, 2 per F16)."""
        return (2 if self.kv_type == "f16" else 4) * self.n_layer * self.n_head_kv * (self.head_dim_k + self.head_dim_v)

    def write(self, il: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """:meth:`KVCache.write` of ``k``, ``v`` (float32), rounded to F16 first if ``kv_type == "f16"``."""
        if self.kv_type == "f16":
            k, v = K.round_f16(k), K.round_f16(v)
        super().write(il, start, k, v)


def new_state(spec: ModelSpec, capacity: int = 512, kv_type: str = "f32") -> LlamaKVCache:
    """An empty :class:`LlamaKVCache` of ``kv_type`` (``"f32"``, or ``"f16"`` = llama.cpp's default).

    Raises
    ------
    ConfigError
        ``kv_type`` not in :data:`KV_TYPES`.
    """
    return LlamaKVCache(spec.n_layer, spec.n_head_kv, spec.head_dim_k, spec.head_dim_v, capacity, kv_type)


# ------------------------------------------------------------------------------------------------
# ops


def matmul(w, x: np.ndarray) -> np.ndarray:
    """``x @ W^T`` for ``x`` (n_pos, n_in) float32 as llama.cpp's CPU backend does it for ``n_pos`` rows."""
    n_pos = x.shape[0]
    if isinstance(w, Q0Weight):
        aq, ad = K.quantize_q8_0_rows(x)
        out = np.empty((n_pos, w.w.shape[0] * K.Q0_ROWS), np.float32)
        K.q0_matmul(w.w, w.d, aq, ad, out)
        return out[:, :w.n_out]
    if isinstance(w, Q4KWeight):
        n4 = n_pos - n_pos % 4
        aq = np.empty(x.shape, np.int8)
        ad = np.empty((n_pos, x.shape[1] // K.QK_K), np.float32)
        if n4:
            aq[:n4], ad[:n4] = K.quantize_q8_k_rows(x[:n4], True)
        if n4 < n_pos:
            aq[n4:], ad[n4:] = K.quantize_q8_k_rows(x[n4:], False)
        out = np.empty((n_pos, w.q.shape[0] * K.Q0_ROWS), np.float32)
        K.q4k_matmul(w.q, w.sc, w.mn, w.d, w.dmin, aq, ad, n4, out)
        return out[:, :w.n_out]
    if isinstance(w, Q6KWeight):
        aq, ad = K.quantize_q8_k_rows(x, False)
        if n_pos >= Q6K_TILED_MIN_ROWS:
            out = np.empty((n_pos, w.q.shape[0]), np.float32)
            K.q6k_matmul_tiled(w.q, w.sc, w.d, aq, ad, out)
            return out
        n = x.shape[1]
        order = (np.arange(n // K.QK_K)[:, None] * K.QK_K + K.Q6K_LANE_ORDER[None, :]).reshape(-1)
        bsum = aq.astype(np.int32).reshape(n_pos, -1, 16).sum(axis=2).astype(np.int32)
        out = np.empty((n_pos, w.wq.shape[0] * K.Q0_ROWS), np.float32)
        K.q6k_matmul_vecdot(w.wq, w.sc_il, w.d_il, np.ascontiguousarray(aq[:, order].astype(np.int16)), bsum, ad, out)
        return out[:, :w.q.shape[0]]
    raise TypeError(type(w))


def rms_norm(x: np.ndarray, w: np.ndarray, eps: np.float32) -> np.ndarray:
    """:func:`refsim.kernels.ggml_cpu.rms_norm` over the last axis of ``x`` (any leading shape)."""
    x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
    out = np.empty_like(x2)
    K.rms_norm(x2, w, eps, out)
    return out.reshape(x.shape)


@lru_cache(maxsize=1)
def _libm():
    return ctypes.CDLL(ctypes.util.find_library("m"))


@cache
def rope_cache(pos: int, n_rot: int, base: float) -> np.ndarray:
    """``(n_rot/2, 2)`` float32 ``(cos, sin)`` of ops.cpp ``ggml_rope_cache_init`` for position ``pos``.

    ``theta_scale = powf(base, -2.0f / n_rot)``; ``theta = (float)pos``, then ``theta *= theta_scale``
    per pair (float32); ``cosf``/``sinf`` of glibc (``freq_scale = 1``, ``ext_factor = 0``,
    ``mscale = 1``).
    """
    m = _libm()
    for f in (m.powf, m.cosf, m.sinf):
        f.restype = ctypes.c_float
    m.powf.argtypes = [ctypes.c_float, ctypes.c_float]
    m.cosf.argtypes = m.sinf.argtypes = [ctypes.c_float]
    theta_scale = np.float32(m.powf(np.float32(base), np.float32(np.float32(-2.0) / np.float32(n_rot))))
    theta = np.float32(pos)
    out = np.empty((n_rot // 2, 2), np.float32)
    for i in range(n_rot // 2):
        out[i, 0] = m.cosf(theta)
        out[i, 1] = m.sinf(theta)
        theta = np.float32(theta * theta_scale)
    return out


def rope_neox(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """:func:`refsim.kernels.ggml_cpu.rope_neox` of ``x`` (n_pos, n_heads, head_dim), ``n_rot == head_dim``."""
    n_rot = x.shape[-1]
    cache = np.stack([rope_cache(int(p), n_rot, float(base)) for p in positions])   # [n_pos, n_rot/2, 2]
    out = np.empty_like(x, dtype=np.float32)
    K.rope_neox(np.ascontiguousarray(x, dtype=np.float32), cache, out)
    return out


@lru_cache(maxsize=1)
def gelu_table() -> np.ndarray:
    """(65536,) float32 ``ggml_table_gelu_f16`` (:func:`refsim.kernels.ggml_cpu.gelu_f16_table`, glibc ``tanhf``)."""
    m = _libm()
    m.tanhf.restype = ctypes.c_float
    m.tanhf.argtypes = [ctypes.c_float]
    return K.gelu_f16_table(m.tanhf)


def geglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """vec.h ``ggml_vec_geglu_f32`` (``GGML_GELU_FP16``): ``x <= -10``: 0; ``x >= 10``: ``x * up``;
    else ``table[f16(x)] * up`` (float32)."""
    g = gelu_table()[gate.astype(np.float16).view(np.uint16).astype(np.int64)]
    y = (np.where(gate >= np.float32(10.0), gate, g).astype(np.float32) * up).astype(np.float32)
    return np.where(gate <= np.float32(-10.0), np.float32(0.0), y).astype(np.float32)


def attention(q: np.ndarray, kc: np.ndarray, vc: np.ndarray, positions: np.ndarray, window: int,
              kv_type: str = "f32") -> np.ndarray:
    """Non-flash attention of llama.cpp (llama-graph.cpp ``build_attn_mha``) on an F32 or F16 cache.

    Parameters
    ----------
    q : (n_pos, n_head, hd) float32 — already scaled by ``1/sqrt(hd)``
    kc, vc : (n_kv, n_head_kv, hd) float32 — the cache rows ``0..n_kv-1``, ``n_kv`` a multiple of 256
        (llama.cpp's padding; the rows past the last position are masked, so they only meet a
        probability of exactly 0 and the padding does not change any bit)
    positions : (n_pos,) int64 ; window : 0 (global) or the sliding window
    kv_type : "f32" or "f16" — the cache's type; for "f16" ``kc``/``vc`` hold F16 values already

    Returns
    -------
    (n_pos, n_head * hd) float32

    Per head ``h`` (KV head ``h // (n_head / n_head_kv)``): ``kq = ggml_vec_dot_f32(k_j, q)``, masked
    (``-inf`` for ``j > pos`` and, local layers, ``pos - j >= window``),
    :func:`refsim.kernels.ggml_cpu.soft_max_rows`, then ``V x softmax`` by tinyBLAS (``n_pos >= 2``)
    or ``ggml_vec_dot_f32`` (one row).

    F16 cache (ggml-cpu.c ``ggml_compute_forward_mul_mat`` with an F16 ``src0``): ``q`` and the
    softmax rows are first rounded to F16 (the conversion of ``src1`` to ``vec_dot_type``); then
    ``K x Q`` runs tinyBLAS for ``n_pos >= 2`` (the converted Q is contiguous, so the second
    ``llamafile_sgemm`` call takes it) and ``ggml_vec_dot_f16`` for one row, ``V x softmax`` as in
    F32. Both F16 kernels compute as their F32 twins on the widened halves
    (:mod:`refsim.kernels.ggml_cpu`, module docstring).
    """
    n_pos, n_head, hd = q.shape
    n_kv, n_head_kv = kc.shape[:2]
    j = np.arange(n_kv)
    p = positions[:, None]
    masked = j[None, :] > p
    if window:
        masked |= (p - j[None, :]) >= window
    mask = np.where(masked, np.float32(-np.inf), np.float32(0.0)).astype(np.float32)     # [n_pos, n_kv]
    out = np.empty((n_pos, n_head, hd), np.float32)
    kq = np.empty((n_pos, n_kv), np.float32)
    pr = np.empty((n_pos, n_kv), np.float32)
    f16 = kv_type == "f16"
    sgemm = K.f32_tinyblas_matmul if n_pos >= 2 else K.f32_vecdot_matmul
    for h in range(n_head):
        g = h // (n_head // n_head_kv)
        kh = np.ascontiguousarray(kc[:, g])                                            # [n_kv, hd]
        vt = np.ascontiguousarray(vc[:, g].T)                                          # [hd, n_kv]
        qh = np.ascontiguousarray(q[:, h])                                             # [n_pos, hd]
        if f16:
            sgemm(kh, K.round_f16(qh), kq)
        else:
            K.f32_vecdot_matmul(kh, qh, kq)
        K.soft_max_rows(kq, mask, pr)
        o = np.empty((n_pos, hd), np.float32)
        sgemm(vt, K.round_f16(pr) if f16 else pr, o)
        out[:, h] = o
    return out.reshape(n_pos, n_head * hd)


def output_logits(weights: Weights, hn: np.ndarray) -> np.ndarray:
    """Tied output ``token_embd @ hn``: (n_out, n_embd) -> (n_out, n_vocab), Q8_0 x Q8_0 lanes."""
    return matmul(weights.output, hn)


def decode(weights: Weights, state: KVCache, tokens: np.ndarray, positions: np.ndarray,
           out_rows: np.ndarray | None = None, tap=None) -> DecodeResult:
    """Decode ``tokens`` at ``positions`` in one llama.cpp ``llama_decode`` (see the module docstring).

    Parameters and result as :func:`refsim.forward.gemma3.decode`; ``state`` is a :func:`new_state`
    (its ``kv_type`` picks the F32 or F16 attention; a plain ``KVCache`` is F32). All rows go through every layer
    (as llama.cpp with ``logits_all``); ``out_rows`` only selects the rows whose logits are computed
    (each logit is a function of its own row). ``tap(name, il, array)`` sees llama.cpp's names:
    ``embd``, ``inp_scaled``, ``attn_norm``, ``Qcur_normed``, ``Kcur_normed``, ``Qcur``/``Kcur``
    (after RoPE), ``Vcur``, ``kqv_out``, ``attn_post_norm``, ``sa_out``, ``ffn_norm``, ``ffn_gate``,
    ``ffn_up``, ``ffn_geglu``, ``ffn_out``, ``ffn_post_norm``, ``l_out``, ``result_norm``,
    ``result_output`` (tests/data/gemma3_llamacpp_tensors.json holds llama.cpp's digests of each).
    """
    s = weights.spec
    tokens, positions, rows = decode_inputs(tokens, positions, s.n_vocab, state.n, out_rows)
    n_pos = tokens.size
    t = tap or (lambda name, il, a: None)
    H, KVh, hd, eps = s.n_head, s.n_head_kv, s.head_dim_k, weights.eps
    kv_type = getattr(state, "kv_type", "f32")                                   # a plain KVCache is F32
    start = state.n
    n_used = start + n_pos
    n_kv = -(-n_used // KV_PAD) * KV_PAD                                          # llama.cpp's padded KV length
    kc = np.zeros((n_kv, KVh, hd), np.float32)                                    # cells past n_used: masked
    vc = np.zeros((n_kv, KVh, hd), np.float32)
    scale_q = np.float32(1.0 / np.sqrt(np.float32(hd)))

    raw = weights.token_embd[tokens]
    nb = s.n_embd // 32
    blocks = raw.reshape(n_pos, nb, 34)
    d = F16_TO_F32[blocks[:, :, 0].astype(np.int64) | (blocks[:, :, 1].astype(np.int64) << 8)]
    codes = blocks[:, :, 2:].view(np.int8).astype(np.float32)
    h = (codes * d[:, :, None]).astype(np.float32).reshape(n_pos, s.n_embd)
    t("embd", -1, h)
    h = (h * weights.embd_scale).astype(np.float32)
    t("inp_scaled", -1, h)
    for il, L in enumerate(weights.layers):
        a = rms_norm(h, L.attn_norm, eps)
        t("attn_norm", il, a)
        q = matmul(L.attn_q, a).reshape(n_pos, H, hd)
        kk = matmul(L.attn_k, a).reshape(n_pos, KVh, hd)
        v = matmul(L.attn_v, a).reshape(n_pos, KVh, hd)
        q = rms_norm(q, L.attn_q_norm, eps)
        t("Qcur_normed", il, q)
        q = rope_neox(q, positions, L.rope_base)
        kk = rms_norm(kk, L.attn_k_norm, eps)
        t("Kcur_normed", il, kk)
        kk = rope_neox(kk, positions, L.rope_base)
        t("Qcur", il, q)
        t("Kcur", il, kk)
        t("Vcur", il, v)
        q = (q * scale_q).astype(np.float32)
        state.write(il, start, kk, v)
        kv_k, kv_v = state.view(il, n_used)
        kc[:n_used], vc[:n_used] = kv_k, kv_v
        o = attention(q, kc, vc, positions, L.window, kv_type)
        t("kqv_out", il, o)
        o = matmul(L.attn_output, o)
        o = rms_norm(o, L.post_attention_norm, eps)
        t("attn_post_norm", il, o)
        h = (o + h).astype(np.float32)
        t("sa_out", il, h)
        f = rms_norm(h, L.ffn_norm, eps)
        t("ffn_norm", il, f)
        g = matmul(L.ffn_gate, f)
        u = matmul(L.ffn_up, f)
        t("ffn_gate", il, g)
        t("ffn_up", il, u)
        y = geglu(g, u)
        t("ffn_geglu", il, y)
        y = matmul(L.ffn_down, y)
        t("ffn_out", il, y)
        y = rms_norm(y, L.post_ffw_norm, eps)
        t("ffn_post_norm", il, y)
        h = (y + h).astype(np.float32)
        t("l_out", il, h)
    state.advance(n_pos)
    hn = rms_norm(h[rows], weights.output_norm, eps)
    t("result_norm", -1, hn)
    logits = output_logits(weights, hn)
    t("result_output", -1, logits)
    return DecodeResult(logits=logits, out_rows=rows, routes=np.zeros((n_pos, s.n_layer, 0), np.int16),
                        weights=np.zeros((n_pos, s.n_layer, 0), np.float32), margin=logit_margin(logits),
                        route_margin=np.full((n_pos, s.n_layer), np.nan, dtype=np.float32))
