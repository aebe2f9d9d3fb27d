"""refsim bench: hand-worked values, the engine's bench-analyze.py as an oracle on every shared
run, the drop-cold findings' bootstrap table, and the CLI."""

import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refsim.cli import main
from refsim.errors import ConfigError
from refsim.studies.bench import (bench_run, bootstrap_mean_ci, compare_runs, format_markdown,
                                  format_text, percentile_linear)
from refsim.telemetry.metrics_reader import read_metrics
from refsim.testing.metrics_files import V1_SESSION as V1
from refsim.testing.metrics_files import metrics_files, v2_group_text
from refsim.testing.shared import require_shared

MIB = 1 << 20
RUN4 = ("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms\n"
        f"1,4,100.000,60.000,40.000,{MIB},10.00,0.000,0.000\n"
        f"2,4,200.000,150.000,50.000,{2 * MIB},20.00,0.000,0.000\n"
        "3,4,400.000,300.000,100.000,0,30.00,0.000,0.000\n"
        f"4,4,500.000,400.000,96.000,{MIB},40.00,0.000,4.000\n"
        "# summary tokens=4 s/tok=0.300 tok/s=3.333 read_MiB=4.0 io_s=0.91 cache_hit_pct=40.0 "
        "n_prompt=5 load_s=2.000 prefill_s=1.000 prefill_tps=5.00 stall_s/tok=0.000\n")
SIDECAR = ("peak_rss_kb=2097152\nmem_avail_floor_kb=1048576\ncpu_temp_before_mC=40000\n"
           "cpu_temp_max_mC=55500\nbatt_temp_max_dC=381\n")


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_hand_worked_run(tmp_path):
    path = write(tmp_path, "r.csv", RUN4)
    write(tmp_path, "r.metrics", SIDECAR)
    row = bench_run(read_metrics(path), trim=1, resamples=50)
    # 4 tokens in 1.2 s; per-token rates 10, 5, 2.5, 2 tok/s
    assert row.tokens == 4 and row.decode_s == pytest.approx(1.2)
    assert row.tok_s_mean == pytest.approx(4 / 1.2)
    assert (row.tok_s_min, row.tok_s_max) == (2.0, 10.0)
    assert row.tok_s_median == pytest.approx(3.75)                 # (2.5 + 5) / 2
    assert row.tok_s_p5 == pytest.approx(2.0 + 0.15 * 0.5)        # position 0.05 * 3 = 0.15
    assert row.tok_s_p95 == pytest.approx(5.0 + 0.85 * 5.0)       # position 2.85
    assert (row.prefill_tps, row.ttft_s, row.cache_hit_pct) == (5.0, 3.0, 40.0)
    assert row.read_mib_per_token == 1.0                           # 4 MiB / 4 tokens
    assert row.flash_mib_s == pytest.approx(4 / 0.91)              # 4 MiB / 0.91 s of io_ms
    assert row.compute_ms_per_token == pytest.approx(286 / 4)
    assert row.io_ms_per_token == pytest.approx(910 / 4) == row.flash_wait_ms_per_token
    assert (row.stall_ms_per_token, row.mgmt_ms_per_token, row.overlap) == (0.0, 1.0, False)
    assert (row.peak_rss_gib, row.mem_floor_gib) == (2.0, 1.0)
    assert (row.cpu_temp_start_c, row.cpu_temp_max_c, row.batt_temp_max_c) == (40.0, 55.5, 38.1)
    assert row.cpu_temp_rise_c == pytest.approx(15.5)
    assert row.rows_peak_rss_mib is None and row.rows_mem_available_floor_mib is None
    t = row.trimmed                                               # tokens 2..4: 200, 400, 500 ms
    assert (t.trim, t.n, t.median_ms) == (1, 3, 400.0) and t.mean_ms == pytest.approx(1100 / 3)
    assert 200.0 <= t.ci_lo_ms <= t.mean_ms + 1e-9 and t.mean_ms - 1e-9 <= t.ci_hi_ms <= 500.0
    text = format_text([row])
    assert "3.33" in text and "[" in text and "15.5" in text
    md = format_markdown([row])
    assert md.count("|---|") == 4 and f"| {path} |" in md          # the label: the path given


