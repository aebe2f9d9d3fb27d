"""The device's own run-to-run noise in its device file (issue 29): ``timing fit`` stores the
pooled sd of ln tok/s of the repeats among its runs (refsim.timing.noise.device_repeats:
byte-identical per-token reads, configurations differing only in levers the fit finds dead -- the
rule identify_device uses), the reader validates it as untrusted input, and ``refsim whatif``'s
band takes ``--noise-pct`` > the device file's > the engine's published repeats
(docs/whatif-terms.md, "Run-to-run noise")."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refsim.cli import main
from refsim.errors import ConfigError
from refsim.testing.mutate import damaged_device
from refsim.testing.shared import require_shared
from refsim.timing import RunData, load_device
from refsim.timing.noise import PUBLISHED_REPEATS, log_sigma, stored_noise, stored_repeats
from tests.timing.test_timing import KNOWN, design, design_specs

DEMO = str(Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv")
PUBLISHED = log_sigma([r for r in PUBLISHED_REPEATS if r.same_reads]).value
SS_PUBLISHED = (math.log(6.14 / 5.82) ** 2 + math.log(5.17 / 4.59) ** 2) / 2
"""The published byte-identical pairs' sum of squares about their means (phone mtp off 5.82 /
6.14, phone prose off 5.17 / 4.59 tok/s: each pair (d/2)^2 x 2 = d^2 / 2), 2 degrees of freedom."""
"""whatif's noise without --noise-pct and without a device file's (6.52 %)."""


def run_at(label: str, x: np.ndarray, wall_ms: float, lanes: int = 4) -> RunData:
    """A serial cache run of model q whose compute and flash columns follow the device rules of
    KNOWN and whose every token took ``wall_ms`` (so its tok/s is 1000 / wall_ms exactly)."""
    p = dict(KNOWN, tail=1.0)
    cpu = 150.0 + p["m0"] + p["m1"] * x
    io = p["i0"] + x * (p["a"] + p["b"] / lanes)
    return RunData(label=label, model="q", lanes=lanes, overlap=False, cache=True, x=x, cpu=cpu,
                   io=io, stall=np.zeros_like(x), wall=np.full_like(x, wall_ms), trim=0)


@pytest.fixture(scope="module")
def repeats_file(tmp_path_factory):
    """Six legacy runs: A, B, C read the same bytes at every token and took 400, 500 and 320 ms
    per token (2.5, 2, 3.125 tok/s); E, F read other identical bytes at 400 and 800 ms (2.5, 1.25
    tok/s); D reads yet other bytes at 2 lanes (no repeat: nothing else reads what it reads).
    ``(device file, fit's stdout)``."""
    folder = tmp_path_factory.mktemp("noise")
    rng = np.random.default_rng(29)
    x1, x2, x3 = (np.round(rng.uniform(10.0, 300.0, 40), 3) for _ in range(3))
    runs = [run_at("A", x1, 400.0), run_at("B", x1, 500.0), run_at("C", x1, 320.0),
            run_at("D", x3, 400.0, lanes=2), run_at("E", x2, 400.0), run_at("F", x2, 800.0)]
    out = folder / "d.json"
    import io
    from contextlib import redirect_stdout
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["timing", "fit", *design_specs(folder, runs), "--out", str(out), "--trim", "0",
                     "--name", "synth"]) == 0
    return out, buf.getvalue()


def _whatif(capsys, device, *more):
    capsys.readouterr()
    assert main(["whatif", DEMO, "--device", str(device), "--cache-mb", "256", "--spec",
                 "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.2", "--json", *more]) == 0
    return json.loads(capsys.readouterr().out)


# --- timing fit -> device file -> whatif, by hand ---------------------------------------------------

