"""Write-then-read round-trips exactly (events, weights, residency, bytes)."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from refsim.cache import ExpertCache
from refsim.events import DecodeKind
from refsim.testing.traces import event_streams
from refsim.trace import read_trace, write_trace


@given(stream=event_streams(), budget=st.integers(1, 60))
def test_write_then_read_round_trips(tmp_path_factory, stream, budget):
    path = tmp_path_factory.mktemp("rt") / "t.route.csv"
    h = stream.header
    cache = ExpertCache(h.expert_bytes, h.n_expert, budget)
    recs = [cache.apply(e) for e in stream.events]
    write_trace(path, h, stream.events, [r.residency for r in recs],
                [r.charged_bytes for r in recs])
    tr = read_trace(path)
    assert tr.header.n_layer == h.n_layer and tr.header.n_expert_used == h.n_expert_used
    assert (tr.header.expert_bytes == h.expert_bytes).all()
    assert (tr.header.dense_bytes == h.dense_bytes).all()
    assert len(tr.events) == len(stream.events)
    for a, b, r, res, chg in zip(stream.events, tr.events, recs, tr.residency,
                                 tr.charged_bytes):
        assert a.kind == b.kind
        assert (a.positions == b.positions).all()
        assert (a.routes == b.routes).all()
        np.testing.assert_array_equal(a.weights, b.weights)
        assert (res == r.residency).all()
        assert (chg == r.charged_bytes).all()
    # accepted is recovered from the next decode's base, except the last verify decode
    decs = [e for e in stream.events if e.phase == 1]
    for i, (a, b) in enumerate(zip(decs, [e for e in tr.events if e.phase == 1])):
        if a.kind is DecodeKind.VERIFY and i + 1 < len(decs):
            assert b.accepted == a.accepted
    # and replaying the written trace at the same budget gives the same counters
    again = ExpertCache(h.expert_bytes, h.n_expert, budget)
    for e in tr.events:
        again.apply(e)
    assert (again.stats.lookups == cache.stats.lookups).all()
    assert (again.stats.read_bytes == cache.stats.read_bytes).all()


def test_written_file_matches_the_engine_layout(tmp_path):
    from refsim.events import DecodeEvent
    from refsim.trace import TraceHeader
    h = TraceHeader("m.gguf", "qwen3moe", 2, 4, 2, np.array([8, 4]), np.array([1, 2]))
    routes = np.array([[[1, 2], [-1, -1]], [[3, 1], [0, 2]]], np.int16)
    w = np.array([[[0.75, 0.25], [np.nan, np.nan]], [[0.5, 0.5], [0.0904526, 0.9]]], np.float32)
    e = DecodeEvent(DecodeKind.PREFILL, np.array([0, 1]), routes, weights=w)
    c = ExpertCache(h.expert_bytes, h.n_expert, 100)
    r = c.apply(e)
    write_trace(tmp_path / "x.csv", h, [e], [r.residency], [r.charged_bytes])
    assert (tmp_path / "x.csv").read_text() == (
        "# route_trace v1\n"
        "# model=m.gguf arch=qwen3moe n_layer=2 n_expert=4 n_expert_used=2\n"
        "# layer=0 expert_bytes=8 dense_bytes=1\n"
        "# layer=1 expert_bytes=4 dense_bytes=2\n"
        "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes,dropped\n"
        "0,0,0,0,0,1,0.75,0,8,0\n"
        "0,0,0,0,1,2,0.25,0,8,0\n"
        "0,0,1,0,0,3,0.5,0,8,0\n"
        "0,0,1,0,1,1,0.5,0,0,0\n"
        "0,0,1,1,0,0,0.0904526,0,4,0\n"
        "0,0,1,1,1,2,0.9,0,4,0\n")
    assert list(tmp_path.iterdir()) == [tmp_path / "x.csv"]  # no temporary file left