def test_speculative_groups_charge_each_token_its_share(tmp_path):
    run = read_metrics(write(tmp_path, "g.csv", v2_group_text([(1, [100]), (2, [300, 0])])))
    row = bench_run(run, trim=0, resamples=20)
    assert row.tok_s_mean == pytest.approx(3 / 0.4)
    assert row.tok_s_max == pytest.approx(10.0) and row.tok_s_min == pytest.approx(1000 / 150)
    assert row.trimmed.mean_ms == pytest.approx(400 / 3) and row.trimmed.median_ms == 150.0
    assert row.cache_hit_pct is None and row.prefill_tps is None and row.ttft_s is None
    assert not row.complete and "no '# summary' line" in format_text([row])


def test_session_file_sums_its_turns(tmp_path):
    """Two turns (tests/telemetry's V1 file): rows of both, TTFT of the first turn, prefill over
    both turns, the hit of the last row when the last trailer has none."""
    row = bench_run(read_metrics(write(tmp_path, "s.csv", V1)), trim=0, resamples=20)
    assert (row.tokens, row.turns) == (3, 2)
    assert row.tok_s_mean == pytest.approx(3 / 0.55075)
    assert row.ttft_s == pytest.approx(45.521 + 5.993)
    assert row.prefill_tps == pytest.approx((19 + 4) / (5.993 + 1.0))
    assert row.cache_hit_pct == 50.0 and row.overlap is True
    assert row.stall_ms_per_token == pytest.approx(100 / 3)
    assert row.flash_mib_s == pytest.approx(4096 / MIB / 0.49)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(f=metrics_files())
def test_bench_invariants_on_drawn_files(tmp_path, f):
    if not f.step:
        return
    row = bench_run(read_metrics(write(tmp_path, "d.csv", f.text)), trim=0, resamples=20)
    assert row.tokens == len(f.step)
    assert row.tok_s_mean == pytest.approx(len(f.step) / (sum(f.wall_ms) / 1000))
    assert row.tok_s_min <= row.tok_s_p5 <= row.tok_s_median <= row.tok_s_p95 <= row.tok_s_max
    assert row.read_mib_per_token == pytest.approx(sum(f.read_bytes) / MIB / len(f.step))
    if row.trimmed is not None:
        assert row.trimmed.mean_ms == pytest.approx(sum(f.wall_ms) / len(f.step))


def test_compare_hand_worked(tmp_path):
    a = read_metrics(write(tmp_path, "a.csv", v2_group_text([(1, [100])] * 5)))
    b = read_metrics(write(tmp_path, "b.csv", v2_group_text([(1, [200])] * 5)))
    ra, rb = (bench_run(r, label, trim=0, resamples=100) for r, label in ((a, "A"), (b, "B")))
    c = compare_runs(a, ra, b, rb, resamples=100)
    assert (c.mean_ms_delta, c.delta_ci_lo_ms, c.delta_ci_hi_ms) == (100.0, 100.0, 100.0)
    assert c.tok_s_mean_delta == pytest.approx(-5.0) and c.tok_s_mean_delta_pct == pytest.approx(-50)
    assert c.mean_ms_delta_pct == pytest.approx(100.0) and c.ci_overlap is False
    same = compare_runs(a, ra, a, ra, resamples=100)
    assert same.ci_overlap is True and same.mean_ms_delta == 0.0
    assert "disjoint" in format_text([ra, rb], c) and "overlap" in format_text([ra, ra], same)
    short = bench_run(a, trim=4, resamples=10)
    assert short.trimmed is None
    with pytest.raises(ConfigError, match="fewer than 2 tokens after --trim"):
        compare_runs(a, short, b, rb)


@given(st.lists(st.integers(1, 10**6), min_size=2, max_size=40), st.integers(0, 2**32 - 1),
       st.integers(-1000, 1000))
