"""Published verdicts, predicted (issue 29 item 4; docs/timing.md "Published verdicts, predicted"):
the validation table's figures from a run of the library, one cell hand-worked from its terms, the
phone memory term hand-worked, and the fit and calibrations unchanged when every speculation cell
is removed from (or altered in) the inputs. The shared-data tests skip without REFSIM_SHARED."""

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refsim.errors import ConfigError
from refsim.testing.shared import require_shared
from refsim.timing import DeviceModel, Param
from refsim.timing.model import PARAMS
from refsim.timing.terms import Term, exact
from refsim.timing.validate import (HOST_AUTO_BUDGET_MIB, SESSIONS, PublishedCell, Session,
                                    auto_cell_budget, criteria, fitted_parameters,
                                    markdown, match_budget, plain_mib_per_token, pressure_memory,
                                    recorded_fault_check, spec_config, speculation_mib, validate)
from refsim.timing.verdict import Device, Reads, SpecConfig, price

DOCS = Path(__file__).resolve().parents[2] / "docs" / "timing.md"

# (rate, published %, predicted point, lo, hi, inside, sign agrees), as the table prints them
# (REFSIM_SHARED=../shared python3 tools/whatif_validate.py; 200 replicates, seed 0)
TABLE = {
    ("host mtp d2", "tok/s"): ("+7.6", "+8.7", "-37.0", "+80.5", True, True),
    ("host mtp d3", "tok/s"): ("+15.0", "-6.8", "-46.1", "+82.7", True, False),
    ("host mtp d4", "tok/s"): ("+7.3", "-18.1", "-52.4", "+82.1", True, False),
    ("host prose mtp d3", "tok/s"): ("+51.7", "-15.3", "-51.5", "+95.2", True, False),
    ("host prose mtp d3", "effective"): ("+26.2", "-24.9", "-55.0", "+51.8", True, False),
    ("host prose ngram d3 m3", "tok/s"): ("+12.2", "-11.9", "-37.8", "+17.7", True, False),
    ("host copy mtp d3", "tok/s"): ("+35.8", "+1.3", "-41.1", "+128.7", True, True),
    ("host copy mtp d3", "effective"): ("+18.0", "-9.3", "-45.0", "+82.5", True, False),
    ("host copy ngram d3 m3", "tok/s"): ("-3.9", "-13.6", "-41.7", "+28.3", True, True),
    ("host copy ngram d3 m5", "tok/s"): ("-2.6", "-4.6", "-32.5", "+29.8", True, True),
    ("host copy ngram d3 m8", "tok/s"): ("+0.7", "-4.1", "-31.3", "+27.9", True, False),
    ("host copy ngram d1 m5", "tok/s"): ("+2.0", "+0.9", "-29.3", "+29.6", True, True),
    ("phone mtp d2", "tok/s"): ("-4.0", "+6.4", "-22.7", "+29.0", True, False),
    ("phone mtp d3", "tok/s"): ("-24.7", "-14.6", "-37.7", "+5.8", True, True),
    ("phone prose ngram d3 m3", "tok/s"): ("-5.2", "-9.9", "-24.0", "+5.7", True, True),
    ("phone copy mtp d3", "tok/s"): ("-6.3", "-5.0", "-24.8", "+14.9", True, True),
    ("phone copy mtp d3", "effective"): ("-17.8", "-9.3", "-28.0", "+8.2", True, True),
    ("phone copy ngram d3 m3", "tok/s"): ("-29.1", "-9.9", "-24.4", "+5.0", False, True),
}
BUDGETS = {"host mtp": 8182, "host prose": 5483, "host copy": 4926, "phone mtp": 4549,
           "phone prose": 4075, "phone copy": 3236}
# --cache-mb auto: the budget each host speculation cell is replayed at (auto_cell_budget)
CELL_BUDGETS = {"host mtp d2": 7636, "host mtp d3": 7477, "host mtp d4": 7317,
                "host prose mtp d3": 5010, "host prose ngram d3 m3": 5162, "host copy mtp d3": 4501,
                "host copy ngram d3 m3": 4638, "host copy ngram d3 m5": 4638,
                "host copy ngram d3 m8": 4638, "host copy ngram d1 m5": 4830}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    require_shared()
    from refsim.testing.validation_inputs import validation_inputs
    return validation_inputs(str(tmp_path_factory.mktemp("validate")))


