"""refsim analyze: hand-worked rules, framing invariants (hypothesis), flag errors and plots."""

import json
import os
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings

from refsim import MIB
from refsim.analysis import AnalyzeOptions, analyze, parse_span
from refsim.analysis.frame import frame_trace
from refsim.cache import ExpertCache
from refsim.cli import main
from refsim.errors import ConfigError
from refsim.testing.traces import event_streams
from refsim.trace import read_trace, write_trace
from tests.analysis.conftest import refsim_analyze, sections


def test_parse_span():
    assert parse_span("3,5-7, 9..10", "--steps") == [(3, 3), (5, 7), (9, 10)]
    assert parse_span(None, "--steps") is None
    for bad in ["", "a", "5-3", "-1", "1-", "1..2..3"]:
        with pytest.raises(ConfigError, match="--steps"):
            parse_span(bad, "--steps")


def test_spec_matrix_marks_by_hand(spec_trace_path):
    """Decode framing, layer 0: verify [3,4,5] after plain 2 routed {0,4}: 4 repeats from the
    previous decode ('*'), 5 and 6 repeat inside the batch ('+'); plain 7 drops 9 ('~')."""
    out = refsim_analyze(spec_trace_path, "--view", "matrix", "--layers", "0")
    rows = [[c.strip() for c in ln.split(" | ")] for ln in next(iter(sections(out).values()))[2:]]
    assert rows == [["2", "0", "0 4"], ["3", "v1", "*4 5"], ["4", "v1", "+5 6"],
                    ["5", "v1", "+6 7"], ["5", "v2", "*6 0"], ["6", "v2", "+0 1"],
                    ["7", "3", "*1 ~9"]]
    rows = refsim_analyze(spec_trace_path, "--view", "matrix", "--layers", "0", "--framing",
                          "position", "--cells", "hit")
    # position 5: both decodes' rows merged in slot order (6 M, 6 H, 7 M, 0 H), as the script
    assert "     5 | MHMH" in rows


def _trace_of(stream, tmp):
    h = stream.header
    cache = ExpertCache(h.expert_bytes, h.n_expert, int(2 * h.token_cycle_bytes))
    res, chg = [], []
    for ev in stream.events:
        rec = cache.apply(ev)
        res.append(rec.residency)
        chg.append(rec.charged_bytes)
    path = os.path.join(tmp, "s.route.csv")
    write_trace(path, h, stream.events, res, chg)
    return read_trace(path)


VIEWS_NO_MATRIX = ["hot", "reuse", "overlap", "workset", "cache", "entropy", "bytes"]


def _strip(rep):
    r = dict(rep["result"])
    r.pop("unit", None)
    r.pop("counted", None)
    r.pop("tokens", None)
    r.pop("mib_per_token", None)
    return r


@settings(max_examples=25)
@given(event_streams(speculative=False))
def test_framings_agree_without_speculation(stream):
    """One position per decode: in the decode phase decode and position framing are the same
    units, so every view gives the same numbers (the workset's 'fewer units' cell aside: None vs
    0). (A prefill chunk is one unit in the decode framing, one per position in the other.)"""
    with tempfile.TemporaryDirectory() as tmp:
        tr = _trace_of(stream, tmp)
        for view in VIEWS_NO_MATRIX:
            for phase in ("decode",):
                a = analyze(tr, AnalyzeOptions(view=view, framing="decode", phase=phase))
                b = analyze(tr, AnalyzeOptions(view=view, framing="position", phase=phase))
                ra, rb = _strip(a), _strip(b)
                if view == "workset":
                    for x in ra["layers"]:
                        x["at"] = [0 if v is None else v for v in x["at"]]
                assert ra == rb, view


@settings(max_examples=25)
@given(event_streams(speculative=True))
def test_framing_invariants_with_speculation(stream):
    """Any trace: both framings see the same routings (hot), the same bytes, and a decode's
    lookups never exceed its routings; decode-framing units = decode events."""
    with tempfile.TemporaryDirectory() as tmp:
        tr = _trace_of(stream, tmp)
        run = lambda v, f: analyze(tr, AnalyzeOptions(view=v, framing=f))["result"]  # noqa: E731
        assert run("hot", "decode") == run("hot", "position")
        bd, bp = run("bytes", "decode"), run("bytes", "position")
        assert bd["total_bytes"] == bp["total_bytes"]
        assert bd["units"] == len(tr.decode_events)
        assert bd["tokens"] == sum(1 + (e.accepted or 0) if e.n_pos > 1 else 1
                                   for e in tr.decode_events)
        cd, cp = run("cache", "decode"), run("cache", "position")
        assert cd["all"]["n"] <= cp["all"]["n"]
        fr = frame_trace(tr, "decode")
        look = {(int(u), int(l), int(e)) for u, l, e in zip(fr.unit, fr.layer, fr.expert)}
        assert cd["all"]["n"] == len(look)


