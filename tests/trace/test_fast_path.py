"""The reader's fast path (threaded parse, one-pass frame and pack into an EventBlock) against its
per-line path, the readable reference: same traces on valid files, and never a trace where the
per-line path refuses (the mutation half is in test_fuzz_trace.py)."""

from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.cache import ExpertCache
from refsim.streaming.knobs import StreamKnobs
from refsim.events import DecodeEvent, DecodeKind, EventBlock
from refsim.testing.traces import event_streams, trace_difference
from refsim.trace import fastparse, write_trace
from refsim.trace.fastbuild import frame_rows
from refsim.trace.reader import _read_fast, _read_slow, read_trace


def _write(path, stream, n_turns, drop_seed, record_budget, chunks=1, every=False):
    """The stream's events as turns 0..n_turns-1 (its prefill cut into ``chunks`` chunks),
    recorded by the engine's LRU at ``record_budget`` with ``--drop-cold-experts`` at F = 0.5 x
    ``drop_seed`` (so the ``dropped`` column holds what the drop rule decided). ``every``: the
    EVERY last-layer convention (refsim.trace.convention; a gemma4 trace): the prefill routes the
    last layer at every position (layer 0's ids there, distinct per position), every chunk too."""
    h = stream.header
    if every:
        h = dataclasses.replace(h, arch="gemma4")
    events = []
    for t in range(n_turns):
        for e in stream.events:
            if every and e.kind is DecodeKind.PREFILL:
                r = e.routes.copy()
                r[:, h.n_layer - 1] = r[:, 0]
                e = dataclasses.replace(e, routes=r, weights=np.full(r.shape, np.float32(0.5)))
            # (with two layers a chunk's rows and the next chunk's are one run of increasing keys,
            # which the format reads as one prefill: chunks need three layers or more)
            if e.kind is DecodeKind.PREFILL and chunks > 1 and e.n_pos >= chunks and h.n_layer > 2:
                cut = np.linspace(0, e.n_pos, chunks + 1).astype(int)
                for c in range(chunks):
                    r = e.routes[cut[c]:cut[c + 1]].copy()
                    if c < chunks - 1 and not every:
                        r[:, h.n_layer - 1] = -1          # only the last chunk routes the last layer
                    events.append(DecodeEvent(DecodeKind.PREFILL, e.positions[cut[c]:cut[c + 1]],
                                              r, weights=np.where(r >= 0, np.float32(0.5),
                                                                  np.float32(np.nan)), turn=t))
                continue
            events.append(dataclasses.replace(e, turn=t))
    knobs = StreamKnobs(drop_frac=min(1.0, 0.5 * drop_seed))
    cache = ExpertCache(h.expert_bytes, h.n_expert, record_budget, knobs)
    recs = [cache.apply(e) for e in events]
    events = [dataclasses.replace(e, dropped=r.dropped) for e, r in zip(events, recs)]
    write_trace(path, h, events, [r.trace_residency() for r in recs],
                [r.charged_bytes for r in recs])


@settings(max_examples=60, deadline=None)
@given(stream=event_streams(), n_turns=st.integers(1, 3), drop_seed=st.integers(0, 3),
       record_budget=st.integers(1, 60), chunks=st.integers(1, 3), every=st.booleans())
def test_fast_path_reads_every_valid_trace_as_the_per_line_path(tmp_path_factory, stream,
                                                                n_turns, drop_seed,
                                                                record_budget, chunks, every):
    path = tmp_path_factory.mktemp("fp") / "t.route.csv"
    _write(path, stream, n_turns, drop_seed, record_budget, chunks, every)
    slow = _read_slow(str(path))
    fast = _read_fast(str(path))
    assert fast is not None, "the fast path refused a valid trace routing two or more layers"
    assert trace_difference(fast, slow) is None, trace_difference(fast, slow)
    assert fast.last_layer == slow.last_layer
    pre = [e for e in slow.events if e.kind is DecodeKind.PREFILL]
    if every and pre and slow.header.n_layer > 1:
        assert all((e.routes[:, -1] >= 0).all() for e in pre)   # every position, last layer too
    # and the block's own view of the events agrees with the lists the per-line path built
    block = fast.block
    assert block.n_events == len(slow.events)
    assert block.confirmed_tokens() == sum(
        1 if e.kind is DecodeKind.PLAIN else 1 + (e.accepted or 0) for e in slow.events
        if e.kind in (DecodeKind.PLAIN, DecodeKind.VERIFY))


@settings(max_examples=40, deadline=None)
@given(stream=event_streams(), threads=st.integers(1, 4), blank=st.integers(0, 5),
       slow_weight=st.booleans(), min_chunk=st.sampled_from([1, 7, 64, 1 << 22]))
