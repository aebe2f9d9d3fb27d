"""``refsim run --csv OUT --device D``'s per-decode times are the one decode rule (issue 29 item 1).

:func:`refsim.timing.whatif.predicted_run_times` fills the metrics CSV's time columns and
``BMOE_DONE`` from :func:`refsim.timing.decode.decode_term_arrays`, the implementation of which
:func:`refsim.timing.decode.decode_terms` (what ``whatif``, ``breakeven``, ``union`` and the rest
price with) is the one-decode view. Pinned here: every column of every decode equals the scalar
rule's terms to the last bit (a property over devices, reads, widths, ``--overlap`` and the cache),
agrees with :meth:`refsim.timing.model.DeviceModel.token_ms` (the device's own rule, an
independent sum) to rounding, and one verify decode is hand-worked from the device's parameters
(docs/timing.md, "The rules" and "Break-even").
"""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refsim import MIB
from refsim.errors import ConfigError
from refsim.timing import DeviceModel, Param
from refsim.timing.decode import SERIAL_FLASH, TERMS, decode_ms, decode_term_arrays, decode_terms
from refsim.timing.whatif import predicted_run_times

KEYS = ("m0", "m1", "kappa", "i0", "a", "b", "s0", "s1", "h", "tail")


def _device(vals: dict, c: float, serial_runs: int = 1, overlap_runs: int = 1) -> DeviceModel:
    return DeviceModel(params={k: Param(v) for k, v in vals.items()}, compute={"m": Param(c)},
                       serial_runs=serial_runs, overlap_runs=overlap_runs)


def _run(decodes, cache: bool):
    """A finished run's fields predicted_run_times reads: per decode (read_bytes,
    draft_read_bytes, n_draft); ``cache`` None when the run had no expert cache."""
    steps = [SimpleNamespace(read_bytes=r, draft_read_bytes=d, n_draft=n) for r, d, n in decodes]
    cache = SimpleNamespace(budget_bytes=8 * MIB) if cache else None
    return SimpleNamespace(steps=steps, cache=cache)


def _bits(a) -> list[str]:
    """Each float's repr: equal lists are equal to the last bit, the sign of 0 included."""
    return [repr(float(v)) for v in np.asarray(a).ravel()]


# --- the property: each column is the scalar rule's terms --------------------------------------

params = st.fixed_dictionaries({
    "m0": st.floats(0.0, 50.0), "m1": st.floats(0.0, 5.0), "kappa": st.floats(0.0, 5.0),
    "i0": st.floats(0.0, 50.0), "a": st.floats(0.0, 20.0), "b": st.floats(0.0, 20.0),
    "s0": st.floats(-50.0, 50.0), "s1": st.floats(0.0, 20.0), "h": st.floats(0.0, 1.0),
    "tail": st.floats(0.5, 10.0)})
decode = st.tuples(st.integers(0, 4000 * MIB), st.integers(0, 64 * MIB), st.integers(0, 8))


@settings(max_examples=200, deadline=None)
@given(vals=params, c=st.floats(0.5, 2000.0), decodes=st.lists(decode, min_size=1, max_size=12),
       eps=st.floats(0.0, 2.0), overlap=st.booleans(), cache=st.booleans(),
       lanes=st.integers(1, 16))
def test_each_decode_is_decode_terms_to_the_last_bit(vals, c, decodes, eps, overlap, cache, lanes):
    """For every decode (x = (read_bytes - draft_read_bytes) / MiB >= 0, width 1 + n_draft in
    1..9): compute = compute + extra_positions + contention, mgmt = bookkeeping, stall = stall,
    wall = decode_ms (the terms' sum), io = the flash term serially and, under --overlap, the
    flash term the same decode has serially -- each equal to the scalar call's, bit for bit."""
    decodes = [(r + d, d, n) for r, d, n in decodes]    # the draft's bytes are within the read
    dev = _device(vals, c)
    t = predicted_run_times(dev, "dev.json", _run(decodes, cache), "m", lanes, overlap, eps)
    assert t.overlap is overlap and t.io_threads == lanes and t.device == "dev.json"
    for i, (r, d, n) in enumerate(decodes):
        x, w = (r - d) / MIB, 1 + n
        s = decode_terms(dev, "m", lanes, overlap, cache, x, w, eps)
        serial = decode_terms(dev, "m", lanes, False, cache, x, w, eps)
        compute = s["compute"] + s["extra_positions"] + s["contention"]
        assert _bits(t.compute_ms[i]) == _bits(compute)
        assert _bits(t.mgmt_ms[i]) == _bits(s["bookkeeping"])
        assert _bits(t.stall_ms[i]) == _bits(s["stall"])
        assert _bits(t.io_ms[i]) == _bits(serial["flash"])
        assert _bits(t.wall_ms[i]) == _bits(decode_ms(dev, x, w, "m", lanes, overlap, cache, eps))
        if not overlap:
            assert _bits(t.io_ms[i]) == _bits(s["flash"]) and s["stall"] == 0.0
        else:
            assert s["flash"] == 0.0
        if not cache:
            assert s["bookkeeping"] == 0.0


@settings(max_examples=100, deadline=None)
@given(vals=params, c=st.floats(0.5, 2000.0),
       xw=st.lists(st.tuples(st.floats(0.0, 5000.0), st.floats(1.0, 9.0)), min_size=1,
                   max_size=10),
       eps=st.floats(0.0, 2.0), overlap=st.booleans(), cache=st.booleans(),
       lanes=st.integers(1, 16))
