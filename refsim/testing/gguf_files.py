"""GGUF files for tests: an editable in-memory form, a raw writer, byte-level mutations, and an
independent check of what refsim read against gguf-py's ``GGUFReader``.

Why a raw writer (not ``gguf.GGUFWriter``)? A test must be able to write what a writer refuses:
empty arrays, arrays of arrays, offsets that are not the running padded sum, a big-endian header,
an over-long name. :func:`to_bytes` writes the GGUF layout (gguf-py ``gguf_reader.py``; llama.cpp
``ggml/src/gguf.cpp``) field by field from a :class:`GGUFFile`, and nothing else.

Mutations (:func:`mutation_sites`, :func:`apply`) are aimed with gguf-py's ``GGUFReader`` field
parts, so "overwrite the element count of ``tokenizer.ggml.tokens``" or "set the ggml type of
``blk.0.attn_q.weight`` to 99" are one edit each. :func:`check_against_gguf_py` is the oracle for
a mutated file refsim accepted: gguf-py must read the same keys, types, values and tensor table.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUFValueType

_FMT = {GGUFValueType.UINT8: "B", GGUFValueType.INT8: "b", GGUFValueType.UINT16: "H", GGUFValueType.INT16: "h",
        GGUFValueType.UINT32: "I", GGUFValueType.INT32: "i", GGUFValueType.FLOAT32: "f", GGUFValueType.BOOL: "B",
        GGUFValueType.UINT64: "Q", GGUFValueType.INT64: "q", GGUFValueType.FLOAT64: "d"}


@dataclass
class KV:
    """One metadata entry. ``value`` is a scalar, a str, or (ARRAY) a sequence of elements of
    ``etype``; with ``etype`` ARRAY the elements are ``(inner etype, sequence)`` pairs."""

    key: str
    vtype: GGUFValueType
    value: Any
    etype: GGUFValueType | None = None


@dataclass
class Tensor:
    """One tensor: GGUF ``ne`` (fastest first), ggml type id, raw bytes (``b""`` = header-only)."""

    name: str
    ne: tuple[int, ...]
    qtype: int
    data: bytes = b""

    @property
    def n_bytes(self) -> int:
        """Size the ``ne`` and type imply, bytes (``prod(ne) / block_size * type_size``); the data's
        own length for a type gguf-py does not know."""
        try:
            block, size = GGML_QUANT_SIZES[self.qtype]
        except (KeyError, ValueError):
            return len(self.data)
        return int(np.prod(self.ne, dtype=object)) // block * size


@dataclass
class GGUFFile:
    """A GGUF as lists of fields; :func:`to_bytes` writes it."""

    kv: list[KV]
    tensors: list[Tensor]
    version: int = 3
    alignment: int = 32
    endian: str = "<"
    offsets: list[int] | None = None
    """Tensor offsets to write instead of the running padded sum."""
    data: bool = True
    """Write the data section (False: a header-only file ending after the tensor infos)."""

    def get(self, key: str) -> KV:
        return next(kv for kv in self.kv if kv.key == key)

    def set(self, key: str, vtype: GGUFValueType, value: Any, etype: GGUFValueType | None = None) -> "GGUFFile":
        """Replace (or append) ``key``; returns self."""
        new = KV(key, vtype, value, etype)
        for i, kv in enumerate(self.kv):
            if kv.key == key:
                self.kv[i] = new
                return self
        self.kv.append(new)
        return self

    def drop(self, key: str) -> "GGUFFile":
        self.kv = [kv for kv in self.kv if kv.key != key]
        return self

    def tensor(self, name: str) -> Tensor:
        return next(t for t in self.tensors if t.name == name)

    def copy(self) -> "GGUFFile":
        return replace(self, kv=[replace(k) for k in self.kv], tensors=[replace(t) for t in self.tensors],
                       offsets=None if self.offsets is None else list(self.offsets))


def from_file(path) -> GGUFFile:
    """The fields of a valid GGUF (read with refsim's reader: use it on seeds refsim wrote)."""
    from refsim.model.gguf_io import read_header
    h = read_header(path)
    kv = []
    for key, value in h.metadata.items():
        vt = h.value_types[key]
        if vt == GGUFValueType.ARRAY:
            kv.append(KV(key, vt, list(value) if isinstance(value, list) else np.asarray(value).tolist(),
                         h.array_types[key]))
        else:
            kv.append(KV(key, vt, value))
    tensors = []
    for ti in h.tensors.values():
        data = bytes(h.tensor_data(ti.name).reshape(-1)) if h.has_data else b""
        tensors.append(Tensor(ti.name, tuple(ti.shape_gguf), int(ti.ggml_type), data))
    return GGUFFile(kv, tensors, version=h.version, alignment=h.alignment, data=h.has_data)


def _pack_value(e: str, vtype: GGUFValueType, value: Any, etype: GGUFValueType | None) -> bytes:
    if vtype == GGUFValueType.STRING:
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return struct.pack(e + "Q", len(raw)) + raw
    if vtype == GGUFValueType.ARRAY:
        out = struct.pack(e + "IQ", etype, len(value))
        for item in value:
            if etype == GGUFValueType.ARRAY:
                inner_type, inner = item
                out += _pack_value(e, GGUFValueType.ARRAY, inner, inner_type)
            else:
                out += _pack_value(e, etype, item, None)
        return out
    if vtype in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        return struct.pack(e + _FMT[vtype], float(value))
    return struct.pack(e + _FMT[vtype], int(value) & ((1 << (8 * struct.calcsize(_FMT[vtype]))) - 1)
                       if _FMT[vtype].isupper() else int(value))


def to_bytes(f: GGUFFile) -> bytes:
    """The bytes of ``f``: header, kv, tensor infos, padding to ``alignment``, data (each tensor
    padded to ``alignment``), in the byte order ``f.endian``."""
    e = f.endian
    out = bytearray(b"GGUF" + struct.pack(e + "IQQ", f.version, len(f.tensors), len(f.kv)))
    for kv in f.kv:
        out += _pack_value(e, GGUFValueType.STRING, kv.key, None) + struct.pack(e + "I", kv.vtype)
        out += _pack_value(e, kv.vtype, kv.value, kv.etype)
    offset = 0
    for i, t in enumerate(f.tensors):
        off = f.offsets[i] if f.offsets is not None else offset
        out += _pack_value(e, GGUFValueType.STRING, t.name, None) + struct.pack(e + "I", len(t.ne))
        out += struct.pack(e + "Q" * len(t.ne), *t.ne) + struct.pack(e + "IQ", t.qtype, off)
        offset += -(-t.n_bytes // f.alignment) * f.alignment
    if not f.data or not f.tensors:
        return bytes(out)
    out += b"\0" * (-len(out) % f.alignment)
    for t in f.tensors:
        out += t.data + b"\0" * (-len(t.data) % f.alignment)
    return bytes(out)


# --- mutations ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Site:
    """A field of a file: ``what`` (e.g. ``"kv tokenizer.ggml.tokens count"``), where, and its numpy dtype."""

    what: str
    offset: int
    size: int
    dtype: str


def mutation_sites(path) -> list[Site]:
    """Every field part gguf-py's ``GGUFReader`` sees in a valid file (header, keys, types,
    counts, values, tensor infos), with byte offsets; tensor data regions as one site each."""
    from gguf import GGUFReader
    r = GGUFReader(path)
    base = r.data.__array_interface__["data"][0]
    sites = []
    fields = list(r.fields.items()) + [(f"tensor {t.name}", t.field) for t in r.tensors]
    for name, fld in fields:
        roles = _roles(fld, name)
        for part, role in zip(fld.parts, roles):
            off = part.__array_interface__["data"][0] - base
            if part.dtype == np.uint8 and part.size > 8:   # a string's bytes: one site, first 8
                sites.append(Site(f"{name} {role}", off, min(part.nbytes, 64), "bytes"))
            else:
                for j in range(min(part.size, 8)):
                    sites.append(Site(f"{name} {role}[{j}]" if part.size > 1 else f"{name} {role}",
                                      off + j * part.itemsize, part.itemsize, part.dtype.str))
    for t in r.tensors:
        sites.append(Site(f"tensor data {t.name}", int(t.data_offset), int(t.n_bytes), "data"))
    return sites


def _roles(fld, name: str) -> list[str]:
    n = len(fld.parts)
    if name.startswith("GGUF."):
        return ["value"] * n
    if name.startswith("tensor "):   # tensor info: name len, name, n_dims, dims, type, offset
        return ["name length", "name", "n_dims", "dims", "ggml type", "offset"][:n]
    roles = ["key length", "key", "value type"]
    if fld.types and fld.types[0] == GGUFValueType.ARRAY:
        roles += ["element type", "element count"]
        if len(fld.types) > 1 and fld.types[1] == GGUFValueType.STRING:
            roles += ["element length", "element"] * ((n - 5) // 2)
    elif fld.types and fld.types[0] == GGUFValueType.STRING:
        roles += ["string length", "string"]
    return (roles + ["element"] * n)[:n]


INTERESTING_INTS = (0, 1, 2, 3, 7, 31, 32, 63, 64, 255, 256, 1 << 15, (1 << 15) - 1, 1 << 16, (1 << 31) - 1, 1 << 31,
                    (1 << 32) - 1, 1 << 32, 1 << 40, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)
INTERESTING_FLOATS = (0.0, -0.0, 1.0, -1.0, 1e-50, 1e-45, 1e-38, 1e38, float("inf"), float("-inf"), float("nan"),
                      3.4e38, 1e-6, 1e6)


def apply(data: bytes, edits: list[tuple]) -> bytes:
    """Apply byte-level edits in order.

    ``("set", offset, raw bytes)`` overwrites; ``("cut", n)`` keeps the first ``n`` bytes;
    ``("insert", offset, raw bytes)`` inserts; ``("delete", offset, n)`` removes ``n`` bytes.
    Offsets past the end are clamped (an edit never fails).
    """
    out = bytearray(data)
    for e in edits:
        if e[0] == "set":
            off = min(e[1], len(out))
            out[off:off + len(e[2])] = e[2]
        elif e[0] == "cut":
            del out[e[1]:]
        elif e[0] == "insert":
            out[min(e[1], len(out)):min(e[1], len(out))] = e[2]
        elif e[0] == "delete":
            del out[e[1]:e[1] + e[2]]
    return bytes(out)


def encode(value, dtype: str) -> bytes:
    """``value`` as the little-endian bytes of a field of numpy ``dtype`` (wrapping integers)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.array([value], dtype=dt).tobytes()
    bits = 8 * dt.itemsize
    v = int(value) & ((1 << bits) - 1)
    return v.to_bytes(dt.itemsize, "little")


SCALAR_TYPES = tuple(_FMT)
"""Every scalar GGUF value type."""


def _as_type(vtype: GGUFValueType, number: float):
    """``number`` as a value of scalar ``vtype``: floats kept, integers truncated and clamped to
    the type's range (non-finite -> 1), bools True."""
    if vtype in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        return float(number)
    if vtype == GGUFValueType.BOOL:
        return True
    n = int(number) if math.isfinite(number) else 1
    bits = 8 * struct.calcsize(_FMT[vtype])
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if _FMT[vtype].islower() else (0, (1 << bits) - 1)
    return min(max(n, lo), hi)


def retyped(kv: KV, how: str, vtype: GGUFValueType, number: float) -> KV:
    """``kv`` written another way, keeping the file well-formed (a writer's slip, not a byte flip).

    ``how``: ``"scalar"`` (a scalar of ``vtype`` holding ``number``), ``"string"``, ``"array1"``
    (a 1-element array of ``vtype``), ``"arrayN"`` (``|number| % 7`` elements, may be 0),
    ``"nested"`` (an array of arrays), ``"value"`` (same type, ``number`` as the value or as
    one element).
    """
    v = _as_type(vtype, number)
    count = int(abs(number)) % 7 if math.isfinite(number) else 2
    if how == "scalar":
        return KV(kv.key, vtype, v)
    if how == "string":
        return KV(kv.key, GGUFValueType.STRING, str(v))
    if how == "array1":
        return KV(kv.key, GGUFValueType.ARRAY, [v], vtype)
    if how == "arrayN":
        return KV(kv.key, GGUFValueType.ARRAY, [v] * count, vtype)
    if how == "nested":
        return KV(kv.key, GGUFValueType.ARRAY, [(GGUFValueType.INT32, [1, 2]), (GGUFValueType.INT32, [3])],
                  GGUFValueType.ARRAY)
    # "value": same type, another value
    if kv.vtype == GGUFValueType.ARRAY:
        vals = list(kv.value)
        if not vals or kv.etype == GGUFValueType.ARRAY:
            return kv
        j = count % len(vals)
        if kv.etype == GGUFValueType.STRING:
            vals[j] = vals[(j + 1) % len(vals)] if count % 2 else ""
        else:
            vals[j] = _as_type(kv.etype, number)
        return KV(kv.key, kv.vtype, vals, kv.etype)
    if kv.vtype == GGUFValueType.STRING:
        return KV(kv.key, kv.vtype, kv.value[:-1] if kv.value else "x")
    if kv.vtype == GGUFValueType.BOOL:
        return KV(kv.key, kv.vtype, not kv.value)
    return KV(kv.key, kv.vtype, _as_type(kv.vtype, number))


RESHAPES = ("drop", "add", "half", "double", "swap", "one")


def reshaped(t: Tensor, op: str, dim: int) -> Tensor:
    """``t`` with its ``ne`` changed by ``op`` at ``dim`` (see :data:`RESHAPES`); the data is cut
    or zero-padded to the new size, so the file stays well-formed."""
    ne = list(t.ne)
    j = dim % len(ne)
    if op == "drop" and len(ne) > 1:
        ne.pop()
    elif op == "add" and len(ne) < 4:
        ne.append(2)
    elif op == "half":
        ne[j] = max(ne[j] // 2, 1)
    elif op == "double":
        ne[j] *= 2
    elif op == "swap" and len(ne) > 1:
        ne[0], ne[1] = ne[1], ne[0]
    elif op == "one":
        ne[j] = 1
    out = replace(t, ne=tuple(ne))
    n = out.n_bytes
    out.data = (t.data + bytes(max(0, n - len(t.data))))[:n] if t.data else b""
    return out


# --- the oracle -----------------------------------------------------------------------------

def check_against_gguf_py(header, path, data: bool = True) -> list[str]:
    """Where refsim's parse of ``path`` (``header``, a :class:`refsim.model.GGUFHeader`) and
    gguf-py's ``GGUFReader`` disagree: keys, value types, values, tensor names, ``ne``, types,
    absolute data offsets and sizes, and (``data``) every tensor's bytes as each maps them.
    Empty list = they agree.

    Only for files with a data section (``GGUFReader`` maps every tensor's data).
    """
    from gguf import GGUFReader
    try:
        r = GGUFReader(path)
    except Exception as exc:  # noqa: BLE001 - the oracle failing on an accepted file is a finding
        return [f"gguf-py cannot read a file refsim accepted: {type(exc).__name__}: {exc}"]
    diffs = []
    theirs = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    if set(theirs) != set(header.metadata):
        diffs.append(f"keys differ: {sorted(set(theirs) ^ set(header.metadata))[:5]}")
    for k in set(theirs) & set(header.metadata):
        f = theirs[k]
        vt = header.value_types[k]
        if GGUFValueType(f.types[0]) != vt:
            diffs.append(f"{k}: type {vt.name} vs gguf-py {GGUFValueType(f.types[0]).name}")
            continue
        mine = header.metadata[k]
        if vt == GGUFValueType.ARRAY:
            et = header.array_types.get(k)
            if len(f.types) < 2:     # gguf-py records no element type for an empty array
                if len(header.metadata[k]) != 0:
                    diffs.append(f"{k}: {len(header.metadata[k])} elements vs gguf-py none")
                continue
            if GGUFValueType(f.types[1]) != et:
                diffs.append(f"{k}: element type {et} vs gguf-py {f.types[1:]}")
                continue
            if et == GGUFValueType.ARRAY:
                diffs.append(f"{k}: refsim accepted an array of arrays")
                continue
            if et == GGUFValueType.STRING:
                theirs_v = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
                same = list(mine) == theirs_v
            else:
                theirs_v = np.array([f.parts[i][0] for i in f.data])
                mine_v = np.asarray(mine)
                same = mine_v.shape == theirs_v.shape and np.array_equal(
                    mine_v.astype(theirs_v.dtype) if et != GGUFValueType.BOOL else mine_v,
                    theirs_v if et != GGUFValueType.BOOL else theirs_v != 0, equal_nan=mine_v.dtype.kind == "f")
        elif vt == GGUFValueType.STRING:
            same = mine == bytes(f.parts[f.data[0]]).decode("utf-8")
        else:
            v = f.parts[f.data[0]][0]
            same = (mine == (v != 0)) if vt == GGUFValueType.BOOL else (
                (mine == v) or (isinstance(mine, float) and np.isnan(mine) and np.isnan(v)))
        if not same:
            diffs.append(f"{k}: value differs from gguf-py's")
    ts = {t.name: t for t in r.tensors}
    if list(ts) != list(header.tensors):
        diffs.append("tensor names or order differ")
    for name, ti in header.tensors.items():
        t = ts.get(name)
        if t is None:
            continue
        if (tuple(int(x) for x in t.shape) != tuple(ti.shape_gguf) or int(t.tensor_type) != int(ti.ggml_type)
                or int(t.data_offset) != ti.data_offset or int(t.n_bytes) != ti.n_bytes):
            diffs.append(f"tensor {name}: ne/type/offset/size differ from gguf-py's")
        elif data and not np.array_equal(np.asarray(header.tensor_data(name)).reshape(-1),
                                         np.asarray(t.data).view(np.uint8).reshape(-1)):
            diffs.append(f"tensor {name}: bytes differ from gguf-py's")
    return diffs


__all__ = ["GGUFFile", "INTERESTING_FLOATS", "INTERESTING_INTS", "KV", "RESHAPES", "SCALAR_TYPES", "Site", "Tensor",
           "apply", "check_against_gguf_py", "encode", "from_file", "mutation_sites", "reshaped", "retyped", "to_bytes"]
