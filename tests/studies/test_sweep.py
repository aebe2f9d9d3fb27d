"""refsim sweep: budget lists, the engine-format CSV, the table, the plot and bad input."""

import builtins
import csv

import pytest

from refsim.cli import main
from refsim.errors import ConfigError
from refsim.studies.sweep import SWEEP_CSV_COLUMNS, known_policies, parse_budgets_mib


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
                [_charged_all_miss(e, h.expert_bytes) for e in evs])
    return path


def _charged_all_miss(ev, expert_bytes):
    """The ``expert_bytes`` column of an all-miss residency record: the layer's entry size on
    the first row of each expert in its layer batch (positions then slots), 0 elsewhere."""
    import numpy as np

    out = np.zeros(ev.routes.shape, np.int64)
    for il in range(ev.routes.shape[1]):
        seen = set()
        for p in range(ev.routes.shape[0]):
            for j, e in enumerate(ev.routes[p, il]):
                if e >= 0 and int(e) not in seen:
                    seen.add(int(e))
                    out[p, il, j] = expert_bytes[il]
    return out


def test_cli_writes_the_engine_csv_and_a_table(tmp_path, capsys):
    trace = write_demo_trace(tmp_path)
    out = tmp_path / "curve.csv"
    assert main(["sweep", str(trace), "--cache-mb", "2:10:4", "--policy", "lru,belady",
                 "--csv", str(out)]) == 0
    rows = list(csv.reader(open(out)))
    assert tuple(rows[0]) == SWEEP_CSV_COLUMNS
    assert [r[:2] for r in rows[1:]] == [["2", "lru"], ["2", "belady"], ["6", "lru"],
                                         ["6", "belady"], ["10", "lru"], ["10", "belady"]]
    for r in rows[1:]:
        assert len(r[2].split(".")[1]) == 3 and len(r[4].split(".")[1]) == 1
    text = capsys.readouterr().out
    assert "T = 9.0 MiB" in text  # 2 x (1 + 1 + 1.5 + 1) and "belady" in text


def test_cli_rejects_an_unknown_policy_as_a_usage_error(tmp_path, capsys):
    trace = write_demo_trace(tmp_path)
    assert main(["sweep", str(trace), "--policy", "lru,mru"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (f"refsim sweep: error: argument --policy: expected comma-separated names from "
                       f"{','.join(known_policies())}, got 'mru'")


def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    trace = write_demo_trace(tmp_path)
    png = tmp_path / "sweep.png"
    assert main(["sweep", str(trace), "--cache-mb", "2,4,8", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".plot-")]


def test_budgets_print_as_given_in_the_table_and_the_csv(tmp_path, capsys):
    # the engine's %.0f printed 100.4 and 100.6 as "100" and "101" and 0.001 as "0"
    from refsim.studies.sweep import format_budget
    assert [format_budget(v) for v in (250.0, 100.4, 100.6, 0.001, 1500.5, 0.1 + 0.2)] == \
        ["250", "100.4", "100.6", "0.001", "1500.5", "0.3"]
    trace = write_demo_trace(tmp_path)
    out = tmp_path / "curve.csv"
    assert main(["sweep", str(trace), "--cache-mb", "2.4,2.6,0.001,4", "--policy", "lru",
                 "--csv", str(out)]) == 0
    rows = list(csv.reader(open(out)))
    assert [r[0] for r in rows[1:]] == ["2.4", "2.6", "0.001", "4"]
    table = [ln.split()[0] for ln in capsys.readouterr().out.splitlines()[-4:]]
    assert table == ["2.4", "2.6", "0.001", "4"]


def test_repeated_budgets_and_policies_are_dropped_first_kept(tmp_path, capsys):
    trace = write_demo_trace(tmp_path)
    out = tmp_path / "curve.csv"
    assert main(["sweep", str(trace), "--cache-mb", "6,2,6.0,2", "--policy", "belady,lru,belady",
                 "--csv", str(out)]) == 0
    rows = list(csv.reader(open(out)))
    assert [r[:2] for r in rows[1:]] == [["6", "belady"], ["6", "lru"], ["2", "belady"],
                                         ["2", "lru"]]


@pytest.mark.parametrize("flag", ["--csv", "--plot"])
def test_a_bad_output_path_fails_before_the_sweep_and_writes_nothing(tmp_path, capsys, flag):
    trace = write_demo_trace(tmp_path)
    ok = tmp_path / "ok.csv"
    other = "--plot" if flag == "--csv" else "--csv"
    bad = str(tmp_path / "missing" / "x.out")
    argv = ["sweep", str(trace), "--cache-mb", "4", flag, bad]
    if other == "--csv":
        argv += [other, str(ok)]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert f"{flag} {bad}: cannot write here" in err
    assert not ok.exists()


def test_missing_matplotlib_fails_before_the_sweep(tmp_path, capsys, monkeypatch):
    import refsim.cli.sweep as cli_sweep
    real_import = builtins.__import__

    def no_mpl(name, *a, **kw):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real_import(name, *a, **kw)

    def must_not_run(*a, **kw):
        raise AssertionError("the sweep ran before the matplotlib check")

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    monkeypatch.setattr(cli_sweep, "sweep_grid", must_not_run)     # the command's one entry to the sweep
    trace = write_demo_trace(tmp_path)
    assert main(["sweep", str(trace), "--cache-mb", "4", "--plot", str(tmp_path / "x.png"),
                 "--csv", str(tmp_path / "ok.csv")]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "pip install 'refsim[plot]'" in err
    assert not (tmp_path / "ok.csv").exists()


def test_cli_policy_parameters_label_the_rows_and_replay_takes_one_policy(tmp_path, capsys):
    import json

    from refsim.cache.batches import BatchTrace
    from refsim.cache.policies import get_policy
    from refsim.cache.replay import replay_policy
    from refsim.trace import read_trace

    trace = write_demo_trace(tmp_path)
    out = tmp_path / "curve.csv"
    assert main(["sweep", str(trace), "--cache-mb", "4", "--policy",
                 "s3fifo:small=0.5,ghost=0.5,arc,lirs", "--csv", str(out)]) == 0
    rows = list(csv.reader(open(out)))
    assert [r[1] for r in rows[1:]] == ["s3fifo:small=0.5,ghost=0.5", "arc", "lirs"]
    t = read_trace(str(trace))
    bt = BatchTrace.from_events(t.events, t.header.expert_bytes, t.header.n_expert)
    r = replay_policy(bt, get_policy("s3fifo", small=0.5, ghost=0.5), 4 * 2**20)
    capsys.readouterr()
    assert main(["replay", str(trace), "--cache-mb", "4", "--policy",
                 "s3fifo:small=0.5,ghost=0.5", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["policy"], got["hits"], got["lookups"]) == \
        ("s3fifo:small=0.5,ghost=0.5", int(r.hits.sum()), int(r.lookups.sum()))
    assert main(["replay", str(trace), "--cache-mb", "4", "--policy", "arc",
                 "--csv", str(tmp_path / "e.csv")]) == 2      # the command line alone: usage
    assert "--policy lru" in capsys.readouterr().err
