"""The read requests of a decode, in the engine's order, with their windows and lanes.

What a replay yields per event (:class:`refsim.cache.EventRecord`) says which (layer, expert)
entries missed: ``charged_bytes`` is non-zero on the first non-dropped occurrence of each missed id
in the layer's token-major id list (position, then slot), exactly the engine's first-seen order.
From that and a :class:`~refsim.io.layout.SliceLayout`, each layer's batch of requests is built as
the engine's C++ builds its ``IoJob`` list (expert_stream_source.cpp):

- **serial** (``load_layer``): a miss emits its projections' jobs at once, *expert-major*, experts
  in first-seen order (``stage(e)`` inside the dedup loop over the token-major ids);
- **overlap** (``load_layer_async``): the unique ids are sorted ascending (step 3a), hits are
  marked ready, and the misses' jobs are emitted *projection-major* (``emit_proj(p)`` for each
  slot, experts ascending); the two-wave publish (``--io-two-wave``) appends the same jobs in the
  same order;
- one request per present projection slice (a fused layout has two), ``nb2`` bytes at
  ``file_off + e * nb2``; its window by :mod:`refsim.io.window`;
- each layer's batch is one queue drained by the lanes (:mod:`refsim.io.lanes`);
- **merged reads** (``--merge-gap B``, refsim's what-if, off by default as in the engine, which
  issues one ``pread`` per slice): within one layer batch, slices whose file gap (next slice's
  offset minus the end of the run so far) is at most ``B`` bytes are read as one request, one
  contiguous ``pread`` from the run's first byte to its last, so the gap's bytes *are* read; its
  window is the run's span widened to the block. A merged request takes the queue place of its
  first member; the lanes drain the merged queue.

A decode's requests are its layers' batches in layer order. They partition the decode's missed
slices: every (layer, expert, projection) of a miss is requested exactly once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from refsim.events import N_KINDS, DecodeKind
from refsim.io.lanes import assign_lanes, engine_lanes
from refsim.io.window import window_bytes


@dataclass(frozen=True)
class IoConfig:
    """How the reads are issued.

    Attributes
    ----------
    io_threads : int
        ``--io-threads`` (the engine runs ``min(io_threads, 8)`` lanes).
    overlap : bool
        ``--overlap``: projection-major order, every lane a worker.
    """

    io_threads: int = 4
    overlap: bool = False
    merge_gap: int | None = None
    """``--merge-gap`` bytes, or None: every slice its own request (the engine's reads)."""

    @property
    def lanes(self) -> int:
        return engine_lanes(self.io_threads)


def batch_order(experts, present, overlap: bool) -> tuple[np.ndarray, np.ndarray]:
    """The queue order of one layer's requests.

    Parameters
    ----------
    experts : (m,) int array-like
        The layer's missed experts in first-seen order (distinct).
    present : sequence of bool
        Which projection slots the layer has (``strides > 0``), slot order.
    overlap : bool

    Returns
    -------
    expert, slot : (m * n_present,) int64 ndarrays
        Serial: expert-major (each expert's slots in slot order, experts first-seen); overlap:
        slot-major (all experts of slot 0 ascending, then slot 1, ...).
    """
    e = np.asarray(experts, dtype=np.int64)
    slots = np.flatnonzero(np.asarray(present, dtype=bool)).astype(np.int64)
    if overlap:
        e = np.sort(e)
        return np.tile(e, slots.size), np.repeat(slots, e.size)
    return np.repeat(e, slots.size), np.tile(slots, e.size)


@dataclass(frozen=True)
class EventRequests:
    """One event's requests in issue order (layer by layer), each array (n,) int64.

    ``offset``/``nbytes``: the slice (merged: the run's span, gaps included; ``expert``/``slot``
    its first slice's); ``window``: the bytes read; ``lane``: the lane
    (:func:`refsim.io.lanes.assign_lanes`, cost = window bytes); ``lane_bytes``: per layer with
    requests, the busiest lane's window bytes, summed over layers (the batch's critical path on
    lanes of equal bandwidth), bytes; ``rounds``: per layer ``ceil(requests / lanes)`` (1 lane,
    or serially a batch of one: the requests one after another), summed; ``batches``: layers
    with a request; ``slices``/``slice_bytes``: the slices requested before merging (equal to
    ``n`` and ``nbytes.sum()`` without ``--merge-gap``).
    """

    layer: np.ndarray
    expert: np.ndarray
    slot: np.ndarray
    offset: np.ndarray
    nbytes: np.ndarray
    window: np.ndarray
    lane: np.ndarray
    lane_bytes: int
    batches: int
    rounds: int = 0
    slices: int = -1
    slice_bytes: int = -1

    def __post_init__(self):
        if self.slices < 0:       # unmerged: one request per slice
            object.__setattr__(self, "slices", int(self.layer.size))
            object.__setattr__(self, "slice_bytes", int(self.nbytes.sum()))

    @property
    def n(self) -> int:
        return int(self.layer.size)


def missed_in_order(routes: np.ndarray, charged: np.ndarray):
    """Per layer, the missed experts in first-seen order: ``(layer, expert)`` int64 arrays,
    grouped by layer (ascending), first-seen within a layer. ``routes``/``charged``: (n_pos,
    n_layer, k), a record's ``charged_bytes`` (non-zero on the first non-dropped occurrence of
    each missed id)."""
    il, p, s = np.nonzero(np.transpose(charged, (1, 0, 2)) > 0)   # (layer, position, slot) order
    experts = np.transpose(routes, (1, 0, 2))[il, p, s].astype(np.int64)
    return il.astype(np.int64), experts


def merge_runs(offset: np.ndarray, nbytes: np.ndarray, gap: int):
    """Merge one batch's slices whose file gap is at most ``gap`` bytes.

    Parameters
    ----------
    offset, nbytes : (n,) int64 ndarrays
        The batch's slices in queue order (distinct, non-overlapping), bytes.
    gap : int
        Bytes >= 0: a slice joins the run before it (in file order) when its offset minus the
        run's end is <= ``gap``.

    Returns
    -------
    first : (r,) int64 ndarray
        Per merged request, the queue index of its first member in file order; requests ordered
        by their earliest queue index (each run takes the queue place of its first-queued slice).
    start, span, members : (r,) int64 ndarrays
        The run's first byte, its length (gaps included) and its slice count.
    """
    order = np.argsort(offset, kind="stable")
    off = offset[order]
    end = off + nbytes[order]
    run_end = np.maximum.accumulate(end)
    new = np.ones(off.size, dtype=bool)
    new[1:] = off[1:] - run_end[:-1] > gap
    starts = np.flatnonzero(new)
    stops = np.append(starts[1:], off.size)
    run_id = np.cumsum(new) - 1
    queue_first = np.full(starts.size, off.size, dtype=np.int64)
    np.minimum.at(queue_first, run_id, order)
    issue = np.argsort(queue_first, kind="stable")
    start = off[starts]
    span = run_end[stops - 1] - start
    return (order[starts][issue], start[issue], span[issue], (stops - starts)[issue])


def event_requests(routes: np.ndarray, charged: np.ndarray, layout, cfg: IoConfig) -> EventRequests:
    """The requests of one event (see the module docstring for the rules)."""
    il_all, e_all = missed_in_order(routes, charged)
    parts = {k: [] for k in ("layer", "expert", "slot", "offset", "nbytes", "window", "lane")}
    lane_bytes = 0
    batches = 0
    rounds = 0
    n_slices = 0
    slice_bytes = 0
    bounds = np.flatnonzero(np.diff(il_all)) + 1
    for il_grp, e_grp in zip(np.split(il_all, bounds), np.split(e_all, bounds)):
        if il_grp.size == 0:
            continue
        il = int(il_grp[0])
        present = layout.strides[il] > 0
        expert, slot = batch_order(e_grp, present, cfg.overlap)
        offset = layout.offsets[il, slot] + layout.position(il, expert) * layout.strides[il, slot]
        nbytes = layout.strides[il, slot]
        n_slices += expert.size
        slice_bytes += int(nbytes.sum())
        if cfg.merge_gap is not None:
            first, offset, nbytes, _ = merge_runs(offset, nbytes, cfg.merge_gap)
            expert, slot = expert[first], slot[first]
        window = window_bytes(offset, nbytes, layout.block, layout.file_size, layout.o_direct)
        lane, load = assign_lanes(window, cfg.lanes, cfg.overlap)
        lane_bytes += int(load.max())
        batches += 1
        rounds += -(-expert.size // cfg.lanes)
        for key, val in (("layer", np.full(expert.size, il, dtype=np.int64)), ("expert", expert),
                         ("slot", slot), ("offset", offset), ("nbytes", nbytes),
                         ("window", window), ("lane", lane)):
            parts[key].append(val)
    arrays = {k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64)) for k, v in parts.items()}
    return EventRequests(lane_bytes=lane_bytes, batches=batches, rounds=rounds, slices=n_slices,
                         slice_bytes=slice_bytes, **arrays)


