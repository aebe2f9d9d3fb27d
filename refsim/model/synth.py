"""Synthetic GGUF models in the real tensor layout, and header-only twins of real files.

``write_synthetic`` writes a small seeded ``qwen3moe`` or ``qwen35moe`` (optionally with its
nextn/MTP block) with the real tensor names, shapes, metadata keys and a minimal SentencePiece
vocabulary, following the recipe llama.cpp was shown to accept (shared/reference/oracle/README.md
section 4, gen_synth.py, reqkeys_*.out.txt). ``write_header_only`` writes only metadata and tensor
infos (no data) — enough for byte accounting; :func:`qwen3_30b_a3b_q4_k_m_twin` builds the
header-only twin of Qwen3-30B-A3B-Q4_K_M.

All writes go through :func:`refsim.fileio.atomic_path`: a regular file is replaced atomically
(a temporary file beside the resolved target, then ``os.replace``); a FIFO or device is written
in place.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Mapping

import numpy as np
import gguf
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q
from gguf.quants import quantize

from refsim.errors import ConfigError
from refsim.fileio import atomic_path
from refsim.model import k_quantize

QUANTS = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "MXFP4", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K",
          "Q5_K", "Q6_K", "IQ4_XS", "TQ1_0", "TQ2_0", "mixed")
"""Values of ``quant``. ``mixed`` is a Q4_K_M-like mix (see :func:`mixed_type`). Types of 256-element
blocks use :data:`DEFAULT_DIMS_K`. Quantizers: gguf-py's ``gguf.quants.quantize`` (Q4_0, Q4_1, Q5_0,
Q5_1, Q8_0, BF16, MXFP4, TQ1_0, TQ2_0) and :mod:`refsim.model.k_quantize` (the K-quants, IQ4_NL,
IQ4_XS)."""

DEFAULT_DIMS: dict[str, Any] = dict(
    n_layer=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_expert=8, n_expert_used=2,
    n_ff_exp=32, n_ff=128, n_ff_shexp=32, n_vocab=300, n_ctx=256, eps=1e-6, rope_base=10000.0,
    # qwen35moe only: 3 gated-delta-net layers + 1 full-attention layer (interval 4)
    n_layer_35=4, full_attention_interval=4, ssm_conv=4, ssm_state=16, ssm_group=2, ssm_dt_rank=4,
    rope_dim=8, rope_sections=(2, 1, 1, 0))
"""Small default dimensions (every matrix row a multiple of 32)."""

DEFAULT_DIMS_K: dict[str, Any] = dict(DEFAULT_DIMS, n_embd=256, head_dim=64, n_expert=4, n_ff_exp=256,
                                      n_ff=512, n_ff_shexp=256, rope_dim=16, rope_sections=(4, 2, 2, 0))
"""Defaults used for K-quants and ``mixed`` (rows must be multiples of 256)."""

QWEN3_30B_A3B_EIGHTH: dict[str, Any] = dict(
    n_layer=6, n_embd=2048, n_head=32, n_head_kv=4, head_dim=128, n_expert=128, n_expert_used=8,
    n_ff_exp=768, n_ff=6144, n_vocab=1024, n_ctx=4096, eps=1e-6, rope_base=1e6)
"""Qwen3-30B-A3B's real widths with 1/8 of its 48 layers (for benchmarks; ~0.5 GB at Q4_K)."""

_FLOAT_NP = {Q.F32: np.float32, Q.F16: np.float16}
_K_QUANTIZERS: dict[Q, Callable[[np.ndarray], np.ndarray]] = {
    Q.Q4_K: k_quantize.quantize_q4_k, Q.Q5_K: k_quantize.quantize_q5_k, Q.Q6_K: k_quantize.quantize_q6_k,
    Q.Q2_K: k_quantize.quantize_q2_k, Q.Q3_K: k_quantize.quantize_q3_k, Q.IQ4_NL: k_quantize.quantize_iq4_nl,
    Q.IQ4_XS: k_quantize.quantize_iq4_xs}


