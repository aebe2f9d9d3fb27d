"""The engine metrics CSV reader: every layout, every error, the real runs, and mutations.

Outside oracles: the engine's own ``# summary`` trailers and stdout ``.log`` lines of the shared
runs (aggregates the engine computed from the same rows), and refsim's own ``bmoe_metrics v2``
writer.
"""

import glob
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.errors import MetricsFormatError
from refsim.spec import NgramDraft, SpecConfig, run_generation
from refsim.telemetry import MetricsPreamble, write_metrics_csv
from refsim.telemetry.constants import METRICS_COLUMNS
from refsim.telemetry.metrics_reader import (LEGACY_COLUMNS, MAX_TIME_MS, TIME_COLUMNS,
                                             V1_COLUMNS, read_metrics, read_sidecar,
                                             sidecar_path_for)
from refsim.testing import DocumentScript, ScriptedRouter, ScriptedTarget
from refsim.testing.metrics_files import V1_SESSION as V1
from refsim.testing.metrics_files import metrics_files, v1_row, v2_group_text
from refsim.testing.shared import require_shared

LEGACY8 = ("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms\n"
           "1,3,100.000,60.000,40.000,1048576,10.00,0.000\n"
           "2,3,200.000,150.000,50.000,2097152,20.00,0.000\n"
           "3,3,400.000,300.000,100.000,0,30.00,0.000\n"
           "# summary tokens=3 s/tok=0.233 tok/s=4.286 read_MiB=3.0 io_s=0.51 "
           "compute_s/tok=0.063 io_s/tok=0.170 cache_hit_pct=30.0 n_prompt=5 load_s=2.000 "
           "prefill_s=1.000 prefill_tps=5.00 stall_s/tok=0.000\n")


def write(tmp_path, text, name="run.csv"):
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(p)


# --- good files, every layout -------------------------------------------------------------------


def test_legacy_8_columns_with_header(tmp_path):
    r = read_metrics(write(tmp_path, LEGACY8))
    assert (r.layout, r.header, r.n_rows, r.complete, r.config) == ("legacy", True, 3, True, {})
    assert r.columns == LEGACY_COLUMNS
    assert r.data["wall_ms"].tolist() == [100.0, 200.0, 400.0]
    assert r.data["read_bytes"].dtype == np.int64 and r.data["read_bytes"].sum() == 3 * MIB
    assert r.summaries[0]["prefill_tps"] == 5.0 and r.summary["tokens"] == 3
    assert r.summary_line_numbers == (5,) and r.line_numbers.tolist() == [2, 3, 4]
    assert r.overlap is False and r.mtp_batch.tolist() == [1, 1, 1]
    assert r.token_wall_ms().tolist() == [100.0, 200.0, 400.0]
    assert not r.has("mgmt_ms") and r.column("turn") is None and r.sidecar is None


def test_legacy_header_less(tmp_path):
    body = "".join(LEGACY8.splitlines(True)[1:])
    r = read_metrics(write(tmp_path, body))
    assert (r.layout, r.header, r.columns, r.n_rows) == ("legacy", False, LEGACY_COLUMNS, 3)
    assert r.line_numbers.tolist() == [1, 2, 3]


def test_legacy_with_a_preamble_but_no_magic_line(tmp_path):
    r = read_metrics(write(tmp_path, "# model=q.gguf cache_mb=2000 io_threads=2\n" + LEGACY8))
    assert r.layout == "legacy" and r.number("cache_mb") == 2000 and r.n_rows == 3
    assert r.line_numbers.tolist() == [3, 4, 5]


@pytest.mark.parametrize("n_col", [9, 11])
def test_legacy_9_and_11_column_headers(tmp_path, n_col):
    names = METRICS_COLUMNS[:n_col]
    extra = {9: ",1.500", 11: ",1.500,2,3.250"}[n_col]            # mgmt_ms, majflt, cpu_ms
    rows = [LEGACY8.splitlines()[i] + extra for i in (1, 2)]
    r = read_metrics(write(tmp_path, ",".join(names) + "\n" + "\n".join(rows) + "\n"))
    assert r.columns == names and r.data["mgmt_ms"].tolist() == [1.5, 1.5]
    assert r.complete is False and r.summaries == () and r.summary == {}   # the run stopped