@pytest.fixture(scope="module")
def result(inputs):
    return validate(inputs, n_boot=200, seed=0)


def _row(result, name, rate="tok/s"):
    return next(r for r in result.rows if r.cell.name == name and r.rate == rate)


# --- the table ----------------------------------------------------------------------------------

def test_table_figures(result):
    got = {(r.cell.name, r.rate): (f"{r.published_pct:+.1f}", f"{r.band.point:+.1f}",
                                   f"{r.band.lo:+.1f}", f"{r.band.hi:+.1f}", r.inside, r.sign_agrees)
           for r in result.rows}
    assert got == TABLE
    assert {k: b for k, (b, _) in result.budgets.items()} == BUDGETS
    assert {r.cell.name: r.cell_budget_mib for r in result.rows if r.device == "host"} == CELL_BUDGETS
    assert all(r.cell_budget_mib is None and r.off_reads is None
               for r in result.rows if r.device == "phone")
    for name, (b, mib) in result.budgets.items():
        off = next(s for s in SESSIONS if s.name == name).off
        assert abs(mib - off.mib_per_token) < 0.35        # the matched budget's plain read


def test_criteria_as_documented(result):
    c = result.criteria
    assert (c.n, c.signs_agree, c.inside, c.host_n, c.host_within_10) == (18, 10, 17, 12, 0)
    assert c.host_widest_pts == pytest.approx(127.4, abs=0.05)
    assert not c.copy_ngram_inside
    assert c.lines()[1] == ">= 80 % of published deltas inside the band: 17 of 18 = 94 % (met)"


def test_docs_hold_the_table(result):
    text = DOCS.read_text()
    assert "## Published verdicts, predicted" in text
    for line in markdown(result):
        assert line in text, line
    for line in result.criteria.lines():
        assert line in text, line


def test_each_band_contains_its_point(result):
    for r in result.rows:
        assert r.band.lo <= r.band.point <= r.band.hi


# --- one cell by hand ----------------------------------------------------------------------------

def test_host_copy_ngram_d1_m5_hand_worked(result):
    """``host copy ngram d1 m5``: coverage 9.7 %, acceptance 82.6 %, 1.08 tokens per decode.

    mean drafts = (1.08 - 1) / (0.097 x 0.826) = 0.99845; positions of a drafted decode 1.99845.
    A decode of x MiB and w positions on the calibrated host device (overlap):
    ``t = tail (C (1 + eps (w - 1)) + m0 + m1 x + kappa x + max(0, s0 + s1 x - h C))``.
    off: t(X0, 1) at the matched budget 4926 MiB; ngram, replayed at 4830 MiB (``--cache-mb
    auto``: 62.8 MiB of snapshots leave the 3219 MiB cache): ((1 - c) t(X1, 1) + c t(X2,
    1.99845)) / 1.08 per token, X1 and X2 that budget's reads.
    """
    r = _row(result, "host copy ngram d1 m5")
    dev = r.dv.model
    v = dev.value
    C = dev.compute_floor("cell")
    eps = r.dv.eps.value
    assert eps == pytest.approx(0.371, abs=5e-4)        # eps(w = 2), docs/whatif-terms.md
    x0 = r.off_reads[1].mib_per_decode
    x1, x2 = r.reads[1].mib_per_decode, r.reads[2].mib_per_decode
    assert r.cell_budget_mib == round(4926 * (3219 - 62.8125) / 3219) == 4830
    assert x1 > x0                                     # the smaller cache reads more
    assert C == pytest.approx(121.7, abs=0.05)           # calibrated on host copy off (5.45 tok/s)

    def t(x, w):
        return v("tail") * (C * (1 + eps * (w - 1)) + v("m0") + v("m1") * x + v("kappa") * x
                            + max(0.0, v("s0") + v("s1") * x - v("h") * C))
    d = 0.08 / (0.097 * 0.826)
    assert r.price.config.drafts == pytest.approx(d, rel=1e-12)
    c, tpd = 0.097, 1.0 + 0.097 * d * 0.826
    assert tpd == pytest.approx(1.08, rel=1e-12)
    off_ms = t(x0, 1)
    spec_ms = ((1 - c) * t(x1, 1) + c * t(x2, 1 + d)) / tpd
    assert 1000.0 / off_ms == pytest.approx(5.45, rel=1e-3)   # the off cell, reproduced at X1
    assert r.price.ms_per_token == pytest.approx(spec_ms, rel=1e-12)
    assert r.band.point == pytest.approx(100.0 * (off_ms / spec_ms - 1.0), rel=1e-9)
    assert r.band.point == pytest.approx(0.9, abs=0.05)


