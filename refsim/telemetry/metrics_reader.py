"""Read and validate the engine's per-token metrics CSV (``--csv PATH``) and its ``.metrics``
sidecar into columnar arrays.

Three layouts are read, told apart by the first line (bmoe-engine.md §4.1, §4.7;
engine-docs/telemetry.md "CSV sink"; core/csv_metrics_sink.cpp):

- ``v2``: ``# bmoe_metrics v2``, the ``# key=value`` preamble (engine, model, streaming,
  sampling + speculation lines), the 29-column header, the rows, a ``# summary`` trailer per turn.
  refsim writes this layout (:mod:`refsim.telemetry.metrics_csv`).
- ``v1``: ``# bmoe_metrics v1``, a shorter preamble, 22 columns ending at ``swap_free_mib``.
- ``legacy``: no preamble; a header of 8 (``...,stall_ms``), 9 (``...,mgmt_ms``) or 11
  (``...,cpu_ms``) columns; or no header at all, rows of the 8 columns
  ``step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms`` (``header=False``).

Columns are read by name (the engine appends columns; order is not a contract), unknown columns
and preamble keys are kept. A session file holds several turns: the preamble once, then per
turn its rows (``step`` restarting at 1, ``turn`` counting up) and its ``# summary`` line. The
sidecar ``<stem>.metrics`` beside ``<stem>.csv`` (``key=value`` lines: ``peak_rss_kb``,
``mem_avail_*_kb``, ``batt_temp_*_dC``, ``cpu_temp_*_mC``) is read when present.

Every malformed input raises :class:`refsim.errors.MetricsFormatError` naming the file and line and
what was expected; nothing is allocated from a number read in the file.
"""

from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass, field, fields

import numpy as np

from refsim.errors import MetricsFormatError
from refsim.frames import Table
from refsim.telemetry.constants import METRICS_COLUMNS, SUMMARY_KEYS
from refsim.telemetry.metrics_csv import MetricsPreamble

V1_COLUMNS = METRICS_COLUMNS[:22]
"""The 22 columns of ``bmoe_metrics v1``, ending at ``swap_free_mib`` (bmoe-engine.md §4.7)."""

LEGACY_COLUMNS = METRICS_COLUMNS[:8]
"""The 8 columns of the header-less legacy layout (bmoe-engine.md §4.7)."""

LEGACY_REQUIRED = METRICS_COLUMNS[:7]
"""Columns every legacy header has: the original seven (engine-docs/telemetry.md: the later
columns are "trailing columns appended after the original seven")."""

REQUIRED_COLUMNS = {"v2": METRICS_COLUMNS, "v1": V1_COLUMNS, "legacy": LEGACY_REQUIRED}
"""Columns a file of each layout must have (by name; any order, unknown columns allowed)."""

INT_COLUMNS = frozenset({"step", "steps", "read_bytes", "majflt", "turn", "mtp_batch"})
"""Columns written as integers (``%d``/``%llu`` in core/csv_metrics_sink.cpp); read as int64."""

_PERCENT_OR_UNMEASURED = frozenset({"cache_hit_pct"})
_FRACTION_OR_UNMEASURED = frozenset({"dense_resident_frac"})
_AT_LEAST_ONE = frozenset({"step", "steps", "mtp_batch"})

MAX_INT_VALUE = 2 ** 53
"""Largest integer column value accepted (exact in float64, the parse's intermediate type)."""

MAX_TIME_MS = 1e7
"""Largest value accepted in a time column (:data:`TIME_COLUMNS`, ms per token or decode: 2.8
hours). The device reader's bound on its ms figures (``refsim.timing.model.MAX_ABS_PARAM``); far
above what the engine writes: the largest in every shared run is 8652 ms (``cpu_ms``, CPU time
summed over threads, phone-2026-07-22-drop-cold), the largest ``wall_ms`` 8562 ms (a phone mmap
run); the writer prints them with ``%.3f`` (bmoe-engine.md §4.1, core/csv_metrics_sink.cpp)."""

TIME_COLUMNS = frozenset(c for c in METRICS_COLUMNS if c.endswith("_ms"))
"""The engine's time columns (ms), bounded by :data:`MAX_TIME_MS`."""

