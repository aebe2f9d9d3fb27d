"""``refsim union --spec-policy`` reads each trace once (a FIFO or a pipe can be read only once):
the defect a new user reported (``union FIFO --spec-policy cost`` hung; ``cat trace | union
/dev/stdin --spec-policy cost`` said the trace was an empty file). Each test runs refsim in a
subprocess with a generous timeout that only turns a hang into a failure; it asserts the output,
never the time."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "traces" / "demo.route.csv"
ARGS = ["--window", "1,2", "--cache-mb", "256", "--spec-policy", "cost"]
HANG = 300          # seconds: a hang fails the test; the run itself takes seconds (a minute on a busy machine)


def refsim(*args, stdin=None):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "refsim", "union", *args], input=stdin,
                          capture_output=True, env=env, timeout=HANG, cwd=REPO)


@pytest.fixture(scope="module")
def from_file():
    done = refsim(str(DEMO), *ARGS)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


def _body(out: str) -> str:
    """The output without its ``trace:`` line (which names the path)."""
    return "\n".join(line for line in out.splitlines() if not line.startswith("trace: "))


def test_a_fifo_with_spec_policy_gives_the_files_output(tmp_path, from_file):
    fifo = tmp_path / "demo.route.csv"
    os.mkfifo(fifo)
    data = DEMO.read_bytes()

    def write():
        with open(fifo, "wb") as out:
            out.write(data)
    t = threading.Thread(target=write, daemon=True)
    t.start()
    done = refsim(str(fifo), *ARGS)
    assert done.returncode == 0, done.stderr.decode()
    assert "draft policies" in from_file and "cost" in from_file
    assert _body(done.stdout.decode()) == _body(from_file)


def test_stdin_with_spec_policy_gives_the_files_output(from_file):
    done = refsim("/dev/stdin", *ARGS, stdin=DEMO.read_bytes())
    assert done.returncode == 0, done.stderr.decode()
    assert _body(done.stdout.decode()) == _body(from_file)
