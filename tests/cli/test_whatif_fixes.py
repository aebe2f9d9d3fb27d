"""``refsim whatif``: the defects a new user reported against main (issue 29's command), each with
a test that failed before its fix: a ratio over zero events is n/a (D1), the replay's acceptance
labelled measured (D2), ``--spec``'s bounds and exit codes (D3, D9), a model or baseline that is
not the trace's or the device's (D4, D5), budget printing (D11), ``--explain``'s sources (D12),
the ``off`` row's policy (D13), stray warnings (D7) and whatif's own messages (D15)."""

import json
from pathlib import Path

import pytest

from refsim.cli import main
from refsim.timing import DeviceModel, Param

DEMO = str(Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv")
VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
          "h": 0.1, "tail": 1.0}
EXACT = ["--noise-pct", "0", "--position-cost-interval", "0.38,0.38"]


def device() -> DeviceModel:
    return DeviceModel(params={k: Param(v) for k, v in VALUES.items()}, compute={"m": Param(100.0)},
                       serial_runs=2, overlap_runs=2)


@pytest.fixture(scope="module")
def device_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("dev") / "dev.json"
    path.write_text(device().to_json())
    return str(path)


def whatif(capsys, *args):
    """``(exit code, stdout, stderr)`` of ``refsim whatif ARGS`` in-process (argparse's usage
    errors give their code); test_whatif_cli_defects uses it too."""
    try:
        code = main(["whatif", *args])
    except SystemExit as exc:            # argparse's own usage errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def whatif_json(capsys, *args):
    code, out, err = whatif(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


# D1 -------------------------------------------------------------------------------------------

def test_breakeven_at_coverage_zero_is_the_drafted_decodes(device_file, capsys):
    """An n-gram item of coverage 0: the change is 0 whatever the acceptance, and at any coverage
    c > 0 its sign is that of ``t_w - t_1 (1 + d alpha)``: the break-even is
    ``(t_w / t_1 - 1) / d`` whatever c (hand-worked from decode_ms), not 0 %."""
    from refsim.timing.breakeven import decode_ms
    rows = {}
    for c in ("0", "0.0001", "0.5", "1"):
        doc = whatif_json(capsys, DEMO, "--device", device_file, "--cache-mb", "256", "--spec",
                          f"off,ngram:d=3:m=3:acceptance=0.5:coverage={c}", "--head-ms", "1",
                          *EXACT)
        rows[c] = doc["rows"][1]
    # the reads per decode at width 1 and 4: off's MiB/token and the c = 1 row's times its tokens
    x1 = doc["rows"][0]["mib_per_token"]
    x4 = rows["1"]["mib_per_token"] * rows["1"]["tokens_per_decode"]
    t1 = decode_ms(device(), x1, 1, "m", 4, False, True, 0.38)
    t4 = decode_ms(device(), x4, 4, "m", 4, False, True, 0.38)
    want = (t4 / t1 - 1) / 3
    assert 0.05 < want < 0.95
    for c, row in rows.items():
        assert row["breakeven_acceptance"] == pytest.approx(want, abs=2e-9), c
    code, out, _ = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", "256", "--spec",
                          "off,ngram:d=3:m=3:acceptance=0.5:coverage=0")
    assert code == 0
    assert out.splitlines()[-1].endswith(f"{100 * want:.1f}%")


