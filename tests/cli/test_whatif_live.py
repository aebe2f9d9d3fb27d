"""``refsim whatif MODEL`` (issue 29 item 1, source (b)) and ``--spec-policy`` (issue 30 item 1):
every configuration run live through refsim run's path, priced from the run's own counters
(hand-worked against decode_ms and checked against ``refsim run --json``); the policy rows;
one-line refusals."""

import json
from pathlib import Path

import pytest

from refsim import MIB
from refsim.cli import main
from refsim.timing import DeviceModel, Param

DEMO = str(Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv")
VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
          "h": 0.1, "tail": 1.0}
PROMPT = "5,6,7,8,9,5,6,7,8,9,5,6,7,8,9"
"""A prompt the built-in model's n-gram (min match 1) drafts on: 8 drafts, 3 accepted in 24."""
EXACT = ["--noise-pct", "0", "--position-cost-interval", "0.38,0.38"]


def device() -> DeviceModel:
    return DeviceModel(params={k: Param(v) for k, v in VALUES.items()}, compute={"m": Param(100.0)},
                       serial_runs=2, overlap_runs=2)


@pytest.fixture(scope="module")
def device_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("dev") / "dev.json"
    path.write_text(device().to_json())
    return str(path)


@pytest.fixture(scope="module")
def mtp_model(tmp_path_factory):
    from refsim.model import write_synthetic
    return write_synthetic(tmp_path_factory.mktemp("m") / "q35.gguf", "qwen35moe", "F32",
                           nextn=True, seed=3)


@pytest.fixture(scope="module")
def plain_model(tmp_path_factory):
    from refsim.model import write_synthetic
    return write_synthetic(tmp_path_factory.mktemp("m") / "q3.gguf", "qwen3moe", "F32", seed=3)


