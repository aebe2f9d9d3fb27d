"""``ModelSpec``: the hyperparameters of a GGUF model, read once from its metadata.

Supported architectures and the keys each needs are listed in ``ARCH_KEYS``. Key strings are
built from ``gguf.Keys`` templates (``"{arch}.expert_count"``) so they match llama.cpp exactly.

Source: llama.cpp ``src/llama-model.cpp`` ``load_hparams`` (defaults: key_length = n_embd / n_head,
rope.dimension_count = key_length, full_attention_interval = 4, n_ff_shexp = n_ff) and the
required-key recipe of shared/reference/oracle/README.md section 4 (found by dropping each key
from a synthetic file and loading it in llama.cpp).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gguf import GGUFValueType, Keys

from refsim.errors import ModelFormatError
from refsim.model.gguf_io import KeyReader

SUPPORTED_ARCHS = ("qwen3moe", "qwen35moe", "gemma3")

MAX_BLOCKS = 512
"""Bound on ``block_count``: llama.cpp's ``LLAMA_MAX_LAYERS`` (src/llama-hparams.h; load_hparams asserts
``0 < n_layer_all <= LLAMA_MAX_LAYERS``)."""

MAX_EXPERTS = 512
"""Bound on ``expert_count``: llama.cpp's ``LLAMA_MAX_EXPERTS`` (src/llama-hparams.h, "Qwen3 Next";
load_hparams asserts ``n_expert <= LLAMA_MAX_EXPERTS``)."""

MAX_RMS_EPS = 1.0
"""Exclusive bound on ``attention.layer_norm_rms_epsilon``: real models use 1e-6 (Gemma 3,
Qwen3) to 1e-5; RMSNorm divides by ``sqrt(mean(x**2) + eps)`` and an epsilon near the mean
square of unit-scale activations (1) would flatten every norm. llama.cpp sets no bound; refsim
refuses such a file as damaged rather than run a model that says something else."""

ROPE_FREQ_BASE_SWA_KEY = "gemma3.rope.freq_base_swa"
"""gemma3's optional local-layer RoPE base (f32; llama.cpp ``LLM_KV_ROPE_FREQ_BASE_SWA``, default 10000)."""

RECURRENT_LAYERS_KEY = "{arch}.attention.recurrent_layers"
"""Optional per-layer bool array overriding ``full_attention_interval`` (llama.cpp ``LLM_KV_ATTENTION_RECURRENT_LAYERS``;
not in gguf-py 0.19's ``Keys``)."""

_COMMON_REQUIRED = (
    Keys.LLM.CONTEXT_LENGTH, Keys.LLM.EMBEDDING_LENGTH, Keys.LLM.BLOCK_COUNT,
    Keys.Attention.HEAD_COUNT, Keys.Attention.HEAD_COUNT_KV, Keys.Attention.LAYERNORM_RMS_EPS,
)
_MOE_REQUIRED = (Keys.LLM.EXPERT_COUNT, Keys.LLM.EXPERT_USED_COUNT, Keys.LLM.EXPERT_FEED_FORWARD_LENGTH)
ARCH_KEYS: dict[str, tuple[str, ...]] = {
    "qwen3moe": _COMMON_REQUIRED + _MOE_REQUIRED,
    "qwen35moe": _COMMON_REQUIRED + _MOE_REQUIRED + (
        Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, Keys.Rope.DIMENSION_SECTIONS,
        Keys.SSM.CONV_KERNEL, Keys.SSM.STATE_SIZE, Keys.SSM.GROUP_COUNT, Keys.SSM.TIME_STEP_RANK,
        Keys.SSM.INNER_SIZE),
    "gemma3": _COMMON_REQUIRED + (Keys.LLM.FEED_FORWARD_LENGTH,),
}
"""Metadata key templates (``{arch}`` filled in) each architecture must have."""


