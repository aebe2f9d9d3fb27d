"""`refsim replay --predict-log` on a recorded trace: the engine's published accuracies on the
qwen trace (prefetch.md: previous token 38.0 %, static hot list 37.6 %; findings: prompt-only hot
list 17.9 %), a hand-worked case, and properties."""

import numpy as np
from hypothesis import given

from refsim.cli import main
from refsim.events import DecodeEvent, DecodeKind
from refsim.studies.predict import predict_lines, predict_log
from refsim.testing.traces import event_streams
from refsim.trace import RouteTrace, TraceHeader


def test_qwen_reproduces_the_engines_figures(qwen_trace):
    rep = predict_log(qwen_trace)
    t = rep.total
    assert f"{t['prev-token'].hit_pct:.1f}" == "38.0"
    assert f"{t['hot-list'].hit_pct:.1f}" == "37.6"
    assert f"{t['prompt-hot-list'].hit_pct:.1f}" == "17.9"
    # 127 scored decode graphs (the first is unscored) x 48 layers, 6 slots each
    assert (t["prev-token"].rows, t["prev-token"].slots) == (6096, 36576)


def test_replay_prints_the_report(qwen_trace_path, capsys):
    assert main(["replay", str(qwen_trace_path), "--cache-mb", "3000", "--predict-log"]) == 0
    out = capsys.readouterr().out
    assert "moe-predict: prev-token 38.0% of routed slots" in out
    assert "static hot list 37.6%" in out


def trace_of(events, n_layer=1, n_expert=8, k=2):
    h = TraceHeader(model="m", arch="qwen3moe", n_layer=n_layer, n_expert=n_expert,
                    n_expert_used=k, expert_bytes=np.full(n_layer, 4),
                    dense_bytes=np.zeros(n_layer, np.int64))
    z = [np.zeros(e.routes.shape, np.int8) for e in events]
    return RouteTrace(h, events, z, [a.astype(np.int64) for a in z], [a.astype(np.int32) for a in z])


def plain(pos, ids):
    return DecodeEvent(DecodeKind.PLAIN, np.array([pos]), np.array([[ids]], np.int16))


def test_hand_worked():
    # prompt routes {0,1} then {0,2}; decodes {1,2}, {1,3}, {2,3}, {1,2}.
    # prev-token: step 2 <- {1,2}: {1,3} 1 hit; step 3 <- {1,3}: {2,3} 1 hit; step 4 <- {2,3}:
    #   {1,2} 1 hit -> 3 / 6 slots, no routing whole.
    # decode counts: 1:3, 2:3, 3:2 -> hot list {1,2}: {1,3} 1, {2,3} 1, {1,2} 2 -> 4 / 6, 1 exact.
    # prompt counts: 0:2, 1:1, 2:1 -> most_common(2) = {0, 1} (ties by first seen): 1, 0, 1 -> 2/6.
    pre = DecodeEvent(DecodeKind.PREFILL, np.array([0, 1]), np.array([[[0, 1]], [[0, 2]]], np.int16))
    evs = [pre, plain(2, [1, 2]), plain(3, [1, 3]), plain(4, [2, 3]), plain(5, [1, 2])]
    t = predict_log(trace_of(evs)).total
    assert (t["prev-token"].hits, t["prev-token"].slots, t["prev-token"].exact) == (3, 6, 0)
    assert (t["hot-list"].hits, t["hot-list"].exact) == (4, 1)
    assert t["prompt-hot-list"].hits == 2
    lines = predict_lines(predict_log(trace_of(evs, n_layer=1)))
    assert lines[0].startswith("moe-predict: prev-token 50.0% of routed slots (0.0% whole")


def test_a_layer_without_routings_prints_a_dash():
    evs = [plain(0, [1, 2])]                       # one decode: nothing to score
    lines = predict_lines(predict_log(trace_of(evs)))
    assert lines[-1].split() == ["0", "-", "-", "-", "0"]


@given(event_streams())
def test_counters_are_bounded(stream):
    tr = trace_of(stream.events, stream.header.n_layer, stream.header.n_expert,
                  stream.header.n_expert_used)
    rep = predict_log(tr)
    for n, s in rep.total.items():
        assert 0 <= s.hits <= s.slots and 0 <= s.exact <= s.rows
    # a stream whose decodes all route the same set is predicted whole by prev-token
    same = [DecodeEvent(DecodeKind.PLAIN, np.array([i]), stream.events[-1].routes[-1:].copy())
            for i in range(3)]
    t = predict_log(trace_of(same, stream.header.n_layer, stream.header.n_expert,
                             stream.header.n_expert_used)).total["prev-token"]
    assert t.hits == t.slots and t.exact == t.rows
