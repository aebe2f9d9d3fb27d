"""refsim.timing.measured: a run's own counters priced by refsim.timing.verdict.price -- the mix
of its plain and drafted decodes gives back the run's bytes per token and hits per lookup
(hypothesis), hand-worked counters, SpecConfig.measured's refusals, and the policy replay's
per-kind counters summing to its totals."""

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim import MIB
from refsim.errors import ConfigError
from refsim.timing import DeviceModel, Param
from refsim.timing.measured import DecodeCounts, Measured, from_steps
from refsim.timing.terms import Term
from refsim.timing.verdict import Device, Reads, SpecConfig, price

VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
          "h": 0.1, "tail": 1.0}


def dv():
    dev = DeviceModel(params={k: Param(v) for k, v in VALUES.items()},
                      compute={"m": Param(100.0)}, serial_runs=2, overlap_runs=2)
    return Device(dev, "m", 4, False, Term("eps", 0.38, 0.38, 0.38, "", "assumed", "t"))


def step(n_draft, n_acc, read, lookups, hits):
    return SimpleNamespace(n_draft=n_draft, n_acc=n_acc, read_bytes=read, lookups=lookups,
                           hits=hits)


def test_hand_worked_counts():
    """Two plain decodes (1 and 3 MiB, 10 lookups 5 hits each) and one drafted decode (3 drafts,
    2 accepted, 8 MiB, 30 lookups 6 hits): coverage 1/3, acceptance 2/3, 3 drafts per drafted
    decode; price: MiB/token = 12 MiB / (3 decodes + 2 accepted) = 2.4; hit = 16/50 = 32 %."""
    steps = [step(0, 0, 1 * MIB, 10, 5), step(3, 2, 8 * MIB, 30, 6), step(0, 0, 3 * MIB, 10, 5)]
    m = from_steps(steps)
    assert m == Measured(DecodeCounts(2, 4 * MIB, 20, 10), DecodeCounts(1, 8 * MIB, 30, 6), 3, 2)
    cfg = m.config("ngram", 3, 2, "measured: live run")
    assert (cfg.acceptance, cfg.coverage, cfg.mean_drafts) == (2 / 3, 1 / 3, 3.0)
    reads = m.reads(4)
    assert reads == {1: Reads(1, 2.0, 50.0, 10.0), 4: Reads(4, 8.0, 20.0, 30.0)}
    p = price(dv(), cfg, reads)
    assert p.mib_per_token == pytest.approx(2.4, rel=1e-15)
    assert p.hit_pct == pytest.approx(32.0, rel=1e-15)
    assert p.positions_per_decode == pytest.approx(2.0) and p.tokens_per_decode == pytest.approx(5 / 3)


def test_a_kind_the_run_did_not_decode_is_weighted_zero():
    """MTP drafts every decode: no plain decode, the plain run's reads stand in at weight 0; an
    n-gram run that never drafted prices as its plain decodes."""
    mtp = from_steps([step(2, 1, 4 * MIB, 20, 10), step(2, 2, 6 * MIB, 20, 10)])
    off = Reads(1, 3.0, 60.0, 10.0)
    cfg = mtp.config("mtp", 2, 0, "x")
    assert cfg.drafted_fraction == 1.0
    with pytest.raises(ValueError):
        mtp.reads(3)
    reads = mtp.reads(3, off)
    assert reads[1] is off
    cfg = SpecConfig.measured("mtp", 2, 0, 2, 2, 4, 3, "x")
    p = price(Device(dv().model, "m", 4, False, dv().eps, head=Term("head_ms", 0.0, 0.0, 0.0,
                                                                    "ms/token", "assumed", "t")),
              cfg, reads)
    assert p.mib_per_token == pytest.approx(10.0 / 5.0) and p.hit_pct == pytest.approx(50.0)
    plain = from_steps([step(0, 0, 2 * MIB, 10, 4)] * 3)
    cfg = plain.config("ngram", 3, 3, "x")
    assert (cfg.coverage, cfg.acceptance, cfg.mean_drafts) == (0.0, None, None)   # D1: n/a
    p = price(dv(), cfg, plain.reads(4))
    assert p.mib_per_token == 2.0 and p.hit_pct == pytest.approx(40.0)
    assert p.positions_per_decode == 1.0