def test_arrays_agree_with_the_device_rule(vals, c, xw, eps, overlap, cache, lanes):
    """decode_term_arrays against DeviceModel.token_ms, an independent sum of the device's rules:
    the terms sum to its wall plus the extra positions' compute, tail C eps (w - 1), to rounding;
    its serial flash is tail * io; a mean width (not an integer) is priced elementwise as the
    scalar rule prices it."""
    dev = _device(vals, c)
    x = np.array([p[0] for p in xw])
    w = np.array([p[1] for p in xw])
    arrays = decode_term_arrays(dev, "m", lanes, overlap, cache, x, w, eps)
    assert set(arrays) == set(TERMS) | {SERIAL_FLASH}
    for k, a in arrays.items():
        assert a.shape == x.shape and a.dtype == np.float64, k
    tail = vals["tail"]
    p = dev.token_ms(x, "m", lanes, overlap, cache)
    total = sum(arrays[k] for k in TERMS)
    np.testing.assert_allclose(total, p["wall"] + tail * c * eps * (w - 1), rtol=1e-12,
                               atol=1e-9)
    np.testing.assert_allclose(arrays[SERIAL_FLASH], tail * p["io"], rtol=1e-15, atol=0)
    for i in range(len(x)):
        s = decode_terms(dev, "m", lanes, overlap, cache, float(x[i]), float(w[i]), eps)
        assert {k: _bits(arrays[k][i]) for k in TERMS} == {k: _bits(v) for k, v in s.items()}


# --- a hand-worked decode ----------------------------------------------------------------------

# binary-exact parameters, so every product and sum below is exact in float64
HAND = {"m0": 4.0, "m1": 0.25, "kappa": 0.125, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0,
        "s1": 0.75, "h": 0.125, "tail": 1.25}


def test_hand_worked_verify_decode():
    """A verify decode of 1 + 2 drafts reading 41 MiB, 1 MiB of it the draft source's (drafting
    is outside wall_ms): x = 40 MiB, w = 3; C = 100 ms, eps 0.5, 4 lanes, tail 1.25.

    Serially, cache on: compute 1.25 x 100 = 125; extra positions 1.25 x 100 x 0.5 x 2 = 125;
    bookkeeping 1.25 x (4 + 0.25 x 40) = 17.5; flash 1.25 x (3 + 40 x (1 + 0.5 / 4)) = 60.
    --overlap: contention 1.25 x 0.125 x 40 = 6.25; stall 1.25 x max(0, 2 + 0.75 x 40 - 0.125 x
    100) = 24.375; the decode waits for the stall, io is the serial flash time (60) for reference.
    Cache off: no bookkeeping."""
    dev = _device(HAND, 100.0)
    run = _run([(10 * MIB, 0, 0), (41 * MIB, MIB, 2)], cache=True)
    t = predicted_run_times(dev, "d", run, "m", 4, False, 0.5)
    assert t.compute_ms[1] == 250.0 and t.mgmt_ms[1] == 17.5 and t.io_ms[1] == 60.0
    assert t.stall_ms[1] == 0.0 and t.wall_ms[1] == 327.5
    # the plain decode: x = 10, w = 1: 125 + 1.25 x 6.5 + 1.25 x 14.25 = 125 + 8.125 + 17.8125
    assert t.compute_ms[0] == 125.0 and t.mgmt_ms[0] == 8.125 and t.io_ms[0] == 17.8125
    assert t.wall_ms[0] == 150.9375
    t = predicted_run_times(dev, "d", run, "m", 4, True, 0.5)
    assert t.compute_ms[1] == 256.25 and t.mgmt_ms[1] == 17.5 and t.io_ms[1] == 60.0
    assert t.stall_ms[1] == 24.375 and t.wall_ms[1] == 298.125
    # the plain decode hides its stall: 2 + 7.5 - 12.5 < 0
    assert t.stall_ms[0] == 0.0 and t.wall_ms[0] == 125.0 + 1.25 * 1.25 + 8.125
    t = predicted_run_times(dev, "d", _run([(41 * MIB, MIB, 2)], cache=False), "m", 4, False, 0.5)
    assert t.mgmt_ms[0] == 0.0 and t.wall_ms[0] == 310.0


def test_refusals_name_the_device():
    """The device's refusals carry ``--device NAME`` (as the CLI prints them)."""
    run = _run([(MIB, 0, 0)], cache=True)
    serial_only = _device(HAND, 100.0, serial_runs=1, overlap_runs=0)
    with pytest.raises(ConfigError, match=r"^--device d\.json: an --overlap run, but the device "
                                          r"was fitted on serial runs only"):
        predicted_run_times(serial_only, "d.json", run, "m", 4, True, 0.5)
    with pytest.raises(ConfigError, match=r"^--device d\.json: model 'x' was not among"):
        predicted_run_times(serial_only, "d.json", run, "x", 4, False, 0.5)
    negative = _device({**HAND, "i0": -1000.0}, 100.0)
    with pytest.raises(ConfigError, match=r"^--device d\.json: the device model predicts a time "
                                          r"<= 0 ms for a token reading 1 MiB"):
        predicted_run_times(negative, "d.json", run, "m", 4, False, 0.5)
