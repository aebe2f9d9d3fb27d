"""One-pass Numba parser of a route trace's rows into narrow columns (the reader's fast path).

:func:`parse_rows` reads the bytes after the column header once, checking every field against
the grammar of docs/trace-format.md ("Row fields": ``0|-?[1-9][0-9]{0,14}`` for integers, the
``%.6g`` forms or ``nan``/``inf`` for ``weight``) and every value against its column's bound, and
stores each column in its narrowest dtype. It never raises and never diagnoses: on anything it
does not accept (a bad field or bound, a byte outside printable ASCII in a row, a truncated last
line, more weights than it can hand back to Python) it returns a failure and the reader falls back
to its per-line path, which produces the ``file:line`` message. Acceptance here therefore implies
acceptance by the per-line path, with the same values: integers are exact; a weight is converted
exactly when its decimal mantissa is at most 2**53 and its power of ten at most 22 in magnitude
(both are then exact doubles and one IEEE division or product rounds correctly, Clinger's fast
path), and otherwise handed back for Python's ``float``; the float64 is then rounded to float32 as
the per-line path does.
"""

from __future__ import annotations

import numpy as np

from refsim.jit import njit
KNOWN = ("turn", "phase", "step", "layer", "slot", "expert", "weight", "residency",
         "expert_bytes", "dropped")
"""Column codes of :func:`parse_rows` (``-1`` = a column the reader ignores)."""

WEIGHT = KNOWN.index("weight")
MAX_SLOW_WEIGHTS = 1 << 16
"""Most weights per file handed back to Python's ``float`` (beyond: the per-line path)."""

_POW10 = np.array([10.0 ** i for i in range(23)], dtype=np.float64)
OK, FAIL = 0, 1


@njit(cache=True, inline="always")
def _is_space(c):
    # str.strip()'s ASCII whitespace: \t \n \x0b \x0c \r \x1c-\x1f and space
    return c == 32 or (9 <= c <= 13) or (28 <= c <= 31)


@njit(cache=True)
def _parse(buf, pos, first_line, codes, lo, hi, turn, phase, step, layer, slot, expert, weight,
           residency, charged, dropped, lines, slow_row, slow_start, slow_end, max_lines):
    """Returns (status, n_rows, n_slow, line reached)."""
    n = buf.size
    ncol = codes.size
    row = 0
    n_slow = 0
    line = first_line
    while pos < n:
        if line > max_lines:
            return FAIL, row, n_slow, line
        # a blank or whitespace-only line is skipped
        q = pos
        while q < n and buf[q] != 10 and _is_space(buf[q]):
            q += 1
        if q >= n:
            return OK, row, n_slow, line          # trailing whitespace without end of line
        if buf[q] == 10:
            pos = q + 1
            line += 1
            continue
        for j in range(ncol):
            code = codes[j]
            if code < 0:                           # an ignored column: any printable ASCII but ','
                while pos < n and buf[pos] != 44 and buf[pos] != 10 and buf[pos] != 13:
                    c = buf[pos]
                    if c < 32 or c > 126:
                        return FAIL, row, n_slow, line
                    pos += 1
            elif code == 6:                        # weight
                start = pos
                neg = False
                if pos < n and buf[pos] == 45:
                    neg = True
                    pos += 1
                if pos + 3 <= n and buf[pos] == 110 and buf[pos + 1] == 97 and buf[pos + 2] == 110:
                    pos += 3
                    v = np.nan
                    weight[row] = -v if neg else v
                elif pos + 3 <= n and buf[pos] == 105 and buf[pos + 1] == 110 and buf[pos + 2] == 102:
                    return FAIL, row, n_slow, line     # inf never fits float32: the per-line message
                else:
                    if pos >= n or not (48 <= buf[pos] <= 57):
                        return FAIL, row, n_slow, line
                    mant = 0
                    ndig = 0
                    exact = True
                    e10 = 0
                    if buf[pos] == 48:
                        pos += 1
                    else:
                        while pos < n and 48 <= buf[pos] <= 57:
                            if ndig < 18:
                                mant = mant * 10 + (buf[pos] - 48)
                                ndig += 1
                            else:
                                exact = False
                            pos += 1
                    if pos < n and buf[pos] == 46:
                        pos += 1
                        while pos < n and 48 <= buf[pos] <= 57:
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
                    if pos < n and (buf[pos] == 101 or buf[pos] == 69):
                        pos += 1
                        eneg = False
                        if pos < n and (buf[pos] == 45 or buf[pos] == 43):
                            eneg = buf[pos] == 45
                            pos += 1
                        if pos >= n or not (48 <= buf[pos] <= 57):
                            return FAIL, row, n_slow, line
                        ev = 0
                        while pos < n and 48 <= buf[pos] <= 57:
                            if ev < 100000:
                                ev = ev * 10 + (buf[pos] - 48)
                            pos += 1
                        e10 += -ev if eneg else ev
                    if mant == 0:
                        v = 0.0
                    elif exact and mant <= 9007199254740992 and -22 <= e10 <= 22:
                        v = mant * _POW10[e10] if e10 >= 0 else mant / _POW10[-e10]
                    else:
                        if n_slow >= slow_row.size:
                            return FAIL, row, n_slow, line
                        slow_row[n_slow] = row
                        slow_start[n_slow] = start
                        slow_end[n_slow] = pos
                        n_slow += 1
                        v = 0.0
                    if neg:
                        v = -v
                    if not abs(v) <= 3.4028234663852886e38:
                        return FAIL, row, n_slow, line
                    weight[row] = v
            else:                                  # an integer column
                neg = False
                if pos < n and buf[pos] == 45:
                    neg = True
                    pos += 1
                if pos >= n or not (48 <= buf[pos] <= 57):
                    return FAIL, row, n_slow, line
                val = 0
                if buf[pos] == 48:
                    pos += 1
                    if neg:
                        return FAIL, row, n_slow, line     # "-0"
                else:
                    nd = 0
                    while pos < n and 48 <= buf[pos] <= 57:
                        val = val * 10 + (buf[pos] - 48)
                        nd += 1
                        pos += 1
                        if nd > 15:
                            return FAIL, row, n_slow, line
                if neg:
                    val = -val
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
            if j < ncol - 1:
                if pos >= n or buf[pos] != 44:
                    return FAIL, row, n_slow, line
                pos += 1
        if pos < n and buf[pos] == 13:
            pos += 1
        if pos >= n or buf[pos] != 10:
            return FAIL, row, n_slow, line         # a truncated last line, or a stray byte
        pos += 1
        lines[row] = line
        line += 1
        row += 1
    return OK, row, n_slow, line


