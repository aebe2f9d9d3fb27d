"""One-pass Numba parser of a route trace's rows into narrow columns (the reader's fast path).

:func:`parse_rows` reads the bytes after the column header once, checking every field against
the grammar of docs/trace-format.md ("Row fields": ``0|-?[1-9][0-9]{0,14}`` for integers, the
``%.6g`` forms or ``nan``/``inf`` for ``weight``) and every value against its column's bound, and
stores each column in its narrowest dtype; the rows are cut at line ends into one chunk per
thread, each parsed by the same nogil kernel (:func:`parse_threads`). It never raises and never
diagnoses: on anything it does not accept (a bad field or bound, a byte outside printable ASCII
in a row, a truncated last line, more weights than it can hand back to Python) it returns a
failure and the reader falls back to its per-line path, which produces the ``file:line``
message. Acceptance here therefore implies
acceptance by the per-line path, with the same values: integers are exact; a weight is converted
exactly when its decimal mantissa is at most 2**53 and its power of ten at most 22 in magnitude
(both are then exact doubles and one IEEE division or product rounds correctly, Clinger's fast
path), and otherwise handed back for Python's ``float``; the float64 is then rounded to float32 as
the per-line path does.
"""

from __future__ import annotations

import numpy as np

from refsim.jit import njit
from refsim.trace.format import F32_FINITE_LIMIT
KNOWN = ("turn", "phase", "step", "layer", "slot", "expert", "weight", "residency",
         "expert_bytes", "dropped")
"""Column codes of :func:`parse_rows` (``-1`` = a column the reader ignores)."""

WEIGHT = KNOWN.index("weight")
MAX_SLOW_WEIGHTS = 1 << 16
"""Most weights per file handed back to Python's ``float`` (beyond: the per-line path)."""

_POW10 = np.array([10.0 ** i for i in range(23)], dtype=np.float64)
OK, FAIL = 0, 1
PAD = 16
"""Bytes a parse buffer holds past its data (:func:`padded`): :func:`_count_lf` reads whole
eight-byte words."""

# Line feeds counted eight bytes at a time (SWAR), little-endian.
_U = np.uint64
_LOW7 = _U(0x7F7F7F7F7F7F7F7F)
_ONES = _U(0x0101010101010101)
_LF = _U(0x0A0A0A0A0A0A0A0A)


@njit(cache=True, inline="always")
def _is_space(c):
    # str.strip()'s ASCII whitespace: \t \n \x0b \x0c \r \x1c-\x1f and space
    return c == 32 or (9 <= c <= 13) or (28 <= c <= 31)


@njit(cache=True, inline="always")
def _weight(buf, pos, n_slow, slow_row, slow_start, slow_end, row, start):
    """A weight's digits from its first digit at ``pos`` (``start`` = the field's first byte,
    sign included): converted exactly when the decimal mantissa is at most 2**53 and the power
    of ten at most 22 in magnitude, else handed back (``slow_*``) for Python's float. Returns
    (value, position after, n_slow, ok)."""
    mant = 0
    ndig = 0
    exact = True
    e10 = 0
    if buf[pos] == 48:
        pos += 1
    else:
        while 48 <= buf[pos] <= 57:
            if ndig < 18:
                mant = mant * 10 + (buf[pos] - 48)
                ndig += 1
            else:
                exact = False
            pos += 1
    if buf[pos] == 46:
        pos += 1
        while 48 <= buf[pos] <= 57:
            d = buf[pos] - 48
            if mant == 0 and d == 0:
                e10 -= 1
            elif ndig < 18:
                mant = mant * 10 + d
                ndig += 1
                e10 -= 1
            else:
                exact = False
            pos += 1
    c = buf[pos]
    if c == 101 or c == 69:
        pos += 1
        eneg = False
        if buf[pos] == 45 or buf[pos] == 43:
            eneg = buf[pos] == 45
            pos += 1
        if not (48 <= buf[pos] <= 57):
            return 0.0, pos, n_slow, False
        ev = 0
        while 48 <= buf[pos] <= 57:
            if ev < 100000:
                ev = ev * 10 + (buf[pos] - 48)
            pos += 1
        e10 += -ev if eneg else ev
    if mant == 0:
        return 0.0, pos, n_slow, True
    if exact and mant <= 9007199254740992 and -22 <= e10 <= 22:
        return (mant * _POW10[e10] if e10 >= 0 else mant / _POW10[-e10]), pos, n_slow, True
    if n_slow >= slow_row.size:
        return 0.0, pos, n_slow, False
    slow_row[n_slow] = row
    slow_start[n_slow] = start
    slow_end[n_slow] = pos
    return 0.0, pos, n_slow + 1, True


