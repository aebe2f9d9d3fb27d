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
from dataclasses import dataclass, field

import numpy as np

from refsim.errors import TraceFormatError
from refsim.events import NOT_ROUTED, DecodeEvent, DecodeKind
from refsim.trace.format import OPTIONAL_COLUMNS, REQUIRED_COLUMNS, TRACE_MAGIC, TraceHeader


@dataclass
class RouteTrace:
    """A route trace read from disk: the header, the decode events and the engine's records.

    Attributes
    ----------
    header : TraceHeader
    events : list of DecodeEvent
        In file order. Prefill events are ``DecodeKind.PREFILL``; a decode event with one
        position is ``PLAIN``, with more it is ``VERIFY`` (``n_draft = n_pos - 1``).
    residency : list of (n_pos, n_layer, k) int8 ndarray
        Recorded residency per slot (0 miss, 1 hit, 2 prefetched hit; -1 where not routed).
    charged_bytes : list of (n_pos, n_layer, k) int64 ndarray
        The ``expert_bytes`` column per slot (bytes charged on the first miss row of an expert).
    line_numbers : list of (n_pos, n_layer, k) int32 ndarray
        1-based line of each slot's row (0 where not routed), for error messages.
    path : str
        The file read.
    """

    header: TraceHeader
    events: list[DecodeEvent]
    residency: list[np.ndarray]
    charged_bytes: list[np.ndarray]
    line_numbers: list[np.ndarray]
    path: str = ""
    has_dropped_column: bool = False
    n_rows: int = 0
    speculative: bool = field(default=False)

    @property
    def n_prompt(self) -> int:
        """Positions prefilled in turn 0 (the engine's ``n_prompt``)."""
        return sum(e.n_pos for e in self.events if e.kind is DecodeKind.PREFILL and e.turn == 0)

    @property
    def decode_events(self) -> list[DecodeEvent]:
        """The phase-1 events."""
        return [e for e in self.events if e.phase == 1]

    @property
    def unrouted_layers(self) -> list[int]:
        """Layers of the preamble that no row of the trace routes (the MTP head's layer of an
        ``--mtp`` trace: the engine does not record the head's draft routings); [] for an empty
        trace."""
        seen = _routed_layers(self.events, self.header.n_layer)
        return np.flatnonzero(~seen).tolist() if seen.any() else []


def _kv_tokens(text: str) -> dict[str, str]:
    """``key=value`` tokens of a ``#`` preamble line; other tokens are ignored."""
    out: dict[str, str] = {}
    for tok in text.lstrip("#").split():
        if "=" in tok:
            key, value = tok.split("=", 1)
            out[key] = value
    return out


def _header_int(path: str, lineno: int, kv: dict[str, str], key: str) -> int:
    if key not in kv:
        raise TraceFormatError(f"{path}:{lineno}: preamble has no {key}= (expected '{key}=<int>')")
    try:
        return int(kv[key])
    except ValueError:
        raise TraceFormatError(
            f"{path}:{lineno}: {key}={kv[key]!r} is not an integer") from None


