"""What a trace's DataFrame costs against reading the trace: ``read_trace(path)`` and then
``.to_pandas()`` / ``.to_arrow()`` of its rows, timed in one run, as ratios to the read.

    python benchmarks/frames.py [--turns 1,100] [--repeat 5]

The shared qwen trace (``$REFSIM_SHARED/real-traces/bmoe-qwen3-30b-a3b/qwen.route.csv``, one turn
of 44,766 rows; ``$REFSIM_SHARED`` defaults to ``../shared`` beside the repository) is written N
times into a temporary folder with ``turn`` = 0..N-1 (benchmarks/scale.py's ``write_turns``; 100
turns = 4.5 M rows). Each figure is the best of ``--repeat`` runs in this process after one
warm-up (Numba kernels compiled and cached, pandas and pyarrow imported): ``read`` =
``read_trace``, ``to_pandas`` and ``to_arrow`` = the frame of the trace already read (a trace
caches no frame: each call builds it anew). The table is built column by column from the
reader's arrays (refsim.trace.table), so its cost is a few array passes over the rows; the ratio
is what to compare. The 1-minute load average is printed: the machine may be shared.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "benchmarks" / "scale.py")
_scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_scale)


def best(fn, repeat: int) -> float:
    """Best wall seconds of one ``fn()`` call over ``repeat`` calls (the standard library's
    :func:`timeit.repeat`)."""
    return min(timeit.repeat(fn, number=1, repeat=repeat))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", default="1,100", help="turns of the qwen trace per file (default 1,100)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure, best kept (default 5)")
    args = ap.parse_args()
    shared = Path(os.environ.get("REFSIM_SHARED", ROOT.parent / "shared"))
    src = shared / _scale.QWEN
    if not src.exists():
        print(f"no {src} (set REFSIM_SHARED to the shared folder)", file=sys.stderr)
        return 1
    from refsim.trace import read_trace
    print(f"load average (1 min) {os.getloadavg()[0]:.2f}")
    print(f"{'turns':>5}  {'rows':>9}  {'read s':>8}  {'to_pandas s':>11}  {'ratio':>6}  "
          f"{'to_arrow s':>10}  {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(x) for x in args.turns.split(",")]:
            path = Path(tmp) / f"qwen-{n}.route.csv"
            _scale.write_turns(src, path, n)
            trace = read_trace(path)
            trace.to_pandas(), trace.to_arrow()                   # warm-up: imports, kernels
            rows = trace.n_rows
            read = best(lambda: read_trace(path), args.repeat)
            frame = best(trace.to_pandas, args.repeat)        # nothing is cached: built anew
            arrow = best(trace.to_arrow, args.repeat)
            print(f"{n:>5}  {rows:>9}  {read:>8.3f}  {frame:>11.3f}  {frame / read:>6.2f}  "
                  f"{arrow:>10.3f}  {arrow / read:>6.2f}")
            path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