def test_parse_rows_gives_the_same_columns_on_any_number_of_threads(tmp_path_factory, stream,
                                                                     threads, blank, slow_weight,
                                                                     min_chunk):
    path = tmp_path_factory.mktemp("pr") / "t.route.csv"
    _write(path, stream, 2, 0, 10)
    lines = path.read_bytes().split(b"\n")
    head = next(i for i, ln in enumerate(lines) if ln.startswith(b"turn,")) + 1
    rng = np.random.default_rng(blank)
    body = lines[head:-1]
    if slow_weight:          # a weight of 19 significant digits: handed back to Python's float
        f = body[0].split(b",")
        f[6] = b"0.1234567890123456789"
        body[0] = b",".join(f)
    for _ in range(blank):   # blank and whitespace-only lines anywhere among the rows
        body.insert(int(rng.integers(0, len(body) + 1)), b" \t" if rng.random() < 0.5 else b"")
    data = b"\n".join(lines[:head] + body) + b"\n"
    offset = len(b"\n".join(lines[:head])) + 1
    h = stream.header
    cols = next(ln for ln in lines if ln.startswith(b"turn,")).decode().split(",")
    buf = fastparse.padded(data)
    want = fastparse.parse_rows(buf, len(data), offset, head + 1, cols, h.n_layer, h.n_expert,
                                h.n_expert_used, 2**31 - 1, 2**31 - 1, threads=1)
    assert want is not None and want["line"].size == len(body) - blank
    with mock.patch.object(fastparse, "PARSE_MIN_CHUNK", min_chunk):
        got = fastparse.parse_rows(buf, len(data), offset, head + 1, cols, h.n_layer,
                                   h.n_expert, h.n_expert_used, 2**31 - 1, 2**31 - 1,
                                   threads=threads)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype
        assert np.array_equal(got[name], want[name], equal_nan=True), name
    if slow_weight:
        assert got["weight"][0] == np.float32(float("0.1234567890123456789"))
    # every row's line is the file's: the row there starts with its turn
    text = data.split(b"\n")
    for j in range(0, want["line"].size, max(1, want["line"].size // 7)):
        assert int(text[want["line"][j] - 1].split(b",")[0]) == want["turn"][j]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), a=st.integers(0, 300), b=st.integers(0, 300))
def test_count_lf_counts_line_feeds_at_any_alignment(data, a, b):
    a, b = min(a, b, len(data)), min(max(a, b), len(data))
    buf = fastparse.padded(data)
    assert fastparse._count_lf(buf, buf.view(np.uint64), a, b) == data.count(b"\n", a, b)


@pytest.mark.parametrize("lo,hi,backwards,want", [(0, 11, False, 3), (0, 11, True, 8),
                                                   (4, 9, False, 8), (4, 9, True, 8),
                                                   (4, 8, True, 3), (10, 11, False, 9)])
def test_find_lf_by_hand(lo, hi, backwards, want):
    buf = fastparse.padded(b"abc\ndefg\nh\n")    # line feeds at 3 and 8 (the one at 10 zeroed)
    buf[10] = 0
    assert fastparse.find_lf(buf, lo, hi, backwards) == want


def _cols(rows):
    names = ("turn", "phase", "step", "layer", "slot", "expert", "weight", "residency",
             "expert_bytes")
    dt = (np.int32, np.uint8, np.int32, np.int16, np.uint8, np.int16, np.float32, np.uint8,
          np.int64)
    return {n: np.array([r[i] for r in rows], d) for i, (n, d) in enumerate(zip(names, dt))}


