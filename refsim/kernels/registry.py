"""The kernel registry: every per-type fact refsim's kernels use, one :class:`QuantKernel` per supported
``gguf.GGMLQuantizationType``, written once in :data:`_TABLE`.

This is refsim's ``type_traits``: ggml keeps a type's block size, type size and decoder in ggml/src/ggml.c
``type_traits`` and its CPU product (``vec_dot``, ``vec_dot_type``) in ggml/src/ggml-cpu/ggml-cpu.c
``type_traits_cpu``; gguf-py keeps ``(block_size, type_size)`` in ``constants.py`` ``GGML_QUANT_SIZES`` and a
class per type in ``quants.py`` (``_type_traits``). Here one row of :data:`_TABLE` names, for one type, the
decoder of its family module, the type ggml quantizes its activations to (``vec_dot_type``), which one-row
integer product multiplies it in the ``ggml`` numerics mode, and whether a four-row walker exists in each mode;
block and type size come from ``GGML_QUANT_SIZES``. Tests iterate :data:`KERNELS`, so a new type needs no new
test code: adding one is its decoder in a family module and a row here (plus, for the fast paths, its one-row
product and walkers, which then check themselves against this table).

The Numba kernels take a type as its ggml id (an int) and compare against plain int constants; every such
constant and per-type int table is built here, at import, from the table (section "For the Numba dispatch"),
so no other module writes a type id or a list of types. Numba freezes these values into the compiled code;
:mod:`refsim.jitcache` keys Numba's cache by a digest of refsim's sources, so an edit of this table is a new
cache folder and every kernel that froze one is compiled again (nothing here depends on anything but this
file and ``gguf``'s on-disk constants).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q

from refsim.errors import ConfigError
from refsim.kernels.floats import decode_row_bf16, decode_row_f16, decode_row_f32
from refsim.kernels.iq4 import decode_row_iq4_nl, decode_row_iq4_xs
from refsim.kernels.iq_grid import (decode_row_iq1_m, decode_row_iq1_s, decode_row_iq2_s, decode_row_iq2_xs,
                                    decode_row_iq2_xxs, decode_row_iq3_s, decode_row_iq3_xxs)
from refsim.kernels.k_quants import decode_row_q2_k, decode_row_q3_k, decode_row_q4_k, decode_row_q5_k, decode_row_q6_k
from refsim.kernels.legacy import decode_row_q4_0, decode_row_q4_1, decode_row_q5_0, decode_row_q5_1, decode_row_q8_0
from refsim.kernels.mxfp4 import KVALUES, decode_row_mxfp4
from refsim.kernels.ternary import decode_row_tq1_0, decode_row_tq2_0

F16_TO_F32 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
"""(65536,) float32 table: IEEE half bits -> float32, made by NumPy's own conversion (so a kernel's
half decode is bit-identical to gguf-py's ``view(np.float16).astype(np.float32)``, NaN payloads too)."""

QDOT = "refsim.kernels.qdot"
""":attr:`QuantKernel.dot` of the types :func:`refsim.kernels.qdot.qdot_row` multiplies (block dots by the LLVM
primitives of :mod:`refsim.kernels.simd`; Q8_0 / Q8_K activations with int32 block sums)."""
QDOT_EXT = "refsim.kernels.qdot_ext"
""":attr:`QuantKernel.dot` of the further types of issue 18, multiplied by :func:`refsim.kernels.qdot_ext.ext_row`
(plain integer loops in the order of ggml's generic ``vec_dot``; Q8_1's float block sums for Q4_1 / Q5_1)."""

_LUT = {"f16": F16_TO_F32, "e2m1": KVALUES}


