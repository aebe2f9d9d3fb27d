"""``refsim layout``: the before/after table on a synthetic model, on the shared Qwen3-30B trace
(skips without $REFSIM_SHARED) and on the trained tiny MoE (docs/io.md, "File layout")."""

import json
from pathlib import Path

import numpy as np
import pytest

from refsim.cli import main
from refsim.model import qwen3_30b_a3b_q4_k_m_twin
from refsim.testing.shared import require_shared
from tests.io.test_replay_io_cli import model_and_trace  # noqa: F401  (the module fixture)

REPO = Path(__file__).resolve().parents[2]


def layout_json(capsys, argv):
    assert main(["layout"] + argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_layout_table_and_permutation(model_and_trace, tmp_path, capsys):  # noqa: F811
    d, model, lay, budget, recs = model_and_trace
    mib = repr(budget / 2**20)
    argv = [str(d / "m.gguf"), str(d / "t.csv"), "--cache-mb", mib]
    out = layout_json(capsys, argv + ["--out", str(tmp_path / "perm.json")])
    before, after = out["rows"]
    assert (before["layout"], after["layout"]) == ("file", "co-activation")
    # 9 plain decodes: 4 fit, 5 held apart, one token each; the layout moves no read
    assert out["fit_decodes"] == 4 and before["eval_decodes"] == after["eval_decodes"] == 5
    assert before["tokens"] == 5 and before["slices_per_token"] == after["slices_per_token"]
    assert 3 * sum(r.lookups - r.hits for r in recs[5:]) == 5 * before["slices_per_token"]
    for row in (before, after):
        assert row["requests_per_token"] <= row["slices_per_token"]
    doc = json.loads((tmp_path / "perm.json").read_text())
    assert doc["format"] == "refsim-layout v1"
    assert [sorted(r) for r in doc["order"]] == [list(range(lay.n_expert))] * lay.n_layer
    # --merge-gap past the file: one request per layer batch, whatever the order
    big = layout_json(capsys, argv + ["--merge-gap", str(2**31 - 1)])
    assert big["rows"][0]["requests_per_token"] == big["rows"][1]["requests_per_token"]
    assert big["rows"][0]["requests_per_token"] <= before["requests_per_token"]
    text = main(["layout"] + argv)
    assert text == 0 and "trace,layout,eval_decodes" in capsys.readouterr().out


@pytest.mark.parametrize("extra,code,text", [
    (["--fit-turns", "0"], 2, "--fit-turns and --eval-turns go together"),
    (["--fit-turns", "0", "--eval-turns", "0,1"], 2, "held apart"),
    (["--fit-turns", "0", "--eval-turns", "1"], 1, "no decode to evaluate on"),
])
def test_layout_refusals(model_and_trace, capsys, extra, code, text):  # noqa: F811
    d, *_ = model_and_trace
    assert main(["layout", str(d / "m.gguf"), str(d / "t.csv"), "--cache-mb", "1"] + extra) == code
    err = capsys.readouterr().err
    assert text in err and "Traceback" not in err


@pytest.mark.parametrize("extra,text", [(["--fit-fraction", "1.5"], "expected a number in (0, 1)"),
                                        (["--merge-gap", "-1"], "--merge-gap")])
def test_layout_usage_errors(model_and_trace, capsys, extra, text):  # noqa: F811
    d, *_ = model_and_trace
    with pytest.raises(SystemExit) as exc:
        main(["layout", str(d / "m.gguf"), str(d / "t.csv"), "--cache-mb", "1"] + extra)
    assert exc.value.code == 2 and text in capsys.readouterr().err


def test_layout_refuses_to_overwrite_an_input_and_bad_files(model_and_trace, tmp_path, capsys):  # noqa: F811
    d, *_ = model_and_trace
    base = ["layout", str(d / "m.gguf"), str(d / "t.csv"), "--cache-mb", "1"]
    assert main(base + ["--out", str(d / "t.csv")]) != 0
    assert "Traceback" not in capsys.readouterr().err
    assert (d / "t.csv").read_text().startswith("#") or (d / "t.csv").stat().st_size > 0
    bad = tmp_path / "bad.route.csv"
    bad.write_text("not a trace\n")
    assert main(["layout", str(d / "m.gguf"), str(bad), "--cache-mb", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.route.csv" in err[0]
    assert main(["layout", str(bad), str(d / "t.csv"), "--cache-mb", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.route.csv" in err[0]


@pytest.fixture(scope="module")
def qwen_twin(tmp_path_factory):
    return qwen3_30b_a3b_q4_k_m_twin(tmp_path_factory.mktemp("qwen_layout") / "twin.gguf")


@pytest.mark.parametrize("mib,file_req,coact_req", [
    (2000, 375.8125, 306.75), (4000, 168.25, 153.5625), (8000, 25.359375, 25.359375)])
def test_shared_trace_table(qwen_twin, capsys, mib, file_req, coact_req):
    trace = require_shared("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")
    out = layout_json(capsys, [str(qwen_twin), str(trace), "--cache-mb", str(mib),
                               "--data-start", "38400"])
    before, after = out["rows"]
    assert out["fit_decodes"] == 64 and before["eval_decodes"] == 64
    assert before["requests_per_token"] == file_req and after["requests_per_token"] == coact_req
    assert before["slices_per_token"] == after["slices_per_token"]


def test_trained_moe_table(tmp_path, capsys):
    model = REPO / "models" / "tiny-moe-q8_0.gguf"
    trace = tmp_path / "tiny.route.csv"
    assert main(["run", str(model), "--prompt", "import os", "-n", "96", "--route-trace",
                 str(trace), "--quiet"]) == 0
    capsys.readouterr()
    out = layout_json(capsys, [str(model), str(trace), "--cache-mb", "0.5"])
    before, after = out["rows"]
    assert out["fit_decodes"] == 48 and before["eval_decodes"] == 48
    assert before["slices_per_token"] == after["slices_per_token"] == 48.0
    assert before["requests_per_token"] == 43.875 and after["requests_per_token"] == 17.625
    assert np.isclose(before["window_mib_per_token"], 0.95849609375)
    assert np.isclose(after["window_mib_per_token"], 0.87890625)


def test_shared_trace_device_by_requests(qwen_twin, tmp_path, capsys):
    """--device with the phone's request term (docs/timing.md): the merged layout has fewer
    requests but a busier lane, and the fitted term charges nothing per round (c held at 0)."""
    trace = require_shared("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")
    runs = require_shared("real-runs", "phone-2026-07-12-cache-lanes")
    args = []
    for f in sorted(runs.glob("*.csv")):
        if "mmap" in f.name:
            continue
        model = f.name.split("_")[0]
        args.append(f"{f}@model={model},io_threads={2 if '_l2' in f.name else 4}")
    device = tmp_path / "phone.json"
    assert main(["timing", "fit", *args, "--io-model", "requests", "--out", str(device),
                 "--name", "phone"]) == 0
    capsys.readouterr()
    out = layout_json(capsys, [str(qwen_twin), str(trace), "--cache-mb", "2000", "--data-start",
                               "38400", "--device", str(device), "--device-model", "qwen"])
    before, after = out["rows"]
    assert before["time_model"] == after["time_model"] == "requests"
    assert round(before["predicted_ms_per_token"], 2) == 368.92
    assert round(after["predicted_ms_per_token"], 2) == 370.99
    over = layout_json(capsys, [str(qwen_twin), str(trace), "--cache-mb", "2000", "--data-start",
                                "38400", "--device", str(device), "--device-model", "qwen",
                                "--overlap"])
    assert over["rows"][0]["time_model"] == "per_mib"
