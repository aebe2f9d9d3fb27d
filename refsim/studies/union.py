"""Verify-batch widening: how many distinct experts a batch of w consecutive positions routes,
and what a verify decode of width w would read from flash.

A verify decode of ``[tok, d1..dn]`` is one ``load_layer`` call per layer for all ``w = n+1``
positions, so each layer reads the *union* of the positions' top-k sets (ARCHITECTURE.md,
"Decode events"; bmoe-engine.md §2, §3.2). This is the cost every speculative draft source
pays, whatever it drafts. Two measures per window width w:

- **union size**: over every window of w consecutive decode positions (sliding, one window per
  start position) and every layer, the number of distinct routed experts; mean, p50 and p90
  (linear interpolation, as the engine's ``trace_io.percentile``), and the mean union bytes of
  a window summed over layers (MiB);
- **replay**: the decode positions grouped into consecutive non-overlapping batches of w (the
  last one shorter if w does not divide the count), each built as one VERIFY DecodeEvent
  (all drafts accepted, so it confirms w tokens), fed after the trace's prefill to the same
  :class:`~refsim.cache.ExpertCache` at the given budget; decode read MiB, MiB per token and
  decode-only hit %.

Decode positions are taken in position order; a position decoded more than once (a rejected
draft re-decoded) keeps the routes of its last decode, the one the run kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim import MIB
from refsim.cache import CacheSummary, ExpertCache
from refsim.cache.summary import KnobSummary
from refsim.errors import ConfigError
from refsim.events import DecodeEvent, DecodeKind
from refsim.frames import Table


@dataclass(frozen=True)
class UnionRow:
    """One window width. Sizes are expert counts per layer; MiB = 2**20 bytes.

    ``read_mib``, ``mib_per_token`` and ``hit_pct_decode`` are None without a budget. The
    ``knob_*`` fields are the same replay with ``--drop-cold-experts`` / ``--prefetch`` on (the
    rule applies per token row of each verify batch), and the experts dropped / routed in its
    decodes; None when no knob is on.
    """

    window: int
    n_windows: int
    union_mean: float
    union_p50: float
    union_p90: float
    union_mib_mean: float
    decodes: int | None = None
    read_mib: float | None = None
    mib_per_token: float | None = None
    hit_pct_decode: float | None = None
    knob_read_mib: float | None = None
    knob_mib_per_token: float | None = None
    knob_hit_pct_decode: float | None = None
    knob_dropped: int | None = None
    knob_routed: int | None = None


@dataclass(frozen=True)
class UnionParts:
    """The sums one window width of one trace adds to a pooled row (docs/scale.md, "Pooling").

    ``size_counts[s]`` = number of (window, routed layer) pairs whose union holds ``s`` experts
    (the union sizes as a histogram: exact pooled mean and percentiles); ``union_bytes`` = the
    sum over windows of the union bytes summed over layers. The replay fields (decode counters,
    bytes) are 0 without a budget; the ``knob_*`` ones without knobs.
    """

    size_counts: tuple[int, ...]
    union_bytes: int
    n_windows: int
    tokens: int = 0
    decodes: int = 0
    decode_lookups: int = 0
    decode_hits: int = 0
    decode_read_bytes: int = 0
    knob_decode_lookups: int = 0
    knob_decode_hits: int = 0
    knob_decode_read_bytes: int = 0
    knob_dropped: int = 0
    knob_routed: int = 0


@dataclass(frozen=True)
class UnionResult(Table):
    """The rows of one :func:`union_study` (one per window width, in the order asked) and the
    budget they were replayed at (bytes; None: union sizes only).

    As a table (:meth:`to_pandas`): one row per window width, a column per :class:`UnionRow`
    field (``window``, ``n_windows``, ``union_mean``, ``union_p50``, ``union_p90``,
    ``union_mib_mean``, then the replay's and the knobs' columns, NaN where not computed;
    docs/notebook.md)."""

    rows: list
    budget_bytes: int | None = None

    def to_columns(self) -> dict:
        """The rows as columns (class docstring)."""
        from refsim.frames import dataclass_columns
        return dataclass_columns(self.rows, UnionRow)


def decode_positions(events, with_weights: bool = False) -> tuple:
    """Per decode position (ascending), the routes of the last target decode that fed it.

    Returns
    -------
    positions : (n_dec,) int64 ndarray
    routes : (n_dec, n_layer, k) int16 ndarray
    dropped : (n_dec, n_layer, k) bool ndarray or None
    weights : (n_dec, n_layer, k) float32 ndarray or None
        Only with ``with_weights=True`` (a 4th element; None when the trace has none).
    """
    last: dict[int, tuple] = {}
    for ev in events:
        if ev.kind not in (DecodeKind.PLAIN, DecodeKind.VERIFY):
            continue
        for j, p in enumerate(ev.positions.tolist()):
            last[p] = (ev.routes[j], None if ev.dropped is None else ev.dropped[j],
                       None if ev.weights is None else ev.weights[j])
    if not last:
        raise ConfigError("the trace has no decode positions (phase 1 rows)")
    pos = np.array(sorted(last), np.int64)
    routes = np.stack([last[p][0] for p in pos.tolist()])
    has_drop = any(v[1] is not None for v in last.values())
    dropped = (np.stack([last[p][1] if last[p][1] is not None else
                         np.zeros(routes.shape[1:], bool) for p in pos.tolist()])
               if has_drop else None)
    if not with_weights:
        return pos, routes, dropped
    weights = (np.stack([last[p][2] for p in pos.tolist()])
               if all(v[2] is not None for v in last.values()) else None)
    return pos, routes, dropped, weights


def window_union_sizes(routes: np.ndarray, n_expert: int, window: int,
                       dropped: np.ndarray | None = None) -> np.ndarray:
    """Distinct experts per (window start, layer) over ``window`` consecutive positions.

    Parameters
    ----------
    routes : (n_pos, n_layer, k) int16 ndarray
        -1 = not routed.
    n_expert : int
    window : int
        ``1 <= window <= n_pos``.
    dropped : (n_pos, n_layer, k) bool ndarray, optional
        Dropped slots are not read, so they are left out of the union.

    Returns
    -------
    (n_pos - window + 1, n_layer) int64 ndarray
    """
    n_pos, n_layer, k = routes.shape
    out = np.empty((n_pos - window + 1, n_layer), np.int64)
    for il in range(n_layer):
        ids = routes[:, il, :].astype(np.int64)
        ok = ids >= 0
        if dropped is not None:
            ok &= ~dropped[:, il, :]
        hot = np.zeros((n_pos + 1, n_expert), np.int32)      # [n_pos + 1, n_expert] presence
        rows = np.repeat(np.arange(n_pos), k).reshape(n_pos, k)
        np.add.at(hot, (rows[ok] + 1, ids[ok]), 1)
        csum = np.cumsum(hot, axis=0)                        # prefix counts per expert
        win = csum[window:] - csum[:-window]                 # [n_windows, n_expert]
        out[:, il] = (win > 0).sum(axis=1)
    return out


def grouped_events(prefill: list[DecodeEvent], positions: np.ndarray, routes: np.ndarray,
                   dropped: np.ndarray | None, window: int,
                   weights: np.ndarray | None = None) -> list[DecodeEvent]:
    """The prefill events, then the decode positions as consecutive batches of ``window``
    (VERIFY events with every draft accepted; PLAIN when a batch has one position); each
    carries its positions' ``weights`` when given."""
    out = list(prefill)
    for s in range(0, positions.size, window):
        n = min(window, positions.size - s)
        sl = slice(s, s + n)
        dr = None if dropped is None else dropped[sl]
        wt = None if weights is None else weights[sl]
        if n == 1:
            out.append(DecodeEvent(DecodeKind.PLAIN, positions[sl], routes[sl], weights=wt,
                                   dropped=dr))
        else:
            out.append(DecodeEvent(DecodeKind.VERIFY, positions[sl], routes[sl], weights=wt,
                                   dropped=dr, n_draft=n - 1, accepted=n - 1))
    return out