@njit(cache=True, nogil=True)
def _parse(buf, pos, end, row, first_line, codes, lo, hi, turn, phase, step, layer, slot,
           expert, weight, residency, charged, dropped, lines, slow_row, slow_start, slow_end):
    """Parse the rows of ``buf[pos:end]`` into the columns from index ``row`` on.

    ``buf[end - 1]`` is a line feed (the caller's guarantee), so every scan below stops there at
    the latest and needs no bounds test of its own: a scan stops at a byte outside its field's
    alphabet, and a line feed is outside every alphabet. Returns (status, rows written up to,
    n_slow, line reached); nogil, so chunks of one file parse on several threads. (Reading
    fields eight bytes at a time was tried: on these rows, mostly fields of 1-3 digits, it was
    1.7x slower.)
    """
    ncol = codes.size
    n_slow = 0
    line = first_line
    while pos < end:
        c = buf[pos]
        if c == 10 or _is_space(c):          # a blank or whitespace-only line is skipped
            q = pos
            while buf[q] != 10 and _is_space(buf[q]):
                q += 1
            if buf[q] == 10:
                pos = q + 1
                line += 1
                continue
        for j in range(ncol):
            code = codes[j]
            if code == 6:                        # weight
                start = pos
                neg = buf[pos] == 45
                if neg:
                    pos += 1
                c = buf[pos]
                if c == 110:                     # nan
                    if buf[pos + 1] != 97 or buf[pos + 2] != 110:
                        return FAIL, row, n_slow, line
                    pos += 3
                    v = -np.nan if neg else np.nan
                elif 48 <= c <= 57:
                    v, pos, n_slow, ok = _weight(buf, pos, n_slow, slow_row, slow_start, slow_end,
                                                 row, start)
                    if not ok:
                        return FAIL, row, n_slow, line
                    if neg:
                        if v != 0 and hi[6] == 0:    # a negative weight is damage (-0 is zero)
                            return FAIL, row, n_slow, line
                        v = -v
                    if not abs(v) < F32_FINITE_LIMIT and hi[6] == 0:
                        return FAIL, row, n_slow, line
                elif c == 105 and hi[6] != 0 and buf[pos + 1] == 110 and buf[pos + 2] == 102:
                    pos += 3                     # inf: read only by a wide parse
                    v = -np.inf if neg else np.inf
                else:                            # inf never fits float32; anything else is damage
                    return FAIL, row, n_slow, line
                weight[row] = v
            elif code >= 0:                      # an integer column
                c = buf[pos]
                neg = c == 45
                if neg:
                    pos += 1
                    c = buf[pos]
                if c == 48:
                    if neg:
                        return FAIL, row, n_slow, line     # "-0"
                    val = 0
                    pos += 1
                elif 49 <= c <= 57:
                    val = c - 48
                    nd = 1
                    pos += 1
                    c = buf[pos]
                    while 48 <= c <= 57:
                        if nd == 15:
                            return FAIL, row, n_slow, line
                        val = val * 10 + (c - 48)
                        nd += 1
                        pos += 1
                        c = buf[pos]
                    if neg:
                        val = -val
                else:
                    return FAIL, row, n_slow, line
                if val < lo[code] or val > hi[code]:
                    return FAIL, row, n_slow, line
                if code == 0:
                    turn[row] = val
                elif code == 1:
                    phase[row] = val
                elif code == 2:
                    step[row] = val
                elif code == 3:
                    layer[row] = val
                elif code == 4:
                    slot[row] = val
                elif code == 5:
                    expert[row] = val
                elif code == 7:
                    residency[row] = val
                elif code == 8:
                    charged[row] = val
                else:
                    dropped[row] = val
            else:                                # an ignored column: any printable ASCII but ','
                c = buf[pos]
                while c != 44 and c != 10 and c != 13:
                    if c < 32 or c > 126:
                        return FAIL, row, n_slow, line
                    pos += 1
                    c = buf[pos]
            if j < ncol - 1:
                if buf[pos] != 44:
                    return FAIL, row, n_slow, line
                pos += 1
        if buf[pos] == 13:
            pos += 1
        if buf[pos] != 10:
            return FAIL, row, n_slow, line       # a stray byte after the last field
        pos += 1
        lines[row] = line
        line += 1
        row += 1
    return OK, row, n_slow, line