_MAGIC = re.compile(r"^# bmoe_metrics v(\d+)\s*$")
SUPPORTED_VERSIONS = {1: "v1", 2: "v2"}

_PREAMBLE_TYPES = {f.name: f.type for f in fields(MetricsPreamble)}
"""Preamble key -> ``"int"``/``"float"``/``"str"`` (the types refsim's own writer uses)."""


@dataclass(frozen=True)
class MetricsRun(Table):
    """One metrics CSV, read: the preamble, the per-token columns, the trailers and the sidecar.

    As a table (:meth:`to_pandas`): one row per row of the file (every turn), the file's columns
    in its order, as :attr:`data` holds them (int64 or float64; docs/notebook.md).

    Attributes
    ----------
    path : str
        The CSV read.
    layout : {'v2', 'v1', 'legacy'}
    header : bool
        False for a legacy file without a column header line (its columns are
        :data:`LEGACY_COLUMNS`).
    config : dict of str -> str
        The preamble's ``key=value`` tokens, merged over its lines (the resolved configuration:
        ``cache_mb``, ``overlap``, ``io_threads``, ``n_layer``, ...); empty for legacy files. Use
        :meth:`number` for a typed value.
    columns : tuple of str
        Column names in file order.
    data : dict of str -> (n_rows,) ndarray
        Each column; int64 for :data:`INT_COLUMNS`, float64 otherwise. Units as the column names
        say (``_ms`` milliseconds, ``_bytes`` bytes, ``_mib`` MiB = 2^20 bytes, ``_pct`` percent).
    line_numbers : (n_rows,) int64 ndarray
        1-based line of each row (for messages).
    turn_index : (n_rows,) int64 ndarray
        0-based ordinal of the turn each row belongs to (the ``turn`` column's runs, or, without
        that column, the ``# summary`` lines seen before the row).
    summaries : tuple of dict of str -> float
        One ``# summary`` trailer per completed turn, in order: every ``key=value`` token whose
        value is a number (a known key with a non-number is an error; other tokens are skipped).
    summary_line_numbers : tuple of int
    complete : bool
        True when every row belongs to a turn closed by its ``# summary`` line (False: the run
        stopped before writing the trailer, or the file holds rows only).
    sidecar : dict of str -> float, or None
        The ``.metrics`` sidecar's ``key=value`` lines, or None when there is no sidecar.
    sidecar_path : str or None
    """

    path: str
    layout: str
    header: bool
    config: dict
    columns: tuple
    data: dict
    line_numbers: np.ndarray
    turn_index: np.ndarray
    summaries: tuple
    summary_line_numbers: tuple
    complete: bool
    sidecar: dict | None = None
    sidecar_path: str | None = None
    _group_cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_rows(self) -> int:
        """Rows (= emitted tokens, every turn)."""
        return int(self.line_numbers.size)

    @property
    def n_turns(self) -> int:
        """Turns with at least one row, or a summary."""
        rows = int(self.turn_index.max()) + 1 if self.n_rows else 0
        return max(rows, len(self.summaries))

    @property
    def summary(self) -> dict:
        """The last ``# summary`` trailer (a one-shot run has one), or {} when there is none."""
        return self.summaries[-1] if self.summaries else {}

    def to_columns(self) -> dict:
        """The rows as columns: :attr:`columns` in file order, each :attr:`data`'s array."""
        return {name: self.data[name] for name in self.columns}

    def has(self, name: str) -> bool:
        """Whether the file has column ``name``."""
        return name in self.data

    def column(self, name: str) -> np.ndarray | None:
        """Column ``name`` as an (n_rows,) array, or None when the file lacks it."""
        return self.data.get(name)

    def number(self, key: str, default: float | None = None) -> float | None:
        """Preamble value ``key`` as a number (validated when read), or ``default`` if absent."""
        if key not in self.config:
            return default
        return float(self.config[key])

    @property
    def predicted_by(self) -> str | None:
        """The device whose predictions fill this file's time columns (preamble ``times=predicted
        device=NAME``, written by ``refsim run --device``), or None: the times are measurements.
        A fit or a check of a device model must not take them as measured (docs/telemetry.md)."""
        if self.config.get("times") != "predicted":
            return None
        return self.config.get("device", "unnamed")

    @property
    def overlap(self) -> bool | None:
        """Whether the run used ``--overlap``: the preamble's ``overlap=``; for a file without it
        (legacy), inferred as "some row has ``stall_ms`` > 0" (``stall_ms`` is 0 in serial mode,
        telemetry.md); None when neither is there."""
        if "overlap" in self.config:
            return self.number("overlap") != 0
        stall = self.column("stall_ms")
        return None if stall is None else bool((stall > 0).any())

    @property
    def mtp_batch(self) -> np.ndarray:
        """(n_rows,) int64: tokens the producing decode confirmed (all 1 without the column)."""
        col = self.column("mtp_batch")
        return col if col is not None else np.ones(self.n_rows, dtype=np.int64)

    @property
    def group_first(self) -> np.ndarray:
        """(n_rows,) bool: rows that start a decode group (every row without speculation)."""
        if "first" not in self._group_cache:
            self._group_cache["first"] = _group_starts(self.mtp_batch)
        return self._group_cache["first"]

    def token_wall_ms(self) -> np.ndarray:
        """(n_rows,) float64 ms: each token's share of its decode, the group's first-row
        ``wall_ms / mtp_batch`` on every row of the group (telemetry.md, ``mtp_batch``: "Per-token
        cost of a group is the first row's ``wall_ms / mtp_batch``"). Equals ``wall_ms`` without
        speculation."""
        return _spread(self.data["wall_ms"], self.mtp_batch, self.group_first)

    def token_ms(self, name: str) -> np.ndarray | None:
        """(n_rows,) float64: column ``name`` (a per-decode cost charged to the group's first row)
        spread over the group's tokens like :meth:`token_wall_ms`; None when the file lacks it."""
        col = self.column(name)
        if col is None:
            return None
        return _spread(col.astype(np.float64), self.mtp_batch, self.group_first)


