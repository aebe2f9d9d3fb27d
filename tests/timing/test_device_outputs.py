"""The device model's outputs beyond the what-if lines (issue 15 items 4-5): ``refsim memory
--device``, refsim's own metrics CSV and BMOE_DONE with predicted times (and the metrics reader's
refusal to treat them as measurements), and the ``timing breakeven --plot`` figure. Every figure is
hand-worked from the model's rules (docs/timing.md, "The rules")."""

import pytest

from refsim import MIB
from refsim.cli import main
from refsim.errors import ConfigError
from refsim.model import open_model, write_synthetic
from refsim.timing import DeviceModel, Param
from refsim.timing.model import PARAMS

# the hand-worked device of tests/timing/test_timing.py, tail 1: C = 100 ms/token
VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
          "h": 0.1, "tail": 1.0}


def device(values=VALUES) -> DeviceModel:
    return DeviceModel(params={k: Param(v) for k, v in values.items()}, compute={"m": Param(100.0)},
                       serial_runs=2, overlap_runs=2)


@pytest.fixture
def device_file(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(device().to_json())
    return str(path)


@pytest.fixture(scope="module")
def q3(tmp_path_factory):
    """Synthetic qwen3moe: 2 layers x k = 2 x 24576 B per expert entry -> T = 98304 B = 0.09375 MiB."""
    path = write_synthetic(tmp_path_factory.mktemp("q3") / "q3.gguf", arch="qwen3moe")
    assert open_model(path).t_bytes() == 98304
    return path


# --- refsim memory --device ------------------------------------------------------------------

def test_memory_whatif_hand_worked():
    from refsim.timing.whatif import memory_whatif
    t = 0.09375
    # serial, cache on, 4 lanes: t(x) = (100 + 5 + 0.2 x) + (3 + x (1 + 0.5/4)) = 108 + 1.325 x ms
    cases = memory_whatif(device(), "d", "m", t, 4, False, 50.0)
    assert [c.case for c in cases] == ["all hits", "hit 50%", "all misses"]
    assert [c.mib_per_token for c in cases] == [0.0, 0.046875, 0.09375]
    ms = [c.whatif.ms_per_decode for c in cases]
    assert ms == pytest.approx([108.0, 108.062109375, 108.12421875], abs=1e-12)
    assert cases[0].whatif.predicted_tok_s == pytest.approx(1000 / 108.0)
    # --overlap: cpu = 105 + 0.3 x; stall = max(0, 2 + 0.8 x - 0.1 * 100) = 0 at these reads
    (hit, miss) = memory_whatif(device(), "d", "m", 20.0, 4, True)
    assert hit.whatif.ms_per_decode == pytest.approx(105.0)
    # x = 20: cpu = 105 + 6 = 111, stall = 2 + 16 - 10 = 8 -> 119 ms
    assert miss.whatif.ms_per_decode == pytest.approx(119.0)
    with pytest.raises(ConfigError, match="--hit-pct: expected 0..100"):
        memory_whatif(device(), "d", "m", t, 4, False, 101.0)


def test_cli_memory_device(q3, device_file, capsys):
    assert main(["memory", q3, "--device", device_file, "--hit-pct", "50"]) == 0
    out = capsys.readouterr().out
    assert "predicted, not measured" in out and "4 lanes, serial, compute floor of m" in out
    assert "0.1080 s/token, 9.259 tok/s" in out             # 108 ms
    assert "0.1081 s/token, 9.249 tok/s" in out             # 108.124 ms: every expert a miss
    assert "hit 50%:" in out and "the hit rate is a trace's" in out
    # a budget that holds every expert (2 layers x 8 experts x 24 KiB = 0.375 MiB): reads 0 when warm
    assert main(["memory", q3, "--device", device_file, "--ram-mb", "100000"]) == 0
    assert "holds the whole streamed set" in capsys.readouterr().out
    # without --device nothing is predicted
    assert main(["memory", q3]) == 0
    assert "predicted" not in capsys.readouterr().out


def test_cli_memory_device_flag_errors(q3, device_file, capsys):
    assert main(["memory", q3, "--hit-pct", "50"]) == 2
    assert "--hit-pct without --device" in capsys.readouterr().err
    assert main(["memory", q3, "--overlap"]) == 2
    assert "--overlap without --device" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:                 # memory predicts plain decoding only
        main(["memory", q3, "--device", device_file, "--position-cost", "0.2"])
    assert exc.value.code == 2 and "unrecognized arguments: --position-cost" in capsys.readouterr().err
    assert main(["memory", q3, "--device", device_file, "--device-model", "x"]) == 1
    assert "not among the fitted runs" in capsys.readouterr().err


# --- refsim's own telemetry with predicted times ---------------------------------------------

def _fake_run():
    """Two decodes with a cache: a plain one reading 10 MiB, then a verify of 1 + 2 drafts (one
    accepted: 2 tokens) reading 41 MiB, 1 MiB of it the draft source's (outside the decode)."""
    from types import SimpleNamespace

    from refsim.events import DecodeKind
    from refsim.spec.loop import StepRecord
    steps = [StepRecord(DecodeKind.PLAIN, 8, 0, 0, 1, 1, False, 0.5, 0.0, 0.01, 10 * MIB, 4, 1, 20, 5),
             StepRecord(DecodeKind.VERIFY, 9, 2, 1, 2, 2, False, 0.7, 0.02, 0.03, 41 * MIB, 8, 2, 28,
                        7, draft_read_bytes=MIB)]
    return SimpleNamespace(steps=steps, cache=SimpleNamespace(budget_bytes=8 * MIB), n_predict=3,
                           events=[], spec="ngram", draft_max=2)


def _fake_stats():
    from refsim.telemetry import RunStats
    return RunStats(spec="ngram", draft_max=2, n_predict=3, n_prompt=8, tokens=3, decodes=2,
                    verify_decodes=1, drafted=2, accepted=1, drafted_steps=1, prefill_s=0.25,
                    decode_s=1.2, draft_s=0.02, loop_overhead_s=0.04, has_cache=True, lookups=28,
                    hits=7, read_bytes=51 * MIB, prefill_read_bytes=0, resident_bytes=8 * MIB,
                    budget_bytes=8 * MIB, evictions=0, rereads=0, token_demand_bytes=0,
                    layer_demand_bytes=0, n_past=11, load_s=0.5)


def _times(overlap):
    from refsim.timing.whatif import predicted_run_times
    return predicted_run_times(device({**VALUES, "tail": 1.1}), "dev.json", _fake_run(), "m", 4,
                               overlap, 0.5)


def test_predicted_run_times_hand_worked():
    from refsim.timing.breakeven import decode_ms
    # serial, 4 lanes, eps 0.5, tail 1.1. decode 1: x = 10, w = 1: mgmt 5 + 2 = 7, compute 100,
    # io 3 + 10 * 1.125 = 14.25 -> wall 121.25. decode 2: x = 41 - 1 = 40, w = 3: mgmt 5 + 8 = 13,
    # compute 100 + 0.5 * 100 * 2 = 200, io 3 + 45 = 48 -> 261. Each x 1.1.
    t = _times(False)
    assert t.mgmt_ms.tolist() == pytest.approx([7.7, 14.3])
    assert t.compute_ms.tolist() == pytest.approx([110.0, 220.0])
    assert t.io_ms.tolist() == pytest.approx([15.675, 52.8])
    assert t.stall_ms.tolist() == [0.0, 0.0]
    assert t.wall_ms.tolist() == pytest.approx([133.375, 287.1])
    dev = device({**VALUES, "tail": 1.1})
    assert t.wall_ms[1] == pytest.approx(decode_ms(dev, 40.0, 3, "m", 4, False, True, 0.5))
    # --overlap: compute adds kappa x (0.1 x); stall = max(0, 2 + 0.8 x - 0.1 * 100):
    # decode 1: 101 + 7 + 0 = 108; decode 2: 204 + 13 + 24 = 241. Each x 1.1.
    t = _times(True)
    assert t.compute_ms.tolist() == pytest.approx([111.1, 224.4])
    assert t.stall_ms.tolist() == pytest.approx([0.0, 26.4])
    assert t.wall_ms.tolist() == pytest.approx([118.8, 265.1])
    assert t.io_ms.tolist() == pytest.approx([15.675, 52.8])      # serial flash time, for reference


def test_metrics_csv_with_predicted_times(tmp_path):
    from refsim.telemetry import MetricsPreamble, format_metrics_csv, read_metrics
    text = format_metrics_csv(_fake_run(), _fake_stats(), MetricsPreamble(), _times(False))
    lines = text.splitlines()
    assert lines[5] == "# times=predicted device=dev.json"
    # wall, io, compute, ..., stall, mgmt on a group's first row; 0 after it; the simulator's loop
    # overhead and drafting seconds are 0, never mixed in
    assert lines[7].startswith("1,3,133.375,15.675,110.000,10485760,")
    f = lines[8].split(",")
    assert f[2:5] == ["287.100", "52.800", "220.000"] and f[7:9] == ["0.000", "14.300"]
    assert f[22] == "0.000" and f[23] == "2" and f[24] == "0.000"
    assert lines[9].split(",")[2:5] == ["0.000", "0.000", "0.000"]
    summary = dict(kv.split("=") for kv in lines[10].split()[2:])
    # s/tok = (133.375 + 287.1) / 3 ms = 0.140158 s; tok/s = 3 / 0.420475 = 7.1348;
    # io_s = 0.068475; compute 0.330 / 3; io 0.068475 / 3 = 0.0228; mgmt 0.022 / 3 = 0.0073
    assert (summary["s/tok"], summary["tok/s"], summary["io_s"]) == ("0.140", "7.135", "0.07")
    assert (summary["compute_s/tok"], summary["io_s/tok"], summary["mgmt_s/tok"]) == \
        ("0.110", "0.023", "0.007")
    assert (summary["prefill_s"], summary["load_s"], summary["loop_overhead_s/tok"],
            summary["mtp_draft_s/tok"]) == ("0.000", "0.000", "0.0000", "0.0000")
    # the reader says whose predictions they are; without times nothing is flagged
    path = tmp_path / "pred.csv"
    path.write_text(text)
    assert read_metrics(path).predicted_by == "dev.json"
    plain = tmp_path / "meas.csv"
    plain.write_text(format_metrics_csv(_fake_run(), _fake_stats(), MetricsPreamble()))
    assert read_metrics(plain).predicted_by is None
    assert "times=" not in plain.read_text()
    assert plain.read_text().splitlines()[6].startswith("1,3,500.000,0.000,500.000,")  # measured


def test_done_line_with_predicted_times():
    import json

    from refsim.telemetry import done_line
    line = done_line(_fake_stats(), times=_times(False))
    doc = json.loads(line[len("BMOE_DONE "):])
    assert list(doc)[-2:] == ["times", "device"] and doc["times"] == "predicted"
    assert doc["device"] == "dev.json"
    assert '"tok_s":7.135' in line and '"compute_s_tok":0.1100' in line
    assert '"io_s_tok":0.0228' in line and '"mgmt_s_tok":0.0073' in line
    assert '"prefill_s":0.000' in line and '"mtp_draft_s_tok":0.0000' in line
    measured = done_line(_fake_stats())
    assert '"times"' not in measured and '"tok_s":2.500' in measured and '"io_s_tok":0.0000' in measured


def test_readers_refuse_or_flag_predicted_times(tmp_path, capsys, device_file):
    from refsim.telemetry import MetricsPreamble, format_metrics_csv
    text = format_metrics_csv(_fake_run(), _fake_stats(), MetricsPreamble(), _times(False))
    path = tmp_path / "pred.csv"
    path.write_text(text)
    for argv in (["timing", "fit", str(path), str(path) + "@model=m", "--out", str(tmp_path / "d.json")],
                 ["timing", "predict", device_file, f"{path}@model=m"],
                 ["timing", "validate", str(path), "--trim", "0"]):
        assert main(argv) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "predictions of device dev.json" in err[0] and "circular" in err[0]
    assert main(["bench", str(path), "--trim", "0"]) == 0
    cap = capsys.readouterr()
    assert "pred.csv [predicted: dev.json]" in cap.out and "not measurements" in cap.err
    bad = tmp_path / "bad.csv"
    bad.write_text(text.replace("times=predicted", "times=measured"))
    assert main(["bench", str(bad)]) == 1
    assert "bad.csv:6: preamble times='measured', expected 'predicted'" in capsys.readouterr().err


# --- timing breakeven --plot -------------------------------------------------------------------

def test_breakeven_plot_shows_the_table(tmp_path, capsys, device_file):
    """The figure's series are the table's rows (and the band its rows at eps 0.2 and 0.4)."""
    import json
    from pathlib import Path
    pytest.importorskip("matplotlib")
    from refsim.studies.union import union_study
    from refsim.timing.breakeven import breakeven
    from refsim.timing.plot import plot_breakeven
    from refsim.trace import read_trace
    demo = Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv"
    argv = ["timing", "breakeven", str(demo), "--device", device_file, "--cache-mb", "256",
            "--draft", "1..3"]
    assert main(argv + ["--json"]) == 0
    table = json.loads(capsys.readouterr().out)["rows"]
    union = union_study(read_trace(str(demo)), [1, 2, 3, 4], 256 * MIB)
    rows = {eps: breakeven(device(), union, "m", 4, False, True, eps) for eps in (0.38, 0.2, 0.4)}
    shown = plot_breakeven(rows[0.38], str(tmp_path / "b.svg"), (rows[0.2], rows[0.4], "band"))
    assert shown["draft"] == [1, 2, 3]
    assert shown["acceptance_needed_pct"] == pytest.approx([r["acceptance_needed_pct"] for r in table])
    assert shown["tokens_needed"] == pytest.approx([r["tokens_needed"] for r in table])
    # a cheaper extra position needs less acceptance: the band brackets the curve
    assert all(lo < a < hi for lo, a, hi in zip(shown["band_lo"], shown["acceptance_needed_pct"],
                                                 shown["band_hi"]))
    assert (tmp_path / "b.svg").read_text().lstrip().startswith("<?xml")
    out = tmp_path / "b.png"
    assert main(argv + ["--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "acceptance_needed" in capsys.readouterr().out          # the table is still printed
    assert main(argv + ["--plot", str(tmp_path / "b.gif")]) == 1    # refused before any work
    assert "unsupported extension '.gif'" in capsys.readouterr().err
    assert not (tmp_path / "b.gif").exists()


def test_breakeven_plot_to_a_fifo_is_streamed(tmp_path, capsys, device_file):
    """``timing breakeven --plot FIFO`` (a reader attached): the PDF is streamed whole, not
    "write failed: File or stream is not seekable" (matplotlib's PDF writer seeks; the figure is
    rendered in memory first)."""
    import os
    from pathlib import Path
    from refsim.testing.fifo import read_fifo_in_background
    pytest.importorskip("matplotlib")
    demo = Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv"
    fifo = tmp_path / "fifo1.pdf"
    os.mkfifo(fifo)
    t, got = read_fifo_in_background(fifo)
    assert main(["timing", "breakeven", str(demo), "--device", device_file, "--model", "m",
                 "--cache-mb", "256", "--draft", "1..3", "--plot", str(fifo)]) == 0
    t.join(30)
    assert capsys.readouterr().err == ""
    assert len(got) == 1 and got[0].startswith(b"%PDF-") and got[0].rstrip().endswith(b"%%EOF")


def test_memory_mib_per_token_is_bounded(tmp_path, capsys, device_file, q3):
    """``--mib-per-token 1e30`` printed 5.9e26 s/token; beyond 2^40 MiB (the MiB ceiling of every
    MiB flag: 2^60 bytes, an int64's) it is a usage error; 2^40 itself is priced by the rule."""
    argv = ["memory", str(q3), "--device", device_file, "--mib-per-token"]
    assert main(argv + ["1e30"]) == 2               # a usage error
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == ("refsim memory: error: argument --mib-per-token: expected a number of MiB from "
                   "0 to 2^40 (1 EiB), got '1e+30'")
    assert main(argv + [str(2 ** 40), "--json"]) == 0
    import json
    case = json.loads(capsys.readouterr().out)["device"]["cases"][-2]
    # serial, 4 lanes: t(x) = 108 + 1.325 x ms (test_memory_whatif_hand_worked)
    assert case["mib_per_token"] == 2 ** 40
    assert case["predicted_s_per_token"] == pytest.approx((108 + 1.325 * 2 ** 40) / 1000)


def test_breakeven_plot_band_is_whatif_s_interval(tmp_path, capsys, device_file, monkeypatch):
    """The figure's band is the table at position costs 0 and 1.2, the interval ``refsim whatif``
    sweeps (it was 0.2-0.4 while whatif's band was [0, 1.2]), and says so in its label."""
    from pathlib import Path
    import refsim.timing.plot as tplot
    from refsim.cli.whatif import DEFAULT_EPS_INTERVAL
    from refsim.studies.union import union_study
    from refsim.timing.breakeven import breakeven
    from refsim.timing.defaults import EPS_INTERVAL
    from refsim.trace import read_trace
    assert EPS_INTERVAL == DEFAULT_EPS_INTERVAL == (0.0, 1.2)     # one interval, both commands
    got = {}
    monkeypatch.setattr(tplot, "plot_breakeven",
                        lambda rows, path, band, title="": got.update(rows=rows, band=band))
    demo = Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv"
    assert main(["timing", "breakeven", str(demo), "--device", device_file, "--cache-mb", "256",
                 "--draft", "1..3", "--plot", str(tmp_path / "b.png")]) == 0
    union = union_study(read_trace(str(demo)), [1, 2, 3, 4], 256 * MIB)
    lo, hi, label = got["band"]
    assert label == "position cost 0-1.2"
    for rows, eps in ((got["rows"], 0.38), (lo, 0.0), (hi, 1.2)):
        assert rows == breakeven(device(), union, "m", 4, False, True, eps)
    # the test device at d = 3: acceptance needed 21.4 % at eps 0, 110.3 % at eps 1.2
    assert [round(r.acceptance_needed_pct, 1) for r in (lo[-1], got["rows"][-1], hi[-1])] == \
        [21.4, 49.5, 110.3]


# --- a prefill-only trace (D10): nothing to price is n/a, and the refusals name the file ------

def _prefill_only(tmp_path):
    """traces/demo.route.csv without its phase-1 rows: one prefill event, 0 decoded tokens."""
    from pathlib import Path
    demo = Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv"
    lines = demo.read_text().splitlines(keepends=True)
    body = [ln for ln in lines if not ln.startswith("#")]
    keep = [ln for ln in lines if ln.startswith("#")] + body[:1] + [
        ln for ln in body[1:] if ln.split(",")[1] == "0"]
    assert len(keep) < len(lines)
    path = tmp_path / "prefill.route.csv"
    path.write_text("".join(keep))
    return path


def test_replay_of_a_prefill_only_trace_prices_nothing(tmp_path, capsys, device_file):
    """0 decoded tokens: MiB/token is n/a, so is the device's s/token and tok/s (it priced a
    decode reading 0 MiB: 0.1080 s/token, 9.259 tok/s, before)."""
    import json
    path = _prefill_only(tmp_path)
    argv = ["replay", str(path), "--cache-mb", "256", "--device", device_file]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "0 decoded tokens" in lines[2] and lines[6].endswith("n/a MiB/token")
    assert lines[-1] == (f"device {device_file} (predicted, not measured): n/a s/token, n/a tok/s "
                         f"(no decoded tokens to price; 4 lanes, serial, compute floor of m)")
    assert main(argv + ["--json"]) == 0
    dev = json.loads(capsys.readouterr().out)["device"]
    assert dev == {"device": device_file, "model": "m", "io_threads": 4, "overlap": False,
                   "position_cost": 0.38, "ms_per_decode": None, "predicted_s_per_token": None,
                   "predicted_tok_s": None, "predicted_effective_tok_s": None}


def test_sweep_of_a_prefill_only_trace_prints_na_tok_s(tmp_path, capsys, device_file):
    path = _prefill_only(tmp_path)
    csv = tmp_path / "s.csv"
    assert main(["sweep", str(path), "--cache-mb", "256", "--policy", "lru", "--device",
                 device_file, "--csv", str(csv)]) == 0
    row = capsys.readouterr().out.splitlines()[-1].split()
    assert row[0] == "256" and row[-2:] == ["n/a", "n/a"]          # MiB/token, pred_tok/s
    assert csv.read_text().splitlines()[1].endswith(",nan")        # predicted_tok_s


@pytest.mark.parametrize("argv", [["union", "{p}", "--cache-mb", "256"],
                                  ["timing", "breakeven", "{p}", "--cache-mb", "256",
                                   "--device", "{d}"]])
def test_union_and_breakeven_name_the_prefill_only_trace(tmp_path, capsys, device_file, argv):
    path = _prefill_only(tmp_path)
    assert main([a.format(p=path, d=device_file) for a in argv]) == 1
    out, err = capsys.readouterr()
    cmd = " ".join(argv[:2]) if argv[0] == "timing" else argv[0]
    assert out == "" and err == (f"refsim {cmd}: error: {path}: the trace has no decode positions "
                                 f"(phase 1 rows); expected a trace with decoded tokens\n")


def test_device_line_says_1_lane():
    """"(1 lane, ...)", not "(1 lanes, ...)" (D15); the price itself is unchanged."""
    from refsim.timing.whatif import memory_whatif
    one = memory_whatif(device(), "d", "m", 0.09375, 1, False)[0].whatif
    assert one.line().endswith("(1 lane, serial, compute floor of m)")
    four = memory_whatif(device(), "d", "m", 0.09375, 4, False)[0].whatif
    assert four.line().endswith("(4 lanes, serial, compute floor of m)")


# --- page faults: can the shared runs price one? (docs/timing.md, "Page faults") ---------------

def test_page_fault_cost_is_not_identified_by_the_shared_runs():
    """The measurement behind docs/timing.md's "Page faults": the mmap runs have no majflt column,
    the desktop runs write majflt 0 throughout, and in the only runs that count faults (phone
    drop-cold, v1) the CPU time the model leaves unexplained follows them weakly and with slopes
    that disagree run to run, so no per-fault cost is identified."""
    import numpy as np

    from refsim.telemetry import read_metrics
    from refsim.testing.shared import require_shared
    from refsim.timing import fit_device, load_runs
    phone = require_shared("real-runs", "phone-2026-07-12-cache-lanes")
    for name in ("qwen_mmap.csv", "gemma_mmap.csv"):
        run = read_metrics(phone / name)
        assert run.layout == "legacy" and not run.has("majflt")
        assert (run.data["read_bytes"] == 0).all()
    desktop = require_shared("real-runs", "desktop-2026-07-24-qwen36")
    for path in sorted(desktop.glob("*.csv")):
        assert (read_metrics(path).data["majflt"] == 0).all()
    folder = require_shared("real-runs", "phone-2026-07-22-drop-cold")
    paths = sorted(str(p) for p in folder.glob("*.csv"))
    runs, _ = load_runs(paths, 50)
    dev = fit_device(runs, jackknife=False)
    slopes, resid, faults = [], [], []
    for path, r in zip(paths, runs):
        f = read_metrics(path).token_ms("majflt")[50:]
        e = r.cpu - dev.token_ms(r.x, r.model, r.lanes, r.overlap, r.cache)["cpu"]
        slopes.append(np.polyfit(f, e, 1)[0] * 1000.0)          # us per fault
        resid.append(e)
        faults.append(f)
    assert [round(s) for s in slopes] == [15, 63, 75, -34]
    e, f = np.concatenate(resid), np.concatenate(faults)
    assert np.polyfit(f, e, 1)[0] * 1000.0 == pytest.approx(52.6, abs=0.1)
    assert np.corrcoef(f, e)[0, 1] == pytest.approx(0.29, abs=0.005)
    # a fault term in place of `tail` (the rest of the fit's mean excess wall time per fault,
    # priced at the held-out run's faults) predicts the held-out run worse than `tail` does
    from refsim.timing import leave_one_out
    errs, prices = [], []
    for i, r in enumerate(runs):
        others = [x for j, x in enumerate(runs) if j != i]
        d = fit_device(others, jackknife=False)
        base = [d.token_ms(x.x, x.model, x.lanes, x.overlap, x.cache)["wall"] / d.value("tail")
                for x in runs]
        per_fault = (sum(float((runs[j].wall - base[j]).sum()) for j in range(len(runs)) if j != i)
                     / sum(float(faults[j].sum()) for j in range(len(runs)) if j != i))
        prices.append(per_fault * 1000.0)                         # us per fault
        predicted = base[i].mean() + per_fault * faults[i].mean()
        errs.append(abs(100.0 * (r.wall.mean() / predicted - 1.0)))
    with_tail = [abs(h.prediction.error_pct) for h in leave_one_out(runs)]
    assert [round(p) for p in prices] == [181, 139, 144, 68]
    assert np.median(errs) == pytest.approx(16.0, abs=0.05)
    assert np.median(with_tail) == pytest.approx(7.3, abs=0.05)


def test_view_labels_predicted_time_columns(tmp_path):
    from refsim.analysis.viewer import metrics_columns
    from refsim.telemetry import MetricsPreamble, format_metrics_csv
    path = tmp_path / "pred.csv"
    path.write_text(format_metrics_csv(_fake_run(), _fake_stats(), MetricsPreamble(), _times(False)))
    cols = metrics_columns(str(path))
    assert cols["wall_ms (predicted: dev.json)"] == pytest.approx([133.375, 287.1, 0.0])
    assert "wall_ms" not in cols and "read_bytes" in cols
    path.write_text(format_metrics_csv(_fake_run(), _fake_stats(), MetricsPreamble()))
    assert metrics_columns(str(path))["wall_ms"] == [500.0, 700.0, 0.0]


def test_breakeven_over_budgets_table_and_plot(tmp_path, capsys, device_file):
    """Several --cache-mb: each budget's rows are that budget's own breakeven (the one-budget
    command's), and the figure plots them against the budget."""
    import json
    from pathlib import Path
    pytest.importorskip("matplotlib")
    from refsim.studies.union import union_study
    from refsim.timing.breakeven import breakeven
    from refsim.timing.plot import plot_breakeven_budgets
    from refsim.trace import read_trace
    demo = Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv"
    argv = ["timing", "breakeven", str(demo), "--device", device_file, "--draft", "1,3"]
    assert main(argv + ["--cache-mb", "64,256,64", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["budgets_mib"] == [64.0, 256.0]                       # the repeat dropped
    assert [(r["cache_mb"], r["draft"]) for r in doc["rows"]] == [(64.0, 1), (64.0, 3),
                                                                  (256.0, 1), (256.0, 3)]
    assert main(argv + ["--cache-mb", "256", "--json"]) == 0
    single = json.loads(capsys.readouterr().out)["rows"]
    assert doc["rows"][2:] == single
    trace = read_trace(str(demo))
    table = {b: [r for r in breakeven(device(), union_study(trace, [1, 2, 4], b * MIB), "m", 4,
                                      False, True, 0.38) if r.draft in (1, 3)] for b in (64, 256)}
    shown = plot_breakeven_budgets(table, str(tmp_path / "b.svg"))
    assert shown["budget_mib"] == [64, 256]
    assert shown["acceptance_needed_pct"][3] == pytest.approx(
        [r["acceptance_needed_pct"] for r in doc["rows"] if r["draft"] == 3])
    assert shown["plain_tok_s"] == pytest.approx([1000 / doc["rows"][0]["plain_ms"],
                                                  1000 / doc["rows"][2]["plain_ms"]])
    out = tmp_path / "b.png"
    assert main(argv + ["--cache-mb", "64:256:64", "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = capsys.readouterr().out
    budgets = [line.split()[0] for line in text.splitlines()[2:-1]]
    assert budgets == ["64", "64", "128", "128", "192", "192", "256", "256"]  # two drafts each
    assert main(argv + ["--cache-mb", "64,abc"]) == 2
    assert "argument --cache-mb: expected N[,N,...] or START:STOP:STEP" in capsys.readouterr().err
