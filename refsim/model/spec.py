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
from dataclasses import dataclass, field
from typing import Any

from gguf import Keys

from refsim.errors import ModelFormatError

SUPPORTED_ARCHS = ("qwen3moe", "qwen35moe", "gemma3")

MAX_BLOCKS = 4096
"""Sanity bound on ``block_count`` (real models have < 200 blocks); guards against corrupt headers."""

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


def _int(v: Any) -> int:
    if hasattr(v, "__len__") and not isinstance(v, str):
        if len(v) != 1:  # per-layer arrays (e.g. head_count_kv per layer) are not supported
            raise TypeError("array")
        v = v[0]
    if isinstance(v, (str, float)):
        raise TypeError("not an integer")
    return int(v)


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
            raise ModelFormatError(f"unsupported architecture {self.arch!r} (supported: {', '.join(SUPPORTED_ARCHS)})")
        for name in ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim_k", "head_dim_v"):
            if getattr(self, name) <= 0:
                raise ModelFormatError(f"{self.arch}: {name} must be > 0, got {getattr(self, name)}")
        if self.n_head % self.n_head_kv:
            raise ModelFormatError(f"{self.arch}: n_head {self.n_head} is not a multiple of n_head_kv {self.n_head_kv}")
        if self.arch != "gemma3":
            if self.n_expert <= 0 or not 0 < self.n_expert_used <= self.n_expert:
                raise ModelFormatError(f"{self.arch}: need 0 < expert_used_count ({self.n_expert_used}) <= "
                                       f"expert_count ({self.n_expert})")
            if self.n_ff_exp <= 0:
                raise ModelFormatError(f"{self.arch}: expert_feed_forward_length must be > 0, got {self.n_ff_exp}")
        if self.n_layer_all != self.n_layer + self.nextn_predict_layers:
            raise ModelFormatError(f"{self.arch}: block_count {self.n_layer_all} != n_layer {self.n_layer} + "
                                   f"nextn_predict_layers {self.nextn_predict_layers}")

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
                      token_embd_rows: int = 0) -> "ModelSpec":
        """Build the spec from GGUF metadata.

        Parameters
        ----------
        metadata : dict
            Key -> value, as in :attr:`refsim.model.gguf_io.GGUFHeader.metadata`.
        path : str
            File name for messages.
        token_embd_rows : int
            ``token_embd.weight`` ne1, the vocab size fallback.

        Raises
        ------
        ModelFormatError
            No or unsupported ``general.architecture``; a required key missing or of the wrong type.
        """
        arch = metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise ModelFormatError(f"{path}: missing general.architecture")
        if arch not in SUPPORTED_ARCHS:
            raise ModelFormatError(f"{path}: unsupported architecture {arch!r} (supported: {', '.join(SUPPORTED_ARCHS)})")
        missing = [k.format(arch=arch) for k in ARCH_KEYS[arch] if k.format(arch=arch) not in metadata]
        if missing:
            raise ModelFormatError(f"{path}: missing required key(s) for {arch}: {', '.join(missing)}")

        def get(template: str, default: Any = None, kind=_int) -> Any:
            key = template.format(arch=arch)
            if key not in metadata:
                return default
            try:
                return kind(metadata[key])
            except (TypeError, ValueError):
                raise ModelFormatError(f"{path}: key {key} has a bad value {metadata[key]!r}") from None

        n_embd, n_head = get(Keys.LLM.EMBEDDING_LENGTH), get(Keys.Attention.HEAD_COUNT)
        if n_head <= 0:
            raise ModelFormatError(f"{path}: {arch}.attention.head_count must be > 0, got {n_head}")
        head_dim_k = get(Keys.Attention.KEY_LENGTH, n_embd // n_head)
        n_layer_all = get(Keys.LLM.BLOCK_COUNT)
        if not 0 < n_layer_all <= MAX_BLOCKS:
            raise ModelFormatError(f"{path}: {arch}.block_count {n_layer_all} out of range 1..{MAX_BLOCKS}")
        nextn = get(Keys.LLM.NEXTN_PREDICT_LAYERS, 0) if arch == "qwen35moe" else 0
        n_layer = n_layer_all - nextn
        n_ff = get(Keys.LLM.FEED_FORWARD_LENGTH, 0)
        tokens = metadata.get(Keys.Tokenizer.LIST)
        n_vocab = len(tokens) if tokens is not None else get(Keys.LLM.VOCAB_SIZE, token_embd_rows)
        extra: dict[str, Any] = {}
        if arch == "qwen35moe":
            interval = get(Keys.LLM.FULL_ATTENTION_INTERVAL, 4)
            if interval <= 0:
                raise ModelFormatError(f"{path}: {arch}.full_attention_interval must be > 0, got {interval}")
            rec_key = RECURRENT_LAYERS_KEY.format(arch=arch)
            if rec_key in metadata:
                rec = tuple(bool(x) for x in metadata[rec_key])[:n_layer]
            else:
                rec = tuple((il + 1) % interval != 0 for il in range(max(n_layer, 0)))
            sections = metadata[Keys.Rope.DIMENSION_SECTIONS.format(arch=arch)]
            extra = dict(
                full_attention_interval=interval, recurrent_layers=rec,
                rope_sections=tuple(int(x) for x in sections),
                ssm_d_conv=get(Keys.SSM.CONV_KERNEL), ssm_d_state=get(Keys.SSM.STATE_SIZE),
                ssm_n_group=get(Keys.SSM.GROUP_COUNT), ssm_dt_rank=get(Keys.SSM.TIME_STEP_RANK),
                ssm_d_inner=get(Keys.SSM.INNER_SIZE), nextn_predict_layers=nextn,
                n_ff_shexp=get(Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, n_ff))
        if arch == "gemma3":
            extra["sliding_window"] = get(Keys.Attention.SLIDING_WINDOW, 0)
        rms_eps = get(Keys.Attention.LAYERNORM_RMS_EPS, kind=float)
        rope_base = get(Keys.Rope.FREQ_BASE, 10000.0, kind=float)
        for template, value in ((Keys.Attention.LAYERNORM_RMS_EPS, rms_eps), (Keys.Rope.FREQ_BASE, rope_base)):
            if not (math.isfinite(value) and value > 0):   # NaN/inf here makes every logit NaN
                raise ModelFormatError(f"{path}: key {template.format(arch=arch)} is {value!r}, "
                                       f"expected a finite number > 0")
        return cls(
            arch=arch, n_layer=n_layer, n_layer_all=n_layer_all, n_embd=n_embd, n_head=n_head,
            n_head_kv=get(Keys.Attention.HEAD_COUNT_KV), head_dim_k=head_dim_k,
            head_dim_v=get(Keys.Attention.VALUE_LENGTH, head_dim_k), n_ff=n_ff,
            n_expert=get(Keys.LLM.EXPERT_COUNT, 0), n_expert_used=get(Keys.LLM.EXPERT_USED_COUNT, 0),
            n_ff_exp=get(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, 0),
            n_ctx_train=get(Keys.LLM.CONTEXT_LENGTH), n_vocab=n_vocab,
            rms_eps=rms_eps, rope_freq_base=rope_base,
            n_rot=get(Keys.Rope.DIMENSION_COUNT, head_dim_k), **extra)
