"""refsim analyze against the engine's route-analyze.py (run as a subprocess oracle): every number
the script prints, view by view, on the shared qwen trace and on a speculative trace (position
framing), and what the decode framing changes (docs/analysis.md, "Framing")."""

import json

import pytest

from tests.analysis.conftest import numbers, refsim_analyze, sections

TABLE_VIEWS = ["hot", "reuse", "overlap", "workset", "cache", "entropy", "bytes"]


def assert_same_numbers(script_out: str, ours: str, view: str) -> int:
    """Every numeric line of the script's section has its numbers, in order, at the start of the
    matching numeric line of ours (ours may add columns on the right). Returns numbers compared."""
    theirs = [numbers(x) for x in next(iter(sections(script_out).values()))]
    mine = [numbers(x) for x in next(iter(sections(ours).values()))]
    theirs = [t for t in theirs if t]
    mine = [m for m in mine if m]
    assert len(theirs) == len(mine), (view, len(theirs), len(mine))
    n = 0
    for i, (t, m) in enumerate(zip(theirs, mine)):
        assert m[:len(t)] == t, (view, i, t, m)
        n += len(t)
    return n


@pytest.mark.parametrize("framing", ["decode", "position"])
@pytest.mark.parametrize("view", TABLE_VIEWS)
def test_qwen_views_match_route_analyze(qwen_trace_path, route_analyze, view, framing):
    n = assert_same_numbers(route_analyze(qwen_trace_path, "--view", view),
                            refsim_analyze(qwen_trace_path, "--view", view, "--framing", framing),
                            view)
    assert n > 48 * 3                                  # a real table, one row per layer at least


@pytest.mark.parametrize("view,args", [(v, a) for v in TABLE_VIEWS for a in (
    ["--phase", "prefill"], ["--phase", "all"], ["--turn", "0"])] + [("hot", ["--top", "12"])])
def test_qwen_phase_turn_top_match_in_position_framing(qwen_trace_path, route_analyze, view, args):
    assert_same_numbers(route_analyze(qwen_trace_path, "--view", view, *args),
                        refsim_analyze(qwen_trace_path, "--view", view, "--framing", "position",
                                       *args), view)


def matrix_rows(text: str, skip_decode_column: bool):
    out = []
    for line in next(iter(sections(text).values()))[2:]:
        cells = [c.strip() for c in line.split(" | ")]
        if skip_decode_column:
            cells = cells[:1] + cells[2:]
        out.append(cells)
    return out


@pytest.mark.parametrize("framing", ["decode", "position"])
@pytest.mark.parametrize("extra", [[], ["--cells", "weights"], ["--cells", "mb"],
                                   ["--cells", "hit"], ["--steps", "28-60", "--layers", "5-9"]])
def test_qwen_matrix_matches_route_analyze(qwen_trace_path, route_analyze, framing, extra):
    """The script cuts cells at 22 characters: each of its cells is a prefix of ours."""
    theirs = matrix_rows(route_analyze(qwen_trace_path, "--view", "matrix", *extra), False)
    mine = matrix_rows(refsim_analyze(qwen_trace_path, "--view", "matrix", "--framing", framing,
                                      *extra), framing == "decode")
    assert len(theirs) == len(mine) == (20 if not extra or extra[0] != "--steps" else 33)
    for t, m in zip(theirs, mine):
        assert len(t) == len(m)
        for a, b in zip(t, m):
            assert b.startswith(a), (a, b)


def test_qwen_matrix_window_marks_repeats_from_before_the_window(qwen_trace_path, route_analyze):
    """--steps 40-45: the script forgets step 39 and marks nothing in the first row; refsim marks
    what layer 0 also routed at step 39 (docs/analysis.md). Rows after the first agree."""
    theirs = matrix_rows(route_analyze(qwen_trace_path, "--view", "matrix", "--steps", "40-45",
                                       "--layers", "0-47"), False)
    mine = matrix_rows(refsim_analyze(qwen_trace_path, "--view", "matrix", "--steps", "40-45"),
                       True)
    assert all("*" not in c for c in theirs[0][1:])
    assert any("*" in c for c in mine[0][1:])
    assert [c.replace("*", "") for c in mine[0]] == [c.replace("*", "") for c in theirs[0]] \
        or all(m.replace("*", "").startswith(t) for t, m in zip(theirs[0], mine[0]))
    for t, m in zip(theirs[1:], mine[1:]):
        assert all(b.startswith(a) for a, b in zip(t, m))


@pytest.mark.parametrize("view", TABLE_VIEWS)
def test_spec_trace_position_framing_is_the_script(spec_trace_path, route_analyze, view):
    """On a trace with verify batches, a re-decoded position and a dropped slot, --framing
    position reproduces every number of route-analyze.py."""
    for phase in ("decode", "all"):
        assert_same_numbers(route_analyze(spec_trace_path, "--view", view, "--phase", phase),
                            refsim_analyze(spec_trace_path, "--view", view, "--framing",
                                           "position", "--phase", phase), view)