def test_spec_config_from_published_figures():
    cells = {c.name: c for s in SESSIONS for c in s.cells}
    # (1.05 - 1) / (0.074 x 0.222) = 3.04 > d: the rounded figures, clipped to d = 3
    prose = spec_config(cells["host prose ngram d3 m3"])
    assert prose.mean_drafts == 3.0 and prose.coverage == 0.074 and prose.acceptance == 0.222
    mtp = spec_config(cells["host mtp d3"])
    assert mtp.mean_drafts == pytest.approx(1.78 / 0.601, rel=1e-12)
    assert mtp.tokens_per_decode == pytest.approx(2.78, rel=1e-12)
    assert spec_config(cells["phone mtp d3"]).mean_drafts is None     # no tpd published: d


@given(kind=st.sampled_from(["ngram", "mtp"]), d=st.integers(1, 8),
       alpha=st.floats(0.01, 1.0), cov=st.floats(0.01, 1.0), frac=st.floats(0.0, 1.2))
def test_spec_config_reproduces_the_published_tokens_per_decode(kind, d, alpha, cov, frac):
    """Mean drafts stay in [0, d]; when the published tokens per decode are reachable
    (``1 + c d alpha`` at most) the configuration reproduces them exactly."""
    c = 1.0 if kind == "mtp" else cov
    tpd = 1.0 + frac * c * d * alpha
    cell = PublishedCell("x", kind, 1.0, 1.0, d, 3 if kind == "ngram" else 0, alpha,
                         cov if kind == "ngram" else 1.0, tpd)
    cfg = spec_config(cell)
    assert 0.0 <= cfg.drafts <= d
    if frac <= 1.0:
        assert cfg.tokens_per_decode == pytest.approx(tpd, rel=1e-9, abs=1e-12)
    else:
        assert cfg.drafts == d and cfg.tokens_per_decode == pytest.approx(1 + c * d * alpha)


# --- the memory term -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    from refsim.model import open_model
    from refsim.testing.twins import qwen36_twin
    return open_model(qwen36_twin(str(tmp_path_factory.mktemp("twin") / "q36.gguf")))


def test_phone_memory_term_hand_worked(twin):
    """copy n-gram d3 on the phone: the ledger adds 3 snapshots of 62.8 MiB = 188.4 MiB; the pool
    at 3000 MiB, ahwb, n_ctx 4096 is 3142.8 MiB (docs/memory-pressure.md); E0 = 281.9 MiB;
    ratio = (470.3 / 3331.2) / (281.9 / 3142.8) = 1.5740; faults added 126 x 0.5740 = 72.3;
    x t_f 0.053118 ms = 3.84 ms/token."""
    cells = {c.name: c for s in SESSIONS for c in s.cells}
    off, cell = cells["phone copy off"], cells["phone copy ngram d3 m3"]
    a = speculation_mib(twin, cell)
    assert a == pytest.approx(188.4, abs=0.05)
    m = pressure_memory(twin, off, cell)
    ratio = ((281.9 + a) / (3142.8 + a)) / (281.9 / 3142.8)
    assert ratio == pytest.approx(1.574, abs=5e-4)
    assert m.value == pytest.approx(0.05311831161231709 * 126 * (ratio - 1), rel=2e-4)
    assert m.value == pytest.approx(3.84, abs=0.01)
    assert m.lo <= m.value <= m.hi and m.kind == "fitted"
    with pytest.raises(ConfigError, match="no published majflt"):
        pressure_memory(twin, dataclasses.replace(off, majflt=()), cell)


