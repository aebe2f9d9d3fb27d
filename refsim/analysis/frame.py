"""A route trace as a flat table of routings, grouped into units (docs/analysis.md, "Framing").

Every view of ``refsim analyze`` is computed over *units*, ordered in time. Two framings:

- ``decode`` (refsim's, the default): one unit per decode event of the trace, i.e. one graph
  the engine evaluated and one ``load_layer`` call per layer (docs/architecture.md). A verify
  decode of ``[tok, d1..dn]`` is one unit; a position the verify rejected and the next decode
  fed again appears in both units.
- ``position`` (the engine's ``route-analyze.py``): one unit per context position (the
  trace's ``step``): a verify decode is split back into single positions and the rows of a
  position decoded twice (or in two turns) are merged into one unit.

On a trace of plain decodes only (one position per decode) the two framings are the same units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim.errors import ConfigError
from refsim.events import DecodeKind, confirmed_tokens
from refsim.trace import RouteTrace

FRAMINGS = ("decode", "position")
PHASES = {"prefill": 0, "decode": 1, "all": None}

SPAN_MAX_PARTS = 10_000
"""Most comma-separated parts a ``--steps`` / ``--layers`` span may have."""


def parse_span(text: str | None, what: str) -> list[tuple[int, int]] | None:
    """``"0-15"``, ``"0..15"``, ``"3,5,7"`` or a mix into inclusive ``(lo, hi)`` intervals.

    The engine's scripts write ``A-B``; refsim's other flags write ``A..B``; both are accepted.
    Intervals are kept as pairs (no set is built), so a huge range costs nothing.

    Raises
    ------
    ConfigError
        ``"<what> <text>: expected N, A-B or a comma list of them (integers >= 0)"``.
    """
    if text is None:
        return None
    parts = text.split(",")
    bad = ConfigError(f"{what} {text!r}: expected N, A-B, A..B or a comma list of them "
                      f"(integers >= 0, A <= B)")
    if len(parts) > SPAN_MAX_PARTS:
        raise bad
    out = []
    for part in parts:
        part = part.strip()
        sep = ".." if ".." in part else ("-" if "-" in part else None)
        try:
            if sep:
                a, b = part.split(sep, 1)
                lo, hi = int(a), int(b)
            else:
                lo = hi = int(part)
        except ValueError:
            raise bad from None
        if lo < 0 or hi < lo:
            raise bad
        out.append((lo, hi))
    return out


def in_span(values: np.ndarray, span: list[tuple[int, int]] | None) -> np.ndarray:
    """Boolean mask: ``values`` inside any interval of ``span`` (all True when None)."""
    values = np.asarray(values)
    if span is None:
        return np.ones(values.shape, dtype=bool)
    mask = np.zeros(values.shape, dtype=bool)
    for lo, hi in span:
        mask |= (values >= lo) & (values <= hi)
    return mask


def decimal_weights(w: np.ndarray) -> np.ndarray:
    """float32 weights to float64 as the trace wrote them.

    The engine writes weights with ``%.6g`` (at most 6 significant digits) and the shortest
    text of a float32 reads back to that decimal exactly (docs/trace-format.md, "Writing"), so
    ``float(str(np.float32(w)))`` is the file's value. NaN stays NaN.
    """
    w = np.asarray(w, dtype=np.float32).ravel()
    vals, inv = np.unique(w, return_inverse=True)           # each distinct value converted once
    dec = np.array([float(np.format_float_positional(x, unique=True, trim="-"))
                    if np.isfinite(x) else float(x) for x in vals], dtype=np.float64)
    return dec[inv.reshape(-1)]


@dataclass(frozen=True, eq=False)
class Framed:
    """The routings of a trace selection, grouped into units.

    Row arrays (one entry per routed slot, dropped slots included), ordered by unit, then
    layer, then (decode framing) position and slot, (position framing) slot then file line:

    ``unit``, ``step``, ``layer``, ``slot``, ``expert``, ``residency`` (0 miss, 1 hit,
    2 prefetched), ``bytes`` (the ``expert_bytes`` column), ``line`` (1-based file line):
    int64; ``weight``: float64 (NaN = unknown); ``dropped``: bool.

    Unit arrays (``n_units`` entries): ``unit_turn``, ``unit_phase``, ``unit_first``,
    ``unit_last`` (first/last position), ``unit_npos`` (positions), ``unit_kind``
    (:class:`DecodeKind` value; position framing: the kind of the first event that fed it),
    ``unit_tokens`` (confirmed tokens; decode framing only, else 0), ``unit_event`` (index in
    ``trace.events``; position framing: the first event).
    """

    framing: str
    header: object
    n_rows_total: int
    unit: np.ndarray
    step: np.ndarray
    layer: np.ndarray
    slot: np.ndarray
    expert: np.ndarray
    weight: np.ndarray
    residency: np.ndarray
    bytes: np.ndarray
    dropped: np.ndarray
    line: np.ndarray
    unit_turn: np.ndarray
    unit_phase: np.ndarray
    unit_first: np.ndarray
    unit_last: np.ndarray
    unit_npos: np.ndarray
    unit_kind: np.ndarray
    unit_tokens: np.ndarray
    unit_event: np.ndarray

    @property
    def n_units(self) -> int:
        return int(self.unit_turn.size)

    @property
    def n_rows(self) -> int:
        return int(self.unit.size)

    def layers(self) -> list[int]:
        """Layers with at least one row, ascending."""
        return np.unique(self.layer).tolist()

    def select_rows(self, mask: np.ndarray) -> "Framed":
        """The same units with only the rows of ``mask`` (e.g. a layer selection)."""
        kw = {f: getattr(self, f)[mask] for f in _ROW_FIELDS}
        return _replace(self, **kw)


_ROW_FIELDS = ("unit", "step", "layer", "slot", "expert", "weight", "residency", "bytes",
               "dropped", "line")
_UNIT_FIELDS = ("unit_turn", "unit_phase", "unit_first", "unit_last", "unit_npos", "unit_kind",
                "unit_tokens", "unit_event")


def _replace(fr: Framed, **kw) -> Framed:
    args = {f: getattr(fr, f) for f in ("framing", "header", "n_rows_total") + _ROW_FIELDS
            + _UNIT_FIELDS}
    args.update(kw)
    return Framed(**args)


def frame_trace(trace: RouteTrace, framing: str = "decode", phase: int | None = 1,
                turn: int | None = None, steps: list[tuple[int, int]] | None = None,
                layers: list[tuple[int, int]] | None = None) -> Framed:
    """Select and frame a trace's routings.

    Parameters
    ----------
    trace : RouteTrace
    framing : {"decode", "position"}
    phase : 0, 1 or None
        Trace phase to keep (0 prefill, 1 decode, None both).
    turn : int, optional
        Session turn to keep (None: all turns).
    steps : list of (lo, hi), optional
        Positions to keep. Decode framing keeps the decodes whose *first* position is inside
        (a verify batch is never cut); position framing keeps the positions inside.
    layers : list of (lo, hi), optional
        Layers to keep (rows of other layers are left out).

    Raises
    ------
    ConfigError
        Unknown framing, a layer selection outside ``0..n_layer-1``, or a selection with no row
        (naming the flags).
    """
    if framing not in FRAMINGS:
        raise ConfigError(f"--framing {framing!r}: expected one of {', '.join(FRAMINGS)}")
    h = trace.header
    if layers is not None:
        hi = max(b for _a, b in layers)
        if hi >= h.n_layer:
            raise ConfigError(f"--layers: layer {hi} is outside 0..{h.n_layer - 1} "
                              f"(the trace's n_layer={h.n_layer})")
    cols = {f: [] for f in _ROW_FIELDS}
    ev_idx = []
    for i, (ev, res, chg, ln) in enumerate(zip(trace.events, trace.residency,
                                               trace.charged_bytes, trace.line_numbers)):
        if phase is not None and ev.phase != phase:
            continue
        if turn is not None and ev.turn != turn:
            continue
        if framing == "decode" and not in_span(ev.positions[:1], steps)[0]:
            continue
        p, il, s = np.nonzero(ev.routes >= 0)
        dropped = (ev.dropped[p, il, s] if ev.dropped is not None
                   else np.zeros(p.size, dtype=bool))
        w = ev.weights[p, il, s] if ev.weights is not None else np.full(p.size, np.nan)
        cols["unit"].append(np.full(p.size, len(ev_idx), np.int64))
        cols["step"].append(ev.positions[p].astype(np.int64))
        cols["layer"].append(il.astype(np.int64))
        cols["slot"].append(s.astype(np.int64))
        cols["expert"].append(ev.routes[p, il, s].astype(np.int64))
        cols["weight"].append(np.asarray(w, np.float32))
        cols["residency"].append(res[p, il, s].astype(np.int64))
        cols["bytes"].append(chg[p, il, s].astype(np.int64))
        cols["dropped"].append(np.asarray(dropped, bool))
        cols["line"].append(ln[p, il, s].astype(np.int64))
        ev_idx.append(i)
    if not ev_idx:
        raise ConfigError("no rows for that --phase/--turn/--steps selection")
    rows = {f: np.concatenate(v) for f, v in cols.items()}
    rows["weight"] = decimal_weights(rows["weight"])
    events = [trace.events[i] for i in ev_idx]
    if framing == "decode":
        order = np.argsort(rows["line"], kind="stable")       # file order: layer, pos, slot
        rows = {f: v[order] for f, v in rows.items()}
        units = dict(
            unit_turn=np.array([e.turn for e in events], np.int64),
            unit_phase=np.array([e.phase for e in events], np.int64),
            unit_first=np.array([int(e.positions[0]) for e in events], np.int64),
            unit_last=np.array([int(e.positions[-1]) for e in events], np.int64),
            unit_npos=np.array([e.n_pos for e in events], np.int64),
            unit_kind=np.array([int(e.kind) for e in events], np.int64),
            unit_tokens=np.array([confirmed_tokens(e) for e in events], np.int64),
            unit_event=np.array(ev_idx, np.int64))
    else:
        keep = in_span(rows["step"], steps)
        rows = {f: v[keep] for f, v in rows.items()}
        if not rows["step"].size:
            raise ConfigError("no rows for that --phase/--turn/--steps selection")
        uniq, unit = np.unique(rows["step"], return_inverse=True)
        first_ev = np.full(uniq.size, -1, np.int64)
        ev_of_row = np.array(ev_idx, np.int64)[rows["unit"]]
        order_f = np.argsort(rows["line"], kind="stable")
        for j in order_f[::-1]:                               # first event feeding each unit
            first_ev[unit[j]] = ev_of_row[j]
        rows["unit"] = unit.astype(np.int64)
        order = np.lexsort((rows["line"], rows["slot"], rows["layer"], rows["unit"]))
        rows = {f: v[order] for f, v in rows.items()}
        evs = [trace.events[i] for i in first_ev.tolist()]
        units = dict(
            unit_turn=np.array([e.turn for e in evs], np.int64),
            unit_phase=np.array([e.phase for e in evs], np.int64),
            unit_first=uniq.astype(np.int64), unit_last=uniq.astype(np.int64),
            unit_npos=np.ones(uniq.size, np.int64),
            unit_kind=np.array([int(DecodeKind.PREFILL) if e.phase == 0 else
                                int(DecodeKind.PLAIN) for e in evs], np.int64),
            unit_tokens=np.zeros(uniq.size, np.int64), unit_event=first_ev)
    fr = Framed(framing=framing, header=h, n_rows_total=trace.n_rows, **rows, **units)
    if layers is not None:
        fr = fr.select_rows(in_span(fr.layer, layers))
        if not fr.n_rows:
            raise ConfigError("no rows for that --layers selection")
    return fr
