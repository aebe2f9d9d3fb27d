"""Session calibration, run-to-run noise and the band (issue 29, docs/whatif-terms.md): hand-worked
rules, hypothesis properties (a calibration moves C and nothing else and reproduces its baseline;
the band contains its point; a band of nothing uncertain is the point), and the shared runs'
figures."""

import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.errors import ConfigError
from refsim.testing.shared import require_shared
from refsim.timing import DeviceModel, Param, RunData
from refsim.timing.band import (EPS_POINTS, NOISE_POINTS, bootstrap_devices, delta_band,
                                tok_s_band)
from refsim.timing.calibrate import calibrate_floor, calibrate_to_cell, solve_floor
from refsim.timing.cells import Cell, calibrated
from refsim.timing.model import PARAMS
from refsim.timing.noise import PUBLISHED_REPEATS, Repeat, log_sigma, residual_logs
from refsim.timing.terms import Term, exact

KNOWN = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
         "h": 0.1, "tail": 1.1}


def device(values=KNOWN, c=100.0) -> DeviceModel:
    return DeviceModel(params={k: Param(values.get(k, 0.0)) for k in PARAMS},
                       compute={"m": Param(c)}, serial_runs=1, overlap_runs=1)


def run(x, c_true, overlap=False, dev=None, label="run.csv") -> RunData:
    """A noise-free run made by the rules with floor ``c_true``: cpu and wall from the device."""
    dev = dev or device()
    x = np.asarray(x, dtype=np.float64)
    truth = DeviceModel(params=dev.params, compute={"m": Param(c_true)}, serial_runs=1, overlap_runs=1)
    t = truth.token_ms(x, "m", 4, overlap, True)
    return RunData(label=label, model="m", lanes=4, overlap=overlap, cache=True, x=x, cpu=t["cpu"],
                   io=t["io"], stall=t["stall"], wall=t["wall"], trim=0)


# --- session calibration -------------------------------------------------------------------------

def test_calibration_hand_worked():
    r = run(np.linspace(0.0, 40.0, 16), 120.0)
    for method in ("rate", "column"):
        cal = calibrate_floor(device(), r, method=method)
        assert cal.floor.value == pytest.approx(120.0, abs=1e-9)
        assert (cal.floor.lo, cal.floor.hi) == pytest.approx((120.0, 120.0), abs=1e-9)
        assert (cal.before_ms, cal.moved_ms, cal.moved_pct) == pytest.approx((100.0, 20.0, 20.0), abs=1e-9)
        assert cal.predicted_after_tok_s == pytest.approx(r.measured_tok_s, rel=1e-12)
        assert cal.predicted_before_tok_s > cal.measured_tok_s
    assert "100.0 -> 120.0 ms/token (+20.0 %)" in cal.line()


def test_calibration_of_an_unknown_model_and_refusals():
    r = run(np.full(16, 10.0), 80.0)
    other = DeviceModel(params=device().params, compute={"x": Param(50.0)}, serial_runs=1, overlap_runs=1)
    cal = calibrate_floor(other, r)
    assert cal.before_ms is None and cal.moved_pct is None and cal.floor.value == pytest.approx(80.0)
    assert set(cal.device.compute) == {"x", "m"}
    with pytest.raises(ConfigError, match="method"):
        calibrate_floor(device(), r, method="median")
    with pytest.raises(ConfigError, match="needs at least 8"):
        calibrate_floor(device(), run(np.ones(5), 80.0))
    with pytest.raises(ConfigError, match="no compute floor fits"):
        solve_floor(device(), "m", [10.0], 4, False, True, 5.0)


@settings(max_examples=30)
@given(st.floats(20.0, 400.0), st.lists(st.floats(0.0, 300.0), min_size=8, max_size=40),
       st.booleans())
def test_calibration_moves_the_floor_and_nothing_else(c_true, xs, overlap):
    """Re-fitting on a baseline run moves C[m] only, and the calibrated device reproduces the
    baseline's measured rate (method rate) whatever the other parameters were."""
    dev = device()
    r = run(xs, c_true, overlap)
    # the baseline as the session measured it: 7 % slower than the rules say (another session)
    r = RunData(**{**r.__dict__, "wall": r.wall * 1.07})
    cal = calibrate_floor(dev, r)
    assert cal.device.params == dev.params
    assert cal.predicted_after_tok_s == pytest.approx(r.measured_tok_s, rel=1e-9)
    assert cal.floor.lo <= cal.floor.value <= cal.floor.hi