def test_v1_multi_turn_preamble_and_columns_by_name(tmp_path):
    r = read_metrics(write(tmp_path, V1))
    assert r.layout == "v1" and r.n_rows == 3 and r.n_turns == 2 and r.complete
    assert r.config["dense_weights"] == "ahwb" and r.number("cache_mb") == 3000
    assert r.number("drop_cold_frac") == 0.75 and r.number("absent", 7) == 7
    assert r.overlap is True
    assert r.data["turn"].tolist() == [0, 0, 1] and r.turn_index.tolist() == [0, 0, 1]
    assert r.data["step"].tolist() == [1, 2, 1]
    assert [s["tokens"] for s in r.summaries] == [2, 1] and r.summary["n_prompt"] == 4
    assert r.data["wall_ms"].tolist() == [300.5, 150.25, 100.0]
    # the same file with its columns in another order reads the same values
    order = list(reversed(V1_COLUMNS))
    lines = V1.splitlines()
    idx = [V1_COLUMNS.index(c) for c in order]
    shuffled = [",".join(order) if ln.startswith("step,") else
                ln if ln.startswith("#") else ",".join(ln.split(",")[i] for i in idx)
                for ln in lines]
    r2 = read_metrics(write(tmp_path, "\n".join(shuffled) + "\n", "shuffled.csv"))
    assert r2.columns == tuple(order)
    for c in V1_COLUMNS:
        assert r2.data[c].tolist() == r.data[c].tolist()


def _ngram_run():
    router = ScriptedRouter(n_layer=3, n_expert=8, k=2, seed=1)
    doc = (1, 2, 3, 4, 1, 2, 3, 9, 1, 2, 3, 4)
    target = ScriptedTarget(DocumentScript(doc, eos=0), router, eos_ids=(0,))
    cache = ExpertCache([1000, 2000, 3000], 8, 10 * MIB)
    return run_generation(target, NgramDraft(min_match=2), doc[:6], 6, cache=cache, draft_max=3)


def test_v2_written_by_refsim_reads_back(tmp_path):
    run = _ngram_run()
    cfg = SpecConfig.from_flags(ngram=True, draft=3, ngram_min_match=2)
    path = str(tmp_path / "v2.csv")
    write_metrics_csv(path, run, preamble=MetricsPreamble.for_run(run, cfg, model="m.gguf"))
    r = read_metrics(path)
    assert r.layout == "v2" and r.columns == METRICS_COLUMNS and r.complete
    assert r.config["spec"] == "ngram" and r.number("cache_mb") == 10
    assert r.number("spec_draft_max") == 3 and r.config["engine"].startswith("refsim-")
    assert r.mtp_batch.tolist() == [s.n_emitted for s in run.steps for _ in range(s.n_emitted)]
    assert r.group_first.tolist() == [k == 0 for s in run.steps for k in range(s.n_emitted)]
    want = [round(s.wall_s * 1e3, 3) / s.n_emitted for s in run.steps for _ in range(s.n_emitted)]
    assert r.token_wall_ms() == pytest.approx(want, abs=1e-12)
    assert r.data["read_bytes"].tolist() == [s.read_bytes if k == 0 else 0
                                            for s in run.steps for k in range(s.n_emitted)]
    assert r.summaries[0]["tokens"] == 6 and r.summaries[0]["mtp_decodes"] == len(run.steps)


def test_crlf_and_bom_are_accepted(tmp_path):
    text = "\ufeff" + LEGACY8.replace("\n", "\r\n")
    r = read_metrics(write(tmp_path, text))
    assert r.n_rows == 3 and r.data["stall_ms"].tolist() == [0.0, 0.0, 0.0]


def test_sidecar_is_read_when_present(tmp_path):
    path = write(tmp_path, LEGACY8, "q.csv")
    write(tmp_path, "peak_rss_kb=5284608\nmem_avail_floor_kb=3374340\n\ncpu_temp_max_mC=60600\n",
          "q.metrics")
    r = read_metrics(path)
    assert r.sidecar == {"peak_rss_kb": 5284608.0, "mem_avail_floor_kb": 3374340.0,
                         "cpu_temp_max_mC": 60600.0}
    assert r.sidecar_path == sidecar_path_for(path) == str(tmp_path / "q.metrics")
    assert read_metrics(path, sidecar=False).sidecar is None
    assert sidecar_path_for("a/b.x") == "a/b.x.metrics"