@njit(cache=True, nogil=True)
def _count_lf(buf, words, a, b):
    """Line feeds in ``buf[a:b]``: the whole words between one byte at a time, each word's zero
    bytes (after xor with line feeds) marked and summed by a multiply."""
    n = 0
    i = a
    while i < b and i & 7:
        n += buf[i] == 10
        i += 1
    w0 = i >> 3
    w1 = b >> 3
    acc = _U(0)
    for w in range(w0, w1):
        x = words[w] ^ _LF
        m = ~((((x & _LOW7) + _LOW7) | x) | _LOW7)   # the high bit of each zero byte
        acc += ((m >> _U(7)) * _ONES) >> _U(56)
    n += np.int64(acc)
    i = max(i, w1 << 3)
    while i < b:
        n += buf[i] == 10
        i += 1
    return n


def count_lf(buf: np.ndarray, a: int, b: int) -> int:
    """Line feeds in ``buf[a:b]`` (``buf`` as :func:`parse_rows` takes it)."""
    return int(_count_lf(buf, buf.view(np.uint64), a, b))


def padded(data) -> np.ndarray:
    """``data`` (bytes-like) in a new uint8 array with :data:`PAD` zero bytes after it, its size
    a multiple of 8 (what :func:`parse_rows` reads from)."""
    n = len(data)
    out = np.zeros((n + PAD + 7) // 8 * 8, np.uint8)
    out[:n] = np.frombuffer(data, np.uint8)
    return out


PARSE_MIN_CHUNK = 1 << 22
"""Bytes of rows below which :func:`parse_rows` uses one thread (4 MiB, ~140,000 rows)."""


def parse_threads() -> int:
    """Threads :func:`parse_rows` uses: the CPUs this process may run on, at most 4."""
    import os
    try:
        return max(1, min(4, len(os.sched_getaffinity(0))))
    except (AttributeError, OSError):
        return max(1, min(4, os.cpu_count() or 1))


def find_lf(buf: np.ndarray, lo: int, hi: int, backwards: bool = False) -> int:
    """Index of the first (last, ``backwards``) line feed in ``buf[lo:hi]``, or ``lo - 1`` when
    there is none; searched in windows growing from 4 KiB, so a row near the start (end) costs
    no pass over the rest."""
    width = 4096
    a, b = (max(lo, hi - width), hi) if backwards else (lo, min(hi, lo + width))
    while True:
        hits = np.flatnonzero(buf[a:b] == 10)
        if hits.size:
            return a + int(hits[-1] if backwards else hits[0])
        if (a == lo) if backwards else (b == hi):
            return lo - 1
        width *= 4
        a, b = (max(lo, a - width), a) if backwards else (b, min(hi, b + width))


def column_bounds(n_layer: int, n_expert: int, k: int, max_position: int):
    """The inclusive range of each integer column of :data:`KNOWN` (in its order) that
    :func:`parse_rows` accepts, the ranges of docs/trace-format.md "Validation" (``weight``'s
    entry is unused): two (10,) int64 arrays ``lo``, ``hi``. The framing kernels index by these
    values, so no row outside them may reach them."""
    lo = np.zeros(len(KNOWN), dtype=np.int64)
    hi = np.array([max_position, 1, max_position, n_layer - 1, k - 1, n_expert - 1, 0, 2,
                   np.iinfo(np.int64).max, 1], dtype=np.int64)
    return lo, hi


def column_dtypes(k: int) -> dict:
    """The dtype of each column of :data:`KNOWN` as :func:`parse_rows` returns it (the narrowest
    that holds :func:`column_bounds`; ``slot`` int16 only when ``k > 256``)."""
    return {"turn": np.int32, "phase": np.uint8, "step": np.int32, "layer": np.int16,
            "slot": np.uint8 if k <= 256 else np.int16, "expert": np.int16, "weight": np.float32,
            "residency": np.uint8, "expert_bytes": np.int64, "dropped": np.uint8}


def parse_rows(buf: np.ndarray, size: int, offset: int, first_line: int, columns: list[str],
               n_layer: int, n_expert: int, k: int, max_position: int, max_lines: int,
               threads: int | None = None, wide: bool = False):
    """Parse the rows of ``buf[offset:size]`` (the bytes after the column header).

    Parameters
    ----------
    buf : (>= size + PAD,) uint8 ndarray
        The file's bytes, then at least :data:`PAD` bytes the parse may read and ignore
        (:func:`padded` makes one from bytes), the size a multiple of 8.
    size : int
        Bytes of data in ``buf``.
    offset : int
        Byte offset of the first data line; ``first_line`` its 1-based line number.
    columns : list of str
        The column header's names, in file order.
    n_layer, n_expert, k : int
        The preamble's bounds (``k`` = ``n_expert_used``).
    threads : int, optional
        Threads to parse with (default :func:`parse_threads`): the rows are cut into that many
        chunks at line ends, their line feeds counted, and each chunk parsed by the nogil kernel
        on its own thread into its own rows of the columns, so the result does not depend on
        the count.
    wide : bool
        Integer columns as int64 and weights as float64 with no range check (a value out of its
        range, a negative or infinite weight, is read, not refused; the weight entry of ``hi``
        tells the kernel): the values the per-line parse reads, for the per-line rules' message
        (``reader._read_fast(rule_messages=True)``). Never for the framing kernels, which index
        by these values.

    Returns
    -------
    dict of str to ndarray, or None
        The columns of :data:`KNOWN` present in the file plus ``"line"`` (1-based line of each
        row, int32), trimmed to the row count: turn, step int32; phase, residency, dropped uint8;
        layer, expert int16; slot uint8 (int16 when ``k > 256``); weight float32; expert_bytes
        int64. ``None`` when any row is not accepted (the caller's per-line path diagnoses it).

    Raises
    ------
    ValueError
        If ``buf`` is not such a buffer.
    """
    from refsim.jit import in_reference

    if buf.dtype != np.uint8 or buf.ndim != 1 or buf.size < size + PAD or buf.size % 8:
        raise ValueError("parse_rows: expected a uint8 buffer of size + PAD bytes, a multiple of 8")
    words = buf.view(np.uint64)
    view = memoryview(buf)[:size]
    end = find_lf(buf, offset, size, backwards=True) + 1     # after the last line feed
    if bytes(view[end:]).strip(b" \t\r\x0b\x0c\x1c\x1d\x1e\x1f"):
        return None                     # a last row without its end of line (the per-line message)
    n_threads = 1 if in_reference() else (threads or parse_threads())
    n_threads = max(1, min(n_threads, (end - offset) // PARSE_MIN_CHUNK))
    cuts = [offset]
    for t in range(1, n_threads):
        at = offset + (end - offset) * t // n_threads
        cuts.append(max(find_lf(buf, at, end) + 1, cuts[-1]))
    cuts.append(end)
    count = _count_lf if n_threads == 1 else _count_lf.compiled()
    lf = [0] * n_threads
    results: list = [None] * n_threads

    def run(work):
        if n_threads == 1:
            work(0)
            return
        import threading
        pool = [threading.Thread(target=work, args=(t,)) for t in range(1, n_threads)]
        for th in pool:
            th.start()
        work(0)
        for th in pool:
            th.join()

    def counting(t):
        lf[t] = int(count(buf, words, cuts[t], cuts[t + 1]))

    run(counting)
    cap = sum(lf)
    if first_line + cap > max_lines + 1:
        return None
    codes = np.array([KNOWN.index(c) if c in KNOWN else -1 for c in columns], dtype=np.int64)
    lo, hi = column_bounds(n_layer, n_expert, k, max_position)
    if wide:
        lo[:] = np.iinfo(np.int64).min
        hi[:] = np.iinfo(np.int64).max
    present = set(columns)

    dtypes = column_dtypes(k)
    if wide:
        dtypes = {name: np.float64 if name == "weight" else np.int64 for name in dtypes}
    out = {name: np.empty(cap if name in present else 0, dtype=dt) for name, dt in dtypes.items()}
    out["line"] = np.empty(cap, dtype=np.int32)
    arrays = [out[c] for c in ("turn", "phase", "step", "layer", "slot", "expert", "weight",
                               "residency", "expert_bytes", "dropped", "line")]
    row0 = np.cumsum([0] + lf[:-1]).tolist()
    slow = [[np.zeros(MAX_SLOW_WEIGHTS, dtype=np.int64) for _ in range(3)] for _ in lf]
    kernel = _parse if n_threads == 1 else _parse.compiled()

    def parsing(t):
        results[t] = kernel(buf, cuts[t], cuts[t + 1], row0[t], first_line + row0[t],
                            codes, lo, hi, *arrays, *slow[t])

    run(parsing)
    if any(r is None or r[0] != OK for r in results):
        return None
    n_rows = 0
    for t, (_, row_end, _, _) in enumerate(results):
        got = row_end - row0[t]                  # fewer than the line feeds when lines are blank
        if n_rows != row0[t]:
            for a in arrays:
                if a.size:
                    a[n_rows:n_rows + got] = a[row0[t]:row_end]
        n_rows += got
    w = out["weight"]
    n_slow = sum(r[2] for r in results)
    if n_slow > MAX_SLOW_WEIGHTS:
        return None
    for t, r in enumerate(results):
        shift = row0[t] - sum(results[u][1] - row0[u] for u in range(t))
        for rr, a, b in zip(*(s[:r[2]].tolist() for s in slow[t])):
            v = float(bytes(view[a:b]))
            if not (wide or 0 <= v < F32_FINITE_LIMIT):      # negative, or no finite float32
                return None
            w[rr - shift] = v
    return {name: a[:n_rows] for name, a in out.items() if name in present or name == "line"}