@dataclass(frozen=True)
class QuantKernel:
    """Every fact refsim's kernels use about one ggml type.

    Attributes
    ----------
    qtype : gguf.GGMLQuantizationType
    block_size : int
        Elements per block (``GGML_QUANT_SIZES``; 1 for F32/F16/BF16).
    type_size : int
        Bytes per block (``GGML_QUANT_SIZES``).
    family : str
        Module that decodes it (``refsim.kernels.k_quants`` ...), the decoder's module.
    decoder : numba dispatcher
        The family's ``decode_row_<type>(row, n_cols, [lut,] out)``: ``(row_bytes,)`` uint8 -> ``(n_cols,)``
        float32, bit-exact against ``gguf.quants.dequantize``; :mod:`refsim.kernels.loops` dispatches to it.
    decoder_lut : {'f16', 'e2m1'} or None
        The table the decoder takes before ``out``: :data:`F16_TO_F32` (half scales), MXFP4's e2m1 values
        (:data:`refsim.kernels.mxfp4.KVALUES`), or none (F32, BF16).
    vec_dot_type : gguf.GGMLQuantizationType
        What ggml's CPU backend converts the activation to before a product with this weight
        (ggml/src/ggml-cpu/ggml-cpu.c ``type_traits_cpu[type].vec_dot_type``): F32, F16, BF16, Q8_0, Q8_1 or
        Q8_K. The ``ggml`` numerics mode does the same (:mod:`refsim.forward.actq`).
    dot : str or None
        Module of the one-row integer product of the ``ggml`` mode (:data:`QDOT` or :data:`QDOT_EXT`); None
        when that mode multiplies the activation's round trip by the decoded rows instead (the float types,
        and IQ1_M, which has no integer product yet).
    rows4 : bool
        Contiguous rows go four at a time in the ``ggml`` mode (:mod:`refsim.kernels.rows4` for :data:`QDOT`
        types, :mod:`refsim.kernels.simd_ext` for :data:`QDOT_EXT` ones), bit for bit the one-row product.
    exact4 : bool
        Contiguous rows go four at a time in the ``exact`` mode (:mod:`refsim.kernels.simd_exact`), bit for bit
        the one-row loop of :func:`refsim.forward.layers.linear`.
    """

    qtype: Q
    block_size: int
    type_size: int
    family: str
    decoder: Callable
    decoder_lut: str | None
    vec_dot_type: Q
    dot: str | None
    rows4: bool
    exact4: bool

    @property
    def kind(self) -> int:
        """The integer passed to the Numba loops (the on-disk ggml type id)."""
        return int(self.qtype)

    @property
    def act_block(self) -> int:
        """Elements per block of :attr:`vec_dot_type` (32 for Q8_0 / Q8_1, 256 for Q8_K, 1 for the floats)."""
        return GGML_QUANT_SIZES[self.vec_dot_type][0]

    def row_bytes(self, n_cols: int) -> int:
        """Bytes of one row of ``n_cols`` elements (``n_cols`` a multiple of ``block_size``)."""
        return n_cols // self.block_size * self.type_size

    def decode_row(self, row: np.ndarray, n_cols: int) -> np.ndarray:
        """``(n_cols,)`` float32: the row's ``row_bytes(n_cols)`` uint8 bytes decoded by :attr:`decoder`."""
        out = np.empty(n_cols, dtype=np.float32)
        if self.decoder_lut is None:
            self.decoder(row, n_cols, out)
        else:
            self.decoder(row, n_cols, _LUT[self.decoder_lut], out)
        return out