def test_bootstrap_ci_properties(values, seed, shift):
    x = np.asarray(values, dtype=np.float64) / 1000.0
    lo, hi = bootstrap_mean_ci(x, 200, seed)
    assert x.min() - 1e-9 <= lo <= hi <= x.max() + 1e-9
    assert bootstrap_mean_ci(x, 200, seed) == (lo, hi)                # the seed fixes it
    lo2, hi2 = bootstrap_mean_ci(x + shift, 200, seed)                # translation-equivariant
    assert lo2 == pytest.approx(lo + shift, abs=1e-6) and hi2 == pytest.approx(hi + shift, abs=1e-6)
    nlo, nhi = bootstrap_mean_ci(x, 200, seed, level=0.5)             # a lower level is nested
    assert lo - 1e-9 <= nlo <= nhi <= hi + 1e-9


def test_bootstrap_of_a_constant_is_the_constant_and_needs_two_values():
    assert bootstrap_mean_ci(np.full(7, 3.5), 30, 1) == (3.5, 3.5)
    with pytest.raises(ConfigError):
        bootstrap_mean_ci(np.array([1.0]), 10, 0)
    assert percentile_linear(np.array([]), 0.5) == 0.0
    assert percentile_linear(np.array([1.0, 2.0, 4.0]), 0.75) == 3.0


# --- the drop-cold findings' per-token table (phone-2026-07-22-drop-cold/findings.md) ----------

FINDINGS = {          # drop_cold_frac -> (median ms, mean ms, CI lo, CI hi), as published
    0.0: (249.5, 391.1, 375.3, 407.1),
    0.5: (263.2, 391.6, 375.3, 408.5),
    0.75: (202.8, 253.5, 246.9, 260.4),
    1.0: (153.4, 214.9, 206.2, 225.0),
}


def test_bootstrap_reproduces_the_drop_cold_findings():
    """Mean and median to 0.1 ms; CI bounds within the bootstrap's own resampling noise.

    Method: trim 50 tokens, 2000 percentile-bootstrap resamples, seed 0 (the defaults). Noise:
    the standard deviation ``sd`` of each bound over 8 other seeds. The published bound is one
    draw from the same distribution, so ``ours − published`` has sd ``√2·sd``: we require
    ``|ours − published| <= 3·√2·sd``, and the mean of the 9 seeds within ``3·sd`` of it.
    """
    root = require_shared("real-runs", "phone-2026-07-22-drop-cold")
    files = sorted(glob.glob(str(root / "*.csv")))
    assert len(files) == 4
    seen = set()
    for f in files:
        run = read_metrics(f)
        frac = run.number("drop_cold_frac")
        med, mean, lo, hi = FINDINGS[frac]
        seen.add(frac)
        row = bench_run(run)                                     # trim 50, 2000 resamples, seed 0
        t = row.trimmed
        assert (t.trim, t.resamples, t.seed) == (50, 2000, 0)
        assert f"{t.mean_ms:.1f}" == f"{mean:.1f}" and f"{t.median_ms:.1f}" == f"{med:.1f}", f
        ms = run.token_wall_ms()[50:]
        bounds = np.array([bootstrap_mean_ci(ms, 2000, s) for s in range(1, 9)])
        sd = bounds.std(axis=0, ddof=1)
        allb = np.vstack([bounds, [t.ci_lo_ms, t.ci_hi_ms]])
        for k, (ours, pub) in enumerate(((t.ci_lo_ms, lo), (t.ci_hi_ms, hi))):
            assert abs(ours - pub) <= 3 * np.sqrt(2) * sd[k], (f, k, ours, pub, sd[k])
            assert abs(allb[:, k].mean() - pub) <= 3 * sd[k], (f, k, allb[:, k].mean(), pub)
    assert seen == set(FINDINGS)
    # the findings' verdict: every pair disjoint except 0 vs 0.50
    rows = {read_metrics(f).number("drop_cold_frac"): bench_run(read_metrics(f)) for f in files}
    for x in FINDINGS:
        for y in FINDINGS:
            if x < y:
                a, b = rows[x].trimmed, rows[y].trimmed
                overlap = a.ci_lo_ms <= b.ci_hi_ms and b.ci_lo_ms <= a.ci_hi_ms
                assert overlap == ((x, y) == (0.0, 0.5)), (x, y)


# --- the engine's bench-analyze.py as the oracle ------------------------------------------------

