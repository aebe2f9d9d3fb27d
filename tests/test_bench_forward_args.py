"""benchmarks/forward.py refuses bad arguments up front with one argparse line (exit 2), before it measures
the read bandwidth (a 1 GiB array) or writes a 2 GB model: found by a fresh-user check (``--threads 0`` ended
in a NumPy traceback after allocating 1 GiB)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "forward.py")


@pytest.mark.parametrize("argv,message", [
    (["--threads", "0"], "--threads: 0 is not in 1..256"),
    (["--rounds", "0"], "--rounds: 0 is not in 1..1000"),
    (["--n-expert", "4"], "--n-expert: 4 is fewer than the 8 experts each token uses"),
    (["--n-expert", "100000"], "--n-expert: 100000 is not in 1..512"),
    (["--numerics", "exact,fast"], "--numerics: 'fast' (choose exact, ggml or both, comma-separated)"),
    (["--numerics", ","], "--numerics: empty list"),
    (["--tokens", "0"], "--tokens: 0 is not in 1..503 (the context is 512 positions)"),
    (["--tokens", "504"], "--tokens: 504 is not in 1..503"),
    (["--quant", "NOPE"], "--quant: unknown NOPE (choose from Q4_K_M, MXFP4, MXFP4-pure, all, F32,"),
])
def test_bad_arguments_are_one_line_errors(argv, message):
    p = subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("forward.py: error: ") and message in last, last
    assert p.stdout == ""   # nothing measured or written
    if argv[0] == "--quant":
        assert last.count("MXFP4,") == 1   # the mix, not again as a type
