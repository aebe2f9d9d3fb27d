"""Write ``route_trace v1`` files (10 columns, the engine's current writer) by the rules of
:mod:`refsim.fileio` (a file is replaced atomically, ``-`` is stdout, a FIFO is streamed).

Rows are written as the engine flushes them: per decode, layer-major, then position, then
slot. ``residency`` and ``expert_bytes`` are what the cache model recorded for the event
(:class:`refsim.cache.EventRecord`), so a trace written by a live run replays to the same
counters. Weights are written as the shortest text that reads back to the same float32
(the engine writes ``%.6g``; a value with at most 6 significant digits is written the same way).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence

import numpy as np

from refsim.events import DecodeEvent, DecodeKind
from refsim.fileio import open_output
from refsim.trace.convention import CONVENTIONS, chunk_shape
from refsim.trace.format import PRED_COLUMNS, TRACE_MAGIC, WRITE_COLUMNS, TraceHeader


def format_header(header: TraceHeader, pred: bool = False) -> str:
    """The preamble and column line of a trace, newline-terminated; ``pred``: add the
    :data:`~refsim.trace.format.PRED_COLUMNS` (a run with ``--predict-prefetch`` or
    ``--route-ahead``)."""
    extra = "".join(f" {k}={v}" for k, v in header.extra)
    out = [TRACE_MAGIC,
           f"# model={header.model} arch={header.arch} n_layer={header.n_layer} "
           f"n_expert={header.n_expert} n_expert_used={header.n_expert_used}{extra}"]
    for il in range(header.n_layer):
        out.append(f"# layer={il} expert_bytes={int(header.expert_bytes[il])} "
                   f"dense_bytes={int(header.dense_bytes[il])}")
    out.append(",".join(WRITE_COLUMNS + (PRED_COLUMNS if pred else ())))
    return "\n".join(out) + "\n"


def _weight_text(w: float) -> str:
    if np.isnan(w):
        return "nan"
    if not 0 <= np.float32(w) < np.inf:
        raise ValueError(f"routing weight {w!r}; expected a finite weight >= 0 or nan (the reader "
                         f"refuses others)")
    return str(np.float32(w))


def format_event_rows(event: DecodeEvent, residency: np.ndarray, charged_bytes: np.ndarray,
                      pred: bool = False) -> str:
    """The CSV rows of one event, newline-terminated.

    Parameters
    ----------
    event : DecodeEvent
        A prefill, plain or verify event (draft-context events are never traced).
    residency : (n_pos, n_layer, k) int8 ndarray
        Residency per slot before the layer's batch (0, 1 or 2). A dropped slot that the cache
        model never looked up (-1 in :class:`refsim.cache.EventRecord`) is written as 0: the
        engine writes the residency it queried before the drop, and only a miss is dropped
        (bmoe-engine.md §3.6, "Trace columns"; route_trace.h ``RouteTraceRow::dropped``).
    charged_bytes : (n_pos, n_layer, k) int64 ndarray
        Bytes charged per slot (the layer's entry size on the first miss row, else 0; 0 on a
        dropped slot, which is never read).

    A dropped slot keeps the router's expert id and weight (``event.routes``/``event.weights``
    as the router produced them) and is written with ``dropped=1``, as the engine writes it.
    With ``pred`` every row gains ``pred_expert,pred_weight`` (``event.pred_routes`` /
    ``pred_weights`` at the row's position, layer and slot; ``-1,nan`` where none).

    Raises
    ------
    ValueError
        For a ``DRAFT`` event, mismatched shapes, or a record the reader would refuse: a routed
        slot with residency outside 0..2 (-1 allowed on a dropped slot), a dropped slot with
        bytes charged, a (position, layer) with some slots routed and others not, a negative or
        infinite weight.
    """
    if event.kind.draft_context:
        raise ValueError("draft-context decodes are not written to route traces")
    if residency.shape != event.routes.shape or charged_bytes.shape != event.routes.shape:
        raise ValueError("residency/charged_bytes must have the routes' shape")
    n_pos, n_layer, k = event.routes.shape
    weights = event.weights
    dropped = event.dropped
    pr, pw = (event.pred_routes, event.pred_weights) if pred else (None, None)
    rows: list[str] = []
    prefix = f"{event.turn},{event.phase},"
    for il in range(n_layer):
        for p in range(n_pos):
            ids = event.routes[p, il]
            if (ids < 0).all():
                continue
            if (ids < 0).any():
                raise ValueError(f"position {int(event.positions[p])} layer {il}: some slots routed, "
                                 f"others not; a trace has one row per slot")
            step = int(event.positions[p])
            for s in range(k):
                e = int(ids[s])
                w = _weight_text(float(weights[p, il, s])) if weights is not None else "nan"
                d = int(dropped[p, il, s]) if dropped is not None else 0
                r, c = int(residency[p, il, s]), int(charged_bytes[p, il, s])
                if d and c != 0:
                    raise ValueError(f"dropped slot at position {step} layer {il} slot {s} has {c} "
                                     f"bytes charged; a dropped slot is never read (0 bytes)")
                if d and r == -1:
                    r = 0                                  # never looked up: the queried miss
                if not 0 <= r <= 2:
                    raise ValueError(f"slot at position {step} layer {il} slot {s} has residency "
                                     f"{r}; expected 0, 1 or 2")
                if not pred:
                    rows.append(f"{prefix}{step},{il},{s},{e},{w},{r},{c},{d}")
                    continue
                pe = -1 if pr is None else int(pr[p, il, s])
                pwt = "nan" if pr is None or pe < 0 else _weight_text(float(pw[p, il, s]))
                rows.append(f"{prefix}{step},{il},{s},{e},{w},{r},{c},{d},{pe},{pwt}")
    return "\n".join(rows) + "\n" if rows else ""


class _LastLayerCheck:
    """The last-layer convention of the events written (:mod:`refsim.trace.convention`), checked
    when the trace is complete: one convention, and ``want``'s when it is given. Keeps one
    (n_pos, n_layer) bool array per prefill chunk, nothing per decode."""

    def __init__(self, want: str | None, n_layer: int):
        if want is not None and want not in CONVENTIONS:
            raise ValueError(f"last_layer={want!r}; expected one of {CONVENTIONS} or None")
        self.want = want
        self.routed = np.zeros(n_layer, dtype=bool)
        self.chunks: list = []          # (turn, positions, routed (n_pos, n_layer)) or (turn,)

    def add(self, event: DecodeEvent) -> None:
        r = (event.routes >= 0).any(axis=2)
        self.routed |= r.any(axis=0)
        self.chunks.append((event.turn, event.positions, r) if event.kind is DecodeKind.PREFILL
                           else (event.turn,))

    def check(self) -> str | None:
        """The convention written (None when no chunk tells them apart).

        Raises
        ------
        ValueError
            The chunks mix the two conventions, or show the other one than ``want``.
        """
        if not self.routed.any():
            return None
        last = int(np.flatnonzero(self.routed)[-1])
        conv = None
        for i, c in enumerate(self.chunks):
            if len(c) == 1:
                continue
            turn, positions, r = c
            nxt = self.chunks[i + 1] if i + 1 < len(self.chunks) else None
            more = nxt is not None and len(nxt) == 3 and nxt[0] == turn
            shape = chunk_shape(len(positions), positions[r[:, last]], int(positions[-1]), more)
            if shape is None:
                continue
            if shape != (conv or self.want or shape):
                raise ValueError(
                    f"the prefill chunk at steps {int(positions[0])}..{int(positions[-1])} routes "
                    f"the last layer {last} as the {shape!r} convention, where the trace is "
                    f"{conv or self.want!r}; a trace has one last-layer convention "
                    f"(docs/trace-format.md)")
            conv = shape
        return conv


class TraceWriter:
    """A route trace written as its events arrive (``refsim run --route-trace``): the header at
    open, each event's rows at :meth:`write`, nothing kept but a count, so memory does not grow
    with the run. The file follows :func:`refsim.fileio.open_output`'s rules: a regular file is a
    temporary in the destination's folder, renamed over it when the ``with`` block ends without
    an exception (removed otherwise); ``-``, a FIFO or a device are written as the rows come.

    Parameters
    ----------
    path : str or path-like
    header : TraceHeader
    what : str
        The flag named in errors (default ``--route-trace``).
    pred : bool
        Write the prediction columns (``pred_expert``, ``pred_weight``; docs/trace-format.md,
        "Prediction columns"), for runs with a predictor or ``--route-ahead``.
    last_layer : str, optional
        The last-layer convention the events must follow (:data:`~refsim.trace.convention.FINAL`
        or :data:`~refsim.trace.convention.EVERY`); None (default): the one the events route,
        which must be one (``refsim run`` writes what its arch's forward pass routes: qwen3moe
        FINAL, qwen35moe EVERY). Rows are written as the events route them either way: an event
        of the other convention is refused, never rewritten.

    Raises
    ------
    ConfigError
        If the destination cannot be written or a write fails (names ``what`` and the path).
    ValueError
        ``last_layer`` not a convention; at the end, the events mix the two conventions or show
        the other one than ``last_layer`` (the file is then not written: a regular file's
        temporary is removed).
    """

    def __init__(self, path: str | os.PathLike, header: TraceHeader, what: str = "--route-trace",
                 pred: bool = False, last_layer: str | None = None):
        self.path, self.header, self.what, self.pred = path, header, what, pred
        self.events = 0
        """Events written (draft-context events are skipped and not counted)."""
        self._check = _LastLayerCheck(last_layer, header.n_layer)
        self.last_layer: str | None = None
        """The convention written, set when the trace is complete (None: no chunk shows one)."""
        self._ctx = self._fh = None

    def __enter__(self) -> "TraceWriter":
        self._ctx = open_output(self.path, self.what)
        self._fh = self._ctx.__enter__()
        try:
            self._fh.write(format_header(self.header, self.pred))
        except BaseException:
            self._close(*sys.exc_info())
            raise
        return self

    def write(self, event: DecodeEvent, residency: np.ndarray, charged_bytes: np.ndarray) -> None:
        """Write one event's rows (:func:`format_event_rows`); a draft-context event is skipped
        (the engine discards the draft context's rows)."""
        if event.kind.draft_context:
            return
        try:
            self._fh.write(format_event_rows(event, residency, charged_bytes, self.pred))
            self._check.add(event)
        except BaseException:
            self._close(*sys.exc_info())
            raise
        self.events += 1

    def write_record(self, event: DecodeEvent, record) -> None:
        """:meth:`write` with the cache's :class:`~refsim.cache.EventRecord` of the event (the
        residency the engine writes, :meth:`~refsim.cache.EventRecord.trace_residency`)."""
        if not event.kind.draft_context:
            self.write(event, record.trace_residency(), record.charged_bytes)

    def _close(self, *exc) -> bool | None:
        ctx, self._ctx, self._fh = self._ctx, None, None
        if ctx is None:
            return None
        return ctx.__exit__(*exc)

    def __exit__(self, *exc):
        if exc[0] is None:
            try:
                self.last_layer = self._check.check()
            except ValueError:
                self._close(*sys.exc_info())
                raise
        return self._close(*exc)


def write_trace(path: str | os.PathLike, header: TraceHeader,
                events: Iterable[DecodeEvent], residency: Sequence[np.ndarray],
                charged_bytes: Sequence[np.ndarray], what: str = "--route-trace",
                pred: bool = False, last_layer: str | None = None) -> None:
    """Write a route trace by :func:`refsim.fileio.open_output`'s rules: a regular file is
    replaced atomically (temp file beside it + rename), ``-`` is standard output, a FIFO or device
    is streamed in place.

    Parameters
    ----------
    path : str or path-like
        Destination; an existing file is replaced only once the new one is complete.
    what : str
        The flag named in errors (default ``--route-trace``).
    header : TraceHeader
    events : iterable of DecodeEvent
        Prefill, plain and verify events in decode order (``DRAFT`` events are skipped,
        as the engine discards the draft context's rows).
    residency, charged_bytes : sequences of (n_pos, n_layer, k) ndarrays
        One per event, as recorded by the cache model.
    pred : bool
        Write the prediction columns (:data:`~refsim.trace.format.PRED_COLUMNS`).
    last_layer : str, optional
        The last-layer convention the events must follow (:class:`TraceWriter`).

    Raises
    ------
    ConfigError
        If the destination cannot be written or a write fails (names ``what`` and the path).
    ValueError
        The events mix the two last-layer conventions, or show the other one than
        ``last_layer`` (nothing is written over ``path``).
    """
    with TraceWriter(path, header, what, pred, last_layer) as w:
        for ev, res, chg in zip(events, residency, charged_bytes, strict=True):
            w.write(ev, res, chg)