SCRIPT = ("reference", "engine-docs", "scripts", "bench-analyze.py")
KEYS = ["mmap", "stream", "c2000_l2", "c2000_l4", "c4000_l2", "c4000_l4", "stream_ov",
        "c2000_l4_ov", "c4000_l4_ov", "c4000_l4_pf1", "c4000_l4_pf2", "c4000_l4_pf4", "base_ov",
        "auto_ov", "autocap_ov"]
"""The run keys bench-analyze.py looks for (``<model>_<key>.csv``), in the order it prints them."""


def _script_tables(stdout: str) -> dict:
    """{(model, 'throughput'|'pressure'): [[tokens of a row], ...]} from the script's stdout."""
    out, current = {}, None
    for line in stdout.splitlines():
        if line.startswith("====="):
            model, what = line.strip("= ").split(" — ")
            current = (model.lower(), what.split()[-1])
            out[current] = []
        elif current and line and not line.startswith("config") and not line.startswith("markdown"):
            out[current].append(line.split())
        elif not line:
            current = None if current and out[current] else current
    return out


def _script_cache_rows(md: str, model: str) -> list[list[str]]:
    """The cells (label dropped) of the script's third Markdown table for ``model``."""
    section = next(part for part in md.split("\n### ") if part.lower().startswith(model))
    if "**Cache sizing" not in section:
        return []
    lines = section.split("**Cache sizing", 1)[1].splitlines()
    rows = [ln for ln in lines if ln.startswith("| ") and not ln.startswith("| Config")]
    out = []
    for ln in rows:
        if not ln.startswith("| "):
            break
        out.append([c.strip() for c in ln.strip("|").split("|")][1:])
    return out


def _ours_cache(r) -> list[str]:
    mib = lambda v: "—" if v is None else f"{v:.0f} MiB"     # noqa: E731
    return [mib(r.cache_budget_mib), mib(r.cache_resident_mib),
            "—" if r.spec_useful_pct is None else f"{r.spec_useful_pct:.0f}%",
            mib(r.spec_read_mib_per_token)]


def _run_oracle(tmp_path, links: dict) -> dict:
    """Symlink ``links`` (name -> real path) into a folder, run the script on it (it writes its
    summary.md there, never into the shared folder) and parse its tables (stdout's two, and the
    Markdown-only third under the key ``(model, 'cache')``)."""
    for name, real in links.items():
        os.symlink(real, tmp_path / name)
    script = require_shared(*SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                          text=True, check=True, timeout=120)
    tables = _script_tables(done.stdout)
    md = (tmp_path / "summary.md").read_text(encoding="utf-8")
    for model in ("qwen", "gemma"):
        tables[(model, "cache")] = _script_cache_rows(md, model)
    return tables


def _ours_throughput(r) -> list[str]:
    return [f"{r.tok_s_mean:.2f}", f"{r.tok_s_min:.2f}", f"{r.tok_s_max:.2f}",
            f"{r.tok_s_median:.2f}", f"{r.tok_s_p95:.2f}", f"{r.prefill_tps:.2f}",
            f"{r.ttft_s:.1f}", "—" if r.cache_hit_pct is None else f"{r.cache_hit_pct:.0f}%",
            f"{r.read_mib_per_token:.0f}M",
            "—" if r.stall_ms_per_token is None else f"{r.stall_ms_per_token:.1f}"]


def _ours_pressure(r) -> list[str]:
    z = lambda v: 0.0 if v is None else v     # noqa: E731 - the script prints 0 for "no sidecar"
    return [f"{z(r.peak_rss_gib):.2f}GB", f"{z(r.mem_floor_gib):.2f}GB",
            f"{z(r.cpu_temp_start_c):.1f}C", f"{z(r.cpu_temp_max_c):.1f}C",
            f"{z(r.batt_temp_max_c):.1f}C"]


def _compare_with_script(tables, model, rows):
    thr, pre = tables[(model, "throughput")], tables[(model, "pressure")]
    assert len(thr) == len(rows) == len(pre) > 0
    for script_row, r in zip(thr, rows):
        assert script_row[-10:] == _ours_throughput(r), (r.label, script_row)
    for script_row, r in zip(pre, rows):
        assert script_row[-5:] == _ours_pressure(r), (r.label, script_row)
    sized = [r for r in rows if r.cache_budget_mib is not None or r.spec_read_mib_per_token]
    assert tables[(model, "cache")] == [_ours_cache(r) for r in sized]
    return len(sized)


