"""Read a route trace turn by turn, in memory bounded by one turn plus a block of bytes
(``refsim replay --stream``): the reader's fast passes (:mod:`refsim.trace.fastparse`,
:mod:`refsim.trace.fastbuild`) on one block of rows at a time, each turn framed and checked as
a whole trace is (docs/trace-format.md, "Reading at scale").
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from refsim import progress
from refsim.errors import TraceFormatError
from refsim.trace.fastparse import (KNOWN, PAD, column_bounds, column_dtypes, count_lf, find_lf,
                                    parse_rows)
from refsim.trace.format import MAX_POSITION, PRED_COLUMNS, TRACE_MAGIC, TraceHeader
from refsim.trace.reader import (MAX_LINES, RouteTrace, _build_parsed, _check_bytes, _checked_chunks,
                                 _parse_preamble, _parse_rows, _Preamble, _routed_layers,
                                 _truncated, read_trace, valid_weights, warn_convention)

STREAM_BLOCK = 1 << 24
"""Bytes of rows :func:`iter_trace_turns` parses at a time (16 MiB)."""


@dataclass
class TraceStream:
    """What :func:`iter_trace_turns` has read so far, for a streaming replay's report: the
    attributes of :class:`RouteTrace` a report prints, filled in as turns are yielded."""

    header: TraceHeader
    path: str
    column_line: int
    n_rows: int = 0
    n_events: int = 0
    n_prompt: int = 0
    routed: np.ndarray | None = None        # (n_layer,) bool, the layers the rows route
    last_layer: str | None = None           # the last-layer convention of the turns so far

    require_rows = RouteTrace.require_rows

    @property
    def unrouted_layers(self) -> list[int]:
        """As :attr:`RouteTrace.unrouted_layers`."""
        seen = self.routed
        return np.flatnonzero(~seen).tolist() if seen is not None and seen.any() else []


def iter_trace_turns(path: str | os.PathLike, block: int = STREAM_BLOCK):
    """Read a route trace turn by turn, in memory bounded by one turn plus ``block`` bytes.

    Returns
    -------
    (TraceStream, iterator of RouteTrace)
        The stream's running counts, and one :class:`RouteTrace` per turn (the turn's events,
        residency, bytes and line numbers; ``line_numbers`` are the file's), in file order.

    Each turn is validated as :func:`read_trace` validates a whole trace, plus what ties turns
    together: turns increase, and every turn routes the same layers (a trace valid as a whole
    does: every decode routes every layer the trace routes, and a turn's prefill ends at its last
    layer), and every turn has one last-layer convention (:mod:`refsim.trace.convention`). So a
    valid file yields exactly :func:`read_trace`'s events. A damaged file raises
    the same ``TraceFormatError`` as :func:`read_trace`: damage in the bytes or a row's text (a
    NUL, not UTF-8, a run killed mid-row, a field that is not a number) is found in bounded
    memory (:func:`_rescue`); rows that parse but break a rule are diagnosed on the whole file
    (:func:`_stream_failed`: the per-line rules on the fast parser's columns, ~3-6x the file's
    size in memory). A
    file that is not regular (a FIFO, ``/dev/stdin``) is copied to a temporary file and streamed
    from there (:func:`_spooled`).

    Raises
    ------
    TraceFormatError
        As :func:`read_trace`, when the turns are iterated.
    """

    path = os.fspath(path)
    if not os.path.isfile(path):
        if os.path.exists(path) and not os.path.isdir(path):
            return _spooled(path, block)         # a FIFO or device: copied to a temporary file
        return _whole(path)                     # read_trace's message
    try:
        fh = open(path, "rb")
    except OSError:
        return _whole(path)
    parts: list[bytes] = []                  # the preamble, line by line (joined once: linear time)
    size = n_lines = 0
    while True:
        line = fh.readline(1 << 26)
        parts.append(line)
        size += len(line)
        n_lines += line.endswith(b"\n")
        if size > 1 << 26 or not line:
            break
        if n_lines > 1 and not (line.startswith(b"#") or not line.strip()):
            break
    head = b"".join(parts)
    pre = None
    if (head.startswith(TRACE_MAGIC.encode() + b"\n") and head.endswith(b"\n")
            and b"\0" not in head):
        try:
            pre = _parse_preamble(path, head.decode("utf-8"))
        except (TraceFormatError, UnicodeDecodeError):
            pre = None
    if (pre is None or pre.data or pre.column_line != head.count(b"\n")
            or PRED_COLUMNS[0] in pre.columns):    # prediction columns: read whole (per-line path)
        fh.close()
        return _whole(path)                     # the per-line path's message, or its trace
    h = pre.header
    stream = TraceStream(header=h, path=path, column_line=pre.column_line)
    yield_state = {"line": pre.column_line + 1, "last_turn": -1}

    def turns():
        with fh, progress.bar(total=os.fstat(fh.fileno()).st_size, desc="streaming trace",
                              unit="B") as bar:
            bar.update(fh.tell())
            yield from _turns(bar)

    def _turns(bar):
        carry: dict[str, np.ndarray] | None = None
        buf = np.zeros((block + PAD + 7) // 8 * 8, np.uint8)
        have = 0                       # bytes of an unfinished line kept at the front of buf
        while True:
            if buf.size < have + block + PAD:          # a line longer than a block: grow
                grown = np.zeros((have + block + PAD + 7) // 8 * 8, np.uint8)
                grown[:have] = buf[:have]
                buf = grown
            n = fh.readinto(memoryview(buf)[have:have + block])
            bar.update(n)
            size = have + n
            cut = find_lf(buf, 0, size, backwards=True) + 1 if n else size
            if n and not cut:
                have = size
                continue
            cols = parse_rows(buf, cut, 0, yield_state["line"], pre.columns, h.n_layer,
                              h.n_expert, h.n_expert_used, MAX_POSITION, MAX_LINES)
            if cols is None:                          # damaged bytes or rows, or rows it leaves
                cols = _rescue(path, pre, buf, cut, yield_state["line"])
            yield_state["line"] += int(count_lf(buf, 0, cut))
            buf[:size - cut] = buf[cut:size]
            have = size - cut
            chunk = n
            if carry is not None:
                cols = {c: np.concatenate([carry[c], cols[c]]) for c in cols}
            turn = cols["turn"]
            if not chunk:
                cut_rows = turn.size                  # the end of the file ends the turn
            else:
                change = np.flatnonzero(turn[1:] != turn[:-1]) + 1
                cut_rows = int(change[-1]) if change.size else 0
            starts = np.append(np.flatnonzero(np.diff(turn[:cut_rows]) != 0) + 1, cut_rows)
            a = 0
            for b in starts.tolist():
                if b > a:
                    yield _stream_turn(path, pre, {c: v[a:b] for c, v in cols.items()},
                                       stream, yield_state)
                a = b
            carry = {c: v[cut_rows:] for c, v in cols.items()}
            if not chunk:
                return

    return stream, turns()


def _spooled(path: str, block: int):
    """:func:`iter_trace_turns` of a file that is not regular (a FIFO, ``/dev/stdin``): its bytes are
    copied to a temporary file first (checked piece by piece as :func:`read_trace` checks them, so
    ``/dev/zero`` is refused at its first NUL, never copied), then streamed from there. Memory stays
    bounded by a turn plus a block; the disk holds the copy until the turns are iterated. On Linux
    the copy is unlinked at once and read through ``/proc/self/fd/N``, so nothing is left behind
    however the process ends (SIGKILL included); elsewhere it is removed when the turns end.
    Messages and paths name ``path``.

    Raises
    ------
    TraceFormatError
        As :func:`read_trace`, or the temporary file cannot be written (in ``$TMPDIR`` when it
        is set, else Python's :func:`tempfile.gettempdir`).
    """
    import tempfile

    folder = os.environ.get("TMPDIR") or tempfile.gettempdir()   # $TMPDIR exactly, when set

    def cannot(exc: OSError) -> TraceFormatError:
        return TraceFormatError(f"{path}: cannot stream it through a temporary file in {folder} "
                                f"($TMPDIR): {exc.strerror}")
    try:
        fd, name = tempfile.mkstemp(prefix="refsim-stream-", suffix=".route.csv", dir=folder)
    except OSError as exc:
        raise cannot(exc) from None
    copy = f"/proc/self/fd/{fd}"
    if os.path.exists(copy):
        os.unlink(name)                         # the copy lives while fd is open
    else:
        copy = name

    def done():
        os.close(fd)
        if copy == name:
            try:
                os.unlink(name)
            except OSError:
                pass

    def renamed_error(exc: TraceFormatError) -> TraceFormatError:
        return TraceFormatError(str(exc).replace(copy, path))

    try:
        out = os.fdopen(os.dup(fd), "wb", buffering=0)     # unbuffered: every write checked here
        with out, progress.bar(total=None, desc="copying trace", unit="B") as bar:
            for piece in _checked_chunks(path):
                try:
                    view = memoryview(piece)
                    while view:
                        view = view[out.write(view):]
                except OSError as exc:
                    raise cannot(exc) from None
                bar.update(len(piece))
        stream, turns = iter_trace_turns(copy, block)
    except TraceFormatError as exc:
        done()
        raise renamed_error(exc) from None
    except BaseException:
        done()
        raise
    stream.path = path

    def renamed():
        try:
            for tr in turns:
                tr.path = path
                yield tr
        except TraceFormatError as exc:
            raise renamed_error(exc) from None
        finally:
            done()
    return stream, renamed()


def _whole(path: str):
    tr = read_trace(path)
    stream = TraceStream(header=tr.header, path=path, column_line=tr.column_line,
                         n_rows=tr.n_rows, n_events=tr.n_events, n_prompt=tr.n_prompt,
                         routed=_routed_layers(tr.block), last_layer=tr.last_layer)
    return stream, iter([tr])


def _stream_failed(path: str):
    """Raise :func:`read_trace`'s message for a file whose rows parse but break a rule. It is read
    whole, as the per-line path checks each rule over the whole file before the next (so the first
    message may be about a later turn): the per-line rules on the fast parser's columns
    (``reader._read_fast(rule_messages=True)``, ~4-7x the file in memory)."""
    read_trace(path)
    raise AssertionError(f"{path}: read_trace accepted a file the stream refused")


def _rescue(path: str, pre: _Preamble, buf: np.ndarray, cut: int, first_line: int) -> dict:
    """The rows ``buf[:cut]`` (lines from ``first_line``) that the fast parser refused, read by the
    per-line rules, in memory bounded by the block: the same checks in the same order as
    :func:`read_trace` (the whole file's bytes -- NUL, line count, UTF-8 -- then a truncated last
    line, then this block's rows; the blocks before it parsed, so their rows are sound).

    Returns
    -------
    dict of str to ndarray
        The columns in :func:`~refsim.trace.fastparse.parse_rows`'s dtypes, with ``"line"``:
        the fast parser left these rows (a byte it does not handle, a weight it cannot convert
        exactly) but they are sound.

    Raises
    ------
    TraceFormatError
        :func:`read_trace`'s message for the file. A value outside its column's range
        (:func:`~refsim.trace.fastparse.column_bounds`, which the narrow dtypes hold, or
        :func:`~refsim.trace.reader.valid_weights`) is a broken
        rule: the file is read whole for the message (:func:`_stream_failed`).
    """
    n_lf = _check_bytes(path)
    _check_last_line(path, n_lf)
    lines = bytes(buf[:cut]).decode("utf-8").split("\n")
    keep = [j for j, text in enumerate(lines) if text.strip()]
    rows = _Preamble(pre.header, pre.columns, pre.column_line, pre.layer_lines,
                     [lines[j] for j in keep], np.asarray(keep, dtype=np.int64) + first_line)
    wide = _parse_rows(path, rows)                 # the first bad row's message, if any
    h = pre.header
    lo, hi = column_bounds(h.n_layer, h.n_expert, h.n_expert_used, MAX_POSITION)
    dtypes = column_dtypes(h.n_expert_used)
    for name, v in wide.items():       # a broken rule (and the framing kernels index by values)
        j = KNOWN.index(name)
        if not (valid_weights(v).all() if name == "weight" else
                not v.size or lo[j] <= v.min() <= v.max() <= hi[j]):
            _stream_failed(path)
    out = {name: v.astype(dtypes[name]) for name, v in wide.items()}
    out["line"] = rows.data_lines.astype(np.int32)
    return out


def _check_last_line(path: str, n_lf: int, piece: int = 1 << 20) -> None:
    """Raise :func:`read_trace`'s message if the file's text after its last line feed (line
    ``n_lf + 1``) is not blank, reading it ``piece`` bytes at a time."""
    import codecs

    with open(path, "rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        start = end
        while start > 0:                        # the last line feed, from the end
            at = max(0, start - piece)
            fh.seek(at)
            lf = fh.read(start - at).rfind(b"\n")
            if lf >= 0:
                start = at + lf + 1
                break
            start = at
        fh.seek(start)
        decoder = codecs.getincrementaldecoder("utf-8")()
        shown, blank = "", True
        while True:
            data = fh.read(piece)
            text = decoder.decode(data, final=not data)
            if len(shown) < 60:
                shown += text[:60]
            blank = blank and not text.strip()
            if not data:
                break
    if not blank:
        _truncated(path, n_lf + 1, shown)


def _stream_turn(path: str, pre: _Preamble, cols: dict[str, np.ndarray], stream: TraceStream,
                 state: dict) -> RouteTrace:
    turn = int(cols["turn"][0])
    if turn <= state["last_turn"]:
        _stream_failed(path)
    state["last_turn"] = turn
    lines = cols.pop("line")
    try:
        tr = _build_parsed(path, pre, cols, lines)
    except TraceFormatError:
        _stream_failed(path)
    seen = _routed_layers(tr.block)
    if stream.routed is None:
        stream.routed = seen
    elif not np.array_equal(seen, stream.routed):
        _stream_failed(path)
    conv = tr.last_layer                   # every turn has the convention of the first that shows one
    if conv is not None:
        if stream.last_layer is None:
            stream.last_layer = conv
            warn_convention(tr, stream.path)
        elif conv != stream.last_layer:
            _stream_failed(path)
    stream.n_rows += tr.n_rows
    stream.n_events += tr.n_events
    stream.n_prompt += tr.n_prompt
    return tr