def test_overlap_is_inferred_from_stall_without_a_preamble(tmp_path):
    text = LEGACY8.replace("1,3,100.000,60.000,40.000,1048576,10.00,0.000",
                           "1,3,100.000,60.000,40.000,1048576,10.00,5.000")
    assert read_metrics(write(tmp_path, text)).overlap is True


# --- every error: file:line, one line -----------------------------------------------------------

_V1_ROWS = V1.splitlines(True)


def _replace_line(text: str, lineno: int, new: str) -> str:
    lines = text.splitlines(True)
    lines[lineno - 1] = new
    return "".join(lines)


ERRORS = [
    ("", 1, "an empty file"),
    ("# bmoe_metrics v3\n", 1, "v3 is not supported"),
    ("# route_trace v1\n", 1, "a route trace"),
    ("hello\n", 1, "a header-less row of 8 numbers"),
    ("1,2,3\n", 1, "a header-less row of 8 numbers"),
    (V1.replace("cache_mb=3000", "cache_mb=lots"), 3, "cache_mb='lots', expected an integer"),
    (V1.replace("drop_cold_frac=0.75", "drop_cold_frac=nan"), 3, "expected a finite number"),
    (V1.replace("io_threads=4", "io_threads=4 io_threads=8"), 3, "one value per key"),
    ("# bmoe_metrics v1\n# model=m\n", 3, "got end of file"),
    ("# bmoe_metrics v1\n# summary tokens=0\n", 2, "before the column header"),
    ("# cache_mb=x\n" + LEGACY8, 1, "cache_mb='x', expected an integer"),
    ("# model=q\n1,3,1,1,1,1,1,1\n", 2, "expected the column header line"),
    (V1.replace("turn,", "step,"), 4, "'step' appears twice"),
    (V1.replace(",swap_free_mib", ""), 4, "lacks column(s) swap_free_mib"),
    (LEGACY8.replace("stall_ms", "stall_ms,"), 1, "empty column name"),
    (LEGACY8.replace("step,steps,wall_ms", "step,wall_ms"), 1, "lacks column(s) steps"),
    (LEGACY8.replace(",0.000\n2,", "\n2,", 1), 2, "expected 8 fields"),
    (LEGACY8.replace("200.000", "fast"), 3, "column 'wall_ms' is 'fast', expected a number"),
    (LEGACY8.replace("200.000", "nan"), 3, "column 'wall_ms' is 'nan', expected a finite number"),
    (LEGACY8.replace("2097152", "1.5"), 3, "column 'read_bytes' is '1.5', expected an integer"),
    (LEGACY8.replace("2097152", "1e17"), 3, "expected an integer (at most 2^53)"),
    (LEGACY8.replace("200.000", "-1.000"), 3, "column 'wall_ms' is -1.0, expected a value >= 0"),
    (LEGACY8.replace("200.000", "1e308"), 3, "column 'wall_ms' is 1e+308, expected at most 1e+07 ms"),
    (LEGACY8.replace("150.000", "10000000.001"), 3, "column 'io_ms' is 10000000.001, expected at "
                                                    "most 1e+07 ms"),
    (V1.replace("300.5,400", "300.5,1e15", 1), 5, "column 'io_ms' is 1000000000000000.0, expected at most"),
    (LEGACY8.replace("20.00", "101.00"), 3, "a percentage in 0..100, or -1"),
    (V1.replace(",-1,", ",2,", 1), 5, "a fraction in 0..1, or -1"),
    (LEGACY8.replace("1,3,100", "0,3,100"), 2, "column 'step' is 0, expected an integer >= 1"),
    (LEGACY8.replace("2,3,200", "3,3,200"), 3, "column 'step' is 3, expected 2"),
    (LEGACY8.replace("3,3,400", "2,3,400"), 4, "column 'step' is 2, expected 3"),
    (LEGACY8.replace("2,3,200", "2,4,200"), 3, "column 'steps' is 4, expected 3"),
    (_replace_line(V1, 8, v1_row(step=1, steps=2, wall_ms=100, turn=0) + "\n"), 8,
     "turn 0 continues after its '# summary' line"),
    ("".join(_V1_ROWS[:4]) + v1_row(step=1, turn=1) + "\n" + v1_row(step=1, turn=0) + "\n", 6,
     "column 'turn' is 0 after 1"),
    (LEGACY8.replace("tokens=3", "tokens=4"), 5, "summary tokens=4, but its turn has 3 row(s)"),
    (LEGACY8.replace("prefill_tps=5.00", "prefill_tps=fast"), 5, "summary prefill_tps='fast'"),
    (LEGACY8.replace("tokens=3 ", ""), 5, "has no tokens="),
    (LEGACY8.replace("n_prompt=5", "n_prompt=5 n_prompt=6"), 5, "lists n_prompt= twice"),
    (LEGACY8.replace("3,3,400", "# note\n3,3,400"), 4, "expected a row or a '# summary"),
    (LEGACY8.replace("3,3,400", "\n3,3,400"), 4, "empty line"),
    (LEGACY8[:-1], 5, "last line is truncated"),
]