def test_nothing_drafted_is_na(device_file, capsys):
    """A measured configuration that drafted nothing has no acceptance (a ratio over zero
    drafts) and no break-even: JSON null, the table n/a (docs/cli.md "Numbers")."""
    from refsim.timing.verdict import Device, Reads, SpecConfig, price
    from refsim.timing.terms import Term
    cfg = SpecConfig.measured("ngram", 3, 3, decodes=10, drafted_steps=0, drafted=0, accepted=0,
                              source="measured: t")
    assert cfg.acceptance is None and cfg.coverage == 0.0 and cfg.tokens_per_decode == 1.0
    dv = Device(device(), "m", 4, False, Term("eps", 0.38, 0.38, 0.38, "", "assumed", "t"))
    p = price(dv, cfg, {1: Reads(1, 40.0), 4: Reads(4, 40.0)}, budget_mib=64.0)
    assert p.breakeven_acceptance is None and p.row()["acceptance"] is None
    assert p.delta.point == 0.0
    # live: a prompt the n-gram never matches (4 distinct ids, 6 tokens)
    args = ["builtin", "--device", device_file, "--cache-mb", "4", "--spec", "off,ngram:d=3:m=3",
            "--prompt-tokens", "1,2,3,4", "-n", "6"]
    doc = whatif_json(capsys, *args)
    ng = doc["rows"][1]
    assert ng["measured"]["drafted"] == 0
    assert ng["acceptance"] is None and ng["breakeven_acceptance"] is None
    code, out, _ = whatif(capsys, *args)
    assert code == 0
    cells = out.splitlines()[-1].split()
    assert cells[2] == "n/a" and cells[-1] == "n/a"


# D2 -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["backoff", "cost"])
def test_policy_replay_figures_are_labelled_measured(device_file, capsys, policy):
    """With a policy other than fixed on a trace, the acceptance and coverage shown are the
    replay's counters (the policy changes both): measured, not "assumed (given in --spec)"; the
    label names the assumed stream they were replayed from. The fixed rows stay assumed."""
    args = [DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
            "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.4,mtp:d=2:acceptance=0.8",
            "--head-ms", "10"]
    doc = whatif_json(capsys, *args, "--spec-policy", policy)
    for row, given in zip(doc["rows"][1:], ("acceptance 0.5 and coverage 0.4",
                                            "acceptance 0.8 and coverage 1")):
        assert row["acceptance_source"].startswith(f"measured: {policy} replay of the assumed "
                                                    f"{given} (--spec)")
        assert not any("given by the user" in n for n in row["notes"])
    code, out, _ = whatif(capsys, *args, "--spec-policy", policy)
    assert code == 0 and "assumed (given in --spec)" not in out
    assert all("*" not in line.split()[2:4] and not line.split()[2].endswith("*")
               for line in out.splitlines()[-2:])
    fixed = whatif_json(capsys, *args)
    assert [r["acceptance_source"] for r in fixed["rows"]] == ["", "assumed", "assumed"]
    assert all("acceptance and coverage assumed (given by the user)" in r["notes"]
               for r in fixed["rows"][1:])


# D3, D9 ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, msg", [
    ("off,mtp:d=20:acceptance=0.9", "d=20, expected an integer >= 1 and at most 8"),
    ("off,mtp:d=100:acceptance=0.5", "d=100, expected an integer >= 1 and at most 8"),
    ("off,ngram:d=9:m=3:acceptance=0.5:coverage=0.2", "d=9, expected"),
    ("off,ngram:d=3:m=13:acceptance=0.5:coverage=0.2", "m=13, expected an integer >= 1 and at "
                                                      "most 12"),
    ("off,ngram:d=3:m=0:acceptance=0.5:coverage=0.2", "m=0, expected"),
    ("bogus", "'bogus': expected off"), ("", "'': expected off"), (",,", "'': expected off"),
    ("off,ngram:d=0:m=3:acceptance=0.5:coverage=0.2", "d=0, expected"),
    ("off,ngram:d=3:m=3:acceptance=1.5:coverage=0.2", "acceptance 1.5, expected a number in 0..1"),
    ("off,ngram:d=3:m=3:acceptance=nan:coverage=0.2", "acceptance nan, expected"),
    ("off,ngram:d=3:m=3:coverage=-0.1:acceptance=0.5", "coverage -0.1, expected"),
    ("off,ngram:d=3:m=3:x=1", "unknown key(s) x"), ("off,ngram:d=3", "m= is required"),
    ("off,ngram:d=3:d=3:m=3", "d given twice"), ("off,mtp:d=2,mtp:d=2", "listed twice"),
    ("off,mtp:d=3", "--spec mtp:d=3: the MTP head's compute needs --gguf"),
])
def test_spec_mistakes_are_usage_errors(device_file, capsys, spec, msg):
    """Every --spec mistake the command line alone shows exits 2 with one line naming --spec (not
    --window, a flag whatif has not), d and m in run's ranges (refsim.spec.constants), before
    the trace is read (a missing trace does not hide it)."""
    extra = ["--head-ms", "1"] if "d=20" in spec or "d=100" in spec else []
    for source in (DEMO, "no-such-trace.csv"):
        code, out, err = whatif(capsys, source, "--device", device_file, "--cache-mb", "64",
                                "--spec", spec, *extra)
        assert code == 2 and out == ""
        last = err.splitlines()[-1]
        assert last.startswith("refsim whatif: error: --spec") and msg in last, last
        assert "--window" not in err


