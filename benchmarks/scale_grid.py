"""The sweep grid serially, on local processes and on a Dask LocalCluster: wall seconds of the
whole command (start-up, trace reads and the pool's start included) and whether the outputs are
the same bytes.

    python benchmarks/scale_grid.py [--budgets 500:8000:500] [--policies lru,s3fifo,arc,layer] [--workers 2]

Traces: the shared qwen trace (``$REFSIM_SHARED/real-traces/bmoe-qwen3-30b-a3b/qwen.route.csv``,
44,766 rows) when present, and the repository's ``traces/demo.route.csv``. Each executor runs
``refsim sweep TRACES --cache-mb BUDGETS --policy POLICIES --csv OUT`` in a fresh process, once
after a warm-up run (Numba kernels loaded from the on-disk cache). The machine may be shared: the
1-minute load average is printed with every line, and only figures of one run compare.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QWEN = "real-traces/bmoe-qwen3-30b-a3b/qwen.route.csv"


def run(argv: list[str], csv: Path) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "refsim.cli"] + argv + ["--csv", str(csv)],
                         env=env, capture_output=True, check=True).stdout
    wall = time.perf_counter() - t0
    digest = hashlib.sha256(out + csv.read_bytes()).hexdigest()[:12]
    return wall, digest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="500:8000:500")
    ap.add_argument("--policies", default="lru,s3fifo,arc,layer")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shared", default=os.environ.get("REFSIM_SHARED", str(ROOT.parent / "shared")))
    a = ap.parse_args()
    traces = [str(p) for p in (Path(a.shared) / QWEN, ROOT / "traces" / "demo.route.csv") if p.exists()]
    base = ["sweep", *traces, "--cache-mb", a.budgets, "--policy", a.policies]
    n_b = len(__import__("refsim.studies.sweep", fromlist=["x"]).parse_budgets_mib(a.budgets))
    cells = len(traces) * n_b * len(a.policies.split(","))
    print(f"grid: {len(traces)} traces x {n_b} budgets x {len(a.policies.split(','))} policies = "
          f"{cells} cells; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        run(base, Path(tmp) / "warm.csv")
        for name, extra in (("serial", []), (f"{a.workers} processes", ["--workers", str(a.workers)]),
                            (f"dask local {a.workers}", ["--dask-scheduler", "local", "--workers",
                                                         str(a.workers)])):
            try:
                wall, digest = run(base + extra, Path(tmp) / "out.csv")
            except subprocess.CalledProcessError as exc:
                print(f"{name:>16}: failed: {exc.stderr.decode().strip().splitlines()[-1]}")
                continue
            print(f"{name:>16}: {wall:7.2f} s wall, output sha256 {digest}, "
                  f"load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