def test_phone_mtp_memory_term_counts_the_pinned_nextn_dense(twin):
    """MTP d3 on the phone (ahwb): resident +281.44 MiB (snapshots 188.44, draft context 68.63,
    nextn dense 24.38, pinned), of which reclaim can take 257.06 (the nextn dense is pinned);
    ratio = ((281.9 + 281.44) / (3142.8 + 257.06)) / (281.9 / 3142.8) = 1.8477; off faults are
    69-109 (mean 89): 89 x 0.8477 x t_f = 4.01 ms/token."""
    cells = {c.name: c for s in SESSIONS for c in s.cells}
    off, cell = cells["phone mtp off"], cells["phone mtp d3"]
    assert speculation_mib(twin, cell) == pytest.approx(257.06, abs=0.005)
    m = pressure_memory(twin, off, cell)
    from refsim.timing.pressure import PHONE_FIT
    e0, tf = PHONE_FIT.evicted.value, PHONE_FIT.ms_per_fault.value
    ratio = ((e0 + 281.439453125) / (3142.8 + 257.0625)) / (e0 / 3142.8)
    assert m.value == pytest.approx(tf * 89.0 * (ratio - 1.0), rel=2e-4)
    assert m.value == pytest.approx(4.01, abs=0.01)
    assert "adds 281.4 MiB resident" in m.source and "257.1 to P0" in m.source


def test_auto_cell_budget_hand_worked(twin):
    """Host MTP d3 under ``--cache-mb auto`` (Qwen3.6 twin, n_ctx 2048, anon dense): the ledger
    takes 3 recurrent snapshots (188.4 MiB), the draft context's KV and buffers (64.6 MiB) and,
    loaded with --mtp, the nextn block's dense tensors from the plain run's 3219 MiB: 277.4 MiB;
    the matched 8182 MiB becomes round(8182 x 2941.6 / 3219) = 7477 MiB. n-gram d1: one
    snapshot, 62.8 MiB."""
    from refsim import MIB
    from refsim.cache.ledger import memory_ledger
    cells = {c.name: c for s in SESSIONS for c in s.cells}
    b, a = auto_cell_budget(twin, cells["host mtp d3"], 8182)
    led = memory_ledger(twin, 2048, 3, True, dense_weights="anon")
    plain = memory_ledger(twin, 2048, 0, False, dense_weights="anon")
    by_items = (led.speculation_bytes + led.dense_bytes - plain.dense_bytes) / MIB
    assert a == pytest.approx(by_items, abs=1e-9)
    assert a == pytest.approx(277.44, abs=0.005) and led.speculation_bytes / MIB == pytest.approx(253.06, abs=0.005)
    assert b == round(8182 * (HOST_AUTO_BUDGET_MIB - a) / HOST_AUTO_BUDGET_MIB) == 7477
    b1, a1 = auto_cell_budget(twin, cells["host copy ngram d1 m5"], 4926)
    assert a1 == pytest.approx(62.8125, abs=1e-9) and b1 == 4830
    assert auto_cell_budget(twin, cells["host copy off"], 4926) == (4926, 0.0)
    # the published speculation run's 2697 MiB is a check, never an input: the ledger's is 2941.6
    with pytest.raises(ConfigError, match="linear range"):
        auto_cell_budget(twin, cells["host mtp d3"], 8182, auto_mib=1000.0)


@given(d=st.integers(1, 8), mtp=st.booleans(), matched=st.integers(300, 16000),
       auto=st.floats(2000.0, 9000.0))
def test_auto_cell_budget_properties(twin, d, mtp, matched, auto):
    """The cell's budget never exceeds the off cell's, falls as the draft widens (strictly while
    the engine's rule is above its 1500 MiB minimum, bmoe-engine.md §3.3), and the shrink does
    not depend on the matched budget."""
    cell = PublishedCell("x", "mtp" if mtp else "ngram", 1.0, 1.0, d, 0 if mtp else 3, 0.5, 1.0)
    b, a = auto_cell_budget(twin, cell, matched, auto_mib=auto)
    assert 1 <= b <= matched and a > 0
    assert abs(b - matched * (auto - a) / auto) <= 0.5
    if d < 8:
        b2, a2 = auto_cell_budget(twin, dataclasses.replace(cell, draft=d + 1), matched, auto_mib=auto)
        assert a2 >= a and b2 <= b
        if auto - a2 > 1500.0:                    # above the rule's minimum budget: strictly
            assert a2 > a
    assert auto_cell_budget(twin, cell, 5000, auto_mib=auto)[1] == pytest.approx(a, abs=1e-9)