def test_spec_bounds_are_runs():
    """One place defines them: the bounds --spec takes are refsim run's (spec.constants)."""
    from refsim.errors import UsageError
    from refsim.spec.constants import DRAFT_MAX_LIMIT, NGRAM_MAX_MATCH
    from refsim.timing.verdict import parse_spec_list
    ok = parse_spec_list(f"ngram:d={DRAFT_MAX_LIMIT}:m={NGRAM_MAX_MATCH},mtp:d=1")
    assert [c.label for c in ok] == ["off", "ngram:d=8:m=12", "mtp:d=1"]
    for bad in (f"mtp:d={DRAFT_MAX_LIMIT + 1}", f"ngram:d=1:m={NGRAM_MAX_MATCH + 1}"):
        with pytest.raises(UsageError):
            parse_spec_list(bad)


# D4 -------------------------------------------------------------------------------------------

def test_gguf_must_be_the_traces_model(device_file, tmp_path, capsys):
    """--gguf on a trace of another model is refused with refsim replay --model's one line (the
    same check, SliceLayout.check_trace), exit 1 (the input refuses it)."""
    from refsim.testing.twins import qwen36_twin
    twin = qwen36_twin(str(tmp_path / "q36.gguf"))
    code, out, err = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
                            "off,mtp:d=2:acceptance=0.5", "--gguf", twin)
    assert code == 1 and out == ""
    want = f"{DEMO}: {twin} has 256 experts per layer, the trace 32: not the model the trace " \
           f"was recorded with"
    assert err.splitlines() == [f"refsim whatif: error: {want}"]
    assert main(["replay", DEMO, "--model", twin, "--cache-mb", "64"]) == 1
    assert want in capsys.readouterr().err


# D5 -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def phone(tmp_path_factory):
    """The phone 07-12 fit on its four qwen runs (skipped without the shared folder)."""
    from refsim.testing.shared import require_shared
    from refsim.timing.fit import fit_device
    from refsim.timing.plain import load_plain_runs
    d = require_shared("real-runs", "phone-2026-07-12-cache-lanes")
    specs = [f"{d}/qwen_c{c}_l{l}.csv@model=qwen,io_threads={l}" for c in (2000, 4000)
             for l in (2, 4)]
    runs, _ = load_plain_runs(specs, 50)
    dev = fit_device(runs)
    path = tmp_path_factory.mktemp("phone") / "phone.json"
    path.write_text(dev.to_json())
    return dev, str(path), specs


