"""eps identified per device (issue 29 item 2): ``timing fit --gguf`` stores the prefill and
tensor-size readings in the device file; every ``--device`` command prices a drafted decode's
extra positions with the device's eps(w) (``positions.resolve_eps``), ``--position-cost`` wins,
and a file without the readings falls back to 0.38 labelled assumed (docs/whatif-terms.md)."""

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refsim.cli import main
from refsim.errors import ConfigError
from refsim.testing.shared import require_shared
from refsim.timing import DeviceModel, Param, load_device
from refsim.timing.model import PARAMS, POSITION_WIDTHS
from refsim.timing.positions import device_eps, resolve_eps, width_eps
from refsim.timing.terms import Term

ENTRY = {"eps_prefill": [0.5, 0.1, 0.9], "n_prompt": 29, "work_ratio": 1.2,
         "bytes_eps": [[0.2, 0.0, 0.25]] * len(POSITION_WIDTHS), "source": "test prefills"}


def dev_with(entry=ENTRY, key="m") -> DeviceModel:
    params = {k: Param({"tail": 1.0, "a": 1.0}.get(k, 0.0)) for k in PARAMS}
    return DeviceModel(params=params, compute={key: Param(100.0, 1.0)}, name="t", serial_runs=1,
                       overlap_runs=0, position_cost={} if entry is None else {key: entry})


# --- the rule, by hand ----------------------------------------------------------------------------

def test_device_eps_hand_worked():
    """eps_P 0.5 at P = 29, ratio 1.2: f = 1.2 (1 + 28 x 0.5) / 29 = 0.62069; at w = 4 the
    compute-bound reading (4 f - 1) / 3 = 0.49425 beats the bytes' 0.2. Lower end: eps_P 0.1 with
    r = 1: f = 3.8 / 29, (4 f - 1) / 3 < 0, so the bytes' 0: 0. Upper end: 0.9 with r:
    f = 1.2 x 26.2 / 29 = 1.08414, (4 f - 1) / 3 = 1.11218."""
    t = device_eps(dev_with(), "m", 4)
    assert t.value == pytest.approx((4 * 1.2 * 15.0 / 29 - 1) / 3, rel=1e-12)
    assert t.value == pytest.approx(0.49425, abs=5e-6)
    assert t.lo == 0.0 and t.hi == pytest.approx((4 * 1.2 * 26.2 / 29 - 1) / 3, rel=1e-12)
    assert t.kind == "fitted" and "test prefills" in t.source
    # the same as width_eps on the same readings (one rule)
    same = width_eps(Term("p", 0.5, 0.1, 0.9, "", "fitted", "test prefills"), 29, 4, 1.2,
                     Term("b", 0.2, 0.0, 0.25, "", "derived", "x"))
    assert (t.value, t.lo, t.hi) == (same.value, same.lo, same.hi)
    assert device_eps(dev_with(), "other", 4) is None
    assert device_eps(dev_with(None), "m", 4) is None
    # widths are clamped into 2..9: width 1 reads width 2, width 12 reads width 9
    assert device_eps(dev_with(), "m", 1).value == device_eps(dev_with(), "m", 2).value
    assert device_eps(dev_with(), "m", 12).value == device_eps(dev_with(), "m", 9).value


def test_resolve_eps_order():
    d = dev_with()
    given_ = resolve_eps(d, "m", 4, 0.25)
    assert (given_.value, given_.kind, given_.source) == (0.25, "assumed", "--position-cost")
    assert resolve_eps(d, "m", 4).value == device_eps(d, "m", 4).value
    fallback = resolve_eps(dev_with(None), "m", 4)
    assert (fallback.value, fallback.lo, fallback.hi, fallback.kind) == (0.38, 0.0, 1.2, "assumed")
    assert "does not identify eps" in fallback.source and "speculation cell" in fallback.source
    with pytest.raises(ConfigError, match="--position-cost"):
        resolve_eps(d, "m", 4, float("nan"))


@given(e=st.floats(0.0, 3.0), de=st.floats(0.0, 1.0), p=st.integers(2, 200),
       r=st.floats(1.0, 3.0), w=st.integers(2, 9))
def test_device_eps_is_monotone_in_the_prefill_reading(e, de, p, r, w):
    """A costlier prefill position never makes a verify position cheaper, and the band always
    holds the point."""
    a = dev_with({**ENTRY, "eps_prefill": [e, 0.0, e + de + 1.0], "n_prompt": p, "work_ratio": r})
    b = dev_with({**ENTRY, "eps_prefill": [e + de, 0.0, e + de + 1.0], "n_prompt": p,
                  "work_ratio": r})
    ta, tb = device_eps(a, "m", w), device_eps(b, "m", w)
    assert tb.value >= ta.value - 1e-12
    assert ta.lo <= ta.value <= ta.hi


