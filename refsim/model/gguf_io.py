"""A bounded, validating GGUF header parser and the tensor table.

Why not ``gguf.GGUFReader`` for the header? It trusts every length it reads: an inflated array
length makes it loop for ~2**60 iterations, and a file without its data section (a *header-only*
file) fails its data mapping. This parser reads the same format (GGUF v2/v3, little-endian) with
``struct`` over an ``mmap``, checks every length against the bytes left in the file before it
trusts it, reads scalar arrays in bulk, and raises :class:`refsim.errors.ModelFormatError` naming
the file, the byte offset and what was expected. Tensor data are then exposed as ``numpy.memmap``
views, exactly as GGUFReader does (:meth:`GGUFHeader.tensor_data`), and are never copied.

Names (value types, quant types and their ``(block_size, type_size)``) come from ``gguf``.

Source: GGUF layout, gguf-py 0.19.0 ``gguf_reader.py`` / ``constants.py``; llama.cpp
``ggml/src/gguf.cpp`` (``GGML_MAX_DIMS`` = 4, default alignment 32).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType

from refsim.errors import ModelFormatError

SUPPORTED_VERSIONS = (2, 3)
"""GGUF versions refsim reads (v1 used 32-bit counts and is long obsolete)."""

MAX_DIMS = 4
"""``GGML_MAX_DIMS``: a tensor has 1..4 dimensions."""

# Scalar value types -> (struct format, numpy dtype). STRING and ARRAY are handled apart.
_SCALARS: dict[GGUFValueType, tuple[str, str]] = {
    GGUFValueType.UINT8: ("<B", "<u1"),
    GGUFValueType.INT8: ("<b", "<i1"),
    GGUFValueType.UINT16: ("<H", "<u2"),
    GGUFValueType.INT16: ("<h", "<i2"),
    GGUFValueType.UINT32: ("<I", "<u4"),
    GGUFValueType.INT32: ("<i", "<i4"),
    GGUFValueType.FLOAT32: ("<f", "<f4"),
    GGUFValueType.UINT64: ("<Q", "<u8"),
    GGUFValueType.INT64: ("<q", "<i8"),
    GGUFValueType.FLOAT64: ("<d", "<f8"),
    GGUFValueType.BOOL: ("<?", "|b1"),
}


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table.

    Attributes
    ----------
    name : str
        GGUF tensor name, e.g. ``blk.0.ffn_down_exps.weight``.
    ggml_type : gguf.GGMLQuantizationType
        Storage type.
    shape_gguf : tuple of int
        Dimensions in GGUF ``ne`` order (fastest first). NumPy order is ``shape_np``.
    data_offset : int
        Absolute file offset of the first byte (data-section start + tensor offset), bytes.
    n_bytes : int
        Size on disk: ``prod(ne[1:]) * ne0 / block_size * type_size`` bytes.
    """

    name: str
    ggml_type: GGMLQuantizationType
    shape_gguf: tuple[int, ...]
    data_offset: int
    n_bytes: int

    @property
    def shape_np(self) -> tuple[int, ...]:
        """Element shape in NumPy order (``ne`` reversed)."""
        return tuple(reversed(self.shape_gguf))

    @property
    def row_bytes(self) -> int:
        """Bytes of one row along ``ne0``: ``ne0 / block_size * type_size``."""
        block_size, type_size = GGML_QUANT_SIZES[self.ggml_type]
        return self.shape_gguf[0] // block_size * type_size

    @property
    def n_rows(self) -> int:
        """Rows of ``ne0`` elements: ``prod(ne[1:])``."""
        return int(np.prod(self.shape_gguf[1:], dtype=np.int64)) if len(self.shape_gguf) > 1 else 1