def test_fit_stores_the_hand_worked_noise(repeats_file):
    """ln tok/s of A, B, C: ln 2.5, ln 2, ln 3.125; their mean is ln 2.5 (2 x 3.125 = 2.5^2), so
    the squares are 0 + ln^2 1.25 + ln^2 1.25 over 2 degrees of freedom: sd ln 1.25 = 0.22314.
    E, F: ln 2.5, ln 1.25, squares ln^2 2 / 2 over 1. Pooled: sqrt((2 ln^2 1.25 + ln^2 2 / 2) / 3)
    = 0.33656; the interval spans the groups' own ln 1.25 and ln 2 / sqrt 2 = 0.49013."""
    path, text = repeats_file
    dev = load_device(str(path))
    n = dev.noise
    l125, l2 = math.log(1.25), math.log(2.0)
    assert n["value"] == pytest.approx(math.sqrt((2 * l125 ** 2 + l2 ** 2 / 2) / 3), rel=1e-12)
    assert n["value"] == pytest.approx(0.33656, abs=5e-6)
    assert n["lo"] == pytest.approx(l125, rel=1e-12) and n["hi"] == pytest.approx(l2 / math.sqrt(2), rel=1e-12)
    assert n["df"] == 3 and n["unit"] == "sd of ln tok/s (one run)"
    assert [(r["name"], r["tok_s"]) for r in n["repeats"]] == [
        ("A.csv / B.csv / C.csv", [2.5, 2.0, 3.125]), ("E.csv / F.csv", [2.5, 1.25])]
    # D's 2 lanes beside the others' 4 identify the lanes' term (b = 0.5 exactly): a live lever
    assert [r["note"] for r in n["repeats"]] == ["identical configurations"] * 2
    assert dev.params["b"].value == pytest.approx(0.5, rel=1e-3)
    assert ("run-to-run noise: sd 33.66 % [22.31, 49.01] of ln tok/s of one run, 3 degrees of "
            "freedom, from 2 repeats among the runs: A.csv / B.csv / C.csv (2.5, 2, 3.125 tok/s); "
            "E.csv / F.csv (2.5, 1.25 tok/s)") in text


def test_whatif_band_uses_the_device_files_noise(repeats_file, capsys):
    path, _ = repeats_file
    """Pooled with the published pairs: sqrt((2 ln^2 1.25 + ln^2 2 / 2 + SS_PUBLISHED) / (3 + 2))."""
    doc = _whatif(capsys, path)
    l125, l2 = math.log(1.25), math.log(2.0)
    assert doc["noise_sd"] == pytest.approx(
        math.sqrt((2 * l125 ** 2 + l2 ** 2 / 2 + SS_PUBLISHED) / 5), rel=1e-12)
    assert doc["noise_sd"] == pytest.approx(0.26394, abs=5e-6)
    assert doc["noise_source"] == (
        "pooled: the device file's 2 repeats (3 degrees of freedom) and the published "
        "byte-identical repeats (2): A.csv / B.csv / C.csv (2.5, 2, 3.125 tok/s); E.csv / F.csv "
        "(2.5, 1.25 tok/s); phone mtp off (5.82, 6.14 tok/s); phone prose off (5.17, 4.59 tok/s)")


def test_a_pair_by_hand_through_fit_and_whatif(tmp_path, capsys):
    """Two runs, the smallest repeat: 400 and 500 ms per token (2.5, 2 tok/s), one degree of
    freedom: sd = |ln 2.5 - ln 2| / sqrt 2 = ln 1.25 / sqrt 2 = 0.157786, interval that value."""
    rng = np.random.default_rng(3)
    x = np.round(rng.uniform(10.0, 300.0, 30), 3)
    y = np.round(rng.uniform(10.0, 300.0, 30), 3)
    specs = design_specs(tmp_path, [run_at("P", x, 400.0), run_at("Q", x, 500.0),
                                  run_at("R", y, 360.0, lanes=2)])
    out = tmp_path / "d.json"
    assert main(["timing", "fit", *specs, "--out", str(out), "--trim", "0"]) == 0
    want = math.log(1.25) / math.sqrt(2.0)
    n = load_device(str(out)).noise
    assert (n["value"], n["lo"], n["hi"]) == pytest.approx((want, want, want), rel=1e-12)
    # whatif pools the pair (1 degree of freedom) with the published pairs (2)
    pooled = math.sqrt((math.log(1.25) ** 2 / 2 + SS_PUBLISHED) / 3)
    assert _whatif(capsys, out)["noise_sd"] == pytest.approx(pooled, rel=1e-12)
    assert pooled == pytest.approx(0.10553, abs=5e-6)


# --- precedence: --noise-pct > the device file's > the published repeats ---------------------------