# --- the device file: round trip and untrusted input -----------------------------------------------

def test_position_cost_round_trip(tmp_path):
    d = dev_with()
    p = tmp_path / "d.json"
    p.write_text(d.to_json())
    back = load_device(str(p))
    assert back.position_cost == d.position_cost and back == d
    p.write_text(dev_with(None).to_json())
    assert "position_cost" not in json.loads(p.read_text())
    assert load_device(str(p)).position_cost == {}


@pytest.mark.parametrize("edit, message", [
    (lambda e: {**e, "eps_prefill": [0.5, 0.6, 0.9]}, r"eps_prefill: expected 0 <= lo <= value"),
    (lambda e: {**e, "eps_prefill": [0.5, 0.1]}, r"eps_prefill: expected \[value, lo, hi\]"),
    (lambda e: {**e, "eps_prefill": [0.5, 0.1, 11.0]}, r"eps_prefill: expected 0 <= lo <= value <= hi <= 10"),
    (lambda e: {**e, "eps_prefill": [0.5, 0.1, 1e9]}, r"eps_prefill\[2\]: expected a finite number"),
    (lambda e: {**e, "eps_prefill": [0.5, 0.1, "x"]}, r"eps_prefill\[2\]: expected a finite number"),
    (lambda e: {**e, "n_prompt": 1}, r"n_prompt: expected an integer 2\.\."),
    (lambda e: {**e, "n_prompt": True}, r"n_prompt: expected an integer"),
    (lambda e: {**e, "n_prompt": 10 ** 9}, r"n_prompt: expected an integer"),
    (lambda e: {**e, "work_ratio": 0.5}, r"work_ratio: expected 1\.\.100"),
    (lambda e: {**e, "bytes_eps": [[0.2, 0.0, 0.25]] * 3}, r"bytes_eps: expected null or 8"),
    (lambda e: {**e, "bytes_eps": [[0.2, 0.0, 1.5]] * 8}, r"bytes_eps\[w=2\]: expected 0 <= lo"),
    (lambda e: {**e, "source": 7}, r"source: expected a string"),
    (lambda e: {k: v for k, v in e.items() if k != "source"}, r"expected an object with keys"),
    (lambda e: [1, 2], r"expected an object with keys"),
])
def test_bad_position_cost_is_one_line_error(tmp_path, edit, message):
    doc = json.loads(dev_with().to_json())
    doc["position_cost"]["m"] = edit(doc["position_cost"]["m"])
    p = tmp_path / "d.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=message) as exc:
        load_device(str(p))
    assert str(p) in str(exc.value) and "\n" not in str(exc.value)


def test_position_cost_object_bounds(tmp_path):
    doc = json.loads(dev_with().to_json())
    p = tmp_path / "d.json"
    for bad in ({}, [], {f"m{i}": ENTRY for i in range(1025)}):
        doc["position_cost"] = bad
        p.write_text(json.dumps(doc))
        with pytest.raises(ConfigError, match="position_cost: expected an object of 1..1024"):
            load_device(str(p))


# --- timing fit --gguf on the shared runs ---------------------------------------------------------

@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    from refsim.testing.twins import qwen36_twin
    return str(qwen36_twin(str(tmp_path_factory.mktemp("twin") / "q36.gguf")))


@pytest.fixture(scope="module")
def desktop(tmp_path_factory, twin):
    require_shared()
    from refsim.testing.recording_sets import DESKTOP, set_specs
    out = tmp_path_factory.mktemp("fit") / "desktop.json"
    assert main(["timing", "fit", *set_specs(DESKTOP), "--gguf", twin, "--out", str(out),
                 "--name", "desktop"]) == 0
    return load_device(str(out))


def test_fit_gguf_identifies_the_desktop_eps(desktop, tmp_path):
    """The desktop set with the Qwen3.6 twin: eps(2) 0.371 [0, 1.306], eps(4) 0.581 [0, 1.204]
    (docs/whatif-terms.md's table), equal at every width to what the validation prices with
    (refsim.timing.validate.eps_at, identify_device on the same runs and table)."""
    from refsim.testing.validation_inputs import validation_inputs
    from refsim.timing.validate import eps_at
    (key,) = desktop.position_cost
    assert key == "Qwen_Qwen3.6-35B-A3B-Q4_K_M.gguf"
    e2, e4 = device_eps(desktop, key, 2), device_eps(desktop, key, 4)
    assert (round(e2.value, 3), round(e2.lo, 3), round(e2.hi, 3)) == (0.371, 0.0, 1.306)
    assert (round(e4.value, 3), round(e4.lo, 3), round(e4.hi, 3)) == (0.581, 0.0, 1.204)
    host = validation_inputs(str(tmp_path)).devices["host"]
    for w in POSITION_WIDTHS:
        ref = eps_at(host, w)
        got = device_eps(desktop, key, w)
        assert (got.value, got.lo, got.hi) == pytest.approx((ref.value, ref.lo, ref.hi), rel=1e-12)
    assert desktop.position_cost[key]["n_prompt"] == 29


