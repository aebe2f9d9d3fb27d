"""A device's what-if terms from its recorded plain runs (issue 29): no speculation run or cell is
ever an input (the fitted parameters are unchanged when every one is removed, and would change if
one got in), and the per-position cost each shared set identifies (docs/whatif-terms.md)."""

import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.errors import ConfigError
from refsim.telemetry.metrics_reader import read_metrics
from refsim.testing.metrics_files import v2_group_text
from refsim.testing.recording_sets import DESKTOP, PHONE_DROP, PHONE_LANES, QWEN36, set_inputs
from refsim.testing.shared import require_shared
from refsim.timing import fit_device
from refsim.timing.cells import HOST_COPY, HOST_MTP, HOST_PROSE, PHONE_MTP, Cell
from refsim.timing.identify import calibrate_cells, choose_group, identify_device
from refsim.timing.plain import load_plain_runs, plain_cells, speculation_of
from refsim.timing.model import PARAMS
from refsim.timing.runs import load_runs
from refsim.timing import DeviceModel, Param

DEV = DeviceModel(params={k: Param(v) for k, v in {
    "m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8, "h": 0.1,
    "tail": 1.1}.items()}, compute={"m": Param(100.0)}, serial_runs=1, overlap_runs=1)
assert set(DEV.params) == set(PARAMS)


def spec_file(path, preamble="spec=mtp spec_draft_max=3", batch=2, groups=60, summary=""):
    """A v2 speculation run on the desktop's model (a verify decode per group of ``batch``)."""
    lines = v2_group_text([(batch, [300.0] + [0.0] * (batch - 1))] * groups).split("\n")
    lines.insert(1, f"# model={QWEN36} io_threads=4 overlap=0 cache_mb=5000 {preamble}".rstrip())
    path.write_text("\n".join(lines) + summary)
    return str(path)


def test_what_is_speculative(tmp_path):
    assert speculation_of(read_metrics(spec_file(tmp_path / "a.csv"))) == "spec=mtp"
    # n-gram whose drafts were all rejected: every mtp_batch 1, but the preamble says so
    assert speculation_of(read_metrics(spec_file(tmp_path / "b.csv", "spec=ngram", 1))) == "spec=ngram"
    assert speculation_of(read_metrics(spec_file(tmp_path / "c.csv", "spec=off", 2))) == "mtp_batch up to 2"
    assert speculation_of(read_metrics(spec_file(
        tmp_path / "d.csv", "", 1, summary="# summary tokens=60 drafted_steps=3\n"))) == "drafted_steps=3"
    assert speculation_of(read_metrics(spec_file(tmp_path / "e.csv", "spec=off", 1))) is None
    keep, notes = plain_cells(HOST_MTP)
    assert keep == [HOST_MTP[0]] and len(notes) == 3 and "validation only" in notes[0]


def test_a_fit_never_sees_speculation(tmp_path):
    """Issue 29 item 5: the terms identified from the desktop's runs are the same, to the last
    bit, with two speculation runs among the inputs or without them: they are not inputs at all
    (each is left out with a note). The control shows the runs would move the fit if they got in."""
    require_shared("real-runs", DESKTOP)
    inp = set_inputs(DESKTOP, str(tmp_path))
    extra = [spec_file(tmp_path / "mtp.csv"), spec_file(tmp_path / "ngram.csv", "spec=ngram", 1)]
    plain = identify_device(inp.specs, inp.sizes, inp.work)
    mixed = identify_device(extra[:1] + inp.specs + extra[1:], inp.sizes, inp.work)
    assert mixed.terms() == plain.terms()
    assert mixed.device == plain.device
    left = [n for n in mixed.notes if "a speculation run" in n]
    assert len(left) == 2 and all(p in " ".join(left) for p in extra)
    # control: the same files as inputs of a fit change the fitted floor
    runs, _ = load_runs(inp.specs + extra, 50)
    assert fit_device(runs, jackknife=False).compute != fit_device(
        load_plain_runs(inp.specs, 50)[0], jackknife=False).compute


@settings(max_examples=20)
@given(st.lists(st.tuples(st.floats(0.5, 30.0), st.floats(1.0, 200.0), st.floats(1.0, 4.0),
                          st.integers(1, 8)), max_size=4))