@dataclass(frozen=True)
class ModelSpec:
    """Read-only hyperparameters of one model (dimension names as in llama.cpp).

    Attributes
    ----------
    arch : {'qwen3moe', 'qwen35moe', 'gemma3'}
    n_layer : int
        Trunk layers (``block_count - nextn_predict_layers``).
    n_layer_all : int
        ``block_count``: trunk plus nextn/MTP blocks (the MTP block is ``blk.{n_layer}``).
    n_embd, n_head, n_head_kv : int
    head_dim_k, head_dim_v : int
        ``attention.key_length`` / ``value_length`` (default ``n_embd // n_head``).
    n_ff : int
        ``feed_forward_length`` (dense FFN width; 0 if absent).
    n_expert, n_expert_used : int
        Routed experts and top-k (0 for dense models).
    n_ff_exp : int
        Routed expert FFN width (``expert_feed_forward_length``).
    n_ff_shexp : int
        Shared expert FFN width (qwen35moe; 0 otherwise).
    n_ctx_train : int
    n_vocab : int
        Token count (``tokenizer.ggml.tokens`` length, else ``{arch}.vocab_size``, else ``token_embd`` ne1).
    rms_eps : float
    rope_freq_base : float
    n_rot : int
        ``rope.dimension_count`` (default ``head_dim_k``).
    rope_sections : tuple of int
        ``rope.dimension_sections`` (qwen35moe IMRoPE; empty otherwise).
    full_attention_interval : int
        qwen35moe: layer ``il`` is full attention iff ``(il + 1) % interval == 0`` (default 4); 0 otherwise.
    recurrent_layers : tuple of bool
        Per trunk layer, True for gated-delta-net (linear attention) layers.
    ssm_d_conv, ssm_d_state, ssm_n_group, ssm_dt_rank, ssm_d_inner : int
        qwen35moe linear-attention dims (``ssm.conv_kernel``, ``state_size``, ``group_count``,
        ``time_step_rank``, ``inner_size``); 0 otherwise.
    nextn_predict_layers : int
        MTP blocks after the trunk (qwen35moe; 0 otherwise).
    sliding_window : int
        gemma3 ``attention.sliding_window`` (0 if absent).
    """

    arch: str
    n_layer: int
    n_layer_all: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_ff: int
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_ctx_train: int
    n_vocab: int
    rms_eps: float
    rope_freq_base: float
    n_rot: int
    n_ff_shexp: int = 0
    rope_sections: tuple[int, ...] = ()
    full_attention_interval: int = 0
    recurrent_layers: tuple[bool, ...] = field(default=())
    ssm_d_conv: int = 0
    ssm_d_state: int = 0
    ssm_n_group: int = 0
    ssm_dt_rank: int = 0
    ssm_d_inner: int = 0
    nextn_predict_layers: int = 0
    sliding_window: int = 0

    def __post_init__(self):
        if self.arch not in SUPPORTED_ARCHS:
            raise ModelFormatError(f"unsupported general.architecture {self.arch!r} (supported: {', '.join(SUPPORTED_ARCHS)})")
        a = self.arch
        for name, key in (("n_layer", "block_count - nextn_predict_layers"), ("n_embd", "embedding_length"),
                          ("n_head", "attention.head_count"), ("n_head_kv", "attention.head_count_kv"),
                          ("head_dim_k", "attention.key_length"), ("head_dim_v", "attention.value_length")):
            if getattr(self, name) <= 0:
                raise ModelFormatError(f"{a}: {a}.{key} ({name}) must be > 0, got {getattr(self, name)}")
        if self.n_head % self.n_head_kv:
            raise ModelFormatError(f"{a}: {a}.attention.head_count {self.n_head} is not a multiple of "
                                   f"{a}.attention.head_count_kv {self.n_head_kv}")
        if a != "gemma3":
            if self.n_expert <= 0 or not 0 < self.n_expert_used <= self.n_expert:
                raise ModelFormatError(f"{a}: need 0 < {a}.expert_used_count ({self.n_expert_used}) <= "
                                       f"{a}.expert_count ({self.n_expert})")
            if self.n_ff_exp <= 0:
                raise ModelFormatError(f"{a}: {a}.expert_feed_forward_length must be > 0, got {self.n_ff_exp}")
        if self.n_layer_all != self.n_layer + self.nextn_predict_layers:
            raise ModelFormatError(f"{self.arch}: block_count {self.n_layer_all} != n_layer {self.n_layer} + "
                                   f"nextn_predict_layers {self.nextn_predict_layers}")
        if self.n_ctx_train <= 0:
            raise ModelFormatError(f"{a}: {a}.context_length must be > 0, got {self.n_ctx_train}")
        if self.n_vocab <= 0:
            raise ModelFormatError(f"{a}: the vocabulary is empty (n_vocab {self.n_vocab}: no tokenizer.ggml.tokens, "
                                   f"{a}.vocab_size or token_embd rows)")
        if self.n_expert > MAX_EXPERTS:
            raise ModelFormatError(f"{a}: {a}.expert_count {self.n_expert} exceeds {MAX_EXPERTS} "
                                   f"(llama.cpp LLAMA_MAX_EXPERTS)")
        self._check_arch()

    def _check_arch(self) -> None:
        """Per-architecture rules the forward passes rely on, checked when the file is opened.

        qwen3moe: ``rope.dimension_count == key_length == value_length`` (llama.cpp
        src/models/qwen3moe.cpp asserts both). gemma3: the same (refsim's pass implements only
        full-head RoPE), ``feed_forward_length > 0``. qwen35moe: ``rope.dimension_count`` even and
        in 1..key_length (partial IMRoPE), 4 non-negative ``rope.dimension_sections`` whose sum is in
        1..key_length (ggml/src/ggml-cpu/ops.cpp ``ggml_mrope_cache_init``: ``GGML_ASSERT(sect_dims <=
        ne0)`` over the head's row, and ``(i0/2) % sect_dims`` divides by the sum), at most one
        nextn block (llama-cpp-notes.md section 3.6), a shared expert width > 0, and, with
        recurrent layers, gated-delta-net dims with ``time_step_rank`` a multiple of ``group_count``
        and ``inner_size`` a multiple of ``time_step_rank`` (section 3.2).
        """
        a = self.arch
        if a in ("qwen3moe", "gemma3") and not self.n_rot == self.head_dim_k == self.head_dim_v:
            raise ModelFormatError(f"{a}: needs {a}.rope.dimension_count == attention.key_length == value_length, got "
                                   f"{self.n_rot}, {self.head_dim_k}, {self.head_dim_v}")
        if a == "gemma3" and self.n_ff <= 0:
            raise ModelFormatError(f"{a}: {a}.feed_forward_length must be > 0, got {self.n_ff}")
        if a != "qwen35moe":
            return
        if self.n_rot % 2 or not 0 < self.n_rot <= self.head_dim_k:
            raise ModelFormatError(f"{a}: {a}.rope.dimension_count {self.n_rot} must be even and in 1..key_length "
                                   f"{self.head_dim_k}")
        if (len(self.rope_sections) != 4 or min(self.rope_sections) < 0
                or not 0 < sum(self.rope_sections) <= self.head_dim_k):
            raise ModelFormatError(
                f"{a}: {a}.rope.dimension_sections {list(self.rope_sections)}: expected 4 values >= 0 with a sum in "
                f"1..key_length {self.head_dim_k} (ggml's ggml_mrope_cache_init asserts sum <= the rotated row "
                f"length and takes each pair's section modulo the sum)")
        if self.nextn_predict_layers > 1:
            raise ModelFormatError(f"{a}: {a}.nextn_predict_layers {self.nextn_predict_layers}: only 1 MTP block "
                                   f"is supported (as in llama.cpp)")
        if self.n_ff_shexp <= 0:
            raise ModelFormatError(f"{a}: {a}.expert_shared_feed_forward_length must be > 0, got {self.n_ff_shexp}")
        if any(self.recurrent_layers):
            Hk, Hv, d_inner = self.ssm_n_group, self.ssm_dt_rank, self.ssm_d_inner
            if (min(Hk, Hv, d_inner, self.ssm_d_state, self.ssm_d_conv) <= 0 or Hv % Hk or d_inner % Hv):
                raise ModelFormatError(
                    f"{a}: {a}.ssm.* conv_kernel {self.ssm_d_conv}, state_size {self.ssm_d_state}, group_count {Hk}, "
                    f"time_step_rank {Hv}, inner_size {d_inner}: need all > 0, time_step_rank % group_count == 0 "
                    f"and inner_size % time_step_rank == 0")

    @property
    def n_embd_k_gqa(self) -> int:
        """K width per token per layer: ``head_dim_k * n_head_kv``."""
        return self.head_dim_k * self.n_head_kv

    @property
    def n_embd_v_gqa(self) -> int:
        """V width per token per layer: ``head_dim_v * n_head_kv``."""
        return self.head_dim_v * self.n_head_kv

    def is_recurrent(self, il: int) -> bool:
        """True if trunk layer ``il`` is a gated-delta-net layer (never for MTP blocks)."""
        return il < len(self.recurrent_layers) and self.recurrent_layers[il]

    def attention_layers(self) -> list[int]:
        """Trunk layers that keep a KV cache (all but the recurrent ones)."""
        return [il for il in range(self.n_layer) if not self.is_recurrent(il)]

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any], path: str = "<gguf>",
                      token_embd_rows: int = 0, types: Mapping | None = None) -> "ModelSpec":
        """Build the spec from GGUF metadata, each key read with the type llama.cpp demands.

        Parameters
        ----------
        metadata : dict
            Key -> value, as in :attr:`refsim.model.gguf_io.GGUFHeader.metadata`.
        path : str
            File name for messages.
        token_embd_rows : int
            ``token_embd.weight`` ne1, the vocab size fallback.
        types : mapping, optional
            Key -> ``(value type, element type)`` (:attr:`GGUFHeader.types`); inferred from the
            values when absent (metadata built in memory).

        Raises
        ------
        ModelFormatError
            No or unsupported ``general.architecture``; a required key missing; a key of the wrong
            type (naming the key, its type and the expected type); a per-layer array of the wrong
            length or with values that differ by layer; a value out of range (see ``__post_init__``).

        Notes
        -----
        Types (llama.cpp ``src/llama-model.cpp`` ``load_hparams`` and the per-arch loaders, read
        through ``llama_model_loader::get_key`` / ``get_key_or_arr``, see
        :class:`refsim.model.gguf_io.KeyReader`): every count and length is u32;
        ``feed_forward_length``, ``attention.head_count`` and ``attention.head_count_kv`` are a
        u32 or an array with one entry per block; ``layer_norm_rms_epsilon``, ``rope.freq_base``
        (and gemma3's ``rope.freq_base_swa``) are f32; ``rope.dimension_sections`` is an i32 or an
        array of 4 integers; ``attention.recurrent_layers`` a bool or an array of one integer or
        bool per block; ``general.architecture`` a str.
        """
        kr = KeyReader(metadata, path, types)
        if "general.architecture" not in metadata:
            raise ModelFormatError(f"{path}: missing general.architecture")
        arch = kr.string("general.architecture")
        if arch not in SUPPORTED_ARCHS:
            raise ModelFormatError(f"{path}: general.architecture: unsupported architecture {arch!r} "
                                   f"(supported: {', '.join(SUPPORTED_ARCHS)})")
        missing = [k.format(arch=arch) for k in ARCH_KEYS[arch] if k.format(arch=arch) not in metadata]
        if missing:
            raise ModelFormatError(f"{path}: missing required key(s) for {arch}: {', '.join(missing)}")
        key = lambda template: template.format(arch=arch)  # noqa: E731
        U32 = GGUFValueType.UINT32

        n_layer_all = kr.u32(key(Keys.LLM.BLOCK_COUNT))
        if not 0 < n_layer_all <= MAX_BLOCKS:
            raise ModelFormatError(f"{path}: {arch}.block_count {n_layer_all} out of range 1..{MAX_BLOCKS} "
                                   f"(llama.cpp LLAMA_MAX_LAYERS)")

        def per_layer(template: str, default: Any = None) -> int:
            k = key(template)
            vals = kr.int_or_array(k, n_layer_all, U32, *(() if default is None else (default,)))
            if len(set(vals)) > 1:
                raise ModelFormatError(f"{path}: key {k} differs by layer ({list(vals[:8])}"
                                       f"{' ...' if len(vals) > 8 else ''}); refsim models one value for every layer")
            return vals[0]

        n_embd, n_head = kr.u32(key(Keys.LLM.EMBEDDING_LENGTH)), per_layer(Keys.Attention.HEAD_COUNT)
        if n_head <= 0:
            raise ModelFormatError(f"{path}: {arch}.attention.head_count must be > 0, got {n_head}")
        head_dim_k = kr.u32(key(Keys.Attention.KEY_LENGTH), n_embd // n_head)
        nextn = kr.u32(key(Keys.LLM.NEXTN_PREDICT_LAYERS), 0) if arch == "qwen35moe" else 0
        n_layer = n_layer_all - nextn
        n_ff = per_layer(Keys.LLM.FEED_FORWARD_LENGTH, 0)
        n_vocab = token_embd_rows
        vocab_size = kr.u32(key(Keys.LLM.VOCAB_SIZE), None)
        if Keys.Tokenizer.LIST in metadata:
            n_vocab = len(kr.array(Keys.Tokenizer.LIST, (GGUFValueType.STRING,)))
            if vocab_size is not None and vocab_size != n_vocab:
                raise ModelFormatError(f"{path}: key {key(Keys.LLM.VOCAB_SIZE)} = {vocab_size} but "
                                       f"{Keys.Tokenizer.LIST} has {n_vocab} tokens")
        elif vocab_size is not None:
            n_vocab = vocab_size
        extra: dict[str, Any] = {}
        if arch == "qwen35moe":
            interval = kr.u32(key(Keys.LLM.FULL_ATTENTION_INTERVAL), 4)
            if interval <= 0:
                raise ModelFormatError(f"{path}: {arch}.full_attention_interval must be > 0, got {interval}")
            rec_key = key(RECURRENT_LAYERS_KEY)
            if rec_key in metadata:
                rec = tuple(bool(x) for x in kr.int_or_array(rec_key, n_layer_all, GGUFValueType.BOOL))[:n_layer]
            else:
                rec = tuple((il + 1) % interval != 0 for il in range(max(n_layer, 0)))
            sections = kr.int_or_array(key(Keys.Rope.DIMENSION_SECTIONS), 4, GGUFValueType.INT32,
                                       array_types=(GGUFValueType.UINT32, GGUFValueType.INT32))
            extra = dict(
                full_attention_interval=interval, recurrent_layers=rec, rope_sections=sections,
                ssm_d_conv=kr.u32(key(Keys.SSM.CONV_KERNEL)), ssm_d_state=kr.u32(key(Keys.SSM.STATE_SIZE)),
                ssm_n_group=kr.u32(key(Keys.SSM.GROUP_COUNT)), ssm_dt_rank=kr.u32(key(Keys.SSM.TIME_STEP_RANK)),
                ssm_d_inner=kr.u32(key(Keys.SSM.INNER_SIZE)), nextn_predict_layers=nextn,
                n_ff_shexp=kr.u32(key(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH), n_ff))
        floats = [(key(Keys.Attention.LAYERNORM_RMS_EPS), None), (key(Keys.Rope.FREQ_BASE), 10000.0)]
        if arch == "gemma3":
            extra["sliding_window"] = kr.u32(key(Keys.Attention.SLIDING_WINDOW), 0)
            floats.append((ROPE_FREQ_BASE_SWA_KEY, 10000.0))
        values = []
        for k, default in floats:
            value = kr.f32(k) if default is None else kr.f32(k, default)
            # NaN/inf here makes every logit NaN; 0 (or a value that is 0 in float32) divides by zero
            if not (math.isfinite(value) and np.float32(value) > 0):
                raise ModelFormatError(f"{path}: key {k} is {value!r}, expected a finite number > 0")
            if k == key(Keys.Attention.LAYERNORM_RMS_EPS) and not value < MAX_RMS_EPS:
                raise ModelFormatError(f"{path}: key {k} is {value!r}, expected a finite number > 0 and < "
                                       f"{MAX_RMS_EPS:g} (real models use 1e-6..1e-5; an epsilon that large swamps "
                                       f"the mean square it is added to)")
            values.append(value)
        return cls(
            arch=arch, n_layer=n_layer, n_layer_all=n_layer_all, n_embd=n_embd, n_head=n_head,
            n_head_kv=per_layer(Keys.Attention.HEAD_COUNT_KV), head_dim_k=head_dim_k,
            head_dim_v=kr.u32(key(Keys.Attention.VALUE_LENGTH), head_dim_k), n_ff=n_ff,
            n_expert=kr.u32(key(Keys.LLM.EXPERT_COUNT), 0), n_expert_used=kr.u32(key(Keys.LLM.EXPERT_USED_COUNT), 0),
            n_ff_exp=kr.u32(key(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH), 0),
            n_ctx_train=kr.u32(key(Keys.LLM.CONTEXT_LENGTH)), n_vocab=n_vocab,
            rms_eps=values[0], rope_freq_base=values[1],
            n_rot=kr.u32(key(Keys.Rope.DIMENSION_COUNT), head_dim_k), **extra)
