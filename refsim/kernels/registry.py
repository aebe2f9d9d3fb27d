"""The kernel registry: one :class:`QuantKernel` per supported ``gguf.GGMLQuantizationType``.

Family modules (``floats``, ``legacy``, ``k_quants``, ``mxfp4``) register their types on import,
as gguf-py's quant classes do with ``__init_subclass__``; a type is registered once. Tests iterate
:data:`KERNELS`, so adding a type needs no new test code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from refsim.errors import ConfigError

F16_TO_F32 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
"""(65536,) float32 table: IEEE half bits -> float32, made by NumPy's own conversion (so a kernel's
half decode is bit-identical to gguf-py's ``view(np.float16).astype(np.float32)``, NaN payloads too)."""


@dataclass(frozen=True)
class QuantKernel:
    """Facts about one registered type.

    Attributes
    ----------
    qtype : gguf.GGMLQuantizationType
    block_size : int
        Elements per block (``GGML_QUANT_SIZES``).
    type_size : int
        Bytes per block.
    family : str
        Module that decodes it.
    """

    qtype: GGMLQuantizationType
    block_size: int
    type_size: int
    family: str

    @property
    def kind(self) -> int:
        """The integer passed to the Numba loops (the on-disk ggml type id)."""
        return int(self.qtype)

    def row_bytes(self, n_cols: int) -> int:
        """Bytes of one row of ``n_cols`` elements (``n_cols`` a multiple of ``block_size``)."""
        return n_cols // self.block_size * self.type_size


KERNELS: dict[GGMLQuantizationType, QuantKernel] = {}


def register(qtype: GGMLQuantizationType, family: str) -> None:
    """Register ``qtype`` as decoded by module ``family`` (once)."""
    assert qtype not in KERNELS, f"{qtype.name} registered twice"
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    KERNELS[qtype] = QuantKernel(qtype, block_size, type_size, family)


def kernel_for(qtype, tensor: str | None = None) -> QuantKernel:
    """The registered kernel of ``qtype``.

    Parameters
    ----------
    qtype : gguf.GGMLQuantizationType or int
        ggml type id.
    tensor : str, optional
        What holds the data (``"model.gguf: tensor 'blk.0.attn_q.weight'"``), named in the error.

    Returns
    -------
    QuantKernel

    Raises
    ------
    ConfigError
        ``no kernel for ggml type NAME (id N)``, naming ``tensor`` and the supported types, when
        refsim cannot decode ``qtype`` (the file may still be inspected: byte accounting needs no
        kernel). Family modules must have registered first (``import refsim.kernels``).
    """
    try:
        qt = GGMLQuantizationType(int(qtype))
    except ValueError:
        qt = None
    k = KERNELS.get(qt)
    if k is None:
        name = f"{qt.name} (id {int(qt)})" if qt is not None else f"{qtype!r}"
        supported = ", ".join(t.name for t in KERNELS)
        where = f"{tensor}: " if tensor else ""
        raise ConfigError(f"{where}no kernel for ggml type {name} (supported: {supported})")
    return k
