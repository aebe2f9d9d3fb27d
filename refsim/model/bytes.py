"""Exact byte accounting of a GGUF MoE model, as the streaming engine computes it.

Definitions (shared/reference/bmoe-engine.md section 3.1; llama-cpp-notes.md section 1.2):

- A tensor is a *streamed expert tensor* if its name is exactly ``blk.<il>.<suffix>.weight`` with
  ``suffix`` in :data:`EXPERT_SUFFIXES`, it is 3-D and ``ne2 == n_expert``.
- Per streamed tensor, one expert's slice is ``nb2 = n_bytes / n_expert`` bytes
  (``= ne1 * ne0 / block_size * type_size``); expert ``e`` starts at ``data_offset + e * nb2``.
- ``expert_bytes(il)`` = the sum of ``nb2`` over the layer's streamed tensors (gate/up/down may have
  different types). It is the cost of one miss and the cache charge of one entry.
- ``dense_bytes(il)`` = the sum of GGUF sizes of every other ``blk.<il>.*`` tensor (attention,
  norms, router, shared expert, ...). ``token_embd``/``output``/``output_norm`` are global.
- T (one token cycle) = ``sum over trunk layers of min(k, n_expert) * expert_bytes(il)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from refsim import MIB
from refsim.errors import ModelFormatError
from refsim.model.gguf_io import TensorInfo
from refsim.model.spec import ModelSpec

EXPERT_SUFFIXES = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_up_exps")
"""Streamed routed-expert projections (engine router_hook.cpp ``match_expert``)."""

_BLK = re.compile(r"^blk\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class LayerBytes:
    """Byte figures of one block ``blk.<il>``.

    Attributes
    ----------
    il : int
        Block index (``il == n_layer`` is the nextn/MTP block).
    is_nextn : bool
        True for an MTP block.
    expert_bytes : int
        One expert entry: sum of per-expert strides of the streamed tensors, bytes.
    dense_bytes : int
        Every other tensor of the block, bytes.
    shared_expert_bytes : int
        All ``*_shexp`` tensors of the block (part of ``dense_bytes``), bytes.
    expert_types : tuple of (str, str)
        ``(suffix, ggml type name)`` per streamed tensor, in file order.
    n_expert : int
        Experts in the block's tensors (0 for a dense block).
    """

    il: int
    is_nextn: bool
    expert_bytes: int
    dense_bytes: int
    shared_expert_bytes: int
    expert_types: tuple[tuple[str, str], ...]
    n_expert: int

    @property
    def total_expert_bytes(self) -> int:
        """All experts of the block: ``n_expert * expert_bytes`` bytes."""
        return self.n_expert * self.expert_bytes


def row_size(ggml_type: GGMLQuantizationType, n: int) -> int:
    """Bytes of ``n`` consecutive elements of ``ggml_type`` (``ggml_row_size``).

    Raises
    ------
    ModelFormatError
        If ``n`` is not a multiple of the type's block size.
    """
    block_size, type_size = GGML_QUANT_SIZES[ggml_type]
    if n % block_size:
        raise ModelFormatError(f"{n} elements is not a multiple of {ggml_type.name} block size {block_size}")
    return n // block_size * type_size


def expert_stride(ti: TensorInfo, n_expert: int) -> int:
    """Per-expert slice ``nb2`` of a 3-D expert tensor, bytes.

    Raises
    ------
    ModelFormatError
        If the tensor is not 3-D or its ``ne2`` disagrees with ``n_expert``.
    """
    if len(ti.shape_gguf) != 3 or ti.shape_gguf[2] != n_expert:
        raise ModelFormatError(f"tensor {ti.name!r} has shape {list(ti.shape_gguf)}: expert count "
                               f"ne2 disagrees with expert_count {n_expert}")
    stride = ti.shape_gguf[1] * ti.row_bytes
    if stride * n_expert != ti.n_bytes:   # cannot happen for a table read_header built; never an assert
        raise ModelFormatError(f"tensor {ti.name!r}: {n_expert} expert slices of {stride} bytes != its {ti.n_bytes} bytes")
    return stride


def layer_bytes(tensors: dict[str, TensorInfo], spec: ModelSpec) -> list[LayerBytes]:
    """Per-block byte figures for every ``blk.<il>`` (trunk then nextn), in block order.

    Parameters
    ----------
    tensors : dict
        Name -> :class:`TensorInfo` (the tensor table).
    spec : ModelSpec

    Returns
    -------
    list of LayerBytes
        One per block ``0 .. n_layer_all - 1``.

    Raises
    ------
    ModelFormatError
        If an expert tensor's ``ne2`` disagrees with ``spec.n_expert``, or a tensor names a block
        ``>= n_layer_all``.
    """
    per_block: dict[int, list[TensorInfo]] = {il: [] for il in range(spec.n_layer_all)}
    for ti in tensors.values():
        m = _BLK.match(ti.name)
        if not m:
            continue
        il = int(m.group(1))
        if il not in per_block:
            raise ModelFormatError(f"tensor {ti.name!r} names block {il} but block_count is {spec.n_layer_all}")
        per_block[il].append(ti)
    out = []
    for il, tis in per_block.items():
        expert = dense = shared = 0
        types = []
        for ti in tis:
            suffix = ti.name[len(f"blk.{il}."):]
            stem = suffix[:-len(".weight")] if suffix.endswith(".weight") else None
            if stem in EXPERT_SUFFIXES and spec.n_expert > 0:
                expert += expert_stride(ti, spec.n_expert)
                types.append((stem, ti.ggml_type.name))
                continue
            dense += ti.n_bytes
            if "_shexp" in suffix:
                shared += ti.n_bytes
        out.append(LayerBytes(il, il >= spec.n_layer, expert, dense, shared, tuple(types),
                              spec.n_expert if expert else 0))
    return out


@dataclass(frozen=True)
class ModelBytes:
    """Whole-model byte figures.

    Attributes
    ----------
    layers : tuple of LayerBytes
        Every block, trunk then nextn.
    global_bytes : int
        Tensors outside ``blk.*`` (token_embd, output, output_norm), bytes.
    total_expert_bytes : int
        Every streamed expert slice of every block, nextn included (the engine's auto-budget
        ceiling), bytes.
    trunk_expert_bytes : int
        Same over trunk blocks only, bytes.
    total_dense_bytes : int
        Sum of ``dense_bytes`` over all blocks, bytes.
    kv_bytes_per_token : int
        KV cache per token over trunk attention layers at ``kv_type``, bytes.
    kv_bytes_per_token_nextn : int
        KV per token of the nextn blocks (the MTP draft context), bytes.
    recurrent_bytes_per_seq : int
        Gated-delta-net conv + ssm state per sequence (one snapshot slot), F32, bytes.
    file_tensor_bytes : int
        Sum of all tensor sizes, bytes.
    """

    layers: tuple[LayerBytes, ...]
    global_bytes: int
    total_expert_bytes: int
    trunk_expert_bytes: int
    total_dense_bytes: int
    kv_bytes_per_token: int
    kv_bytes_per_token_nextn: int
    recurrent_bytes_per_seq: int
    file_tensor_bytes: int

    def t_bytes(self, k: int, nextn: bool = False) -> int:
        """One token cycle ``T = sum_il min(k, n_expert) * expert_bytes(il)``, bytes.

        Parameters
        ----------
        k : int
            Experts used per token (``n_expert_used``, or the engine's override).
        nextn : bool, default False
            Sum over the nextn blocks instead of the trunk (the MTP draft's own cycle).
        """
        return sum(min(k, lb.n_expert) * lb.expert_bytes for lb in self.layers if lb.is_nextn == nextn)

    def t_mib(self, k: int) -> float:
        """Trunk ``T`` in MiB (bytes / 2**20)."""
        return self.t_bytes(k) / MIB


def kv_bytes_per_token(spec: ModelSpec, layers: list[int], kv_type: GGMLQuantizationType = GGMLQuantizationType.F16) -> int:
    """KV cache bytes per token over ``layers``.

    Per layer: ``row_size(kv_type, head_dim_k * n_head_kv) + row_size(kv_type, head_dim_v * n_head_kv)``
    (llama.cpp src/llama-kv-cache.cpp; default cache type F16).
    """
    per_layer = row_size(kv_type, spec.n_embd_k_gqa) + row_size(kv_type, spec.n_embd_v_gqa)
    return per_layer * len(layers)


def recurrent_bytes_per_seq(spec: ModelSpec) -> int:
    """Recurrent state per sequence (one snapshot slot), F32, bytes.

    Per gated-delta-net layer: conv ``4 * (d_conv - 1) * (d_inner + 2 * n_group * d_state)`` plus
    ssm ``4 * d_state * d_inner`` (llama.cpp ``llama_hparams::n_embd_r/n_embd_s``;
    llama-cpp-notes.md section 4.2). 0 for models without recurrent layers.
    """
    n_rec = sum(1 for il in range(spec.n_layer) if spec.is_recurrent(il))
    conv = 4 * (spec.ssm_d_conv - 1) * (spec.ssm_d_inner + 2 * spec.ssm_n_group * spec.ssm_d_state)
    ssm = 4 * spec.ssm_d_state * spec.ssm_d_inner
    return n_rec * (conv + ssm)


def model_bytes(tensors: dict[str, TensorInfo], spec: ModelSpec,
                kv_type: GGMLQuantizationType = GGMLQuantizationType.F16) -> ModelBytes:
    """All byte figures of a model (see :class:`ModelBytes`)."""
    layers = layer_bytes(tensors, spec)
    glob = sum(ti.n_bytes for ti in tensors.values() if not _BLK.match(ti.name))
    nextn_layers = list(range(spec.n_layer, spec.n_layer_all))
    return ModelBytes(
        layers=tuple(layers), global_bytes=glob,
        total_expert_bytes=sum(lb.total_expert_bytes for lb in layers),
        trunk_expert_bytes=sum(lb.total_expert_bytes for lb in layers if not lb.is_nextn),
        total_dense_bytes=sum(lb.dense_bytes for lb in layers),
        kv_bytes_per_token=kv_bytes_per_token(spec, spec.attention_layers(), kv_type),
        kv_bytes_per_token_nextn=kv_bytes_per_token(spec, nextn_layers, kv_type),
        recurrent_bytes_per_seq=recurrent_bytes_per_seq(spec),
        file_tensor_bytes=sum(ti.n_bytes for ti in tensors.values()))