def _replay_grouped(h, events, budget_bytes, n_tokens, knobs=None):
    cache = ExpertCache(h.expert_bytes, h.n_expert, budget_bytes, knobs)
    for ev in events:
        cache.apply(ev)
    return cache, CacheSummary.from_stats(cache.stats, budget_bytes, n_tokens, h.token_cycle_bytes)


def union_study(trace, windows, budget_bytes: int | None = None,
                knobs=None, parts: bool = False) -> list:
    """Union sizes and widened-batch reads for each window width.

    Parameters
    ----------
    trace : RouteTrace
    windows : sequence of int
        Window widths w (verify batch = 1 token + w - 1 drafts), each >= 1.
    budget_bytes : int, optional
        Cache budget for the replay, bytes; no replay when None.
    knobs : refsim.streaming.knobs.StreamKnobs, optional
        With a budget: replay a second time with these knobs on (``knob_*`` fields).

    parts : bool
        Return ``(UnionRow, UnionParts)`` pairs (the sums a pooled row needs) instead of rows.

    Returns
    -------
    list of UnionRow, or of (UnionRow, UnionParts) with ``parts=True``
        One per width, in the given order.

    Raises
    ------
    ConfigError
        If a width is < 1 or exceeds the number of decode positions, or the trace has none
        (``"<trace path>: the trace has no decode positions (phase 1 rows); expected a trace with
        decoded tokens"``).
    """
    h = trace.header
    try:
        positions, routes, dropped, weights = decode_positions(trace.events, with_weights=True)
    except ConfigError as exc:           # a prefill-only trace: name the file (docs/cli.md)
        path = getattr(trace, "path", None)
        if path is None:
            raise
        raise ConfigError(f"{path}: {exc}; expected a trace with decoded tokens") from None
    knobs_on = knobs is not None and knobs.any_on
    if knobs_on and budget_bytes is None:
        raise ConfigError("--drop-cold-experts/--prefetch: the union replay needs --cache-mb")
    from refsim.studies.replay import require_weights
    require_weights(trace, knobs)
    prefill = [e for e in trace.events if e.kind is DecodeKind.PREFILL]
    rows = []
    for w in windows:
        if not 1 <= w <= positions.size:
            raise ConfigError(f"--window: {w} is outside 1..{positions.size} "
                              f"(the trace's decode positions)")
        sizes = window_union_sizes(routes, h.n_expert, w, dropped)
        wbytes = (sizes * h.expert_bytes[None, :]).sum(axis=1)     # union bytes per window
        mib = wbytes / MIB
        sizes = np.delete(sizes, trace.unrouted_layers, axis=1)   # an --mtp trace's head layer
        part = dict(size_counts=tuple(int(c) for c in np.bincount(sizes.ravel())),
                    union_bytes=int(wbytes.sum()), n_windows=int(sizes.shape[0]))
        row = dict(window=int(w), n_windows=int(sizes.shape[0]),
                   union_mean=float(sizes.mean()),
                   union_p50=float(np.percentile(sizes, 50)),
                   union_p90=float(np.percentile(sizes, 90)),
                   union_mib_mean=float(mib.mean()))
        if budget_bytes is not None:
            evs = grouped_events(prefill, positions, routes, dropped, w, weights)
            _, s = _replay_grouped(h, evs, budget_bytes, int(positions.size))
            row.update(decodes=len(evs) - len(prefill), read_mib=s.decode_read_mib,
                       mib_per_token=s.mib_per_token, hit_pct_decode=s.hit_pct_decode)
            part.update(tokens=s.tokens, decodes=row["decodes"], decode_lookups=s.decode_lookups,
                        decode_hits=s.decode_hits, decode_read_bytes=s.decode_read_bytes)
            if knobs_on:
                cache, s = _replay_grouped(h, evs, budget_bytes, int(positions.size), knobs)
                k = KnobSummary.from_stats(cache.stats, knobs)
                row.update(knob_read_mib=s.decode_read_mib, knob_mib_per_token=s.mib_per_token,
                           knob_hit_pct_decode=s.hit_pct_decode, knob_dropped=k.experts_dropped,
                           knob_routed=k.experts_routed)
                part.update(knob_decode_lookups=s.decode_lookups, knob_decode_hits=s.decode_hits,
                            knob_decode_read_bytes=s.decode_read_bytes,
                            knob_dropped=k.experts_dropped, knob_routed=k.experts_routed)
        rows.append((UnionRow(**row), UnionParts(**part)) if parts else UnionRow(**row))
    return rows