def _parse_header(path: str, lines: list[str]) -> tuple[TraceHeader, int, list[str]]:
    """Parse the preamble; returns the header, the index of the column line, and its columns."""
    if not lines or lines[0].rstrip("\r\n") != TRACE_MAGIC:
        got = lines[0].rstrip("\r\n")[:60] if lines else "an empty file"
        raise TraceFormatError(f"{path}:1: expected {TRACE_MAGIC!r}, got {got!r}")
    model_kv: dict[str, str] | None = None
    model_line = 0
    layers: dict[int, tuple[int, int]] = {}
    i = 1
    while i < len(lines) and lines[i].startswith("#"):
        kv = _kv_tokens(lines[i])
        if "layer" in kv:
            il = _header_int(path, i + 1, kv, "layer")
            eb = _header_int(path, i + 1, kv, "expert_bytes")
            db = _header_int(path, i + 1, kv, "dense_bytes")
            if il in layers:
                raise TraceFormatError(f"{path}:{i + 1}: layer={il} listed twice in the preamble")
            if eb <= 0 or db < 0:
                raise TraceFormatError(
                    f"{path}:{i + 1}: layer={il} needs expert_bytes > 0 and dense_bytes >= 0, "
                    f"got {eb} and {db}")
            layers[il] = (eb, db)
        elif "arch" in kv or "n_layer" in kv:
            model_kv, model_line = kv, i + 1
        i += 1
    if model_kv is None:
        raise TraceFormatError(
            f"{path}: missing the model preamble line "
            f"('# model=... arch=... n_layer=N n_expert=N n_expert_used=K')")
    n_layer = _header_int(path, model_line, model_kv, "n_layer")
    n_expert = _header_int(path, model_line, model_kv, "n_expert")
    k = _header_int(path, model_line, model_kv, "n_expert_used")
    if n_layer < 1 or n_expert < 1 or not 1 <= k <= n_expert:
        raise TraceFormatError(
            f"{path}:{model_line}: need n_layer >= 1, n_expert >= 1, 1 <= n_expert_used <= "
            f"n_expert; got {n_layer}, {n_expert}, {k}")
    missing = [il for il in range(n_layer) if il not in layers]
    if missing:
        raise TraceFormatError(
            f"{path}: preamble has no '# layer=L expert_bytes=B dense_bytes=B' line for layer "
            f"{missing[0]} ({len(missing)} of n_layer={n_layer} layers missing)")
    extra_layers = sorted(il for il in layers if not 0 <= il < n_layer)
    if extra_layers:
        raise TraceFormatError(
            f"{path}: preamble lists layer={extra_layers[0]} outside 0..{n_layer - 1}")
    if i >= len(lines):
        raise TraceFormatError(f"{path}:{i + 1}: expected the column header line, got end of file")
    columns = [c.strip() for c in lines[i].rstrip("\r\n").split(",")]
    absent = [c for c in REQUIRED_COLUMNS if c not in columns]
    if absent:
        raise TraceFormatError(
            f"{path}:{i + 1}: column header lacks {', '.join(absent)} "
            f"(expected {','.join(REQUIRED_COLUMNS)}[,dropped])")
    known = {"model", "arch", "n_layer", "n_expert", "n_expert_used"}
    header = TraceHeader(
        model=model_kv.get("model", ""), arch=model_kv.get("arch", ""), n_layer=n_layer,
        n_expert=n_expert, n_expert_used=k,
        expert_bytes=np.array([layers[il][0] for il in range(n_layer)], dtype=np.int64),
        dense_bytes=np.array([layers[il][1] for il in range(n_layer)], dtype=np.int64),
        extra=tuple((key, v) for key, v in model_kv.items() if key not in known))
    return header, i, columns


def _column(path: str, first_line: int, name: str, texts: np.ndarray, dtype) -> np.ndarray:
    """Convert one column of strings; on failure name the first bad line."""
    try:
        if dtype is np.float64:
            return texts.astype(np.float64)
        return texts.astype(np.int64)
    except ValueError:
        for j, t in enumerate(texts):
            try:
                float(t) if dtype is np.float64 else int(t)
            except ValueError:
                kind = "a number" if dtype is np.float64 else "an integer"
                raise TraceFormatError(
                    f"{path}:{first_line + j}: column {name!r} is {str(t)!r}, expected {kind}"
                ) from None
        raise  # pragma: no cover - astype failed yet every value converts


_INT_COLUMNS = tuple(c for c in REQUIRED_COLUMNS + OPTIONAL_COLUMNS if c != "weight")