def test_baseline_of_another_model_is_refused(phone, tmp_path, capsys):
    """--baseline takes timing predict's rule: a run of a model the device was not fitted on is
    refused with its one line (the desktop Qwen3.6 run against the phone's Qwen3-30B fit); and a
    run of a known model other than the floor priced (--device-model) is refused too."""
    import dataclasses
    from refsim.testing.shared import require_shared
    from refsim.timing.model import Param
    dev, path, specs = phone
    desk = str(require_shared("real-runs", "desktop-2026-07-24-qwen36") / "pc-A-io4.csv")
    code, out, err = whatif(capsys, DEMO, "--device", path, "--cache-mb", "64", "--spec", "off",
                            "--baseline", desk)
    assert code == 1 and out == ""
    line = err.splitlines()
    assert len(line) == 1 and "model 'Qwen_Qwen3.6-35B-A3B-Q4_K_M.gguf' was not among the " \
                              "fitted runs (known: qwen)" in line[0]
    assert main(["timing", "predict", path, desk]) == 1
    assert "was not among the fitted runs (known: qwen)" in capsys.readouterr().err
    two = dataclasses.replace(dev, compute={**dev.compute, "other": Param(90.0)})
    p2 = tmp_path / "two.json"
    p2.write_text(two.to_json())
    code, out, err = whatif(capsys, DEMO, "--device", str(p2), "--device-model", "other",
                            "--io-threads", "2", "--cache-mb", "64", "--spec", "off",
                            "--baseline", specs[2])
    assert code == 1 and "a run of model 'qwen', the compute floor priced is 'other'" in err
    # the run of the priced model still calibrates
    code, out, err = whatif(capsys, DEMO, "--device", path, "--io-threads", "2", "--cache-mb",
                            "64", "--spec", "off", "--baseline", specs[2], "--json")
    assert code == 0 and json.loads(out)["calibration"]["baseline"] == specs[2]


# D11 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("given, shown", [("123456.789", "123456.789"),
                                          ("1099511627776", "1099511627776"), ("0.1", "0.1"),
                                          ("256", "256")])
def test_budget_prints_as_the_shortest_text_of_its_bytes(device_file, capsys, given, shown):
    """docs/cli.md "Numbers": a budget prints as the shortest MiB text that gives back the same
    bytes (refsim.fmt.budget_mib, replay's), not %g's 123457 or 1.09951e+12."""
    from refsim.cache import ExpertCache
    from refsim.fmt import budget_mib
    code, out, _ = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", given, "--spec",
                          "off")
    assert code == 0
    assert out.splitlines()[-1].split()[0] == shown == budget_mib(ExpertCache.mib_to_bytes(
        float(given)))


def test_a_repeated_budget_is_priced_once(device_file, capsys):
    """--cache-mb 256,64,256: timing breakeven's rule, the first kept."""
    args = [DEMO, "--device", device_file, "--spec", "off,ngram:d=2:m=2:acceptance=0.5:"
            "coverage=0.5"]
    rows = whatif_json(capsys, *args, "--cache-mb", "256,64,256")["rows"]
    assert [(r["budget_mib"], r["config"]) for r in rows] == [
        (256.0, "off"), (256.0, "ngram:d=2:m=2"), (64.0, "off"), (64.0, "ngram:d=2:m=2")]
    assert rows == whatif_json(capsys, *args, "--cache-mb", "256,64")["rows"]
    code, out, _ = whatif(capsys, *args, "--cache-mb", "256,256")
    assert code == 0 and [ln.split()[0] for ln in out.splitlines()[-2:]] == ["256", "256"]
    assert len([ln for ln in out.splitlines() if ln.split()[1:2] == ["off"]]) == 1


# D12 ------------------------------------------------------------------------------------------