def test_assumed_auto_budget_widens_the_band_to_its_other_end(inputs, result):
    """The prose and copy sessions' auto budget is assumed (3219 MiB, the MTP session's) with the
    host's largest recorded auto budget (7420 MiB) as the other end: each row's point is the one
    at 3219 MiB and its band the hull of both. The MTP session's is published: no hull."""
    from refsim.timing.validate import HOST_AUTO_BUDGET_HI_MIB
    assert HOST_AUTO_BUDGET_HI_MIB == 7420.0
    by = {s.name: s for s in SESSIONS}
    assert by["host mtp"].auto_mib == (3219.0,)
    assert by["host prose"].auto_mib == by["host copy"].auto_mib == (3219.0, 7420.0)
    narrow = (dataclasses.replace(by["host copy"], auto_mib=(3219.0,)),)
    alone = {(r.cell.name, r.rate): r.band for r in validate(inputs, narrow, n_boot=200, seed=0).rows}
    for r in result.rows:
        if r.session != "host copy":
            continue
        b = alone[(r.cell.name, r.rate)]
        assert r.band.point == b.point and r.band.lo <= b.lo and r.band.hi >= b.hi
    assert any(r.band.hi > alone[(r.cell.name, r.rate)].hi for r in result.rows
               if r.session == "host copy")


def test_auto_budget_sigma_hand_worked(inputs, tmp_path):
    """The desktop set's five --cache-mb auto runs chose 5280, 7127, 7420, 7304 and 7184 MiB
    (their preambles); the sd of the logs (ddof 1) is 0.14313; leaving out pc-A's 5280 gives
    0.01793. Runs at a fixed budget (cache_auto=0) are not counted."""
    import numpy as np
    from refsim.testing.recording_sets import DESKTOP, set_inputs
    from refsim.timing.noise import auto_budget_sigma
    s = inputs.devices["host"].auto_sigma
    logs = np.log([5280.0, 7127.0, 7420.0, 7304.0, 7184.0])
    assert s.value == pytest.approx(float(np.std(logs, ddof=1)), rel=1e-12)
    assert s.value == pytest.approx(0.14313, abs=5e-6) and s.lo == pytest.approx(0.01793, abs=5e-6)
    assert s.kind == "fitted" and "pc-A-io4.csv 5280" in s.source and "pc-E" not in s.source
    specs = set_inputs(DESKTOP, str(tmp_path)).specs
    fixed = [p for p in specs if "c5000" in p]
    with pytest.raises(ConfigError, match="0 run.s. with cache_auto=1, expected >= 3"):
        auto_budget_sigma(fixed)
    assert inputs.devices["phone"].auto_sigma is None     # the phone sessions ran at 3000 MiB


def test_auto_budget_ends_hand_worked(twin):
    """Host prose MTP d3 (matched 5483 MiB): the point 5010; k = exp(1.6449 x sqrt 2 x 0.14313)
    = 1.39507; 5010 / k = 3591, 5010 k = 6989; at the other assumed auto budget, 7420 MiB:
    round(5483 x (7420 - 277.44) / 7420) = 5278, and 5278 / k = 3783, 5278 k = 7363."""
    import math
    from refsim.timing.validate import auto_budget_ends
    cells = {c.name: c for s in SESSIONS for c in s.cells}
    sig = exact("auto_budget_sigma", 0.14313023256715843, "", "fitted", "test")
    k = math.exp(1.6448536269514722 * math.sqrt(2.0) * sig.value)
    assert k == pytest.approx(1.39507, abs=5e-6)
    ends = auto_budget_ends(twin, cells["host prose mtp d3"], 5483, (3219.0, 7420.0), sig)
    assert ends == (5010, round(5010 / k), round(5010 * k), 5278, round(5278 / k), round(5278 * k))
    assert ends == (5010, 3591, 6989, 5278, 3783, 7363)
    assert auto_budget_ends(twin, cells["host prose mtp d3"], 5483, (3219.0,), None) == (5010,)


