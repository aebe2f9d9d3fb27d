"""The shared Qwen3-30B trace: every decode's windows equal the read_bytes the engine recorded
for that token (docs/io.md, "The shared trace, byte for byte"). Skips without $REFSIM_SHARED."""

import csv
import json

import numpy as np
import pytest

from refsim import MIB
from refsim.cli import main
from refsim.io.layout import layout_from_model
from refsim.io.requests import IoConfig, IoTally
from refsim.model import open_model, qwen3_30b_a3b_q4_k_m_twin
from refsim.studies.replay import replay_trace
from refsim.testing.shared import require_shared

DATA_START = 38400
"""A data start of the real file's phase: 1536 modulo 4096 (docs/io.md; any such value gives the
same windows)."""


@pytest.fixture(scope="module")
def recorded():
    from refsim.telemetry.metrics_reader import read_metrics
    path = require_shared("real-traces", "bmoe-qwen3-30b-a3b", "qwen.metrics")
    return read_metrics(path).column("read_bytes")


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    return qwen3_30b_a3b_q4_k_m_twin(tmp_path_factory.mktemp("qwen") / "twin.gguf")


@pytest.fixture(scope="module")
def replayed(qwen_trace):
    return replay_trace(qwen_trace, 4000 * MIB)


def decode_windows(qwen_trace, replayed, twin, data_start, overlap=True):
    lay = layout_from_model(open_model(twin), data_start=data_start)
    tally = IoTally(lay, IoConfig(4, overlap))
    tally.add_part(qwen_trace, replayed.parts[0])
    kinds = [e.kind.name for e in qwen_trace.events]
    return np.array([w for (w, _), k in zip(tally.pending, kinds) if k == "PLAIN"]), tally


def test_every_decode_window_equals_the_engines_read_bytes(qwen_trace, replayed, twin, recorded):
    got, tally = decode_windows(qwen_trace, replayed, twin, DATA_START)
    assert got.size == recorded.size == 128
    assert got.tolist() == recorded.tolist()                  # all 128 rows, byte for byte
    # the slices sit 0.41-0.45 % below (a 4 KiB block per slice), and 512 bytes less on step 12,
    # the one decode that read the file's last slice (layer 47, expert 127)
    slices = np.array([r.read_bytes for r in replayed.records if r.kind.name == "PLAIN"])
    gap = (recorded - slices) / slices
    assert 0.0041 < gap.min() and gap.max() < 0.0045
    n_req = np.array([n for (_, n), e in zip(list(tally.pending), qwen_trace.events)
                      if e.kind.name == "PLAIN"])
    assert ((recorded - slices) == 4096 * n_req - 512 * (np.arange(1, 129) == 12)).all()


@pytest.mark.parametrize("phase, wrong", [(0, 128), (1024, 128), (2048, 128), (3072, 128),
                                          (384, 1), (2560, 1)])
def test_other_data_phases_disagree_with_the_record(qwen_trace, replayed, twin, recorded, phase,
                                                    wrong):
    # a phase that puts some layer's tensors on a block boundary misses 4 KiB per slice there (all
    # 128 decodes); any other one moves only the end of the file (the step-12 decode)
    got, _ = decode_windows(qwen_trace, replayed, twin, 9 * 4096 + phase, overlap=False)
    assert int((got != recorded).sum()) == wrong


