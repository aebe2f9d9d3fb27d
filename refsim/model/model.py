"""``open_model``: a GGUF file as a spec, a tensor table, byte figures and read-only weights.

Three objects are kept apart (STYLE.md section 2): the :class:`ModelSpec` (numbers), the tensor
table and byte figures (also numbers, no data needed), and the weights: read-only ``numpy.memmap``
views, fetched per tensor or per expert slice, never loaded or dequantized whole by this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from refsim.errors import ModelFormatError
from refsim.model.bytes import EXPERT_SUFFIXES, LayerBytes, ModelBytes, expert_stride, model_bytes
from refsim.model.gguf_io import GGUFHeader, TensorInfo, read_header
from refsim.model.spec import ModelSpec

_QWEN_ATTN = ("attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm")
_SHEXP = ("ffn_gate_inp_shexp", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp")
_GDN = ("attn_qkv", "attn_gate", "ssm_conv1d", "ssm_beta", "ssm_alpha", "ssm_norm", "ssm_out")


def required_tensors(spec: ModelSpec) -> list[str]:
    """Names a file of ``spec.arch`` must contain (llama.cpp would refuse it otherwise).

    Routed gate/up may be either separate or fused (``ffn_gate_up_exps``); that alternative is
    checked apart in :func:`_check_tensors`.

    Source: shared/reference/oracle/README.md section 4 (required-tensor scan) and llama.cpp
    ``load_arch_tensors``; gemma3 from the real Gemma-3-270M tensor list.
    """
    w = lambda il, s: f"blk.{il}.{s}.weight"  # noqa: E731
    names = ["token_embd.weight", "output_norm.weight"]
    for il in range(spec.n_layer_all):
        if spec.arch == "gemma3":
            names += [w(il, s) for s in ("attn_norm", *_QWEN_ATTN, "post_attention_norm", "ffn_norm",
                                         "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm")]
        elif spec.arch == "qwen3moe":
            names += [w(il, s) for s in ("attn_norm", *_QWEN_ATTN, "ffn_norm", "ffn_gate_inp", "ffn_down_exps")]
        else:  # qwen35moe
            names += [w(il, s) for s in ("attn_norm", "post_attention_norm", "ffn_gate_inp", "ffn_down_exps", *_SHEXP)]
            if il >= spec.n_layer:
                names += [w(il, s) for s in (*_QWEN_ATTN, "nextn.eh_proj", "nextn.enorm", "nextn.hnorm")]
            elif spec.is_recurrent(il):
                names += [w(il, s) for s in _GDN] + [f"blk.{il}.ssm_dt.bias", f"blk.{il}.ssm_a"]
            else:
                names += [w(il, s) for s in _QWEN_ATTN]
    return names


def _expected_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Suffix -> expected GGUF ``ne`` for the tensors whose shape carries n_expert / widths."""
    D, E, F = spec.n_embd, spec.n_expert, spec.n_ff_exp
    shapes = {"ffn_gate_inp": (D, E), "ffn_gate_exps": (D, F, E), "ffn_up_exps": (D, F, E),
              "ffn_down_exps": (F, D, E), "ffn_gate_up_exps": (D, 2 * F, E),
              "attn_k": (D, spec.n_embd_k_gqa), "attn_v": (D, spec.n_embd_v_gqa)}
    if spec.arch == "qwen35moe":
        S = spec.n_ff_shexp
        shapes.update({"ffn_gate_shexp": (D, S), "ffn_up_shexp": (D, S), "ffn_down_shexp": (S, D)})
    if spec.arch == "gemma3":
        for s in ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_up_exps"):
            del shapes[s]
    return shapes


def _check_tensors(header: GGUFHeader, spec: ModelSpec) -> None:
    path, tensors = header.path, header.tensors
    missing = [n for n in required_tensors(spec) if n not in tensors]
    if spec.arch != "gemma3":
        for il in range(spec.n_layer_all):
            fused = f"blk.{il}.ffn_gate_up_exps.weight" in tensors
            split = [f"blk.{il}.ffn_{p}_exps.weight" for p in ("gate", "up")]
            if not fused:
                missing += [n for n in split if n not in tensors]
    if missing:
        more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
        raise ModelFormatError(f"{path}: missing required tensor(s) for {spec.arch}: {', '.join(missing[:5])}{more}")
    emb = tensors["token_embd.weight"]
    if emb.shape_gguf[0] != spec.n_embd:
        raise ModelFormatError(f"{path}: token_embd.weight ne0 {emb.shape_gguf[0]} != embedding_length {spec.n_embd}")
    shapes = _expected_shapes(spec)
    for il in range(spec.n_layer_all):
        for suffix, want in shapes.items():
            ti = tensors.get(f"blk.{il}.{suffix}.weight")
            if ti is None or tuple(ti.shape_gguf) == want:
                continue
            e_dim = 2 if suffix in EXPERT_SUFFIXES else 1 if suffix == "ffn_gate_inp" else None
            if e_dim is not None and (len(ti.shape_gguf) <= e_dim or ti.shape_gguf[e_dim] != spec.n_expert):
                raise ModelFormatError(f"{path}: tensor {ti.name!r} shape {list(ti.shape_gguf)}: expert count "
                                       f"(ne{e_dim}) disagrees with {spec.arch}.expert_count = {spec.n_expert}")
            raise ModelFormatError(f"{path}: tensor {ti.name!r} has shape {list(ti.shape_gguf)}, expected {list(want)}")


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
        """
        return self.header.tensor_data(name)

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
        """
        ti = self.tensor(name)
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
        architecture, a missing required key or tensor, a tensor shape that disagrees with the
        metadata (e.g. expert count), each naming the file.
    """
    header = read_header(path)
    emb = header.tensors.get("token_embd.weight")
    try:
        spec = ModelSpec.from_metadata(header.metadata, header.path,
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