def _group_starts(batch: np.ndarray) -> np.ndarray:
    n = batch.size
    first = np.zeros(n, dtype=bool)
    i = 0
    b = batch.tolist()
    while i < n:
        first[i] = True
        i += max(int(b[i]), 1)
    return first


def _spread(values: np.ndarray, batch: np.ndarray, first: np.ndarray) -> np.ndarray:
    idx = np.cumsum(first) - 1                       # group ordinal of each row
    starts = np.flatnonzero(first)
    return values[starts][idx] / batch[starts][idx]


# --- parsing ------------------------------------------------------------------------------------


def _kv_tokens(text: str) -> list[tuple[str, str]]:
    """``key=value`` tokens of a ``#`` line, in order; other tokens are skipped."""
    out = []
    for tok in text.lstrip("#").split():
        if "=" in tok:
            key, value = tok.split("=", 1)
            out.append((key, value))
    return out


def _short(text: str) -> str:
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


def _check_preamble_value(path: str, lineno: int, key: str, value: str) -> None:
    if key == "times" and value != "predicted":
        raise MetricsFormatError(f"{path}:{lineno}: preamble times={value!r}, expected 'predicted' "
                                 f"(the only value refsim writes; measured times carry no key)")
    kind = _PREAMBLE_TYPES.get(key)
    try:
        if kind == "int":
            int(value)
        elif kind == "float":
            v = float(value)
            if not np.isfinite(v):
                raise ValueError
        else:
            return
    except ValueError:
        what = "an integer" if kind == "int" else "a finite number"
        raise MetricsFormatError(
            f"{path}:{lineno}: preamble {key}={value!r}, expected {what}") from None