def test_cache_replay_agrees_at_the_recorded_budget(spec_trace_path):
    rep = json.loads(refsim_analyze(spec_trace_path, "--view", "cache", "--cache-mb", "64",
                                    "--json"))["result"]["all"]
    assert rep["replay_agree"] == rep["n"] == 10 + 11 and rep["replay_hit"] == rep["hit"]
    small = json.loads(refsim_analyze(spec_trace_path, "--view", "cache", "--cache-mb", "4",
                                      "--json"))["result"]["all"]
    assert small["replay_hit"] < rep["replay_hit"]


@pytest.mark.parametrize("argv,msg,code", [
    (["--view", "hot", "--steps", "9-3"], "--steps '9-3': expected N, A-B", 2),
    (["--view", "hot", "--layers", "2"], "--layers: layer 2 is outside 0..1", 1),
    (["--view", "hot", "--steps", "100-200"], "no rows for that --phase/--turn/--steps", 1),
    (["--view", "hot", "--cache-mb", "64"], "--cache-mb: only the cache view replays", 2),
    (["--view", "matrix", "--plot", "x.png"], "--plot: only the reuse, workset, overlap views", 2),
    (["--view", "cache", "--cache-mb", "64", "--framing", "position"], "use it with --framing", 1),
    (["--view", "hot", "--turn", "3"], "no rows for that --phase/--turn/--steps", 1),
])
def test_flag_errors_are_one_line(spec_trace_path, capsys, argv, msg, code):
    # what the command line alone shows is a usage error (exit 2: the usage line, then one error
    # line); what the trace refuses exits 1 with one line (docs/cli.md, "Conventions")
    assert main(["analyze", str(spec_trace_path), *argv]) == code
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert msg in lines[-1]
    assert (lines[0].startswith("usage: refsim analyze") if code == 2 else len(lines) == 1)


def test_bad_trace_is_one_line(tmp_path, capsys):
    p = tmp_path / "t.csv"
    p.write_text("# route_trace v1\n# model=m arch=a n_layer=1 n_expert=2 n_expert_used=1\n"
                 "# layer=0 expert_bytes=5 dense_bytes=0\n"
                 "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n0,1,0,0,0,7,1,0,5\n")
    assert main(["analyze", str(p), "--view", "hot"]) == 1
    err = capsys.readouterr().err
    assert "t.csv:5: column 'expert' is 7" in err and err.count("\n") == 1
    assert main(["view", str(p), "--html", str(tmp_path / "o.html")]) == 1
    assert not (tmp_path / "o.html").exists()


@pytest.mark.parametrize("view", ["reuse", "workset", "overlap"])
def test_plot_writes_a_png(qwen_trace_path, tmp_path, view):
    pytest.importorskip("matplotlib")
    out = tmp_path / f"{view}.png"
    assert main(["analyze", str(qwen_trace_path), "--view", view, "--plot", str(out)]) == 0
    from matplotlib.image import imread
    img = imread(str(out))
    assert img.shape[0] > 300 and img[..., :3].std() > 0.05


def test_plot_without_matplotlib_is_a_one_line_error(spec_trace_path, tmp_path, capsys,
                                                     monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)       # import matplotlib -> ImportError
    out = tmp_path / "r.png"
    assert main(["analyze", str(spec_trace_path), "--view", "reuse", "--plot", str(out)]) == 1
    assert "matplotlib is not installed" in capsys.readouterr().err and not out.exists()


def test_units_in_bytes_view_are_mib(spec_trace_path):
    r = json.loads(refsim_analyze(spec_trace_path, "--view", "bytes", "--json"))["result"]
    assert r["layers"][1]["expert_mib"] == 2.0 and r["dense_total_mib"] == 10.0
    assert r["total_bytes"] == 16 * MIB and np.isclose(r["mib_per_token"], 16 / 6)


def test_outputs_never_overwrite_the_inputs(spec_trace_path, capsys):
    before = spec_trace_path.read_bytes()
    assert main(["view", str(spec_trace_path), "--html", str(spec_trace_path)]) == 1
    assert "is also the TRACE input" in capsys.readouterr().err
    assert main(["analyze", str(spec_trace_path), "--view", "reuse", "--plot",
                 str(spec_trace_path)]) == 1
    assert "is also the TRACE input" in capsys.readouterr().err
    assert spec_trace_path.read_bytes() == before


def test_weights_are_the_file_decimals():
    """float32(0.245) is 0.2450000048: 100 x that prints 25 %, the file's 0.245 prints 24 % (as
    route-analyze.py, which reads the text)."""
    from refsim.analysis.frame import decimal_weights
    from refsim.analysis.views import matrix_cell_text
    w = decimal_weights(np.array([0.245, np.nan, 0.221297], np.float32))
    assert w[0] == 0.245 and np.isnan(w[1]) and w[2] == 0.221297
    assert "%.0f%%" % (100 * float(np.float32(0.245))) == "25%"
    cell = dict(experts=[3, 4], weight=[float(w[0]), None])
    assert matrix_cell_text(cell, "weights", "decode") == "3:24% 4:--"
