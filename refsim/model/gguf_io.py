"""A bounded, validating GGUF header parser and the tensor table.

Why not ``gguf.GGUFReader`` for the header? It trusts every length it reads: an inflated array
length makes it loop for ~2**60 iterations, and a file without its data section (a *header-only*
file) fails its data mapping. This parser reads the same format (GGUF v2/v3, little-endian) with
``struct`` over an ``mmap``, checks every length against the bytes left in the file before it
trusts it, reads scalar arrays in bulk, and raises :class:`refsim.errors.ModelFormatError` naming
the file, the byte offset and what was expected. Tensor data are then exposed as ``numpy.memmap``
views, exactly as GGUFReader does (:meth:`GGUFHeader.tensor_data`), and are never copied.

Names (value types, quant types and their ``(block_size, type_size)``) come from ``gguf``.

The loader rules are llama.cpp's ``ggml/src/gguf.cpp`` ``gguf_init_from_reader`` (ggml-org/llama.cpp
at 067d44f6): a version whose low 16 bits are 0 is a file of the other byte order; keys are
non-empty and unique; an array's elements are never arrays; a tensor name is < 64 bytes
(``GGML_MAX_NAME``); every ``ne`` and their product fit an int64; the type's block divides
``ne0``; and each tensor's offset is exactly the running sum of the previous tensors' sizes, each
padded to ``general.alignment`` (its "tensor '%s' has offset %lu, expected %zu" check).
:class:`KeyReader` reads metadata values with the exact types llama.cpp's
``src/llama-model-loader.cpp`` ``GGUFMeta::GKV::get_kv`` demands ("key %s has wrong type %s but
expected type %s").

Source: GGUF layout, gguf-py 0.19.0 ``gguf_reader.py`` / ``constants.py``; llama.cpp
``ggml/src/gguf.cpp`` (``GGML_MAX_DIMS`` = 4, default alignment 32).
"""

from __future__ import annotations

import mmap
import os
import stat
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

MAX_NAME = 64
"""``GGML_MAX_NAME``: a tensor name is at most 63 bytes (gguf.cpp refuses longer)."""

INT64_MAX = (1 << 63) - 1
"""``ne`` values and element counts are int64 in ggml (gguf.cpp refuses larger)."""

TYPE_NAMES: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8", GGUFValueType.UINT16: "u16",
    GGUFValueType.INT16: "i16", GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32",
    GGUFValueType.FLOAT32: "f32", GGUFValueType.BOOL: "bool", GGUFValueType.STRING: "str",
    GGUFValueType.ARRAY: "arr", GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64",
    GGUFValueType.FLOAT64: "f64"}
"""The type names llama.cpp prints (gguf.cpp ``GGUF_TYPE_NAME``)."""

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
    GGUFValueType.BOOL: ("<B", "|u1"),   # read as a byte, then ``!= 0`` (gguf.cpp ``read(bool &)``)
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
    array_types : dict
        Array key -> ``GGUFValueType`` of its elements.
    tensors : dict
        Name -> :class:`TensorInfo`, in file order.
    alignment : int
        ``general.alignment`` (default 32), bytes.
    data_start : int
        Absolute offset of the data section, bytes.
    file_size : int
        Size of the file, bytes.
    has_data : bool
        False for a header-only file: the file ends exactly where the tensor infos end (or at
        ``data_start``, after the padding) while tensors claim bytes.
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
    array_types: dict[str, GGUFValueType] = field(default_factory=dict)
    _mm: Any = field(default=None, repr=False, compare=False)

    @property
    def types(self) -> dict[str, tuple[GGUFValueType, GGUFValueType | None]]:
        """Key -> ``(value type, element type or None)``, as :class:`KeyReader` takes them."""
        return {k: (t, self.array_types.get(k)) for k, t in self.value_types.items()}

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

    def value(self, vtype: GGUFValueType, what: str) -> tuple[Any, GGUFValueType | None]:
        """One value and, for an array, its element type."""
        if vtype in _SCALARS:
            fmt, _ = _SCALARS[vtype]
            v = self.scalar(fmt, what)
            return (v != 0 if vtype == GGUFValueType.BOOL else v), None
        if vtype == GGUFValueType.STRING:
            return self.string(what), None
        etype = self.value_type(f"elements of {what}")
        if etype == GGUFValueType.ARRAY:   # gguf.cpp: "key '%s' has invalid GGUF type" for arrays of arrays
            raise self.fail(f"{what} is an array of arrays (llama.cpp's gguf.cpp refuses nested arrays)")
        count = self.u64(f"element count of {what}")
        if etype in _SCALARS:
            fmt, dt = _SCALARS[etype]
            n = count * struct.calcsize(fmt)
            self.need(n, f"{count} elements of {what}")
            arr = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.pos).copy()
            self.pos += n
            return (arr != 0 if etype == GGUFValueType.BOOL else arr), etype
        # strings need >= 8 bytes each: reject impossible counts before looping
        self.need(count * 8, f"{count} elements of {what}")
        return [self.string(f"{what}[{i}]") for i in range(count)], etype


