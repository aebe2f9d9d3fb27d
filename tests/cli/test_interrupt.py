"""Ctrl-C at any moment -- imports included -- exits 130 with one line (issue 12 D4)."""

import importlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from refsim.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_ctrl_c_while_the_subcommands_are_imported(monkeypatch, capsys):
    real = importlib.import_module

    def interrupted_import(name, *a, **kw):
        if name == "refsim.cli.run":
            raise KeyboardInterrupt
        return real(name, *a, **kw)
    monkeypatch.setattr(importlib, "import_module", interrupted_import)
    assert main(["run", "-n", "1"]) == 130
    out, err = capsys.readouterr()
    assert out == "" and err == "refsim: interrupted (outputs not completed were not written)\n"


def test_ctrl_c_while_a_subcommand_runs(monkeypatch, capsys):
    import refsim.cli.replay as replay

    def stop(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(replay, "run", stop)
    monkeypatch.setattr(replay, "read_trace", stop)
    assert main(["replay", "t.csv", "--cache-mb", "1"]) == 130
    assert capsys.readouterr().err == \
        "refsim replay: interrupted (outputs not completed were not written)\n"


def _wait_for(pred, proc, timeout=120.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if pred():
            return True
        time.sleep(0.002)
    return False


def _numpy_loaded(pid):
    try:
        return "_multiarray_umath" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("moment", ["importing numpy", "building the built-in model"])
@pytest.mark.parametrize("entry", [["-m", "refsim.cli"],
                                   ["-c", "import sys; from refsim.cli import main; sys.exit(main())"]])
def test_sigint_to_a_real_process_exits_130_with_one_line(tmp_path, moment, entry):
    """``-m refsim.cli`` and what the console script runs (``from refsim.cli import main;
    sys.exit(main())``), sent SIGINT while numpy is being imported (its extension just mapped)
    and while the built-in model is being written."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "REFSIM_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, *entry, "run", "-n", "200"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if moment == "importing numpy":
            ready = _wait_for(lambda: _numpy_loaded(proc.pid), proc)
        else:
            cache = tmp_path / "cache"
            ready = _wait_for(lambda: cache.is_dir() and any(cache.iterdir()), proc)
        assert ready, "the child ended before the moment to interrupt it"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.endswith(": interrupted (outputs not completed were not written)\n")
    assert not [p for p in (tmp_path / "cache").glob(".refsim-*")]   # no temporary left