def test_measured_mtp_coverage_below_one():
    """A live MTP run's last decode may have no room to draft: its coverage is the run's, and
    price mixes its plain decode in (without a coverage MTP drafts every decode, as before)."""
    assert SpecConfig("mtp", 3, acceptance=0.5).drafted_fraction == 1.0
    cfg = SpecConfig.measured("mtp", 3, 0, 4, 3, 9, 3, "x")
    assert cfg.drafted_fraction == 0.75 and cfg.positions_per_decode == pytest.approx(1 + 9 / 4)


@pytest.mark.parametrize("counts", [(4, 5, 9, 3), (4, 2, 1, 0), (4, 2, 6, 7), (4, 0, 3, 0),
                                    (4, 1, 0, 0), (4, 2, 6, -1)])
def test_counters_not_of_one_run_are_refused(counts):
    with pytest.raises(ConfigError, match="are not one run's"):
        SpecConfig.measured("ngram", 3, 3, *counts, "RUN")


kinds = st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 50 * MIB),
                  st.integers(1, 64), st.integers(0, 64))


@settings(max_examples=200, deadline=None)
@given(st.lists(kinds, min_size=1, max_size=30), st.integers(1, 3))
def test_price_gives_back_the_runs_totals(raw, draft):
    """Whatever the mix: price's MiB/token is the run's decode bytes / (decodes + accepted),
    its hit % the run's hits / lookups, its positions and tokens per decode the run's."""
    steps = []
    for n, a, read, look, hit in raw:
        n = min(n, draft)
        steps.append(step(n, min(a, n), read, look, min(hit, look)))
    m = from_steps(steps)
    if not m.plain.decodes:
        steps.append(step(0, 0, MIB, 4, 1))
        m = from_steps(steps)
    cfg = m.config("ngram", draft, 2, "x")
    p = price(dv(), cfg, m.reads(draft + 1))
    d, acc = len(steps), sum(s.n_acc for s in steps)
    assert p.mib_per_token == pytest.approx(sum(s.read_bytes for s in steps) / MIB / (d + acc),
                                            rel=1e-12, abs=1e-12)
    assert p.hit_pct == pytest.approx(100 * sum(s.hits for s in steps) / sum(s.lookups for s in steps),
                                      rel=1e-12)
    assert p.positions_per_decode == pytest.approx(1 + sum(s.n_draft for s in steps) / d, rel=1e-12)
    assert p.tokens_per_decode == pytest.approx(1 + acc / d, rel=1e-12)


def test_policy_replay_kinds_sum_to_its_totals():
    """PolicyRow's per-kind counters: plain + verify decodes are its decodes, their bytes its
    MiB/token x tokens, and the priced row gives back its MiB/token and hit %."""
    from pathlib import Path
    from refsim.studies.spec_policy import policy_replay
    from refsim.timing.measured import from_policy_row
    from refsim.trace import read_trace
    trace = read_trace(str(Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv"))
    row = policy_replay(trace, 64 * MIB, "backoff", 3, coverage=0.5, accept=0.4, seed=0)
    m = from_policy_row(row)
    assert m.decodes == row.decodes and m.drafted.decodes == row.verify_decodes > 0
    assert 0 < row.accepted <= row.drafted
    assert row.positions == row.decodes + row.drafted and row.tokens == row.decodes + row.accepted
    assert m.read_bytes / MIB / row.tokens == pytest.approx(row.mib_per_token, rel=1e-12)
    lookups = m.plain.lookups + m.drafted.lookups
    assert 100 * (m.plain.hits + m.drafted.hits) / lookups == pytest.approx(row.hit_pct_decode,
                                                                            rel=1e-12)
    p = price(dv(), m.config("ngram", 3, 3, "x"), m.reads(4))
    assert p.mib_per_token == pytest.approx(row.mib_per_token, rel=1e-12)
    assert p.hit_pct == pytest.approx(row.hit_pct_decode, rel=1e-12)
    assert p.tokens_per_decode == pytest.approx(row.tokens_per_decode, rel=1e-12)
    assert p.positions_per_decode == pytest.approx(row.positions_per_decode, rel=1e-12)
