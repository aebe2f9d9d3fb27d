"""The draft-policy trace study (refsim/studies/spec_policy.py, tools/spec_policy_study.py)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from refsim.errors import ConfigError
from refsim.studies.spec_policy import (acceptance_stream, cap_union, consensus,
                                        per_position_accept, policy_replay)
from refsim.testing.shared import shared_path, skip_reason

REPO = Path(__file__).resolve().parents[2]
TRACE = shared_path("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")


def test_per_position_accept_hand_worked():
    # draft 1: q = accept; draft 2: (q + q^2) / 2 = 0.5 -> q = (sqrt(5) - 1) / 2
    assert per_position_accept(0.3, 1) == pytest.approx(0.3)
    assert per_position_accept(0.5, 2) == pytest.approx((5 ** 0.5 - 1) / 2)
    with pytest.raises(ConfigError, match="accept"):
        per_position_accept(1.0, 3)


def test_acceptance_stream_rates():
    has, run = acceptance_stream(200_000, 0.25, 0.5, 3, seed=1)
    assert has.mean() == pytest.approx(0.25, abs=0.005)
    assert run.mean() / 3 == pytest.approx(0.5, abs=0.005)
    assert run.min() == 0 and run.max() == 3


def test_cap_union_hand_worked():
    # one layer, 3 positions, k = 2: union {0,1,2,3}; summed weights 0: .9, 1: .5, 2: .4, 3: .2
    routes = np.array([[[0, 1]], [[0, 2]], [[3, 2]]], np.int16)
    weights = np.array([[[.6, .5]], [[.3, .2]], [[.2, .2]]], np.float32)
    dropped, lost = cap_union(routes, weights, 2)           # keep 0 and 1
    assert dropped[:, 0].tolist() == [[False, False], [False, True], [True, True]]
    assert lost == pytest.approx(0.6)
    dropped, lost = cap_union(routes, weights, 4)
    assert not dropped.any() and lost == 0


def test_consensus_hand_worked():
    # position 1's slot 1 has share .1/.9 < .2: moved to the best union expert it lacks (0 has
    # it; 1 next, summed .5)
    routes = np.array([[[0, 1]], [[0, 5]]], np.int16)
    weights = np.array([[[.7, .5]], [[.8, .1]]], np.float32)
    out, moved = consensus(routes, weights, 0.2)
    assert out[:, 0].tolist() == [[0, 1], [0, 1]]
    assert moved == pytest.approx(0.1)
    out, moved = consensus(routes, weights, 0.05)
    assert out.tolist() == routes.tolist() and moved == 0


@pytest.mark.skipif(not TRACE.exists(), reason=skip_reason(TRACE))
def test_fixed_with_full_acceptance_is_the_union_replay():
    """With every step drafting and accepting all, fixed is refsim union's grouped replay of
    width draft + 1 (the same events)."""
    from refsim.studies.union import union_study
    from refsim.trace import read_trace
    t = read_trace(str(TRACE))
    budget = 3000 << 20
    row = policy_replay(t, budget, "fixed", 3, coverage=1.0, accept=0.0, seed=0)
    assert row.decodes == row.tokens        # accept 0: every step confirms one token
    u = union_study(t, [4], budget)[0]
    full = policy_replay(t, budget, "fixed", 3, coverage=1.0, accept=0.999999, seed=0)
    assert full.decodes == u.decodes
    assert full.mib_per_token == pytest.approx(u.mib_per_token, rel=0, abs=0)
    off = policy_replay(t, budget, "fixed", 3, coverage=0.0, accept=0.5)
    assert off.positions == off.decodes == off.tokens


@pytest.mark.skipif(not TRACE.exists(), reason=skip_reason(TRACE))
def test_tool_small_budget():
    out = subprocess.run([sys.executable, str(REPO / "tools" / "spec_policy_study.py"), "--small"],
                         capture_output=True, text=True, check=True).stdout
    lines = [ln for ln in out.splitlines() if ln.startswith("| phone-like")]
    assert [ln.split(" | ")[2] for ln in lines] == [
        "off (no drafts), drop 0.75", "fixed, drop 0.75", "backoff, drop 0.75",
        "fixed + cap:12 (lossy)"]
    assert lines[1].endswith("+0.0 % |")
