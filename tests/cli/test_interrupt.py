"""Ctrl-C at any moment -- imports included -- exits 130 with one line (issue 12 D4, issue 26 B
and C1).

The real-process tests hold the child at a named moment and interrupt it there, whatever the
machine's speed and however pytest was started:

- the child's SIGINT disposition is set explicitly (``preexec_fn``): a shell's background job
  starts its children with SIGINT ignored, and a child that inherits that never sees Ctrl-C;
- the moment is a hold, not a delay: a ``sitecustomize`` module on the child's path (read by
  Python at start-up, whatever the entry point) stops the child at the moment named by
  ``REFSIM_TEST_HOLD``, writes ``ready`` to a pipe and reads one byte from its stdin; the test
  waits for ``ready``, sends SIGINT, then writes the byte. Moments: ``import:NAME`` (inside the
  import of NAME, before it is loaded) and ``call:MODULE.FUNC`` (after FUNC returned).
"""

import importlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from refsim.cli import main
from refsim.interrupt import DeferredInterrupt

REPO = Path(__file__).resolve().parents[2]
LINE = "interrupted (outputs not completed were not written)\n"

HOLD_SITECUSTOMIZE = textwrap.dedent('''
    """Test hold (tests/cli/test_interrupt.py): stop at REFSIM_TEST_HOLD, say ready, wait."""
    import os
    import sys
    from importlib.machinery import PathFinder

    _HOLD = os.environ.get("REFSIM_TEST_HOLD", "")
    _KIND, _, _NAME = _HOLD.partition(":")


    _HELD = []


    def _hold():
        if _HELD:
            return               # once only
        _HELD.append(True)
        fd = int(os.environ["REFSIM_TEST_READY_FD"])
        os.write(fd, b"ready\\n")
        os.close(fd)
        os.read(0, 1)            # the test sends SIGINT, then this byte


    class _Finder:
        def find_spec(self, fullname, path=None, target=None):
            if _KIND == "import" and fullname == _NAME:
                sys.meta_path.remove(self)
                _hold()
            elif _KIND == "call" and fullname == _NAME.rpartition(".")[0]:
                sys.meta_path.remove(self)
                spec = PathFinder.find_spec(fullname, path)
                real_exec = spec.loader.exec_module
                func = _NAME.rpartition(".")[2]

                def exec_module(module):
                    real_exec(module)
                    real = getattr(module, func)

                    def held(*args, **kwargs):
                        out = real(*args, **kwargs)
                        _hold()
                        return out
                    setattr(module, func, held)
                spec.loader.exec_module = exec_module
                return spec
            return None


    if _KIND:
        sys.meta_path.insert(0, _Finder())
''')

ENTRIES = {
    "python -m refsim": ["-m", "refsim"],
    "python -m refsim.cli": ["-m", "refsim.cli"],
    # what the console script runs
    "refsim": ["-c", "import sys; from refsim.cli import main; sys.exit(main())"],
}


def run_held(tmp_path, entry, hold, argv, sigint=signal.SIG_DFL, group=False):
    """Start ``refsim argv`` by ``entry`` (a name of :data:`ENTRIES`, or a list: a script and its
    first arguments) with SIGINT disposition ``sigint``, wait until it
    reaches ``hold``, send SIGINT (with ``group``, to its new process group, as a terminal
    does), release it; returns (returncode, stdout, stderr)."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HOLD_SITECUSTOMIZE)
    ready_r, ready_w = os.pipe()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(site)]),
           "REFSIM_CACHE": str(tmp_path / "cache"), "REFSIM_TEST_HOLD": hold,
           "REFSIM_TEST_READY_FD": str(ready_w)}
    start = ENTRIES[entry] if isinstance(entry, str) else entry     # or a script's argv
    proc = subprocess.Popen([sys.executable, *start, *argv], env=env, cwd=tmp_path,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, pass_fds=(ready_w,), start_new_session=group,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))
    os.close(ready_w)
    try:
        with os.fdopen(ready_r, "rb") as ready:
            said = ready.readline()          # b"" when the child ended without reaching it
        if said == b"ready\n":
            if group:
                os.killpg(proc.pid, signal.SIGINT)
            else:
                proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(input=b"g", timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL) if group else proc.kill()
            proc.communicate()
    assert said == b"ready\n", f"the child never reached {hold}: {err.decode()[-2000:]}"
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture(autouse=True)
def python_sigint_handler():
    """Python's own SIGINT handler for each test, whatever pytest inherited (a background job
    starts it with SIGINT ignored); restored after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_the_subcommands_are_imported(monkeypatch, capsys):
    real = importlib.import_module

    def interrupted_import(name, *a, **kw):
        if name == "refsim.cli.run":
            raise KeyboardInterrupt
        return real(name, *a, **kw)
    monkeypatch.setattr(importlib, "import_module", interrupted_import)
    assert main(["run", "-n", "1"]) == 130
    out, err = capsys.readouterr()
    assert out == "" and err == "refsim: " + LINE