def test_spec_trace_decode_framing_differs_as_documented(spec_trace_path, route_analyze):
    """Hand-worked (docs/analysis.md, worked example), layer 0, decode phase."""
    def js(view, framing):
        out = json.loads(refsim_analyze(spec_trace_path, "--view", view, "--framing", framing,
                                        "--json"))["result"]
        return out
    # reuse: script/position = distances [0,1,1,1,1,1,3]; decode = [1,1,1,2] (dropped 9 out)
    assert "    0        7        1        3        3         2" in \
        route_analyze(spec_trace_path, "--view", "reuse")
    r = js("reuse", "decode")["layers"][0]
    assert (r["n_reuse"], r["p50"], r["p90"], r["max"], r["never_2nd"]) == (4, 1, 2, 2, 2)
    # cache: 14 routings 50 % miss (script) vs 10 lookups 40 % miss, 1 dropped
    c = js("cache", "position")["layers"][0]
    assert (c["n"], c["miss"], c["hit"]) == (14, 7, 7)
    c = js("cache", "decode")["layers"][0]
    assert (c["n"], c["miss"], c["hit"], c["dropped"]) == (10, 4, 6, 1)
    # overlap lag 1: (1/4 + 1/3 + 1/1) / 3 × 100
    o = js("overlap", "decode")["layers"][0]["lag_pct"]["1"]
    assert o == pytest.approx(100 * (1 / 4 + 1 / 3 + 1) / 3)
    # bytes: 4 MiB (layer 0) + 6 × 2 MiB (layer 1) over 4 decodes, 6 confirmed tokens
    b = js("bytes", "decode")
    assert (b["total_mib"], b["units"], b["tokens"]) == (16.0, 4, 6)
    assert b["per_unit_bytes"] == [3 * 2 ** 20, 9 * 2 ** 20, 4 * 2 ** 20, 0]
    assert "total 16.0 MiB over 6 steps (2.67 MiB/step average)" in \
        route_analyze(spec_trace_path, "--view", "bytes")
    # entropy: every position 0.75/0.25 -> 0.811 bits; the script merges position 5 (4 weights)
    e = js("entropy", "decode")["layers"][0]
    assert e["entropy_bits"] == pytest.approx(0.8112781244591328)
    assert e["top1_pct"] == pytest.approx(75.0)
    e = js("entropy", "position")["layers"][0]
    assert e["entropy_bits"] == pytest.approx((5 * 0.8112781244591328 + 1.8112781244591328) / 6)


def test_every_view_has_json(qwen_trace_path):
    for view in ["matrix"] + TABLE_VIEWS:
        rep = json.loads(refsim_analyze(qwen_trace_path, "--view", view, "--json"))
        assert rep["view"] == view and rep["units"] == 128 and rep["rows"] == 128 * 48 * 6
    ws = json.loads(refsim_analyze(qwen_trace_path, "--view", "workset", "--json"))["result"]
    assert ws["marks"][-1] == 128 and ws["union_mib"] == pytest.approx(8386.2, abs=0.05)


def test_cli_prints_the_library_report(qwen_trace_path, capsys):
    from refsim.cli import main
    assert main(["analyze", str(qwen_trace_path), "--view", "bytes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(
        refsim_analyze(qwen_trace_path, "--view", "bytes", "--json"))


def test_qwen_replay_at_the_recorded_budget_agrees_on_every_lookup(qwen_trace_path):
    """docs/analysis.md, cache view: refsim's LRU at 4000 MiB reproduces every recorded outcome."""
    a = json.loads(refsim_analyze(qwen_trace_path, "--view", "cache", "--cache-mb", "4000",
                                  "--json"))["result"]["all"]
    assert a["replay_agree"] == a["n"] == 36864 and a["replay_hit"] == a["hit"]


def test_two_turns_at_the_same_positions(tmp_path, route_analyze):
    """A second turn that restarts at position 0 (a new context): the script (and the position
    framing) merge both turns' step 2 into one unit; the decode framing keeps four decodes."""
    import numpy as np
    from refsim import MIB
    from refsim.cache import ExpertCache
    from refsim.events import DecodeEvent, DecodeKind
    from refsim.trace import TraceHeader, write_trace
    h = TraceHeader(model="m", arch="qwen3moe", n_layer=2, n_expert=4, n_expert_used=1,
                    expert_bytes=np.array([MIB, MIB]), dense_bytes=np.array([0, 0]))
    cache = ExpertCache(h.expert_bytes, 4, 64 * MIB)
    evs, res, chg = [], [], []
    for turn, ids in ((0, [1, 2]), (1, [3, 1])):
        pre = np.array([[[0], [-1]], [[0], [0]]], np.int16)
        evs.append(DecodeEvent(DecodeKind.PREFILL, np.arange(2), pre, turn=turn))
        for j, e in enumerate(ids):
            evs.append(DecodeEvent(DecodeKind.PLAIN, np.array([2 + j]),
                                   np.array([[[e], [e]]], np.int16), turn=turn))
    for ev in evs:
        rec = cache.apply(ev)
        res.append(rec.residency)
        chg.append(rec.charged_bytes)
    path = tmp_path / "turns.route.csv"
    write_trace(path, h, evs, res, chg)
    script = route_analyze(path, "--view", "reuse")
    assert_same_numbers(script, refsim_analyze(path, "--view", "reuse", "--framing", "position"),
                        "reuse")
    # position framing: units steps 2 {1,3}, 3 {2,1} -> expert 1 at 0 and 1: one reuse, d = 1
    assert "    0        1        1        1        1         2" in script
    r = json.loads(refsim_analyze(path, "--view", "reuse", "--json"))["result"]["layers"][0]
    # decode framing: decodes {1},{2},{3},{1} -> expert 1 reused after 3 decodes
    assert (r["n_reuse"], r["max"], r["never_2nd"]) == (1, 3, 2)
    mx = refsim_analyze(path, "--view", "matrix", "--layers", "0")
    assert "t1.3" in mx and "t0.1" in mx