_WARNED: set[str] = set()


def _warn_once(text: str) -> None:
    """A warning about a file, once per process, through the ``refsim.model`` logger (library
    code never prints): every command that reads the file -- ``inspect``, ``memory``, ``run`` --
    shows it on stderr as ``refsim CMD: warning: ...`` (the CLI's handler); a library caller sees
    it through ``logging`` (issue 26 C13: ``inspect`` printed it itself, as ``refsim: warning``)."""
    import logging
    if text not in _WARNED:
        _WARNED.add(text)
        logging.getLogger("refsim.model").warning(text)


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
        Missing/unreadable file, wrong magic, unsupported version, a big-endian file,
        truncation anywhere in the header or inside the padding before the data section, a bad
        value type, an empty or duplicate key, an array of arrays, a duplicate or over-long
        tensor name, a bad ``general.alignment``, a tensor with 0 or > 4 dims or an ``ne``
        beyond int64, an unknown ggml type, a row length not a multiple of the block size, an
        offset that is not the running padded sum llama.cpp requires, or tensor data outside
        the file (unless the whole data section is absent: header-only file).

    Notes
    -----
    Layout (gguf-py ``gguf_reader.py``): magic ``GGUF`` u32, version u32, tensor_count u64,
    kv_count u64; kv_count x (key string, value type u32, value); tensor_count x (name, n_dims
    u32, ne u64 x n_dims, type u32, offset u64); padding to ``general.alignment``; data.
    """
    path = os.fspath(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):     # checked before open: a FIFO would block
            raise ModelFormatError(f"{path}: not a regular file (a FIFO, pipe, device or folder); "
                                   f"expected a GGUF file, which is read by mapping it")
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
        if version and version & 0xFFFF == 0:   # gguf.cpp: the low 16 bits of a swapped version are 0
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            raise ModelFormatError(f"{path}: big-endian GGUF (version field {version:#010x} is version {swapped} "
                                   f"byte-swapped); refsim, like llama.cpp on a little-endian host, reads "
                                   f"little-endian GGUF only")
        raise ModelFormatError(f"{path}: unsupported GGUF version {version} (supported: 2, 3)")
    n_tensors = cur.u64("tensor count")
    n_kv = cur.u64("kv count")
    # each kv needs >= 8 (key len) + 4 (type) + 1 bytes; each tensor info >= 8 + 4 + 8 + 4 + 8
    if n_kv * 13 > size or n_tensors * 32 > size:
        raise ModelFormatError(f"{path}: header claims {n_kv} keys and {n_tensors} tensors, "
                               f"impossible in a file of {size} bytes")
    metadata: dict[str, Any] = {}
    vtypes: dict[str, GGUFValueType] = {}
    atypes: dict[str, GGUFValueType] = {}
    for i in range(n_kv):
        key = cur.string(f"key #{i}")
        if not key:
            raise cur.fail(f"key #{i} is empty")
        if key in metadata:
            raise cur.fail(f"duplicate metadata key {key!r}")
        vtype = cur.value_type(f"key {key!r}")
        value, etype = cur.value(vtype, f"value of {key!r}")
        metadata[key], vtypes[key] = value, vtype
        if etype is not None:
            atypes[key] = etype
    alignment = GGUF_DEFAULT_ALIGNMENT
    if "general.alignment" in metadata:
        alignment = metadata["general.alignment"]
        if vtypes["general.alignment"] != GGUFValueType.UINT32 or alignment <= 0 or alignment & (alignment - 1):
            raise ModelFormatError(f"{path}: general.alignment must be a u32 power of two, got {alignment!r}")
    raw_infos = []
    for i in range(n_tensors):
        name_at = cur.pos
        name = cur.string(f"name of tensor #{i}")
        if len(name.encode("utf-8")) >= MAX_NAME:
            raise ModelFormatError(f"{path}: tensor #{i} name {name[:80]!r} (at byte {name_at}) is "
                                   f"{len(name.encode('utf-8'))} bytes, expected < {MAX_NAME} (GGML_MAX_NAME)")
        n_dims = cur.u32(f"n_dims of {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise cur.fail(f"tensor {name!r} has {n_dims} dims (expected 1..{MAX_DIMS})")
        dims = tuple(cur.u64(f"dim {d} of {name!r}") for d in range(n_dims))
        raw_type = cur.u32(f"type of {name!r}")
        offset_at = cur.pos
        offset = cur.u64(f"offset of {name!r}")
        raw_infos.append((name, dims, raw_type, offset, offset_at))
    infos_end = cur.pos
    data_start = -(-infos_end // alignment) * alignment
    header_only = n_tensors > 0 and size in (infos_end, data_start)
    if n_tensors > 0 and infos_end < size < data_start:
        raise ModelFormatError(f"{path}: truncated GGUF: the file ends at byte {size}, inside the padding "
                               f"before the data section at byte {data_start} (general.alignment {alignment})")

    tensors: dict[str, TensorInfo] = {}
    expected = 0   # the running padded sum: gguf.cpp "tensor '%s' has offset %lu, expected %zu"
    for name, dims, raw_type, offset, offset_at in raw_infos:
        if name in tensors:
            raise ModelFormatError(f"{path}: duplicate tensor name {name!r}")
        try:
            qtype = GGMLQuantizationType(raw_type)
            block_size, type_size = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise ModelFormatError(f"{path}: tensor {name!r} has unknown ggml type {raw_type}") from None
        if any(d == 0 for d in dims):
            raise ModelFormatError(f"{path}: tensor {name!r} has a zero dimension {list(dims)}")
        n_el = 1
        for d in dims:
            n_el *= d
        if max(dims) > INT64_MAX or n_el > INT64_MAX:
            raise ModelFormatError(f"{path}: tensor {name!r} shape {list(dims)} has more than 2^63-1 elements "
                                   f"(ggml counts them in int64)")
        if dims[0] % block_size:
            raise ModelFormatError(f"{path}: tensor {name!r} row length ne0={dims[0]} is not a multiple of "
                                   f"{qtype.name} block size {block_size}")
        n_bytes = n_el // block_size * type_size
        if offset != expected:
            raise ModelFormatError(f"{path}: tensor {name!r} has offset {offset} (u64 at byte {offset_at}), "
                                   f"expected {expected}: each offset must be the sum of the previous tensors' "
                                   f"sizes padded to general.alignment {alignment}, as llama.cpp's loader requires")
        expected += -(-n_bytes // alignment) * alignment
        start = data_start + offset
        if not header_only and start + n_bytes > size:
            raise ModelFormatError(f"{path}: tensor {name!r} data [{start}, {start + n_bytes}) lies outside "
                                   f"the file ({size} bytes)")
        tensors[name] = TensorInfo(name, qtype, dims, start, n_bytes)
    described = data_start + expected          # the padded data section the tensor table describes
    if tensors and not header_only and size > described:
        # llama.cpp ignores bytes past the last tensor; but a tensor whose type or shape was changed
        # to a smaller one leaves exactly such bytes, so they are named (once per process)
        _warn_once(f"{path}: {size - described} bytes after byte {described} (the end of the last "
                   f"tensor's padded data) are not described by the tensor table; a tensor's type "
                   f"or shape may have been changed")
    return GGUFHeader(path, version, metadata, vtypes, tensors, alignment, data_start, size, not header_only, atypes)


_NP_TYPES = {np.dtype(dt): vt for vt, (_, dt) in _SCALARS.items() if vt != GGUFValueType.BOOL}
_NP_TYPES[np.dtype(bool)] = GGUFValueType.BOOL


def _infer_type(value: Any) -> tuple[GGUFValueType, GGUFValueType | None]:
    """GGUF type of a plain Python/NumPy value (metadata built in memory, not read from a file).

    ``bool`` -> BOOL, ``int`` -> UINT32 when it fits (else INT64), ``float`` -> FLOAT32, ``str`` ->
    STRING, an ndarray -> ARRAY of its dtype, a list -> ARRAY of STRING (all str) or of the inferred
    type of its first element (as gguf-py's writer picks them).
    """
    if isinstance(value, (bool, np.bool_)):
        return GGUFValueType.BOOL, None
    if isinstance(value, (int, np.integer)):
        return (GGUFValueType.UINT32 if 0 <= int(value) < 1 << 32 else GGUFValueType.INT64), None
    if isinstance(value, (float, np.floating)):
        return GGUFValueType.FLOAT32, None
    if isinstance(value, str):
        return GGUFValueType.STRING, None
    if isinstance(value, np.ndarray):
        return GGUFValueType.ARRAY, _NP_TYPES.get(value.dtype)
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value):
            return GGUFValueType.ARRAY, GGUFValueType.STRING
        first = _infer_type(value[0])[0]
        return GGUFValueType.ARRAY, (GGUFValueType.INT32 if first == GGUFValueType.UINT32 else first)
    return GGUFValueType.ARRAY, None


def type_name(vtype: GGUFValueType, etype: GGUFValueType | None = None) -> str:
    """``u32``, ``f32``, ``arr[i32]``, ...: llama.cpp's names (gguf.cpp ``GGUF_TYPE_NAME``)."""
    if vtype == GGUFValueType.ARRAY:
        return f"arr[{TYPE_NAMES.get(etype, '?')}]"
    return TYPE_NAMES.get(vtype, str(vtype))


_MISSING = object()


class KeyReader:
    """Typed reads of GGUF metadata with llama.cpp's type rules; every error names file, key and types.

    Parameters
    ----------
    metadata : mapping
        Key -> value (:attr:`GGUFHeader.metadata`).
    path : str
        File name for messages.
    types : mapping, optional
        Key -> ``(value type, element type or None)`` (:attr:`GGUFHeader.types`). Without it the
        types are inferred from the Python values (metadata built in memory; see :func:`_infer_type`).

    Notes
    -----
    llama.cpp ``src/llama-model-loader.cpp``: ``get_key<T>`` demands the exact GGUF type of ``T``
    (``uint32_t`` -> u32, ``float`` -> f32, ``bool`` -> bool, ``std::string`` -> str);
    ``get_key_or_arr`` takes a scalar or an array of exactly ``n`` elements (element types u32,
    i32 or bool for integers); ``get_arr`` refuses other element types ("%s has wrong array
    element type %s").
    """

    def __init__(self, metadata, path: str, types=None):
        self.metadata, self.path = metadata, path
        self._types = types

    def __contains__(self, key: str) -> bool:
        return key in self.metadata

    def type_of(self, key: str) -> tuple[GGUFValueType, GGUFValueType | None]:
        """``(value type, element type or None)`` of a present key."""
        if self._types is not None and key in self._types:
            return self._types[key]
        return _infer_type(self.metadata[key])

    def error(self, key: str, expected: str) -> ModelFormatError:
        """``{path}: key K has type T, expected E``."""
        return ModelFormatError(f"{self.path}: key {key} has type {type_name(*self.type_of(key))}, expected {expected}")

    def scalar(self, key: str, vtype: GGUFValueType, default: Any = _MISSING) -> Any:
        """The value of a scalar key of exactly ``vtype`` (``default`` if absent; required if none given)."""
        if key not in self.metadata:
            if default is _MISSING:
                raise ModelFormatError(f"{self.path}: missing required key {key}")
            return default
        if self.type_of(key)[0] != vtype:
            raise self.error(key, TYPE_NAMES[vtype])
        v = self.metadata[key]
        return bool(v) if vtype == GGUFValueType.BOOL else str(v) if vtype == GGUFValueType.STRING else \
            float(v) if vtype in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64) else int(v)

    def u32(self, key: str, default: Any = _MISSING) -> int:
        """A u32 key (llama.cpp ``get_key<uint32_t>``)."""
        return self.scalar(key, GGUFValueType.UINT32, default)

    def f32(self, key: str, default: Any = _MISSING) -> float:
        """An f32 key (llama.cpp ``get_key<float>``), as a Python float holding the float32 value."""
        return self.scalar(key, GGUFValueType.FLOAT32, default)

    def boolean(self, key: str, default: Any = _MISSING) -> bool:
        """A bool key (llama.cpp ``get_key<bool>``)."""
        return self.scalar(key, GGUFValueType.BOOL, default)

    def string(self, key: str, default: Any = _MISSING) -> str:
        """A str key (llama.cpp ``get_key<std::string>``)."""
        return self.scalar(key, GGUFValueType.STRING, default)

    def array(self, key: str, etypes: tuple[GGUFValueType, ...], length: int | None = None) -> Any:
        """A present array key whose elements are one of ``etypes`` (and, if given, ``length`` of them)."""
        vt, et = self.type_of(key)
        want = " or ".join(type_name(GGUFValueType.ARRAY, t) for t in etypes)
        if vt != GGUFValueType.ARRAY or et not in etypes:
            raise self.error(key, want + (f" of {length} elements" if length is not None else ""))
        v = self.metadata[key]
        if length is not None and len(v) != length:
            raise ModelFormatError(f"{self.path}: key {key} has {len(v)} elements, expected {length}")
        return v

    def int_or_array(self, key: str, n: int, scalar: GGUFValueType, default: Any = _MISSING,
                     array_types: tuple = (GGUFValueType.UINT32, GGUFValueType.INT32,
                                           GGUFValueType.BOOL)) -> tuple[int, ...]:
        """A scalar of type ``scalar`` repeated ``n`` times, or an array of ``n`` values of one of
        ``array_types`` (default u32/i32/bool; llama.cpp ``get_key_or_arr``, whose ``get_arr``
        refuses an array that is not float32/int32/uint32: a caller reading integers passes
        ``(UINT32, INT32)`` where a bool array would be a damaged file)."""
        if key not in self.metadata:
            if default is _MISSING:
                raise ModelFormatError(f"{self.path}: missing required key {key}")
            return (default,) * n if default is not None else ()
        if self.type_of(key)[0] == GGUFValueType.ARRAY:
            v = self.array(key, tuple(array_types), n)
            return tuple(int(x) for x in v)
        if self.type_of(key)[0] != scalar:
            raise self.error(key, f"{TYPE_NAMES[scalar]} or an array of {n} u32/i32")
        return (self.scalar(key, scalar),) * n
