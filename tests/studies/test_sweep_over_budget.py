"""Points where a policy holds more than its budget are marked in the sweep's table, CSV and
plot (issue 12 D6)."""

import csv

import numpy as np
import pytest

from refsim import MIB
from refsim.cli import main


@pytest.fixture
def trace(tmp_path):
    """4 layers of 16 experts, top-2, entries 1, 1, 1.5, 1 MiB: T = 2 x 4.5 = 9 MiB."""
    from refsim.cache import ExpertCache
    from refsim.testing.routes import synthetic_run_events
    from refsim.trace import TraceHeader, write_trace
    eb = [MIB, MIB, 3 * MIB // 2, MIB]
    h = TraceHeader("demo.gguf", "qwen3moe", 4, 16, 2, np.array(eb), np.zeros(4))
    evs = synthetic_run_events(5, 30, 4, 16, 2, seed=3)
    cache = ExpertCache(eb, 16, 1024 * MIB)
    recs = [cache.apply(e) for e in evs]
    path = tmp_path / "demo.route.csv"
    write_trace(path, h, evs, [r.residency for r in recs], [r.charged_bytes for r in recs])
    return path


def test_a_layer_partition_below_one_entry_holds_t_and_is_marked(trace, tmp_path, capsys):
    out = tmp_path / "c.csv"
    assert main(["sweep", str(trace), "--cache-mb", "2,64", "--policy", "layer,lru,layerlfu",
                 "--csv", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    # 2 MiB / 4 layers = 0.5 MiB a layer, less than one entry: every layer keeps the 2 entries of
    # its last decode, T = 9 MiB = 4.5 x the budget
    rows = {tuple(ln.split()[:2]): ln for ln in lines if ln.split()[:1] in (["2"], ["64"])}
    assert rows[("2", "layer")].endswith("  holds 4.50x")
    assert rows[("2", "layerlfu")].endswith("  holds 4.50x")
    assert "holds" not in rows[("2", "lru")] and "holds" not in rows[("64", "layer")]
    assert lines[-1].startswith("holds Nx: the policy holds N times the budget")
    got = [(r["budget_mib"], r["policy"], r["over_budget"]) for r in csv.DictReader(open(out))]
    assert got == [("2", "layer", "1"), ("2", "lru", "0"), ("2", "layerlfu", "1"),
                   ("64", "layer", "0"), ("64", "lru", "0"), ("64", "layerlfu", "0")]


def test_the_plot_rings_the_points_over_budget(trace, tmp_path):
    mpl = pytest.importorskip("matplotlib")
    from refsim.cache.batches import BatchTrace
    from refsim.studies.plot import plot_sweep
    from refsim.studies.sweep import sweep_budgets
    from refsim.trace import read_trace
    t = read_trace(trace)
    bt = BatchTrace.from_events(t.events, t.header.expert_bytes, t.header.n_expert)
    with mpl.rc_context({"svg.fonttype": "none"}):       # keep text as text in the SVG
        over = sweep_budgets(bt, [2, 64], ["layer"], t.header.token_cycle_bytes)
        plot_sweep(over, str(tmp_path / "over.svg"))
        fine = sweep_budgets(bt, [64], ["layer"], t.header.token_cycle_bytes)
        plot_sweep(fine, str(tmp_path / "fine.svg"))
    assert [r.over_budget for r in over.rows] == [True, False]
    assert "holds &gt; budget" in (tmp_path / "over.svg").read_text()
    assert "holds &gt; budget" not in (tmp_path / "fine.svg").read_text()


def test_on_the_qwen_trace_layer_at_250_mib_holds_one_token_cycle(qwen_trace):
    """The issue's figure: ``layer`` at 250 MiB holds T = 784.7 MiB, 3.14x the budget."""
    from refsim.cache.batches import BatchTrace
    from refsim.studies.sweep import format_table, sweep_budgets
    h = qwen_trace.header
    bt = BatchTrace.from_events(qwen_trace.events, h.expert_bytes, h.n_expert)
    res = sweep_budgets(bt, [250, 4000], ["layer"], h.token_cycle_bytes)
    low, high = res.rows
    assert low.over_budget and low.held_bytes == h.token_cycle_bytes   # 48 layers x 6 entries
    assert not high.over_budget
    assert format_table(res)[1].endswith(f"holds {h.token_cycle_bytes / (250 * MIB):.2f}x")
    assert f"{h.token_cycle_bytes / (250 * MIB):.2f}" == "3.14"
