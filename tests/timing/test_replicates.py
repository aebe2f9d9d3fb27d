"""Bootstrap refits stored in the device file (``timing fit --boot N``), read back as untrusted
input, and carried into ``refsim whatif``'s band (issue 29 item 3: the parameters' uncertainty,
bootstrap over runs)."""

import json

import numpy as np
import pytest

from refsim.cli import main
from refsim.errors import ConfigError
from refsim.testing.shared import require_shared
from refsim.timing import DeviceModel, Param, load_device
from refsim.timing.band import bootstrap_devices, tok_s_band
from refsim.timing.model import PARAMS


def dev_with(reps=()) -> DeviceModel:
    params = {k: Param({"tail": 1.0, "a": 1.0, "m1": 0.2}.get(k, 0.0), 0.01, True) for k in PARAMS}
    return DeviceModel(params=params, compute={"m": Param(100.0, 1.0)}, name="t", serial_runs=2,
                       overlap_runs=0, replicates=tuple(reps))


def rep(c=100.0, a=1.0):
    return {"params": {k: {"tail": 1.0, "a": a, "m1": 0.2}.get(k, 0.0) for k in PARAMS},
            "compute_ms": {"m": c}}


def test_replicates_round_trip_and_devices(tmp_path):
    d = dev_with([rep(90.0, 1.1), rep(110.0, 0.9)])
    p = tmp_path / "d.json"
    p.write_text(d.to_json())
    back = load_device(str(p))
    assert back == d
    devs = back.replicate_devices()
    assert [x.compute["m"].value for x in devs] == [90.0, 110.0]
    assert [x.value("a") for x in devs] == [1.1, 0.9]
    assert all(x.replicates == () and x.params["a"].identified for x in devs)
    p.write_text(dev_with().to_json())
    assert "replicates" not in json.loads(p.read_text())


@pytest.mark.parametrize("edit, message", [
    (lambda r: [], r"replicates: expected a list of 1\.\.2000"),
    (lambda r: {"a": 1}, r"replicates: expected a list"),
    (lambda r: [r[0]] * 2001, r"replicates: expected a list of 1\.\.2000"),
    (lambda r: [{"params": r[0]["params"]}], r"replicates\[0\]: expected an object with keys"),
    (lambda r: [{**r[0], "params": {**r[0]["params"], "a": "x"}}], r"replicates\[0\]\.params\.a"),
    (lambda r: [{**r[0], "params": {**r[0]["params"], "h": 2.0}}], r"params\.h: expected 0\.\.1"),
    (lambda r: [{**r[0], "params": {**r[0]["params"], "tail": 50.0}}], r"params\.tail"),
    (lambda r: [{**r[0], "params": {k: v for k, v in r[0]["params"].items() if k != "a"}}],
     r"params: expected exactly the keys"),
    (lambda r: [{**r[0], "compute_ms": {"other": 100.0}}], r"compute_ms: expected the keys"),
    (lambda r: [{**r[0], "compute_ms": {"m": 0.0}}], r"compute_ms\['m'\]: expected > 0"),
    (lambda r: [{**r[0], "compute_ms": {"m": float("inf")}}], r"expected a finite number"),
])
def test_bad_replicates_are_one_line_errors(tmp_path, edit, message):
    doc = json.loads(dev_with([rep()]).to_json())
    doc["replicates"] = edit(doc["replicates"])
    p = tmp_path / "d.json"
    p.write_text(json.dumps(doc, allow_nan=True))
    with pytest.raises(ConfigError, match=message) as exc:
        load_device(str(p))
    assert str(p) in str(exc.value) and "\n" not in str(exc.value)


def test_band_widens_by_the_stored_spread():
    """With replicates equal to the point fit the band is the point's (no noise, no eps); with
    spread floors 90 and 110 ms it spans their predictions (1000 / (C + a x 10 + m1 x 10))."""
    d = dev_with([rep(90.0), rep(110.0)])

    def predict(dev):
        return lambda e: 1000.0 / (dev.compute["m"].value + dev.value("a") * 10 + dev.value("m1") * 10)
    same = tok_s_band(predict, d, dev_with([rep(), rep()]).replicate_devices())
    assert same.lo == same.hi == same.point == pytest.approx(1000.0 / 112.0)
    b = tok_s_band(predict, d, d.replicate_devices())
    assert b.lo == pytest.approx(1000.0 / 122.0, rel=0.02) and b.hi == pytest.approx(1000.0 / 102.0, rel=0.02)


@pytest.fixture(scope="module")
def desktop_boot(tmp_path_factory):
    require_shared()
    from refsim.testing.recording_sets import DESKTOP, set_specs
    out = tmp_path_factory.mktemp("boot") / "d.json"
    assert main(["timing", "fit", *set_specs(DESKTOP), "--boot", "20", "--seed", "3",
                 "--out", str(out)]) == 0
    return out


def test_fit_boot_stores_the_bootstrap(desktop_boot):
    """The stored refits are refsim.timing.band.bootstrap_devices' on the same runs and seed."""
    from refsim.testing.recording_sets import DESKTOP, set_specs
    from refsim.timing import load_runs
    dev = load_device(str(desktop_boot))
    runs, _ = load_runs(set_specs(DESKTOP), 50, skip_unmodelled=True)
    ref, _ = bootstrap_devices(runs, 20, 3)
    assert len(dev.replicates) == 20
    assert [DeviceModel.replicate_doc(r) for r in ref] == list(dev.replicates)


def test_whatif_band_carries_the_stored_spread(desktop_boot, tmp_path, capsys):
    require_shared()
    from refsim.testing.shared import shared_path
    trace = str(shared_path("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv"))
    bare = tmp_path / "bare.json"
    doc = json.loads(desktop_boot.read_text())
    del doc["replicates"]
    bare.write_text(json.dumps(doc))
    argv = ["whatif", trace, "--cache-mb", "3000", "--spec", "off,ngram:d=3:m=3:acceptance=0.44:"
            "coverage=0.15", "--overlap", "--json", "--noise-pct", "0", "--position-cost", "0.4",
            "--position-cost-interval", "0.4,0.4"]

    def rows(path):
        capsys.readouterr()
        assert main([*argv, "--device", str(path)]) == 0
        return json.loads(capsys.readouterr().out)["rows"]
    a, b = rows(bare), rows(desktop_boot)
    for x, y in zip(a, b):
        assert x["eff_tok_s"] == y["eff_tok_s"]                     # the point is the full fit's
        assert x["eff_tok_s_lo"] == x["eff_tok_s"] == x["eff_tok_s_hi"]   # nothing uncertain
        assert y["eff_tok_s_lo"] < y["eff_tok_s"] < y["eff_tok_s_hi"]     # the refits' spread
    text_argv = [x for x in argv if x != "--json"]
    capsys.readouterr()
    assert main([*text_argv, "--device", str(desktop_boot)]) == 0
    assert "parameters' spread: 20 bootstrap refits stored in the device file" in capsys.readouterr().out
    capsys.readouterr()
    assert main([*text_argv, "--device", str(desktop_boot), "--baseline",
                 str(shared_path("real-runs", "desktop-2026-07-24-qwen36", "pc-I-c5000-overlap.csv"))]) == 0
    assert "(each re-calibrated on --baseline)" in capsys.readouterr().out
    assert np.isfinite(b[0]["eff_tok_s"])
