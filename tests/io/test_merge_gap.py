"""--merge-gap: adjacent slices of one decode and layer read as one request (refsim.io.requests
merge_runs), hand-worked and as properties, and through replay --model."""

import json

import numpy as np
from hypothesis import given, settings, strategies as st

from refsim.cache import ExpertCache
from refsim.cli import main
from refsim.events import DecodeEvent, DecodeKind
from refsim.io.requests import IoConfig, IoTally, event_requests, merge_runs
from tests.io.test_replay_io_cli import model_and_trace  # noqa: F401  (the module fixture)
from tests.io.test_requests import events_st, small_layout


def one_layer_misses():
    # layer 0 misses experts 4 then 3 (first-seen), layer 1 nothing
    routes = np.array([[[4, 0, 3], [1, 6, 2]]], dtype=np.int16)
    charged = np.array([[[9, 0, 9], [0, 0, 0]]], dtype=np.int64)
    return routes, charged


def test_merge_runs_hand_worked():
    off = np.array([100, 0, 50, 300], dtype=np.int64)
    n = np.array([20, 50, 10, 5], dtype=np.int64)
    # file order: [0,50) [50,60) [100,120) [300,305); gaps 0, 40, 180
    first, start, span, members = merge_runs(off, n, 0)
    assert start.tolist() == [100, 0, 300] and span.tolist() == [20, 60, 5]
    assert members.tolist() == [1, 2, 1] and first.tolist() == [0, 1, 3]
    first, start, span, members = merge_runs(off, n, 40)     # the 40-byte gap joins
    assert start.tolist() == [0, 300] and span.tolist() == [120, 5] and members.tolist() == [3, 1]
    assert first.tolist() == [1, 3]          # the run's first slice in file order; queue place 0
    _, start, span, members = merge_runs(off, n, 39)
    assert start.tolist() == [100, 0, 300]


def test_event_requests_merged_hand_worked():
    lay = small_layout()
    routes, charged = one_layer_misses()
    plain = event_requests(routes, charged, lay, IoConfig(io_threads=2))
    # serial: expert 4 (gate 17384, up 50152, down 91112), expert 3 (13288, 46056, 84968)
    assert plain.offset.tolist() == [17384, 50152, 91112, 13288, 46056, 84968]
    assert plain.window.tolist() == [8192, 8192, 8192, 8192, 8192, 12288]   # down 4 at phase 1000
    req = event_requests(routes, charged, lay, IoConfig(io_threads=2, merge_gap=0))
    # experts 3 and 4 touch in each tensor: gate [13288, 21480), up [46056, 54248),
    # down [84968, 97256); the runs take the queue places of gate 4, up 4, down 4
    assert req.offset.tolist() == [13288, 46056, 84968]
    assert req.nbytes.tolist() == [8192, 8192, 12288]
    assert req.expert.tolist() == [3, 3, 3] and req.slot.tolist() == [0, 1, 2]
    # windows: [12288, 24576), [45056, 57344), [81920, 98304): the shared block read once
    assert req.window.tolist() == [12288, 12288, 16384]
    assert (req.n, req.slices, req.slice_bytes) == (3, 6, 28672)
    assert req.lane.tolist() == [0, 1, 0] and req.lane_bytes == 28672 and req.rounds == 2
    # gate ends at 21480, up starts at 46056: 24576 bytes apart, then 30720 to down
    assert event_requests(routes, charged, lay, IoConfig(2, merge_gap=24575)).n == 3
    assert event_requests(routes, charged, lay, IoConfig(2, merge_gap=24576)).n == 2
    one = event_requests(routes, charged, lay, IoConfig(2, merge_gap=30720))
    assert one.offset.tolist() == [13288] and one.nbytes.tolist() == [97256 - 13288]
    assert one.window.tolist() == [98304 - 12288] and one.slices == 6


@settings(max_examples=30)
@given(events_st, st.integers(1, 40), st.integers(1, 9), st.booleans(),
       st.lists(st.integers(0, 70000), min_size=2, max_size=4, unique=True), st.booleans())
def test_merged_requests_properties(routing, budget_entries, threads, overlap, gaps, o_direct):
    lay = small_layout(o_direct=o_direct)
    gaps = sorted(gaps)
    cache = ExpertCache(lay.expert_bytes, 8, budget_entries * 20000)
    base = IoTally(lay, IoConfig(threads, overlap))
    tallies = [IoTally(lay, IoConfig(threads, overlap, g)) for g in gaps]
    for pos, rts in enumerate(routing):
        ev = DecodeEvent(DecodeKind.PLAIN, np.array([pos]), np.array([rts], dtype=np.int16))
        rec = cache.apply(ev)
        plain = base.add_event(rec.kind, ev.routes, rec.charged_bytes)
        prev_n, prev_span = plain.n, int(plain.nbytes.sum())
        for t in tallies:
            req = t.add_event(rec.kind, ev.routes, rec.charged_bytes)
            assert (req.slices, req.slice_bytes) == (plain.n, int(plain.nbytes.sum()))
            # every slice lies in exactly one merged request of its layer
            hits = [(int(il), int(o)) for il, o, b in zip(plain.layer, plain.offset, plain.nbytes)]
            for (il, o), b in zip(hits, plain.nbytes.tolist()):
                inside = (req.layer == il) & (req.offset <= o) & (o + b <= req.offset + req.nbytes)
                assert inside.sum() == 1
            # fewer requests and more bytes asked as the gap grows; windows cover the spans
            assert req.n <= prev_n and int(req.nbytes.sum()) >= prev_span
            assert (req.window >= req.nbytes).all()
            if not o_direct:
                assert (req.window == req.nbytes).all()
            prev_n, prev_span = req.n, int(req.nbytes.sum())
    assert (base.slices == base.requests).all()
    for t in tallies:
        assert (t.slices == base.requests).all() and (t.slice_bytes == base.slice_bytes).all()


def test_replay_merge_gap(model_and_trace, capsys):  # noqa: F811
    d, model, lay, budget, recs = model_and_trace
    base = ["replay", str(d / "t.csv"), "--cache-mb", repr(budget / 2**20), "--model",
            str(d / "m.gguf"), "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "merge_gap" not in plain["io"]                  # off: today's keys only
    outs = []
    for gap in (0, 1 << 20, 2**31 - 1):
        assert main(base + ["--merge-gap", str(gap)]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    for out in outs:
        assert out["io"]["decode_slices"] == plain["decode_requests"]
        assert out["read_bytes"] == plain["read_bytes"]
    assert [o["decode_requests"] for o in outs] == sorted((o["decode_requests"] for o in outs),
                                                          reverse=True)
    # a gap past the file: one request per decode and layer with a miss
    assert outs[-1]["decode_requests"] == plain["io"]["decode_batches"]
    assert main(["replay", str(d / "t.csv"), "--cache-mb", "1", "--merge-gap", "0"]) == 2
    assert "--merge-gap without --model" in capsys.readouterr().err
