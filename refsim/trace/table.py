"""A route trace's rows as columns: one row per routed (position, layer, slot), in file order.

The reader keeps a trace as an :class:`~refsim.events.EventBlock` (P positions x n_layer x k
slots, NOT_ROUTED where a graph routed nothing) plus the recorded columns in the same shape
(:class:`~refsim.trace.reader.RouteTrace`). A file lists, per decode, its rows layer-major, then
position, then slot (the engine's writer, bmoe-engine.md §4.5; the reader's framing rule), and
only the routed slots. :func:`trace_columns` puts the block's cells back in that order with one
index permutation -- no Python loop over rows -- and keeps the routed ones, so the table is the
file's rows, in the file's order, with the file's columns (docs/trace-format.md; the column list
and dtypes: docs/notebook.md, "Columns").
"""

from __future__ import annotations

import numpy as np

from refsim.events import DecodeKind
from refsim.trace.format import PRED_COLUMNS

_PHASE = np.array([k.phase for k in sorted(DecodeKind, key=int)], dtype=np.int8)
"""Trace ``phase`` of each :class:`DecodeKind` value (index = the kind's value)."""


def _event_of_position(block) -> np.ndarray:
    """(P,) int64: the event each position of ``block`` belongs to."""
    return np.repeat(np.arange(block.n_events), np.diff(block.event_start))


def file_order(block) -> np.ndarray:
    """Flat indices into ``block.routes.ravel()`` in the order a route trace lists them: event by
    event, and within an event layer-major, then position, then slot.

    Parameters
    ----------
    block : EventBlock
        (P, n_layer, k) arrays, events laid end to end (``event_start``).

    Returns
    -------
    (P * n_layer * k,) int64 ndarray
        A permutation of ``arange(P * n_layer * k)``.
    """
    P, L, k = block.routes.shape
    n_pos = np.diff(block.event_start)                              # (n_events,)
    event = _event_of_position(block)                               # (P,)
    start = block.event_start[:-1][event]                           # (P,) its first position
    width = n_pos[event]                                            # (P,) its positions
    # cell (p, l, s) of event e sits at start_e*L*k + (l*n_pos_e + (p - start_e))*k + s in file order
    dest = ((start * L)[:, None] + np.arange(L)[None, :] * width[:, None]
            + (np.arange(P) - start)[:, None]) * k                  # (P, L)
    dest = dest[:, :, None] + np.arange(k)[None, None, :]           # (P, L, k)
    order = np.empty(P * L * k, np.int64)
    order[dest.ravel()] = np.arange(P * L * k)
    return order


def trace_columns(trace) -> dict:
    """The rows of ``trace`` (a :class:`~refsim.trace.reader.RouteTrace`) as columns.

    Columns, in file order: ``turn`` (int64), ``phase`` (int8: 0 prefill, 1 decode), ``step``
    (int64: the position), ``layer`` (int16), ``slot`` (int16), ``expert`` (int16), ``weight``
    (float32, NaN where the engine wrote nan), ``residency`` (int8: 0 miss, 1 hit, 2 prefetched
    hit), ``expert_bytes`` (int64: bytes charged on the row); ``dropped`` (bool) when the file
    has that column; ``pred_expert`` (int16, -1 = none) and ``pred_weight`` (float32) when it
    has refsim's prediction columns. One row per row of the file, nothing added.

    Returns
    -------
    dict of str -> (n_rows,) ndarray
    """
    b = trace.block
    _, L, k = b.routes.shape
    residency, charged, _ = trace.recorded
    order = file_order(b)
    flat = order[b.routes.ravel()[order] >= 0]                     # the routed cells, file order
    cell, slot = np.divmod(flat, k)
    pos, layer = np.divmod(cell, L)
    event = _event_of_position(b)[pos]
    cols = {
        "turn": b.turn[event].astype(np.int64),
        "phase": _PHASE[b.kind[event]],
        "step": b.positions[pos].astype(np.int64),
        "layer": layer.astype(np.int16),
        "slot": slot.astype(np.int16),
        "expert": b.routes.ravel()[flat].astype(np.int16),
        "weight": b.weights.ravel()[flat].astype(np.float32),
        "residency": residency.ravel()[flat].astype(np.int8),
        "expert_bytes": charged.ravel()[flat].astype(np.int64),
    }
    if trace.has_dropped_column:
        cols["dropped"] = (b.dropped.ravel()[flat].astype(bool) if b.dropped is not None
                           else np.zeros(flat.size, bool))
    if trace.has_pred_columns:
        cols[PRED_COLUMNS[0]] = b.pred_routes.ravel()[flat].astype(np.int16)
        cols[PRED_COLUMNS[1]] = b.pred_weights.ravel()[flat].astype(np.float32)
    return cols