def test_each_source_wins_where_it_should(repeats_file, tmp_path, capsys):
    path, _ = repeats_file
    bare = tmp_path / "bare.json"
    doc = json.loads(path.read_text())
    del doc["noise"]
    bare.write_text(json.dumps(doc))
    # 1. --noise-pct over the device file's
    given_ = _whatif(capsys, path, "--noise-pct", "3")
    assert (given_["noise_sd"], given_["noise_source"]) == (0.03, "--noise-pct 3")
    assert given_["rows"] == _whatif(capsys, bare, "--noise-pct", "3")["rows"]   # the file's unused
    # 2. the device file's, pooled with the published repeats, over the published alone
    own = _whatif(capsys, path)
    dev = load_device(str(path))
    assert own["noise_sd"] == log_sigma(stored_repeats(dev.noise) + [
        r for r in PUBLISHED_REPEATS if r.same_reads]).value
    assert own["noise_source"].startswith("pooled: the device file's 2 repeats")
    # 3. the published repeats when the file has none
    pub = _whatif(capsys, bare)
    assert pub["noise_sd"] == PUBLISHED and pub["noise_sd"] == pytest.approx(0.0652, abs=5e-5)
    assert pub["noise_source"].startswith("published byte-identical repeats: phone mtp off")
    # the band is the noise's: 26.4 % of one run is wider than 6.5 %
    wide, narrow = own["rows"][0], pub["rows"][0]
    assert wide["eff_tok_s"] == narrow["eff_tok_s"]
    assert wide["eff_tok_s_hi"] - wide["eff_tok_s_lo"] > narrow["eff_tok_s_hi"] - narrow["eff_tok_s_lo"]
    # the band line of the table (and of --explain) names the source
    capsys.readouterr()
    assert main(["whatif", DEMO, "--device", str(path), "--cache-mb", "256", "--spec", "off",
                 "--explain"]) == 0
    assert ("noise sd 26.39 % (pooled: the device file's 2 repeats (3 degrees of freedom) and "
            "the published byte-identical repeats (2): A.csv / B.csv / C.csv (2.5, 2, 3.125 "
            "tok/s)") in capsys.readouterr().out


def test_runs_without_a_repeat_store_nothing(tmp_path, capsys):
    """Runs that read different bytes (test_timing's design) hold no repeat: the file has no
    noise key -- the bytes today's fit writes -- and whatif uses the published repeats."""
    specs = design_specs(tmp_path, design(dict(KNOWN, tail=1.0), {"q": 150.0}, 4))
    out = tmp_path / "d.json"
    assert main(["timing", "fit", *specs, "--out", str(out), "--trim", "0"]) == 0
    assert "run-to-run noise" not in capsys.readouterr().out
    text = out.read_text()
    assert "noise" not in json.loads(text)
    dev = load_device(str(out))
    assert dev.noise is None and stored_noise(dev) is None
    assert dataclasses.replace(dev).to_json() == text
    assert _whatif(capsys, out)["noise_sd"] == PUBLISHED


def test_runs_differing_in_a_live_lever_are_no_repeat(tmp_path):
    """Identical reads at 2 and 4 lanes where the fit finds the lanes' term alive (b = 0.5 by the
    runs' own rule, identified): not a repeat (the phone's case, docs/whatif-terms.md)."""
    from refsim.timing import fit_device, load_runs
    from refsim.timing.noise import dead_levers, device_repeats
    rng = np.random.default_rng(5)
    xs = [np.round(rng.uniform(10.0, 300.0, 40), 3) for _ in range(3)]
    p = dict(KNOWN, tail=1.0)
    runs = []
    for i, x in enumerate(xs):
        for lanes in (2, 4):
            r = run_at(f"x{i}l{lanes}", x, 100.0, lanes)
            wall = r.cpu + r.io
            runs.append(dataclasses.replace(r, wall=wall))
    specs = design_specs(tmp_path, runs)
    got, _ = load_runs(specs, 0)
    dev = fit_device(got)
    assert dev.params["b"].value == pytest.approx(p["b"], rel=1e-3) and dead_levers(dev) == ()
    assert device_repeats(got, dev) == []
    out = tmp_path / "d.json"
    assert main(["timing", "fit", *specs, "--out", str(out), "--trim", "0"]) == 0
    assert load_device(str(out)).noise is None


# --- the reader: untrusted input ---------------------------------------------------------------------