_TABLE = (
    # qtype      decoder                          lut     vec_dot  dot       rows4  exact4
    (Q.F32,      decode_row_f32,                 None,   Q.F32,   None,     False, True),
    (Q.F16,      decode_row_f16,                 "f16",  Q.F16,   None,     False, False),
    (Q.BF16,     decode_row_bf16,                None,   Q.BF16,  None,     False, False),
    (Q.Q4_0,     decode_row_q4_0,                "f16",  Q.Q8_0,  QDOT,     True,  True),
    (Q.Q4_1,     decode_row_q4_1,                "f16",  Q.Q8_1,  QDOT_EXT, True,  False),
    (Q.Q5_0,     decode_row_q5_0,                "f16",  Q.Q8_0,  QDOT,     True,  True),
    (Q.Q5_1,     decode_row_q5_1,                "f16",  Q.Q8_1,  QDOT_EXT, True,  False),
    (Q.Q8_0,     decode_row_q8_0,                "f16",  Q.Q8_0,  QDOT,     True,  True),
    (Q.IQ4_NL,   decode_row_iq4_nl,              "f16",  Q.Q8_0,  QDOT_EXT, True,  False),
    (Q.IQ4_XS,   decode_row_iq4_xs,              "f16",  Q.Q8_K,  QDOT_EXT, True,  False),
    (Q.IQ1_S,    decode_row_iq1_s,               "f16",  Q.Q8_K,  QDOT_EXT, False, False),
    (Q.IQ1_M,    decode_row_iq1_m,               "f16",  Q.Q8_K,  None,     False, False),
    (Q.IQ2_XXS,  decode_row_iq2_xxs,             "f16",  Q.Q8_K,  QDOT_EXT, False, False),
    (Q.IQ2_XS,   decode_row_iq2_xs,              "f16",  Q.Q8_K,  QDOT_EXT, False, False),
    (Q.IQ2_S,    decode_row_iq2_s,               "f16",  Q.Q8_K,  QDOT_EXT, False, False),
    (Q.IQ3_XXS,  decode_row_iq3_xxs,             "f16",  Q.Q8_K,  QDOT_EXT, False, False),
    (Q.IQ3_S,    decode_row_iq3_s,               "f16",  Q.Q8_K,  QDOT_EXT, False, False),
    (Q.Q2_K,     decode_row_q2_k,                "f16",  Q.Q8_K,  QDOT_EXT, True,  False),
    (Q.Q3_K,     decode_row_q3_k,                "f16",  Q.Q8_K,  QDOT_EXT, True,  False),
    (Q.Q4_K,     decode_row_q4_k,                "f16",  Q.Q8_K,  QDOT,     True,  True),
    (Q.Q5_K,     decode_row_q5_k,                "f16",  Q.Q8_K,  QDOT,     True,  True),
    (Q.Q6_K,     decode_row_q6_k,                "f16",  Q.Q8_K,  QDOT,     True,  True),
    (Q.MXFP4,    decode_row_mxfp4,               "e2m1", Q.Q8_0,  QDOT,     True,  True),
    (Q.TQ1_0,    decode_row_tq1_0,               "f16",  Q.Q8_K,  QDOT_EXT, True,  False),
    (Q.TQ2_0,    decode_row_tq2_0,               "f16",  Q.Q8_K,  QDOT_EXT, True,  False),
)
"""One row per supported type: (qtype, decoder, decoder_lut, vec_dot_type, dot, rows4, exact4), the
:class:`QuantKernel` fields in that order (block and type size from ``GGML_QUANT_SIZES``). The order is
:data:`KERNELS`'s, the order error messages list the supported types in."""


def _build(table) -> dict[Q, QuantKernel]:
    kernels: dict[Q, QuantKernel] = {}
    for qtype, decoder, lut, vec_dot_type, dot, rows4, exact4 in table:
        assert qtype not in kernels, f"{qtype.name} registered twice"
        block_size, type_size = GGML_QUANT_SIZES[qtype]
        family = getattr(decoder, "py_func", decoder).__module__      # (a plain function under NUMBA_DISABLE_JIT)
        kernels[qtype] = QuantKernel(qtype, block_size, type_size, family, decoder, lut, vec_dot_type, dot, rows4,
                                     exact4)
    return kernels


KERNELS: dict[Q, QuantKernel] = _build(_TABLE)
"""Every supported type -> its :class:`QuantKernel`, in :data:`_TABLE`'s order."""


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
        kernel).
    """
    try:
        qt = Q(int(qtype))
    except ValueError:
        qt = None
    k = KERNELS.get(qt)
    if k is None:
        name = f"{qt.name} (id {int(qt)})" if qt is not None else f"{qtype!r}"
        supported = ", ".join(t.name for t in KERNELS)
        where = f"{tensor}: " if tensor else ""
        raise ConfigError(f"{where}no kernel for ggml type {name} (supported: {supported})")
    return k


def kinds(**facts) -> tuple[int, ...]:
    """The ggml ids of the registered types whose :class:`QuantKernel` fields equal ``facts`` (e.g.
    ``kinds(dot=QDOT, rows4=True)``), in :data:`KERNELS`'s order."""
    return tuple(k.kind for k in KERNELS.values() if all(getattr(k, f) == v for f, v in facts.items()))


