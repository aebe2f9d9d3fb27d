"""``--json`` on sweep, union, drop-replay and memory, like every other command (issue 26 C9),
and union's warning below one token cycle (one helper with replay and sweep). Each JSON carries
the numbers the text prints, at full precision: checked against the library's own values."""

import json

import pytest

from refsim import MIB
from refsim.cli import main

DEMO = "traces/demo.route.csv"


def run_json(capsys, argv):
    assert main(argv) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_sweep_json_is_the_library_rows(capsys):
    from refsim.trace import read_trace
    doc, _ = run_json(capsys, ["sweep", DEMO, "--cache-mb", "100,200", "--policy", "lru", "--json"])
    t = doc["traces"][0]
    h = read_trace(DEMO).header
    assert (t["path"], t["n_expert_used"], t["t_bytes"]) == (DEMO, h.n_expert_used,
                                                             h.token_cycle_bytes)
    assert [(r["budget_mib"], r["policy"]) for r in t["rows"]] == [(100.0, "lru"), (200.0, "lru")]
    assert t["rows"][0]["budget_bytes"] == 100 * MIB
    assert t["rows"][0]["knobs"] is None and t["rows"][0]["predicted_tok_s"] is None
    # the table's hit % is the JSON's, rounded
    assert main(["sweep", DEMO, "--cache-mb", "100,200", "--policy", "lru"]) == 0
    text = capsys.readouterr().out
    assert f"{t['rows'][1]['hit_pct_decode']:.3f}" in text


def test_union_json_and_its_warning(capsys):
    doc, err = run_json(capsys, ["union", DEMO, "--window", "1,2", "--cache-mb", "1", "--json"])
    assert err.startswith("refsim union: warning: budget 1 MiB is below one token cycle T = 85.6 MiB")
    rows = doc["traces"][0]["rows"]
    assert [r["window"] for r in rows] == [1, 2] and doc["budget_bytes"] == MIB
    assert rows[0]["union_mean"] == 4.0                # w = 1: top-k, nothing dropped
    assert rows[1]["decodes"] is not None and rows[1]["knob_read_mib"] is None


def test_union_without_budget_does_not_warn(capsys):
    doc, err = run_json(capsys, ["union", DEMO, "--window", "1", "--json"])
    assert err == "" and doc["budget_bytes"] is None and doc["traces"][0]["rows"][0]["read_mib"] is None


def test_drop_replay_json_is_the_reports_numbers(capsys):
    from refsim.studies.drop_replay import static_threshold, trace_cells
    from refsim.trace import read_trace
    doc, _ = run_json(capsys, ["drop-replay", DEMO, "--frac", "0.5", "--cache-mb", "200", "--json"])
    d = doc["traces"][0]
    c = trace_cells(read_trace(DEMO), 1)
    want = static_threshold(c, 0.5, d["k"])
    got = d["decode"]["thresholds"][0]
    assert (got["frac"], got["thr"], got["io_saved_pct"]) == (0.5, want.thr, want.io_saved_pct)
    assert d["decode"]["cells"] == c.n_cells and len(d["decode"]["dynamic"]) >= 2
    assert main(["drop-replay", DEMO, "--frac", "0.5"]) == 0
    assert f"{want.io_saved_pct:8.1f}%" in capsys.readouterr().out


def test_memory_json_has_the_exact_budget(tmp_path, capsys):
    out = tmp_path / "q36.gguf"
    assert main(["synth", "--like", "qwen3.6-35b-a3b", "--header-only", "--out", str(out)]) == 0
    capsys.readouterr()
    doc, _ = run_json(capsys, ["memory", str(out), "--mtp", "--draft", "3", "--ctx", "4096",
                               "--ram-mb", "8000", "--json"])
    assert doc["spec"] == "mtp" and doc["n_ctx"] == 4096
    assert doc["ledger"]["kv_bytes"] == 4096 * 20480            # docs/hybrid.md: 4096 x 20480 B
    assert doc["budget_bytes"] // MIB == 3999                   # the preamble's cache_mb=3999
    assert f"{doc['budget_bytes'] / MIB:.1f}" == "3999.9"
    assert round(doc["budget_without_speculation_bytes"] / MIB, 1) == 4281.3


@pytest.mark.parametrize("cmd", ["sweep", "union", "drop-replay", "memory"])
def test_every_command_has_json(cmd):
    from refsim.cli import make_parser
    parser = make_parser(cmd.replace("-", "_"))
    sub = next(a for a in parser._actions if a.dest == "command").choices[cmd]
    assert "--json" in sub._option_string_actions