def test_replay_cli_reports_windows_requests_and_lanes(qwen_trace_path, twin, recorded, tmp_path,
                                                       capsys):
    out_csv, req_csv = tmp_path / "d.csv", tmp_path / "r.csv"
    assert main(["replay", str(qwen_trace_path), "--cache-mb", "4000", "--model", str(twin),
                 "--data-start", str(DATA_START), "--overlap", "--json", "--csv", str(out_csv),
                 "--requests", str(req_csv)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["decode_window_read_bytes"] == int(recorded.sum())
    assert round(d["decode_window_read_bytes"] / MIB, 1) == 20023.9       # the engine's read_MiB
    assert round(d["window_mib_per_token"], 2) == 156.44                 # "156.44 MiB/token"
    assert d["decode_requests"] == 21801 and d["requests"] == 29787
    assert d["requests_per_token"] == 21801 / 128
    assert d["bytes_per_request"] == d["decode_window_read_bytes"] / 21801
    assert d["io"]["block_bytes"] == 4096 and d["io"]["lanes"] == 4 and d["io"]["overlap"]
    assert d["read_bytes"] == 28535648256 == d["io"]["slice_read_bytes"]   # unchanged, beside
    rows = list(csv.DictReader(out_csv.open()))
    assert [int(r["window_read_bytes"]) for r in rows if r["kind"] == "plain"] == recorded.tolist()
    assert sum(int(r["requests"]) for r in rows) == 29787
    reqs = list(csv.DictReader(req_csv.open()))
    assert len(reqs) == 29787
    assert sum(int(r["window"]) for r in reqs) == d["window_read_bytes"]
    assert {r["lane"] for r in reqs} == {"0", "1", "2", "3"}
    # one request per missed slice: 3 per missed expert (Qwen3 splits gate, up, down)
    assert sum(int(r["bytes"]) for r in reqs) == d["read_bytes"]


def test_replay_text_and_stream_agree(qwen_trace_path, twin, tmp_path, capsys):
    args = ["replay", str(qwen_trace_path), "--cache-mb", "4000", "--model", str(twin),
            "--data-start", str(DATA_START)]
    assert main(args + ["--csv", str(tmp_path / "a.csv")]) == 0
    text = capsys.readouterr().out
    assert ("windows: 20023.9 MiB in decode (+0.427% over the slices), 156.44 MiB/token; 170.3 "
            "requests/token of 940.5 KiB; block 4096 B, O_DIRECT, 4 lanes serial: busiest lane "
            in text)
    assert main(args + ["--stream", "--csv", str(tmp_path / "b.csv")]) == 0
    assert capsys.readouterr().out == text
    assert (tmp_path / "a.csv").read_text() == (tmp_path / "b.csv").read_text()


def test_replay_device_with_the_request_term(qwen_trace_path, twin, tmp_path, capsys):
    base = require_shared("real-runs")
    specs = [f"{f}@model={'qwen' if f.name.startswith('qwen') else 'gemma'},"
             f"io_threads={2 if '_l2' in f.name else 4}"
             for f in sorted(base.glob("phone-2026-07-12-cache-lanes/*.csv"))]
    dev = tmp_path / "phone.json"
    assert main(["timing", "fit", *specs, "--io-model", "requests", "--out", str(dev)]) == 0
    capsys.readouterr()
    argv = ["replay", str(qwen_trace_path), "--cache-mb", "4000", "--model", str(twin),
            "--data-start", str(DATA_START), "--device", str(dev), "--device-model", "qwen",
            "--io-threads", "8"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("  io per MiB (leave-one-out median |error| 7.4% by requests, "
                                "6.4% per MiB); by requests and lanes: ")
    assert main(argv + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    io = d["device_io"]
    assert io["used"] == "per_mib" and d["device"] == io["per_mib"]
    # at 8 lanes the batches' busiest lanes read 38.4 MiB/token, not 156.4 / 8: the request term
    # predicts less from the extra lanes than the per-MiB slope
    assert io["requests"]["predicted_tok_s"] < io["per_mib"]["predicted_tok_s"]
    assert round(d["io"]["lane_bytes_per_token"] / MIB, 2) == 38.41
    # a device whose request term predicted better on its runs uses it for the headline figures
    doc = json.loads(dev.read_text())
    doc["requests"]["loo"]["requests"]["median_pct"] = 1.0
    better = tmp_path / "better.json"
    better.write_text(json.dumps(doc))
    argv[argv.index(str(dev))] = str(better)
    assert main(argv + ["--json"]) == 0
    d2 = json.loads(capsys.readouterr().out)
    assert d2["device_io"]["used"] == "requests"
    assert d2["device"] == d2["device_io"]["requests"]
    assert d2["device"]["predicted_tok_s"] == io["requests"]["predicted_tok_s"]
    # under --overlap the request term does not apply
    assert main(argv + ["--overlap"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "  io: the request term describes serial reads; under --overlap the stall is per MiB")
