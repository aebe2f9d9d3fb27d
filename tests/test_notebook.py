"""The notebook face (``import refsim``): docs/notebook.md runs as written and prints what it
shows; the tables have the columns it documents; a sweep, a replay and a union of the demo trace
give the numbers the commands print."""

import csv
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import refsim
from refsim.cli import main
from refsim.fmt import csv_num, num

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "traces" / "demo.route.csv"
PAGE = ROOT / "docs" / "notebook.md"

_spec = importlib.util.spec_from_file_location("make_notebook_doc", ROOT / "tools" / "make_notebook_doc.py")
make_notebook_doc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_notebook_doc)

FACE = ["open_model", "read_trace", "write_trace", "replay", "sweep", "union", "RunConfig",
        "RunReport", "simulate", "SpecConfig", "StreamKnobs", "DeviceOptions", "fit_device",
        "predict_time", "read_metrics", "DecodeEvent", "DecodeKind", "RefsimError", "ConfigError",
        "UsageError", "TraceFormatError", "ModelFormatError", "MetricsFormatError", "MIB",
        "__version__"]


def test_import_refsim_loads_nothing_and_lists_its_face():
    probe = ("import sys, refsim\nnames = dir(refsim)\n"
             "print(' '.join(sorted(m for m in sys.modules if m.startswith(('refsim', 'numpy')))))\n"
             "print(' '.join(names))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""}).stdout.splitlines()
    assert out[0].split() == ["refsim", "refsim.lazy"]          # no numpy, no submodule
    assert set(FACE) <= set(out[1].split())
    assert set(FACE) <= set(refsim.__all__)


def test_the_face_names_are_the_implementations():
    from refsim.events import DecodeKind
    from refsim.session import simulate
    from refsim.trace import read_trace
    assert refsim.read_trace is read_trace and refsim.simulate is simulate
    assert refsim.DecodeKind is DecodeKind and refsim.MIB == 2**20


@pytest.fixture(scope="module")
def page_outputs(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("REFSIM_CACHE", str(tmp_path_factory.mktemp("refsim-cache")))
    try:
        text = PAGE.read_text()
        yield text, make_notebook_doc.run_page(text)
    finally:
        mp.undo()


def _squeeze(text: str) -> list[str]:
    """Lines with runs of spaces made one and trailing spaces dropped (a column's width may
    differ between pandas versions; its values may not)."""
    return [re.sub(r" +", " ", line).rstrip() for line in text.splitlines()]


def test_the_page_runs_and_prints_what_it_shows(page_outputs):
    text, outs = page_outputs
    blocks = make_notebook_doc.code_blocks(text)
    assert len(blocks) == len(outs) >= 10
    for i, (m, out) in enumerate(zip(blocks, outs)):
        shown = m.group("out") or ""
        assert _squeeze(out) == _squeeze(shown), f"block {i + 1}: run tools/make_notebook_doc.py"


def _documented() -> dict:
    """docs/notebook.md's Columns table: table -> [(column, dtype)] in order."""
    text = PAGE.read_text()
    section = text[text.index("## Columns"):]
    out: dict = {}
    for line in section.splitlines():
        m = re.match(r"\| (\w+) \| (`\w+`|\*\([^)]*\)\*) \|\s*([\w /]*?)\s*\|", line)
        if m and m.group(1) != "table":
            out.setdefault(m.group(1), []).append((m.group(2).strip("`"), m.group(3).strip()))
    return out


def _names(doc, table):
    return [c for c, _ in doc[table]]


def _check(cols: dict, documented: list):
    assert list(cols) == [c for c, _ in documented]
    for name, dtype in documented:
        if dtype == "text":
            assert cols[name].dtype == object and all(isinstance(v, str) for v in cols[name])
        else:
            assert cols[name].dtype == np.dtype(dtype), (name, cols[name].dtype, dtype)


def test_every_table_has_the_documented_columns(tmp_path, monkeypatch):
    doc = _documented()
    assert set(doc) == {"trace", "replay", "summary", "sweep", "knobs", "union", "run", "metrics"}
    t = refsim.read_trace(DEMO)
    _check(t.to_columns(), [c for c in doc["trace"] if not c[0].startswith("pred_")])
    rep = refsim.replay(t, 256)
    _check(rep.to_columns(), doc["replay"])
    _check(rep.summary.to_columns(), doc["summary"])
    sweep_cols = [("budget_mib", "float64"), ("policy", "text"), *doc["summary"],
                  ("over_budget", "bool")]
    assert _names(doc, "sweep") == ["budget_mib", "policy", "*(the summary's columns)*",
                                    "over_budget", "*(the knobs' columns)*"]
    _check(refsim.sweep(t, [128, 256], ["lru", "arc"]).to_columns(), sweep_cols)
    knobs = refsim.StreamKnobs(drop_frac=0.5)
    _check(refsim.sweep(t, [128], knobs=knobs).to_columns(), sweep_cols + doc["knobs"])
    _check(refsim.union(t, [1, 2]).to_columns(), doc["union"])
    _check(refsim.union(t, [1, 2], 256, knobs=knobs).to_columns(), doc["union"])
    monkeypatch.setenv("REFSIM_CACHE", str(tmp_path))
    _check(refsim.simulate(refsim.RunConfig(n_predict=3)).to_columns(), doc["run"])
    assert _names(doc, "metrics") == ["*(the file's columns)*"]


def test_a_notebook_sweep_is_refsim_sweep(tmp_path, capsys):
    """The DataFrame's hit % and MiB are the numbers ``refsim sweep --csv`` writes."""
    out = tmp_path / "s.csv"
    policies = "lru,s3fifo,arc,belady,layer"
    assert main(["sweep", str(DEMO), "--cache-mb", "32:512:32", "--policy", policies,
                 "--csv", str(out)]) == 0
    capsys.readouterr()
    with open(out) as fh:
        cli = list(csv.DictReader(fh))
    df = refsim.sweep(refsim.read_trace(DEMO), "32:512:32", policies).to_pandas()
    assert len(df) == len(cli) == 16 * 5
    for row, want in zip(df.itertuples(), cli):
        assert num(row.budget_mib, 0) == want["budget_mib"] and row.policy == want["policy"]
        assert csv_num(row.hit_pct_cum, 3) == want["hit_pct_cum"]
        assert csv_num(row.hit_pct_decode, 3) == want["hit_pct_decode"]
        assert csv_num(row.read_mib, 1) == want["read_mib"]
        assert int(row.over_budget) == int(want["over_budget"])
    # the pooled view a notebook makes: the mean over budgets per policy, from the frame alone
    mean = df.groupby("policy").hit_pct_decode.mean()
    assert mean["belady"] == max(mean) and mean.index.tolist() == sorted(policies.split(","))


def test_a_notebook_replay_and_union_are_the_commands(capsys):
    assert main(["replay", str(DEMO), "--cache-mb", "256", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    rep = refsim.replay(DEMO, 256)
    assert {k: cli[k] for k in rep.summary.as_dict()} == rep.summary.as_dict()
    assert (rep.residency_rows, rep.residency_agree) == (cli["residency_rows"], cli["residency_agree"])
    assert main(["union", str(DEMO), "--window", "1..4", "--cache-mb", "256"]) == 0
    lines = capsys.readouterr().out.splitlines()[3:]
    u = refsim.union(DEMO, range(1, 5), 256).to_pandas()
    assert len(lines) == len(u) == 4
    for line, row in zip(lines, u.itertuples()):
        f = line.split()
        assert int(f[0]) == row.window and int(f[1]) == row.n_windows
        assert f[2] == f"{row.union_mean:.2f}" and f[4] == f"{row.union_p90:.1f}"
        assert f[5] == num(row.union_mib_mean, 1) and f[6] == str(int(row.decodes))
        assert f[7] == num(row.read_mib, 1) and f[8] == num(row.mib_per_token, 2)
        assert f[10] == num(row.hit_pct_decode, 3)


def test_a_notebook_device_fit_is_timing_fit(tmp_path, capsys):
    from refsim.testing.shared import require_shared
    desk = require_shared("real-runs", "desktop-2026-07-24-qwen36")
    runs = [str(desk / f"{n}.csv") for n in ("pc-A-io4", "pc-B-io8", "pc-D-t8")]
    assert main(["timing", "fit", *runs, "--out", str(tmp_path / "d.json"), "--name", "desk"]) == 0
    capsys.readouterr()
    dev = refsim.fit_device(runs, name="desk")
    assert dev.to_json() == (tmp_path / "d.json").read_text()
    assert main(["timing", "predict", str(tmp_path / "d.json"), *runs, "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)["runs"]
    assert [p.as_dict() for p in refsim.predict_time(tmp_path / "d.json", runs)] == cli


def test_the_face_takes_a_trace_built_in_memory_and_refuses_an_empty_file(tmp_path):
    from refsim.errors import TraceFormatError
    from refsim.trace import RouteTrace
    t = refsim.read_trace(DEMO)
    built = RouteTrace(t.header, t.events, t.residency, t.charged_bytes, t.line_numbers)
    assert refsim.replay(built, 256).summary == refsim.replay(t, 256).summary
    assert refsim.sweep(built, [128], ["lru"]).rows == refsim.sweep(t, [128], ["lru"]).rows
    empty = tmp_path / "e.route.csv"
    empty.write_text("".join(DEMO.read_text().splitlines(keepends=True)[:11]))   # preamble only
    with pytest.raises(TraceFormatError, match=r"e\.route\.csv:12: the trace has a preamble but "
                                               r"no rows \(nothing to sweep\)"):
        refsim.sweep(empty, [128])


def test_device_runs_are_all_paths_or_all_rundata():
    from refsim.errors import ConfigError
    from refsim.timing import RunData
    fake = RunData("r", "m", 1, False, True, *(np.zeros(3),) * 5, trim=0)
    with pytest.raises(ConfigError, match="^runs: RunData and paths mixed"):
        refsim.fit_device([fake, "x.csv"])