def test_host_rows_price_the_off_cell_at_its_own_budget(result):
    """Each host row's off baseline is the matched budget's replay: off reproduces 5.45 tok/s."""
    from refsim.timing.verdict import SpecConfig as S
    r = _row(result, "host copy ngram d3 m3")
    off = price(r.dv, S("off"), r.off_reads)
    assert off.ms_per_token == pytest.approx(1000.0 / 5.45, rel=1e-3)
    assert r.price.term("memory").kind == "derived" and r.price.term("memory").value == 0.0


def test_recorded_fault_check_closes_the_phone_gaps(result):
    """A check, never an input: at the faults the cells recorded, t_f x (1427 - 126) = 69.1
    ms/token, and the copy n-gram cell lands at -28.5 % against -29.1 % published."""
    r = _row(result, "phone copy ngram d3 m3")
    mem, p = recorded_fault_check(r)
    assert mem.value == pytest.approx(0.05311831161231709 * (1427 - 126), rel=1e-12)
    assert mem.kind == "check"
    assert p.delta.point == pytest.approx(-28.5, abs=0.05)
    assert p.delta.contains(r.published_pct)
    mtp3 = recorded_fault_check(_row(result, "phone mtp d3"))[1]
    assert mtp3.delta.point == pytest.approx(-24.0, abs=0.05)
    with pytest.raises(ConfigError, match="recorded-fault check"):
        recorded_fault_check(_row(result, "host copy ngram d3 m3"))


def test_price_uses_a_given_memory_term_at_its_value():
    """price(memory=Term): the term is added per token as given, and the band's point is the one
    at its value (not at an end of its interval)."""
    dev = DeviceModel(params={k: Param({"tail": 1.0, "a": 1.0}.get(k, 0.0)) for k in PARAMS},
                      compute={"m": Param(100.0)}, serial_runs=1, overlap_runs=0)
    dv = Device(dev, "m", 1, False, exact("eps", 0.5, "", "assumed", "test"))
    reads = {1: Reads(1, 10.0), 4: Reads(4, 40.0)}
    cfg = SpecConfig("mtp", 3, acceptance=0.5)
    head0 = dataclasses.replace(dv, head=exact("head_ms", 0.0, "ms/token", "assumed", "test"))
    base = price(head0, cfg, reads)
    # by hand: decode 100 (1 + 0.5 x 3) + 40 = 290 ms for 2.5 tokens = 116 ms/token
    assert base.ms_per_token == pytest.approx(116.0, rel=1e-12)
    mem = Term("memory", 4.0, 1.0, 9.0, "ms/token", "fitted", "test")
    p = price(head0, cfg, reads, memory=mem)
    assert p.ms_per_token == pytest.approx(120.0, rel=1e-12)
    assert p.term("memory") is mem
    # off: 100 + 10 = 110 ms/token; the point at the value: 110 / 120 - 1
    assert p.delta.point == pytest.approx(100.0 * (110.0 / 120.0 - 1.0), rel=1e-12)
    assert p.delta.lo == pytest.approx(100.0 * (110.0 / 125.0 - 1.0), rel=1e-12)
    assert p.delta.hi == pytest.approx(100.0 * (110.0 / 117.0 - 1.0), rel=1e-12)


# --- the fit never sees a speculation cell --------------------------------------------------------

def _off_only(sessions):
    return tuple(dataclasses.replace(s, cells=s.cells[:1]) for s in sessions)


def _altered(sessions):
    """Every speculation cell given other numbers (tok/s halved, acceptance and coverage 0.9)."""
    def alter(c):
        if c.kind == "off":
            return c
        return dataclasses.replace(c, tok_s=c.tok_s / 2, acceptance=0.9, coverage=0.9,
                                   tokens_per_decode=None, majflt=(c.majflt and (9999.0,)) or ())
    return tuple(dataclasses.replace(s, cells=tuple(alter(c) for c in s.cells)) for s in sessions)