@dataclass(frozen=True)
class GGUFHeader:
    """Everything in a GGUF file except the weights.

    Attributes
    ----------
    path : str
        The file.
    version : int
        GGUF version (2 or 3).
    metadata : dict
        Key -> value: ``int``/``float``/``bool``/``str`` scalars, and lists or 1-D NumPy arrays for arrays.
    value_types : dict
        Key -> ``GGUFValueType`` of the value (``ARRAY`` for arrays).
    tensors : dict
        Name -> :class:`TensorInfo`, in file order.
    alignment : int
        ``general.alignment`` (default 32), bytes.
    data_start : int
        Absolute offset of the data section, bytes.
    file_size : int
        Size of the file, bytes.
    has_data : bool
        False for a header-only file (the data section is absent: the file ends at or before
        ``data_start`` while tensors claim bytes).
    """

    path: str
    version: int
    metadata: dict[str, Any]
    value_types: dict[str, GGUFValueType]
    tensors: dict[str, TensorInfo]
    alignment: int
    data_start: int
    file_size: int
    has_data: bool
    _mm: Any = field(default=None, repr=False, compare=False)

    def tensor_data(self, name: str) -> np.ndarray:
        """Raw bytes of one tensor as a read-only memory map.

        Parameters
        ----------
        name : str
            Tensor name.

        Returns
        -------
        data : (n_rows, row_bytes) uint8 ndarray
            Row-major view into the file (no copy); ``n_rows = prod(ne[1:])``.

        Raises
        ------
        ModelFormatError
            If the file is header-only (has no tensor data) or the tensor is unknown.
        """
        if not self.has_data:
            raise ModelFormatError(
                f"{self.path}: header-only GGUF (no tensor data): cannot read weights of {name!r}; "
                "byte accounting works, a forward pass or weight access does not")
        ti = self.tensors.get(name)
        if ti is None:
            raise ModelFormatError(f"{self.path}: no tensor named {name!r}")
        mm = np.memmap(self.path, dtype=np.uint8, mode="r", offset=ti.data_offset, shape=(ti.n_bytes,))
        return mm.reshape(ti.n_rows, ti.row_bytes)


class _Cursor:
    """Bounds-checked little-endian reads over a buffer; every failure names file and offset."""

    def __init__(self, buf, size: int, path: str):
        self.buf, self.size, self.path, self.pos = buf, size, path, 0

    def fail(self, what: str) -> ModelFormatError:
        return ModelFormatError(f"{self.path}: {what} (at byte {self.pos}, file size {self.size})")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"truncated GGUF: {what} needs {n} bytes, only {self.size - self.pos} left")

    def scalar(self, fmt: str, what: str):
        n = struct.calcsize(fmt)
        self.need(n, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return value

    def u32(self, what: str) -> int:
        return self.scalar("<I", what)

    def u64(self, what: str) -> int:
        return self.scalar("<Q", what)

    def string(self, what: str) -> str:
        n = self.u64(f"length of {what}")
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8") from None

    def value_type(self, what: str) -> GGUFValueType:
        raw = self.u32(f"value type of {what}")
        try:
            return GGUFValueType(raw)
        except ValueError:
            raise self.fail(f"unknown GGUF value type {raw} for {what}") from None

    def value(self, vtype: GGUFValueType, what: str, depth: int = 0) -> Any:
        if vtype in _SCALARS:
            fmt, _ = _SCALARS[vtype]
            return self.scalar(fmt, what)
        if vtype == GGUFValueType.STRING:
            return self.string(what)
        if vtype != GGUFValueType.ARRAY:  # pragma: no cover - enum is closed above
            raise self.fail(f"unhandled value type {vtype!r} for {what}")
        if depth > 2:
            raise self.fail(f"arrays nested too deep in {what}")
        etype = self.value_type(f"elements of {what}")
        count = self.u64(f"element count of {what}")
        if etype in _SCALARS:
            fmt, dt = _SCALARS[etype]
            n = count * struct.calcsize(fmt)
            self.need(n, f"{count} elements of {what}")
            arr = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.pos).copy()
            self.pos += n
            return arr
        # strings need >= 8 bytes each, arrays >= 12: reject impossible counts before looping
        min_size = 8 if etype == GGUFValueType.STRING else 12
        self.need(count * min_size, f"{count} elements of {what}")
        return [self.value(etype, f"{what}[{i}]", depth + 1) for i in range(count)]


