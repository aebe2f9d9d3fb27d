"""The per-position cost and the MTP head (issue 29, docs/whatif-terms.md): the Term record, the
prefill's flash read from the first decode row (checked against the route
trace), the prefill split, the tensor-size reading, the roofline per width, the head. Every rule
hand-worked; the tensor table checked against gguf-py; the real runs' figures asserted."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refsim import MIB
from refsim.errors import ConfigError
from refsim.telemetry.metrics_reader import read_metrics
from refsim.testing.metrics_files import V1_HEAD, v1_row
from refsim.testing.shared import require_shared
from refsim.timing import DeviceModel, Param
from refsim.timing.head import head_ms_per_token, head_positions, head_shares
from refsim.timing.model import PARAMS
from refsim.timing.positions import (bytes_eps, independent_union, prefill_eps, published_eps_checks,
                                     split_prefill, width_eps)
from refsim.timing.prefill import ExpertSizes, PrefillObs, prefill_figures, prefill_union
from refsim.timing.terms import Term, envelope, exact
from refsim.timing.work import PositionWork

KNOWN = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
         "h": 0.1, "tail": 1.1}


def device(values=KNOWN, c=100.0, serial=1, overlap=1) -> DeviceModel:
    return DeviceModel(params={k: Param(values.get(k, 0.0)) for k in PARAMS},
                       compute={"m": Param(c)}, serial_runs=serial, overlap_runs=overlap)


# --- Term -------------------------------------------------------------------------------------

def test_term_validates_and_prints():
    t = Term("eps", 0.5, 0.25, 1.0, "fraction", "fitted", "runs")
    assert t.width == 0.75 and t.contains(0.25) and not t.contains(1.01)
    assert t.line() == "eps = 0.5 fraction [0.25, 1] (fitted: runs)"
    for bad in (dict(value=2.0), dict(lo=0.6), dict(value=float("nan")), dict(kind="guessed"),
                dict(hi=True)):
        kw = dict(name="eps", value=0.5, lo=0.25, hi=1.0, unit="f", kind="fitted", source="x") | bad
        with pytest.raises(ConfigError):
            Term(**kw)
    e = envelope("eps", 0.3, [exact("a", 0.1, "f", "derived", "x"), t], "f", "fitted", "both")
    assert (e.lo, e.value, e.hi) == (0.1, 0.3, 1.0)


# --- the prefill's flash read ---------------------------------------------------------------------

def _v1_file(tmp_path, rows, summary=""):
    p = tmp_path / "r.csv"
    p.write_text(V1_HEAD + "\n".join(rows) + "\n" + summary)
    return read_metrics(str(p))


def test_prefill_union_hand_worked(tmp_path):
    # 10 lookups per token, 1 MiB entries; first row read 2 MiB (2 misses, 8 hits) at 20.00 %
    # cumulative hit: L0 = 8 / 0.2 - 10 = 30 lookups = 30 MiB; hit rounding +-0.005 % moves L0
    # to 8 / 0.20005 - 10 = 29.9900 and 8 / 0.19995 - 10 = 30.0100
    run = _v1_file(tmp_path, [v1_row(step=1, read_bytes=2 * MIB, cache_hit_pct="20.00")])
    u = prefill_union(run, ExpertSizes(10, MIB, MIB, MIB, "test"))
    assert u.value == pytest.approx(30.0, abs=1e-12)
    assert (u.lo, u.hi) == pytest.approx((8 / 0.20005 - 10, 8 / 0.19995 - 10), abs=1e-9)
    # entries of 0.5..2 MiB: misses 4 or 1 -> L0 = 6/0.2 - 10 = 20 .. 9/0.2 - 10 = 35 lookups,
    # times the mean entry (1 MiB; exact: the mean is known)
    u = prefill_union(run, ExpertSizes(10, MIB / 2, 2 * MIB, MIB, "test"))
    assert (u.lo, u.value, u.hi) == pytest.approx((6 / 0.20005 - 10, 30.0, 9 / 0.19995 - 10))
    # unknown layer mix: the mean entry is anything in 0.5..2 MiB
    u = prefill_union(run, ExpertSizes.from_range(1, 10, MIB / 2, 2 * MIB, "test"))
    assert (u.lo, u.hi) == pytest.approx(((6 / 0.20005 - 10) / 2, (9 / 0.19995 - 10) * 2))


def test_prefill_union_refusals(tmp_path):
    sizes = ExpertSizes(10, MIB, MIB, MIB, "test")
    with pytest.raises(ConfigError, match="no expert cache"):
        prefill_union(_v1_file(tmp_path, [v1_row(step=1, cache_hit_pct=-1)]), sizes)
    with pytest.raises(ConfigError, match="zero hit"):
        prefill_union(_v1_file(tmp_path, [v1_row(step=1, cache_hit_pct="0.00")]), sizes)
    with pytest.raises(ConfigError, match="fewer than 0"):   # 20 MiB read by 10 lookups
        prefill_union(_v1_file(tmp_path, [v1_row(step=1, read_bytes=20 * MIB)]), sizes)
    p = tmp_path / "pf.csv"
    p.write_text(V1_HEAD.replace("prefetch=0", "prefetch=2") + v1_row(step=1) + "\n")
    with pytest.raises(ConfigError, match="prefetching run"):
        prefill_union(read_metrics(str(p)), sizes)
    with pytest.raises(ConfigError, match="min <= mean <= max"):
        ExpertSizes(10, 2.0, 1.0, 1.5, "x")


def test_prefill_union_recovers_the_route_traces_prefill(qwen_trace_path):
    """The trace's own metrics file (k = 6 on Qwen3-30B, cache 4000, 28-token prompt): the first
    decode row's cumulative hit gives the prefill's lookups (2647) within 0.6 % and its bytes
    (7211 MiB) within 0.9 % of what the trace's prefill rows hold (2662 pairs, 7275 MiB: an
    independent count, by the csv module), and the interval holds them."""
    import csv
    from refsim.trace import read_trace
    folder = qwen_trace_path.parent
    uniq, nbytes = set(), 0
    with open(qwen_trace_path) as fh:
        rows = csv.reader(line for line in fh if not line.startswith("#"))
        head = next(rows)
        col = {c: i for i, c in enumerate(head)}
        for r in rows:
            if r[col["phase"]] == "0":
                uniq.add((r[col["layer"]], r[col["expert"]]))
                nbytes += int(r[col["expert_bytes"]])
    assert (len(uniq), nbytes / MIB) == (2662, pytest.approx(7274.953, abs=1e-3))
    sizes = ExpertSizes.from_layer_bytes(read_trace(qwen_trace_path).header.expert_bytes, 6, "trace")
    u = prefill_union(read_metrics(str(folder / "qwen.metrics")), sizes)
    assert u.note.startswith("L0 = 2647 prefill lookups [2364, 2893]")
    assert u.value == pytest.approx(7211.15, abs=0.01)
    assert abs(u.value - nbytes / MIB) / (nbytes / MIB) < 0.009
    assert u.lo <= nbytes / MIB <= u.hi


def test_prefill_figures_from_the_trailer_or_the_log(tmp_path):
    run = _v1_file(tmp_path, [v1_row(step=1)], "# summary tokens=1 n_prompt=19 prefill_s=5.993\n")
    assert prefill_figures(run) == (19, 5993.0)
    with pytest.raises(ConfigError, match="no prefill figures"):
        prefill_figures(_v1_file(tmp_path, [v1_row(step=1)]))


# --- the prefill split and eps at the prefill's width ----------------------------------------------

def obs(ms=640.5, overlap=False, cache=True, floor=None, first=None, io=None, n_prompt=11, u=100.0):
    return PrefillObs(label="p", model="m", n_prompt=n_prompt, prefill_ms=ms,
                      union=exact("U", u, "MiB", "fitted", "t"), lanes=4, overlap=overlap,
                      cache=cache, threads=4, floor=floor or exact("C", 100.0, "ms", "fitted", "t"),
                      io_ms_per_mib=io, first_mgmt_ms_per_mib=first)


def test_split_prefill_hand_worked():
    dev = device()
    # serial: flash = i0 + U (a + b/L) = 3 + 100 * 1.125 = 115.5, from U a = 100 (bandwidth share
    # alone); bookkeeping m0 + m1 U = 25 (no first-row rate), from 0. compute = 640.5 - 115.5 - 25
    # = 500 -> eps = (500/100 - 1) / 10 = 0.4; upper: 640.5 - 100 - 0 = 540.5 -> 0.4405
    s = split_prefill(dev, obs())
    assert s.flash_ms == pytest.approx((100.0, 115.5, 115.5))
    assert s.mgmt_ms == pytest.approx((0.0, 25.0, 25.0))
    assert s.eps == pytest.approx((0.4, 0.4, 0.4405))
    # the same run's first-row bookkeeping rate 0.05 ms/MiB: 5 ms; a measured decode rate
    # 1.5 ms/MiB widens the flash's upper end to 3 + 150 = 153
    s = split_prefill(dev, obs(first=0.05, io=1.5))
    assert s.mgmt_ms[1] == pytest.approx(5.0) and s.flash_ms[2] == pytest.approx(153.0)
    assert s.compute_ms == pytest.approx((640.5 - 153 - 25, 640.5 - 115.5 - 5, 640.5 - 100))
    # overlap: stall rule max(0, 2 + 0.8*100 - 0.1*100) = 72, from 0 to the serial upper end 115.5
    s = split_prefill(dev, obs(overlap=True))
    assert s.flash_ms == pytest.approx((0.0, 72.0, 115.5))
    # no cache: no bookkeeping; eps never below 0 at its ends (a batch costs >= one position)
    s = split_prefill(dev, obs(ms=150.0, cache=False))
    assert s.mgmt_ms == (0.0, 0.0, 0.0) and s.eps[0] == 0.0 and s.eps[1] < 0
    with pytest.raises(ConfigError, match="no extra position"):
        split_prefill(dev, obs(n_prompt=1))
    with pytest.raises(ConfigError, match="no serial flash rule"):
        split_prefill(device(serial=0), obs())


def test_prefill_eps_of_repeats_hand_worked():
    dev = device()
    # compute 500 and 700 (prefill 640.5 and 840.5): points 0.4 and 0.6, s.e. 0.1;
    # ends: lo 0.4 and 0.6 -> mean 0.5 - 0.2; hi 0.4405, 0.6405 -> mean 0.5405 + 0.2
    t = prefill_eps(dev, [obs(640.5), obs(840.5)])
    assert (t.lo, t.value, t.hi) == pytest.approx((0.3, 0.5, 0.7405))
    assert t.kind == "fitted" and "s.e. 0.100" in t.note
    one = prefill_eps(dev, [obs(640.5)])
    assert (one.lo, one.value, one.hi) == pytest.approx((0.4, 0.4, 0.4405))
    with pytest.raises(ConfigError, match="one model and one prompt length"):
        prefill_eps(dev, [obs(), obs(n_prompt=12)])


# --- the tensor-size reading and the roofline -------------------------------------------------------

WORK = PositionWork(k=2, n_expert=8, dense_mib=60.0, output_mib=20.0, expert_mib=20.0,
                    dense_elems=60.0, last_ffn_elems=6.0, expert_elems=20.0, last_expert_elems=2.0,
                    output_elems=20.0, attn_macs_per_key=0.01, head_dense_mib=5.0,
                    head_expert_mib=3.0, head_output_mib=20.0, head_dense_elems=5.0,
                    head_expert_elems=3.0, head_output_elems=20.0, head_attn_macs_per_key=0.0)


def test_bytes_eps_hand_worked():
    # B(1) = 60 + 20 + 20 = 100 MiB; w = 2, independent routing of 2 of 8: u = 4 (1 - 0.75^2) = 1.75
    # -> eps = 20 * 0.75 / 100 = 0.15, interval u in [1, 2]: [0, 0.2]
    assert independent_union(8, 2, 2) == pytest.approx(1.75)
    t = bytes_eps(WORK, 2)
    assert (t.lo, t.value, t.hi) == pytest.approx((0.0, 0.15, 0.2)) and t.kind == "derived"
    t = bytes_eps(WORK, 3, union_ratio=2.0)      # 20 * 1 / (2 * 100)
    assert (t.lo, t.value, t.hi) == pytest.approx((0.1, 0.1, 0.1))
    with pytest.raises(ConfigError, match="expected 1..3"):
        bytes_eps(WORK, 3, union_ratio=3.5)


def test_work_multiplies_hand_worked():
    # verify at ctx 100: 60 + 20 + 20 + 0.01 * 100 = 101
    assert WORK.verify_elems(100) == pytest.approx(101.0)
    # prefill of 4: 60 - 0.75*6 + 20 - 0.75*2 + 20/4 + 0.01 * 2.5 = 79.025
    assert WORK.prefill_elems(4) == pytest.approx(79.025)


def test_width_eps_hand_worked():
    p = Term("eps_P", 0.5, 0.2, 0.8, "f", "fitted", "t")
    b = exact("eps_bytes", 0.1, "f", "derived", "t")
    # f = 1.2 (1 + 10*0.5)/11 = 0.654545; (3 f - 1)/2 = 0.481818
    # lo: r = 1, f = 3/11 -> negative -> the bytes' 0.1; hi: f = 1.2 * 9/11 -> 0.972727
    t = width_eps(p, 11, 3, 1.2, b)
    assert (t.lo, t.value, t.hi) == pytest.approx((0.1, (3 * 1.2 * 6 / 11 - 1) / 2, (3 * 1.2 * 9 / 11 - 1) / 2))
    # memory-bound: a cheap prefill leaves the bytes' reading
    t = width_eps(exact("eps_P", 0.0, "f", "fitted", "t"), 11, 3, 1.0, b)
    assert t.value == pytest.approx(0.1)
    with pytest.raises(ConfigError, match="work ratio"):
        width_eps(p, 11, 3, 0.5)


@given(st.floats(0.0, 3.0), st.integers(2, 64))
def test_width_eps_at_the_prefills_width_is_the_prefills(e, n_prompt):
    """The roofline reproduces the prefill at its own width (r = 1, no bytes): the linear rule
    and the roofline agree where the prefill measured."""
    t = width_eps(exact("eps_P", e, "f", "fitted", "t"), n_prompt, n_prompt)
    assert t.value == pytest.approx(max(0.0, e), abs=1e-12)


def test_published_checks_are_checks_with_their_values():
    host, d2, d3 = published_eps_checks()
    assert all(t.kind == "check" for t in (host, d2, d3))
    assert host.value == pytest.approx((0.088 * 2.78 / 0.115 - 1) / 3)          # 0.376
    assert d2.value == pytest.approx((0.57 * 2.38 / 0.44 - 1) / 2)              # 1.042
    assert d3.value == pytest.approx((0.74 * 2.56 / 0.44 - 1) / 3)              # 1.102
    assert host.contains(0.376) and d3.lo < 1.0 < d3.hi


# --- the MTP head ----------------------------------------------------------------------------------

def test_head_hand_worked():
    assert head_positions(3, 2.0) == (4, 5.0)
    with pytest.raises(ConfigError, match="expected 1..4"):
        head_positions(3, 4.5)
    sh = head_shares(WORK)
    assert sh["draft"] == pytest.approx((0.28, 28.0 / 100.0)) and sh["catch"] == pytest.approx((0.08, 0.08))
    # per decode: 100 (3 * 0.28 + 0.08 (1 + 0.5 * 1)) = 96 ms over 2 tokens = 48 ms/token
    h = head_ms_per_token(WORK, exact("C", 100.0, "ms", "fitted", "t"),
                          exact("eps", 0.5, "f", "fitted", "t"), 3, 2.0)
    assert (h.lo, h.value, h.hi) == pytest.approx((48.0, 48.0, 48.0))
    # eps in [0, 1]: catch-up 0.08 * 100 * (1 .. 2) -> 46 .. 50
    h = head_ms_per_token(WORK, exact("C", 100.0, "ms", "fitted", "t"),
                          Term("eps", 0.5, 0.0, 1.0, "f", "fitted", "t"), 3, 2.0)
    assert (h.lo, h.hi) == pytest.approx((46.0, 50.0))
    no_head = PositionWork(**{**WORK.__dict__, "head_dense_mib": 0.0})
    with pytest.raises(ConfigError, match="no nextn"):
        head_shares(no_head)


def test_twin_tensor_table_against_its_plan(tmp_path):
    """The Qwen3.6 twin's per-position figures, with D, O and the head's dense bytes summed
    independently from the tensor plan the twin was written from (names, shapes, types; sizes by
    gguf's GGML_QUANT_SIZES), not from refsim's reader. (gguf-py's reader cannot open a
    header-only file: it maps every tensor's data.)"""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q
    from refsim.model import synth
    from refsim.testing.recording_sets import qwen36_inputs
    work, sizes = qwen36_inputs(str(tmp_path))
    dims = dict(synth.DEFAULT_DIMS, n_layer_35=40, n_embd=2048, n_head=16, n_head_kv=2, head_dim=256,
                n_expert=256, n_expert_used=8, n_ff_exp=512, n_ff_shexp=512, n_vocab=248320,
                n_ctx=262144, ssm_conv=4, ssm_state=128, ssm_group=16, ssm_dt_rank=32, rope_dim=64,
                rope_sections=(11, 11, 10, 0), rope_base=1e7)
    dense = head_dense = out = 0
    for name, shape, kind in synth.tensor_plan("qwen35moe", dims, True):
        qt = Q.F32 if kind != "w" else synth.mixed_type(name, 41)
        block, size = GGML_QUANT_SIZES[qt]
        nbytes = math.prod(shape) // block * size
        parts = name.split(".")
        if name == "output.weight":
            out = nbytes
        elif parts[0] == "blk" and not parts[2].endswith("_exps"):
            if int(parts[1]) < 40:
                dense += nbytes
            else:
                head_dense += nbytes
    assert work.dense_mib == dense / MIB and work.output_mib == out / MIB
    assert work.head_dense_mib == head_dense / MIB
    assert work.expert_mib == 581.25 and sizes.lookups_per_token == 320
    assert sizes.bytes_mean * 320 == 581.25 * MIB
    # a draft pass is 18.6 % of a trunk position by bytes, 19.5 % by multiplies (ctx 0)
    sh = head_shares(work)
    assert sh["draft"] == pytest.approx((0.18643, 0.19451), abs=5e-5)
    # w = 4, 8 of 256 routed independently: u = 32 (1 - (31/32)^4) = 3.816
    b1 = (dense + out) / MIB + 581.25
    u = 32 * (1 - (31 / 32) ** 4)
    assert bytes_eps(work, 4).value == pytest.approx(581.25 * (u - 1) / (3 * b1), rel=1e-12)
    assert bytes_eps(work, 4).value == pytest.approx(0.2324, abs=1e-4)


def test_head_on_the_host_cells_against_the_published_cost():
    """bmoe-engine.md §7: the host's head costs 0.020-0.023 s per token; the prose and copy MTP d3
    cells' effective vs reported rates give 23.0 and 20.4 ms. Derived from the nextn block's share
    on the desktop device calibrated on each table's off cell (MXFP4 there, Q4_K_M twin here):
    copy 21.1 [20.3, 23.6] holds its 20.4; prose 26.0 [25.2, 28.6] is 13 % above its 23.0."""
    import tempfile
    from refsim.testing.recording_sets import DESKTOP, QWEN36, set_inputs
    from refsim.timing.calibrate import calibrate_to_cell
    from refsim.timing.cells import HOST_COPY, HOST_PROSE
    from refsim.timing.identify import identify_device
    require_shared("real-runs", DESKTOP)
    inp = set_inputs(DESKTOP, tempfile.mkdtemp())
    dt = identify_device(inp.specs, inp.sizes, inp.work)
    work = inp.work[QWEN36]
    key, eps_p = dt.eps_prefill[QWEN36]
    r = work.verify_elems(256) / work.prefill_elems(key[1])
    got = {}
    for table in (HOST_PROSE, HOST_COPY):
        cal = calibrate_to_cell(dt.device, table[0], "cell", 4, True)
        c = table[1]
        e = width_eps(eps_p, key[1], 4, r, bytes_eps(work, 4))
        got[c.name] = head_ms_per_token(work, cal.floor, e, 3, c.tokens_per_decode)
    copy, prose = got["host copy mtp d3"], got["host prose mtp d3"]
    assert copy.contains(1000 * (1 / 6.43 - 1 / 7.40))
    assert (round(copy.value, 1), round(prose.value, 1)) == (21.1, 26.0)
    assert not prose.contains(1000 * (1 / 7.32 - 1 / 8.80))
