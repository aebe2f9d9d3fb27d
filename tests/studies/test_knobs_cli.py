"""The knobs through `refsim replay`, `sweep` and `union` on the qwen trace: off = today's output
byte for byte, the three commands agree with each other, and the engine's rejections."""

import json

import pytest

from refsim import MIB
from refsim.streaming.knobs import StreamKnobs
from refsim.cli import main
from refsim.studies.replay import replay_trace
from refsim.studies.sweep import sweep_knobs


def out_of(capsys, argv):
    assert main(argv) == 0
    return capsys.readouterr()


@pytest.mark.parametrize("cmd", [["replay", "--cache-mb", "3000"],
                                 ["sweep", "--cache-mb", "1000,3000", "--policy", "lru,lfu"],
                                 ["union", "--cache-mb", "3000", "--window", "1,3"]])
def test_knobs_at_zero_are_todays_output_byte_for_byte(qwen_trace_path, capsys, tmp_path, cmd):
    base = [cmd[0], str(qwen_trace_path), *cmd[1:]]
    a = out_of(capsys, base)
    b = out_of(capsys, base + ["--drop-cold-experts", "0", "--prefetch", "0"])
    assert a.out == b.out and a.err == b.err
    if cmd[0] == "replay":
        main(base + ["--csv", str(tmp_path / "a.csv"), "--json"])
        ja = capsys.readouterr().out
        main(base + ["--csv", str(tmp_path / "b.csv"), "--json", "--drop-cold-experts", "0",
                     "--prefetch", "0"])
        assert capsys.readouterr().out == ja
        assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
        assert "moe-drop" not in a.out and "moe-prefetch" not in a.out


def test_replay_prints_the_engines_knob_lines(qwen_trace_path, capsys):
    out = out_of(capsys, ["replay", str(qwen_trace_path), "--cache-mb", "3000",
                          "--drop-cold-experts", "0.75", "--prefetch", "1", "--json"]).out
    j = json.loads(out)["knobs"]
    # 128 decode tokens x 48 layers x 6 slots routed (prefill excluded, as the engine's delta)
    assert j["experts_routed"] == 128 * 48 * 6
    assert 0 < j["experts_dropped"] < j["experts_routed"]
    assert j["spec_useful"] <= j["spec_experts"]
    text = out_of(capsys, ["replay", str(qwen_trace_path), "--cache-mb", "3000",
                           "--drop-cold-experts", "0.75", "--prefetch", "1"]).out
    assert (f"moe-drop: {j['experts_dropped']}/36864 routed experts dropped "
            f"({100 * j['experts_dropped'] / 36864:.1f}%), threshold 0.75 x uniform") in text
    assert (f"moe-prefetch: {j['spec_read_mib']:.1f} MiB speculative, {j['spec_useful']}/"
            f"{j['spec_experts']} experts useful") in text


def test_sweep_rows_are_the_replays(qwen_trace):
    knobs = StreamKnobs(drop_frac=1.0, prefetch=2)
    res = sweep_knobs(qwen_trace, [1000, 3000], knobs)
    for row in res.rows:
        rep = replay_trace(qwen_trace, int(row.budget_mib * MIB), knobs=knobs)
        assert row.summary == rep.summary and row.knobs == rep.knobs
        # speculative bytes are part of the decode reads
        assert row.knobs.spec_read_bytes <= row.summary.decode_read_bytes


def test_union_w1_with_drop_is_the_replay(qwen_trace_path, qwen_trace, capsys):
    # window 1 replays the decode positions one per decode: the trace itself (no speculation)
    out = out_of(capsys, ["union", str(qwen_trace_path), "--cache-mb", "3000", "--window", "1",
                          "--drop-cold-experts", "1.0"]).out
    rep = replay_trace(qwen_trace, 3000 * MIB, knobs=StreamKnobs(drop_frac=1.0))
    line = out.strip().splitlines()[-1].split()
    assert line[11] == f"{rep.summary.mib_per_token:.2f}"
    assert line[-1] == f"{rep.knobs.experts_dropped}/{rep.knobs.experts_routed}"