def read_header(path: str | os.PathLike) -> GGUFHeader:
    """Parse and validate a GGUF header (metadata and tensor infos); never reads weights.

    Parameters
    ----------
    path : str or os.PathLike
        GGUF file.

    Returns
    -------
    GGUFHeader

    Raises
    ------
    ModelFormatError
        Missing/unreadable file, wrong magic, unsupported version or byte order, truncation
        anywhere in the header, a bad value type, a duplicate key or tensor name, a bad
        ``general.alignment``, a tensor with 0 or > 4 dims, an unknown ggml type, a row length not
        a multiple of the block size, a misaligned offset, overlapping tensors, or tensor data
        outside the file (unless the whole data section is absent: header-only file).

    Notes
    -----
    Layout (gguf-py ``gguf_reader.py``): magic ``GGUF`` u32, version u32, tensor_count u64,
    kv_count u64; kv_count x (key string, value type u32, value); tensor_count x (name, n_dims
    u32, ne u64 x n_dims, type u32, offset u64); padding to ``general.alignment``; data.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise ModelFormatError(f"{path}: empty file, not a GGUF")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise ModelFormatError(f"{path}: cannot open: {exc.strerror or exc}") from None
    try:
        return _parse(mm, size, path)
    finally:
        mm.close()


def _parse(mm, size: int, path: str) -> GGUFHeader:
    cur = _Cursor(mm, size, path)
    magic = cur.scalar("<I", "magic")
    if magic != GGUF_MAGIC:
        raise ModelFormatError(f"{path}: not a GGUF file (magic {magic:#010x}, expected {GGUF_MAGIC:#010x} 'GGUF')")
    version = cur.u32("version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and (version >> 16) in SUPPORTED_VERSIONS:
            raise ModelFormatError(f"{path}: big-endian GGUF is not supported")
        raise ModelFormatError(f"{path}: unsupported GGUF version {version} (supported: 2, 3)")
    n_tensors = cur.u64("tensor count")
    n_kv = cur.u64("kv count")
    # each kv needs >= 8 (key len) + 4 (type) + 1 bytes; each tensor info >= 8 + 4 + 8 + 4 + 8
    if n_kv * 13 > size or n_tensors * 32 > size:
        raise ModelFormatError(f"{path}: header claims {n_kv} keys and {n_tensors} tensors, "
                               f"impossible in a file of {size} bytes")
    metadata: dict[str, Any] = {}
    vtypes: dict[str, GGUFValueType] = {}
    for i in range(n_kv):
        key = cur.string(f"key #{i}")
        vtype = cur.value_type(f"key {key!r}")
        value = cur.value(vtype, f"value of {key!r}")
        if key in metadata:
            raise cur.fail(f"duplicate metadata key {key!r}")
        metadata[key], vtypes[key] = value, vtype
    alignment = GGUF_DEFAULT_ALIGNMENT
    if "general.alignment" in metadata:
        alignment = metadata["general.alignment"]
        if vtypes["general.alignment"] != GGUFValueType.UINT32 or alignment <= 0 or alignment & (alignment - 1):
            raise ModelFormatError(f"{path}: general.alignment must be a u32 power of two, got {alignment!r}")
    raw_infos = []
    for i in range(n_tensors):
        name = cur.string(f"name of tensor #{i}")
        n_dims = cur.u32(f"n_dims of {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise cur.fail(f"tensor {name!r} has {n_dims} dims (expected 1..{MAX_DIMS})")
        dims = tuple(cur.u64(f"dim {d} of {name!r}") for d in range(n_dims))
        raw_type = cur.u32(f"type of {name!r}")
        offset = cur.u64(f"offset of {name!r}")
        raw_infos.append((name, dims, raw_type, offset))
    data_start = -(-cur.pos // alignment) * alignment
    has_data = not (size <= data_start and n_tensors > 0)

    tensors: dict[str, TensorInfo] = {}
    for name, dims, raw_type, offset in raw_infos:
        if name in tensors:
            raise ModelFormatError(f"{path}: duplicate tensor name {name!r}")
        try:
            qtype = GGMLQuantizationType(raw_type)
            block_size, type_size = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise ModelFormatError(f"{path}: tensor {name!r} has unknown ggml type {raw_type}") from None
        if any(d == 0 for d in dims):
            raise ModelFormatError(f"{path}: tensor {name!r} has a zero dimension {list(dims)}")
        if dims[0] % block_size:
            raise ModelFormatError(f"{path}: tensor {name!r} row length ne0={dims[0]} is not a multiple of "
                                   f"{qtype.name} block size {block_size}")
        n_el = 1
        for d in dims:
            n_el *= d
        n_bytes = n_el // block_size * type_size
        if offset % alignment:
            raise ModelFormatError(f"{path}: tensor {name!r} offset {offset} is not aligned to {alignment}")
        start = data_start + offset
        if has_data and start + n_bytes > size:
            raise ModelFormatError(f"{path}: tensor {name!r} data [{start}, {start + n_bytes}) lies outside "
                                   f"the file ({size} bytes)")
        tensors[name] = TensorInfo(name, qtype, dims, start, n_bytes)
    by_offset = sorted(tensors.values(), key=lambda t: t.data_offset)
    for a, b in zip(by_offset, by_offset[1:]):
        if a.data_offset + a.n_bytes > b.data_offset:
            raise ModelFormatError(f"{path}: tensors {a.name!r} and {b.name!r} overlap in the data section")
    return GGUFHeader(path, version, metadata, vtypes, tensors, alignment, data_start, size, has_data)