def _parse_summary(path: str, lineno: int, text: str) -> dict:
    known = {k for k, _ in SUMMARY_KEYS}
    out: dict[str, float] = {}
    for key, value in _kv_tokens(text[len("# summary"):]):
        try:
            v = float(value)
            if not np.isfinite(v):
                raise ValueError
        except ValueError:
            if key in known:
                raise MetricsFormatError(
                    f"{path}:{lineno}: summary {key}={value!r}, expected a finite number") from None
            continue
        if key in out:
            raise MetricsFormatError(f"{path}:{lineno}: summary lists {key}= twice")
        out[key] = v
    if "tokens" not in out:
        raise MetricsFormatError(
            f"{path}:{lineno}: '# summary' line has no tokens= (expected '# summary tokens=N ...')")
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _parse_table(path: str, rows: list[str], lines: list[int], columns: tuple) -> dict:
    """Numeric columns by name: a fast C parse, and on any problem a line-by-line pass naming the
    first bad line and field."""
    n_col = len(columns)
    table = None
    if rows:
        try:
            table = np.loadtxt(io.StringIO("\n".join(rows)), delimiter=",", dtype=np.float64,
                               ndmin=2, comments=None)
            if table.shape != (len(rows), n_col):
                table = None
        except ValueError:
            table = None
    if table is None:
        table = np.zeros((len(rows), n_col))
        for j, row in enumerate(rows):
            fs = row.split(",")
            if len(fs) != n_col:
                raise MetricsFormatError(
                    f"{path}:{lines[j]}: expected {n_col} fields ({','.join(columns)[:80]}...), "
                    f"got {len(fs)}" if n_col > 8 else
                    f"{path}:{lines[j]}: expected {n_col} fields ({','.join(columns)}), "
                    f"got {len(fs)}")
            for c, t in enumerate(fs):
                try:
                    table[j, c] = float(t)
                except ValueError:
                    raise MetricsFormatError(
                        f"{path}:{lines[j]}: column {columns[c]!r} is {_short(t)}, expected a "
                        f"number") from None
    out = {}
    line_arr = np.asarray(lines, dtype=np.int64)
    for c, name in enumerate(columns):
        v = table[:, c]
        bad = ~np.isfinite(v)
        if name in INT_COLUMNS:
            bad |= (v != np.round(v)) | (np.abs(v) > MAX_INT_VALUE)
        if bad.any():
            j = int(np.argmax(bad))
            kind = ("an integer (at most 2^53)" if name in INT_COLUMNS else "a finite number")
            raise MetricsFormatError(
                f"{path}:{line_arr[j]}: column {name!r} is {rows[j].split(',')[c]!r}, "
                f"expected {kind}")
        out[name] = v.astype(np.int64) if name in INT_COLUMNS else v
    return out


def _check_ranges(path: str, data: dict, lines: np.ndarray) -> None:
    def check(name: str, bad: np.ndarray, what: str) -> None:
        if bad.any():
            j = int(np.argmax(bad))
            raise MetricsFormatError(
                f"{path}:{lines[j]}: column {name!r} is {data[name][j]}, expected {what}")

    for name, v in data.items():
        if name in _AT_LEAST_ONE:
            check(name, v < 1, "an integer >= 1")
        elif name in _PERCENT_OR_UNMEASURED:
            check(name, (v != -1) & ((v < 0) | (v > 100)), "a percentage in 0..100, or -1 (no cache)")
        elif name in _FRACTION_OR_UNMEASURED:
            check(name, (v != -1) & ((v < 0) | (v > 1)), "a fraction in 0..1, or -1 (unmeasured)")
        elif name in METRICS_COLUMNS:
            check(name, v < 0, "a value >= 0")
            if name in TIME_COLUMNS:
                check(name, v > MAX_TIME_MS, f"at most {MAX_TIME_MS:g} ms (2.8 hours; the engine's "
                                             f"runs stay below 10^4 ms)")


