"""refsim sweep: budget lists, the engine-format CSV, the table, the plot and bad input."""

import builtins
import csv

import pytest

from refsim.cli import main
from refsim.errors import ConfigError
from refsim.studies.sweep import CSV_COLUMNS, parse_budgets_mib


def test_budget_lists_and_ranges():
    assert parse_budgets_mib("250,500,1000") == [250, 500, 1000]
    assert parse_budgets_mib("250:1000:250") == [250, 500, 750, 1000]
    assert parse_budgets_mib("250:8000:250")[-1] == 8000 and len(parse_budgets_mib(
        "250:8000:250")) == 32
    assert parse_budgets_mib("100:350:100,4000") == [100, 200, 300, 4000]
    assert parse_budgets_mib("1500.5") == [1500.5]


@pytest.mark.parametrize("text", ["", "abc", "0", "-5", "1:2", "5:1:1", "1:5:0", "nan", "inf"])
def test_bad_budget_lists_name_the_flag(text):
    with pytest.raises(ConfigError, match="--cache-mb"):
        parse_budgets_mib(text)


def write_demo_trace(tmp_path):
    from refsim.testing.routes import synthetic_run_events
    from refsim.trace import TraceHeader, write_trace
    import numpy as np

    h = TraceHeader("demo.gguf", "qwen3moe", 4, 16, 2, np.array([1 << 20, 1 << 20, 3 << 19,
                                                                   1 << 20]), np.zeros(4))
    evs = synthetic_run_events(5, 30, 4, 16, 2, seed=3)
    path = tmp_path / "demo.route.csv"
    write_trace(path, h, evs, [np.zeros(e.routes.shape, np.int8) for e in evs],
                [np.zeros(e.routes.shape, np.int64) for e in evs])
    return path


def test_cli_writes_the_engine_csv_and_a_table(tmp_path, capsys):
    trace = write_demo_trace(tmp_path)
    out = tmp_path / "curve.csv"
    assert main(["sweep", str(trace), "--cache-mb", "2:10:4", "--policy", "lru,belady",
                 "--csv", str(out)]) == 0
    rows = list(csv.reader(open(out)))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [r[:2] for r in rows[1:]] == [["2", "lru"], ["2", "belady"], ["6", "lru"],
                                         ["6", "belady"], ["10", "lru"], ["10", "belady"]]
    for r in rows[1:]:
        assert len(r[2].split(".")[1]) == 3 and len(r[4].split(".")[1]) == 1
    text = capsys.readouterr().out
    assert "T = 9.0 MiB" in text  # 2 x (1 + 1 + 1.5 + 1) and "belady" in text


def test_cli_rejects_an_unknown_policy_in_one_line(tmp_path, capsys):
    trace = write_demo_trace(tmp_path)
    assert main(["sweep", str(trace), "--policy", "lru,mru"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown policy 'mru'" in err


def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    trace = write_demo_trace(tmp_path)
    png = tmp_path / "sweep.png"
    assert main(["sweep", str(trace), "--cache-mb", "2,4,8", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".plot-")]


def test_plot_without_matplotlib_says_how_to_install(tmp_path, capsys, monkeypatch):
    real_import = builtins.__import__

    def no_mpl(name, *a, **kw):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    trace = write_demo_trace(tmp_path)
    assert main(["sweep", str(trace), "--cache-mb", "4", "--plot",
                 str(tmp_path / "x.png")]) == 1
    assert "pip install 'refsim[plot]'" in capsys.readouterr().err
