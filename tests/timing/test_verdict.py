"""The one pricing path (refsim.timing.verdict, issue 29): hand-worked values for every term, the
break-even against breakeven.py's closed form, the memory term's cases, the --spec parser's
refusals, and hypothesis properties (the change is monotone in the acceptance; zero coverage is
``off``; every band contains its point)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.errors import ConfigError
from refsim.timing import DeviceModel, Param
from refsim.timing.band import bootstrap_devices  # noqa: F401  (the band's replicates, used by price)
from refsim.timing.breakeven import decode_ms
from refsim.timing.model import PARAMS
from refsim.timing.terms import Term, exact
from refsim.timing.verdict import (STORM_SHARE, Device, Reads, SpecConfig, breakeven_acceptance,
                                   memory_term, parse_spec_list, price, verdict_of)

KNOWN = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
         "h": 0.1, "tail": 1.1}


def device(c=100.0) -> DeviceModel:
    return DeviceModel(params={k: Param(KNOWN.get(k, 0.0)) for k in PARAMS},
                       compute={"m": Param(c)}, name="toy", serial_runs=1, overlap_runs=1)


EPS = Term("eps", 0.4, 0.2, 0.6, "fraction of C per position", "fitted", "toy")
READS = {1: Reads(1, 50.0, 80.0), 4: Reads(4, 120.0, 70.0)}


def dv(overlap=False, sigma=0.0, eps=EPS, head=None, replicates=()):
    return Device(device(), "m", 4, overlap, eps, sigma=sigma, head=head, replicates=replicates)


# --- hand-worked terms --------------------------------------------------------------------------

def test_off_terms_by_hand_serial():
    p = price(dv(), SpecConfig("off"), READS, budget_mib=3000)
    # compute tail C = 1.1 x 100; bookkeeping 1.1 (5 + 0.2 x 50); flash 1.1 (3 + 50 (1 + 0.5/4))
    assert p.term("compute").value == pytest.approx(110.0)
    assert p.term("bookkeeping").value == pytest.approx(16.5)
    assert p.term("flash").value == pytest.approx(65.175)
    assert p.term("extra_positions").value == 0.0
    assert p.term("stall").value == 0.0 and p.term("head").value == 0.0
    assert p.ms_per_token == pytest.approx(191.675)
    assert p.eff_tok_s.point == pytest.approx(1000.0 / 191.675)
    assert p.delta is None and p.verdict is None and p.breakeven_acceptance is None
    assert p.mib_per_token == 50.0 and p.hit_pct == 80.0


def test_ngram_terms_by_hand():
    cfg = SpecConfig("ngram", 3, 3, acceptance=0.5, coverage=0.2)
    p = price(dv(), cfg, READS)
    assert p.positions_per_decode == pytest.approx(1.6)      # 1 + 0.2 x 3
    assert p.tokens_per_decode == pytest.approx(1.3)         # 1 + 0.2 x 3 x 0.5
    assert p.term("compute").value == pytest.approx(110.0 / 1.3)
    assert p.term("extra_positions").value == pytest.approx(0.2 * 110 * 0.4 * 3 / 1.3)
    assert p.term("extra_positions").lo == pytest.approx(0.2 * 110 * 0.2 * 3 / 1.3)
    assert p.term("extra_positions").hi == pytest.approx(0.2 * 110 * 0.6 * 3 / 1.3)
    assert p.term("bookkeeping").value == pytest.approx((0.8 * 16.5 + 0.2 * 1.1 * 29.0) / 1.3)
    # a drafted decode reads 120 MiB: 1.1 (3 + 120 x 1.125) = 151.8
    assert p.term("flash").value == pytest.approx((0.8 * 65.175 + 0.2 * 151.8) / 1.3)
    assert p.mib_per_token == pytest.approx((0.8 * 50 + 0.2 * 120) / 1.3)
    assert p.hit_pct == pytest.approx(0.8 * 80 + 0.2 * 70)
    # t(4) = 1.1 (100 (1 + 3 x 0.4)) + 1.1 x 29 + 151.8 = 425.7; t(1) = 191.675
    t4, t1 = 425.7, 191.675
    assert p.ms_per_token == pytest.approx((0.8 * t1 + 0.2 * t4) / 1.3)
    assert p.delta.point == pytest.approx(100 * (t1 / ((0.8 * t1 + 0.2 * t4) / 1.3) - 1))
    assert p.breakeven_acceptance == pytest.approx((t4 / t1 - 1) / 3, abs=1e-8)
    assert p.row()["verdict"] == "within noise"     # eps 0.6 (its upper end) loses
    assert p.delta.lo < 0 < p.delta.point
    sure = price(dv(eps=exact("eps", 0.4, "", "fitted", "toy")), cfg, READS)
    assert (sure.delta.lo, sure.delta.hi) == (sure.delta.point, sure.delta.point)
    assert sure.verdict == "gains"                  # nothing uncertain: the band is the point


def test_in_decode_terms_sum_to_decode_ms():
    for overlap in (False, True):
        d = dv(overlap=overlap)
        for cfg in (SpecConfig("off"), SpecConfig("ngram", 3, 2, 0.7, 1.0),
                    SpecConfig("ngram", 3, 2, 0.3, 0.45)):
            p = price(d, cfg, READS)
            c = cfg.drafted_fraction
            want = ((1 - c) * decode_ms(d.model, 50.0, 1, "m", 4, overlap, True, 0.4)
                    + c * decode_ms(d.model, 120.0, 4, "m", 4, overlap, True, 0.4)) / cfg.tokens_per_decode
            assert p.ms_per_token == pytest.approx(want, rel=1e-12)


def test_overlap_terms_by_hand():
    p = price(dv(overlap=True), SpecConfig("off"), READS)
    # contention 1.1 x 0.1 x 50; stall 1.1 max(0, 2 + 0.8 x 50 - 0.1 x 100) = 1.1 x 32
    assert p.term("contention").value == pytest.approx(5.5)
    assert p.term("stall").value == pytest.approx(35.2)
    assert p.term("flash").value == 0.0


def test_mtp_head_given_and_breakeven():
    head = exact("head_ms", 20.0, "ms/token", "assumed", "user")
    cfg = SpecConfig("mtp", 3, acceptance=0.8)
    p = price(dv(head=head), cfg, READS)
    assert p.positions_per_decode == 4.0 and p.tokens_per_decode == pytest.approx(3.4)
    assert p.term("head").value == 20.0 and p.term("head").kind == "assumed"
    assert p.ms_per_token == pytest.approx(425.7 / 3.4 + 20.0)
    # break-even: 425.7 / (1 + 3a) + 20 = 191.675
    a = (425.7 / (191.675 - 20.0) - 1) / 3
    assert p.breakeven_acceptance == pytest.approx(a, abs=1e-8)
    assert p.notes[0].startswith("acceptance and coverage assumed")


def test_mtp_without_head_inputs_refused():
    with pytest.raises(ConfigError, match="tensor table"):
        price(dv(), SpecConfig("mtp", 3, acceptance=0.8), READS)


def test_breakeven_never_and_free():
    cfg = SpecConfig("ngram", 3, 3, 0.5, 0.5)
    heavy = {1: Reads(1, 50.0), 4: Reads(4, 2000.0)}
    assert math.isnan(breakeven_acceptance(dv(), cfg, heavy))
    free = {1: Reads(1, 50.0), 4: Reads(4, 50.0)}
    zero = Term("eps", 0.0, 0.0, 0.0, "", "fitted", "toy")
    assert breakeven_acceptance(dv(eps=zero), cfg, free) == 0.0


def test_missing_width_and_acceptance_refused():
    with pytest.raises(ConfigError, match="width 3"):
        price(dv(), SpecConfig("ngram", 2, 2, 0.5, 0.5), READS)
    with pytest.raises(ConfigError, match="no acceptance"):
        price(dv(), SpecConfig("ngram", 3, 2, None, 0.5), READS)
    with pytest.raises(ConfigError, match="no coverage"):
        price(dv(), SpecConfig("ngram", 3, 2, 0.5, None), READS)


# --- memory ---------------------------------------------------------------------------------------

def test_memory_term_cases():
    assert memory_term(0.0, None, 200.0).width == 0.0
    fits = memory_term(300.0, 500.0, 200.0)
    assert (fits.value, fits.width, fits.kind) == (0.0, 0.0, "derived")
    unknown = memory_term(300.0, None, 200.0)
    assert (unknown.value, unknown.width, unknown.kind) == (0.0, 0.0, "not_modelled")
    over = memory_term(300.0, 100.0, 200.0)
    assert over.kind == "not_modelled" and over.value == 0.0
    assert over.hi == pytest.approx(200.0 * (4.43 / 3.14 - 1))
    assert STORM_SHARE == pytest.approx(0.41083, abs=1e-5)
    with pytest.raises(ConfigError):
        memory_term(-1.0, None, 200.0)


def test_memory_pressure_widens_only_downward():
    cfg = SpecConfig("ngram", 3, 3, 0.5, 0.2)
    d = dv(eps=exact("eps", 0.4, "", "fitted", "toy"))
    calm = price(d, cfg, READS, spec_mib=100.0, headroom_mib=1000.0)
    storm = price(d, cfg, READS, spec_mib=100.0, headroom_mib=10.0)
    assert storm.delta.point == calm.delta.point and storm.delta.hi == calm.delta.hi
    assert storm.delta.lo < calm.delta.lo
    assert storm.verdict == "within noise" and calm.verdict == "gains"


# --- parser ---------------------------------------------------------------------------------------

def test_parse_spec_list():
    cfgs = parse_spec_list("ngram:d=3:m=3:acceptance=0.442:coverage=0.150,mtp:d=3:acceptance=0.824")
    assert [c.label for c in cfgs] == ["off", "ngram:d=3:m=3", "mtp:d=3"]
    assert cfgs[1].acceptance == 0.442 and cfgs[1].coverage == 0.15 and cfgs[1].source == "assumed"


@pytest.mark.parametrize("bad, msg", [
    ("ngram:d=3", "m= is required"), ("mtp", "d= is required"), ("mtp:d=3:m=2", "unknown key"),
    ("beam:d=2", "expected off"), ("ngram:d=x:m=3", "integers"), ("off,off", "twice"),
    ("ngram:d=3:m=3:acceptance=1.5", "0..1"), ("mtp:d=0", ">= 1"), ("mtp:d=2:d=3", "twice")])
def test_parse_spec_refusals(bad, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_spec_list(bad)


def test_verdict_of():
    from refsim.timing.band import Band
    assert verdict_of(Band(2.0, 1.0, 3.0, 0.9, "%")) == "gains"
    assert verdict_of(Band(-2.0, -3.0, -1.0, 0.9, "%")) == "loses"
    assert verdict_of(Band(-2.0, -3.0, 1.0, 0.9, "%")) == "within noise"


# --- properties -----------------------------------------------------------------------------------

widths = st.sampled_from([1, 2, 3, 4])
mib = st.floats(0.0, 500.0)


@settings(max_examples=40, deadline=None)
@given(a1=st.floats(0.0, 1.0), a2=st.floats(0.0, 1.0), c=st.floats(0.01, 1.0), x1=mib, xw=mib,
       overlap=st.booleans(), kind=st.sampled_from(["ngram", "mtp"]))
def test_delta_monotone_in_acceptance(a1, a2, c, x1, xw, overlap, kind):
    lo, hi = sorted((a1, a2))
    head = exact("head_ms", 15.0, "ms/token", "assumed", "user")
    reads = {1: Reads(1, x1), 4: Reads(4, xw)}
    mk = (lambda a: SpecConfig("ngram", 3, 3, a, c)) if kind == "ngram" else \
        (lambda a: SpecConfig("mtp", 3, acceptance=a))
    d = dv(overlap=overlap, head=head)
    assert price(d, mk(lo), reads).delta.point <= price(d, mk(hi), reads).delta.point + 1e-9


@settings(max_examples=40, deadline=None)
@given(a=st.floats(0.0, 1.0), x1=mib, xw=mib, overlap=st.booleans(), sigma=st.floats(0.0, 0.1),
       spec_mib=st.floats(0.0, 1000.0))
def test_zero_coverage_is_off_up_to_memory(a, x1, xw, overlap, sigma, spec_mib):
    reads = {1: Reads(1, x1), 4: Reads(4, xw)}
    p = price(dv(overlap=overlap, sigma=sigma), SpecConfig("ngram", 3, 3, a, 0.0), reads,
              spec_mib=spec_mib, headroom_mib=None)
    assert p.delta.point == pytest.approx(0.0, abs=1e-9)
    assert p.tokens_per_decode == 1.0 and p.positions_per_decode == 1.0


@settings(max_examples=30, deadline=None)
@given(a=st.floats(0.0, 1.0), c=st.floats(0.0, 1.0), x1=mib, xw=mib, overlap=st.booleans(),
       sigma=st.floats(0.0, 0.1), e=st.floats(0.0, 1.0), w=st.floats(0.0, 0.5),
       headroom=st.one_of(st.none(), st.floats(-100.0, 100.0)))
def test_bands_contain_their_points(a, c, x1, xw, overlap, sigma, e, w, headroom):
    eps = Term("eps", e, max(0.0, e - w), e + w, "", "fitted", "toy")
    reads = {1: Reads(1, x1), 4: Reads(4, xw)}
    p = price(dv(overlap=overlap, sigma=sigma, eps=eps), SpecConfig("ngram", 3, 3, a, c), reads,
              spec_mib=50.0, headroom_mib=headroom)
    assert p.eff_tok_s.contains(p.eff_tok_s.point)
    assert p.delta.contains(p.delta.point)
    for t in p.terms:
        assert t.contains(t.value)


def test_mtp_head_derived_from_the_twin(tmp_path):
    """The head term is refsim.timing.head's (the one implementation), at the device's floor and
    eps, per emitted token: on the Qwen3.6 twin's tensor table, C 100 ms, eps 0.4, d 3, tpd 3.4
    it is 100 (3 s_draft + s_catch (1 + 0.4 x 2.4)) / 3.4 with the bytes shares."""
    from refsim.testing.recording_sets import qwen36_inputs
    from refsim.timing.head import head_ms_per_token, head_shares
    work, _ = qwen36_inputs(str(tmp_path))
    d = Device(device(), "m", 4, False, EPS, work=work)
    p = price(d, SpecConfig("mtp", 3, acceptance=0.8), READS)
    sh = head_shares(work)
    want = 100.0 * (3 * sh["draft"][0] + sh["catch"][0] * (1 + 0.4 * 2.4)) / 3.4
    assert p.term("head").value == pytest.approx(want, rel=1e-12)
    assert p.term("head").kind == "derived"
    ref = head_ms_per_token(work, exact("C", 100.0, "ms", "fitted", ""), EPS, 3, 3.4)
    assert p.term("head").value == pytest.approx(ref.value, rel=1e-12)
    assert p.ms_per_token == pytest.approx(425.7 / 3.4 + want)


def test_fitted_terms_carry_the_refits_spread():
    """With bootstrap refits (C = 90, 100, ..., 130 ms; the other parameters the point fit's), each
    fitted term's interval is the refits' central 90 % at eps's value (numpy's linear quantiles:
    the 5th and 95th percentile of five values are value 0 + 0.2 x step and value 3 + 0.8 x step);
    off's compute is tail C = 1.1 C: [1.1 x 92, 1.1 x 128]; terms the refits do not move keep a
    zero-width interval; without refits every fitted term is exact (the --explain a new-user
    pass found showing [109, 109] beside a band of 200 refits)."""
    reps = tuple(device(c) for c in (90.0, 100.0, 110.0, 120.0, 130.0))
    p = price(dv(replicates=reps), SpecConfig("off"), READS)
    t = p.term("compute")
    assert t.value == pytest.approx(110.0)
    assert (t.lo, t.hi) == pytest.approx((1.1 * 92.0, 1.1 * 128.0), rel=1e-12)
    assert t.note == "interval: the 5 bootstrap refits' central 90 % at eps's value"
    b = p.term("bookkeeping")
    assert b.lo == b.value == b.hi == pytest.approx(16.5)
    bare = price(dv(), SpecConfig("off"), READS).term("compute")
    assert bare.lo == bare.value == bare.hi and bare.note == ""
    # refits all slower than the point fit: the interval reaches down to the point (hull)
    p2 = price(dv(replicates=(device(150.0), device(160.0))), SpecConfig("off"), READS)
    t2 = p2.term("compute")
    assert t2.lo == pytest.approx(110.0) and t2.hi == pytest.approx(1.1 * 159.5, rel=1e-12)