def test_calibration_on_cells_never_reads_a_speculation_cell(spec):
    """Calibrations on published tables use each table's off cell; any speculation cells, with
    any numbers, leave them unchanged."""
    cells = [Cell(f"s{i}", t, m, min(tpd, d + 1), d) for i, (t, m, tpd, d) in enumerate(spec)]
    base, _ = calibrate_cells(DEV, [HOST_MTP[:1], HOST_COPY[:1]], "cell", 4, True)
    got, notes = calibrate_cells(DEV, [HOST_MTP[:1] + cells, cells + HOST_COPY[:1]], "cell", 4, True)
    assert [c.floor for c in got] == [c.floor for c in base]
    assert len(notes) == 2 * len(cells)


def test_a_table_without_an_off_cell_is_noted():
    got, notes = calibrate_cells(DEV, [HOST_MTP[1:]], "cell", 4, True)
    assert got == [] and notes[-1] == "a table without an off cell: nothing to calibrate on"


def test_choose_group_prefers_serial_no_cache_the_threads_then_repeats():
    k = lambda threads, overlap, cache: ("m", 29, threads, overlap, cache)  # noqa: E731
    keys = [(k(4, True, True), 5), (k(4, False, True), 2), (k(8, False, True), 3)]
    assert choose_group(keys) == k(4, False, True)          # threads 4: 7 runs against 3
    assert choose_group(keys, threads=8) == k(8, False, True)
    assert choose_group(keys + [(k(8, False, False), 1)]) == k(8, False, False)
    assert choose_group([]) is None


def test_identify_refuses_too_few_plain_runs(tmp_path):
    with pytest.raises(ConfigError, match="0 plain run"):
        identify_device([spec_file(tmp_path / "a.csv")], {})


# --- what the shared sets identify (docs/whatif-terms.md) -------------------------------------------

def _terms(name):
    require_shared("real-runs", name)
    if name == PHONE_LANES:
        require_shared("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")
    inp = set_inputs(name, tempfile.mkdtemp())
    return identify_device(inp.specs, inp.sizes, inp.work)


def r3(t):
    return (round(t.lo, 3), round(t.value, 3), round(t.hi, 3))


def test_desktop_eps():
    """Five serial 4-thread repeats of one 29-position prefill: eps_P 0.545 [0.031, 0.942]; at a
    4-position verify (roofline with the tensor-size reading 0.232) 0.581 [0, 1.204]. The host
    MTP d3 cell's implied 0.376 lies inside; the point is not identified more closely."""
    dt = _terms(DESKTOP)
    key, t = dt.eps_prefill[QWEN36]
    assert key == (QWEN36, 29, 4, False, True)
    assert r3(t) == (0.031, 0.545, 0.942)
    assert r3(dt.eps[QWEN36]) == (0.0, 0.581, 1.204)
    assert round(dt.eps_bytes[QWEN36].value, 3) == 0.232
    assert round(dt.work_ratio[QWEN36], 3) == 1.222
    assert dt.eps[QWEN36].contains(0.376)
    # the 8-thread prefills are cheaper: compute-bound at 29 positions
    assert r3(dt.prefill_groups[(QWEN36, 29, 8, False, True)]) == (0.0, 0.233, 0.666)


def test_phone_eps():
    """The 2026-07-12 phone: one serial no-cache prefill per model (no bookkeeping term): Qwen3-30B
    eps_P 0.506 [0.282, 0.999] (34 positions), gemma 0.469 [0.044, 0.830] (42). The 2026-07-22
    drop-cold runs (Qwen3.6, overlap only, prefill 6.0-9.9 s for the same 19 tokens) cannot
    identify it: [0, 4.70]."""
    dt = _terms(PHONE_LANES)
    assert dt.eps_prefill["qwen"][0] == ("qwen", 34, None, False, False)
    assert r3(dt.eps_prefill["qwen"][1]) == (0.282, 0.506, 0.999)
    assert r3(dt.eps_prefill["gemma"][1]) == (0.044, 0.469, 0.83)
    assert len([n for n in dt.notes if "mmap" in n]) == 2
    drop = _terms(PHONE_DROP)
    key, t = drop.eps_prefill[QWEN36]
    assert key == (QWEN36, 19, 4, True, True) and t.lo == 0.0 and t.hi > 4.5