ERRORS += [
    (v2_group_text([(1, [5]), (3, [9, 0])]), 4, "mtp_batch=3 starts here but the file ends"),
    (v2_group_text([(2, [9]), (1, [5])]), 4, "has mtp_batch=1, expected 2"),
    (v2_group_text([(2, [9, 4])]), 4, "column 'wall_ms' is 4.0 on a row after the first"),
]


@pytest.mark.parametrize("text, line, fragment", ERRORS)
def test_every_error_names_file_line_and_expectation(tmp_path, text, line, fragment):
    path = write(tmp_path, text)
    with pytest.raises(MetricsFormatError) as exc:
        read_metrics(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}:{line}: "), msg
    assert fragment in msg and "\n" not in msg, msg


def test_time_columns_are_bounded_at_the_device_readers_bound_and_no_lower(tmp_path):
    """The bound is the device file's on its ms figures, and it is inclusive: 10^7 ms reads back
    (as does every shared engine run, test_every_real_run_reads...), 10^7 ms + 1 us does not."""
    from refsim.timing.model import MAX_ABS_PARAM
    assert MAX_TIME_MS == MAX_ABS_PARAM == 1e7
    assert TIME_COLUMNS == {c for c in METRICS_COLUMNS if c.endswith("_ms")} and len(TIME_COLUMNS) == 12
    r = read_metrics(write(tmp_path, LEGACY8.replace("200.000,150.000", "10000000.000,10000000.000")))
    assert r.data["wall_ms"].tolist() == [100.0, 1e7, 400.0] and r.data["io_ms"][1] == 1e7
    with pytest.raises(MetricsFormatError, match=r":3: column 'wall_ms' is 10000000.001, expected at "
                                                 r"most 1e\+07 ms"):
        read_metrics(write(tmp_path, LEGACY8.replace("200.000", "10000000.001")))


def test_the_engines_real_runs_stay_far_below_the_time_bound():
    """Every shared engine CSV (each time column, every row) is at least 1000x below the bound:
    the rule cannot refuse what the engine really writes."""
    root = require_shared("real-runs")
    files = sorted(glob.glob(str(root / "*" / "*.csv")))
    assert len(files) == 28
    top = max(float(v.max()) for f in files for c, v in read_metrics(f).data.items()
              if c in TIME_COLUMNS and v.size)
    assert top == 8652.349 and top * 1000 < MAX_TIME_MS


def test_v2_groups_read_and_spread(tmp_path):
    r = read_metrics(write(tmp_path, v2_group_text([(1, [5]), (3, [9, 0, 0]), (2, [4, 0])])))
    assert r.group_first.tolist() == [True, True, False, False, True, False]
    assert r.token_wall_ms().tolist() == [5.0, 3.0, 3.0, 3.0, 2.0, 2.0]
    assert r.token_ms("io_ms").tolist() == [0.0] * 6 and r.token_ms("absent") is None


def test_unreadable_and_non_utf8_files(tmp_path):
    missing = str(tmp_path / "none.csv")
    with pytest.raises(MetricsFormatError, match=r"none\.csv: cannot read"):
        read_metrics(missing)
    bad = write(tmp_path, b"step,steps\n\xff\n")
    with pytest.raises(MetricsFormatError, match=r"not UTF-8 text \(byte offset 11\)"):
        read_metrics(bad)