def test_same_numbers_as_bench_analyze_on_the_phone_cache_lanes_set(tmp_path):
    root = require_shared("real-runs", "phone-2026-07-12-cache-lanes")
    links = {os.path.basename(p): p for p in glob.glob(str(root / "*.csv")) +
             glob.glob(str(root / "*.metrics"))}
    tables = _run_oracle(tmp_path, links)
    for model in ("qwen", "gemma"):
        present = [k for k in KEYS if (root / f"{model}_{k}.csv").exists()]
        rows = [bench_run(read_metrics(str(root / f"{model}_{k}.csv")), resamples=10)
                for k in present]
        _compare_with_script(tables, model, rows)


@pytest.mark.parametrize("folder", ["desktop-2026-07-24-qwen36", "phone-2026-07-22-drop-cold"])
def test_same_numbers_as_bench_analyze_on_the_v1_sets(tmp_path, folder):
    """The script finds runs by name only (``qwen_<key>.csv``): each file is linked under one
    of its keys, in the order the script prints them."""
    root = require_shared("real-runs", folder)
    files = sorted(glob.glob(str(root / "*.csv")))
    tables = _run_oracle(tmp_path, {f"qwen_{k}.csv": f for k, f in zip(KEYS, files)})
    rows = [bench_run(read_metrics(f), resamples=10) for f in files]
    assert all(r.peak_rss_gib is None for r in rows)          # no sidecar: the script prints 0
    assert _compare_with_script(tables, "qwen", rows) == len(rows)   # every v1 run has a budget


# --- the CLI ------------------------------------------------------------------------------------