def test_calibrate_to_cell_is_cells_calibrated_and_refuses_speculation():
    dev = device()
    off = Cell("off", 6.0, 30.0)
    cal = calibrate_to_cell(dev, off, "cell", 4, True)
    assert cal.floor.value == calibrated(dev, off, "cell", 4, True).compute_floor("cell")
    assert cal.predicted_after_tok_s == pytest.approx(6.0, rel=1e-12) and cal.before_ms is None
    with pytest.raises(ConfigError, match="a speculation cell"):
        calibrate_to_cell(dev, Cell("mtp", 7.0, 30.0, 2.5, 3), "cell", 4, True)


def test_calibration_on_the_real_sessions():
    """How far one session's floor moves from its set's fit (docs/whatif-terms.md): on the desktop
    every run within 7 %; on the phone drop-cold set the last run (F = 0.75) 32 % below."""
    import tempfile
    from refsim.testing.recording_sets import DESKTOP, PHONE_DROP, set_inputs
    from refsim.timing import fit_device
    from refsim.timing.plain import load_plain_runs
    for name, worst in ((DESKTOP, 7.0), (PHONE_DROP, 32.0)):
        require_shared("real-runs", name)
        runs, _ = load_plain_runs(set_inputs(name, tempfile.mkdtemp()).specs, 50)
        dev = fit_device(runs, jackknife=False)
        moves = [calibrate_floor(dev, r).moved_pct for r in runs]
        assert max(abs(m) for m in moves) <= worst
        assert max(abs(m) for m in moves) >= worst - 1.0


# --- run-to-run noise ------------------------------------------------------------------------------

def test_noise_hand_worked():
    # ln tok/s 0 and 0.2: squares about the mean 2 * 0.01, 1 degree of freedom -> sigma 0.1414
    rep = Repeat("r", "host", (1.0, math.exp(0.2)), (5.0, 5.0), "test")
    t = log_sigma([rep])
    assert t.value == pytest.approx(math.sqrt(0.02)) and t.kind == "fitted"
    # two groups: (0, 0.2) and (0, 0, 0.3): ss 0.02 + 0.06 over 1 + 2 dof -> sqrt(0.08/3)
    rep3 = Repeat("s", "host", (1.0, 1.0, math.exp(0.3)), (5.0, 5.0, 5.0), "test")
    t = log_sigma([rep, rep3])
    assert t.value == pytest.approx(math.sqrt(0.08 / 3))
    assert (t.lo, t.hi) == pytest.approx((math.sqrt(0.02), math.sqrt(0.03)))


def test_noise_of_different_reads_needs_the_device():
    rep = Repeat("r", "host", (5.0, 6.0), (50.0, 40.0), "test")
    with pytest.raises(ConfigError, match="read different MiB/token"):
        residual_logs(rep)
    # a device predicting exactly the measured difference leaves no noise
    res = residual_logs(rep, lambda m: {50.0: 5.0, 40.0: 6.0}[m] * 1.3)
    assert res[0] == pytest.approx(res[1])
    with pytest.raises(ConfigError, match=">= 2 runs"):
        Repeat("x", "host", (5.0,), (1.0,), "t")


def test_noise_of_the_engines_repeats():
    """Phone: the published pairs (5.82 / 6.14 byte-identical; 5.17 / 4.59) -> 6.5 % per run.
    Host: desktop pc-E / pc-F (byte-identical reads, lanes dead on that device) and the host
    prose and copy off pairs after the device's own prediction of their read difference
    -> 2.5 % per run."""
    phone = log_sigma([r for r in PUBLISHED_REPEATS if r.device == "phone"])
    assert phone.value == pytest.approx(0.0652, abs=5e-5)
    import tempfile
    from refsim.testing.recording_sets import DESKTOP, set_inputs
    from refsim.timing.identify import identify_device
    require_shared("real-runs", DESKTOP)
    inp = set_inputs(DESKTOP, tempfile.mkdtemp())
    dt = identify_device(inp.specs, inp.sizes)
    (rep,) = dt.repeats
    assert rep.name == "pc-E-c5000-io4t4.csv / pc-F-c5000-io8t4.csv" and "io_threads" in rep.note

    def predict(r, mib):
        cal = calibrate_to_cell(dt.device, Cell(r.name, r.tok_s[0], r.mib_per_token[0]), "c", 4, True)
        return 1000.0 / float(cal.device.token_ms([mib], "c", 4, True, True)["wall"][0])
    host = log_sigma([rep] + [r for r in PUBLISHED_REPEATS if r.device == "host"], predict)
    assert host.value == pytest.approx(0.0254, abs=5e-5)


