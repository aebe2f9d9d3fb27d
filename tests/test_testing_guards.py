"""The mutation tests' hang guards (refsim.testing.mutate) limit CPU time, not wall time: a reader
spinning on a damaged file fails, a loaded machine cannot fail a correct reader."""

from __future__ import annotations

import signal
import time

import pytest

from refsim.testing.mutate import cpu_time_limit, run_guarded


def test_cpu_time_limit_stops_a_spin():
    old = signal.getsignal(signal.SIGPROF)
    with pytest.raises(TimeoutError, match=r"^spin ran over 0.05 s of CPU time \(a hang\)$"):
        with cpu_time_limit(0.05, "spin"):
            t0 = time.monotonic()
            while time.monotonic() - t0 < 60.0:   # ends only through the guard (or fails the test)
                pass
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGPROF) is old


def test_cpu_time_limit_ignores_waiting():
    # 0.3 s of wall time at almost no CPU: a wall-clock guard of 0.05 s would have fired
    with cpu_time_limit(0.05, "sleep"):
        time.sleep(0.3)
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)


def test_run_guarded_ends_a_spinning_child_by_its_cpu_limit():
    out = run_guarded("print('start', flush=True)\nwhile True:\n    pass\n", timeout=1.0)
    assert out.stdout == "start\n"
    assert out.returncode in (-signal.SIGXCPU, -signal.SIGKILL), out.returncode


def test_run_guarded_child_that_finishes():
    out = run_guarded("print(6 * 7)", timeout=5.0)
    assert (out.returncode, out.stdout) == (0, "42\n")
