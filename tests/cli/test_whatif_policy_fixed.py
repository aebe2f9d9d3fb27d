"""``refsim whatif TRACE --spec-policy P`` (P not ``fixed``): each speculation row comes with a
``fixed`` row through the policy's own replay (the same seeded stream, ``rejected='same'``), so
the policy's delta is read against fixed under one replay (the defect: the only fixed rows were
the union replay's, d + 1 fresh positions per decode at the assumed acceptance; docs/timing.md
"The draft policy")."""

import json
from pathlib import Path

import pytest

from refsim import MIB
from refsim.cli import main
from refsim.timing import DeviceModel, Param

DEMO = str(Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv")
VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
          "h": 0.1, "tail": 1.0}
EXACT = ["--noise-pct", "0", "--position-cost-interval", "0.38,0.38"]
SPEC = ["--spec", "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.4,mtp:d=2:acceptance=0.6",
        "--head-ms", "10"]
ALL = "union:mib=1000000"
"""A union policy whose budget every draft fits: it verifies every candidate, as fixed does."""


@pytest.fixture(scope="module")
def device_file(tmp_path_factory):
    dev = DeviceModel(params={k: Param(v) for k, v in VALUES.items()}, compute={"m": Param(100.0)},
                      serial_runs=2, overlap_runs=2)
    path = tmp_path_factory.mktemp("dev") / "dev.json"
    path.write_text(dev.to_json())
    return str(path)


def whatif(capsys, *args):
    code = main(["whatif", *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def whatif_json(capsys, *args):
    return json.loads(whatif(capsys, *args, "--json"))


SAME = ("positions_per_decode", "tokens_per_decode", "mib_per_token", "hit_pct", "acceptance",
        "coverage", "eff_tok_s", "eff_tok_s_lo", "eff_tok_s_hi", "delta_pct", "delta_lo_pct",
        "delta_hi_pct", "breakeven_acceptance", "verdict")


@pytest.mark.parametrize("mib", ["64", "256"])
def test_a_policy_verifying_every_draft_equals_the_fixed_replay(device_file, capsys, mib):
    """``union:mib=<huge>`` verifies every candidate: its row equals its fixed-replay row exactly
    (every figure), while the union replay's fixed row of no --spec-policy does not (the defect)."""
    doc = whatif_json(capsys, DEMO, "--device", device_file, "--cache-mb", mib, *SPEC,
                      "--spec-policy", ALL, *EXACT)
    reps = doc["fixed_replay_rows"]
    assert [r["policy_row"] for r in reps] == [1, 2]
    for rep in reps:
        pol = doc["rows"][rep["policy_row"]]
        assert rep["policy"] == "fixed" and pol["policy"] == "union:mib=1e+06"
        assert rep["config"] == pol["config"]
        assert {k: rep[k] for k in SAME} == {k: pol[k] for k in SAME}
        assert rep["measured"] == pol["measured"]
        assert rep["acceptance_source"].startswith("measured: fixed replay of the assumed")
    union = whatif_json(capsys, DEMO, "--device", device_file, "--cache-mb", mib, *SPEC, *EXACT)
    assert "fixed_replay_rows" not in union
    assert union["rows"][0] == doc["rows"][0]            # off: the union replay's width 1
    assert union["rows"][2]["positions_per_decode"] == 3.0
    assert doc["rows"][2]["positions_per_decode"] != 3.0


def test_the_fixed_replay_is_the_study_replay(device_file, capsys):
    """The fixed-replay row's counters are policy_replay's with ``fixed`` on the policy's stream
    (the assumed acceptance and coverage, seed 0, rejected drafts routed as the trace's)."""
    from refsim.studies.spec_policy import policy_replay
    from refsim.trace import read_trace
    doc = whatif_json(capsys, DEMO, "--device", device_file, "--cache-mb", "64", *SPEC,
                      "--spec-policy", "backoff", *EXACT)
    trace = read_trace(DEMO)
    for rep, (d, cov, acc) in zip(doc["fixed_replay_rows"], ((3, 0.4, 0.5), (2, 1.0, 0.6))):
        row = policy_replay(trace, 64 * MIB, "fixed", d, coverage=cov, accept=acc, seed=0,
                            rejected="same")
        assert rep["measured"]["decodes"] == row.decodes
        assert rep["measured"]["drafted"] == row.drafted
        assert rep["measured"]["accepted"] == row.accepted
        assert rep["positions_per_decode"] == pytest.approx(row.positions_per_decode, rel=1e-12)
        assert rep["mib_per_token"] == pytest.approx(row.mib_per_token, rel=1e-12)
        assert rep["acceptance"] == row.accepted / row.drafted


def test_the_table_shows_the_fixed_replay_before_each_policy_row(device_file, capsys):
    out = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", "64", *SPEC,
                 "--spec-policy", "backoff", *EXACT)
    rows = [line.split()[1:3] for line in out.splitlines()[-5:]]
    assert rows == [["off", "1.00"], ["ngram:d=3:m=3", "[fixed"], ["ngram:d=3:m=3", "[backoff]"],
                    ["mtp:d=2", "[fixed"], ["mtp:d=2", "[backoff]"]]
    assert "[fixed replay]: the same replay with fixed" in out
    plain = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", "64", *SPEC, *EXACT)
    assert "fixed replay" not in plain


def test_docs_fixed_replay_row_on_the_shared_trace(tmp_path, capsys):
    """The ``fixed replay`` row of docs/timing.md's policy table: the shared Qwen3-30B trace at
    3000 MiB on the phone 07-12 fit, 2 lanes, serial (skipped without the shared material); the
    same with every policy of the table (the stream does not depend on the policy)."""
    from refsim.testing.shared import require_shared
    from refsim.timing.fit import fit_device
    from refsim.timing.plain import load_plain_runs
    d = require_shared("real-runs", "phone-2026-07-12-cache-lanes")
    trace = require_shared("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")
    specs = [f"{d}/qwen_c{c}_l{l}.csv@model=qwen,io_threads={l}" for c in (2000, 4000) for l in (2, 4)]
    runs, _ = load_plain_runs(specs, 50)
    path = tmp_path / "phone.json"
    path.write_text(fit_device(runs).to_json())
    want = (((1.1, -17.0, 16.3), 1.41, 0.422), ((-2.8, -33.5, 20.4), 3.92, 0.401))
    for pol in ("backoff", "cost"):
        doc = whatif_json(capsys, str(trace), "--device", str(path), "--io-threads", "2",
                          "--cache-mb", "3000", "--spec", "off,ngram:d=3:m=3:acceptance=0.5:"
                          "coverage=0.142,mtp:d=3:acceptance=0.52", "--head-ms", "20",
                          "--spec-policy", pol)
        for rep, (delta, w, acc) in zip(doc["fixed_replay_rows"], want):
            got = tuple(round(rep[k], 1) for k in ("delta_pct", "delta_lo_pct", "delta_hi_pct"))
            assert got == pytest.approx(delta, abs=1e-9)
            assert round(rep["positions_per_decode"], 2) == w
            assert round(rep["acceptance"], 3) == acc