def test_no_repeat_among_the_phone_lanes_runs():
    """On the phone the lanes matter (b > 0 by 5.7 s.e.): the 2- and 4-lane runs with identical
    reads are not repeats."""
    import tempfile
    from refsim.testing.recording_sets import PHONE_LANES, set_inputs
    from refsim.timing.identify import dead_levers, identify_device
    require_shared("real-runs", PHONE_LANES)
    require_shared("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")
    inp = set_inputs(PHONE_LANES, tempfile.mkdtemp())
    dt = identify_device(inp.specs, inp.sizes)
    assert dead_levers(dt.device) == () and dt.repeats == ()


# --- the band ------------------------------------------------------------------------------------

def const(v):
    return lambda d: (lambda e: v)


def test_band_of_nothing_uncertain_is_the_point():
    """Zero noise, one run (no replicate to resample: the parameters' spread cannot be estimated,
    and the band says so rather than calling it zero), an exact eps: lo = point = hi."""
    b = tok_s_band(const(5.0), object(), (), exact("eps", 0.4, "f", "fitted", "t"), 0.0)
    assert b.lo == b.point == b.hi == pytest.approx(5.0)
    assert any("not estimated" in n for n in b.notes)
    d = delta_band(const(6.0), const(5.0), object(), (), None, 0.0)
    assert d.lo == d.point == d.hi == pytest.approx(20.0)


def test_band_of_noise_alone_hand_worked():
    """No parameter or eps spread: the band is point x exp(sigma q), q the 5th/95th percentile of
    the 99 normal quantiles the noise is taken at; a change between two runs: sigma sqrt(2)."""
    z = np.array([NormalDist().inv_cdf((j + 0.5) / NOISE_POINTS) for j in range(NOISE_POINTS)])
    q_lo, q_hi = np.quantile(z, [0.05, 0.95])
    b = tok_s_band(const(5.0), object(), (), None, 0.03)
    assert (b.lo, b.hi) == pytest.approx((5.0 * math.exp(0.03 * q_lo), 5.0 * math.exp(0.03 * q_hi)),
                                         rel=1e-12)
    assert b.parts["noise"] == pytest.approx((b.lo, b.hi))
    d = delta_band(const(5.0), const(5.0), object(), (), None, 0.03)
    s = 0.03 * math.sqrt(2)
    assert (d.lo, d.point, d.hi) == pytest.approx((100 * math.expm1(s * q_lo), 0.0,
                                                   100 * math.expm1(s * q_hi)), rel=1e-12, abs=1e-12)


def test_band_of_eps_alone_hand_worked():
    """eps in [0, 0.9] is swept at its 9 midpoints 0.05 .. 0.85; with tok/s = exp(eps) the eps
    part's ends are exp of the grid's 5th and 95th percentiles, 0.05 + 0.4 x 0.1 and
    0.05 + 7.6 x 0.1. The band itself counts each eps point once per noise point (99 each, here
    all at zero noise): the 5th percentile of 891 values falls in the first 99, at 0.05."""
    assert EPS_POINTS == 9
    eps = Term("eps", 0.3, 0.0, 0.9, "f", "fitted", "t")
    b = tok_s_band(lambda d: math.exp, object(), (), eps, 0.0)
    assert b.parts["eps"] == pytest.approx((math.exp(0.09), math.exp(0.81)), rel=1e-12)
    assert (b.lo, b.point, b.hi) == pytest.approx((math.exp(0.05), math.exp(0.3), math.exp(0.85)),
                                                  rel=1e-12)


