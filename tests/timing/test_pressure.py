"""The memory-pressure term (refsim.timing.pressure; docs/memory-pressure.md)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from refsim import MIB
from refsim.cache.demand import resident_demand
from refsim.cache.ledger import MemoryLedger
from refsim.errors import ConfigError
from refsim.timing.pressure import (PHONE_FIT, PressureFit, RunPressure, dense_mode_delta,
                                    fit_pressure, majflt_at_excess, predict_majflt, pressure_term,
                                    run_pressure)
from refsim.timing.terms import Term

FIT = PressureFit(Term("H", 1000, 900, 1100, "MiB", "fitted", "t"),
                  Term("g", 0.5, 0.25, 1.0, "x", "fitted", "t"),
                  Term("t_f", 0.1, 0.05, 0.2, "ms/fault", "fitted", "t"),
                  Term("E0", 100, 50, 200, "MiB", "fitted", "t"), "hand")


# --- the term, hand-worked -----------------------------------------------------------------
def test_predict_majflt_hand_worked():
    # D 5000, R 5500, H 1000 -> E = 500 MiB of P 4000 held out: q = 1/8; W 400 MiB/token:
    # 256 x 0.5 x 400 / 8 = 6400 faults/token. Low end H 900, g 0.25: E 400, 256 x .25 x 400 x .1
    # = 2560; high end H 1100, g 1: E 600, 256 x 400 x .15 = 15360.
    m = predict_majflt(FIT, 5000, 5500, 400, 4000)
    assert (m.value, m.lo, m.hi) == (6400.0, 2560.0, 15360.0)
    t = pressure_term(FIT, 5000, 5500, 400, 4000)
    assert (t.value, t.lo, t.hi) == pytest.approx((640.0, 128.0, 3072.0), rel=1e-12)
    assert t.unit == "ms/token"


def test_no_excess_and_cap():
    # D + H_hi = 5100 <= R: nothing evicted, at every end
    m = predict_majflt(FIT, 4000, 5100, 400)
    assert (m.value, m.lo, m.hi) == (0.0, 0.0, 0.0)
    # E larger than the pool: q = 1, every touched page faults (x g)
    m = majflt_at_excess(FIT, 9000, 3000, 10)
    assert m.value == 256 * 0.5 * 10 and m.hi == 256 * 10
    # all pinned: nothing evictable
    assert predict_majflt(FIT, 5000, 100, 400, 0).value == 0.0


def test_dense_mode_delta_hand_worked():
    # dense 1000 MiB (no token_embd), cache 2000, no KV, recurrent slot 0: anon pool 3000 MiB,
    # ahwb pool 2000 MiB; hits 100 MiB/token: W_anon 1100, W_ahwb 100; E0 100 [50, 200].
    led = lambda mode: MemoryLedger(n_ctx=1, draft_max=0, mtp=False, n_rs_seq=0, kv_bytes=0,  # noqa: E731
                                    recurrent_slot_bytes=0, recurrent_bytes=0, snapshot_bytes=0,
                                    draft_kv_bytes=0, draft_ubatch=0, draft_buffer_bytes=0,
                                    dense_bytes=1000 * MIB, total_expert_bytes=10**12, dense_weights=mode)
    anon = resident_demand(led("anon"), 2000 * MIB)
    ahwb = resident_demand(led("ahwb"), 2000 * MIB)
    t = dense_mode_delta(FIT, anon, ahwb, 100.0, 0)
    per = lambda g, e, tf: tf * 256 * g * e * (1100 / 3000 - 100 / 2000)  # noqa: E731
    assert t.value == pytest.approx(per(0.5, 100, 0.1), rel=1e-12)
    assert (t.lo, t.hi) == pytest.approx((per(0.25, 50, 0.05), per(1.0, 200, 0.2)), rel=1e-12)
    with pytest.raises(ConfigError, match="same configuration"):
        dense_mode_delta(FIT, ahwb, anon, 100.0, 0)


@given(st.floats(0, 1e5), st.floats(1, 1e5), st.floats(0, 1e4), st.floats(0, 1), st.floats(0, 500))
def test_properties(d, r, w, frac, more):
    p = d * frac
    if p > 0:
        m = predict_majflt(FIT, d, r, w, p)
        assert m.lo <= m.value <= m.hi
        assert m.value <= 256 * 0.5 * w + 1e-6  # at most every touched page (x g)
        # more demand never lowers the faults; more RAM never raises them
        assert predict_majflt(FIT, d + more, r, w, p).value >= m.value
        assert predict_majflt(FIT, d, r + more, w, p).value <= m.value
        if d + 1100 <= r:
            assert m.hi == 0.0


def test_errors():
    with pytest.raises(ConfigError, match="ram MiB"):
        predict_majflt(FIT, 10, 0, 1)
    with pytest.raises(ConfigError, match="demand MiB"):
        predict_majflt(FIT, float("nan"), 10, 1)
    with pytest.raises(ConfigError, match="evictable"):
        predict_majflt(FIT, 10, 10, 1, 20)
    with pytest.raises(ConfigError, match="no pressure fit"):
        pressure_term(object(), 10, 10, 1)
    with pytest.raises(ConfigError, match="expected keys"):
        PressureFit.from_dict({"source": "x"})


def test_dict_round_trip_and_device_attribute():
    assert PressureFit.from_dict(PHONE_FIT.as_dict()) == PHONE_FIT

    class Dev:
        pressure = FIT
    assert pressure_term(Dev(), 5000, 5500, 400, 4000) == pressure_term(FIT, 5000, 5500, 400, 4000)


# --- the fit, hand-worked ------------------------------------------------------------------
def _run(label, majflt, read, swap, rss=900.0, avail=1000.0, w=100.0, tf=0.04, a=50.0, b=0.5):
    majflt = np.asarray(majflt, dtype=float)
    read = np.asarray(read, dtype=float)
    n = majflt.size
    return RunPressure(label, majflt, a + b * read + tf * majflt, read, np.full(n, w),
                       np.full(n, swap), np.full(n, rss), np.full(n, avail))


def test_fit_hand_worked():
    # q = 100 / 1000 = 0.1 and W 100 everywhere: exposure 256 x 100 x 0.1 = 2560 per token.
    # Run A: 512 faults over 3 tokens -> g_A = 512 / 7680 = 1/15; run B 7680 -> g_B = 1; run C
    # 3840 -> g_C = 0.5; pooled 12032 / 23040. Faults are not affine in the read within any run,
    # so every refit identifies t_f.
    runs = [_run("A", [100, 300, 112], [10, 20, 30], 100, avail=1200),
            _run("B", [2560, 5120, 0], [30, 10, 20], 100, avail=1300, a=70, b=0.2),
            _run("C", [1000, 1560, 1280], [5, 15, 25], 100, avail=1400)]
    fit = fit_pressure(runs, "hand")
    assert fit.refault.value == pytest.approx(12032 / 23040, rel=1e-12)
    assert (fit.refault.lo, fit.refault.hi) == pytest.approx((1 / 15, 1.0), rel=1e-12)
    assert (fit.reserve.value, fit.reserve.lo, fit.reserve.hi) == (1300.0, 1200.0, 1400.0)
    # the times are exactly a_r + b_r x read + 0.04 x majflt: every refit recovers 0.04
    assert fit.ms_per_fault.value == pytest.approx(0.04, rel=1e-9)
    assert fit.ms_per_fault.lo == pytest.approx(0.04, rel=1e-9)
    assert fit.ms_per_fault.hi == pytest.approx(0.04, rel=1e-9)
    assert fit.evicted.value == 100.0
    with pytest.raises(ConfigError, match="at least 2"):
        fit_pressure(runs[:1])
    # faults affine in the read within every run: t_f is not identified, and the fit says so
    flat = [_run("A", [100, 200, 300], [10, 20, 30], 100), _run("B", [0, 50, 100], [1, 2, 3], 100)]
    with pytest.raises(ConfigError, match="t_f is not identified"):
        fit_pressure(flat)


# --- the shared phone runs -----------------------------------------------------------------
def test_phone_fit_refits_from_the_shared_runs(tmp_path):
    """PHONE_FIT is what fit_pressure gives on the four 2026-07-22 phone runs."""
    pytest.importorskip("gguf")
    from refsim.testing.pressure_runs import drop_cold_runs
    from refsim.testing.shared import require_shared
    require_shared("real-runs", "phone-2026-07-22-drop-cold")
    runs, demands = drop_cold_runs(str(tmp_path))
    assert [r.n for r in runs] == [1306, 1304, 1300, 1419]
    assert all(d.dense_weights == "ahwb" and d.expert_cache_bytes == 3000 * MIB for d in demands)
    fit = fit_pressure(runs, "phone 2026-07-22 drop-cold")
    for got, want in zip(fit.terms(), PHONE_FIT.terms()):
        assert got.name == want.name
        assert (got.value, got.lo, got.hi) == pytest.approx((want.value, want.lo, want.hi), rel=1e-9)
    # each run's own refault ratio and recorded mean faults/token (kept tokens)
    assert [round(r.refault, 4) for r in runs] == [0.0547, 0.0214, 0.0173, 0.0011]
    assert [round(float(r.majflt.mean()), 1) for r in runs] == [631.7, 219.5, 178.1, 10.8]


def test_run_pressure_refuses_files_without_memory_columns(tmp_path):
    from refsim.telemetry.metrics_reader import read_metrics
    from refsim.testing.shared import require_shared
    lanes = require_shared("real-runs", "phone-2026-07-12-cache-lanes", "qwen_c4000_l4.csv")
    demand = resident_demand(MemoryLedger(1, 0, False, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0)
    with pytest.raises(ConfigError, match=r"qwen_c4000_l4\.csv: no majflt"):
        run_pressure(read_metrics(lanes), demand)
    desk = require_shared("real-runs", "desktop-2026-07-24-qwen36", "pc-A-io4.csv")
    with pytest.raises(ConfigError, match=r"pc-A-io4\.csv: majflt is 0 on every row"):
        run_pressure(read_metrics(desk), demand)


# --- refsim memory --device --ram-mb ---------------------------------------------------------
def test_cli_memory_prints_the_pressure_term(tmp_path, capsys):
    """At R = 6000 MiB, ceil 3000: under mmap the dense set (2039.8 MiB) is page cache the auto
    budget does not subtract, so D = 3000 + 80 + 62.8 + 2039.8 = 5182.7 MiB and E = D + H - R =
    506.3 MiB; under ahwb the budget leaves the dense set out and nothing is evicted."""
    from refsim.cli import main
    from refsim.testing.twins import qwen36_twin
    from tests.timing.test_device_outputs import device
    model = qwen36_twin(tmp_path / "q36.gguf")
    dev = tmp_path / "dev.json"
    dev.write_text(device().to_json())
    argv = ["memory", str(model), "--ctx", "4096", "--ram-mb", "6000", "--cache-ceil-mb", "3000",
            "--device", str(dev), "--device-model", "m", "--hit-pct", "70"]
    assert main(argv + ["--dense-weights", "mmap"]) == 0
    out = capsys.readouterr().out
    assert "resident:      5182.7 MiB  (pinned 0.0 + anon 3142.8 + page cache 2039.8" in out
    # W = 0.7 x 581.25 hits + (2039.8 - 272.8 + 0.0011) dense + 4096 x 20480 B KV + 62.8 slot
    w = 0.7 * 581.25 + (2138925568 - 286064640 + 1152 + 4096 * 20480 + 65863680) / MIB
    m = predict_majflt(PHONE_FIT, 5434403328 / MIB, 6000, w)
    t = m.value * PHONE_FIT.ms_per_fault.value
    assert (f"evicted 506.3 MiB, touched {w:.1f} MiB/token at hit 70.0% -> {m.value:.1f} "
            f"[{m.lo:.1f}, {m.hi:.1f}] major faults/token, +{t:.1f}") in out
    assert main(argv + ["--dense-weights", "ahwb"]) == 0
    out = capsys.readouterr().out
    assert "pinned 2039.8" in out and "evicted 0.0 MiB" in out and "-> 0.0 [0.0, 0.0] major" in out
    # without --ram-mb no pressure line (and every earlier line unchanged)
    assert main(argv[:4] + argv[6:]) == 0
    assert "memory pressure" not in capsys.readouterr().out