@pytest.mark.parametrize("edit, message", [
    (lambda n: [1], r"noise: expected an object with keys value, lo, hi, unit, df, repeats"),
    (lambda n: {k: v for k, v in n.items() if k != "df"}, r"noise: expected an object with keys"),
    (lambda n: {**n, "extra": 1}, r"noise: expected an object with keys"),
    (lambda n: {**n, "value": "x"}, r"noise\.value: expected a finite number"),
    (lambda n: {**n, "value": True}, r"noise\.value: expected a finite number"),
    (lambda n: {**n, "hi": 1e9}, r"noise\.hi: expected a finite number"),
    (lambda n: {**n, "lo": n["value"] * 1.5}, r"noise: expected 0 <= lo <= value <= hi <= 1"),
    (lambda n: {**n, "value": -0.1, "lo": -0.2}, r"noise: expected 0 <= lo"),
    (lambda n: {**n, "hi": 2.0}, r"noise: expected 0 <= lo <= value <= hi <= 1 \(sd of ln tok/s\)"),
    (lambda n: {**n, "value": n["value"] * 1.001}, r"noise\.value: .* is not what the stored repeats give"),
    (lambda n: {**n, "hi": 0.9}, r"noise\.hi: 0\.9 is not what the stored repeats give"),
    (lambda n: {**n, "unit": "%"}, r"noise\.unit: expected 'sd of ln tok/s \(one run\)'"),
    (lambda n: {**n, "df": 4}, r"noise\.df: expected 3 \(the repeats' runs less one each\), got 4"),
    (lambda n: {**n, "df": True}, r"noise\.df: expected 3"),
    (lambda n: {**n, "df": 3.0}, r"noise\.df: expected 3"),
    (lambda n: {**n, "repeats": []}, r"noise\.repeats: expected a list of 1\.\.1024 repeats"),
    (lambda n: {**n, "repeats": {"a": 1}}, r"noise\.repeats: expected a list"),
    (lambda n: {**n, "repeats": [{"name": "r"}]}, r"noise\.repeats\[0\]: expected an object with keys "
                                                  r"name, tok_s, mib_per_token, note"),
    (lambda n: {**n, "repeats": [{**n["repeats"][0], "name": 7}, n["repeats"][1]]},
     r"noise\.repeats\[0\]\.name: expected a string"),
    (lambda n: {**n, "repeats": [{**n["repeats"][0], "note": "x" * 5000}, n["repeats"][1]]},
     r"noise\.repeats\[0\]\.note: expected a string of at most 4096"),
    (lambda n: {**n, "repeats": [n["repeats"][0], {**n["repeats"][1], "tok_s": [2.5]}]},
     r"noise\.repeats\[1\]\.tok_s: expected a list of 2\.\.1024"),
    (lambda n: {**n, "repeats": [n["repeats"][0], {**n["repeats"][1], "tok_s": [2.5, 0.0]}]},
     r"noise\.repeats\[1\]\.tok_s\[1\]: expected > 0"),
    (lambda n: {**n, "repeats": [n["repeats"][0], {**n["repeats"][1], "tok_s": [2.5, "5"]}]},
     r"noise\.repeats\[1\]\.tok_s\[1\]: expected a finite number"),
    (lambda n: {**n, "repeats": [n["repeats"][0], {**n["repeats"][1], "tok_s": [2.5, float("inf")]}]},
     r"noise\.repeats\[1\]\.tok_s\[1\]: expected a finite number"),
    (lambda n: {**n, "repeats": [n["repeats"][0], {**n["repeats"][1], "mib_per_token": -1.0}]},
     r"noise\.repeats\[1\]\.mib_per_token: expected >= 0"),
    # a run's tok/s changed without its sd: the stored value no longer is what the repeats give
    (lambda n: {**n, "repeats": [n["repeats"][0], {**n["repeats"][1], "tok_s": [2.5, 1.5]}]},
     r"noise\.value: .* is not what the stored repeats give"),
])
def test_bad_noise_is_one_line_error(repeats_file, tmp_path, edit, message):
    path, _ = repeats_file
    doc = json.loads(path.read_text())
    doc["noise"] = edit(doc["noise"])
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc, allow_nan=True))
    with pytest.raises(ConfigError, match=message) as exc:
        load_device(str(p))
    assert str(exc.value).startswith(f"{p}: ") and "\n" not in str(exc.value)


def test_the_noise_round_trips(repeats_file, tmp_path):
    path, _ = repeats_file
    dev = load_device(str(path))
    p = tmp_path / "again.json"
    p.write_text(dev.to_json())
    assert p.read_text() == path.read_text() and load_device(str(p)) == dev
    assert stored_noise(dev).value == dev.noise["value"]
    assert (stored_noise(dev).lo, stored_noise(dev).hi) == (dev.noise["lo"], dev.noise["hi"])


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_noise_is_refused_or_read_consistently(repeats_file, tmp_path, data):
    """A damaged copy of the file (refsim.testing.mutate, on the noise object's lines) is refused
    in one line naming the file, or read as a noise whose value is what its repeats give."""
    path, _ = repeats_file
    text = path.read_bytes()
    start = text.index(b'  "noise": {')
    end = text.index(b"\n  }", start) + 4
    _, dev, err, recipe = damaged_device(data, text, start, end, tmp_path)
    if err is not None:
        return
    if dev.noise is not None:
        t = stored_noise(dev)
        assert 0.0 <= t.lo <= t.value <= t.hi <= 1.0, recipe
        assert dev.noise["value"] == pytest.approx(t.value, rel=1e-9), recipe