def test_band_of_replicates_and_levels():
    reps = [1.0, 2.0, 3.0, 4.0, 5.0]
    b = tok_s_band(lambda d: (lambda e: d), 3.0, reps, None, 0.0, level=0.5)
    # ln of 1..5, quantiles 0.25 and 0.75 (linear): ln 2 and ln 4
    assert (b.lo, b.point, b.hi) == pytest.approx((2.0, 3.0, 4.0))
    for bad in (dict(level=1.0), dict(sigma=-0.1), dict(sigma=float("inf"))):
        with pytest.raises(ConfigError):
            tok_s_band(const(1.0), object(), (), None, **({"sigma": 0.0} | bad))
    with pytest.raises(ConfigError, match="expected > 0"):
        tok_s_band(const(0.0), object(), (), None, 0.0)


@settings(max_examples=50)
@given(st.lists(st.floats(0.2, 20.0), max_size=12), st.floats(0.2, 20.0), st.floats(0.0, 0.3),
       st.floats(0.0, 2.0), st.floats(0.0, 2.0), st.floats(-2.0, 2.0), st.floats(0.05, 0.99))
def test_the_band_contains_its_point(reps, dev, sigma, e_lo, e_w, slope, level):
    eps = Term("eps", e_lo + e_w / 3, e_lo, e_lo + e_w, "f", "fitted", "t")

    def pred(d):
        return lambda e: d * math.exp(slope * (e - e_lo))
    b = tok_s_band(pred, dev, reps, eps, sigma, level)
    assert b.lo <= b.point <= b.hi
    d = delta_band(pred, lambda d: (lambda e: d), dev, reps, eps, sigma, level)
    assert d.lo <= d.point <= d.hi
    for lo, hi in b.parts.values():
        assert lo <= hi


def test_bootstrap_is_seeded_and_says_what_it_cannot_estimate():
    import tempfile
    from refsim.testing.recording_sets import DESKTOP, set_inputs
    from refsim.timing.plain import load_plain_runs
    require_shared("real-runs", DESKTOP)
    runs, _ = load_plain_runs(set_inputs(DESKTOP, tempfile.mkdtemp()).specs, 50)
    a, notes = bootstrap_devices(runs, 4, seed=7)
    b, _ = bootstrap_devices(runs, 4, seed=7)
    assert notes == () and [d.params for d in a] == [d.params for d in b]
    assert len({d.compute_floor(runs[0].model) for d in a}) > 1
    # one overlap run among serial ones: that stratum is resampled as itself
    _, notes = bootstrap_devices(runs[:3] + runs[8:9], 2)
    assert len(notes) == 1 and "pc-I-c5000-overlap.csv" in notes[0] and "not estimated" in notes[0]
    with pytest.raises(ConfigError, match="at least 2"):
        bootstrap_devices(runs[:1])


def test_bootstrap_width_of_the_desktop_floor():
    """The parameters' share of a band on the desktop: a plain run's predicted tok/s moves by
    0.9-2.2 % (half-width, 90 %) over 200 refits on resampled runs (docs/whatif-terms.md)."""
    import tempfile
    from refsim.testing.recording_sets import DESKTOP, set_inputs
    from refsim.timing import fit_device
    from refsim.timing.plain import load_plain_runs
    require_shared("real-runs", DESKTOP)
    runs, _ = load_plain_runs(set_inputs(DESKTOP, tempfile.mkdtemp()).specs, 50)
    reps, _ = bootstrap_devices(runs, 200, seed=0)
    dev = fit_device(runs, jackknife=False)
    halves = []
    for r in runs[:3]:
        b = tok_s_band(lambda d, r=r: (lambda e: 1000.0 / float(
            d.token_ms(r.x, r.model, r.lanes, r.overlap, r.cache)["wall"].mean())), dev, reps)
        halves.append(100 * (b.hi - b.lo) / 2 / b.point)
    assert [round(h, 1) for h in halves] == [0.9, 1.5, 2.2]


def test_calibration_refuses_a_floor_beyond_a_device_parameters_bound():
    # a baseline whose time column is damaged (one token's wall_ms 1e300 in the recheck) re-fitted
    # C to a ~300-digit ms/token and every rate printed 0.000; a floor above the bound a device
    # file's parameters have (1e7 ms) is refused, the bound itself still accepted
    with pytest.raises(ConfigError, match=r"run.csv: the re-fitted compute floor is 1e\+300 ms/token; "
                                          r"expected at most 1e\+07"):
        calibrate_floor(device(), run(np.linspace(0.0, 40.0, 16), 1e300))
    assert calibrate_floor(device(), run(np.linspace(0.0, 40.0, 16), 1e7)).floor.value == pytest.approx(1e7)