def parse_rows(data: bytes, offset: int, first_line: int, columns: list[str], n_layer: int,
               n_expert: int, k: int, max_position: int, max_lines: int):
    """Parse the rows of ``data[offset:]`` (the bytes after the column header).

    Parameters
    ----------
    data : bytes
        The whole file.
    offset : int
        Byte offset of the first data line; ``first_line`` its 1-based line number.
    columns : list of str
        The column header's names, in file order.
    n_layer, n_expert, k : int
        The preamble's bounds (``k`` = ``n_expert_used``).

    Returns
    -------
    dict of str to ndarray, or None
        The columns of :data:`KNOWN` present in the file plus ``"line"`` (1-based line of each
        row, int32), trimmed to the row count: turn, step int32; phase, residency, dropped uint8;
        layer, expert int16; slot uint8 (int16 when ``k > 256``); weight float32; expert_bytes
        int64. ``None`` when any row is not accepted (the caller's per-line path diagnoses it).
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    cap = data.count(b"\n", offset) + 1
    codes = np.array([KNOWN.index(c) if c in KNOWN else -1 for c in columns], dtype=np.int64)
    lo = np.zeros(len(KNOWN), dtype=np.int64)
    hi = np.array([max_position, 1, max_position, n_layer - 1, k - 1, n_expert - 1, 0, 2,
                   np.iinfo(np.int64).max, 1], dtype=np.int64)
    present = set(columns)

    def col(name, dtype):
        return np.zeros(cap if name in present else 0, dtype=dtype)

    out = {"turn": col("turn", np.int32), "phase": col("phase", np.uint8),
           "step": col("step", np.int32), "layer": col("layer", np.int16),
           "slot": col("slot", np.uint8 if k <= 256 else np.int16),
           "expert": col("expert", np.int16), "weight": col("weight", np.float32),
           "residency": col("residency", np.uint8), "expert_bytes": col("expert_bytes", np.int64),
           "dropped": col("dropped", np.uint8), "line": np.zeros(cap, dtype=np.int32)}
    slow = [np.zeros(MAX_SLOW_WEIGHTS, dtype=np.int64) for _ in range(3)]
    status, n_rows, n_slow, _ = _parse(
        buf, offset, first_line, codes, lo, hi, out["turn"], out["phase"], out["step"],
        out["layer"], out["slot"], out["expert"], out["weight"], out["residency"],
        out["expert_bytes"], out["dropped"], out["line"], *slow, max_lines)
    if status != OK:
        return None
    w = out["weight"]
    for r, a, b in zip(*(s[:n_slow].tolist() for s in slow)):
        v = float(data[a:b])
        if not abs(v) <= float(np.finfo(np.float32).max):
            return None
        w[r] = v
    return {name: a[:n_rows] for name, a in out.items() if a.size or name == "line"}


@njit(cache=True)
def _charged_ok(new, layer, expert, residency, charged, dropped, has_dropped, expert_bytes,
                n_expert):
    g = 0
    stamp = np.full(n_expert, -1, dtype=np.int64)
    looked = np.full(n_expert, -1, dtype=np.int64)
    first_res = np.zeros(n_expert, dtype=np.int64)
    for i in range(layer.size):
        if i == 0 or new[i] or layer[i] != layer[i - 1]:
            g += 1
        e = expert[i]
        r = residency[i]
        if stamp[e] != g:
            stamp[e] = g
            first_res[e] = r
        elif r != first_res[e]:
            return False
        want = 0
        if not (has_dropped and dropped[i] != 0) and looked[e] != g:
            looked[e] = g
            if r == 0:
                want = expert_bytes[layer[i]]
        if charged[i] != want:
            return False
    return True


def charged_ok(new: np.ndarray, layer: np.ndarray, expert: np.ndarray, residency: np.ndarray,
               charged: np.ndarray, dropped: np.ndarray, expert_bytes: np.ndarray,
               n_expert: int) -> bool:
    """Whether the residency and ``expert_bytes`` rules hold on rows framed by ``new`` (True at
    the first row of each decode; within a decode rows run layer-major, then position, then slot,
    the order of the engine's layer batch): every row of one expert in a layer batch has one
    residency, and ``expert_bytes`` is the layer's entry size on the expert's first non-dropped
    row of the batch when that is a miss, else 0 (the reader's ``_check_charged``, which gives the
    message when this is False). All arrays (n_rows,)."""
    return bool(_charged_ok(new, layer, expert, residency, charged, dropped, dropped.size > 0,
                            np.asarray(expert_bytes, dtype=np.int64), n_expert))