def test_fit_gguf_refuses_overlap_only_prefills(tmp_path, twin, capsys):
    """The phone drop-cold set has only --overlap prefills: they bound eps (0 .. 4.7), they do not
    identify it; the file gets no entry and the fit says so."""
    require_shared()
    from refsim.testing.recording_sets import PHONE_DROP, set_specs
    out = tmp_path / "phone.json"
    assert main(["timing", "fit", *set_specs(PHONE_DROP), "--gguf", twin, "--out", str(out)]) == 0
    assert load_device(str(out)).position_cost == {}
    assert "only --overlap prefills" in capsys.readouterr().err


def test_fit_gguf_key_errors(tmp_path, twin):
    require_shared()
    from refsim.testing.recording_sets import DESKTOP, set_specs
    out = tmp_path / "d.json"
    assert main(["timing", "fit", *set_specs(DESKTOP), "--gguf", f"nope.gguf={twin}",
                 "--out", str(out)]) == 1
    assert main(["timing", "fit", *set_specs(DESKTOP), "--gguf", twin, "--gguf", twin,
                 "--out", str(out)]) == 1


# --- every --device command prices with it ---------------------------------------------------------

def _json(capsys, argv):
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_commands_price_the_device_eps(desktop, tmp_path, capsys):
    """On the shared trace at 3000 MiB, --overlap: whatif's MTP d3 row, union's w = 4 column and
    timing breakeven's d3 row all use eps(4) = 0.581 from the file, and --position-cost 0.581...
    gives the same figures through the old path (the value is all that changed)."""
    require_shared()
    from refsim.testing.shared import shared_path
    trace = str(shared_path("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv"))
    dpath = tmp_path / "desktop.json"
    dpath.write_text(desktop.to_json())
    key = next(iter(desktop.position_cost))
    e4 = device_eps(desktop, key, 4).value
    base = ["--device", str(dpath), "--overlap"]
    wi = _json(capsys, ["whatif", trace, *base, "--cache-mb", "3000", "--spec",
                        "off,mtp:d=3:acceptance=0.8", "--head-ms", "20", "--json"])
    assert wi["eps_by_config"]["mtp:d=3"]["value"] == e4
    assert wi["eps_by_config"]["mtp:d=3"]["kind"] == "fitted"
    given_ = _json(capsys, ["whatif", trace, *base, "--cache-mb", "3000", "--spec",
                            "off,mtp:d=3:acceptance=0.8", "--head-ms", "20", "--json",
                            "--position-cost", repr(e4)])
    assert [r["eff_tok_s"] for r in wi["rows"]] == [r["eff_tok_s"] for r in given_["rows"]]
    be = _json(capsys, ["timing", "breakeven", trace, "--device", str(dpath), "--overlap",
                        "--cache-mb", "3000", "--draft", "1,3", "--json"])
    assert be["eps_by_draft"] == {"1": device_eps(desktop, key, 2).value, "3": e4}
    be4 = _json(capsys, ["timing", "breakeven", trace, "--device", str(dpath), "--overlap",
                         "--cache-mb", "3000", "--draft", "3", "--json", "--position-cost", repr(e4)])
    assert be["rows"][1] == be4["rows"][0]
    un = _json(capsys, ["union", trace, *base, "--cache-mb", "3000", "--window", "1,4", "--json"])
    un4 = _json(capsys, ["union", trace, *base, "--cache-mb", "3000", "--window", "1,4", "--json",
                         "--position-cost", repr(e4)])
    assert un["traces"][0]["rows"][1]["predicted_tok_s"] == un4["traces"][0]["rows"][1]["predicted_tok_s"]
    capsys.readouterr()
    assert main(["union", trace, *base, "--cache-mb", "3000", "--window", "1,4"]) == 0
    assert "eps(w) x C from the device file (w=4 0.581)" in capsys.readouterr().out


