"""Output flags are checked before any work: a file name (not "" or "dir/"), writable, and not
the same file as an input or another output (which would silently destroy it)."""

import shutil
from pathlib import Path

import pytest

from refsim.cli import main

DEMO = Path(__file__).resolve().parents[1] / "traces" / "demo.route.csv"


@pytest.mark.parametrize("argv, msg", [
    (["replay", str(DEMO), "--cache-mb", "256", "--csv", ""], "--csv '': expected a file name"),
    (["replay", str(DEMO), "--cache-mb", "256", "--csv", "sub/"], "--csv 'sub/': expected a file name"),
    (["sweep", str(DEMO), "--cache-mb", "256", "--plot", "p/"], "--plot 'p/': expected a file name"),
    (["synth", "--arch", "qwen3moe", "--out", ""], "--out '': expected a file name"),
])
def test_not_a_file_name(argv, msg, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert msg in err and out == "" and list(tmp_path.iterdir()) == []


def test_an_output_may_not_overwrite_an_input_or_another_output(capsys, tmp_path):
    trace = tmp_path / "t.route.csv"
    shutil.copy(DEMO, trace)
    before = trace.read_bytes()
    assert main(["replay", str(trace), "--cache-mb", "256", "--csv", str(tmp_path / "." / "t.route.csv")]) == 1
    assert "is also the TRACE input; expected another file" in capsys.readouterr().err
    assert trace.read_bytes() == before
    assert main(["sweep", str(trace), "--cache-mb", "256", "--csv", str(tmp_path / "a.png"),
                 "--plot", str(tmp_path / "a.png")]) == 1
    assert "--csv " in capsys.readouterr().err and not (tmp_path / "a.png").exists()


# --- outputs never destroy what is at the path; "-" is stdout (issue 12 A1, A3) ---------------

import os  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from refsim.testing.fifo import read_fifo_in_background  # noqa: E402


def test_replay_csv_dash_is_the_csv_on_stdout_and_the_report_on_stderr(capsys, tmp_path):
    assert main(["replay", str(DEMO), "--cache-mb", "256", "--csv", str(tmp_path / "a.csv")]) == 0
    want = (tmp_path / "a.csv").read_text()
    report = capsys.readouterr().out
    assert main(["replay", str(DEMO), "--cache-mb", "256", "--csv", "-"]) == 0
    out, err = capsys.readouterr()
    assert out == want and err == report
    assert not (Path.cwd() / "-").exists()


def test_sweep_csv_dash_and_run_two_dashes(capsys, tmp_path):
    assert main(["sweep", str(DEMO), "--cache-mb", "256", "--policy", "lru", "--csv", "-"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "budget_mib,policy,hit_pct_cum,hit_pct_decode,read_mib,over_budget"
    assert out.splitlines()[1].startswith("256,lru,") and "budget_mib  policy" in err
    assert main(["run", "--csv", "-", "--route-trace", "-"]) == 1
    assert capsys.readouterr().err.strip() == ("refsim run: error: --route-trace - and --csv -: both "
                                               "standard output; expected at most one -")


def test_csv_through_a_symlink_to_a_fifo_is_streamed(capsys, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link-to-pipe"
    link.symlink_to(fifo)
    t, got = read_fifo_in_background(fifo)
    assert main(["replay", str(DEMO), "--cache-mb", "256", "--csv", str(link)]) == 0
    t.join(10)
    assert got and got[0].startswith(b"event,kind,step,n_pos,")
    assert link.is_symlink() and stat.S_ISFIFO(os.stat(link).st_mode)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_synth_to_dev_full_is_one_line_enospc_and_dev_full_stays_a_device(capsys):
    before = os.lstat("/dev/full")
    assert main(["synth", "--arch", "qwen3moe", "--out", "/dev/full"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == "refsim synth: error: --out /dev/full: write failed: No space left on device\n"
    after = os.lstat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


def test_synth_to_dash_is_refused_and_to_dev_null_prints_the_path_on_stderr(capsys):
    assert main(["synth", "--arch", "qwen3moe", "--out", "-"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("refsim synth: error: --out -: this output is binary")
    assert main(["synth", "--arch", "qwen3moe", "--out", "/dev/null"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == "/dev/null\n" and stat.S_ISCHR(os.lstat("/dev/null").st_mode)


def test_synth_replacing_a_file_keeps_its_mode_and_a_symlink(capsys, tmp_path):
    target = tmp_path / "m.gguf"
    target.write_bytes(b"old")
    target.chmod(0o600)
    link = tmp_path / "link.gguf"
    link.symlink_to(target)
    assert main(["synth", "--arch", "qwen3moe", "--out", str(link)]) == 0
    assert link.is_symlink() and target.read_bytes()[:4] == b"GGUF"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.gguf", "m.gguf"]


@pytest.mark.parametrize("name, magic", [("p.png", b"\x89PNG\r\n\x1a\n"), ("p.pdf", b"%PDF-"),
                                         ("p.SVG", b"<?xml")])
def test_plot_writes_the_format_its_extension_names(capsys, tmp_path, name, magic):
    pytest.importorskip("matplotlib")
    out = tmp_path / name
    assert main(["sweep", str(DEMO), "--cache-mb", "256", "--policy", "lru", "--plot", str(out)]) == 0
    data = out.read_bytes()
    assert data.startswith(magic)
    if name.lower().endswith(".svg"):
        assert b"<svg" in data[:2000]


@pytest.mark.parametrize("name, msg", [
    ("p.jpg", "unsupported extension '.jpg'; expected .png, .pdf or .svg"),
    ("plot", "no extension; expected .png, .pdf or .svg"),
])
def test_plot_refuses_other_extensions_before_any_work(capsys, tmp_path, name, msg):
    assert main(["sweep", str(DEMO), "--cache-mb", "256", "--csv", str(tmp_path / "c.csv"),
                 "--plot", str(tmp_path / name)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == f"refsim sweep: error: --plot {tmp_path / name}: {msg}\n"
    assert list(tmp_path.iterdir()) == []


def _cli(args, **kw):
    env = {**os.environ, "PYTHONPATH": str(DEMO.parents[1])}
    return subprocess.run([sys.executable, "-m", "refsim.cli", *args], env=env, text=True,
                          capture_output="stdout" not in kw, **kw)


@pytest.mark.parametrize("via_link", [False, True])
def test_csv_to_dev_stdout_redirected_to_a_file_holds_only_the_csv(tmp_path, via_link):
    want = tmp_path / "want.csv"
    assert main(["replay", str(DEMO), "--cache-mb", "256", "--csv", str(want)]) == 0
    out = "/dev/stdout"
    if via_link:                   # `--csv link-to-stdout` printed nothing and exited 0
        (tmp_path / "link").symlink_to("/dev/stdout")
        out = str(tmp_path / "link")
    got = tmp_path / "got.csv"
    with open(got, "w") as fh:     # `--csv /dev/stdout > got.csv`: the report goes to stderr
        inode = os.fstat(fh.fileno()).st_ino
        r = _cli(["replay", str(DEMO), "--cache-mb", "256", "--csv", out], stdout=fh,
                 stderr=subprocess.PIPE)
    assert r.returncode == 0 and got.read_text() == want.read_text()
    assert os.stat(got).st_ino == inode          # written through the descriptor, not replaced
    assert r.stderr.startswith("trace: ")
    assert not via_link or (tmp_path / "link").is_symlink()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_report_to_a_full_disk_is_one_line(tmp_path):
    with open("/dev/full", "w") as full:
        r = _cli(["replay", str(DEMO), "--cache-mb", "256"], stdout=full,
                 stderr=subprocess.PIPE)
        assert r.returncode == 1
        assert r.stderr == "refsim replay: error: standard output: write failed: No space left on device\n"
        r = _cli(["replay", str(DEMO), "--cache-mb", "256", "--csv", "-"], stdout=full,
                 stderr=subprocess.PIPE)
        assert r.returncode == 1
        assert r.stderr == "refsim replay: error: --csv -: write failed: No space left on device\n"


# --- the same rules for the commands merged from main: bench --md, analyze/bench --plot, view ---

RUN2 = ("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms\n"
        "1,2,100.000,60.000,40.000,1048576,10.00,0.000,0.000\n"
        "2,2,200.000,150.000,50.000,0,20.00,0.000,0.000\n")


def test_bench_md_dash_is_the_markdown_on_stdout_and_the_tables_on_stderr(tmp_path, capsys):
    run = tmp_path / "r.csv"
    run.write_text(RUN2)
    md = tmp_path / "r.md"
    assert main(["bench", str(run), "--trim", "0", "--resamples", "20", "--md", str(md)]) == 0
    text = capsys.readouterr().out
    assert main(["bench", str(run), "--trim", "0", "--resamples", "20", "--md", "-"]) == 0
    out, err = capsys.readouterr()
    assert out == md.read_text() and err == text


@pytest.mark.parametrize("argv", [["analyze", str(DEMO), "--view", "reuse"],
                                  ["bench", "RUN"]])
def test_analyze_and_bench_refuse_a_plot_extension_before_any_work(tmp_path, capsys, argv):
    run = tmp_path / "r.csv"
    run.write_text(RUN2)
    argv = [str(run) if a == "RUN" else a for a in argv]
    bad = str(tmp_path / "p.gif")
    assert main(argv + ["--plot", bad]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.endswith(f"--plot {bad}: unsupported extension '.gif'; "
                                      f"expected .png, .pdf or .svg\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]


def test_view_html_to_a_fifo_and_to_dash(tmp_path, capsys):
    fifo = tmp_path / "page"
    os.mkfifo(fifo)
    t, got = read_fifo_in_background(fifo)
    assert main(["view", str(DEMO), "--html", str(fifo)]) == 0
    t.join(10)
    assert got and got[0].lstrip().lower().startswith(b"<!doctype html")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    capsys.readouterr()
    assert main(["view", str(DEMO), "--html", "-"]) == 0
    out, err = capsys.readouterr()
    assert out.encode() == got[0] and err.startswith("wrote - (")


# --- --plot to a FIFO or a pipe (D6): rendered in memory, then streamed ------------------------

@pytest.mark.parametrize("ext", ["png", "pdf", "svg"])
def test_sweep_plot_to_a_fifo_is_streamed(capsys, tmp_path, ext):
    """matplotlib's writers seek in their file; a FIFO refuses that (ESPIPE), so the figure is
    rendered in memory and then written: the FIFO's reader gets the whole figure, in the format the
    FIFO's extension names (PNG when it has none)."""
    pytest.importorskip("matplotlib")
    magic = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF-", "svg": b"<?xml"}[ext]
    fifo = tmp_path / f"fifo1.{ext}"
    os.mkfifo(fifo)
    t, got = read_fifo_in_background(fifo)
    assert main(["sweep", str(DEMO), "--cache-mb", "256", "--policy", "lru", "--plot", str(fifo)]) == 0
    t.join(30)
    assert capsys.readouterr().err == ""
    assert len(got) == 1 and got[0].startswith(magic)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    if ext == "png":                          # the same bytes a regular file gets
        assert main(["sweep", str(DEMO), "--cache-mb", "256", "--policy", "lru",
                     "--plot", str(tmp_path / "f.png")]) == 0
        assert got[0] == (tmp_path / "f.png").read_bytes()
        assert got[0].endswith(b"IEND\xaeB`\x82")       # the PNG's last chunk: complete


def test_plot_to_dev_stdout_on_a_pipe(tmp_path):
    """``--plot /dev/stdout`` with standard output a pipe (``| head``): the whole PNG is in the
    stream (after the report, which is printed first and also goes to standard output here)."""
    pytest.importorskip("matplotlib")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.run([sys.executable, "-m", "refsim", "sweep", str(DEMO), "--cache-mb", "256",
                           "--policy", "lru", "--plot", "/dev/stdout"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert b"not seekable" not in proc.stderr
    at = proc.stdout.find(b"\x89PNG\r\n\x1a\n")
    assert at > 0 and proc.stdout[:at].startswith(b"model: ")
    assert proc.stdout.endswith(b"IEND\xaeB`\x82")


@pytest.mark.parametrize("argv", [["replay", str(DEMO), "--cache-mb", "256"],
                                  ["union", str(DEMO), "--cache-mb", "256"]])
def test_a_closed_stdout_is_one_line_not_a_traceback(argv):
    # `refsim ... >&-`: Python starts with sys.stdout None; print() then drops every line and a
    # flush raised AttributeError (a traceback); the command now refuses before it runs
    r = _cli(argv, stdout=None, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1))
    assert r.returncode == 1
    assert r.stderr == (f"refsim {argv[0]}: error: standard output is closed; expected it open "
                        "(redirect it to a file or /dev/null)\n")