def test_fitted_parameters_unchanged_without_speculation_cells(inputs, result):
    """The parameters the table was priced with equal, to the last bit, those fitted and
    calibrated from the off cells alone."""
    assert result.parameters == fitted_parameters(inputs, _off_only(SESSIONS), n_boot=200, seed=0)


def test_altered_speculation_cells_change_predictions_not_parameters(inputs, result):
    alt = validate(inputs, _altered(SESSIONS), n_boot=3, seed=0)
    assert alt.parameters == fitted_parameters(inputs, _off_only(SESSIONS), n_boot=3, seed=0)
    # the comparison can fail: calibrating on a speculation cell as if it were the off cell moves C
    wrong = tuple(dataclasses.replace(s, cells=(dataclasses.replace(s.cells[1], kind="off", draft=0,
                                                                min_match=0),))
                  for s in SESSIONS)
    assert alt.parameters != fitted_parameters(inputs, wrong, n_boot=3, seed=0)
    before = {(r.cell.name, r.rate): r.band.point for r in result.rows}
    assert all(not math.isclose(r.band.point, before[(r.cell.name, r.rate)]) for r in alt.rows)


def test_fit_without_the_speculation_runs_of_a_set_is_the_same(tmp_path):
    """Adding a speculation run to the desktop set leaves the host device's parameters as they
    were (refsim.timing.plain leaves it out)."""
    require_shared()
    from refsim.testing.validation_inputs import device_inputs
    from refsim.testing.recording_sets import DESKTOP, set_specs
    src = Path(set_specs(DESKTOP)[0])
    spec = tmp_path / "spec-run.csv"
    spec.write_text(src.read_text().replace("overlap=", "spec=mtp spec_draft_max=3 overlap=", 1))

    def plus(specs):
        return list(specs) + ([str(spec)] if any("desktop" in s for s in specs) else [])
    a = device_inputs(str(tmp_path))["host"]
    b = device_inputs(str(tmp_path), plus)["host"]
    assert a.terms.device == b.terms.device
    assert a.eps_prefill == b.eps_prefill and a.sigma == b.sigma
    assert any("speculation run" in n for n in b.terms.notes)


# --- inputs that cannot be priced -----------------------------------------------------------------

def test_budget_match_and_refusals(inputs):
    t = inputs.trace
    b, mib = match_budget(t, 69.3, 0.75)
    assert mib == plain_mib_per_token(t, b, 0.75)
    for nb in (b - 1, b + 1):
        assert abs(mib - 69.3) <= abs(plain_mib_per_token(t, nb, 0.75) - 69.3)
    with pytest.raises(ConfigError, match=r"budget match: 5 MiB/token is outside"):
        match_budget(t, 5.0, 0.75)
    bad = (Session("bad", "host", (SESSIONS[0].cells[1],), 0.75, 4, True, "auto", "test"),)
    with pytest.raises(ConfigError, match="first cell must be the off cell"):
        validate(inputs, bad, n_boot=0)


def test_criteria_counts_by_hand():
    from refsim.timing.band import Band
    from refsim.timing.validate import Row
    off = PublishedCell("phone copy off", "off", 4.43, 127.0)
    cell = PublishedCell("phone copy ngram d3 m3", "ngram", 3.14, 145.1, 3, 3, 0.5, 0.142)

    class P:
        def __init__(self, lo, pt, hi):
            self.delta = Band(pt, lo, hi, 0.9, "%")
    rows = [Row("host copy", off, cell, "tok/s", -3.9, P(-15.0, -9.0, 4.0), 1, 1.0),
            Row("phone copy", off, cell, "tok/s", -29.1, P(-24.4, -9.9, 5.0), 1, 1.0)]
    c = criteria(rows)
    assert (c.n, c.signs_agree, c.inside, c.host_n, c.host_within_10) == (2, 2, 1, 1, 0)
    assert c.host_widest_pts == 13.0 and not c.copy_ngram_inside


# --- the check at the published reads (bytes or time?) -------------------------------------------

@pytest.fixture(scope="module")
def published_reads_lines(inputs, result):
    from refsim.timing.validate import published_reads_markdown
    return published_reads_markdown(result, inputs.trace)


