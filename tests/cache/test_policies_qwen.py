"""The reproduction: refsim sweep gives every point of the engine authors' qwen-curve.csv
(route-replay.py output on qwen.route.csv) for all six policies, to the printed digit."""

import csv

import pytest

from refsim.cache.batches import BatchTrace
from refsim.studies.sweep import sweep_budgets


@pytest.fixture(scope="module")
def curve(qwen_trace_path):
    path = qwen_trace_path.parent / "qwen-curve.csv"
    if not path.exists():
        pytest.skip(f"engine curve not present at {path}")
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_point_of_the_engine_curve_reproduces(qwen_trace, curve):
    h = qwen_trace.header
    bt = BatchTrace.from_events(qwen_trace.events, h.expert_bytes, h.n_expert)
    assert bt.n_batch == 6192           # the engine's "batches" line: 48 prefill + 128 x 48
    budgets = sorted({float(r["budget_mib"]) for r in curve})
    policies = list(dict.fromkeys(r["policy"] for r in curve))
    assert set(policies) == {"belady", "lru", "lfu", "random", "layer", "layerlfu"}
    result = sweep_budgets(bt, budgets, policies, h.token_cycle_bytes)
    assert len(curve) == 66
    for ref in curve:
        row = result.row(float(ref["budget_mib"]), ref["policy"])
        assert row.csv_fields() == [ref[c] for c in ("budget_mib", "policy", "hit_pct_cum",
                                                     "hit_pct_decode", "read_mib")], ref
    # the anchors quoted in bmoe-engine.md §7 and the brief
    s = result.row(4000.0, "lru").summary
    assert (round(s.hit_pct_cum, 1), round(s.hit_pct_decode, 1), round(s.read_mib, 1)) == \
        (74.9, 80.3, 27213.7)