def test_explain_sources_are_true(device_file, capsys):
    """--explain: off/ngram rows have no head (derived 0, not "fitted: device"); a --head-ms head
    is not swept with eps (its note says so, not "eps at its ends"); without --gguf a speculation
    row's memory is not_modelled (its speculative memory is unknown), off's stays derived 0."""
    doc = whatif_json(capsys, DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
                      "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.4,mtp:d=2:acceptance=0.8",
                      "--head-ms", "10")
    terms = [{t["name"]: t for t in r["terms"]} for r in doc["rows"]]
    for t, kind in zip(terms[:2], ("off", "ngram")):
        assert (t["head"]["kind"], t["head"]["value"]) == ("derived", 0.0)
        assert t["head"]["source"] == f"no MTP head: {kind} drafts without one"
    h = terms[2]["head"]
    assert (h["kind"], h["value"], h["lo"], h["hi"]) == ("assumed", 10.0, 10.0, 10.0)
    assert h["source"] == "--head-ms" and "eps" not in h["note"]
    assert (terms[0]["memory"]["kind"], terms[0]["memory"]["source"]) == ("derived",
                                                                          "no speculative memory")
    for t in terms[1:]:
        m = t["memory"]
        assert (m["kind"], m["value"], m["lo"], m["hi"]) == ("not_modelled", 0.0, 0.0, 0.0)
        assert "no --gguf" in m["source"]
    code, out, _ = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
                          "off,mtp:d=2:acceptance=0.8", "--head-ms", "10", "--explain")
    assert code == 0
    head = [ln for ln in out.splitlines() if ln.strip().startswith("head =")]
    assert "fitted" not in head[0] and "eps at its ends" not in head[1]


def test_explain_head_from_the_tensor_table_is_swept(capsys, tmp_path, device_file):
    """With the model's tensor table the head's catch-up pays eps per extra position: its
    interval is eps at its ends (a live MTP model: its own table)."""
    from refsim.model import write_synthetic
    m = write_synthetic(tmp_path / "q35.gguf", "qwen35moe", "F32", nextn=True, seed=3)
    doc = whatif_json(capsys, str(m), "--device", device_file, "--cache-mb", "4", "--spec",
                      "off,mtp:d=2", "-n", "8")
    h = {t["name"]: t for t in doc["rows"][1]["terms"]}["head"]
    assert h["kind"] == "derived" and h["note"] == "interval: eps at its ends"
    assert h["lo"] < h["value"] < h["hi"]


# D13 ------------------------------------------------------------------------------------------

def test_every_row_has_a_policy(device_file, capsys):
    """docs/timing.md: every row has a policy; off's is none (it drafts nothing), in --json and
    --csv alike, with or without --spec-policy."""
    import csv
    import io
    args = [DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
            "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.4"]
    for extra, pol in (([], "fixed"), (["--spec-policy", "backoff"], "backoff")):
        rows = whatif_json(capsys, *args, *extra)["rows"]
        assert [r["policy"] for r in rows] == ["none", pol]
        code, out, _ = whatif(capsys, *args, *extra, "--csv")
        assert code == 0
        # the CSV also holds the table's [fixed replay] rows now (issue 29 CLI defects, item 3;
        # tests/cli/test_whatif_cli_defects.py): the priced rows are those of `row` policy
        assert [r["policy"] for r in csv.DictReader(io.StringIO(out))
                if r["row"] == "policy"] == ["none", pol]


# D7 -------------------------------------------------------------------------------------------

def test_plot_of_off_alone_warns_nothing(device_file, tmp_path, capsys):
    """--plot with only off: no change bars, so no legend on that panel (matplotlib's "No
    artists with labels found" UserWarning reached stderr before)."""
    import warnings
    pytest.importorskip("matplotlib")
    out = tmp_path / "off.png"
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        code, _, err = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", "128,256",
                              "--spec", "off", "--plot", str(out),      # above T: no budget warning
                              "--device-model", "m")    # the floor meant: no model warning
    assert code == 0 and err == ""
    assert [str(w.message) for w in got] == []
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("bad", ["1e308", "100.5", "1e400", "-1", "nan"])
def test_noise_pct_is_a_percentage(device_file, capsys, bad):
    """--noise-pct is a percentage in [0, 100] (a usage error past it: 1e308 overflowed numpy and
    printed a band [0, inf]); 100 still prices a finite band."""
    code, out, err = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
                            "off", "--noise-pct", bad)
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == (f"refsim whatif: error: argument --noise-pct: expected a "
                                    f"percentage in [0, 100], got '{bad}'")
    import math
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = whatif_json(capsys, DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
                          "off", "--noise-pct", "100")["rows"][0]
    assert all(math.isfinite(row[k]) and row[k] > 0 for k in ("eff_tok_s_lo", "eff_tok_s_hi"))