def test_published_reads_table_is_in_the_docs(published_reads_lines):
    text = DOCS.read_text()
    for line in published_reads_lines:
        assert line in text, line
    assert published_reads_lines[-1] == (
        "At the published reads: signs agree 12 of 18; 17 inside the band; host bands within ±10 "
        "points 3 of 12 (widest ±88.1).")


def test_published_reads_check_hand_worked(inputs, result):
    """``host copy ngram d1 m5`` at the budget whose replay reads its published 59.7 MiB/token:
    the same hand rule as the table's (test_host_copy_ngram_d1_m5_hand_worked) at that budget's
    reads X1', X2', the off cell at its own X0; the budget is the whole MiB nearest the target."""
    from refsim.timing.validate import published_reads_check, reads_at
    from refsim.timing.verdict import reads_mix
    r = _row(result, "host copy ngram d1 m5")
    b, p = published_reads_check(r, inputs.trace, 0.75)
    assert b == 4910
    cfg = r.price.config

    def mib(budget):
        return reads_mix(cfg, reads_at(inputs.trace, budget, 0.75, [2]))[0] / cfg.tokens_per_decode
    assert p.mib_per_token == mib(b)
    # where the reads cross the target: b and b + 1 bracket it, b the nearer (the mix is not
    # monotone to the last digit: 4909 MiB reads 59.7306, 0.0006 less than 4910's 59.7312)
    assert mib(b) > 59.7 > mib(b + 1)
    assert abs(mib(b) - 59.7) <= abs(mib(b + 1) - 59.7)
    reads = reads_at(inputs.trace, b, 0.75, [2])
    v, C, eps = r.dv.model.value, r.dv.model.compute_floor("cell"), r.dv.eps.value

    def t(x, w):
        return v("tail") * (C * (1 + eps * (w - 1)) + v("m0") + v("m1") * x + v("kappa") * x
                            + max(0.0, v("s0") + v("s1") * x - v("h") * C))
    d, c = cfg.drafts, 0.097
    spec_ms = ((1 - c) * t(reads[1].mib_per_decode, 1) + c * t(reads[2].mib_per_decode, 1 + d)) / 1.08
    off_ms = t(r.off_reads[1].mib_per_decode, 1)
    assert p.ms_per_token == pytest.approx(spec_ms, rel=1e-12)
    assert p.delta.point == pytest.approx(100.0 * (off_ms / spec_ms - 1.0), rel=1e-9)
    assert p.delta.point == pytest.approx(2.0, abs=0.05)
    # the reads given, the auto budget's spread leaves the band: narrower than the table's
    assert p.delta.hi - p.delta.lo < r.band.hi - r.band.lo


def test_reads_mix_hand_worked():
    """Two widths, a quarter of decodes drafted: MiB per decode and a lookup-weighted hit."""
    from refsim.timing.verdict import reads_mix
    reads = {1: Reads(1, 10.0, 80.0, 100.0), 4: Reads(4, 30.0, 60.0, 300.0)}
    cfg = SpecConfig("ngram", draft=3, acceptance=0.5, coverage=0.25)
    mib, hit = reads_mix(cfg, reads)
    assert cfg.drafted_fraction == 0.25
    assert mib == pytest.approx(0.75 * 10.0 + 0.25 * 30.0)
    assert hit == pytest.approx((0.75 * 100 * 80 + 0.25 * 300 * 60) / (0.75 * 100 + 0.25 * 300))
    assert reads_mix(SpecConfig("off"), reads) == (10.0, 80.0)


def test_bisect_budget_hand_worked_and_refusal():
    from refsim.timing.validate import bisect_budget
    assert bisect_budget(lambda b: 1000.0 / b, 2.0, 250, 20000) == (500, 2.0)
    b, v = bisect_budget(lambda b: 1000.0 / b, 3.0, 250, 20000)      # 333.33...: 333 nearer
    assert (b, v) == (333, 1000.0 / 333)
    with pytest.raises(ConfigError, match=r"budget match: 5 MiB/token is outside 0.1..4.0"):
        bisect_budget(lambda b: 1000.0 / b, 5.0, 250, 10000)
