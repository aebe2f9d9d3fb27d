"""refsim union: window unions (hand-worked and properties) and the widened-batch replay."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.cli import main
from refsim.events import DecodeKind
from refsim.studies.union import decode_positions, grouped_events, union_study, \
    window_union_sizes
from refsim.testing.traces import event_streams


def test_window_unions_by_hand():
    # one layer, k 2: positions {0,1} {1,2} {0,3} ; windows of 2: {0,1,2} {0,1,2,3}
    routes = np.array([[[0, 1]], [[1, 2]], [[0, 3]]], np.int16)
    assert window_union_sizes(routes, 4, 1)[:, 0].tolist() == [2, 2, 2]
    assert window_union_sizes(routes, 4, 2)[:, 0].tolist() == [3, 4]
    assert window_union_sizes(routes, 4, 3)[:, 0].tolist() == [4]
    # unrouted and dropped slots are not read
    routes[1, 0, 1] = -1
    dropped = np.zeros(routes.shape, bool)
    dropped[2, 0, 1] = True
    assert window_union_sizes(routes, 4, 2, dropped)[:, 0].tolist() == [2, 2]


@given(event_streams(speculative=False), st.integers(1, 4))
def test_union_grows_with_the_window_and_is_bounded(stream, w):
    _, routes, _ = decode_positions(stream.events)
    n_pos, _, k = routes.shape
    if w > n_pos:
        return
    n_expert = stream.header.n_expert
    u = window_union_sizes(routes, n_expert, w)
    assert (u >= k).all() and (u <= min(w * k, n_expert)).all()
    if w + 1 <= n_pos:
        wider = window_union_sizes(routes, n_expert, w + 1)
        assert (wider >= u[:-1]).all() and (wider >= u[1:]).all()


@given(event_streams(speculative=False), st.integers(1, 4), st.integers(1, 80))
def test_grouped_replay_keeps_tokens_and_width_one_is_the_trace(stream, w, budget):
    h = stream.header
    pos, routes, dropped = decode_positions(stream.events)
    prefill = [e for e in stream.events if e.kind is DecodeKind.PREFILL]
    evs = grouped_events(prefill, pos, routes, dropped, w)
    got = np.concatenate([e.positions for e in evs if e.kind is not DecodeKind.PREFILL])
    assert got.tolist() == pos.tolist()
    assert all(e.n_pos <= w for e in evs if e.kind is not DecodeKind.PREFILL)
    if w == 1:
        a, b = (ExpertCache(h.expert_bytes, h.n_expert, budget) for _ in range(2))
        for e in stream.events:
            a.apply(e)
        for e in evs:
            b.apply(e)
        assert a.stats.total("read_bytes") == b.stats.total("read_bytes")
        assert a.stats.total("hits") == b.stats.total("hits")


def test_real_trace_union_and_widened_reads(qwen_trace):
    rows = union_study(qwen_trace, [1, 2, 3], budget_bytes=4000 * MIB)
    one, two, three = rows
    assert (one.n_windows, one.union_mean, one.union_p90) == (128, 6.0, 6.0)
    # w = 1 is the trace itself: 19938.8 MiB of decode reads (bmoe-engine.md §3.1) at 80.3 %
    assert round(one.read_mib, 1) == 19938.8 and round(one.hit_pct_decode, 1) == 80.3
    assert one.decodes == 128 and two.decodes == 64 and three.decodes == 43
    assert 6.0 < two.union_mean < three.union_mean <= 18


def test_cli_prints_one_row_per_window(qwen_trace_path, capsys):
    assert main(["union", str(qwen_trace_path), "--window", "1,4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2].split()[:2] == ["1", "128"] and out[-1].split()[:2] == ["4", "125"]
    assert main(["union", str(qwen_trace_path), "--window", "129"]) == 1     # the trace's bound
    assert "--window: 129 is outside 1..128" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:                                   # the flag's own
        main(["union", str(qwen_trace_path), "--window", "0"])
    assert exc.value.code == 2