def _parse_rows(path: str, data: list[str], columns: list[str], line0: int) -> dict:
    """Numeric columns by name. A fast C parse first; on any problem a line-by-line pass that
    names the first bad line."""
    n_col = len(columns)
    wanted = [c for c in columns if c in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    if data:
        try:
            table = np.loadtxt(io.StringIO("\n".join(data)), delimiter=",", dtype=np.float64,
                               ndmin=2, comments=None)
            if table.shape[1] == n_col:
                out = {}
                for c in wanted:
                    v = table[:, columns.index(c)]
                    if c == "weight":
                        out[c] = v
                        continue
                    if not (np.isfinite(v).all() and (v == np.round(v)).all()):
                        raise ValueError
                    out[c] = v.astype(np.int64)
                return out
        except ValueError:
            pass
    fields = [ln.rstrip("\r").split(",") for ln in data]
    for j, f in enumerate(fields):
        if len(f) != n_col:
            raise TraceFormatError(
                f"{path}:{line0 + j}: expected {n_col} fields ({','.join(columns)}), got {len(f)}")
    out = {}
    for c in wanted:
        texts = np.array([f[columns.index(c)] for f in fields], dtype=str)
        out[c] = _column(path, line0, c, texts, np.float64 if c == "weight" else np.int64)
    return out


def read_trace(path: str | os.PathLike) -> RouteTrace:
    """Read a ``route_trace v1`` file into decode events.

    Parameters
    ----------
    path : str or path-like
        The trace file (9 columns, or 10 with ``dropped``; columns are read by name).

    Returns
    -------
    RouteTrace

    Raises
    ------
    TraceFormatError
        Naming the file and line: missing magic or model line, a layer without
        ``expert_bytes``/``dense_bytes``, a missing column, a row with the wrong field count
        (including a truncated last line), a non-numeric field, a value out of range
        (phase not 0/1, slot >= n_expert_used, expert >= n_expert, layer >= n_layer,
        residency not 0/1/2), or a duplicate ``(turn, phase, step, layer, slot)`` in a trace
        without speculative (multi-position) decodes.
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{path}: not UTF-8 text (byte offset {exc.start})") from None
    lines = text.split("\n")
    ends_with_newline = lines[-1] == ""
    if ends_with_newline:
        lines.pop()
    header, col_idx, columns = _parse_header(path, lines)
    first = col_idx + 1  # index of the first data line
    data = lines[first:]
    if data and not ends_with_newline:
        raise TraceFormatError(
            f"{path}:{len(lines)}: last line is truncated (no end of line): {data[-1][:60]!r}")
    line0 = first + 1
    cols = _parse_rows(path, data, columns, line0)
    n_rows = len(data)
    turn, phase, step, layer = cols["turn"], cols["phase"], cols["step"], cols["layer"]
    slot, expert, residency = cols["slot"], cols["expert"], cols["residency"]
    charged, weight = cols["expert_bytes"], cols["weight"]
    dropped = cols.get("dropped", np.zeros(n_rows, dtype=np.int64))

    def check(bad: np.ndarray, what: str, name: str, values: np.ndarray) -> None:
        if bad.any():
            j = int(np.argmax(bad))
            raise TraceFormatError(
                f"{path}:{line0 + j}: column {name!r} is {values[j]}, expected {what}")

    k, n_layer, n_expert = header.n_expert_used, header.n_layer, header.n_expert
    check((phase != 0) & (phase != 1), "0 (prefill) or 1 (decode)", "phase", phase)
    check(turn < 0, "a turn >= 0", "turn", turn)
    check(step < 0, "a position >= 0", "step", step)
    check((layer < 0) | (layer >= n_layer), f"a layer in 0..{n_layer - 1}", "layer", layer)
    check((slot < 0) | (slot >= k), f"a slot in 0..{k - 1} (n_expert_used={k})", "slot", slot)
    check((expert < 0) | (expert >= n_expert), f"an expert id in 0..{n_expert - 1}", "expert",
          expert)
    check((residency < 0) | (residency > 2), "residency 0, 1 or 2", "residency", residency)
    check(charged < 0, "bytes >= 0", "expert_bytes", charged)
    check((dropped != 0) & (dropped != 1), "0 or 1", "dropped", dropped)

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

    events: list[DecodeEvent] = []
    res_list: list[np.ndarray] = []
    bytes_list: list[np.ndarray] = []
    line_list: list[np.ndarray] = []
    for a, b in zip(starts.tolist(), ends.tolist()):
        steps = np.unique(step[a:b])
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
        lines_arr[idx] = np.arange(line0 + a, line0 + b, dtype=np.int32)
        drop[idx] = dropped[a:b] != 0
        if int(phase[a]) == 0:
            kind = DecodeKind.PREFILL
        else:
            kind = DecodeKind.PLAIN if len(steps) == 1 else DecodeKind.VERIFY
        events.append(DecodeEvent(
            kind=kind, positions=steps.astype(np.int64), routes=routes, weights=weights,
            dropped=drop if drop.any() else None, turn=int(turn[a]),
            n_draft=len(steps) - 1 if kind is DecodeKind.VERIFY else 0))
        res_list.append(res)
        bytes_list.append(chg)
        line_list.append(lines_arr)

    _check_complete(path, events, line_list)
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
                            f"{path}:{line0 + j}: duplicate (turn, phase, step, layer, slot) = "
                            f"{t} in a trace without speculative decodes; expected each routed "
                            f"slot once")
                    seen.add(t)
    _check_positions(path, events, line_list)
    _infer_accepted(events)
    return RouteTrace(header=header, events=events, residency=res_list, charged_bytes=bytes_list,
                      line_numbers=line_list, path=path, has_dropped_column="dropped" in columns,
                      n_rows=n_rows, speculative=speculative)


def _routed_layers(events: list[DecodeEvent], n_layer: int) -> np.ndarray:
    """(n_layer,) bool: the layers at least one row of ``events`` routes."""
    seen = np.zeros(n_layer, dtype=bool)
    for ev in events:
        seen |= (ev.routes >= 0).any(axis=(0, 2))
    return seen


def _check_complete(path: str, events: list[DecodeEvent], lines: list[np.ndarray]) -> None:
    """Every decode has its full set of rows (docs/trace-format.md, "Validation").

    The format writes one row per routed slot, dropped slots included, so a routed (position,
    layer) has all ``n_expert_used`` slots, and every position of a decode is routed in every
    layer the trace routes at all (``L``, the union over its decodes; an ``--mtp`` trace omits the
    head's layer everywhere). The one exception is llama.cpp's last-layer rule: a prefill chunk
    routes its last layer of ``L`` for the prompt's final position only (or none). A file cut at a
    row boundary, or with rows deleted, breaks one of these; without the check it would replay
    to plausible but wrong counters.
    """
    routed_layers = np.flatnonzero(_routed_layers(events, events[0].n_layer if events else 0))
    if routed_layers.size == 0:
        return
    last = int(routed_layers[-1])
    for ev, ln in zip(events, lines):
        present = ev.routes >= 0                                   # [n_pos, n_layer, k]
        some = present.any(axis=2)
        partial = some & ~present.all(axis=2)
        if partial.any():
            p, il = (int(v[0]) for v in np.nonzero(partial))
            row = int(ln[p, il][present[p, il]].min())
            have = np.flatnonzero(present[p, il]).tolist()
            raise TraceFormatError(
                f"{path}:{row}: layer {il} at step {int(ev.positions[p])} has rows for slots {have} "
                f"only; expected all {present.shape[2]} slots (one row per routed slot; a deleted "
                f"row or a truncated file?)")
        need = routed_layers if ev.phase == 1 else routed_layers[routed_layers != last]
        missing = ~some[:, need]
        if missing.any():
            p, j = (int(v[0]) for v in np.nonzero(missing))
            first = int(ln[present].min())
            raise TraceFormatError(
                f"{path}:{first}: the {'decode' if ev.phase == 1 else 'prefill'} starting here has "
                f"no rows for layer {int(need[j])} at step {int(ev.positions[p])}; expected every "
                f"position in every layer the trace routes ({_span(routed_layers)}) (a file cut "
                f"at a row boundary, or rows deleted?)")


def _check_positions(path: str, events: list[DecodeEvent], lines: list[np.ndarray]) -> None:
    """Positions follow the loop (docs/trace-format.md, "Validation"): a position's top-k experts
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
        if a.turn != b.turn or (a.phase == 1 and b.phase == 0):
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


def _span(layers: np.ndarray) -> str:
    lo, hi = int(layers[0]), int(layers[-1])
    return f"layers {lo}..{hi}" if layers.size == hi - lo + 1 else f"layers {layers.tolist()}"


def _check_charged(path: str, expert_bytes: np.ndarray, events: list[DecodeEvent],
                   residency: list[np.ndarray], charged: list[np.ndarray],
                   lines: list[np.ndarray]) -> None:
    """The ``expert_bytes`` column is the preamble's entry size on the first miss row of an expert
    in its layer batch and 0 on every other row (hits, repeats, dropped slots), bytes
    (bmoe-engine.md §4, route trace; docs/trace-format.md)."""
    for ev, res, chg, ln in zip(events, residency, charged, lines):
        n_pos, n_layer, k = ev.routes.shape
        lm = lambda a: a.transpose(1, 0, 2).reshape(-1)      # noqa: E731 - layer-major batch order
        r, c, rs, rows = lm(ev.routes).astype(np.int64), lm(chg), lm(res), lm(ln)
        layer = np.repeat(np.arange(n_layer), n_pos * k)
        routed = r >= 0
        looked_up = routed if ev.dropped is None else routed & ~lm(ev.dropped)
        miss = (rs == 0) & looked_up
        key = np.where(looked_up, layer * (int(r.max(initial=0)) + 1) + r, -1)
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
