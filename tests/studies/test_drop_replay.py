"""`refsim drop-replay`: the static bound equals the engine's route-drop-replay.py (run as an
oracle from ../shared, never copied), hand-worked cells, and the dynamic figure beside it."""

import subprocess
import sys

import numpy as np
import pytest

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.streaming.knobs import StreamKnobs
from refsim.cli import main
from refsim.events import DecodeEvent, DecodeKind
from refsim.studies.drop_replay import dynamic_rows, static_keep, static_threshold, trace_cells
from refsim.testing.shared import require_shared
from refsim.trace import TraceHeader, read_trace, write_trace


def oracle(*paths):
    script = require_shared("reference", "engine-docs", "scripts", "route-drop-replay.py")
    out = subprocess.run([sys.executable, str(script), *map(str, paths)], check=True,
                         capture_output=True, text=True)
    return out.stdout


def ours(capsys, *argv):
    assert main(["drop-replay", *map(str, argv)]) == 0
    return capsys.readouterr().out


def test_static_bound_is_the_engine_script_on_qwen(qwen_trace_path, capsys):
    # every line and number route-drop-replay.py prints, for both phases
    assert ours(capsys, qwen_trace_path) == oracle(qwen_trace_path)


def test_chosen_fracs_and_keeps_print_the_scripts_rows(qwen_trace_path, capsys):
    got = ours(capsys, qwen_trace_path, "--frac", "0.5,0.75,1.0", "--n-expert-used", "3,5")
    want = oracle(qwen_trace_path).splitlines()
    rows = [ln for ln in got.splitlines() if ln.startswith(("    0.", "    1.", "       3", "       5"))]
    assert len(rows) == 10                              # 3 fracs + 2 keeps, two phases
    assert all(r in want for r in rows)
    assert "  1.00    16.67%      66.1%       9.46%" in got     # expert-dropping.md: 66 % / 9.5 %


def test_a_trace_recorded_with_dropping_reports_its_column(qwen_trace_path, tmp_path, capsys):
    # Replay qwen with F = 1 at 3000 MiB, write the trace as a drop run would (dropped=1 rows
    # keep the router's weight and residency 0, expert_bytes 0), and compare with the script.
    tr = read_trace(qwen_trace_path)
    h = tr.header
    c = ExpertCache(h.expert_bytes, h.n_expert, 3000 * MIB, StreamKnobs(drop_frac=1.0))
    recs = [c.apply(e) for e in tr.events]
    evs = [DecodeEvent(e.kind, e.positions, e.routes, weights=e.weights, dropped=r.dropped,
                       turn=e.turn) for e, r in zip(tr.events, recs)]
    out = tmp_path / "dropped.route.csv"
    write_trace(out, h, evs, [r.trace_residency() for r in recs], [r.charged_bytes for r in recs])
    text = ours(capsys, out)
    assert text == oracle(out)
    assert "recorded: dropping was ON for this run -- 8195 routings dropped (22.2%)" in text


def tiny_trace(tmp_path):
    """Two decode cells, k = 2, 10-byte entries, recorded residency and charges:
    cell A (step 5): expert 1 w .7 miss 10 B, expert 2 w .3 miss 10 B;
    cell B (step 6): expert 1 w .9 hit,       expert 3 w .1 miss 10 B."""
    h = TraceHeader(model="m", arch="qwen3moe", n_layer=1, n_expert=4, n_expert_used=2,
                    expert_bytes=np.array([10]), dense_bytes=np.array([0]))
    evs = [DecodeEvent(DecodeKind.PLAIN, np.array([5]), np.array([[[1, 2]]], np.int16),
                       weights=np.array([[[0.7, 0.3]]], np.float32)),
           DecodeEvent(DecodeKind.PLAIN, np.array([6]), np.array([[[1, 3]]], np.int16),
                       weights=np.array([[[0.9, 0.1]]], np.float32))]
    res = [np.array([[[0, 0]]], np.int8), np.array([[[1, 0]]], np.int8)]
    chg = [np.array([[[10, 10]]]), np.array([[[0, 10]]])]
    path = tmp_path / "tiny.route.csv"
    write_trace(path, h, evs, res, chg)
    return path


def test_hand_worked_static_rows(tmp_path):
    c = trace_cells(read_trace(tiny_trace(tmp_path)), 1)
    assert (c.n_cells, c.n_rows) == (2, 4)
    # frac 1: thr = 0.5. A: expert 2 (miss, .3, not best) dropped; B: expert 3 (.1) dropped.
    # io_saved = 20 / 30 miss bytes; mass_lost = .4 / 2.0; both cells keep 1 row.
    r = static_threshold(c, 1.0, 2)
    assert r.io_saved_pct == pytest.approx(200 / 3)
    assert r.mass_lost_pct == pytest.approx(20.0, abs=1e-5)
    assert r.kept_hist == {1: 2}
    # frac 0.5: thr = 0.25: only expert 3 (.1) drops: 10 / 30; mass .1 / 2
    r = static_threshold(c, 0.5, 2)
    assert r.io_saved_pct == pytest.approx(100 / 3) and r.kept_hist == {1: 1, 2: 1}
    assert r.mass_lost_pct == pytest.approx(5.0, abs=1e-5)
    # keep 1: slot 1 cut in both cells: miss bytes cut 20 of 30, mass .4
    k = static_keep(c, 1)
    assert k.io_saved_pct == pytest.approx(200 / 3) and k.mass_lost_pct == pytest.approx(20.0, abs=1e-5)


