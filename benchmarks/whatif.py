"""What ``refsim whatif``'s pricing costs against the union replays it needs: a grid of 15 budgets
x 6 configurations on the shared Qwen3-30B trace, timed in one run, as a ratio to the replays.

    python benchmarks/whatif.py [--repeat 3] [--boot 200]

The trace is ``$REFSIM_SHARED/real-traces/bmoe-qwen3-30b-a3b/qwen.route.csv`` (``$REFSIM_SHARED``
defaults to ``../shared`` beside the repository). ``replays`` = one
:func:`refsim.studies.union.union_study` per budget at the widths the configurations need (1, 3,
4); ``grid`` = those replays plus :func:`refsim.timing.verdict.price` of each configuration at each
budget (bands included: 9 eps points x 99 noise points, the memory hull). The device is a toy
with the shape of a fitted one (pricing cost does not depend on its values); ``--boot N`` gives
it N bootstrap refits, as ``timing fit --boot N`` stores (each one more device priced per
configuration; default 0, the issue's figure). Each figure is the
best of ``--repeat`` runs after one warm-up (Numba kernels compiled). The issue's target: the
grid in at most 10 s and at most 3x the replays. The 1-minute load average is printed: the
machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUDGETS = [1000.0 + 500.0 * i for i in range(15)]
SPEC = ("off,ngram:d=2:m=2:acceptance=0.5:coverage=0.2,ngram:d=3:m=3:acceptance=0.442:"
        "coverage=0.15,mtp:d=2:acceptance=0.85,mtp:d=3:acceptance=0.824,"
        "ngram:d=3:m=2:acceptance=0.4:coverage=0.3")


def best(fn, repeat: int) -> float:
    """Best wall seconds of one ``fn()`` call over ``repeat`` calls (the standard library's
    :func:`timeit.repeat`)."""
    return min(timeit.repeat(fn, number=1, repeat=repeat))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure, best kept (default 3)")
    ap.add_argument("--boot", type=int, default=0,
                    help="bootstrap refits carried by the device (default 0)")
    args = ap.parse_args()
    shared = Path(os.environ.get("REFSIM_SHARED", ROOT.parent / "shared"))
    path = shared / "real-traces" / "bmoe-qwen3-30b-a3b" / "qwen.route.csv"
    if not path.exists():
        print(f"no shared trace at {path}; set REFSIM_SHARED", file=sys.stderr)
        return 1
    from refsim.cache import ExpertCache
    from refsim.studies.union import union_study
    from refsim.timing import DeviceModel, Param
    from refsim.timing.model import PARAMS
    from refsim.timing.terms import Term, exact
    from refsim.timing.verdict import Device, parse_spec_list, price, reads_from_union
    from refsim.trace import read_trace
    trace = read_trace(str(path))
    cfgs = parse_spec_list(SPEC)
    assert len(cfgs) == 6
    widths = sorted({1} | {c.width for c in cfgs})
    values = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0,
              "s1": 0.8, "h": 0.1, "tail": 1.05}
    dev = DeviceModel(params={k: Param(values[k]) for k in PARAMS}, compute={"m": Param(120.0)},
                      serial_runs=2, overlap_runs=2)
    reps = tuple(DeviceModel(params={k: Param(values[k] * (1.0 + 0.01 * ((i % 7) - 3)))
                                     for k in PARAMS},
                             compute={"m": Param(120.0 + (i % 5))}, serial_runs=2, overlap_runs=2)
                 for i in range(args.boot))
    dv = Device(dev, "m", 2, False, Term("eps", 0.38, 0.0, 1.2, "", "assumed", "bench"),
                sigma=0.065, replicates=reps,
                head=exact("head_ms", 20.0, "ms/token", "assumed", "bench"))

    def replays():
        return [union_study(trace, widths, ExpertCache.mib_to_bytes(b)) for b in BUDGETS]

    def grid():
        out = []
        for b, rows in zip(BUDGETS, replays()):
            reads = reads_from_union(rows)
            out += [price(dv, c, reads, budget_mib=b) for c in cfgs]
        return out

    grid()                                   # warm-up: kernels compiled, caches filled
    t_rep = best(replays, args.repeat)
    t_grid = best(grid, args.repeat)
    print(f"load average (1 min): {os.getloadavg()[0]:.2f}")
    print(f"{len(BUDGETS)} budgets x {len(cfgs)} configurations, widths {widths}, "
          f"{len(reps)} bootstrap refits, {trace.path}")
    print(f"replays: {t_rep:.2f} s; grid (replays + pricing): {t_grid:.2f} s; ratio "
          f"{t_grid / t_rep:.2f}x (target: grid <= 10 s, ratio <= 3x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