def _by_id(values: dict[int, int]) -> np.ndarray:
    out = np.zeros(max(int(t) for t in KERNELS) + 1, dtype=np.int64)
    for kind, v in values.items():
        out[kind] = v
    return out


# --- For the Numba dispatch: the ggml ids as plain ints, and the per-type int tables ---------------------
# (Numba folds a module-level int into the compiled code; the kernels compare ``kind`` against these.)

F32, F16, BF16 = int(Q.F32), int(Q.F16), int(Q.BF16)
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = int(Q.Q4_0), int(Q.Q4_1), int(Q.Q5_0), int(Q.Q5_1), int(Q.Q8_0)
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = int(Q.Q2_K), int(Q.Q3_K), int(Q.Q4_K), int(Q.Q5_K), int(Q.Q6_K)
IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4 = int(Q.IQ4_NL), int(Q.IQ4_XS), int(Q.TQ1_0), int(Q.TQ2_0), int(Q.MXFP4)
IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS = int(Q.IQ1_S), int(Q.IQ1_M), int(Q.IQ2_XXS), int(Q.IQ2_XS)
IQ2_S, IQ3_XXS, IQ3_S = int(Q.IQ2_S), int(Q.IQ3_XXS), int(Q.IQ3_S)

QDOT_TYPES = kinds(dot=QDOT, vec_dot_type=Q.Q8_0) + kinds(dot=QDOT, vec_dot_type=Q.Q8_K)
"""Types :func:`refsim.kernels.qdot.qdot_row` multiplies (Q8_0 activations first, then Q8_K)."""
EXT_TYPES = (kinds(dot=QDOT_EXT, vec_dot_type=Q.Q8_1) + kinds(dot=QDOT_EXT, vec_dot_type=Q.Q8_0)
             + kinds(dot=QDOT_EXT, vec_dot_type=Q.Q8_K))
"""Types :func:`refsim.kernels.qdot_ext.ext_row` multiplies (Q8_1 activations first, then Q8_0, Q8_K)."""
QDOT_ALL = QDOT_TYPES + EXT_TYPES
"""Every type with an integer product in the ``ggml`` mode."""
ROWS4_TYPES = kinds(rows4=True)
"""Types whose contiguous rows go four at a time in the ``ggml`` mode (:mod:`refsim.kernels.rows4`,
:mod:`refsim.kernels.simd_ext`)."""
ROWS4_EXT_TYPES = kinds(dot=QDOT_EXT, rows4=True)
"""The :data:`EXT_TYPES` among :data:`ROWS4_TYPES` (:mod:`refsim.kernels.simd_ext`)."""
EXACT4_TYPES = kinds(exact4=True)
"""Types whose contiguous rows go four at a time in the ``exact`` mode (:mod:`refsim.kernels.simd_exact`)."""

BLOCK_SIZE = _by_id({k.kind: k.block_size for k in KERNELS.values()})
"""(max id + 1,) int64: elements per block by ggml id (0 for an id not registered)."""
TYPE_SIZE = _by_id({k.kind: k.type_size for k in KERNELS.values()})
"""(max id + 1,) int64: bytes per block by ggml id (0 for an id not registered)."""
EXACT4_BLOCK = _by_id({k.kind: max(k.block_size, 32) for k in KERNELS.values() if k.exact4})
"""(max id + 1,) int64: elements per block step of :func:`refsim.kernels.simd_exact.exact_rows4` by ggml id: the
type's block, or 32 for F32 (whose walker takes 32 floats per step); 0 where there is no walker."""


__all__ = ["F16_TO_F32", "KERNELS", "QDOT", "QDOT_EXT", "QuantKernel", "kernel_for", "kinds"]