def whatif_json(capsys, *args):
    assert main(["whatif", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def run_json(capsys, *args):
    assert main(["run", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def simulate_steps(spec, mib, model=None, n=24, prompt=PROMPT):
    from refsim.session import RunConfig, simulate
    rep = simulate(RunConfig(model=model, prompt_tokens=prompt, n_predict=n, spec=spec,
                             cache_mb=mib), warn=lambda line: None)
    return rep.result.steps


def test_builtin_live_rows_are_the_runs_own_counters(device_file, capsys):
    """The built-in model (no download), n-gram d3 m1 at 4 MiB: acceptance, coverage and
    decodes are those `refsim run --ngram --json` reports for the same prompt; the effective
    tok/s is hand-worked from the run's plain and drafted decodes with decode_ms:
    1000 (D + A) / (P t(X_1, 1) + V t(X_v, 1 + drafted / V))."""
    from refsim.spec import SpecConfig as RunSpec
    from refsim.timing.breakeven import decode_ms
    doc = whatif_json(capsys, "builtin", "--device", device_file, "--cache-mb", "4", "--spec",
                      "off,ngram:d=3:m=1", "--prompt-tokens", PROMPT, "-n", "24", *EXACT)
    assert doc["source"] == "live run" and doc["builtin"] is True and doc["n_predict"] == 24
    off, ng = doc["rows"]
    ref = run_json(capsys, "--ngram", "--ngram-min-match", "1", "--prompt-tokens", PROMPT,
                   "-n", "24", "--cache-mb", "4")
    assert (ref["decodes"], ref["drafted"], ref["accepted"]) == (21, 8, 3)
    assert ng["acceptance"] == ref["accepted"] / ref["drafted"] == 3 / 8
    assert ng["acceptance_source"] == "measured: live run" and ng["policy"] == "fixed"
    m = ng["measured"]
    assert (m["decodes"], m["drafted"], m["accepted"]) == (21, 8, 3)
    assert m["read_mib"] == ref["cache"]["decode_read_mib"]
    assert ng["hit_pct"] == pytest.approx(ref["hit_pct_decode"], rel=1e-12)
    plain = run_json(capsys, "--prompt-tokens", PROMPT, "-n", "24", "--cache-mb", "4")
    assert off["measured"]["read_mib"] == plain["cache"]["decode_read_mib"]
    assert off["acceptance_source"] == "" and off["verdict"] == "baseline"

    steps = simulate_steps(RunSpec.from_flags(ngram=True, ngram_min_match=1), 4.0)
    p = [s for s in steps if s.n_draft == 0]
    v = [s for s in steps if s.n_draft > 0]
    assert ng["coverage"] == len(v) / 21
    x1 = sum(s.read_bytes for s in p) / len(p) / MIB
    xv = sum(s.read_bytes for s in v) / len(v) / MIB
    t1 = decode_ms(device(), x1, 1, "m", 4, False, True, 0.38)
    tv = decode_ms(device(), xv, 1 + 8 / len(v), "m", 4, False, True, 0.38)
    assert ng["eff_tok_s"] == pytest.approx(1000 * (21 + 3) / (len(p) * t1 + len(v) * tv), rel=1e-12)
    assert ng["mib_per_token"] == pytest.approx(m["read_mib"] / (21 + 3), rel=1e-12)
    assert ng["positions_per_decode"] == pytest.approx(1 + 8 / 21, rel=1e-12)
    assert ng["tokens_per_decode"] == pytest.approx(1 + 3 / 21, rel=1e-12)
    off_steps = simulate_steps(RunSpec(), 4.0)
    t_off = decode_ms(device(), sum(s.read_bytes for s in off_steps) / len(off_steps) / MIB, 1,
                      "m", 4, False, True, 0.38)
    assert off["eff_tok_s"] == pytest.approx(1000 / t_off, rel=1e-12)
    assert ng["delta_pct"] == pytest.approx(100 * (ng["eff_tok_s"] / off["eff_tok_s"] - 1), rel=1e-9)
    assert ng["delta_lo_pct"] == pytest.approx(ng["delta_pct"]) == pytest.approx(ng["delta_hi_pct"])


def test_text_output_names_the_live_source(device_file, capsys):
    assert main(["whatif", "builtin", "--device", device_file, "--cache-mb", "4,8", "--spec",
                 "off,ngram:d=2:m=1", "--prompt-tokens", PROMPT, "-n", "12"]) == 0
    out = capsys.readouterr().out
    assert "(built-in)" in out and "measured: live run" in out and "predicted, not measured" in out
    assert "marked * are assumed" not in out
    assert sum(line.startswith(("      4", "      8")) for line in out.splitlines()) == 4


def test_mtp_live_run_measures_the_head_and_its_coverage(device_file, mtp_model, capsys):
    """MTP on a qwen35moe with a nextn block: the head's compute is derived from the model's
    tensor table (MODEL is the table; no --gguf), the coverage is the run's (its last decode may
    have no room to draft), the reads include the head's own routing (draft_read_bytes)."""
    from refsim.spec import SpecConfig as RunSpec
    doc = whatif_json(capsys, mtp_model, "--device", device_file, "--cache-mb", "0.25",
                      "--spec", "off,mtp:d=2", "-n", "16", *EXACT)
    off, mtp = doc["rows"]
    steps = simulate_steps(RunSpec.from_flags(mtp=True, draft=2), 0.25, model=mtp_model, n=16,
                           prompt=None)
    v = [s for s in steps if s.n_draft > 0]
    assert mtp["coverage"] == len(v) / len(steps)
    assert mtp["acceptance"] == sum(s.n_acc for s in steps) / sum(s.n_draft for s in steps)
    assert mtp["measured"]["read_mib"] == sum(s.read_bytes for s in steps) / MIB
    assert sum(s.draft_read_bytes for s in steps) > 0
    head = [t for t in mtp["terms"] if t["name"] == "head"][0]
    assert head["kind"] == "derived" and head["value"] > 0
    assert mtp["acceptance_source"] == "measured: live run"


def test_spec_policy_fixed_is_the_default_row(device_file, capsys):
    """`--spec-policy fixed` gives the rows of no flag, live and on a trace."""
    live = ["builtin", "--device", device_file, "--cache-mb", "4", "--spec", "off,ngram:d=3:m=1",
            "--prompt-tokens", PROMPT, "-n", "24"]
    trace = [DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
             "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.4"]
    for args in (live, trace):
        a = whatif_json(capsys, *args)
        b = whatif_json(capsys, *args, "--spec-policy", "fixed")
        assert a == b and a["spec_policy"] == "fixed"
        assert [r["policy"] for r in a["rows"]] == ["none", "fixed"]   # D13: off has policy none


def test_spec_policy_on_a_trace_is_the_study_replay(device_file, tmp_path, capsys):
    """A trace, an acceptance stream from a token file and `backoff`: the row is the study
    code's replay (refsim.studies.spec_policy.policy_replay at the token file's acceptance and
    coverage, seed 0, rejected drafts routed as the trace's positions) priced by price: its
    positions and tokens per decode, MiB/token and hit % are the replay's."""
    from refsim.spec.whatif import ngram_whatif, read_token_file
    from refsim.studies.spec_policy import policy_replay
    from refsim.timing.breakeven import decode_ms
    from refsim.trace import read_trace
    toks = tmp_path / "t.txt"
    toks.write_text(" ".join(str(x) for x in ([1, 2, 3, 4, 5] * 12 + [9, 8, 7] * 6)))
    doc = whatif_json(capsys, DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
                      "off,ngram:d=2:m=2", "--tokens", str(toks), "--prompt-len", "10",
                      "--spec-policy", "backoff", *EXACT)
    assert doc["spec_policy"] == "backoff"
    off, ng = doc["rows"]
    cell = ngram_whatif(read_token_file(str(toks)), 10, [2], [2])[0]
    trace = read_trace(DEMO)
    row = policy_replay(trace, 64 * MIB, "backoff", 2, coverage=cell.drafted_steps / cell.decodes,
                        accept=cell.accepted / cell.drafted, seed=0, rejected="same")
    assert ng["policy"] == "backoff" and ng["config"] == "ngram:d=2:m=2"
    assert ng["acceptance_source"].startswith(f"measured: {toks} (ngram-whatif); backoff")
    assert ng["positions_per_decode"] == pytest.approx(row.positions_per_decode, rel=1e-12)
    assert ng["tokens_per_decode"] == pytest.approx(row.tokens_per_decode, rel=1e-12)
    assert ng["mib_per_token"] == pytest.approx(row.mib_per_token, rel=1e-12)
    assert ng["hit_pct"] == pytest.approx(row.hit_pct_decode, rel=1e-12)
    assert ng["acceptance"] == row.accepted / row.drafted
    assert ng["coverage"] == row.verify_decodes / row.decodes
    # hand-worked: the replay's plain and verify decodes each at its own mean read
    p, v = row.decodes - row.verify_decodes, row.verify_decodes
    t1 = decode_ms(device(), row.plain_read_bytes / p / MIB, 1, "m", 4, False, True, 0.38)
    tv = decode_ms(device(), row.verify_read_bytes / v / MIB, 1 + row.drafted / v, "m", 4, False,
                   True, 0.38)
    assert ng["eff_tok_s"] == pytest.approx(1000 * row.tokens / (p * t1 + v * tv), rel=1e-12)
    # off is still the union replay's plain decode
    fixed = whatif_json(capsys, DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
                        "off,ngram:d=2:m=2", "--tokens", str(toks), "--prompt-len", "10", *EXACT)
    assert fixed["rows"][0] == off
    assert fixed["rows"][1]["eff_tok_s"] != ng["eff_tok_s"]


def test_spec_policy_live_is_the_runs_own(device_file, capsys):
    """Live with `backoff`: the run is refsim run's with --spec-policy backoff (same counters)."""
    doc = whatif_json(capsys, "builtin", "--device", device_file, "--cache-mb", "4", "--spec",
                      "off,ngram:d=3:m=1", "--prompt-tokens", PROMPT, "-n", "24",
                      "--spec-policy", "backoff:patience=1")
    ng = doc["rows"][1]
    ref = run_json(capsys, "--ngram", "--ngram-min-match", "1", "--prompt-tokens", PROMPT,
                   "-n", "24", "--cache-mb", "4", "--spec-policy", "backoff:patience=1")
    assert ng["policy"] == "backoff:patience=1"
    assert (ng["measured"]["decodes"], ng["measured"]["drafted"], ng["measured"]["accepted"]) == (
        ref["decodes"], ref["drafted"], ref["accepted"])
    assert ng["measured"]["read_mib"] == ref["cache"]["decode_read_mib"]


@pytest.mark.parametrize("args, code, msg", [
    (["{plain}", "--spec", "off,mtp:d=2"], 1,
     "--spec mtp:d=2: MODEL {plain} has no MTP (nextn) block"),
    (["builtin", "--spec", "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.2"], 2,
     "the live run measures them"),
    (["builtin", "--spec", "off,ngram:d=3:m=3", "--tokens", "t.txt", "--prompt-len", "3"], 2,
     "--tokens, --prompt-len: for a route trace"),
    (["builtin", "--spec", "off,mtp:d=2", "--gguf", "{plain}"], 2, "--gguf: for a route trace"),
    ([DEMO, "--spec", "off", "-n", "8"], 2, "-n: for a live run of a MODEL"),
    ([DEMO, "--spec", "off", "--prompt", "hi"], 2, "--prompt: for a live run"),
    (["nothere.gguf", "--spec", "off"], 1, "MODEL nothere.gguf: no such file"),
    (["{bad}", "--spec", "off"], 1, "{bad}"),
    (["builtin", "--spec", "off,ngram:d=3:m=3", "--spec-policy", "greedy"], 2,
     "argument --spec-policy: expected one of"),
    ([DEMO, "--spec", "off,ngram:d=3:m=3:acceptance=1:coverage=0.2", "--spec-policy", "backoff"], 1,
     "needs an acceptance below 1"),
    # the command line lacks the item's numbers: a usage error (issue 29 CLI defects; was 1)
    ([DEMO, "--spec", "off,ngram:d=3:m=3", "--spec-policy", "backoff"], 2, "no coverage"),
])
def test_bad_input_is_one_line(device_file, plain_model, tmp_path, capsys, args, code, msg):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 9)
    fill = {"plain": plain_model, "bad": str(bad)}
    args = [a.format(**fill) for a in args]
    assert main(["whatif", *args, "--device", device_file, "--cache-mb", "4"]) == code
    err = capsys.readouterr().err.splitlines()
    assert msg.format(**fill) in err[-1]
    if code == 1:
        assert len(err) == 1 and "Traceback" not in err[0]


def test_live_rows_match_refsim_run_for_any_prompt(device_file, capsys):
    """Hypothesis over prompts, draft widths, min matches and budgets: the live row's measured
    counters, acceptance, hit % and MiB/token are `refsim run --ngram --json`'s for the same
    flags (decodes + accepted tokens: the prefill's first token is not a decode's)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=6, deadline=None)
    @given(st.lists(st.integers(1, 40), min_size=3, max_size=16), st.integers(1, 3),
           st.integers(1, 2), st.sampled_from(["1", "2.5", "6"]))
    def check(prompt, d, m, mib):
        ids = ",".join(map(str, prompt))
        doc = whatif_json(capsys, "builtin", "--device", device_file, "--cache-mb", mib, "--spec",
                          f"off,ngram:d={d}:m={m}", "--prompt-tokens", ids, "-n", "12")
        ng = doc["rows"][1]
        ref = run_json(capsys, "--ngram", "--draft", str(d), "--ngram-min-match", str(m),
                       "--prompt-tokens", ids, "-n", "12", "--cache-mb", mib)
        got = ng["measured"]
        assert (got["decodes"], got["drafted"], got["accepted"]) == (
            ref["decodes"], ref["drafted"], ref["accepted"])
        assert got["read_mib"] == ref["cache"]["decode_read_mib"]
        assert ng["acceptance"] == (ref["accepted"] / ref["drafted"] if ref["drafted"] else None)
        assert ng["hit_pct"] == pytest.approx(ref["hit_pct_decode"], rel=1e-12)
        assert ng["mib_per_token"] == pytest.approx(
            ref["cache"]["decode_read_mib"] / (ref["decodes"] + ref["accepted"]), rel=1e-12)
        assert ng["eff_tok_s_lo"] <= ng["eff_tok_s"] <= ng["eff_tok_s_hi"]

    check()


def test_docs_policy_table_on_the_shared_trace(tmp_path, capsys):
    """The table of docs/timing.md, "The draft policy": the shared Qwen3-30B trace at 3000 MiB on
    the phone 07-12 fit, 2 lanes, serial (skipped without the shared material)."""
    from refsim.testing.shared import require_shared
    from refsim.timing.fit import fit_device
    from refsim.timing.plain import load_plain_runs
    d = require_shared("real-runs", "phone-2026-07-12-cache-lanes")
    trace = require_shared("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")
    specs = [f"{d}/qwen_c{c}_l{l}.csv@model=qwen,io_threads={l}" for c in (2000, 4000) for l in (2, 4)]
    runs, _ = load_plain_runs(specs, 50)
    path = tmp_path / "phone.json"
    path.write_text(fit_device(runs).to_json())
    want = {"fixed": ((-7.1, -23.5, 6.8), 1.43, (-22.8, -42.9, -8.3), 4.00),
            "backoff": ((0.5, -15.2, 15.8), 1.18, (-2.1, -24.1, 14.1), 1.99),
            "backoff:patience=1,cooldown=16": ((0.3, -14.5, 15.9), 1.09, (-0.8, -20.3, 14.4), 1.67),
            "cost": ((0.0, -14.1, 16.4), 1.00, (-5.8, -19.1, 9.6), 1.00)}
    for pol, (ng_d, ng_w, mtp_d, mtp_w) in want.items():
        doc = whatif_json(capsys, str(trace), "--device", str(path), "--io-threads", "2",
                          "--cache-mb", "3000", "--spec", "off,ngram:d=3:m=3:acceptance=0.5:"
                          "coverage=0.142,mtp:d=3:acceptance=0.52", "--head-ms", "20",
                          "--spec-policy", pol)
        off, ng, mtp = doc["rows"]
        assert round(off["mib_per_token"], 2) == 232.28 and round(off["eff_tok_s"], 3) == 3.092
        for row, delta, w in ((ng, ng_d, ng_w), (mtp, mtp_d, mtp_w)):
            assert row["policy"] == pol
            got = tuple(round(row[k], 1) for k in ("delta_pct", "delta_lo_pct", "delta_hi_pct"))
            assert got == pytest.approx(delta, abs=1e-9)
            assert round(row["positions_per_decode"], 2) == w


def test_live_auto_budget_is_the_models_ledger(device_file, mtp_model, capsys):
    """--cache-mb auto --ram-mb R with MODEL: each configuration runs at its own auto budget from
    MODEL's memory ledger (no --gguf), off at its own (the MTP run's includes the head's
    experts)."""
    from refsim.cache.ledger import memory_ledger
    from refsim.model import open_model
    m = open_model(mtp_model)
    doc = whatif_json(capsys, mtp_model, "--device", device_file, "--cache-mb", "auto", "--ram-mb",
                      "1600", "--spec", "off,ngram:d=3:m=1,mtp:d=2", "-n", "12")
    ctx = min(2048, m.spec.n_ctx_train)
    want = [memory_ledger(m, ctx, d, t, ram_mb=1600).budget_bytes / MIB
            for d, t in ((0, False), (3, False), (2, True))]
    assert [r["budget_mib"] for r in doc["rows"]] == want
    assert want[2] > want[0]
    assert doc["rows"][2]["measured"]["drafted"] > 0