def _check_sequence(path: str, data: dict, lines: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """Steps count 1, 2, ... within a turn; a new turn (``turn`` up by >= 1, or a new
    ``# summary`` segment) restarts at 1; ``steps`` is constant within a turn. Returns the 0-based
    turn ordinal of each row."""
    step, steps = data["step"], data["steps"]
    n = step.size
    turn = data.get("turn")
    key = turn if turn is not None else segment
    if turn is not None and n > 1:
        down = np.flatnonzero(np.diff(turn) < 0)
        if down.size:
            j = int(down[0]) + 1
            raise MetricsFormatError(
                f"{path}:{lines[j]}: column 'turn' is {turn[j]} after {turn[j - 1]}, expected "
                f"turns in increasing order")
        # a summary closes a turn: the rows after it must be a new turn
        same_after_summary = (segment[1:] != segment[:-1]) & (turn[1:] == turn[:-1])
        if same_after_summary.any():
            j = int(np.argmax(same_after_summary)) + 1
            raise MetricsFormatError(
                f"{path}:{lines[j]}: turn {turn[j]} continues after its '# summary' line; "
                f"expected the next turn's rows")
    new_turn = np.ones(n, dtype=bool)
    if n > 1:
        new_turn[1:] = key[1:] != key[:-1]
    expect = np.where(new_turn, 1, np.concatenate(([1], step[:-1] + 1)))
    bad = step != expect
    if bad.any():
        j = int(np.argmax(bad))
        where = "the first row of a turn" if new_turn[j] else f"after step {step[j - 1]}"
        raise MetricsFormatError(
            f"{path}:{lines[j]}: column 'step' is {step[j]}, expected {expect[j]} ({where}; a "
            f"missing or repeated row?)")
    ordinal = np.cumsum(new_turn) - 1
    if n > 1:
        changed = (~new_turn[1:]) & (steps[1:] != steps[:-1])
        if changed.any():
            j = int(np.argmax(changed)) + 1
            raise MetricsFormatError(
                f"{path}:{lines[j]}: column 'steps' is {steps[j]}, expected {steps[j - 1]} (the "
                f"turn's n_predict target, the same on every row of a turn)")
    return ordinal


def _check_groups(path: str, data: dict, lines: np.ndarray, ordinal: np.ndarray) -> None:
    """A decode group of ``mtp_batch`` = b rows: b consecutive rows of one turn with the same b,
    the cost on the first, ``wall_ms`` 0 on the others (telemetry.md, ``mtp_batch``)."""
    batch = data.get("mtp_batch")
    if batch is None:
        return
    first = _group_starts(batch)
    idx = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    size = np.diff(np.append(starts, batch.size))
    want = batch[starts]
    short = size < want
    if short.any():
        g = int(np.argmax(short))
        j = int(starts[g])
        raise MetricsFormatError(
            f"{path}:{lines[j]}: a decode group of mtp_batch={want[g]} starts here but the file "
            f"ends after {size[g]} row(s) (a truncated file?)")
    bad = batch != want[idx]
    bad |= ordinal != ordinal[starts][idx]
    if bad.any():
        j = int(np.argmax(bad))
        g = int(idx[j])
        raise MetricsFormatError(
            f"{path}:{lines[j]}: row {j - starts[g] + 1} of the decode group starting at line "
            f"{lines[starts[g]]} has mtp_batch={batch[j]}, expected {want[g]} in the same turn "
            f"(one decode confirms mtp_batch tokens, written as that many rows)")
    wall = data["wall_ms"]
    nonzero = (~first) & (wall != 0)
    if nonzero.any():
        j = int(np.argmax(nonzero))
        raise MetricsFormatError(
            f"{path}:{lines[j]}: column 'wall_ms' is {wall[j]} on a row after the first of its "
            f"decode group (mtp_batch={batch[j]}), expected 0 (the group's cost is on its first "
            f"row)")


def read_sidecar(path: str | os.PathLike) -> dict:
    """Read a ``.metrics`` sidecar: one ``key=value`` per line, the value a number.

    Returns
    -------
    dict of str -> float
        E.g. ``peak_rss_kb`` (KiB), ``mem_avail_floor_kb`` (KiB), ``cpu_temp_max_mC``
        (milli-°C), ``batt_temp_max_dC`` (deci-°C).

    Raises
    ------
    MetricsFormatError
        A line that is not ``key=value`` with a finite number, a key listed twice, a file that is
        not UTF-8 text.
    """
    path = os.fspath(path)
    text = _read_text(path)
    out: dict[str, float] = {}
    for i, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        try:
            v = float(value) if sep and key else None
        except ValueError:
            v = None
        if v is None or not np.isfinite(v):
            raise MetricsFormatError(
                f"{path}:{i}: expected a 'key=value' line with a number (e.g. peak_rss_kb=5284608), "
                f"got {_short(line)}")
        if key in out:
            raise MetricsFormatError(f"{path}:{i}: {key}= listed twice")
        out[key] = v
    return out


def sidecar_path_for(path: str) -> str:
    """``<stem>.metrics`` beside ``<stem>.csv`` (or beside ``path`` plus ``.metrics`` when the
    name has no ``.csv`` suffix)."""
    stem, ext = os.path.splitext(path)
    return (stem if ext.lower() == ".csv" else path) + ".metrics"


def _read_text(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise MetricsFormatError(f"{path}: cannot read: {exc.strerror}") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MetricsFormatError(f"{path}: not UTF-8 text (byte offset {exc.start})") from None


def _read_preamble(path: str, lines: list[str], i: int, config: dict) -> int:
    """Merge the ``# key=value`` lines from ``lines[i]`` into ``config``; returns the index of
    the column header line."""
    while i < len(lines) and lines[i].startswith("#"):
        if lines[i].startswith("# summary"):
            raise MetricsFormatError(
                f"{path}:{i + 1}: '# summary' before the column header (expected the header "
                f"line 'step,steps,wall_ms,...')")
        for key, value in _kv_tokens(lines[i]):
            _check_preamble_value(path, i + 1, key, value)
            if key in config and config[key] != value:
                raise MetricsFormatError(
                    f"{path}:{i + 1}: preamble {key}={value!r} after {key}={config[key]!r}; "
                    f"expected one value per key")
            config[key] = value
        i += 1
    if i >= len(lines):
        raise MetricsFormatError(
            f"{path}:{i + 1}: expected the column header line 'step,steps,wall_ms,...', got "
            f"end of file")
    return i


def read_metrics(path: str | os.PathLike, sidecar: bool = True) -> MetricsRun:
    """Read an engine per-token metrics CSV (``v2``, ``v1`` or legacy) and its sidecar.

    Parameters
    ----------
    path : str or path-like
    sidecar : bool, default True
        Read ``<stem>.metrics`` beside the file when it exists.

    Returns
    -------
    MetricsRun

    Raises
    ------
    MetricsFormatError
        Naming the file and line: an unknown first line (neither ``# bmoe_metrics v1|v2``, a
        ``step,...`` header nor an 8-field row), an unsupported version, a preamble value of the
        wrong type or a key given twice with two values, a missing or repeated column, a row with
        the wrong field count (a truncated last line included), a non-numeric or non-finite field,
        a value out of range (negative times or bytes, a time above :data:`MAX_TIME_MS`, a hit %
        outside 0..100 and not -1, a step, steps or mtp_batch below 1), steps not counting 1, 2,
        ... within a turn, turns out of order, a decode group cut short or with a non-zero
        ``wall_ms`` after its first row, a ``# summary`` whose ``tokens=`` differs from its turn's
        rows, a ``#`` line that is neither preamble nor summary after the header; and the
        sidecar's errors (:func:`read_sidecar`).
    """
    path = os.fspath(path)
    text = _read_text(path)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    elif lines:
        raise MetricsFormatError(
            f"{path}:{len(lines)}: last line is truncated (no end of line): {_short(lines[-1])}")
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
    if not lines:
        raise MetricsFormatError(f"{path}:1: expected '# bmoe_metrics v2' (or v1, or a legacy "
                                 f"'step,steps,wall_ms,...' header), got an empty file")
    first = lines[0]
    config: dict[str, str] = {}
    i = 0
    m = _MAGIC.match(first)
    if m:
        version = int(m.group(1))
        if version not in SUPPORTED_VERSIONS:
            raise MetricsFormatError(
                f"{path}:1: bmoe_metrics v{version} is not supported (expected v1 or v2)")
        layout, has_header = SUPPORTED_VERSIONS[version], True
        i = _read_preamble(path, lines, 1, config)
    elif first.startswith("#") and not first.startswith("# summary") and _kv_tokens(first):
        # a legacy file with '# key=value' lines but no magic line: read them as its preamble
        layout, has_header = "legacy", True
        i = _read_preamble(path, lines, 0, config)
    elif first.startswith("#"):
        hint = " (a route trace: read it with refsim replay/analyze)" \
            if first.startswith("# route_trace") else ""
        raise MetricsFormatError(
            f"{path}:1: expected '# bmoe_metrics v2' or '# bmoe_metrics v1', got "
            f"{_short(first)}{hint}")
    elif first.split(",")[0].strip() == "step":
        layout, has_header = "legacy", True
    elif len(first.split(",")) == len(LEGACY_COLUMNS) and all(
            _is_number(t) for t in first.split(",")):
        layout, has_header = "legacy", False
    else:
        raise MetricsFormatError(
            f"{path}:1: expected '# bmoe_metrics v2', '# bmoe_metrics v1', a 'step,steps,"
            f"wall_ms,...' header or a header-less row of {len(LEGACY_COLUMNS)} numbers "
            f"({','.join(LEGACY_COLUMNS)}), got {_short(first)}")

    if has_header:
        columns = tuple(c.strip() for c in lines[i].split(","))
        header_line = i + 1
        if all(_is_number(c) for c in columns):
            raise MetricsFormatError(
                f"{path}:{header_line}: expected the column header line 'step,steps,wall_ms,...' "
                f"after the preamble, got a row of numbers")
        seen: set[str] = set()
        for c in columns:
            if not c:
                raise MetricsFormatError(f"{path}:{header_line}: empty column name in the header")
            if c in seen:
                raise MetricsFormatError(f"{path}:{header_line}: column {c!r} appears twice")
            seen.add(c)
        missing = [c for c in REQUIRED_COLUMNS[layout] if c not in seen]
        if missing:
            raise MetricsFormatError(
                f"{path}:{header_line}: the {layout} header lacks column(s) {', '.join(missing)} "
                f"(expected {','.join(REQUIRED_COLUMNS[layout])})")
        i += 1
    else:
        columns = LEGACY_COLUMNS

    rows: list[str] = []
    row_lines: list[int] = []
    row_segment: list[int] = []
    summaries: list[dict] = []
    summary_lines: list[int] = []
    for j in range(i, len(lines)):
        ln = lines[j]
        if ln.startswith("# summary"):
            summaries.append(_parse_summary(path, j + 1, ln))
            summary_lines.append(j + 1)
        elif ln.startswith("#"):
            raise MetricsFormatError(
                f"{path}:{j + 1}: expected a row or a '# summary ...' line after the header, got "
                f"{_short(ln)}")
        elif not ln.strip():
            raise MetricsFormatError(f"{path}:{j + 1}: empty line; expected a row")
        else:
            rows.append(ln)
            row_lines.append(j + 1)
            row_segment.append(len(summaries))

    data = _parse_table(path, rows, row_lines, columns)
    line_arr = np.asarray(row_lines, dtype=np.int64)
    segment = np.asarray(row_segment, dtype=np.int64)
    _check_ranges(path, data, line_arr)
    ordinal = _check_sequence(path, data, line_arr, segment)
    _check_groups(path, data, line_arr, ordinal)

    # each summary closes the rows written since the previous one
    counts = np.bincount(segment, minlength=len(summaries) + 1) if rows else \
        np.zeros(len(summaries) + 1, dtype=np.int64)
    for s, (summ, sl) in enumerate(zip(summaries, summary_lines)):
        if summ["tokens"] != counts[s]:
            raise MetricsFormatError(
                f"{path}:{sl}: summary tokens={summ['tokens']:g}, but its turn has {counts[s]} "
                f"row(s) (expected one row per emitted token; rows missing or repeated?)")
    complete = bool(counts[len(summaries)] == 0)

    side, side_path = None, None
    if sidecar:
        candidate = sidecar_path_for(path)
        if os.path.isfile(candidate):
            side, side_path = read_sidecar(candidate), candidate
    return MetricsRun(path=path, layout=layout, header=has_header, config=config, columns=columns,
                      data=data, line_numbers=line_arr, turn_index=ordinal,
                      summaries=tuple(summaries), summary_line_numbers=tuple(summary_lines),
                      complete=complete, sidecar=side, sidecar_path=side_path)