def test_hand_worked_dynamic_rows(tmp_path):
    # Budget 20 B (two entries), no prefill: the replay starts cold.
    # No drop: step 5 reads 1 and 2 (20 B); step 6: 1 hits, 3 misses (10 B) -> 30 B.
    # F = 1 (thr .5): step 5 is the run's first graph, whose terminal weight node is not known
    # yet, so it loads undropped (20 B). Step 6: 1 hits; 3 is cold and .1 < .5 -> dropped.
    # 20 B: io_saved = 10/30, mass_lost = .1 / 2.0 = 5 %, 1 of 4 routed slots dropped.
    tr = read_trace(tiny_trace(tmp_path))
    base, f1, k1 = dynamic_rows(tr, 20, [1.0], [1])
    assert base.decode_read_bytes == 30 and f1.decode_read_bytes == 20
    assert f1.io_saved_pct == pytest.approx(100 / 3)
    assert f1.mass_lost_pct == pytest.approx(5.0, abs=1e-5)
    assert (f1.dropped, f1.routed) == (1, 4)
    # keep 1: reads 1 once (10 B), hits it at step 6; mass lost .3 + .1 of 2.0
    assert k1.decode_read_bytes == 10 and k1.hit_pct_decode == 50.0
    assert k1.mass_lost_pct == pytest.approx(20.0, abs=1e-5)


def test_dynamic_block_on_qwen(qwen_trace_path, capsys):
    text = ours(capsys, qwen_trace_path, "--frac", "0.75", "--n-expert-used", "5",
                "--cache-mb", "3000")
    assert "dynamic: the trace replayed through the LRU at 3000 MiB" in text
    # frac 0 is the plain replay (refsim replay --cache-mb 3000: 232.28 MiB/token)
    assert "  frac 0.00       0.0%       0.00%              0/0     70.61     232.28" in text
    assert "  frac 0.75      37.7%       6.68%       4048/36864     79.42     144.71" in text


def test_bad_flags(qwen_trace_path, capsys):
    assert main(["drop-replay", str(qwen_trace_path), "--n-expert-used", "6"]) == 1
    assert "--n-expert-used: expected values in 1..5" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["drop-replay", str(qwen_trace_path), "--frac", "1.5"])


def nan_weight_trace(tmp_path):
    """The tiny trace with every weight ``nan`` (a graph with no weight node), written as the
    engine writes it: rows at file lines 5..8 (after the 3 preamble lines and the column line)."""
    h = TraceHeader(model="m", arch="qwen3moe", n_layer=1, n_expert=4, n_expert_used=2,
                    expert_bytes=np.array([10]), dense_bytes=np.array([0]))
    nan = np.full((1, 1, 2), np.nan, np.float32)
    evs = [DecodeEvent(DecodeKind.PLAIN, np.array([5]), np.array([[[1, 2]]], np.int16), weights=nan),
           DecodeEvent(DecodeKind.PLAIN, np.array([6]), np.array([[[1, 3]]], np.int16), weights=nan)]
    res = [np.array([[[0, 0]]], np.int8), np.array([[[1, 0]]], np.int8)]
    chg = [np.array([[[10, 10]]]), np.array([[[0, 10]]])]
    path = tmp_path / "nan.route.csv"
    write_trace(path, h, evs, res, chg)
    return path


def test_all_nan_weights_are_refused_as_replay_refuses_them(tmp_path, capsys):
    """drop-replay printed ``[DECODE] no rows`` with exit 0 on such a trace, where ``replay
    --drop-cold-experts`` refuses it: one rule (studies.replay.require_weights), one message
    (issue 26 C4)."""
    path = nan_weight_trace(tmp_path)
    first = next(i for i, ln in enumerate(path.read_text().splitlines(), 1)
                 if not ln.startswith("#") and ln[0].isdigit())
    want = (f"{path}: line {first}: weight 'nan' on a routed slot; --drop-cold-experts needs "
            f"every routed slot's final weight")
    assert main(["replay", str(path), "--cache-mb", "1", "--drop-cold-experts", "0.5"]) == 1
    replay_err = capsys.readouterr().err
    assert replay_err.endswith(want + "\n")
    good = tiny_trace(tmp_path)
    assert main(["drop-replay", str(good), str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""                        # refused before the first trace's report
    assert err == "refsim drop-replay: error: " + want + "\n"
    assert err.partition(": error: ")[2] == replay_err.partition(": error: ")[2]