@pytest.mark.parametrize("text, line, fragment", [
    ("peak_rss_kb=12\nbroken\n", 2, "expected a 'key=value' line with a number"),
    ("peak_rss_kb=lots\n", 1, "expected a 'key=value' line with a number"),
    ("=3\n", 1, "expected a 'key=value' line"),
    ("a=1\na=2\n", 2, "a= listed twice"),
    ("step,steps,wall_ms\n", 1, "expected a 'key=value' line"),
])
def test_sidecar_errors(tmp_path, text, line, fragment):
    csv = write(tmp_path, LEGACY8, "s.csv")
    side = write(tmp_path, text, "s.metrics")
    with pytest.raises(MetricsFormatError) as exc:
        read_metrics(csv)
    assert str(exc.value).startswith(f"{side}:{line}: ") and fragment in str(exc.value)
    with pytest.raises(MetricsFormatError):
        read_sidecar(side)


# --- the shared real runs: every file, against the engine's own trailer and stdout --------------

REAL_SETS = ["phone-2026-07-12-cache-lanes", "desktop-2026-07-24-qwen36",
             "phone-2026-07-22-drop-cold"]
EXPECT_LAYOUT = {"phone-2026-07-12-cache-lanes": ("legacy", 14, 256),
                 "desktop-2026-07-24-qwen36": ("v1", 10, 256),
                 "phone-2026-07-22-drop-cold": ("v1", 4, None)}


@pytest.mark.parametrize("folder", REAL_SETS)
def test_every_real_run_reads_and_agrees_with_the_engines_trailer(folder):
    root = require_shared("real-runs", folder)
    files = sorted(glob.glob(str(root / "*.csv")))
    layout, n_files, n_rows = EXPECT_LAYOUT[folder]
    assert len(files) == n_files
    for f in files:
        r = read_metrics(f)
        s = r.summaries[0]
        d, n = r.data, r.n_rows
        assert r.layout == layout and r.complete and len(r.summaries) == 1, f
        assert n == s["tokens"] and (n_rows is None or n == n_rows), f
        # the trailer's figures are the engine's sums of these rows, printed rounded
        assert abs(d["read_bytes"].sum() / MIB - s["read_MiB"]) <= 0.05 + 1e-9, f
        assert abs(d["wall_ms"].sum() / n / 1000 - s["s/tok"]) <= 0.0005 + 1e-9, f
        assert abs(d["io_ms"].sum() / 1000 - s["io_s"]) <= 0.005 + 1e-9, f
        assert abs(d["stall_ms"].sum() / n / 1000 - s["stall_s/tok"]) <= 0.0005 + 1e-9, f
        assert abs(d["cache_hit_pct"][-1] - s["cache_hit_pct"]) <= 0.055, f
        if r.has("mgmt_ms"):
            assert abs(d["mgmt_ms"].sum() / n / 1000 - s["mgmt_s/tok"]) <= 0.0005 + 1e-9, f
        assert (r.sidecar is not None) == (folder == "phone-2026-07-12-cache-lanes"), f
        if r.sidecar is not None:
            assert r.sidecar["peak_rss_kb"] > 0 and "cpu_temp_max_mC" in r.sidecar
        if layout == "v1":
            assert r.number("n_layer") == 40 and r.config["arch"] == "qwen35moe"
            assert r.overlap == (r.number("overlap") == 1)


def test_real_legacy_runs_match_the_engines_moe_stream_line():
    """MiB/token and MiB/s from the rows equal the engine's stdout (the .log beside the CSV)."""
    from refsim.studies.bench import bench_run
    root = require_shared("real-runs", "phone-2026-07-12-cache-lanes")
    checked = 0
    for log in sorted(glob.glob(str(root / "*.log"))):
        text = open(log, encoding="utf-8-sig").read()
        m = re.search(r"moe-stream: read [\d.]+ MiB \(([\d.]+) MiB/token\).*, (\d+) MiB/s\)", text)
        if m is None:                      # the mmap runs stream nothing and print no such line
            continue
        row = bench_run(read_metrics(log[:-4] + ".csv"))
        assert f"{row.read_mib_per_token:.2f}" == m.group(1), log
        assert f"{row.flash_mib_s:.0f}" == m.group(2), log
        checked += 1
    assert checked == 11


# --- properties: every drawn valid file reads back; mutations never escape as other errors ------


