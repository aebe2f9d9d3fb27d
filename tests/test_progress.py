"""Progress bars (issue 17, item 3): a tqdm bar on stderr when stderr is a terminal (a pty here),
none when it is piped or with --quiet or --json, and standard output byte for byte the same in
every case."""

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

from refsim import progress

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "traces" / "demo.route.csv"
SWEEP = ["sweep", str(DEMO), "--cache-mb", "100:2000:100", "--policy", "lru,fifo,clock"]
STREAM = ["replay", str(DEMO), "--cache-mb", "256", "--stream"]


def run_cli(argv, tty: bool):
    """(stdout bytes, stderr bytes) of ``python -m refsim.cli ARGV`` with stderr a pty of 100
    columns (``tty``; tqdm draws nothing on a terminal of 0 columns) or a pipe; bars shown at
    once (REFSIM_PROGRESS_DELAY=0)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), REFSIM_PROGRESS_DELAY="0", COLUMNS="100")
    cmd = [sys.executable, "-m", "refsim.cli", *argv]
    if not tty:
        res = subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT, timeout=600)
        assert res.returncode == 0, res.stderr
        return res.stdout, res.stderr
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    got = []

    def drain():
        while True:
            try:
                block = os.read(master, 65536)
            except OSError:                 # EIO: every writer of the pty has closed it
                return
            if not block:
                return
            got.append(block)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=ROOT)
        os.close(slave)
        out = proc.stdout.read()
        assert proc.wait(timeout=600) == 0, b"".join(got)
        reader.join(timeout=30)
    finally:
        os.close(master)
    return out, b"".join(got)


@pytest.mark.slow
def test_a_sweep_shows_a_bar_on_a_terminal_and_none_when_piped_or_quiet():
    out_tty, err_tty = run_cli(SWEEP, tty=True)
    out_pipe, err_pipe = run_cli(SWEEP, tty=False)
    out_quiet, err_quiet = run_cli([*SWEEP, "--quiet"], tty=True)
    # one bar over the grid's cells: serially one cell per policy (its 20 budgets in one task)
    assert b"sweep" in err_tty and b"/3 [" in err_tty and b"cell" in err_tty
    assert err_pipe == b"" and err_quiet == b""
    assert out_tty == out_pipe == out_quiet
    assert b"2000  clock" in out_tty                  # the last row of the table


@pytest.mark.slow
def test_a_streamed_replay_shows_bytes_on_a_terminal_and_nothing_with_json():
    out_tty, err_tty = run_cli(STREAM, tty=True)
    out_pipe, err_pipe = run_cli(STREAM, tty=False)
    assert b"streaming trace" in err_tty and b"/77.6k [" in err_tty and err_pipe == b""   # 79488 B
    assert out_tty == out_pipe
    json_tty, jerr_tty = run_cli([*STREAM, "--json"], tty=True)
    json_pipe, _ = run_cli([*STREAM, "--json"], tty=False)
    assert jerr_tty == b"" and json_tty == json_pipe and json_tty.startswith(b"{")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_active_needs_a_terminal_and_permission(monkeypatch):
    monkeypatch.setattr(progress, "_enabled", True)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not progress.active()
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert progress.active()
    progress.configure(False)
    assert not progress.active()
    progress.configure(True)
    assert progress.active()


def test_a_silent_bar_passes_the_items_through_and_prints_nothing(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert list(progress.bar(range(4), desc="x")) == [0, 1, 2, 3]
    with progress.bar(total=10, unit="B") as b:
        b.update(5)
        b.set_description_str("y")
    assert sys.stderr.getvalue() == ""


def test_a_bar_on_a_terminal_is_tqdm_and_is_erased_at_the_end(monkeypatch):
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setattr(progress, "_enabled", True)
    monkeypatch.setattr(progress, "DELAY_S", 0)
    assert list(progress.bar(range(3), desc="work", unit="cell")) == [0, 1, 2]
    text = term.getvalue()
    assert "work" in text and "/3 [" in text and "cell/s" in text
    assert text.endswith("\r")                 # leave=False: the line is cleared