# D15 ------------------------------------------------------------------------------------------

def test_live_warnings_are_whatifs(device_file, capsys):
    """A live run's warning is whatif's line (refsim.errors.warning_line), not refsim run's."""
    code, _, err = whatif(capsys, "builtin", "--device", device_file, "--cache-mb", "0.01",
                          "--spec", "off", "-n", "4")
    assert code == 0
    lines = err.splitlines()
    assert lines and all(ln.startswith("refsim whatif: warning: ") for ln in lines)
    assert lines[0].startswith("refsim whatif: warning: budget 0.01 MiB is below one token cycle")
    assert "refsim run" not in err


def test_gguf_without_mtp_names_spec_not_runs_flags(device_file, tmp_path, capsys):
    """An mtp: item with a --gguf that has no nextn block: one line naming --spec and --gguf (not
    run's --mtp/--ngram), with or without --ram-mb, before any pricing."""
    from refsim.model import write_synthetic
    model = str(write_synthetic(tmp_path / "q3.gguf", "qwen3moe", "F32", seed=3))
    trace = str(tmp_path / "q3.route.csv")
    assert main(["run", model, "-n", "8", "--cache-mb", "1", "--route-trace", trace]) == 0
    capsys.readouterr()
    for extra in (["--ram-mb", "4000"], ["--head-ms", "3"], []):
        code, out, err = whatif(capsys, trace, "--device", device_file, "--cache-mb", "1",
                                "--spec", "off,mtp:d=2:acceptance=0.5", "--gguf", model, *extra)
        assert code == 1 and out == ""
        assert err.splitlines() == [f"refsim whatif: error: --spec mtp:d=2: --gguf {model} has no "
                                    f"MTP (nextn) block (nextn_predict_layers = 0); use ngram: "
                                    f"items"]


@pytest.mark.parametrize("content, got", [(b"", "an empty file"),
                                          (b"garbage\n", "b'garb' at byte 0")])
def test_a_gguf_that_is_neither_names_both(device_file, tmp_path, capsys, content, got):
    """MODEL.gguf that is empty or not a GGUF: whatif says what it expected, a GGUF model or a
    route trace (not only the trace reader's '# route_trace v1'); an empty file of any name too."""
    for name in ("m.gguf", "t.csv"):
        if name == "t.csv" and content:
            continue                 # any other non-GGUF file is a trace: the reader's message
        path = tmp_path / name
        path.write_bytes(content)
        code, out, err = whatif(capsys, str(path), "--device", device_file, "--cache-mb", "4",
                                "--spec", "off")
        assert code == 1 and out == ""
        assert err.splitlines() == [f"refsim whatif: error: TRACE|MODEL {path}: expected a GGUF "
                                    f"model (magic 'GGUF') or a route trace ('# route_trace v1'), "
                                    f"got {got}"]


def test_csv_writes_nan_for_an_undefined_number_and_nothing_for_absent_text(device_file, capsys):
    """docs/cli.md "Numbers": n/a is ``nan`` in a numeric CSV column (the off row's acceptance,
    coverage and break-even were empty fields); text columns stay empty where absent."""
    import csv
    import io
    from refsim.cli.whatif import COLUMNS, TEXT_COLUMNS
    code, out, _ = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
                          "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.4", "--csv")
    assert code == 0
    off, ngram = list(csv.DictReader(io.StringIO(out)))
    assert (off["acceptance"], off["coverage"], off["breakeven_acceptance"]) == ("nan", "nan", "nan")
    assert (ngram["acceptance"], ngram["coverage"]) == ("0.5", "0.4")
    for row in (off, ngram):
        assert all(row[k] != "" for k in COLUMNS if k not in TEXT_COLUMNS)
        assert all(row[k] != "nan" for k in TEXT_COLUMNS)