def test_ctrl_c_while_a_subcommand_runs(monkeypatch, capsys):
    import refsim.cli.replay as replay

    def stop(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(replay, "run", stop)
    monkeypatch.setattr(replay, "read_trace", stop)
    assert main(["replay", "t.csv", "--cache-mb", "1"]) == 130
    assert capsys.readouterr().err == "refsim replay: " + LINE


def test_a_ctrl_c_inside_an_import_is_raised_after_it(tmp_path, monkeypatch):
    """SIGINT while a module is executed: the module runs to its end (a C extension's
    initialisation is never cut), then KeyboardInterrupt is raised outside the import."""
    (tmp_path / "refsim_test_sigint_mod.py").write_text(
        "import signal\nsignal.raise_signal(signal.SIGINT)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "refsim_test_sigint_mod", raising=False)
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with DeferredInterrupt(sys._getframe()):
            import refsim_test_sigint_mod
            reached.append(refsim_test_sigint_mod.DONE)
            for _ in range(1000):       # the deferred Ctrl-C's first timer tick ends this
                time.sleep(0.01)
            reached.append("not interrupted")
    assert reached == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler     # restored
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_ctrl_c_outside_imports_is_raised_at_once():
    with pytest.raises(KeyboardInterrupt):
        with DeferredInterrupt(sys._getframe()):
            signal.raise_signal(signal.SIGINT)
            pytest.fail("not interrupted")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_sigint_stays_ignored():
    """A background job's SIGINT is ignored: refsim installs nothing and ignores it too."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with DeferredInterrupt(sys._getframe()):
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


# The moments: inside an import that a C extension's initialisation makes (numpy's
# _multiarray_umath imports datetime by PyCapsule_Import, numba's _dispatcher imports
# numba._devicearray): a KeyboardInterrupt there became numpy's 50-line "bad install" ImportError
# or numba's "failed to import", exit 1 (issue 26 C1); a plain import while the parser is built;
# and a temporary output file just created while the command runs.
MOMENTS = ["import:datetime", "import:numba._devicearray", "import:refsim.cli.run",
           "call:refsim.fileio._new_temp"]


@pytest.mark.skipif(not hasattr(os, "pipe") or sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("hold", MOMENTS)
@pytest.mark.parametrize("entry", list(ENTRIES))
def test_sigint_to_a_real_process_exits_130_with_one_line(tmp_path, entry, hold):
    code, out, err = run_held(tmp_path, entry, hold, ["run", "-n", "3"])
    assert code == 130, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.endswith(": " + LINE)
    assert out == ""                                  # it stopped there, not at the end
    assert not list(tmp_path.rglob(".refsim-*"))      # no temporary left


def test_a_background_job_ignores_ctrl_c(tmp_path):
    """Started with SIGINT ignored (what ``cmd &`` does), the command runs to its end."""
    code, out, err = run_held(tmp_path, "refsim", "call:refsim.fileio._new_temp",
                              ["run", "-n", "3"], sigint=signal.SIG_IGN)
    assert (code, err) == (0, "")
    assert out.startswith("generation:") or "tokens" in out


def test_ctrl_c_to_the_process_group_under_dask(tmp_path):
    """A terminal's Ctrl-C goes to the whole process group, Dask's LocalCluster workers included:
    they printed KeyboardInterrupt tracebacks (and the client could wait on dead workers); they
    now never see it, and refsim prints its one line and closes the cluster (issue 26 C1)."""
    pytest.importorskip("distributed")
    demo = REPO / "traces" / "demo.route.csv"
    code, out, err = run_held(tmp_path, "refsim", "call:distributed.LocalCluster",
                              ["sweep", str(demo), "--dask-scheduler", "local", "--workers", "2",
                               "--cache-mb", "100,200"], group=True)
    assert code == 130, err
    assert err == "refsim sweep: " + LINE
    assert out == ""


# --- the tools/ scripts: the CLI's Ctrl-C (D14; refsim.interrupt.run_interruptible) -------------

ARGPARSE_TOOLS = sorted(p.name for p in (REPO / "tools").glob("*.py")
                        if "ArgumentParser(" in p.read_text())


def test_whatif_validate_ctrl_c_inside_an_import_is_one_line(tmp_path):
    """``timeout -s INT 1 python3 tools/whatif_validate.py`` printed a traceback: held inside the
    import of its inputs' module, the Ctrl-C lands after the import and ends it with one line."""
    code, out, err = run_held(tmp_path, [str(REPO / "tools" / "whatif_validate.py")],
                              "import:refsim.testing.validation_inputs", [])
    assert (code, out, err) == (130, "", "whatif_validate.py: " + LINE)


@pytest.mark.parametrize("tool", ARGPARSE_TOOLS)
def test_every_tool_ctrl_c_is_one_line(tmp_path, tool):
    """Held while its argument parser is built (inside main, whatever the tool imports first):
    at argparse's first message lookup (``argparse._``, gettext)."""
    code, out, err = run_held(tmp_path, [str(REPO / "tools" / tool)], "call:argparse._", [])
    assert (code, out, err) == (130, "", f"{tool}: " + LINE)


def test_run_interruptible_returns_main_s_code_and_names_the_script(capsys, monkeypatch):
    from refsim.interrupt import INTERRUPTED_EXIT, run_interruptible
    assert run_interruptible(lambda a, b: a + b, 2, 3) == 5
    monkeypatch.setattr(sys, "argv", ["/x/tools/some_tool.py"])

    def stop():
        raise KeyboardInterrupt
    assert run_interruptible(stop) == INTERRUPTED_EXIT == 130
    assert capsys.readouterr().err == "some_tool.py: " + LINE
    assert run_interruptible(stop, name="other") == 130
    assert capsys.readouterr().err == "other: " + LINE


def test_run_interruptible_gives_a_refsim_error_the_cli_s_line_and_code(capsys, monkeypatch):
    """A tool's RefsimError is the CLI's one line (``NAME: error: MESSAGE``), exit 1; a
    UsageError exits 2 (refsim.cli._run's codes); anything else is not swallowed."""
    from refsim.errors import ConfigError, TraceFormatError, UsageError
    from refsim.interrupt import run_interruptible
    monkeypatch.setattr(sys, "argv", ["/x/tools/some_tool.py"])

    def fail(exc):
        raise exc
    assert run_interruptible(fail, TraceFormatError("t.csv: line 3: expected 5 fields")) == 1
    assert capsys.readouterr().err == "some_tool.py: error: t.csv: line 3: expected 5 fields\n"
    assert run_interruptible(fail, ConfigError("bad"), name="other") == 1
    assert capsys.readouterr().err == "other: error: bad\n"
    assert run_interruptible(fail, UsageError("--x: expected y")) == 2
    assert capsys.readouterr().err == "some_tool.py: error: --x: expected y\n"
    with pytest.raises(ZeroDivisionError):
        run_interruptible(lambda: 1 / 0)