def test_frame_rows_by_hand():
    # 2 layers, k=2, entry sizes 5 and 7: a prefill of steps 0-1 (the last layer at step 1
    # only), a plain decode at step 2, a verify decode of steps 3-4 that accepted 0 drafts,
    # then a plain decode at step 4
    rows = [
        (0, 0, 0, 0, 0, 3, 0.5, 0, 5), (0, 0, 0, 0, 1, 1, 0.5, 0, 5),
        (0, 0, 1, 0, 0, 3, 0.5, 0, 0), (0, 0, 1, 0, 1, 2, 0.5, 0, 5),
        (0, 0, 1, 1, 0, 0, 0.5, 0, 7), (0, 0, 1, 1, 1, 1, 0.5, 0, 7),
        (0, 1, 2, 0, 0, 3, 0.5, 1, 0), (0, 1, 2, 0, 1, 0, 0.5, 0, 5),
        (0, 1, 2, 1, 0, 0, 0.5, 1, 0), (0, 1, 2, 1, 1, 2, 0.5, 0, 7),
        (0, 1, 3, 0, 0, 3, 0.5, 1, 0), (0, 1, 3, 0, 1, 0, 0.5, 1, 0),
        (0, 1, 4, 0, 0, 1, 0.5, 1, 0), (0, 1, 4, 0, 1, 0, 0.5, 1, 0),
        (0, 1, 3, 1, 0, 0, 0.5, 1, 0), (0, 1, 3, 1, 1, 2, 0.5, 1, 0),
        (0, 1, 4, 1, 0, 2, 0.5, 1, 0), (0, 1, 4, 1, 1, 3, 0.5, 0, 7),
        (0, 1, 4, 0, 0, 1, 0.5, 1, 0), (0, 1, 4, 0, 1, 3, 0.5, 1, 0),
        (0, 1, 4, 1, 0, 2, 0.5, 1, 0), (0, 1, 4, 1, 1, 3, 0.5, 1, 0),
    ]
    lines = np.arange(10, 10 + len(rows), dtype=np.int32)
    block, res, chg, lns = frame_rows(_cols(rows), lines, 2, 2, 4, True, np.array([5, 7]))
    assert block.event_start.tolist() == [0, 2, 3, 5, 6]
    assert block.kind.tolist() == [DecodeKind.PREFILL, DecodeKind.PLAIN, DecodeKind.VERIFY,
                                   DecodeKind.PLAIN]
    assert block.positions.tolist() == [0, 1, 2, 3, 4, 4]
    assert block.accepted.tolist() == [-1, -1, 0, -1]
    assert block.routes[0].tolist() == [[3, 1], [-1, -1]]       # step 0: no last layer
    assert block.routes[4].tolist() == [[1, 0], [2, 3]]
    assert res[1, 1].tolist() == [0, 0] and res[0, 1].tolist() == [-1, -1]
    assert chg[2].tolist() == [[0, 5], [0, 7]]
    assert lns[3].tolist() == [[20, 21], [24, 25]]
    assert block.confirmed_tokens() == 3
    # without the last plain decode the verify's acceptance is unknown, and the trace valid
    head, *_ = frame_rows(_cols(rows[:-4]), lines[:-4], 2, 2, 4, True, np.array([5, 7]))
    assert head.accepted.tolist() == [-1, -1, -1]

    def edit(i, **change):
        names = ("turn", "phase", "step", "layer", "slot", "expert", "weight", "residency",
                 "expert_bytes")
        row = dict(zip(names, rows[i]))
        row.update(change)
        return rows[:i] + [tuple(row[n] for n in names)] + rows[i + 1:]

    later = [r if not 6 <= i < 10 else (*r[:2], 3, *r[3:]) for i, r in enumerate(rows)]
    for why, bad in [
            ("a repeat in a batch charged", edit(2, expert_bytes=5)),
            ("a miss not charged", edit(7, expert_bytes=0)),
            ("a hit charged", edit(6, expert_bytes=5)),
            ("two residencies of one expert in a batch", edit(11, residency=0)),
            ("an expert twice at one position", edit(7, expert=3)),
            ("a negative weight", edit(7, weight=-0.5)),
            ("one nan among a position's weights", edit(7, weight=np.nan)),
            ("a decode starting past the next position", later),
            ("a position missing in layer 0", rows[:2] + rows[4:]),
            ("a decode without its first layer", rows[:6] + rows[8:]),
            ("a slot missing", rows[:7] + rows[8:]),
            ("the last layer at a prefill's first step", edit(4, step=0))]:
        got = frame_rows(_cols(bad), lines[:len(bad)], 2, 2, 4, True, np.array([5, 7]))
        assert got is None, why


@settings(max_examples=40, deadline=None)
@given(stream=event_streams(), drop_seed=st.integers(0, 3))
def test_event_block_holds_the_events(stream, drop_seed):
    events = list(stream.events)
    if drop_seed and stream.header.n_expert_used > 1:
        rng = np.random.default_rng(drop_seed)
        i = int(rng.integers(0, len(events)))
        mask = rng.random(events[i].routes.shape) < 0.5
        events[i] = dataclasses.replace(events[i], dropped=mask)
    h = stream.header
    block = EventBlock.from_events(events, h.n_layer, h.n_expert_used)
    assert block.n_events == len(events)
    for ev, got in zip(events, block.events()):
        assert (got.kind, got.turn, got.n_draft, got.accepted) == (ev.kind, ev.turn, ev.n_draft,
                                                                   ev.accepted)
        assert np.array_equal(got.positions, ev.positions)
        assert np.array_equal(got.routes, ev.routes)
        assert np.array_equal(got.weights, ev.weights, equal_nan=True)
        assert (got.dropped is None) == (ev.dropped is None)
        if ev.dropped is not None:
            assert np.array_equal(got.dropped, ev.dropped)
    assert block.confirmed_tokens() == sum(
        1 if e.kind is DecodeKind.PLAIN else 1 + (e.accepted or 0) for e in events
        if e.kind in (DecodeKind.PLAIN, DecodeKind.VERIFY))
    empty = EventBlock.from_events([], h.n_layer, h.n_expert_used)
    assert empty.n_events == 0 and empty.routes.shape == (0, h.n_layer, h.n_expert_used)


def test_event_block_refuses_bad_shapes():
    r = np.zeros((3, 2, 1), np.int16)
    with pytest.raises(ValueError, match="event_start"):
        EventBlock(np.zeros(3, np.int64), r, np.zeros(r.shape, np.float32), None,
                   np.array([0, 2]), np.zeros(2, np.int8), np.zeros(2, np.int64),
                   np.full(2, -1, np.int64))
    with pytest.raises(ValueError, match="n_draft"):
        EventBlock.from_events([DecodeEvent(DecodeKind.VERIFY, np.arange(2), r[:2], n_draft=0)])