def test_a_file_without_eps_prices_as_before(tmp_path, capsys):
    """No position_cost: 0.38, the printed figures unchanged, the label says assumed."""
    require_shared()
    from refsim.testing.shared import shared_path
    trace = str(shared_path("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv"))
    d = dev_with(None, key="Qwen3-30B")
    p = tmp_path / "d.json"
    p.write_text(dataclasses.replace(d).to_json())
    a = _json(capsys, ["union", trace, "--device", str(p), "--cache-mb", "3000", "--window", "1,4",
                       "--json"])
    b = _json(capsys, ["union", trace, "--device", str(p), "--cache-mb", "3000", "--window", "1,4",
                       "--json", "--position-cost", "0.38"])
    assert a == b
    capsys.readouterr()
    assert main(["union", trace, "--device", str(p), "--cache-mb", "3000", "--window", "1,4"]) == 0
    assert "extra position 0.38 x C (assumed: the device file does not identify it)" in \
        capsys.readouterr().out


@pytest.mark.parametrize("text", ["[" * 200000 + "]" * 200000, '{"a":' * 50000 + "1" + "}" * 50000])
def test_deeply_nested_device_file_is_one_line_error(tmp_path, text):
    """A file under the 1 MiB cap nested deeper than the JSON parser's stack (a new-user find: it
    was a RecursionError traceback)."""
    p = tmp_path / "deep.json"
    p.write_text(text)
    with pytest.raises(ConfigError, match="nested too deeply") as exc:
        load_device(str(p))
    assert str(p) in str(exc.value)


def test_whatif_interval_checks_only_drafting_configurations(desktop, tmp_path, capsys):
    """off drafts nothing: --position-cost-interval is not checked against its eps (a recheck
    find: `--spec off --position-cost-interval 0,0.2` was refused); a drafting configuration's
    eps outside the interval is refused in one short line naming its width."""
    p = tmp_path / "d.json"
    p.write_text(desktop.to_json())
    from pathlib import Path
    demo = str(Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv")
    base = ["whatif", demo, "--device", str(p), "--cache-mb", "256", "--position-cost-interval", "0,0.2"]
    assert main([*base, "--spec", "off"]) == 0
    capsys.readouterr()
    assert main([*base, "--spec", "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]      # after argparse's usage lines
    assert "does not hold eps 0.58" in err and "4-position verify decode (the device file)" in err
    assert len(err) < 200


def test_run_device_says_where_eps_comes_from(desktop, tmp_path, capsys):
    """refsim run --ngram --device prints, under its device line, what priced the extra
    positions (a recheck find: only union and breakeven said it)."""
    p = tmp_path / "d.json"
    p.write_text(desktop.to_json())
    key = next(iter(desktop.compute))
    argv = ["run", "--ngram", "-n", "12", "--device", str(p), "--device-model", key]
    assert main(argv) == 0
    assert "extra position eps(w) x C from the device file (w=4 0.581) (verify decodes of 4 " \
        "positions)" in capsys.readouterr().out
    assert main([*argv, "--position-cost", "0.2"]) == 0
    assert "extra position 0.2 x C (--position-cost)" in capsys.readouterr().out
    assert main(["run", "-n", "4", "--device", str(p), "--device-model", key]) == 0
    assert "extra position" not in capsys.readouterr().out          # plain: nothing to price


def test_fit_gguf_of_another_model_is_refused(tmp_path, capsys):
    """The Qwen3-30B twin (128 experts) given for the Qwen3.6 runs (256): refused in one line
    naming the run and what it states (a recheck find: it was priced silently, eps(4) 0.503)."""
    require_shared()
    from refsim.testing.recording_sets import DESKTOP, set_specs
    from refsim.model.synth import qwen3_30b_a3b_q4_k_m_twin
    q30 = str(qwen3_30b_a3b_q4_k_m_twin(str(tmp_path / "q30.gguf")))
    assert main(["timing", "fit", *set_specs(DESKTOP), "--gguf", q30, "--out",
                 str(tmp_path / "d.json")]) == 1
    err = capsys.readouterr().err
    assert "n_expert 128, but" in err and "states n_expert=256: not the runs' model" in err
    assert not (tmp_path / "d.json").exists()


def test_fit_gguf_keeps_the_boot_notes(tmp_path, twin, capsys, monkeypatch):
    """--boot's notes (a stratum of one run) and --gguf's (no prefill figures) are both printed:
    the --gguf step used to replace the list --boot had filled."""
    require_shared()
    import refsim.timing.band as band
    from refsim.testing.recording_sets import PHONE_DROP, set_specs
    real = band.bootstrap_devices

    def with_note(runs, n_boot, seed):
        devices, notes = real(runs, n_boot, seed)
        return devices, notes + ("stratum test: one run (x.csv); its parameters' spread is not "
                                 "estimated",)
    monkeypatch.setattr(band, "bootstrap_devices", with_note)
    out = tmp_path / "phone.json"
    capsys.readouterr()
    assert main(["timing", "fit", *set_specs(PHONE_DROP), "--gguf", twin, "--boot", "2",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "stratum test: one run (x.csv)" in err
    assert "only --overlap prefills" in err