# --- the desktop's own noise, as the validation identifies it ---------------------------------------

def test_desktop_fit_stores_identifys_repeats_to_the_last_bit(tmp_path, capsys):
    """timing fit on the desktop runs the published-verdicts validation identifies its host on
    (refsim.testing.validation_inputs: the set's plain runs, trim 50) stores pc-E / pc-F's noise,
    equal to log_sigma of identify_device's repeats to the last bit: 0.70 % of one run, 1 degree
    of freedom (their reads are byte-identical; they differ only in io_threads, a lever the fit
    finds dead: b = -0.094 +- 0.064). whatif pools it with the published pairs: 5.34 %."""
    require_shared("real-runs", "desktop-2026-07-24-qwen36")
    from refsim.testing.recording_sets import DESKTOP, set_inputs
    from refsim.testing.validation_inputs import TRIM
    from refsim.timing.identify import identify_device
    inp = set_inputs(DESKTOP, str(tmp_path))
    terms = identify_device(inp.specs, inp.sizes, inp.work, name=DESKTOP, trim=TRIM)
    want = log_sigma(terms.repeats)
    out = tmp_path / "desktop.json"
    assert main(["timing", "fit", *inp.specs, "--out", str(out), "--name", DESKTOP,
                 "--trim", str(TRIM)]) == 0
    n = load_device(str(out)).noise
    assert (n["value"], n["lo"], n["hi"]) == (want.value, want.lo, want.hi)
    assert [(r["name"], tuple(r["tok_s"])) for r in n["repeats"]] == [
        (r.name, r.tok_s) for r in terms.repeats]
    assert n["df"] == 1 and n["repeats"][0]["name"] == "pc-E-c5000-io4t4.csv / pc-F-c5000-io8t4.csv"
    assert n["repeats"][0]["note"] == "differ only in io_threads"
    assert round(100 * n["value"], 2) == 0.70
    require_shared("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")
    from refsim.testing.shared import shared_path
    trace = str(shared_path("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv"))
    capsys.readouterr()
    assert main(["whatif", trace, "--device", str(out), "--cache-mb", "4000", "--spec", "off",
                 "--json"]) == 0
    # whatif pools the pair with the published pairs: sqrt((sd_E/F^2 x 1 + SS_PUBLISHED) / 3)
    got = json.loads(capsys.readouterr().out)["noise_sd"]
    assert got == log_sigma(list(terms.repeats) + [r for r in PUBLISHED_REPEATS if r.same_reads]).value
    assert got == pytest.approx(math.sqrt((want.value ** 2 + SS_PUBLISHED) / 3), rel=1e-12)
    assert round(100 * got, 2) == 5.34


def test_phone_lanes_fit_stores_no_noise(tmp_path):
    """The phone's 2- and 4-lane runs read identically but its lanes matter (b > 0 by 5.7 s.e.):
    no repeat, no noise key."""
    require_shared("real-runs", "phone-2026-07-12-cache-lanes")
    from refsim.testing.recording_sets import PHONE_LANES, set_specs
    out = tmp_path / "phone.json"
    assert main(["timing", "fit", *set_specs(PHONE_LANES), "--out", str(out)]) == 0
    assert "noise" not in json.loads(out.read_text())


def test_the_notebook_fit_stores_the_same_noise(tmp_path):
    """refsim.fit_device on paths is timing fit's file, noise included; on RunData (no preamble
    configuration to compare) it looks for no repeat."""
    require_shared("real-runs", "desktop-2026-07-24-qwen36")
    import refsim
    from refsim.testing.recording_sets import DESKTOP, set_specs
    from refsim.timing import load_runs
    specs = set_specs(DESKTOP)
    out = tmp_path / "d.json"
    assert main(["timing", "fit", *specs, "--out", str(out), "--name", "desk"]) == 0
    dev = refsim.fit_device(iter(specs), name="desk")
    assert dev.noise is not None and dev.to_json() == out.read_text()
    runs, _ = load_runs(specs, 50)
    assert refsim.fit_device(runs, name="desk").noise is None