def _check_drawn(tmp_path, f):
    path = write(tmp_path, f.text)
    r = read_metrics(path)
    assert (r.layout, r.header, r.columns) == (f.layout, f.header, f.columns)
    assert r.data["step"].tolist() == f.step
    assert r.turn_index.tolist() == f.turn_index
    assert r.data["wall_ms"].tolist() == f.wall_ms
    assert r.data["read_bytes"].tolist() == f.read_bytes
    assert r.mtp_batch.tolist() == f.mtp_batch
    assert (len(r.summaries), r.complete) == (f.n_summaries, f.complete)
    spread = r.token_wall_ms()
    first = r.group_first
    assert spread.sum() == pytest.approx(sum(f.wall_ms))
    assert (spread[first] * r.mtp_batch[first]).tolist() == pytest.approx(
        np.asarray(f.wall_ms)[first].tolist())


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(f=metrics_files())
def test_drawn_valid_files_read_back_exactly(tmp_path, f):
    _check_drawn(tmp_path, f)


def _mutate(f, data):
    lines = f.text.splitlines(True)
    kind = data.draw(st.sampled_from(["delete", "duplicate", "field", "truncate", "insert", "swap"]))
    if kind == "delete" and len(lines) > 1:
        i = data.draw(st.integers(0, len(lines) - 1))
        del lines[i]
    elif kind == "duplicate":
        i = data.draw(st.integers(0, len(lines) - 1))
        lines.insert(i, lines[i])
    elif kind == "field":
        i = data.draw(st.integers(0, len(lines) - 1))
        fs = lines[i].rstrip("\n").split(",")
        j = data.draw(st.integers(0, len(fs) - 1))
        fs[j] = data.draw(st.sampled_from(["", "x", "nan", "-1", "1e300", "0", "2", "0.5", "-0",
                                           "99999999999999999999", "101", fs[j] + "0", "1e308",
                                           "1e15", "10000000.001", "10000000"]))
        lines[i] = ",".join(fs) + "\n"
    elif kind == "truncate":
        text = "".join(lines)
        return text[:data.draw(st.integers(0, max(0, len(text) - 1)))]
    elif kind == "insert":
        i = data.draw(st.integers(0, len(lines)))
        lines.insert(i, data.draw(st.sampled_from(["\n", "# x=1\n", "# summary tokens=1\n",
                                                   "1,1,1,1,1,1,1,1\n", ",,,\n"])))
    elif kind == "swap" and len(lines) > 1:
        i = data.draw(st.integers(0, len(lines) - 2))
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return "".join(lines)


def _mutation_campaign(tmp_path, f, data):
    text = _mutate(f, data)
    path = write(tmp_path, text)
    try:
        r = read_metrics(path)
    except MetricsFormatError as exc:
        msg = str(exc)
        assert msg.startswith(path + ":") and "\n" not in msg, msg
        return
    # what still reads is self-consistent: steps count up per turn, summaries match their turns
    step, ti = r.data["step"], r.turn_index
    for t in range(int(ti.max()) + 1 if r.n_rows else 0):
        assert step[ti == t].tolist() == list(range(1, int((ti == t).sum()) + 1))
    assert np.isfinite(r.data["wall_ms"]).all() and (r.data["wall_ms"] >= 0).all()
    for name in TIME_COLUMNS & set(r.data):         # every time column bounded, none only wall_ms
        assert (r.data[name] <= MAX_TIME_MS).all(), name


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(f=metrics_files(), data=st.data())
def test_mutated_files_read_consistently_or_fail_in_one_line(tmp_path, f, data):
    _mutation_campaign(tmp_path, f, data)


@pytest.mark.fuzz
@settings(max_examples=3000, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(f=metrics_files(max_turns=4, max_groups=10), data=st.data())
def test_mutation_campaign_fuzz(tmp_path, f, data):
    _mutation_campaign(tmp_path, f, data)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(f=metrics_files(), data=st.data())
def test_deleting_a_row_of_a_closed_turn_is_always_an_error(tmp_path, f, data):
    if not f.closed_rows:
        return
    k = data.draw(st.sampled_from(f.closed_rows))
    lines = f.text.splitlines(True)
    del lines[f.data_lines[k]]
    path = write(tmp_path, "".join(lines))
    with pytest.raises(MetricsFormatError):
        read_metrics(path)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(f=metrics_files(), data=st.data())
def test_a_cut_inside_a_line_is_always_an_error(tmp_path, f, data):
    cut = data.draw(st.integers(1, len(f.text) - 1))
    if f.text[cut - 1] == "\n":
        return
    with pytest.raises(MetricsFormatError, match="last line is truncated|an empty file"):
        read_metrics(write(tmp_path, f.text[:cut]))