def use_more_bits(il: int, n_layer: int) -> bool:
    """llama.cpp's Q4_K_M rule for which layers get Q6_K ``ffn_down``/``attn_v``.

    True if ``il < n_layer/8`` or ``il >= 7*n_layer/8`` or ``(il - n_layer/8) % 3 == 2``
    (integer division). For 48 layers: 0-5, 8, 11, ..., 41, 42-47 (24 layers).

    Source: llama.cpp src/llama-quant.cpp ``use_more_bits``; matches the Qwen3-30B-A3B-Q4_K_M
    trace preamble (expert_bytes 3059712 on exactly these layers).
    """
    return il < n_layer // 8 or il >= 7 * n_layer // 8 or (il - n_layer // 8) % 3 == 2


def mixed_type(name: str, n_layer: int) -> Q:
    """The ``mixed`` (Q4_K_M-like) type of a 2-D/3-D weight.

    ``output`` Q6_K; ``attn_v`` and ``ffn_down_exps`` Q6_K on :func:`use_more_bits` layers, else Q4_K;
    shared experts and gated-delta-net projections Q8_0; everything else Q4_K.
    """
    if name == "output.weight":
        return Q.Q6_K
    parts = name.split(".")
    il = int(parts[1]) if parts[0] == "blk" else -1
    if any(s in name for s in ("attn_v.", "ffn_down_exps.", "ffn_down_shexp.")):
        return Q.Q6_K if use_more_bits(il, n_layer) else Q.Q4_K
    if "_shexp" in name or "ssm_" in name or "attn_qkv" in name or "attn_gate" in name:
        return Q.Q8_0
    return Q.Q4_K


