"""The band's fused tok/s (refsim.timing.verdict._tok_s_stager) equals the readable rule
(``1000 / sum(_ms_terms_at(...)(eps).values())``) to the last bit, for every configuration kind,
serial and ``--overlap``, cache on and off, a given and a derived MTP head, and after a device
is staged once and asked again (the memo); and ``price``'s bands are those of the readable rule
evaluated point by point (refsim.timing.band's grid)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.errors import ConfigError
from refsim.timing import DeviceModel, Param
from refsim.timing.band import delta_band, tok_s_band
from refsim.timing.model import PARAMS
from refsim.timing.terms import Term, exact
from refsim.timing.verdict import (FITTED_TERMS, Device, Reads, SpecConfig, _ms_terms_at,
                                   _tok_s_fn, _tok_s_stager, price)
from refsim.timing.work import PositionWork

WORK = PositionWork(k=2, n_expert=8, dense_mib=60.0, output_mib=20.0, expert_mib=20.0,
                    dense_elems=60.0, last_ffn_elems=6.0, expert_elems=20.0, last_expert_elems=2.0,
                    output_elems=20.0, attn_macs_per_key=0.01, head_dense_mib=5.0,
                    head_expert_mib=3.0, head_output_mib=20.0, head_dense_elems=5.0,
                    head_expert_elems=3.0, head_output_elems=20.0, head_attn_macs_per_key=0.0)

pos = st.floats(0.01, 50.0, allow_nan=False)


@st.composite
def devices(draw):
    vals = {k: draw(pos) for k in PARAMS}
    vals["tail"] = draw(st.floats(1.0, 1.3))
    vals["h"] = draw(st.floats(0.0, 0.5))
    return DeviceModel(params={k: Param(v) for k, v in vals.items()},
                       compute={"m": Param(draw(st.floats(20.0, 300.0)))},
                       serial_runs=2, overlap_runs=2)


@st.composite
def configs(draw):
    kind = draw(st.sampled_from(["off", "ngram", "mtp"]))
    if kind == "off":
        return SpecConfig("off")
    d = draw(st.integers(1, 8))
    acc = draw(st.floats(0.0, 1.0))
    if kind == "ngram":
        return SpecConfig("ngram", d, min_match=3, acceptance=acc, coverage=draw(st.floats(0.0, 1.0)))
    return SpecConfig("mtp", d, acceptance=acc)


@settings(max_examples=300, deadline=None)
@given(dev=devices(), again=devices(), cfg=configs(), lanes=st.integers(1, 8),
       overlap=st.booleans(), cache=st.booleans(), derived_head=st.booleans(),
       x=st.lists(st.floats(0.0, 500.0), min_size=9, max_size=9),
       eps=st.lists(st.floats(0.0, 2.0), min_size=1, max_size=4),
       memory=st.floats(0.0, 100.0))
def test_fused_tok_s_is_the_readable_rule_to_the_last_bit(dev, again, cfg, lanes, overlap, cache,
                                                           derived_head, x, eps, memory):
    head = None if derived_head else exact("head_ms", 7.25, "ms/token", "assumed", "t")
    dv = Device(dev, "m", lanes, overlap, exact("eps", 0.4, "", "assumed", "t"), cache=cache,
                work=WORK if derived_head else None, head=head)
    reads = {w: Reads(w, x[w - 1]) for w in range(1, 10)}
    stage = _tok_s_stager(dv, cfg, reads)
    for d in (dev, again, dev):                 # the memo hands back the first staging
        fused = stage(d)
        for e in eps:
            terms = _ms_terms_at(dv, d, cfg, reads, memory)(e)
            ref = 1000.0 / sum(terms.values())
            assert fused(e, memory) == ref
            assert {k: fused.fixed[k] for k in FITTED_TERMS} == {k: terms[k] for k in FITTED_TERMS}
            assert _tok_s_fn(stage, e, memory)(d)(None) == ref


def test_fused_refuses_as_the_rule_does():
    dev = DeviceModel(params={k: Param(1.0) for k in PARAMS}, compute={"m": Param(100.0)},
                      serial_runs=2, overlap_runs=2)
    dv = Device(dev, "m", 4, False, exact("eps", 0.4, "", "assumed", "t"))
    reads = {1: Reads(1, 10.0), 4: Reads(4, 30.0)}
    mtp = SpecConfig("mtp", 3, acceptance=0.5)
    with pytest.raises(ConfigError) as ref:
        _ms_terms_at(dv, dev, mtp, reads, 0.0)(0.4)
    with pytest.raises(ConfigError) as got:
        _tok_s_stager(dv, mtp, reads)(dev)(0.4, 0.0)
    assert str(got.value) == str(ref.value)
    with pytest.raises(ConfigError, match="width"):
        _tok_s_stager(dv, SpecConfig("ngram", 5, min_match=2, acceptance=0.5, coverage=0.5),
                      reads)


def test_price_bands_are_the_readable_rule_s():
    """A price with 5 replicates, an eps interval and a memory interval: its tok/s and change
    bands equal refsim.timing.band's evaluated on the readable rule."""
    vals = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0,
            "s1": 0.8, "h": 0.1, "tail": 1.05}

    def device(i):
        return DeviceModel(params={k: Param(vals[k] * (1.0 + 0.01 * (i - 2))) for k in PARAMS},
                           compute={"m": Param(120.0 + i)}, serial_runs=2, overlap_runs=2)
    eps = Term("eps", 0.38, 0.0, 1.2, "", "assumed", "t")
    dv = Device(device(2), "m", 2, True, eps, sigma=0.05,
                replicates=tuple(device(i) for i in range(5)), work=WORK)
    reads = {1: Reads(1, 40.0, 80.0), 4: Reads(4, 90.0, 70.0)}
    cfg = SpecConfig("mtp", 3, acceptance=0.7)
    mem = Term("memory", 4.0, 1.0, 9.0, "ms/token", "derived", "t")
    p = price(dv, cfg, reads, memory=mem)

    def readable(c, m):
        def staged(d):
            at = _ms_terms_at(dv, d, c, reads, m)
            return lambda e: 1000.0 / sum(at(eps.value if e is None else e).values())
        return staged
    toks = [tok_s_band(readable(cfg, m), dv.model, dv.replicates, eps, 0.05) for m in (1.0, 4.0, 9.0)]
    deltas = [delta_band(readable(cfg, m), readable(SpecConfig("off"), 0.0), dv.model,
                         dv.replicates, eps, 0.05) for m in (1.0, 4.0, 9.0)]
    assert (p.eff_tok_s.point, p.eff_tok_s.lo, p.eff_tok_s.hi) == (
        toks[1].point, min(b.lo for b in toks), max(b.hi for b in toks))
    assert (p.delta.point, p.delta.lo, p.delta.hi) == (
        deltas[1].point, min(b.lo for b in deltas), max(b.hi for b in deltas))
    assert p.eff_tok_s.parts == toks[1].parts and p.delta.parts == deltas[1].parts
    assert math.isfinite(p.delta.point)
