"""``--device`` on replay, sweep, union and run: every what-if also prints predicted s/token and
tok/s from a fitted device model (docs/timing.md), and each figure is the device model's
``device_whatif`` of the command's own counters (issue 15 item 4)."""

import csv
import io
import json
from pathlib import Path

import pytest

from refsim.cli import main
from refsim.timing import DeviceModel, Param
from refsim.timing.model import PARAMS
from refsim.timing.whatif import device_whatif

DEMO = Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv"
VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
          "h": 0.1, "tail": 1.05}


@pytest.fixture
def device_file(tmp_path):
    dev = DeviceModel(params={k: Param(VALUES[k]) for k in PARAMS}, compute={"m": Param(100.0)},
                      serial_runs=3, overlap_runs=2)
    path = tmp_path / "dev.json"
    path.write_text(dev.to_json())
    return dev, str(path)


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("overlap", [False, True])
def test_replay_device_is_the_model_of_its_counters(capsys, device_file, overlap):
    dev, path = device_file
    flags = ["--device", path, "--io-threads", "2"] + (["--overlap"] if overlap else [])
    out = _json(capsys, ["replay", str(DEMO), "--cache-mb", "256", "--json", *flags])
    want = device_whatif(dev, path, out["mib_per_token"], 1.0, "m", 2, overlap)
    assert out["device"] == pytest.approx(want.as_dict())
    assert main(["replay", str(DEMO), "--cache-mb", "256", *flags]) == 0
    assert want.line() in capsys.readouterr().out


def test_sweep_device_column_and_csv(tmp_path, capsys, device_file):
    dev, path = device_file
    out_csv = tmp_path / "s.csv"
    assert main(["sweep", str(DEMO), "--cache-mb", "64,256", "--policy", "lru,lfu", "--device",
                 path, "--csv", str(out_csv)]) == 0
    assert "pred_tok/s" in capsys.readouterr().out
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert len(rows) == 4 and "predicted_tok_s" in rows[0]
    replayed = _json(capsys, ["replay", str(DEMO), "--cache-mb", "256", "--json"])
    lru256 = next(r for r in rows if r["policy"] == "lru" and float(r["budget_mib"]) == 256)
    want = device_whatif(dev, path, replayed["mib_per_token"], 1.0, "m", 4, False)
    assert float(lru256["predicted_tok_s"]) == pytest.approx(want.predicted_tok_s, abs=5e-4)
    # without --device the engine's CSV columns only
    assert main(["sweep", str(DEMO), "--cache-mb", "64", "--policy", "lru", "--csv", str(out_csv)]) == 0
    assert "predicted_tok_s" not in out_csv.read_text()


def test_union_device_column_counts_w_tokens_per_decode(capsys, device_file):
    dev, path = device_file
    assert main(["union", str(DEMO), "--cache-mb", "256", "--window", "1,3", "--device", path]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    for w, line in zip((1, 3), lines[-2:]):
        f = line.split()
        mib_tok = float(f[8])
        want = device_whatif(dev, path, mib_tok, float(w), "m", 4, False).predicted_tok_s
        assert float(f[-1]) == pytest.approx(want, rel=2e-3)    # MiB/token printed to 0.01


def test_device_flag_errors(tmp_path, capsys, device_file):
    _, path = device_file
    assert main(["union", str(DEMO), "--device", path]) == 2          # no budget: usage
    assert "--device without --cache-mb" in capsys.readouterr().err
    assert main(["replay", str(DEMO), "--cache-mb", "8", "--device", path,
                 "--device-model", "other"]) == 1
    assert "not among the fitted runs" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["replay", str(DEMO), "--cache-mb", "8", "--device", str(bad)]) == 1
    assert "written by refsim timing fit" in capsys.readouterr().err
    assert main(["replay", str(DEMO), "--cache-mb", "8", "--policy", "lfu", "--device", path]) == 2


def test_run_device_json(tmp_path, capsys, device_file, builtin_model_cache):
    dev, path = device_file
    csv_path = tmp_path / "run.csv"
    out = _json(capsys, ["run", "-n", "4", "--json", "--device", path, "--io-threads", "2",
                         "--csv", str(csv_path)])
    want = device_whatif(dev, path, out["mib_per_token"], 1.0, "m", 2, False)
    assert out["device"] == pytest.approx(want.as_dict())
    # the metrics CSV carries the same device's times, labelled predicted; the preamble states the
    # lanes they assume. Serial and plain decoding: the mean of the per-decode times (linear in
    # the reads) is the what-if's s/token at the mean read
    text = csv_path.read_text()
    assert "# times=predicted device=dev.json" in text and " io_threads=2 " in text
    summary = dict(kv.split("=") for kv in text.splitlines()[-1].split()[2:])
    assert float(summary["tok/s"]) == pytest.approx(want.predicted_tok_s, abs=5e-4)
