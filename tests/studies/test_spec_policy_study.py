"""The draft-policy trace study (refsim/studies/spec_policy.py, tools/spec_policy_study.py)."""

import json
import re
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


# ── every policy is lossless in replay; --spec-policy on refsim union ──────────────────────────
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from refsim.cli import main  # noqa: E402
from refsim.events import DecodeKind  # noqa: E402
from refsim.studies.spec_policy import policy_rows  # noqa: E402
from refsim.studies.union import decode_positions  # noqa: E402
from refsim.testing.traces import event_streams  # noqa: E402

POLICY_TEXTS = ["fixed", "backoff", "backoff:patience=1,cooldown=2", "cost", "cost:mibs=3000", "union",
                "union:mib=0", "union:mib=64"]


@settings(max_examples=60, deadline=None)
@given(event_streams(speculative=False), st.sampled_from(POLICY_TEXTS), st.integers(1, 8),
       st.floats(0.0, 1.0), st.floats(0.0, 0.95), st.integers(0, 2 ** 16), st.integers(1, 80),
       st.sampled_from(["oracle", "previous"]))
def test_every_policy_confirms_greedys_tokens_in_replay(stream, policy, draft, coverage, accept, seed,
                                                        budget_kb, predictor):
    """A policy only picks widths: the replayed decodes confirm the trace's decode positions (greedy's
    tokens) exactly once each, in order, whatever the stream, budget or predictor."""
    pos, _, _ = decode_positions(stream.events)
    evs = []
    row = policy_replay(stream, budget_kb << 10, policy, draft, coverage, accept, seed,
                        predictor=predictor, on_event=evs.append)
    confirmed = [p for e in evs for p in e.positions[:1 + (e.accepted or 0)].tolist()]
    assert confirmed == pos.tolist()
    assert all(e.n_pos <= draft + 1 and (e.kind is DecodeKind.VERIFY) == (e.n_pos > 1) for e in evs)
    assert (row.tokens, row.decodes, row.positions) == (pos.size, len(evs), sum(e.n_pos for e in evs))
    assert not row.lossy and row.weight_discarded_pct == 0


@pytest.mark.skipif(not TRACE.exists(), reason=skip_reason(TRACE))
def test_union_spec_policy_rows_are_the_studys(capsys):
    """refsim union --spec-policy prints policy_rows (the study's code): at the phone copy cell the
    docs' table (docs/spec-policies.md: off 144.7, fixed 183.9, backoff 165.0 MiB/token)."""
    args = ["union", str(TRACE), "--cache-mb", "3000", "--window", "4", "--spec-policy", "backoff",
            "--coverage", "0.142", "--drop-cold-experts", "0.75"]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, ln in enumerate(out) if ln.startswith("draft policies"))
    assert "--draft 3: a candidate on 0.142 of the steps, acceptance 0.5, seed 0" in out[at]
    table = {ln[:15].strip(): ln[15:].split() for ln in out[at + 2:]}
    assert list(table) == ["off (no drafts)", "fixed", "backoff"]
    assert [v[3] for v in table.values()] == ["144.71", "183.94", "165.05"]
    assert [v[4] for v in table.values()] == ["0.79", "1.00", "0.90"]
    assert main(args + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    from refsim.streaming.knobs import StreamKnobs
    from refsim.trace import read_trace
    rows = policy_rows(read_trace(str(TRACE)), 3000 << 20, ["backoff"], 3, 0.142, 0.5, 0,
                       StreamKnobs(drop_frac=0.75))
    assert doc["spec_policy"]["stream"] == {"draft": 3, "accept": 0.5, "coverage": 0.142, "seed": 0}
    got = doc["spec_policy"]["traces"][0]
    assert [r["policy"] for r in got] == ["off (no drafts)", "fixed", "backoff"]
    assert [r["mib_per_token"] for r in got] == [r.mib_per_token for r in rows]
    assert [r["tokens_per_decode"] for r in got] == [r.tokens_per_decode for r in rows]


@pytest.mark.skipif(not TRACE.exists(), reason=skip_reason(TRACE))
@pytest.mark.parametrize("extra, msg", [
    (["--accept", "0.3"], "--accept without --spec-policy"),
    (["--spec-policy", "fixed"], "--spec-policy without --cache-mb"),
    (["--spec-policy", "fixed", "--cache-mb", "100", "--accept", "1"], r"argument --accept: expected a number in \[0, 1\)"),
    (["--spec-policy", "nope", "--cache-mb", "100"], "argument --spec-policy: expected one of"),
])
def test_union_spec_policy_usage_errors(extra, msg, capsys):
    try:
        rc = main(["union", str(TRACE), "--window", "1"] + extra)
    except SystemExit as e:          # argparse's own refusals exit; the checks after parsing return
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err
    assert re.search(msg, err) and len(err.strip().splitlines()[-1]) > 0, err
