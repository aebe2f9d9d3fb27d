"""``refsim whatif`` (issue 29): its figures are refsim.timing.verdict.price's on the exact union
replay, hand-checked against breakeven.decode_ms; the interface names of --json/--csv; --explain
prints every term; acceptance from --spec is labelled assumed, from --tokens measured by
ngram-whatif; one-line refusals."""

import csv
import io
import json
from pathlib import Path

import pytest

from refsim import MIB
from refsim.cli import main
from refsim.timing import DeviceModel, Param

DEMO = str(Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv")
VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
          "h": 0.1, "tail": 1.0}
SPEC = "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.4,mtp:d=2:acceptance=0.8"
ROW_KEYS = ("config", "budget_mib", "eff_tok_s", "eff_tok_s_lo", "eff_tok_s_hi", "delta_pct",
            "delta_lo_pct", "delta_hi_pct", "verdict")


def device() -> DeviceModel:
    return DeviceModel(params={k: Param(v) for k, v in VALUES.items()}, compute={"m": Param(100.0)},
                       serial_runs=2, overlap_runs=2)


@pytest.fixture
def device_file(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(device().to_json())
    return str(path)


def argv(device_file, *extra):
    return ["whatif", DEMO, "--device", device_file, "--cache-mb", "64,256", "--spec", SPEC,
            "--head-ms", "10", *extra]


def test_json_rows_are_the_hand_worked_price(device_file, capsys):
    from refsim.studies.union import union_study
    from refsim.timing.breakeven import decode_ms
    from refsim.trace import read_trace
    assert main(argv(device_file, "--json", "--noise-pct", "0", "--position-cost-interval",
                     "0.38,0.38")) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["rows"]
    assert [(r["config"], r["budget_mib"]) for r in rows] == [
        (c, b) for b in (64.0, 256.0) for c in ("off", "ngram:d=3:m=3", "mtp:d=2")]
    assert all(set(ROW_KEYS) <= set(r) for r in rows)
    trace = read_trace(DEMO)
    for b in (64, 256):
        u = {r.window: r.read_mib / r.decodes for r in union_study(trace, [1, 3, 4], b * MIB)}
        t = {w: decode_ms(device(), u[w], w, "m", 4, False, True, 0.38) for w in u}
        off, ng, mtp = [r for r in rows if r["budget_mib"] == b]
        assert off["eff_tok_s"] == pytest.approx(1000 / t[1], rel=1e-12)
        # n-gram: 40 % of decodes carry 3 drafts, half accepted: 1.6 tokens per decode
        ng_ms = (0.6 * t[1] + 0.4 * t[4]) / 1.6
        assert ng["eff_tok_s"] == pytest.approx(1000 / ng_ms, rel=1e-12)
        assert ng["delta_pct"] == pytest.approx(100 * (t[1] / ng_ms - 1), rel=1e-9)
        assert ng["breakeven_acceptance"] == pytest.approx((t[4] / t[1] - 1) / 3, abs=1e-8)
        # MTP d2 at 0.8: 2.6 tokens per 3-position decode, plus the 10 ms/token head
        mtp_ms = t[3] / 2.6 + 10.0
        assert mtp["eff_tok_s"] == pytest.approx(1000 / mtp_ms, rel=1e-12)
        for r in (ng, mtp):      # nothing uncertain: the bands are the points
            assert r["delta_lo_pct"] == pytest.approx(r["delta_pct"]) == pytest.approx(r["delta_hi_pct"])
            assert r["verdict"] == ("gains" if r["delta_pct"] > 0 else "loses")
            assert r["acceptance_source"] == "assumed"
        assert off["verdict"] == "baseline" and off["delta_pct"] == 0.0


def test_csv_has_the_interface_columns(device_file, capsys):
    assert main(argv(device_file, "--csv")) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 6 and set(ROW_KEYS) <= set(rows[0])
    assert [r["verdict"] for r in rows if r["config"] == "off"] == ["baseline", "baseline"]
    for r in rows:
        assert float(r["eff_tok_s_lo"]) <= float(r["eff_tok_s"]) <= float(r["eff_tok_s_hi"])
        assert float(r["delta_lo_pct"]) <= float(r["delta_pct"]) <= float(r["delta_hi_pct"])


def test_table_and_explain(device_file, capsys):
    assert main(argv(device_file, "--explain")) == 0
    out = capsys.readouterr().out
    assert "predicted, not measured" in out and "assumed" in out
    for name in ("compute", "extra_positions", "bookkeeping", "contention", "flash", "stall",
                 "head", "memory"):
        assert out.count(f"         {name} = ") == 6
    assert "head = 10 ms/token [10, 10] (assumed: --head-ms)" in out


def test_acceptance_from_a_token_stream(device_file, tmp_path, capsys):
    from refsim.spec.whatif import ngram_whatif, read_token_file
    toks = tmp_path / "t.txt"
    toks.write_text(" ".join(str(x) for x in ([1, 2, 3, 4, 5] * 12 + [9, 8, 7] * 6)))
    assert main(["whatif", DEMO, "--device", device_file, "--cache-mb", "256", "--spec",
                 "off,ngram:d=2:m=2", "--tokens", str(toks), "--prompt-len", "10", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][1]
    cell = ngram_whatif(read_token_file(str(toks)), 10, [2], [2])[0]
    assert row["acceptance"] == pytest.approx(cell.acceptance_pct / 100)
    assert row["coverage"] == pytest.approx(cell.coverage_pct / 100)
    assert row["acceptance_source"].startswith("measured")
    assert row["tokens_per_decode"] == pytest.approx(1 + cell.accepted / cell.decodes, rel=1e-12)
    assert row["positions_per_decode"] == pytest.approx(1 + cell.drafted / cell.decodes, rel=1e-12)
    assert row["acceptance"] == cell.accepted / cell.drafted


@pytest.mark.parametrize("extra, code, msg", [
    (["--spec", "ngram:d=3"], 2, "m= is required"),          # D9: a usage error
    (["--spec", "mtp:d=2:acceptance=0.5"], 2, "tensor table"),  # D9: a usage error
    # issue 29 CLI defects: the command line lacks the number (exit 2; was 1)
    (["--spec", "ngram:d=3:m=3:coverage=0.2"], 2, "no acceptance"),
    (["--spec", "ngram:d=3:m=3"], 2, "no coverage"),
    (["--spec", "off", "--position-cost-interval", "0.5,0.1"], 2, "--position-cost-interval"),
    (["--spec", "off", "--tokens", "x.txt"], 2, "--tokens and --prompt-len go together"),
])
def test_refusals_are_one_line(device_file, capsys, extra, code, msg):
    assert main(["whatif", DEMO, "--device", device_file, "--cache-mb", "64", *extra]) == code
    err = capsys.readouterr().err.splitlines()
    assert msg in err[-1]
    if code == 1:           # a usage error (2) prints the usage above its one line
        assert len(err) == 1


def test_device_is_required(capsys):
    assert main(["whatif", DEMO, "--cache-mb", "64", "--spec", "off"]) == 2
    assert "--device is required" in capsys.readouterr().err


def test_plot_shows_the_rows(device_file, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from refsim.timing.plot import plot_whatif
    from refsim.timing.verdict import Device, Reads, SpecConfig, price
    from refsim.timing.terms import Term
    out = tmp_path / "w.png"
    assert main(argv(device_file, "--json", "--plot", str(out))) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the figure's series are the rows' figures
    eps = Term("eps", 0.38, 0.0, 1.2, "", "assumed", "t")
    dv = Device(device(), "m", 4, False, eps, sigma=0.05)
    reads = {1: Reads(1, 40.0), 4: Reads(4, 90.0)}
    ps = [price(dv, c, reads, budget_mib=b) for b in (64.0, 256.0)
          for c in (SpecConfig("off"), SpecConfig("ngram", 3, 3, 0.5, 0.4))]
    shown = plot_whatif(ps, str(tmp_path / "p.svg"))
    assert shown["configs"] == ["off", "ngram:d=3:m=3"] and shown["budgets"] == [64.0, 256.0]
    assert shown["delta_pct"]["ngram:d=3:m=3"][0] == (ps[1].delta.point, ps[1].delta.lo, ps[1].delta.hi)
    assert shown["eff_tok_s"]["off"][1][0] == ps[2].eff_tok_s.point
    assert len(rows) == 6
    assert main(argv(device_file, "--plot", str(tmp_path / "w.gif"))) == 1
    assert "unsupported extension '.gif'" in capsys.readouterr().err


def test_baseline_refits_the_floor_only(tmp_path, capsys):
    """--baseline: calibrate_floor on the session's plain run; only C moves, and the off row is
    the calibrated device's price (shared phone run, skipped when absent)."""
    from refsim.testing.shared import require_shared
    from refsim.timing.calibrate import calibrate_floor
    from refsim.timing.plain import load_plain_runs
    from refsim.timing.fit import fit_device
    d = require_shared("real-runs", "phone-2026-07-12-cache-lanes")
    specs = [f"{d}/qwen_c{c}_l{l}.csv@model=qwen,io_threads={l}" for c in (2000, 4000) for l in (2, 4)]
    runs, _ = load_plain_runs(specs, 50)
    dev = fit_device(runs)
    path = tmp_path / "phone.json"
    path.write_text(dev.to_json())
    base = specs[2]
    assert main(["whatif", DEMO, "--device", str(path), "--io-threads", "2", "--cache-mb", "256",
                 "--spec", "off", "--baseline", base, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cal = calibrate_floor(dev, runs[2], "qwen")
    assert doc["calibration"]["before_ms"] == dev.compute["qwen"].value
    assert doc["calibration"]["floor"]["value"] == cal.floor.value
    assert doc["calibration"]["moved_pct"] == pytest.approx(cal.moved_pct)
    assert cal.device.params == dev.params
    row = doc["rows"][0]
    assert row["compute_ms"] == pytest.approx(dev.value("tail") * cal.floor.value, rel=1e-12)


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    from refsim.testing.twins import qwen36_twin
    return qwen36_twin(str(tmp_path_factory.mktemp("twin") / "q36.gguf"))


@pytest.fixture(scope="module")
def twin_trace(twin, tmp_path_factory):
    """A short synthetic route trace of the twin's shape (its layers, experts, top-k and expert
    bytes): whatif refuses a --gguf that is not the trace's model (D4)."""
    from refsim.cache import ExpertCache
    from refsim.io.layout import layout_from_model
    from refsim.model import open_model
    from refsim.testing.routes import synthetic_run_events
    from refsim.trace.format import TraceHeader
    from refsim.trace.writer import write_trace
    m = open_model(twin)
    eb = layout_from_model(m).expert_bytes
    n_layer, n_expert, k = len(eb), m.spec.n_expert, m.spec.n_expert_used
    h = TraceHeader("q36-twin", m.spec.arch, n_layer, n_expert, k, eb, [0] * n_layer)
    events = synthetic_run_events(8, 24, n_layer, n_expert, k, seed=5)
    cache = ExpertCache(h.expert_bytes, h.n_expert, 2 << 30)
    recs = [cache.apply(e) for e in events]
    path = tmp_path_factory.mktemp("twin_trace") / "q36.route.csv"
    write_trace(path, h, events, [r.trace_residency() for r in recs],
                [r.charged_bytes for r in recs])
    return str(path)


def test_ram_and_auto_budget_use_the_ledger(device_file, twin, twin_trace, capsys):
    """--ram-mb: the speculative memory (ledger.speculation_bytes) against what RAM leaves beside
    the plain run's contexts, dense weights, the engine's floor and the cache; --cache-mb auto: each
    configuration at its own auto budget, off as the baseline at its own."""
    from refsim.cache.ledger import memory_ledger
    from refsim.model import open_model
    m = open_model(twin)
    spec = "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.3,mtp:d=3:acceptance=0.8"
    base = ["whatif", twin_trace, "--device", device_file, "--gguf", twin, "--spec", spec,
            "--json"]
    plain = memory_ledger(m, 2048, 0, False, ram_mb=24000)
    ng = memory_ledger(m, 2048, 3, False, ram_mb=24000)
    mtp = memory_ledger(m, 2048, 3, True, ram_mb=24000)
    left = (plain.ram_bytes - plain.context_bytes - plain.dense_bytes) / MIB - plain.floor_mb
    assert main(base + ["--cache-mb", "auto", "--ram-mb", "24000"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["budget_mib"] for r in rows] == [plain.budget_bytes / MIB, ng.budget_bytes / MIB,
                                              mtp.budget_bytes / MIB]
    # a fixed budget that leaves less than the n-gram loop's memory: the fault cost is not
    # modelled, its interval the measured storm
    b = left - ng.speculation_bytes / MIB / 2
    assert main(base + ["--cache-mb", f"{b:.6f}", "--ram-mb", "24000"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    memo = [t for t in rows[1]["terms"] if t["name"] == "memory"][0]
    assert memo["kind"] == "not_modelled" and memo["value"] == 0.0
    assert memo["hi"] == pytest.approx((4.43 / 3.14 - 1) * rows[0]["ms_per_token"], rel=1e-9)
    assert f"exceeds the {left - b:.1f} MiB" in memo["source"]
    assert rows[1]["delta_lo_pct"] < rows[1]["delta_pct"]


def test_auto_needs_ram_and_gguf(device_file, twin, capsys):
    assert main(["whatif", DEMO, "--device", device_file, "--spec", "off", "--cache-mb", "auto"]) == 2
    assert "need --gguf" in capsys.readouterr().err
    assert main(["whatif", DEMO, "--device", device_file, "--spec", "off", "--cache-mb", "auto",
                 "--gguf", twin]) == 2
    assert "--cache-mb auto needs --ram-mb" in capsys.readouterr().err


def test_breakeven_and_whatif_price_a_width_alike(device_file, capsys):
    """One configuration, one price: `timing breakeven`'s acceptance needed per draft width is
    whatif's break-even acceptance of an n-gram configuration of that width (same replay, same
    device, same eps), and its tokens needed the ratio of the two decodes' costs."""
    assert main(["timing", "breakeven", DEMO, "--device", device_file, "--cache-mb", "256",
                 "--draft", "1..3", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)["rows"]
    spec = "off," + ",".join(f"ngram:d={d}:m=2:acceptance=0.5:coverage=1" for d in (1, 2, 3))
    assert main(["whatif", DEMO, "--device", device_file, "--cache-mb", "256", "--spec", spec,
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"][1:]
    for b, w in zip(table, rows):
        assert 100 * w["breakeven_acceptance"] == pytest.approx(b["acceptance_needed_pct"], abs=1e-6)
        # per emitted token at acceptance 0.5: verify_ms / (1 + d/2)
        assert w["ms_per_token"] == pytest.approx(b["verify_ms"] / (1 + b["draft"] / 2), rel=1e-12)


def test_mtp_adds_its_resident_nextn_dense(device_file, twin, twin_trace, capsys):
    """--mtp loads the nextn block's dense tensors too (anon, the ledger's default: resident), so
    the MTP row adds speculation_bytes + that dense to the plain run's demand: at a budget that
    leaves 10 MiB more than the speculative memory alone, the MTP row does not fit (it fit when
    only the speculative memory was counted)."""
    from refsim.cache.ledger import memory_ledger
    from refsim.model import open_model
    m = open_model(twin)
    plain = memory_ledger(m, 2048, 0, False, ram_mb=24000)
    mtp = memory_ledger(m, 2048, 3, True, ram_mb=24000)
    nextn = (mtp.dense_bytes - plain.dense_bytes) / MIB
    assert nextn > 10.0
    left = (plain.ram_bytes - plain.context_bytes - plain.dense_bytes) / MIB - plain.floor_mb
    b = left - mtp.speculation_bytes / MIB - 10.0
    assert main(["whatif", twin_trace, "--device", device_file, "--gguf", twin, "--spec",
                 "off,mtp:d=3:acceptance=0.8", "--json", "--cache-mb", f"{b:.6f}",
                 "--ram-mb", "24000"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    memo = [t for t in rows[1]["terms"] if t["name"] == "memory"][0]
    assert memo["kind"] == "not_modelled"
    added = mtp.speculation_bytes / MIB + nextn
    assert f"speculative memory {added:.1f} MiB exceeds the {left - b:.1f} MiB" in memo["source"]


def test_trace_budget_below_token_cycle_warns(device_file, capsys):
    """As replay and union: a budget below one token cycle (the demo trace's T = 85.6 MiB) is
    warned once on stderr; the table is still printed; a budget above it is not warned."""
    assert main(["whatif", DEMO, "--device", device_file, "--cache-mb", "64,256", "--spec", "off"]) == 0
    err = capsys.readouterr().err
    assert err.count("refsim whatif: warning: budget 64 MiB is below one token cycle T = 85.6 MiB") == 1
    assert main(["whatif", DEMO, "--device", device_file, "--cache-mb", "256", "--spec", "off"]) == 0
    assert "below one token cycle" not in capsys.readouterr().err


def test_auto_budgets_plot_as_one_group(device_file, twin, twin_trace, tmp_path, capsys,
                                        monkeypatch):
    """--cache-mb auto --plot: each configuration has its own budget (a new-user pass found a
    KeyError traceback, no table, no plot); the bars form one group `auto`, each legend entry
    naming its configuration's budget, and the table is printed."""
    pytest.importorskip("matplotlib")
    import refsim.timing.plot as plot
    shown = {}
    real = plot.plot_whatif

    def keep(*a, **k):
        shown.update(real(*a, **k))
        return shown
    monkeypatch.setattr(plot, "plot_whatif", keep)
    out = tmp_path / "auto.svg"
    spec = "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.3,mtp:d=3:acceptance=0.8"
    capsys.readouterr()
    assert main(["whatif", twin_trace, "--device", device_file, "--gguf", twin, "--spec", spec,
                 "--cache-mb", "auto", "--ram-mb", "24000", "--plot", str(out)]) == 0
    assert "baseline" in capsys.readouterr().out and out.stat().st_size > 0
    assert shown["budgets"] == ["auto"]
    assert shown["configs"] == ["off", "ngram:d=3:m=3", "mtp:d=3"]
    assert [len(v) for v in shown["eff_tok_s"].values()] == [1, 1, 1]
    text = out.read_text()
    assert "auto (each configuration" in text