@pytest.mark.parametrize("flags, msg", [
    (["--drop-cold-experts", "1.5"], "argument --drop-cold-experts: expected a number in [0, 1], got '1.5'"),
    (["--prefetch", "9"], "argument --prefetch: expected an integer in 0..8, got '9'"),
])
def test_engine_rejections(qwen_trace_path, capsys, flags, msg):
    # the engine's ranges, refused as every bad flag value is: a usage error (docs/cli.md)
    with pytest.raises(SystemExit) as exc:
        main(["replay", str(qwen_trace_path), "--cache-mb", "3000", *flags])
    assert exc.value.code == 2
    assert msg in capsys.readouterr().err


def test_sweep_knobs_need_the_lru(qwen_trace_path, capsys):
    assert main(["sweep", str(qwen_trace_path), "--cache-mb", "3000", "--policy", "lfu",
                 "--drop-cold-experts", "0.5"]) == 2     # the command line alone: a usage error
    assert "expected --policy lru" in capsys.readouterr().err


def test_low_topk_warning_on_stderr(tmp_path, capsys):
    from tests.studies.test_drop_replay import tiny_trace      # k = 2
    path = tiny_trace(tmp_path)
    err = out_of(capsys, ["replay", str(path), "--cache-mb", "1", "--drop-cold-experts",
                          "0.75"]).err
    assert "refsim replay: warning: drop-cold-experts=0.75 with top-k 2" in err and "37.5%" in err


def test_a_trace_without_weights_is_a_one_line_error(tmp_path, capsys):
    # a trace with 'nan' weights: the policy cannot run; the error names the line. (drop-replay
    # prints "[DECODE] no rows" for it, as route-drop-replay.py does: rows without a weight
    # form no cells.)
    from refsim.events import DecodeEvent, DecodeKind
    from refsim.trace import TraceHeader, write_trace
    import numpy as np
    h = TraceHeader(model="m", arch="qwen3moe", n_layer=1, n_expert=4, n_expert_used=2,
                    expert_bytes=np.array([10]), dense_bytes=np.array([0]))
    evs = [DecodeEvent(DecodeKind.PREFILL, np.array([0]), np.array([[[0, 1]]], np.int16)),
           DecodeEvent(DecodeKind.PLAIN, np.array([1]), np.array([[[2, 3]]], np.int16))]
    path = tmp_path / "noweights.route.csv"
    write_trace(path, h, evs, [np.zeros((1, 1, 2), np.int8)] * 2,
                [np.array([[[10, 10]]]), np.array([[[10, 10]]])])
    for cmd in (["replay", str(path), "--cache-mb", "1"], ["union", str(path), "--cache-mb", "1"]):
        assert main(cmd + ["--drop-cold-experts", "0.5"]) == 1
        err = capsys.readouterr().err.strip().splitlines()[-1]   # after the k <= 4 warning
        # line 7: the decode's first row (4 preamble lines, 2 prefill rows); prefill is unarmed
        assert err.startswith(f"refsim {cmd[0]}: error: {path}: line 7: weight 'nan'")


def test_every_differing_row_is_listed_prefetched_ones_too(capsys):
    """A prefetched hit (residency 2) against a recorded miss is a difference, listed as one: the
    listed rows are the counted ones (before, 'the first 0 of the 2 that differ')."""
    from pathlib import Path
    demo = str(Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv")
    from refsim.studies.replay import replay_trace
    from refsim.trace import read_trace
    rep = replay_trace(read_trace(demo), 256 * MIB, knobs=StreamKnobs(prefetch=1))
    n_bad = rep.residency_rows - rep.residency_agree
    assert n_bad > 0
    assert len(rep.disagreements) == min(n_bad, 10)
    assert all((d.replayed != 0) != (d.recorded != 0) for d in rep.disagreements)