def _spm_vocab(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """Minimal SentencePiece ('llama') vocab: <unk>, <s>, </s>, 256 byte tokens, then pieces."""
    if n_vocab < 260:
        raise ConfigError(f"n_vocab must be >= 260 for the byte-fallback vocab, got {n_vocab}")
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        toks.append(f"<0x{b:02X}>"); scores.append(0.0); types.append(6)
    letters = "abcdefghijklmnopqrstuvwxyz"
    i = 0
    while len(toks) < n_vocab:
        toks.append("\u2581" + letters[i % 26] + (letters[(i // 26) % 26] if i >= 26 else "") + ("" if i < 676 else str(i)))
        scores.append(-float(i)); types.append(1)
        i += 1
    return toks, scores, types


def tensor_plan(arch: str, dims: Mapping[str, Any], nextn: bool) -> list[tuple[str, tuple[int, ...], str]]:
    """Every tensor of a synthetic model: ``(name, numpy shape, kind)``.

    ``kind`` is ``'norm'`` (1-D, F32, around 1), ``'f32'`` (kept F32: routers, conv, biases,
    ``ssm_a``) or ``'w'`` (a weight matrix that takes the requested quant type). NumPy shapes are
    GGUF ``ne`` reversed (llama-cpp-notes.md section 1.1).
    """
    c = dims
    D, H, KV, hd, E, F, V = (c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"], c["n_expert"],
                             c["n_ff_exp"], c["n_vocab"])
    plan: list[tuple[str, tuple[int, ...], str]] = [
        ("token_embd.weight", (V, D), "w"), ("output_norm.weight", (D,), "norm"), ("output.weight", (V, D), "w")]

    def attn(i, q_mult):
        plan.extend([(f"blk.{i}.attn_q.weight", (H * hd * q_mult, D), "w"), (f"blk.{i}.attn_k.weight", (KV * hd, D), "w"),
                     (f"blk.{i}.attn_v.weight", (KV * hd, D), "w"), (f"blk.{i}.attn_output.weight", (D, H * hd), "w"),
                     (f"blk.{i}.attn_q_norm.weight", (hd,), "norm"), (f"blk.{i}.attn_k_norm.weight", (hd,), "norm")])

    def moe(i, shared):
        plan.extend([(f"blk.{i}.ffn_gate_inp.weight", (E, D), "f32"), (f"blk.{i}.ffn_gate_exps.weight", (E, F, D), "w"),
                     (f"blk.{i}.ffn_up_exps.weight", (E, F, D), "w"), (f"blk.{i}.ffn_down_exps.weight", (E, D, F), "w")])
        if shared:
            S = c["n_ff_shexp"]
            plan.extend([(f"blk.{i}.ffn_gate_inp_shexp.weight", (D,), "f32"), (f"blk.{i}.ffn_gate_shexp.weight", (S, D), "w"),
                         (f"blk.{i}.ffn_up_shexp.weight", (S, D), "w"), (f"blk.{i}.ffn_down_shexp.weight", (D, S), "w")])

    if arch == "qwen3moe":
        for i in range(c["n_layer"]):
            plan.append((f"blk.{i}.attn_norm.weight", (D,), "norm"))
            attn(i, 1)
            plan.append((f"blk.{i}.ffn_norm.weight", (D,), "norm"))
            moe(i, False)
        return plan
    n_layer = c["n_layer_35"]
    hk, nk, nv = c["ssm_state"], c["ssm_group"], c["ssm_dt_rank"]
    d_inner = hk * nv
    conv_dim = 2 * hk * nk + d_inner
    for i in range(n_layer + (1 if nextn else 0)):
        plan.extend([(f"blk.{i}.attn_norm.weight", (D,), "norm"), (f"blk.{i}.post_attention_norm.weight", (D,), "norm")])
        if i >= n_layer or (i + 1) % c["full_attention_interval"] == 0:
            attn(i, 2)  # attn_q holds [q | gate] per head
        else:
            plan.extend([(f"blk.{i}.attn_qkv.weight", (conv_dim, D), "w"), (f"blk.{i}.attn_gate.weight", (d_inner, D), "w"),
                         (f"blk.{i}.ssm_conv1d.weight", (conv_dim, c["ssm_conv"]), "f32"),
                         (f"blk.{i}.ssm_dt.bias", (nv,), "f32"), (f"blk.{i}.ssm_a", (nv,), "f32"),
                         (f"blk.{i}.ssm_beta.weight", (nv, D), "w"), (f"blk.{i}.ssm_alpha.weight", (nv, D), "w"),
                         (f"blk.{i}.ssm_norm.weight", (hk,), "norm"), (f"blk.{i}.ssm_out.weight", (D, d_inner), "w")])
        moe(i, True)
        if i >= n_layer:
            plan.extend([(f"blk.{i}.nextn.eh_proj.weight", (D, 2 * D), "w"), (f"blk.{i}.nextn.enorm.weight", (D,), "norm"),
                         (f"blk.{i}.nextn.hnorm.weight", (D,), "norm"),
                         (f"blk.{i}.nextn.shared_head_norm.weight", (D,), "norm")])
    return plan


def _choose_type(name: str, shape: tuple[int, ...], kind: str, quant: str | Mapping[str, str], n_layer: int) -> Q:
    """Requested type of one tensor; falls back to Q8_0, then F32, when ne0 is not a block multiple."""
    if kind != "w":
        return Q.F32
    if isinstance(quant, Mapping):
        stem = name.split(".")[-2] if name.startswith("blk.") else name.rsplit(".", 1)[0]
        want = Q[quant.get(stem, quant.get("default", "F32"))]
    elif quant == "mixed":
        want = mixed_type(name, n_layer)
    else:
        want = Q[quant]
    for t in (want, Q.Q8_0, Q.F32):
        if shape[-1] % GGML_QUANT_SIZES[t][0] == 0:
            return t
    return Q.F32  # pragma: no cover


def _encode(value: np.ndarray, qtype: Q) -> np.ndarray:
    if qtype in _FLOAT_NP:
        return value.astype(_FLOAT_NP[qtype])
    if qtype in _K_QUANTIZERS:
        return _K_QUANTIZERS[qtype](value)
    return quantize(value, qtype)


Vocab = tuple[list[str], list[float], list[int]]
"""An SPM ('llama') vocabulary: pieces, scores, GGUF token types (ids = list positions;
``<unk>``, ``<s>``, ``</s>`` at 0, 1, 2 and all 256 ``<0xXX>`` byte pieces present)."""


def _add_metadata(w: gguf.GGUFWriter, arch: str, c: Mapping[str, Any], nextn: bool, vocab: bool | Vocab = True,
                  name: str | None = None) -> None:
    a = arch
    n_layer = c["n_layer"] if arch == "qwen3moe" else c["n_layer_35"]
    w.add_name(name or f"refsim synthetic {arch}")
    w.add_context_length(c["n_ctx"])
    w.add_embedding_length(c["n_embd"])
    w.add_block_count(n_layer + (1 if nextn else 0))
    w.add_feed_forward_length(c["n_ff"])
    w.add_head_count(c["n_head"])
    w.add_head_count_kv(c["n_head_kv"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_rope_freq_base(c["rope_base"])
    w.add_layer_norm_rms_eps(c["eps"])
    w.add_expert_count(c["n_expert"])
    w.add_expert_used_count(c["n_expert_used"])
    w.add_expert_feed_forward_length(c["n_ff_exp"])
    if arch == "qwen35moe":
        if nextn:
            w.add_uint32(f"{a}.nextn_predict_layers", 1)
        w.add_uint32(f"{a}.expert_shared_feed_forward_length", c["n_ff_shexp"])
        w.add_uint32(f"{a}.full_attention_interval", c["full_attention_interval"])
        w.add_uint32(f"{a}.rope.dimension_count", c["rope_dim"])
        w.add_array(f"{a}.rope.dimension_sections", list(c["rope_sections"]))
        hk, nv = c["ssm_state"], c["ssm_dt_rank"]
        for key, v in (("ssm.conv_kernel", c["ssm_conv"]), ("ssm.state_size", hk), ("ssm.group_count", c["ssm_group"]),
                       ("ssm.time_step_rank", nv), ("ssm.inner_size", hk * nv)):
            w.add_uint32(f"{a}.{key}", v)
    if vocab:
        toks, scores, types = _spm_vocab(c["n_vocab"]) if vocab is True else vocab
        if len(toks) != c["n_vocab"] or len(scores) != len(toks) or len(types) != len(toks):
            raise ConfigError(f"vocab has {len(toks)} pieces, {len(scores)} scores, {len(types)} types; "
                              f"expected n_vocab = {c['n_vocab']} of each")
        w.add_tokenizer_model("llama")
        w.add_token_list(toks)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        if vocab is not True:
            w.add_add_bos_token(True)
            w.add_add_space_prefix(False)
    else:
        w.add_tokenizer_model("none")
        w.add_vocab_size(c["n_vocab"])


def _atomic_write(path: str | os.PathLike, arch: str, fill: Callable[[gguf.GGUFWriter], None], data: bool) -> str:
    path = os.fspath(path)
    with atomic_path(path, "--out", suffix=".gguf.tmp") as tmp:
        w = gguf.GGUFWriter(tmp, arch)
        fill(w)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        if data:
            w.write_tensors_to_file()
        else:
            w.write_ti_data_to_file()
        w.close()
    return path


def resolve_dims(arch: str, quant: str | Mapping[str, str], dims: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults (:data:`DEFAULT_DIMS`, or :data:`DEFAULT_DIMS_K` for K-quants/``mixed``) updated by ``dims``.

    Raises
    ------
    ConfigError
        Unknown arch, quant or dims key.
    """
    if arch not in ("qwen3moe", "qwen35moe"):
        raise ConfigError(f"synthetic arch must be qwen3moe or qwen35moe, got {arch!r}")
    if isinstance(quant, str) and quant not in QUANTS:
        raise ConfigError(f"unknown quant {quant!r} (choose from {', '.join(QUANTS)})")
    k_like = isinstance(quant, Mapping) or quant == "mixed" or GGML_QUANT_SIZES[Q[quant]][0] == 256
    base = dict(DEFAULT_DIMS_K if k_like else DEFAULT_DIMS)
    unknown = set(dims or {}) - set(base)
    if unknown:
        raise ConfigError(f"unknown dims key(s) {sorted(unknown)} (known: {sorted(base)})")
    base.update(dims or {})
    return base


def write_synthetic(path: str | os.PathLike, arch: str = "qwen3moe", quant: str | Mapping[str, str] = "F32",
                    nextn: bool = False, seed: int = 0, dims: Mapping[str, Any] | None = None) -> str:
    """Write a small seeded synthetic GGUF in the real layout.

    Parameters
    ----------
    path : str or os.PathLike
        Output file (written atomically).
    arch : {'qwen3moe', 'qwen35moe'}
    quant : str or mapping, default 'F32'
        One of :data:`QUANTS`, or ``{tensor stem: type name, 'default': type name}`` (stem is e.g.
        ``ffn_down_exps``, ``attn_q``, ``token_embd``). Routers, conv, biases and norms stay F32; a
        matrix whose ne0 is not a multiple of the type's block falls back to Q8_0, then F32.
    nextn : bool, default False
        qwen35moe only: add the MTP block ``blk.{n_layer}`` and ``nextn_predict_layers = 1``.
    seed : int, default 0
        Same seed, same bytes.
    dims : mapping, optional
        Overrides of :data:`DEFAULT_DIMS` keys (e.g. :data:`QWEN3_30B_A3B_EIGHTH`). For qwen35moe
        the trunk depth is ``n_layer_35``.

    Returns
    -------
    str
        The path written.

    Raises
    ------
    ConfigError
        Bad arch, quant, dims, or ``nextn`` with qwen3moe.
    """
    c = resolve_dims(arch, quant, dims)
    if nextn and arch != "qwen35moe":
        raise ConfigError("nextn (the MTP block) exists only for qwen35moe")
    n_layer = c["n_layer"] if arch == "qwen3moe" else c["n_layer_35"]
    rng = np.random.default_rng(seed)

    def fill(w: gguf.GGUFWriter) -> None:
        _add_metadata(w, arch, c, nextn)
        for name, shape, kind in tensor_plan(arch, c, nextn):
            if kind == "norm":
                value = 1.0 + 0.1 * rng.standard_normal(shape)
            elif name.endswith("ssm_a"):
                # the C library's exp per value, not NumPy's array exp (its AVX-512 routines may differ
                # in the last bit: the same file on every host; docs/forward.md, the RoPE note)
                value = -np.array([math.exp(v) for v in rng.uniform(-2, 1, shape).ravel()]).reshape(shape)
            elif name.endswith("ssm_dt.bias"):
                value = rng.uniform(-1, 1, shape)
            else:
                scale = 1.0 if name == "token_embd.weight" else 1.0 / np.sqrt(shape[-1])
                value = rng.standard_normal(shape) * scale
            value = np.ascontiguousarray(value, dtype=np.float32)
            qtype = _choose_type(name, shape, kind, quant, n_layer)
            enc = _encode(value, qtype)
            w.add_tensor(name, enc, raw_dtype=None if qtype in _FLOAT_NP else qtype)

    return _atomic_write(path, arch, fill, data=True)


def write_weights(path: str | os.PathLike, arch: str, tensors: Mapping[str, np.ndarray],
                  quant: str | Mapping[str, str] = "F32", dims: Mapping[str, Any] | None = None,
                  vocab: Vocab | None = None, name: str | None = None, nextn: bool = False) -> str:
    """Write given weights (e.g. a trained model) in the same layout as :func:`write_synthetic`.

    Parameters
    ----------
    path : str or os.PathLike
        Output file (written atomically).
    arch : {'qwen3moe', 'qwen35moe'}
    tensors : mapping of name -> float32 ndarray
        Every tensor of :func:`tensor_plan` with its NumPy shape (GGUF ``ne`` reversed), except
        that ``output.weight`` may be absent: the output is then tied to ``token_embd``
        (llama.cpp ``llama-model.cpp`` loads ``token_embd`` as ``TENSOR_DUPLICATED`` for a missing
        ``output``; refsim's :func:`refsim.forward.qwen3moe.load_weights` does the same). With
        ``quant='mixed'`` a tied ``token_embd`` takes the output's type (Q6_K), as llama.cpp's
        Q4_K_M does for a model without ``output.weight`` (``src/llama-quant.cpp``: the
        ``!qs.has_output`` case of the output rule).
    quant, dims, nextn
        As :func:`write_synthetic`.
    vocab : (pieces, scores, types), optional
        The SPM vocabulary to store (``tokenizer.ggml.*``, ``add_bos_token`` true,
        ``add_space_prefix`` false); default the minimal synthetic one.
    name : str, optional
        ``general.name``.

    Returns
    -------
    str

    Raises
    ------
    ConfigError
        A planned tensor missing or of another shape, an unplanned tensor, a vocab of the wrong size.
    """
    c = resolve_dims(arch, quant, dims)
    n_layer = c["n_layer"] if arch == "qwen3moe" else c["n_layer_35"]
    plan = [(n, sh, k) for n, sh, k in tensor_plan(arch, c, nextn) if n != "output.weight" or n in tensors]
    extra = set(tensors) - {n for n, _, _ in plan}
    if extra:
        raise ConfigError(f"write_weights: tensors not in the {arch} layout: {sorted(extra)[:5]}")
    for n, sh, _ in plan:
        if n not in tensors:
            raise ConfigError(f"write_weights: tensor {n} missing")
        if tuple(np.shape(tensors[n])) != tuple(sh):
            raise ConfigError(f"write_weights: {n} has shape {list(np.shape(tensors[n]))}, expected {list(sh)}")

    def fill(w: gguf.GGUFWriter) -> None:
        _add_metadata(w, arch, c, nextn, vocab if vocab is not None else True, name)
        for n, sh, kind in plan:
            value = np.ascontiguousarray(tensors[n], dtype=np.float32)
            qtype = _choose_type(n, sh, kind, quant, n_layer)
            if tied and quant == "mixed" and n == "token_embd.weight":
                qtype = mixed_type("output.weight", n_layer)    # the tied embedding is the output
            w.add_tensor(n, _encode(value, qtype), raw_dtype=None if qtype in _FLOAT_NP else qtype)

    tied = "output.weight" not in tensors
    return _atomic_write(path, arch, fill, data=True)


def write_header_only(path: str | os.PathLike, arch: str, metadata: Callable[[gguf.GGUFWriter], None],
                      tensors: list[tuple[str, tuple[int, ...], Q]]) -> str:
    """Write a GGUF with metadata and tensor infos but no tensor data.

    Parameters
    ----------
    path : str or os.PathLike
    arch : str
        ``general.architecture``.
    metadata : callable
        ``metadata(writer)`` adds the key/values.
    tensors : list of (name, numpy shape, GGMLQuantizationType)
        Element shapes in NumPy order (``ne`` reversed).

    Returns
    -------
    str
    """
    def fill(w: gguf.GGUFWriter) -> None:
        metadata(w)
        for name, shape, qtype in tensors:
            block_size, type_size = GGML_QUANT_SIZES[qtype]
            n_bytes = int(np.prod(shape)) // block_size * type_size
            w.add_tensor_info(name, shape, np.dtype(np.float32), n_bytes, raw_dtype=qtype)

    return _atomic_write(path, arch, fill, data=False)


def qwen36_35b_a3b_twin(path: str | os.PathLike) -> str:
    """Header-only Qwen3.6-35B-A3B-like file at ``path``: real widths (llama-cpp-notes.md §3, slime
    numbers), 40 trunk layers + the nextn block, Q4_K_M-like types (``mixed_type``). Its
    trunk token cycle is T = 581.25 MiB, the real Q4_K_M file's ``token_demand_MiB`` 581.2
    (shared/real-runs desktop summaries). Returns the path."""
    from gguf import GGMLQuantizationType as Q
    dims = dict(DEFAULT_DIMS, n_layer_35=40, n_embd=2048, n_head=16, n_head_kv=2, head_dim=256,
                n_expert=256, n_expert_used=8, n_ff_exp=512, n_ff_shexp=512, n_vocab=248320, n_ctx=262144,
                ssm_conv=4, ssm_state=128, ssm_group=16, ssm_dt_rank=32, rope_dim=64,
                rope_sections=(11, 11, 10, 0), rope_base=1e7)
    tensors = [(n, s, Q.F32 if k != "w" else mixed_type(n, 41))
               for n, s, k in tensor_plan("qwen35moe", dims, True)]
    return write_header_only(path, "qwen35moe",
                             lambda w: _add_metadata(w, "qwen35moe", dims, True, vocab=False), tensors)


def qwen3_30b_a3b_q4_k_m_twin(path: str | os.PathLike) -> str:
    """Header-only twin of Qwen3-30B-A3B-Q4_K_M: its metadata, tensor names, shapes and types.

    Types (from the model's llama.cpp load log: 241 f32, 289 q4_K, 49 q6_K tensors):
    ``token_embd`` Q4_K, ``output`` Q6_K; per layer norms and router F32; ``attn_q``, ``attn_k``,
    ``attn_output``, ``ffn_gate_exps``, ``ffn_up_exps`` Q4_K; ``attn_v`` and ``ffn_down_exps`` Q6_K
    on :func:`use_more_bits` layers (24 of 48), else Q4_K. The vocabulary (151936 tokens) is
    declared by ``qwen3moe.vocab_size`` instead of being written out.
    """
    c = dict(QWEN3_30B_A3B_EIGHTH, n_layer=48, n_vocab=151936, n_ctx=40960)
    D, E, F, H, KV, hd, V = 2048, 128, 768, 32, 4, 128, 151936

    def meta(w: gguf.GGUFWriter) -> None:
        _add_metadata(w, "qwen3moe", c, nextn=False, vocab=False)
        w.add_file_type(15)  # MOSTLY_Q4_K_M
        w.add_quantization_version(2)

    more = lambda il: Q.Q6_K if use_more_bits(il, 48) else Q.Q4_K  # noqa: E731
    tensors: list[tuple[str, tuple[int, ...], Q]] = [
        ("token_embd.weight", (V, D), Q.Q4_K), ("output_norm.weight", (D,), Q.F32), ("output.weight", (V, D), Q.Q6_K)]
    for il in range(48):
        b = f"blk.{il}."
        tensors += [
            (b + "attn_norm.weight", (D,), Q.F32), (b + "attn_q.weight", (H * hd, D), Q.Q4_K),
            (b + "attn_k.weight", (KV * hd, D), Q.Q4_K), (b + "attn_v.weight", (KV * hd, D), more(il)),
            (b + "attn_output.weight", (D, H * hd), Q.Q4_K), (b + "attn_q_norm.weight", (hd,), Q.F32),
            (b + "attn_k_norm.weight", (hd,), Q.F32), (b + "ffn_norm.weight", (D,), Q.F32),
            (b + "ffn_gate_inp.weight", (E, D), Q.F32), (b + "ffn_gate_exps.weight", (E, F, D), Q.Q4_K),
            (b + "ffn_up_exps.weight", (E, F, D), Q.Q4_K), (b + "ffn_down_exps.weight", (E, D, F), more(il))]
    return write_header_only(path, "qwen3moe", meta, tensors)