def test_cli_text_json_md_and_compare(tmp_path, capsys):
    a = write(tmp_path, "a.csv", RUN4)
    b = write(tmp_path, "b.csv", RUN4.replace("500.000,400.000,96.000", "900.000,800.000,96.000"))
    md = str(tmp_path / "out.md")
    assert main(["bench", a, b, "--compare", "--trim", "0", "--resamples", "100", "--md", md]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Throughput") and "compare: B = b.csv against A = a.csv" in out
    assert "+100.0 ms/token" in out                    # (100+200+400+900 - 1200) / 4
    text = open(md).read()
    assert text.count("|---|") == 4 and "**Comparison**" in text
    assert main(["bench", a, "--json", "--trim", "1", "--resamples", "20", "--seed", "3"]) == 0
    obj = json.loads(capsys.readouterr().out)
    (run,) = obj["runs"]
    assert run["tokens"] == 4 and run["tok_s_mean"] == pytest.approx(4 / 1.2)
    assert run["trimmed"]["seed"] == 3 and run["trimmed"]["n"] == 3
    assert run["flash_wait_ms_per_token"] == pytest.approx(227.5)


@pytest.mark.parametrize("trim", ["3", "4", "255"])
def test_cli_a_trim_that_leaves_under_two_tokens_prints_na_with_the_reason(tmp_path, capsys, trim):
    # main printed "—" (the mark of a value absent from the file) in the four cells, no reason
    a = write(tmp_path, "a.csv", RUN4)
    assert main(["bench", a, "--trim", trim, "--resamples", "20"]) == 0
    out, err = capsys.readouterr()
    kept = max(4 - int(trim), 0)
    assert err == (f"refsim bench: note: a.csv: --trim {trim} leaves {kept} of its 4 tokens; the per-token "
                   f"mean and its CI need at least 2 (n/a in the table; lower --trim)\n")
    lines = out.splitlines()
    row = lines[lines.index(next(ln for ln in lines if ln.startswith("Per-token decode time"))) + 2]
    assert row.split() == ["a.csv", "n/a", "n/a", "n/a", "n/a"]
    assert main(["bench", a, "--trim", trim, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["trimmed"] is None
    # --compare needs both means: one error, no note before it
    assert main(["bench", a, a, "--compare", "--trim", trim]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fewer than 2 tokens after --trim" in err


def test_cli_a_file_without_rows_is_a_one_line_error(tmp_path, capsys):
    empty = write(tmp_path, "e.csv", RUN4.splitlines(True)[0])
    assert main(["bench", empty]) == 1
    err = capsys.readouterr().err
    assert f"{empty}: the file has no per-token rows" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv, fragment", [
    (["--compare"], "--compare: expected exactly two runs A B, got 1"),
    (["--md", "{d}/o.png", "--plot", "{d}/o.png"], "the same file; expected two files"),
    (["--md", "{a}"], "--md {a}: is also the RUN {a} input"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, argv, fragment):
    a = write(tmp_path, "a.csv", RUN4)
    assert main(["bench", a] + [x.format(a=a, d=tmp_path) for x in argv]) == 1
    err = capsys.readouterr().err
    assert fragment.format(a=a) in err and err.count("\n") == 1, err


def test_cli_rejects_bad_resamples(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "x.csv", "--resamples", "0"])
    assert exc.value.code == 2 and "--resamples: expected an integer in 1..100000, got '0'" in capsys.readouterr().err


def test_cli_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    a = write(tmp_path, "a.csv", RUN4)
    png = tmp_path / "p.png"
    assert main(["bench", a, "--trim", "1", "--resamples", "20", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_cli_plot_without_matplotlib_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)         # import matplotlib -> ImportError
    a = write(tmp_path, "a.csv", RUN4)
    assert main(["bench", a, "--plot", str(tmp_path / "p.png")]) == 1
    err = capsys.readouterr().err
    assert "matplotlib is not installed" in err and err.count("\n") == 1
    assert not (tmp_path / "p.png").exists()


def test_cli_a_run_with_no_decode_time_prints_na_with_the_reason(tmp_path, capsys):
    """wall_ms 0 in every row: tok/s printed 0.00 and the CI [0.0, 0.0] (issue 26 C6); now n/a,
    with the reason on stderr, null in the JSON, and --compare refuses it."""
    text = RUN4.replace("100.000,60", "0.000,60").replace("200.000,150", "0.000,150") \
               .replace("400.000,300", "0.000,300").replace("500.000,400", "0.000,400")
    a = write(tmp_path, "z.csv", text)
    row = bench_run(read_metrics(a), trim=1, resamples=20)
    assert row.untimed == "wall_ms is 0 in every row (no decode time was measured)"
    assert (row.tok_s_mean, row.tok_s_min, row.tok_s_p95, row.wall_ms_per_token,
            row.trimmed) == (None, None, None, None, None)
    assert row.compute_ms_per_token == pytest.approx(286 / 4)     # what was measured stays
    assert main(["bench", a, "--trim", "1", "--resamples", "20"]) == 0
    out, err = capsys.readouterr()
    assert err == ("refsim bench: note: z.csv: wall_ms is 0 in every row (no decode time was "
                   "measured): its tok/s, wall ms/token and per-token mean and CI are n/a\n")
    lines = out.splitlines()
    thr = lines[lines.index(next(ln for ln in lines if ln.startswith("Throughput"))) + 2].split()
    assert thr[:8] == ["z.csv", "4", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a"]
    row_t = lines[lines.index(next(ln for ln in lines if ln.startswith("Per-token decode"))) + 2]
    assert row_t.split() == ["z.csv", "n/a", "n/a", "n/a", "n/a"]
    split = lines[lines.index(next(ln for ln in lines if ln.startswith("Time split"))) + 2].split()
    assert split[:4] == ["z.csv", "no", "n/a", "71.5"]
    assert "0.00" not in " ".join(thr) and "[0.0, 0.0]" not in out
    assert main(["bench", a, "--json", "--trim", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)["runs"][0]
    assert doc["tok_s_mean"] is None and doc["untimed"] == row.untimed
    b = write(tmp_path, "b.csv", RUN4)
    assert main(["bench", b, a, "--compare", "--trim", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "z.csv: wall_ms is 0 in every row" in err


def test_bench_help_says_95_percent(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    assert "95% CI" in " ".join(out.split()) and "%%" not in out
