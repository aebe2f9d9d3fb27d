"""``open_model``: a GGUF file as a spec, a tensor table, byte figures and read-only weights.

Three objects are kept apart (STYLE.md section 2): the :class:`ModelSpec` (numbers), the tensor
table and byte figures (also numbers, no data needed), and the weights: read-only ``numpy.memmap``
views, fetched per tensor or per expert slice, never loaded or dequantized whole by this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType

from refsim.errors import ModelFormatError
from refsim.model.bytes import EXPERT_SUFFIXES, LayerBytes, ModelBytes, expert_stride, model_bytes
from refsim.model.gguf_io import GGUFHeader, TensorInfo, read_header
from refsim.model.spec import ModelSpec
from refsim.model.tokenizer import check_vocab

Shape = tuple[int, ...]


def tensor_shapes(spec: ModelSpec) -> tuple[dict[str, tuple[Shape, ...]], list[str]]:
    """Every tensor refsim's reader of ``spec.arch`` knows, with the GGUF ``ne`` it must have.

    Returns
    -------
    shapes : dict
        Name -> accepted shapes (GGUF ``ne`` order, fastest first), one per alternative.
    required : list of str
        Names the file must contain. Routed gate/up may instead be one fused
        ``ffn_gate_up_exps`` (checked apart in :func:`_check_tensors`); ``output``,
        ``nextn.embed_tokens``, ``nextn.shared_head_norm`` and ``nextn.shared_head_head`` are
        optional (tied to ``token_embd`` / ``output_norm`` / ``output`` when absent).

    Notes
    -----
    Dimension names: D = n_embd, V = n_vocab, H / KV = heads, hd / hdv = key / value head dims,
    E = n_expert, F = n_ff_exp, S = n_ff_shexp; gated delta net Hk = group_count,
    Dk = state_size, Hv = time_step_rank, Dv = inner_size / Hv, C = 2 Hk Dk + Hv Dv. These are
    the shapes llama.cpp's ``create_tensor`` demands (src/llama-model.cpp ``load_arch_tensors``,
    "tensor '%s' has wrong shape"; llama-cpp-notes.md sections 1.1, 2.2, 3.2, 3.6) and the ones
    the forward passes read (refsim/forward/qwen3moe.py, qwen35moe.py, gemma3.py).
    """
    s = spec
    D, V, H, KV, hd, hdv = s.n_embd, s.n_vocab, s.n_head, s.n_head_kv, s.head_dim_k, s.head_dim_v
    E, F, S = s.n_expert, s.n_ff_exp, s.n_ff_shexp
    shapes: dict[str, tuple[Shape, ...]] = {}
    required: list[str] = []

    def add(name: str, *accepted: Shape, req: bool = True) -> None:
        shapes[name] = accepted
        if req:
            required.append(name)

    add("token_embd.weight", (D, V))
    add("output_norm.weight", (D,))
    add("output.weight", (D, V), req=False)
    for il in range(s.n_layer_all):
        w = lambda suffix: f"blk.{il}.{suffix}.weight"  # noqa: E731
        add(w("attn_norm"), (D,))
        if s.arch == "gemma3":
            attn = [("attn_q", (D, H * hd))]
        elif s.arch == "qwen35moe":
            attn = [("attn_q", (D, 2 * H * hd))]   # [q | gate] per head
        else:
            attn = [("attn_q", (D, H * hd))]
        attn += [("attn_k", (D, KV * hd)), ("attn_v", (D, KV * hdv)), ("attn_output", (H * hdv, D)),
                 ("attn_q_norm", (hd,)), ("attn_k_norm", (hd,))]
        if s.arch == "gemma3":
            for suffix, shape in attn + [("post_attention_norm", (D,)), ("ffn_norm", (D,)), ("ffn_gate", (D, s.n_ff)),
                                         ("ffn_up", (D, s.n_ff)), ("ffn_down", (s.n_ff, D)), ("post_ffw_norm", (D,))]:
                add(w(suffix), shape)
            continue
        add(w("ffn_gate_inp"), (D, E))
        add(w("ffn_down_exps"), (F, D, E))
        for suffix in ("ffn_gate_exps", "ffn_up_exps"):
            add(w(suffix), (D, F, E), req=False)
        add(w("ffn_gate_up_exps"), (D, 2 * F, E), req=False)
        if s.arch == "qwen3moe":
            for suffix, shape in attn + [("ffn_norm", (D,))]:
                add(w(suffix), shape)
            continue
        add(w("post_attention_norm"), (D,))
        add(w("ffn_gate_inp_shexp"), (D,), (D, 1))
        for suffix, shape in (("ffn_gate_shexp", (D, S)), ("ffn_up_shexp", (D, S)), ("ffn_down_shexp", (S, D))):
            add(w(suffix), shape)
        if s.is_recurrent(il):
            Hk, Dk, Hv = s.ssm_n_group, s.ssm_d_state, s.ssm_dt_rank
            Dv = s.ssm_d_inner // Hv
            C = 2 * Hk * Dk + Hv * Dv
            for suffix, shape in (("attn_qkv", (D, C)), ("attn_gate", (D, Hv * Dv)), ("ssm_conv1d", (s.ssm_d_conv, C)),
                                  ("ssm_beta", (D, Hv)), ("ssm_alpha", (D, Hv)), ("ssm_norm", (Dv,)),
                                  ("ssm_out", (Hv * Dv, D))):
                add(w(suffix), shape)
            add(f"blk.{il}.ssm_dt.bias", (Hv,))
            add(f"blk.{il}.ssm_a", (Hv,))
            continue
        for suffix, shape in attn:
            add(w(suffix), shape)
        if il >= s.n_layer:   # the MTP block
            add(w("nextn.eh_proj"), (2 * D, D))
            add(w("nextn.enorm"), (D,))
            add(w("nextn.hnorm"), (D,))
            add(w("nextn.embed_tokens"), (D, V), req=False)
            add(w("nextn.shared_head_norm"), (D,), req=False)
            add(w("nextn.shared_head_head"), (D, V), req=False)
    return shapes, required


def required_tensors(spec: ModelSpec) -> list[str]:
    """Names a file of ``spec.arch`` must contain (llama.cpp would refuse it otherwise).

    Routed gate/up may be either separate or fused (``ffn_gate_up_exps``); that alternative is
    checked apart in :func:`_check_tensors`.

    Source: shared/reference/oracle/README.md section 4 (required-tensor scan) and llama.cpp
    ``load_arch_tensors``; gemma3 from the real Gemma-3-270M tensor list.
    """
    return tensor_shapes(spec)[1]


NOT_WEIGHT_TYPES = frozenset({GGMLQuantizationType.I8, GGMLQuantizationType.I16, GGMLQuantizationType.I32,
                              GGMLQuantizationType.I64, GGMLQuantizationType.F64})
"""ggml types that are never model weights: ggml.c ``type_traits`` gives them no ``to_float`` (they
hold indices, positions and counts), so no llama.cpp op reads a weight of that type as numbers."""


def _check_tensors(header: GGUFHeader, spec: ModelSpec) -> None:
    """Required tensors present, no tensor the arch does not have, every shape as the hparams say,
    no tensor of a type that is not a weight type (:data:`NOT_WEIGHT_TYPES`)."""
    path, tensors = header.path, header.tensors
    for name, ti in tensors.items():
        if ti.ggml_type in NOT_WEIGHT_TYPES:
            raise ModelFormatError(f"{path}: tensor {name!r} has ggml type {ti.ggml_type.name}, expected a weight "
                                   f"type (float or quantized: ggml has no conversion to float for I8, I16, I32, "
                                   f"I64, F64)")
    shapes, required = tensor_shapes(spec)
    missing = [n for n in required if n not in tensors]
    if spec.arch != "gemma3":
        for il in range(spec.n_layer_all):
            fused = f"blk.{il}.ffn_gate_up_exps.weight" in tensors
            split = [f"blk.{il}.ffn_{p}_exps.weight" for p in ("gate", "up")]
            if not fused:
                missing += [n for n in split if n not in tensors]
    if missing:
        more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
        raise ModelFormatError(f"{path}: missing required tensor(s) for {spec.arch}: {', '.join(missing[:5])}{more}")
    unknown = [n for n in tensors if n not in shapes]
    if unknown:
        more = f" (and {len(unknown) - 3} more)" if len(unknown) > 3 else ""
        raise ModelFormatError(f"{path}: tensor(s) {', '.join(map(repr, unknown[:3]))}{more} are not part of a "
                               f"{spec.arch} model with block_count {spec.n_layer_all} (llama.cpp refuses unused "
                               f"tensors: 'wrong number of tensors')")
    for name, ti in tensors.items():
        want = shapes[name]
        if tuple(ti.shape_gguf) in want:
            continue
        suffix = name.split(".", 2)[-1][:-len(".weight")] if name.startswith("blk.") else ""
        e_dim = 2 if suffix in EXPERT_SUFFIXES else 1 if suffix == "ffn_gate_inp" else None
        if e_dim is not None and (len(ti.shape_gguf) <= e_dim or ti.shape_gguf[e_dim] != spec.n_expert):
            raise ModelFormatError(f"{path}: tensor {name!r} shape {list(ti.shape_gguf)}: expert count "
                                   f"(ne{e_dim}) disagrees with {spec.arch}.expert_count = {spec.n_expert}")
        raise ModelFormatError(f"{path}: tensor {name!r} has shape {list(ti.shape_gguf)}, expected "
                               f"{' or '.join(str(list(w)) for w in want)} (from the {spec.arch} hparams)")


@dataclass(frozen=True)
class Model:
    """An opened GGUF model.

    Attributes
    ----------
    path : str
    spec : ModelSpec
    header : GGUFHeader
        Metadata and the raw tensor table.
    bytes : ModelBytes
        Exact byte figures (see :mod:`refsim.model.bytes`).
    """

    path: str
    spec: ModelSpec
    header: GGUFHeader
    bytes: ModelBytes

    @property
    def has_data(self) -> bool:
        """False for a header-only file: byte accounting works, weight access raises."""
        return self.header.has_data

    @property
    def tensors(self) -> dict[str, TensorInfo]:
        """Name -> :class:`TensorInfo`, in file order."""
        return self.header.tensors

    @property
    def metadata(self) -> dict:
        """GGUF metadata, key -> value."""
        return self.header.metadata

    @property
    def layers(self) -> tuple[LayerBytes, ...]:
        """Per-block byte figures, trunk then nextn (``layers[il].expert_bytes`` etc.)."""
        return self.bytes.layers

    def expert_bytes(self, il: int) -> int:
        """One expert entry of block ``il``, bytes."""
        return self.bytes.layers[il].expert_bytes

    def dense_bytes(self, il: int) -> int:
        """Non-expert tensors of block ``il``, bytes."""
        return self.bytes.layers[il].dense_bytes

    def t_bytes(self, k: int | None = None) -> int:
        """One token cycle over the trunk, ``k`` default ``n_expert_used``, bytes."""
        return self.bytes.t_bytes(self.spec.n_expert_used if k is None else k)

    def tensor(self, name: str) -> TensorInfo:
        """Tensor info by name.

        Raises
        ------
        ModelFormatError
            If there is no such tensor.
        """
        ti = self.header.tensors.get(name)
        if ti is None:
            raise ModelFormatError(f"{self.path}: no tensor named {name!r}")
        return ti

    def raw(self, name: str) -> np.ndarray:
        """Raw bytes of a tensor, memory-mapped.

        Returns
        -------
        (n_rows, row_bytes) uint8 ndarray
            Read-only view into the file; ``n_rows = prod(ne[1:])``.

        Raises
        ------
        ModelFormatError
            Header-only file, or unknown tensor.
        ConfigError
            refsim has no kernel for the tensor's ggml type (the error names the tensor and the
            type): weights refsim cannot decode are never handed to a forward pass.
        """
        self._kernel(name)
        return self.header.tensor_data(name)

    def _kernel(self, name: str):
        from refsim.kernels import kernel_for
        return kernel_for(self.tensor(name).ggml_type, f"{self.path}: tensor {name!r}")

    def expert_raw(self, name: str, e: int) -> np.ndarray:
        """Raw bytes of expert ``e``'s slice of a 3-D expert tensor (only those bytes are touched).

        Returns
        -------
        (ne1, row_bytes) uint8 ndarray
            Memory-mapped view at ``data_offset + e * nb2``.

        Raises
        ------
        ModelFormatError
            Header-only file, unknown tensor, not an expert tensor, or ``e`` out of range.
        ConfigError
            No kernel for the tensor's type (see :meth:`raw`).
        """
        ti = self.tensor(name)
        self._kernel(name)
        stride = expert_stride(ti, self.spec.n_expert)
        if not 0 <= e < self.spec.n_expert:
            raise ModelFormatError(f"{self.path}: expert {e} out of range 0..{self.spec.n_expert - 1}")
        if not self.has_data:
            self.raw(name)  # raises the header-only error
        mm = np.memmap(self.path, dtype=np.uint8, mode="r", offset=ti.data_offset + e * stride, shape=(stride,))
        return mm.reshape(ti.shape_gguf[1], ti.row_bytes)

    def dequantize(self, name: str, rows: np.ndarray | slice | None = None) -> np.ndarray:
        """Dequantize (some rows of) a tensor with refsim's kernels.

        Parameters
        ----------
        name : str
        rows : int array, slice or None
            Row indices into the ``(n_rows, ne0)`` view; None = all rows (avoid on big tensors).

        Returns
        -------
        (n_sel, ne0) float32 ndarray

        Raises
        ------
        ConfigError
            A ggml type refsim has no kernel for (:func:`refsim.kernels.require_kernel`).
        """
        from refsim.kernels import dequantize_rows, require_kernel
        ti = self.tensor(name)
        require_kernel(ti.ggml_type, name, self.path)
        raw = self.raw(name)
        sel = raw if rows is None else raw[rows]
        return dequantize_rows(np.ascontiguousarray(sel), ti.ggml_type, ti.shape_gguf[0])


def open_model(path: str | os.PathLike) -> Model:
    """Open a GGUF model: parse and validate the header, build spec, table and byte figures.

    Parameters
    ----------
    path : str or os.PathLike
        A ``qwen3moe``, ``qwen35moe`` or ``gemma3`` GGUF; may be header-only (no tensor data).

    Returns
    -------
    Model

    Raises
    ------
    ModelFormatError
        Any malformed header (see :func:`refsim.model.gguf_io.read_header`), an unsupported
        architecture, a missing required key or a key of the wrong type
        (:meth:`ModelSpec.from_metadata`), a bad vocabulary
        (:func:`refsim.model.tokenizer.check_vocab`), a missing required tensor, a tensor the
        architecture does not have, any tensor whose shape disagrees with the hparams
        (:func:`tensor_shapes`), or a tensor of an integer or F64 type (:data:`NOT_WEIGHT_TYPES`),
        each naming the file.
    """
    header = read_header(path)
    check_vocab(header.metadata, header.path, header.types)
    emb = header.tensors.get("token_embd.weight")
    try:
        spec = ModelSpec.from_metadata(header.metadata, header.path, types=header.types,
                                       token_embd_rows=emb.shape_gguf[1] if emb and len(emb.shape_gguf) > 1 else 0)
    except ModelFormatError as exc:
        msg = str(exc)
        raise ModelFormatError(msg if msg.startswith(header.path) else f"{header.path}: {msg}") from None
    if spec.n_layer_all > len(header.tensors):
        raise ModelFormatError(f"{header.path}: block_count {spec.n_layer_all} exceeds the {len(header.tensors)} tensors in the file")
    _check_tensors(header, spec)
    try:
        mb = model_bytes(header.tensors, spec)
    except ModelFormatError as exc:
        raise ModelFormatError(f"{header.path}: {exc}") from None
    return Model(header.path, spec, header, mb)
