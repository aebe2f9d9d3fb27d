"""The shipped demo trace is what tools/make_demo_trace.py makes, and replays to its record."""

from pathlib import Path

import pytest

from refsim import MIB
from refsim.studies.replay import replay_trace
from refsim.trace import read_trace

REPO = Path(__file__).resolve().parents[2]


def test_demo_trace_regenerates_byte_for_byte(tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("mk", REPO / "tools" / "make_demo_trace.py")
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    out = tmp_path / "demo.route.csv"
    mk.main(str(out))
    assert out.read_bytes() == (REPO / "traces" / "demo.route.csv").read_bytes()


def test_demo_trace_replays_to_its_recorded_residency():
    tr = read_trace(REPO / "traces" / "demo.route.csv")
    assert dict(tr.header.extra)["cache_mb"] == "256"
    rep = replay_trace(tr, 256 * MIB)
    assert rep.residency_agree == rep.residency_rows == 2612
    # hand check of the unit: 2190 lookups, hits/lookups as printed by the README
    assert rep.summary.lookups == 2190
    assert rep.summary.hits == 1564
    assert round(rep.summary.hit_pct_cum, 1) == 71.4
    # one token cycle: k * sum(expert_bytes) = 4 * (3*3059712 + 5*2654208) bytes
    assert rep.summary.t_bytes == 4 * (3 * 3059712 + 5 * 2654208)


@pytest.mark.parametrize("budget_mib", [128, 400])
def test_other_budgets_disagree_somewhere(budget_mib):
    # the record is specific to the budget it was made at
    rep = replay_trace(read_trace(REPO / "traces" / "demo.route.csv"), budget_mib * MIB)
    assert rep.residency_agree < rep.residency_rows
