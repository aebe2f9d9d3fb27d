"""Read and validate ``route_trace v1`` files into decode events.

The format carries no decode id; decodes are framed the way the engine writes them
(one flush per decode, rows layer-major, then position, then slot): within one decode the key
``(layer, step, slot)`` strictly increases, so a row whose key does not exceed the previous
row's, or whose ``turn``/``phase`` differs, starts a new decode. This is exact for every trace
with n_layer >= 2. With a single layer, consecutive plain decodes cannot be told apart from one
verify decode; the reader then frames each decode-phase step as its own decode.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass

import numpy as np

from refsim import MAX_CACHE_MIB, progress
from refsim.errors import TraceFormatError
from refsim.jit import in_reference
from refsim.events import NOT_ROUTED, DecodeEvent, DecodeKind, EventBlock
from refsim.frames import Table
from refsim.trace.convention import EVERY, FINAL, arch_graph, block_convention, chunk_shape
from refsim.trace.format import (F32_FINITE_LIMIT, MAX_ENTRY_BYTES, MAX_EXPERT_USED, MAX_EXPERTS,
                                 MAX_LAYERS, MAX_POSITION, OPTIONAL_COLUMNS, PRED_COLUMNS,
                                 REQUIRED_COLUMNS, TRACE_MAGIC, TraceHeader)


class RouteTrace(Table):
    """A route trace read from disk: the header, the decode events and the engine's records.

    The reader's fast path builds the events as one :class:`~refsim.events.EventBlock` (with the
    records as arrays of the same (P, n_layer, k) shape); the lists below are then views of
    those arrays, made when first asked for. A trace built from lists (the per-line path, a
    test) makes its block when :attr:`block` is first asked for. Either way both forms hold the
    same values.

    Attributes
    ----------
    header : TraceHeader
    events : list of DecodeEvent
        In file order. Prefill events are ``DecodeKind.PREFILL``; a decode event with one
        position is ``PLAIN``, with more it is ``VERIFY`` (``n_draft = n_pos - 1``).
    residency : list of (n_pos, n_layer, k) int8 ndarray
        Recorded residency per slot (0 miss, 1 hit, 2 prefetched hit; -1 where not routed). A
        dropped slot keeps the residency the engine queried before dropping it (0: only misses
        are dropped, bmoe-engine.md §3.6).
    charged_bytes : list of (n_pos, n_layer, k) int64 ndarray
        The ``expert_bytes`` column per slot (bytes charged on the first miss row of an expert).
    line_numbers : list of (n_pos, n_layer, k) int32 ndarray
        1-based line of each slot's row (0 where not routed), for error messages.
    block : EventBlock
        The events in columnar form.
    recorded : tuple of three (P, n_layer, k) ndarray
        ``residency``, ``charged_bytes`` and ``line_numbers`` laid end to end as the block's
        positions are.
    path : str
        The file read.
    has_pred_columns : bool
        The file has refsim's prediction columns (``pred_expert``, ``pred_weight``): every event
        then carries ``pred_routes`` / ``pred_weights``.
    """

    def __init__(self, header: TraceHeader, events: list[DecodeEvent] | None = None,
                 residency: list[np.ndarray] | None = None,
                 charged_bytes: list[np.ndarray] | None = None,
                 line_numbers: list[np.ndarray] | None = None, path: str = "",
                 has_dropped_column: bool = False, n_rows: int = 0, speculative: bool = False,
                 column_line: int = 0, has_pred_columns: bool = False, *,
                 block: EventBlock | None = None, recorded: tuple | None = None):
        if (events is None) != (block is not None) or (block is None) != (recorded is None):
            raise ValueError("a RouteTrace takes its events as lists or as a block, not both")
        self.header = header
        self.path = path
        self.has_dropped_column = has_dropped_column
        self.n_rows = n_rows
        self.speculative = speculative
        self.column_line = column_line
        self.has_pred_columns = has_pred_columns
        self._events = events
        self._lists = None if events is None else (residency, charged_bytes, line_numbers)
        self._block = block
        self._recorded = recorded

    @property
    def events(self) -> list[DecodeEvent]:
        if self._events is None:
            self._events = self._block.events()
        return self._events

    def _list(self, j: int) -> list[np.ndarray]:
        if self._lists is None:
            st = self._block.event_start.tolist()
            self._lists = tuple([a[st[i]:st[i + 1]] for i in range(len(st) - 1)]
                                for a in self._recorded)
        return self._lists[j]

    @property
    def residency(self) -> list[np.ndarray]:
        return self._list(0)

    @property
    def charged_bytes(self) -> list[np.ndarray]:
        return self._list(1)

    @property
    def line_numbers(self) -> list[np.ndarray]:
        return self._list(2)

    @property
    def block(self) -> EventBlock:
        if self._block is None:
            h = self.header
            self._block = EventBlock.from_events(self._events, h.n_layer, h.n_expert_used)
        return self._block

    @property
    def recorded(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._recorded is None:
            shape = (0, self.header.n_layer, self.header.n_expert_used)
            self._recorded = tuple(
                np.concatenate(parts) if parts else np.zeros(shape, dtype)
                for parts, dtype in zip(self._lists, (np.int8, np.int64, np.int32)))
        return self._recorded

    @property
    def n_events(self) -> int:
        """Number of events."""
        return self.block.n_events if self._events is None else len(self._events)

    def require_rows(self, purpose: str) -> None:
        """Refuse a trace with a preamble and no rows, for a command that would print zeros.

        Raises
        ------
        TraceFormatError
            Naming the file and the line after the column header.
        """
        if self.n_rows == 0:
            raise TraceFormatError(f"{self.path}:{self.column_line + 1}: the trace has a preamble "
                                   f"but no rows (nothing to {purpose}); expected rows after the "
                                   f"column header")

    @property
    def n_prompt(self) -> int:
        """Positions prefilled in turn 0 (the engine's ``n_prompt``)."""
        b = self.block
        first = (b.kind == DecodeKind.PREFILL) & (b.turn == 0)
        return int(np.diff(b.event_start)[first].sum())

    @property
    def decode_events(self) -> list[DecodeEvent]:
        """The phase-1 events."""
        return [e for e in self.events if e.phase == 1]

    def to_columns(self) -> dict:
        """The file's rows as columns, in file order (:func:`refsim.trace.table.trace_columns`):
        ``turn, phase, step, layer, slot, expert, weight, residency, expert_bytes`` [, ``dropped``]
        [, ``pred_expert, pred_weight``]; :meth:`to_pandas` / :meth:`to_arrow` give the same as a
        frame (docs/notebook.md)."""
        from refsim.trace.table import trace_columns
        return trace_columns(self)

    @property
    def last_layer(self) -> str | None:
        """The trace's last-layer convention (:data:`~refsim.trace.convention.FINAL` or
        :data:`~refsim.trace.convention.EVERY`), None when no prefill chunk tells them apart
        (no prefill, or only one-position chunks that end their turn's prefill)."""
        return block_convention(self.block)[0]

    @property
    def unrouted_layers(self) -> list[int]:
        """Layers of the preamble that no row of the trace routes (the MTP head's layer of an
        ``--mtp`` trace: the engine does not record the head's draft routings); [] for an empty
        trace."""
        seen = _routed_layers(self.block)
        return np.flatnonzero(~seen).tolist() if seen.any() else []


READ_CHUNK = 1 << 22
"""Bytes read at a time: each chunk is checked for NUL bytes before the next is read, so a binary
file (or ``/dev/zero``) is refused from its first bytes, never read whole."""

MAX_LINES = 2**31 - 1
"""Most lines a trace may have (line numbers are stored as int32)."""

_INT_FIELD = r"(?:0|-?[1-9][0-9]{0,14})"
"""An integer field as the engine writes it (``%d``): ASCII digits, no sign but ``-``, no leading
zero, no padding (so a byte flipped to ``+``, a space or a digit before a zero is refused, not read
as another number; no ``1_0``, no non-ASCII digits), at most 15 digits so the float64 parse is
exact (every bound of the format is far below 10**15; a longer number is reported as its text)."""

_FLOAT_FIELD = (r"(?:-?(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?"
                r"|-?(?:nan|inf))")
"""A weight field as ``%.6g`` (the engine) or ``str(float32)`` (refsim) write it: an optional
``-``, an integer part without leading zeros, decimals, an exponent; or ``nan`` (no weight node)
or ``inf`` (ASCII only)."""

_INT_RE, _FLOAT_RE = re.compile(_INT_FIELD), re.compile(_FLOAT_FIELD)
_MODEL_KEYS = ("model", "arch", "n_layer", "n_expert", "n_expert_used", "cache_mb")
"""Keys of the model line; on a layer line they are damage (the engine's scripts merge every
``#`` line's keys, so they would read them as the model's)."""
_KNOWN = REQUIRED_COLUMNS + OPTIONAL_COLUMNS + PRED_COLUMNS
_FLOAT_COLUMNS = ("weight", "pred_weight")
_INT_COLUMNS = tuple(c for c in _KNOWN if c not in _FLOAT_COLUMNS)


def _read_text(path: str) -> str:
    """The file as text, refusing a non-trace from its first line and binary data chunk by chunk.

    Raises
    ------
    TraceFormatError
        Unreadable file, a first line that is not ``# route_trace v1``, a NUL byte or text that
        is not UTF-8 (naming the line and the byte offset).
    """
    chunks = list(_checked_chunks(path))
    raw = b"".join(chunks)
    del chunks
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        _not_utf8(path, raw.count(b"\n", 0, exc.start) + 1, raw[exc.start], exc.start)


def _not_utf8(path: str, line: int, byte: int, offset: int):
    raise TraceFormatError(f"{path}:{line}: not UTF-8 text (byte 0x{byte:02x} at "
                           f"byte offset {offset})") from None


def _checked_chunks(path: str):
    """The file's bytes in :data:`READ_CHUNK` pieces (the first is the magic line's few bytes),
    each checked before the next is read: the first line is the magic, no NUL byte, at most
    :data:`MAX_LINES` lines. (The UTF-8 check is the caller's: :func:`_read_text` decodes the
    whole, :func:`_check_bytes` piece by piece.)

    Raises
    ------
    TraceFormatError
        As :func:`_read_text`, but for UTF-8.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(TRACE_MAGIC) + 2)
            first = head.split(b"\n", 1)[0].rstrip(b"\r")
            if first != TRACE_MAGIC.encode():
                got = (first[:60].decode("utf-8", "replace") if head
                       else "an empty file")
                raise TraceFormatError(f"{path}:1: expected {TRACE_MAGIC!r}, got {got!r}"
                                       f"{' (not a route trace)' if head else ''}")
            yield head
            size, lines = len(head), head.count(b"\n")
            while True:
                chunk = fh.read(READ_CHUNK)
                if not chunk:
                    break
                nul = chunk.find(b"\0")
                if nul >= 0:
                    line = lines + chunk.count(b"\n", 0, nul) + 1
                    raise TraceFormatError(f"{path}:{line}: NUL byte at byte offset {size + nul}; "
                                           f"expected text (a binary or damaged file?)")
                size += len(chunk)
                lines += chunk.count(b"\n")
                if lines > MAX_LINES:
                    raise TraceFormatError(f"{path}:{MAX_LINES}: more than {MAX_LINES} lines")
                yield chunk
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read: {exc.strerror}") from None


def _check_bytes(path: str) -> int:
    """:func:`_read_text`'s checks without holding the file: the same first error, in memory
    bounded by :data:`READ_CHUNK` (the stream's diagnosis of a damaged file).

    Returns
    -------
    int
        The number of line feeds in the file.

    Raises
    ------
    TraceFormatError
        Exactly as :func:`_read_text` would for the same file.
    """
    offset = lines = 0
    tail = b""                        # an unfinished UTF-8 sequence at the end of the last piece
    bad = None                        # (line, byte, offset) of the first byte that is not UTF-8
    for chunk in _checked_chunks(path):    # every NUL and line-count error comes first, as there
        if bad is None:
            data = tail + chunk
            try:
                data.decode("utf-8")
                tail = b""
            except UnicodeDecodeError as exc:
                if exc.reason == "unexpected end of data" and exc.start >= len(data) - 3:
                    tail = data[exc.start:]          # may complete in the next piece
                else:
                    at = offset - len(tail) + exc.start
                    bad = (lines - tail.count(b"\n") + data.count(b"\n", 0, exc.start) + 1,
                           data[exc.start], at)
        offset += len(chunk)
        lines += chunk.count(b"\n")
    if bad is None and tail:
        bad = (lines - tail.count(b"\n") + 1, tail[0], offset - len(tail))
    if bad is not None:
        _not_utf8(path, *bad)
    return lines


def _kv_tokens(path: str, lineno: int, text: str) -> dict[str, str]:
    """``key=value`` tokens of a ``#`` preamble line; other tokens are ignored. A key given twice
    is an error (which one the engine meant is unknowable). One leading ``#`` is the marker (the engine writes
    ``# key=value``): in ``##layer=0`` the key is ``#layer``, not ``layer``."""
    out: dict[str, str] = {}
    for tok in text[1:].split():
        if "=" in tok:
            key, value = tok.split("=", 1)
            if key in out:
                raise TraceFormatError(f"{path}:{lineno}: {key}= given twice on one preamble line "
                                       f"({key}={out[key]} and {key}={value}); expected it once")
            out[key] = value
    return out


def _header_int(path: str, lineno: int, kv: dict[str, str], key: str, lo: int, hi: int,
                what: str = "") -> int:
    """A preamble integer, ASCII digits only, bounded to ``lo..hi`` before anything uses it."""
    if key not in kv:
        raise TraceFormatError(f"{path}:{lineno}: preamble has no {key}= (expected '{key}=<int>')")
    text = kv[key]
    if not re.fullmatch(r"-?[0-9]+", text):
        raise TraceFormatError(
            f"{path}:{lineno}: {key}={text[:40]!r} is not an integer (expected ASCII digits)")
    if not re.fullmatch(r"0|-?[1-9][0-9]*", text):
        raise TraceFormatError(
            f"{path}:{lineno}: {key}={text[:40]} is not written as the engine writes integers; expected "
            f"'0' or digits without a leading zero (%d; a flipped byte must not read as another number)")
    if len(text.lstrip("-")) > 20 or not lo <= int(text) <= hi:
        raise TraceFormatError(f"{path}:{lineno}: {key}={text[:40]} is out of range; expected "
                               f"{lo}..{hi}{what}")
    return int(text)


def _check_cache_mb(path: str, lineno: int, text: str) -> None:
    """The recorded budget ``cache_mb=`` (refsim's own key) is a finite number of MiB in
    ``(0, MAX_CACHE_MIB]``, its integer part without a leading zero (``fmt.budget_mib`` and the
    engine's ``%d`` never write one), or replay would quote a budget that never was."""
    ok = re.fullmatch(r"(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", text) is not None
    if ok:
        value = float(text)
        ok = 0 < value <= MAX_CACHE_MIB
    if not ok:
        raise TraceFormatError(f"{path}:{lineno}: cache_mb={text[:40]!r} is not a budget; expected "
                               f"a number of MiB > 0 and <= {MAX_CACHE_MIB} (the budget the "
                               f"residency was recorded at)")


@dataclass
class _Preamble:
    header: TraceHeader
    columns: list[str]
    column_line: int                    # 1-based line of the column header
    layer_lines: dict[int, int]         # 1-based line of each layer's preamble line
    data: list[str]                     # non-blank data lines
    data_lines: np.ndarray              # (n_rows,) int64, their 1-based line numbers


def _parse_preamble(path: str, text: str) -> _Preamble:
    """Parse the preamble; blank and whitespace-only lines are skipped everywhere after line 1
    (an editor's trailing newline is the common slip); every line keeps its number."""
    lines = text.split("\n")
    ends_with_newline = lines[-1] == ""
    if ends_with_newline:
        lines.pop()
    model_kv: dict[str, str] | None = None
    model_line = 0
    layers: dict[int, tuple[int, int]] = {}
    layer_lines: dict[int, int] = {}
    i = 1
    while i < len(lines) and (lines[i].startswith("#") or not lines[i].strip()):
        if not lines[i].strip():
            i += 1
            continue
        kv = _kv_tokens(path, i + 1, lines[i])
        if "layer" in kv:
            stray = [t for t in lines[i][1:].split() if "=" not in t] + [
                f"{key}=" for key in kv if key in _MODEL_KEYS]
            if stray:
                raise TraceFormatError(
                    f"{path}:{i + 1}: {stray[0][:40]!r} on a layer line; expected "
                    f"'# layer=L expert_bytes=B dense_bytes=B' (model keys on the model line)")
            il = _header_int(path, i + 1, kv, "layer", 0, MAX_LAYERS - 1)
            eb = _header_int(path, i + 1, kv, "expert_bytes", 1, MAX_ENTRY_BYTES,
                             " (bytes of one expert entry, a miss's cost; at most 2**40)")
            db = _header_int(path, i + 1, kv, "dense_bytes", 0, MAX_ENTRY_BYTES,
                             " (bytes of the layer's other tensors; at most 2**40)")
            if il in layers:
                raise TraceFormatError(f"{path}:{i + 1}: layer={il} listed twice in the preamble "
                                       f"(first at line {layer_lines[il]})")
            layers[il] = (eb, db)
            layer_lines[il] = i + 1
        elif "arch" in kv or "n_layer" in kv:
            if model_kv is not None:
                raise TraceFormatError(f"{path}:{i + 1}: a second model line (the first is line "
                                       f"{model_line}); expected one")
            model_kv, model_line = kv, i + 1
        i += 1
    if model_kv is None:
        raise TraceFormatError(
            f"{path}:{i + 1}: missing the model preamble line (the preamble ends here) "
            f"('# model=... arch=... n_layer=N n_expert=N n_expert_used=K')")
    if not model_kv.get("arch"):
        raise TraceFormatError(
            f"{path}:{model_line}: the model line has no arch= value; expected arch=<the model's "
            f"general.architecture> (the engine always writes it, bmoe-engine.md §4.5; the "
            f"last-layer rule depends on it)")
    n_layer = _header_int(path, model_line, model_kv, "n_layer", 1, MAX_LAYERS,
                          " (the route trace bound: 8x llama.cpp's LLAMA_MAX_LAYERS)")
    n_expert = _header_int(path, model_line, model_kv, "n_expert", 1, MAX_EXPERTS,
                           " (expert ids are stored as int16)")
    k = _header_int(path, model_line, model_kv, "n_expert_used", 1, min(n_expert, MAX_EXPERT_USED),
                    f" (at most n_expert={n_expert} and the bound {MAX_EXPERT_USED})")
    if "cache_mb" in model_kv:
        _check_cache_mb(path, model_line, model_kv["cache_mb"])
    extra_layers = sorted(il for il in layers if il >= n_layer)
    if extra_layers:
        raise TraceFormatError(f"{path}:{layer_lines[extra_layers[0]]}: preamble lists "
                               f"layer={extra_layers[0]} outside 0..{n_layer - 1} (n_layer={n_layer})")
    missing = [il for il in range(n_layer) if il not in layers]
    columns = [c.strip() for c in lines[i].rstrip("\r").split(",")] if i < len(lines) else []
    absent = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing and columns and absent:
        # the preamble ended at a line that is neither a '#' line nor the column header: name that line
        raise TraceFormatError(
            f"{path}:{i + 1}: expected '# layer=L expert_bytes=B dense_bytes=B' lines, then the column header "
            f"({','.join(REQUIRED_COLUMNS)}[,dropped]); got {lines[i][:40]!r} ({len(missing)} of n_layer={n_layer} "
            f"layer lines missing, the first for layer {missing[0]})")
    if missing:
        raise TraceFormatError(
            f"{path}:{model_line}: preamble has no '# layer=L expert_bytes=B dense_bytes=B' line for "
            f"layer {missing[0]} ({len(missing)} of n_layer={n_layer} layers missing)")
    if i >= len(lines):
        raise TraceFormatError(f"{path}:{i + 1}: expected the column header line, got end of file")
    seen: set[str] = set()
    for c in columns:
        if c in seen:
            raise TraceFormatError(f"{path}:{i + 1}: column {c!r} appears twice in the column "
                                   f"header; expected each column once")
        seen.add(c)
    if absent:
        raise TraceFormatError(
            f"{path}:{i + 1}: column header lacks {', '.join(absent)} "
            f"(expected {','.join(REQUIRED_COLUMNS)}[,dropped])")
    if (PRED_COLUMNS[0] in columns) != (PRED_COLUMNS[1] in columns):
        raise TraceFormatError(f"{path}:{i + 1}: column header has one of "
                               f"{', '.join(PRED_COLUMNS)} without the other; expected both or "
                               f"neither")
    known = set(_MODEL_KEYS) - {"cache_mb"}
    header = TraceHeader(
        model=model_kv.get("model", ""), arch=model_kv.get("arch", ""), n_layer=n_layer,
        n_expert=n_expert, n_expert_used=k,
        expert_bytes=np.array([layers[il][0] for il in range(n_layer)], dtype=np.int64),
        dense_bytes=np.array([layers[il][1] for il in range(n_layer)], dtype=np.int64),
        extra=tuple((key, v) for key, v in model_kv.items() if key not in known))
    keep = [j for j in range(i + 1, len(lines)) if lines[j].strip()]
    if keep and keep[-1] == len(lines) - 1 and not ends_with_newline:
        _truncated(path, len(lines), lines[-1])
    return _Preamble(header, columns, i + 1, layer_lines, [lines[j] for j in keep],
                     np.asarray(keep, dtype=np.int64) + 1)


def valid_weights(w: np.ndarray) -> np.ndarray:
    """Bool array: the weights the format allows, ``nan`` or ``0 <= w < F32_FINITE_LIMIT`` (a
    decimal value that rounds to a finite float32 >= 0; docs/trace-format.md "Validation")."""
    return np.isnan(w) | ((w >= 0) & (w < np.float64(F32_FINITE_LIMIT)))


def _truncated(path: str, line: int, text: str):
    """Raise the message of a last line without its end of line (``text``: its first characters)."""
    raise TraceFormatError(f"{path}:{line}: last line is truncated (no end of line): {text[:60]!r}")


def _range_text(name: str, header: TraceHeader) -> str:
    """What column ``name`` holds, for messages."""
    return {"turn": f"0..{MAX_POSITION}", "phase": "0 (prefill) or 1 (decode)",
            "step": f"0..{MAX_POSITION}", "layer": f"0..{header.n_layer - 1}",
            "slot": f"0..{header.n_expert_used - 1}", "expert": f"0..{header.n_expert - 1}",
            "residency": "0, 1 or 2", "expert_bytes": "bytes",
            "dropped": "0 or 1",
            "pred_expert": f"-1 (no prediction) or 0..{header.n_expert - 1}"}.get(name, "")


def _diagnose_row(path: str, lineno: int, line: str, columns: list[str], header: TraceHeader):
    """Raise the error for one data line that does not match the row pattern."""
    fields = line.rstrip("\r").split(",")
    if len(fields) != len(columns):
        raise TraceFormatError(f"{path}:{lineno}: expected {len(columns)} fields "
                               f"({','.join(columns)}), got {len(fields)}")
    for name, t in zip(columns, fields):
        if name in _FLOAT_COLUMNS and not _FLOAT_RE.fullmatch(t):
            raise TraceFormatError(f"{path}:{lineno}: column {name!r} is {t[:40]!r}, expected a "
                                   f"number (ASCII; nan when there is no weight)")
        if name in _INT_COLUMNS and not _INT_RE.fullmatch(t):
            raise TraceFormatError(f"{path}:{lineno}: column {name!r} is {t[:40]!r}, expected an "
                                   f"integer in {_range_text(name, header)} (ASCII digits)")
    raise TraceFormatError(  # pragma: no cover - the row pattern is the fields' patterns joined
        f"{path}:{lineno}: the row does not parse as {','.join(columns)}")


def _parse_rows(path: str, pre: _Preamble) -> dict[str, np.ndarray]:
    """Numeric columns by name, exactly as written. One regular expression validates every row
    (in C); the first line it rejects is diagnosed field by field; the validated text is then
    parsed by numpy (integers of at most 15 digits are exact in float64)."""
    columns, data = pre.columns, pre.data
    n_rows = len(data)
    wanted = [c for c in columns if c in _KNOWN]
    if not data:
        return {c: np.zeros(0, dtype=np.float64 if c in _FLOAT_COLUMNS else np.int64)
                for c in wanted}
    field = {c: (_FLOAT_FIELD if c in _FLOAT_COLUMNS else _INT_FIELD if c in _KNOWN else "[^,]*")
             for c in columns}
    row = ",".join(f"(?:{field[c]})" for c in columns) + r"\r?"
    block = "\n".join(data)
    bad = re.compile(rf"^(?!{row}$)", re.M).search(block)
    if bad is not None:
        j = block.count("\n", 0, bad.start())
        _diagnose_row(path, int(pre.data_lines[j]), data[j], columns, pre.header)
    idx = [columns.index(c) for c in wanted]
    try:
        table = np.loadtxt(io.StringIO(block), delimiter=",", dtype=np.float64, ndmin=2,
                           comments=None, usecols=idx)
    except ValueError:  # pragma: no cover - numpy refused text the pattern accepts: parse in Python
        table = np.array([[float(ln.split(",")[i]) for i in idx] for ln in data], dtype=np.float64)
    out = {}
    for j, c in enumerate(wanted):
        v = table[:, j]
        out[c] = v if c in _FLOAT_COLUMNS else v.astype(np.int64)
    assert all(len(v) == n_rows for v in out.values())
    return out


def read_trace(path: str | os.PathLike) -> RouteTrace:
    """Read a ``route_trace v1`` file into decode events.

    Parameters
    ----------
    path : str or path-like
        The trace file (9 columns, or 10 with ``dropped``; columns are read by name). Blank and
        whitespace-only lines are skipped.

    Returns
    -------
    RouteTrace
        Its ``last_layer`` is the recording's last-layer convention. A convention the arch's
        llama.cpp graph contradicts where no recording confirms the graph (qwen2moe, gpt-oss,
        lfm2moe routing every position) is read with one warning through the ``refsim.trace``
        logger (:func:`warn_convention`).

    Raises
    ------
    TraceFormatError
        Naming the file and line (docs/trace-format.md, "Validation"): missing magic (checked on
        the first bytes, so a binary file is never read whole), NUL bytes or non-UTF-8 text, a
        missing or repeated model line or key, a preamble number outside its bound
        (:data:`~refsim.trace.format.MAX_LAYERS` and friends, ``cache_mb=`` not a budget), a
        layer without ``expert_bytes``/``dense_bytes``, a missing or repeated column, a row with
        the wrong field count (including a truncated last line), a field that is not an ASCII
        number (a preamble integer with a leading zero included), a value out of range (a
        negative or infinite weight), a ``nan`` weight among a position's known weights, a row
        repeating the previous row's key, rows missing from a decode, prefill chunks of two
        last-layer conventions (:mod:`refsim.trace.convention`; qwen3moe: any but FINAL),
        positions out of order, an ``expert_bytes`` cell that disagrees with the preamble, or a duplicate
        ``(turn, phase, step, layer, slot)`` in a trace without speculative decodes.
    """
    path = os.fspath(path)
    # inside refsim.jit.reference() (a small input; no Numba) the per-line path reads it: the
    # fast path's Numba parser run as Python would take longer, and its values are the same
    trace = None if in_reference() else _read_fast(path, rule_messages=True)
    if trace is None:
        trace = _read_slow(path)
    warn_convention(trace)
    return trace


_WARNED: set[str] = set()
"""Warnings already given in this process (each is given once)."""


def convention_warning(trace, path: str | None = None) -> str | None:
    """The warning for a trace whose last-layer convention is not the one its arch's llama.cpp
    graph has in the sources read (:class:`~refsim.trace.convention.ArchGraph` with ``strict``
    False: no recording confirms the graph's rule, so it is not a refusal), naming the file and
    the line of the first prefill chunk that shows the convention; None otherwise.

    Parameters
    ----------
    trace : RouteTrace
        A trace (or one turn of one) that has been read.
    path : str, optional
        The name to give (default ``trace.path``).
    """
    graph = arch_graph(trace.header.arch)
    if graph.convention is None or graph.strict:
        return None
    conv, e = block_convention(trace.block)
    if conv is None or conv == graph.convention:
        return None
    st = trace.block.event_start
    lines = trace.recorded[2][int(st[e]):int(st[e + 1])]
    line = int(lines[lines > 0].min())
    last = int(np.flatnonzero(_routed_layers(trace.block))[-1])
    return (f"{path or trace.path}:{line}: this prefill chunk routes the last layer {last} "
            f"{_shape_words(conv, False)}, where llama.cpp's {trace.header.arch} graph routes it "
            f"{_shape_words(graph.convention, False)} ({graph.source}); read as recorded (no "
            f"recording confirms that graph's rule)")


def warn_convention(trace, path: str | None = None) -> None:
    """Give :func:`convention_warning`'s warning, once per process, through the ``refsim.trace``
    logger (the CLI shows it on stderr as ``refsim CMD: warning: ...``)."""
    import logging

    text = convention_warning(trace, path)
    if text is not None and text not in _WARNED:
        _WARNED.add(text)
        logging.getLogger("refsim.trace").warning(text)


def _read_slow(path: str) -> RouteTrace:
    """The per-line path: every rule checked in order, the first damage reported."""
    pre = _parse_preamble(path, _read_text(path))
    cols = _parse_rows(path, pre)
    del pre.data[:]
    return _build(path, pre, cols, pre.data_lines)


def _read_all(fh) -> tuple[np.ndarray, int]:
    """The whole regular file ``fh`` (at offset 0) in :data:`READ_CHUNK` blocks into one
    buffer, with a progress bar by bytes on a terminal (:mod:`refsim.progress`); bytes past the
    size seen at the start (a file still growing) are read after.

    Returns
    -------
    (uint8 ndarray, int)
        The buffer (the bytes read, then at least :data:`refsim.trace.fastparse.PAD` zero bytes,
        as :func:`~refsim.trace.fastparse.parse_rows` reads) and the number of bytes read.
    """
    from refsim.trace.fastparse import PAD, padded

    size = os.fstat(fh.fileno()).st_size
    buf = np.empty((size + PAD + 7) // 8 * 8, np.uint8)
    view = memoryview(buf)
    got = 0
    with progress.bar(total=size, desc="reading trace", unit="B") as bar:
        while got < size:
            n = fh.readinto(view[got:min(got + READ_CHUNK, size)])
            if not n:
                break
            got += n
            bar.update(n)
    view.release()
    more = fh.read()
    if more:                                   # the file grew while it was read
        data = bytes(buf[:got]) + more
        return padded(data), len(data)
    buf[got:] = 0
    return buf, got


def _read_fast(path: str, rule_messages: bool = False) -> RouteTrace | None:
    """The whole-file path: the rows parsed into narrow columns (:mod:`refsim.trace.fastparse`,
    on several threads), then checked, framed and packed in one pass (:func:`_build_fast`).
    Returns None on any damage or anything it does not handle (a file that is not regular, text
    that is not ASCII in the rows, a weight it cannot convert exactly): :func:`_read_slow` then
    reads the file again and reports the first damage as it always has, so every message is the
    per-line path's by construction.

    With ``rule_messages``, rows that parse but break a rule raise the per-line path's message
    here: :func:`_build` on the parsed columns, which hold the values the per-line parse would
    (every byte, the preamble and every row's text were accepted, so no earlier check of
    :func:`_read_slow` fails; a value out of its range -- an integer, or a negative, infinite or
    too large weight -- is read by a second, ``wide`` parse into int64 and float64 columns, so no
    value prints otherwise) -- in about a quarter of the per-line path's memory."""
    from refsim.trace.fastparse import find_lf, parse_rows

    try:
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as fh:
            if fh.read(len(TRACE_MAGIC) + 1) != TRACE_MAGIC.encode() + b"\n":
                return None
            fh.seek(0)
            buf, size = _read_all(fh)
    except OSError:
        return None
    pos, lineno = len(TRACE_MAGIC) + 1, 2
    while True:                           # the preamble: '#' and blank lines, then the columns
        nl = find_lf(buf, pos, size)
        end = size if nl < pos else nl
        text = bytes(buf[pos:end])
        if not (text.startswith(b"#") or not text.strip()) or nl < pos:
            break
        pos, lineno = nl + 1, lineno + 1
    if lineno > MAX_LINES:
        return None
    head = bytes(buf[:end + 1])
    if b"\0" in head:
        return None                       # a NUL byte: the per-line path's message
    try:
        pre = _parse_preamble(path, head.decode("utf-8"))
        if pre.column_line != lineno or pre.data or PRED_COLUMNS[0] in pre.columns:
            return None                   # the prediction columns: the per-line path reads them
        h = pre.header
        cols = parse_rows(buf, size, end + 1, lineno + 1, pre.columns, h.n_layer, h.n_expert,
                          h.n_expert_used, MAX_POSITION, MAX_LINES)
    except (TraceFormatError, UnicodeDecodeError):
        return None
    if cols is None and rule_messages:    # a value out of its range? read as the per-line parse
        cols = parse_rows(buf, size, end + 1, lineno + 1, pre.columns, h.n_layer, h.n_expert,
                          h.n_expert_used, MAX_POSITION, MAX_LINES, wide=True)
        del buf
        if cols is None:
            return None
        _build(path, pre, cols, cols.pop("line"))    # its first rule's message (a range)
        raise AssertionError(f"{path}: the per-line rules accepted a value out of its range")
    del buf
    if cols is None:
        return None
    try:
        return _build_parsed(path, pre, cols, cols.pop("line"))
    except TraceFormatError:
        if rule_messages:
            raise
        return None


def _build(path: str, pre: _Preamble, cols: dict[str, np.ndarray],
           lines_of: np.ndarray) -> RouteTrace:
    """Range checks, framing, the rows-complete, positions and bytes rules, and the events: the
    per-line path's, every rule in order with its ``file:line`` message (the readable reference
    that :func:`_build_fast` is checked against)."""
    header, columns = pre.header, pre.columns
    n_rows = len(lines_of)
    turn, phase, step, layer = cols["turn"], cols["phase"], cols["step"], cols["layer"]
    slot, expert, residency = cols["slot"], cols["expert"], cols["residency"]
    charged, weight = cols["expert_bytes"], cols["weight"]
    dropped = cols.get("dropped", np.zeros(n_rows, dtype=np.uint8))

    def check(bad: np.ndarray, what: str, name: str, values: np.ndarray) -> None:
        if bad.any():
            j = int(np.argmax(bad))
            raise TraceFormatError(
                f"{path}:{int(lines_of[j])}: column {name!r} is {values[j]}, expected {what}")

    k, n_layer, n_expert = header.n_expert_used, header.n_layer, header.n_expert
    check((phase != 0) & (phase != 1), "0 (prefill) or 1 (decode)", "phase", phase)
    check((turn < 0) | (turn > MAX_POSITION), f"a turn in 0..{MAX_POSITION}", "turn", turn)
    check((step < 0) | (step > MAX_POSITION), f"a position in 0..{MAX_POSITION}", "step", step)
    check((layer < 0) | (layer >= n_layer), f"a layer in 0..{n_layer - 1}", "layer", layer)
    check((slot < 0) | (slot >= k), f"a slot in 0..{k - 1} (n_expert_used={k})", "slot", slot)
    check((expert < 0) | (expert >= n_expert), f"an expert id in 0..{n_expert - 1}", "expert",
          expert)
    check((residency < 0) | (residency > 2), "residency 0, 1 or 2", "residency", residency)
    check(charged < 0, "bytes >= 0", "expert_bytes", charged)
    check((dropped != 0) & (dropped != 1), "0 or 1", "dropped", dropped)
    check((dropped == 1) & (residency != 0), "0 on a dropped slot (only a miss is dropped, "
          "bmoe-engine.md §3.6: the engine writes the residency it queried, a miss)", "residency",
          residency)
    check(~valid_weights(weight),
          "a finite float32 weight >= 0 or nan (the router's softmax/sigmoid weights, maybe scaled "
          "by expert_weights_scale, are never negative)", "weight", weight)
    has_pred = "pred_expert" in cols
    if has_pred:
        pexp, pwt = cols["pred_expert"], cols["pred_weight"]
        check((pexp < -1) | (pexp >= n_expert), _range_text("pred_expert", header), "pred_expert",
              pexp)
        check(~valid_weights(pwt),
              "a finite float32 weight >= 0 or nan (a softmax over the ranked top-k)",
              "pred_weight", pwt)
        check((pexp < 0) & ~np.isnan(pwt), "nan on a row without a prediction (pred_expert -1)",
              "pred_weight", pwt)

    # Frame decodes: a new one starts when turn/phase changes or (layer, step, slot) fails to
    # increase strictly. Single-layer traces: every decode-phase step change starts one too.
    new = np.ones(n_rows, dtype=bool)
    if n_rows > 1:
        same_tp = (turn[1:] == turn[:-1]) & (phase[1:] == phase[:-1])
        inc = (layer[1:] > layer[:-1]) | ((layer[1:] == layer[:-1]) & (
            (step[1:] > step[:-1]) | ((step[1:] == step[:-1]) & (slot[1:] > slot[:-1]))))
        cont = same_tp & inc
        if n_layer == 1:
            cont &= ~((phase[1:] == 1) & (step[1:] != step[:-1]))
        new[1:] = ~cont
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], n_rows)
    if n_rows:
        _check_rows_complete(path, header, pre.layer_lines, lines_of, new, turn, phase, step,
                             layer, slot, dropped)

    events: list[DecodeEvent] = []
    res_list: list[np.ndarray] = []
    bytes_list: list[np.ndarray] = []
    line_list: list[np.ndarray] = []
    for a, b in zip(starts.tolist(), ends.tolist()):
        steps = _sorted_unique(step[a:b])
        pos_idx = np.searchsorted(steps, step[a:b])
        shape = (len(steps), n_layer, k)
        routes = np.full(shape, NOT_ROUTED, dtype=np.int16)
        weights = np.full(shape, np.nan, dtype=np.float32)
        res = np.full(shape, -1, dtype=np.int8)
        chg = np.zeros(shape, dtype=np.int64)
        lines_arr = np.zeros(shape, dtype=np.int32)
        drop = np.zeros(shape, dtype=bool)
        idx = (pos_idx, layer[a:b], slot[a:b])
        routes[idx] = expert[a:b]
        weights[idx] = weight[a:b]
        res[idx] = residency[a:b]
        chg[idx] = charged[a:b]
        lines_arr[idx] = lines_of[a:b]
        drop[idx] = dropped[a:b] != 0
        pred = {}
        if has_pred:
            pr = np.full(shape, NOT_ROUTED, dtype=np.int16)
            pw = np.full(shape, np.nan, dtype=np.float32)
            pr[idx] = pexp[a:b]
            pw[idx] = pwt[a:b]
            some = pr >= 0
            partial = some.any(axis=2) & ~some.all(axis=2)
            if partial.any():
                p0, l0 = (int(v[0]) for v in np.nonzero(partial))
                raise TraceFormatError(
                    f"{path}:{int(lines_arr[p0, l0][lines_arr[p0, l0] > 0].min())}: position "
                    f"{int(steps[p0])} layer {l0} has a prediction (pred_expert) on some slots "
                    f"only; expected all {k} ranks or none")
            pred = {"pred_routes": pr, "pred_weights": pw}
        if int(phase[a]) == 0:
            kind = DecodeKind.PREFILL
        else:
            kind = DecodeKind.PLAIN if len(steps) == 1 else DecodeKind.VERIFY
        events.append(DecodeEvent(
            kind=kind, positions=steps.astype(np.int64), routes=routes, weights=weights,
            dropped=drop if drop.any() else None, turn=int(turn[a]),
            n_draft=len(steps) - 1 if kind is DecodeKind.VERIFY else 0, **pred))
        res_list.append(res)
        bytes_list.append(chg)
        line_list.append(lines_arr)

    _check_weights_known(path, events, line_list)
    _check_charged(path, header.expert_bytes, events, res_list, bytes_list, line_list)
    speculative = any(e.kind is DecodeKind.VERIFY for e in events)
    if not speculative and n_rows:
        keys = np.stack([turn, phase, step, layer, slot], axis=1)
        _, first_idx, counts = np.unique(keys, axis=0, return_index=True, return_counts=True)
        if (counts > 1).any():
            dup_keys = keys[first_idx[counts > 1]]
            # report the earliest second occurrence
            seen: set[tuple[int, ...]] = set()
            dup_set = {tuple(r) for r in dup_keys.tolist()}
            for j, r in enumerate(keys.tolist()):
                t = tuple(r)
                if t in dup_set:
                    if t in seen:
                        raise TraceFormatError(
                            f"{path}:{int(lines_of[j])}: duplicate (turn, phase, step, layer, "
                            f"slot) = {t} in a trace without speculative decodes; expected each "
                            f"routed slot once")
                    seen.add(t)
    _check_positions(path, events, line_list)
    _infer_accepted(events)
    return RouteTrace(header=header, events=events, residency=res_list, charged_bytes=bytes_list,
                      line_numbers=line_list, path=path, has_dropped_column="dropped" in columns,
                      n_rows=n_rows, speculative=speculative, column_line=pre.column_line,
                      has_pred_columns=has_pred)


class _FastRefused(TraceFormatError):
    """The fast path does not accept the rows (the per-line path reads them and says why)."""


def _build_fast(path: str, pre: _Preamble, cols: dict[str, np.ndarray],
                lines_of: np.ndarray) -> RouteTrace:
    """The fast path's :func:`_build`: every rule and the framing in one Numba pass
    (:func:`refsim.trace.fastbuild.frame_rows`), the events as one
    :class:`~refsim.events.EventBlock`. It gives no message of its own: on any failure it raises
    :class:`_FastRefused` and the caller falls back to the per-line path. Without verify decodes
    the duplicate-key search is not needed: the positions rule implies it (within a turn every
    chunk and plain decode starts right after the previous one, so no position repeats, and
    turns do not decrease).

    Raises
    ------
    _FastRefused
        The rows break a rule, or their shape is one this path leaves to the per-line path.
    """
    from refsim.trace.fastbuild import frame_rows

    h = pre.header
    graph = arch_graph(h.arch)
    got = None
    for cut in ((graph.convention == FINAL,) if graph.strict else (True, False)):
        got = frame_rows(cols, lines_of, h.n_layer, h.n_expert_used, h.n_expert, cut,
                         h.expert_bytes)
        if got is not None:
            break
    if got is None:
        raise _FastRefused(f"{path}: refused by the fast path")
    block, res, chg, lns = got
    return RouteTrace(header=h, block=block, recorded=(res, chg, lns), path=path,
                      has_dropped_column="dropped" in pre.columns, n_rows=int(lines_of.size),
                      speculative=bool((block.kind == DecodeKind.VERIFY).any()),
                      column_line=pre.column_line)


def _build_parsed(path: str, pre: _Preamble, cols: dict[str, np.ndarray],
                  lines_of: np.ndarray) -> RouteTrace:
    """The trace of rows the fast parser read: :func:`_build_fast`, or where it leaves them (a
    trace routing one layer) the per-line :func:`_build` on the same columns.

    Raises
    ------
    TraceFormatError
        A rule fails (the caller reads the file by the per-line path for its message).
    """
    try:
        return _build_fast(path, pre, cols, lines_of)
    except _FastRefused:
        return _build(path, pre, cols, lines_of)


def _routed_layers(block: EventBlock) -> np.ndarray:
    """(n_layer,) bool: the layers at least one row of ``block`` routes."""
    return (block.routes >= 0).any(axis=(0, 2))


def _sorted_unique(x: np.ndarray) -> np.ndarray:
    """``np.unique(x)`` of a 1-D array: its distinct values, sorted. Written out because plain
    ``np.unique`` calls ``np.ma.is_masked``, whose import (numpy.ma, ~20 ms) was a tenth of a
    small replay's start-up (issue 17); tests/trace checks it against ``np.unique``."""
    s = np.sort(x)
    if s.size == 0:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def _shape_words(shape: str, more: bool) -> str:
    """How a prefill chunk of ``shape`` routes the last layer, for messages."""
    if shape == EVERY:
        return "at every position"
    return "nowhere (a chunk before the end of its turn's prefill)" if more else \
        "at its final position only"


def _last_layer_convention(path: str, arch: str, last: int, lines_of: np.ndarray, g0: np.ndarray,
                           g_ev: np.ndarray, g_step: np.ndarray, is_last: np.ndarray,
                           ev_phase: np.ndarray, ev_final: np.ndarray, more: np.ndarray,
                           n_pos: np.ndarray) -> np.ndarray:
    """The last-layer convention of the rows (:mod:`refsim.trace.convention`): the arch's when
    its graph and a recording fix it (:class:`~refsim.trace.convention.ArchGraph` ``strict``),
    else the one the first prefill chunk that tells the two apart shows.

    Returns
    -------
    (n_ev,) bool ndarray
        The decodes whose last layer is checked by the :data:`FINAL` rule (the prefill chunks,
        when the convention is FINAL or none is shown).

    Raises
    ------
    TraceFormatError
        A prefill chunk shows the other convention than an earlier one (a trace mixing them),
        naming the chunk's first row at the last layer (or its first row) and the earlier one.
    """
    graph = arch_graph(arch)
    conv = graph.convention if graph.strict else None
    if conv is None:
        pre = np.flatnonzero(ev_phase == 0)
        last_g = np.flatnonzero(is_last & (ev_phase[g_ev] == 0))
        lo = np.searchsorted(g_ev[last_g], pre, "left")
        hi = np.searchsorted(g_ev[last_g], pre, "right")

        def line_of(i: int) -> int:
            e = int(pre[i])
            g = last_g[lo[i]] if hi[i] > lo[i] else int(np.searchsorted(g_ev, e, "left"))
            return int(lines_of[g0[g]])

        first = -1
        for i, e in enumerate(pre.tolist()):
            shape = chunk_shape(int(n_pos[e]), g_step[last_g[lo[i]:hi[i]]], int(ev_final[e]),
                                bool(more[e]))
            if shape is None:
                continue
            if conv is None:
                conv, first = shape, i
            elif shape != conv:
                e0 = int(pre[first])
                raise TraceFormatError(
                    f"{path}:{line_of(i)}: a prefill chunk routes the last layer {last} "
                    f"{_shape_words(shape, bool(more[e]))}, where the prefill chunk on line "
                    f"{line_of(first)} routes it {_shape_words(conv, bool(more[e0]))}; expected one "
                    f"last-layer convention per trace (one llama.cpp graph made the recording; "
                    f"two recordings joined?)")
    return (ev_phase == 0) & (conv != EVERY)


def _check_rows_complete(path: str, header: TraceHeader, layer_lines: dict[int, int],
                         lines_of: np.ndarray, new: np.ndarray, turn: np.ndarray,
                         phase: np.ndarray, step: np.ndarray, layer: np.ndarray,
                         slot: np.ndarray, dropped: np.ndarray) -> None:
    """Every decode has its full set of rows (docs/trace-format.md, "Validation"), checked on the
    rows themselves before any (position, layer, slot) array is allocated, so the arrays are never
    more than a few times the rows.

    The format writes one row per routed slot, dropped slots included, so a routed (position,
    layer) has all ``n_expert_used`` slots, of which at least the top-weighted one is not dropped
    (bmoe-engine.md §3.6). Every layer of the preamble is routed somewhere, except the last when
    it is an ``--mtp`` head (the engine does not record its draft routings); ``L`` is the set of
    layers the rows route. Every position of a decode is routed in every layer of ``L``. A
    prefill chunk routes every layer of ``L`` but the last at each position; the last layer is
    routed for positions that produce logits only when the recording's graph cuts it (the
    :data:`~refsim.trace.convention.FINAL` convention, :func:`_last_layer_convention`; llama.cpp
    gathers them before the last layer, router_hook.cpp ``flush_pending``), which in the
    engine's prefill is the prompt's final token (bmoe-engine.md §2, "logits on the last token
    only"): the chunk that ends a turn's prefill routes it at its final position, an earlier
    chunk of the same turn routes it nowhere. Under :data:`~refsim.trace.convention.EVERY` a
    prefill routes it at every position, as a decode does.

    ``new`` marks the first row of each decode (the framing); within a decode the rows strictly
    increase in ``(layer, step, slot)``, so each (decode, layer, step) is a run of rows.
    """
    n_rows, k, n_layer = len(step), header.n_expert_used, header.n_layer
    routed = np.zeros(n_layer, dtype=bool)
    routed[layer] = True
    unrouted = np.flatnonzero(~routed[:-1])
    if unrouted.size:
        il = int(unrouted[0])
        raise TraceFormatError(
            f"{path}:{layer_lines[il]}: no row routes layer {il} ({unrouted.size} layer(s) below "
            f"the last route no row); expected every layer of the preamble routed (only an --mtp "
            f"trace leaves one out: its last layer, {n_layer - 1}, the head)")
    L = np.flatnonzero(routed)
    last = int(L[-1])
    # a row repeating the key of the row before it is a pasted duplicate: within a decode the key
    # increases, and across a decode boundary the last row (last layer, slot k-1) and the first
    # (first layer, slot 0) differ unless only one layer is routed with k = 1
    if n_rows > 1 and (k > 1 or L.size > 1):
        same = ((step[1:] == step[:-1]) & (layer[1:] == layer[:-1]) & (slot[1:] == slot[:-1])
                & (turn[1:] == turn[:-1]) & (phase[1:] == phase[:-1]))
        if same.any():
            j = int(np.argmax(same)) + 1
            raise TraceFormatError(
                f"{path}:{int(lines_of[j])}: a duplicate row: (turn, phase, step, layer, slot) = "
                f"{(int(turn[j]), int(phase[j]), int(step[j]), int(layer[j]), int(slot[j]))} as on line "
                f"{int(lines_of[j - 1])}; expected each routed slot once per decode (a row pasted twice?)")
    ev = np.cumsum(new) - 1
    g_new = new.copy()
    g_new[1:] |= (layer[1:] != layer[:-1]) | (step[1:] != step[:-1])
    g0 = np.flatnonzero(g_new)                                  # first row of each group
    count = np.diff(np.append(g0, n_rows))
    bad = np.flatnonzero(count != k)
    if bad.size:
        a = int(g0[bad[0]])
        have = slot[a:a + int(count[bad[0]])].tolist()
        raise TraceFormatError(
            f"{path}:{int(lines_of[a])}: layer {int(layer[a])} at step {int(step[a])} has rows for "
            f"slots {have} only; expected all {k} slots (one row per routed slot; a deleted row or "
            f"a truncated file?)")
    live = np.minimum.reduceat(dropped, g0) if n_rows else dropped
    if (live == 1).any():
        a = int(g0[np.argmax(live == 1)])
        raise TraceFormatError(
            f"{path}:{int(lines_of[a])}: every slot of layer {int(layer[a])} at step "
            f"{int(step[a])} is dropped; expected the top-weighted slot kept (--drop-cold-experts "
            f"never drops it, bmoe-engine.md §3.6)")
    g_ev, g_layer, g_step = ev[g0], layer[g0], step[g0]
    ev_first = np.flatnonzero(new)                              # first row of each decode
    n_ev = ev_first.size
    ev_phase, ev_turn = phase[ev_first], turn[ev_first]
    ev_final = np.maximum.reduceat(step, ev_first)              # each decode's last position
    is_last = g_layer == last
    # a turn's prefill chunk is followed by another chunk of that turn, or it ends the prefill
    more = np.zeros(n_ev, dtype=bool)
    more[:-1] = (ev_phase[1:] == 0) & (ev_phase[:-1] == 0) & (ev_turn[1:] == ev_turn[:-1])
    pos_key = g_ev.astype(np.int64) * (MAX_POSITION + 1) + g_step
    keys, inv = np.unique(pos_key, return_inverse=True)
    p_ev = keys // (MAX_POSITION + 1)
    cut_ev = _last_layer_convention(path, header.arch, last, lines_of, g0, g_ev, g_step, is_last,
                                    ev_phase, ev_final, more, np.bincount(p_ev, minlength=n_ev))
    prefill_g = cut_ev[g_ev]
    wrong = np.flatnonzero(prefill_g & is_last & ((g_step != ev_final[g_ev]) | more[g_ev]))
    if wrong.size:
        g = int(wrong[0])
        e = int(g_ev[g])
        why = ("an earlier chunk of a turn's prefill routes it nowhere (logits on the prompt's "
               "last token only)" if more[e] else
               f"it is routed for the chunk's final position {int(ev_final[e])} only")
        raise TraceFormatError(
            f"{path}:{int(lines_of[g0[g]])}: a prefill chunk routes the last layer {last} at step "
            f"{int(g_step[g])}; expected the last-layer rule: {why} (swapped or damaged turn/phase "
            f"columns?)")
    need = ~(prefill_g & is_last)
    have_n = np.bincount(inv[need], minlength=keys.size)
    want_n = np.where(cut_ev[p_ev], L.size - 1, L.size)
    short = np.flatnonzero(have_n != want_n)
    last_done = np.zeros(n_ev, dtype=bool)
    last_done[g_ev[prefill_g & is_last]] = True
    ends_prefill = cut_ev & ~more & ~last_done
    if short.size or ends_prefill.any():
        e_short = int(p_ev[short[0]]) if short.size else n_ev
        e_end = int(np.argmax(ends_prefill)) if ends_prefill.any() else n_ev
        e = min(e_short, e_end)
        first = int(lines_of[ev_first[e]])
        if e == e_short:
            s = int(keys[short[0]] % (MAX_POSITION + 1))
            got = set(g_layer[(g_ev == e) & (g_step == s) & need].tolist())
            want = L[L != last] if cut_ev[e] else L
            il = int(next(x for x in want.tolist() if x not in got))
            raise TraceFormatError(
                f"{path}:{first}: the {'decode' if ev_phase[e] == 1 else 'prefill'} starting here "
                f"has no rows for layer {il} at step {s}; expected every position in every layer "
                f"the trace routes ({_span(L)}) (a file cut at a row boundary, or rows deleted?)")
        raise TraceFormatError(
            f"{path}:{first}: the prefill chunk starting here ends its turn's prefill but has no "
            f"rows for the last layer {last} at its final step {int(ev_final[e])}; expected them "
            f"(the prompt's final position produces logits: the last-layer rule; rows deleted or "
            f"a file cut?)")


def _check_positions(path: str, events: list[DecodeEvent], lines: list[np.ndarray]) -> None:
    """Positions follow the loop (docs/trace-format.md, "Validation"): turns do not decrease, and
    within a turn the prefill chunks come before the decodes; a position's top-k experts
    are distinct; a decode's positions are consecutive; within a turn each prefill chunk or first
    decode starts right after the previous chunk, and a decode starts after the previous decode's
    first position and at most one past its last (the verify accepted 0..n_draft drafts). A missing
    decode or chunk breaks one of these. (A trace may open with a decode: a decode-only excerpt is
    a valid trace.)"""
    def first_line(i: int) -> int:
        ln, present = lines[i], events[i].routes >= 0
        return int(ln[present].min())

    for i, ev in enumerate(events):
        r = np.sort(ev.routes.astype(np.int64), axis=2)
        dup = (r[:, :, 1:] == r[:, :, :-1]) & (r[:, :, 1:] >= 0)
        if dup.any():
            p, il, _ = (int(v[0]) for v in np.nonzero(dup))
            e = int(r[p, il, 1:][dup[p, il]][0])
            row = int(lines[i][p, il][ev.routes[p, il] == e].max())
            raise TraceFormatError(f"{path}:{row}: expert {e} routed twice at step {int(ev.positions[p])} "
                                   f"layer {il}; expected the top-k experts of a position to be distinct")
        if ev.n_pos > 1 and (np.diff(ev.positions) != 1).any():
            raise TraceFormatError(f"{path}:{first_line(i)}: the decode starting here covers steps "
                                   f"{ev.positions.tolist()}; expected consecutive positions")
    for i in range(1, len(events)):
        a, b = events[i - 1], events[i]
        if b.turn < a.turn:
            raise TraceFormatError(f"{path}:{first_line(i)}: turn {b.turn} after turn {a.turn}; "
                                   f"expected turns in increasing order (a damaged turn column?)")
        if a.turn == b.turn and a.phase == 1 and b.phase == 0:
            raise TraceFormatError(
                f"{path}:{first_line(i)}: a prefill chunk after a decode of the same turn {b.turn}; "
                f"expected a turn's prefill before its decodes (a damaged phase column?)")
        if a.turn != b.turn:
            continue
        start, lo, hi = int(b.positions[0]), int(a.positions[0]) + 1, int(a.positions[-1]) + 1
        if a.phase == 0:
            lo = hi                                     # after a prefill chunk: exactly next
        if not lo <= start <= hi:
            want = f"step {hi}" if lo == hi else f"a step in {lo}..{hi}"
            raise TraceFormatError(
                f"{path}:{first_line(i)}: {'a decode' if b.phase == 1 else 'a prefill chunk'} starts "
                f"at step {start} after the {'decode' if a.phase == 1 else 'prefill'} of steps "
                f"{int(a.positions[0])}..{int(a.positions[-1])}; expected {want} (a missing decode "
                f"or chunk?)")


def _check_weights_known(path: str, events: list[DecodeEvent], lines: list[np.ndarray]) -> None:
    """A (position, layer)'s weights are all ``nan`` or none: the engine writes ``nan`` for a
    whole layer record when the graph exposed no weight node, else the node's values
    (router_hook.cpp ``flush_pending``, ``have_w``; a NaN the model computed fills its token's
    whole softmax row). One ``nan`` among weights is damage (a weight lost, not unknown)."""
    for ev, ln in zip(events, lines):
        nan = np.isnan(ev.weights) & (ev.routes >= 0)
        some = nan.any(axis=2) & ~nan.all(axis=2)
        if some.any():
            p, il = (int(v[0]) for v in np.nonzero(some))
            row = int(ln[p, il][nan[p, il]].min())
            raise TraceFormatError(
                f"{path}:{row}: weight nan at step {int(ev.positions[p])} layer {il} where the other "
                f"slots have weights; expected all of a position's weights in a layer nan (no weight "
                f"node) or none")


def _span(layers: np.ndarray) -> str:
    lo, hi = int(layers[0]), int(layers[-1])
    return f"layers {lo}..{hi}" if layers.size == hi - lo + 1 else f"layers {layers.tolist()}"


def _check_charged(path: str, expert_bytes: np.ndarray, events: list[DecodeEvent],
                   residency: list[np.ndarray], charged: list[np.ndarray],
                   lines: list[np.ndarray]) -> None:
    """Every row of one expert in a layer batch has the same residency (the engine queries it for
    the batch's ids before loading them, router_hook.cpp; "duplicates within a batch all show
    residency 0", bmoe-engine.md §4.5), and the ``expert_bytes`` column is the preamble's entry
    size on the first non-dropped miss row of an expert in its layer batch and 0 on every other
    row (hits, repeats, dropped slots), bytes (bmoe-engine.md §4.5; docs/trace-format.md)."""
    for ev, res, chg, ln in zip(events, residency, charged, lines):
        n_pos, n_layer, k = ev.routes.shape
        lm = lambda a: a.transpose(1, 0, 2).reshape(-1)      # noqa: E731 - layer-major batch order
        r, c, rs, rows = lm(ev.routes).astype(np.int64), lm(chg), lm(res), lm(ln)
        layer = np.repeat(np.arange(n_layer), n_pos * k)
        routed = r >= 0
        looked_up = routed if ev.dropped is None else routed & ~lm(ev.dropped)
        every = np.where(routed, layer * (int(r.max(initial=0)) + 1) + r, -1)
        _, at, inv = np.unique(every, return_index=True, return_inverse=True)
        differ = routed & (rs != rs[at][inv])
        if differ.any():
            j = int(np.flatnonzero(differ)[0])
            j0 = int(at[inv[j]])
            raise TraceFormatError(
                f"{path}:{int(rows[j])}: expert {int(r[j])} of layer {int(layer[j])} has residency "
                f"{int(rs[j])} here and {int(rs[j0])} on line {int(rows[j0])} of the same layer "
                f"batch; expected one residency per expert per batch (queried before the batch is "
                f"loaded)")
        miss = (rs == 0) & looked_up
        key = np.where(looked_up, every, -1)
        ids, first = np.unique(key, return_index=True)
        first_miss = np.zeros(r.size, dtype=bool)
        first = first[ids >= 0]
        first_miss[first] = miss[first]
        want = np.where(first_miss, expert_bytes[layer], 0)
        bad = routed & (c != want)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            why = (f"layer {int(layer[j])}'s expert_bytes in the preamble, charged on the first miss "
                   f"row of an expert in its layer batch" if first_miss[j] else
                   "a hit, a repeat of the expert in its layer batch, or a dropped slot")
            raise TraceFormatError(f"{path}:{int(rows[j])}: column 'expert_bytes' is {int(c[j])}, "
                                   f"expected {int(want[j])} ({why})")


def _infer_accepted(events: list[DecodeEvent]) -> None:
    """Fill ``accepted`` of verify events from the next decode's first position.

    A verify decode at base ``p`` that accepted ``a`` drafts is followed (same turn) by a
    decode at ``p + 1 + a``. The last verify decode of a turn keeps ``accepted=None``.
    """
    for i, ev in enumerate(events):
        if ev.kind is not DecodeKind.VERIFY:
            continue
        nxt = events[i + 1] if i + 1 < len(events) else None
        if nxt is not None and nxt.phase == 1 and nxt.turn == ev.turn:
            acc = int(nxt.positions[0] - ev.positions[0] - 1)
            if 0 <= acc <= ev.n_draft:
                object.__setattr__(ev, "accepted", acc)