@dataclass
class IoTally:
    """Requests and windows of a replay, per :class:`DecodeKind` and per event.

    Attributes
    ----------
    layout : SliceLayout
    cfg : IoConfig
    requests, window_bytes, slice_bytes, lane_bytes, batches, rounds, slices : (N_KINDS,) int64
        ndarrays
        Per kind: requests issued (after ``--merge-gap``; ``slices``: before); bytes read (windows) and requested (slices); the summed
        per-layer busiest-lane window bytes, layer batches with a read and lane rounds
        (:class:`EventRequests`).
    pending : deque of (window_bytes, requests)
        Per event not yet taken by :meth:`take` (the per-decode CSV's columns), in event order.
    on_requests : callable, optional
        ``on_requests(event_index, kind, EventRequests)`` for every event (the ``--requests``
        table).
    """

    layout: object
    cfg: IoConfig
    on_requests: object = None
    requests: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    window_bytes: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    slice_bytes: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    lane_bytes: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    batches: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    rounds: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    slices: np.ndarray = field(default_factory=lambda: np.zeros(N_KINDS, np.int64))
    pending: deque = field(default_factory=deque)
    events: int = 0

    def add_event(self, kind: DecodeKind, routes: np.ndarray, charged: np.ndarray) -> EventRequests:
        """Account one event; returns its requests."""
        req = event_requests(routes, charged, self.layout, self.cfg)
        k = int(kind)
        w = int(req.window.sum())
        self.requests[k] += req.n
        self.window_bytes[k] += w
        self.slice_bytes[k] += req.slice_bytes
        self.slices[k] += req.slices
        self.lane_bytes[k] += req.lane_bytes
        self.batches[k] += req.batches
        self.rounds[k] += req.rounds
        self.pending.append((w, req.n))
        if self.on_requests is not None:
            self.on_requests(self.events, kind, req)
        self.events += 1
        return req

    def add_part(self, trace, records) -> None:
        """Account the records of one replayed part of a trace: a block's
        (:class:`refsim.cache.expert_cache.BlockRecords`, positions laid end to end) or a list of
        :class:`EventRecord` beside ``trace.events``."""
        block = getattr(records, "block", None)
        if block is not None:
            starts = block.event_start
            for i in range(block.n_events):
                a, b = int(starts[i]), int(starts[i + 1])
                self.add_event(DecodeKind(int(block.kind[i])), block.routes[a:b],
                               records.charged_bytes[a:b])
            return
        for ev, rec in zip(trace.events, records):
            self.add_event(rec.kind, ev.routes, rec.charged_bytes)

    def take(self) -> tuple[int, int]:
        """The oldest event's ``(window_bytes, requests)`` not taken yet (the CSV row's)."""
        return self.pending.popleft()

    def total(self, name: str, kinds) -> int:
        arr = getattr(self, name)
        return int(sum(arr[int(k)] for k in kinds))
