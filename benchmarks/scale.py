"""Trace ingest at scale: refsim's read + replay of the qwen trace repeated as 1, 10 and 100 turns
(and a streamed 1000-turn replay), each against pyarrow's parse of the same file in the same run.

    python benchmarks/scale.py [--turns 1,10,100] [--stream-turns 1000] [--budget-mib 4000]
                               [--repeat 3]

The shared qwen trace (/work/shared/real-traces/bmoe-qwen3-30b-a3b/qwen.route.csv, one turn of
44,766 rows) is written N times into a temporary folder with ``turn`` = 0..N-1 (never kept).
Each measurement runs in fresh child processes, ``--repeat`` times (best and median printed; the
peak RSS, ``ru_maxrss`` in MiB = 2**20 bytes, is the largest of the runs), after one warm-up
child (the Numba kernels then come from the on-disk cache):

- ``pyarrow``: ``pyarrow.csv.read_csv`` of the file (the rows; ``#`` preamble lines skipped via
  ``skip_rows``; its own threads, as by default), the baseline; its import is not timed;
  ``pyarrow cold``: the same with ``import pyarrow.csv`` timed (the cold refsim lines' peer);
- ``ingest``: ``refsim.trace.read_trace`` (parse + every validation rule + the events);
- ``ingest+replay``: ``read_trace`` then ``replay_trace`` at ``--budget-mib`` (what
  ``refsim replay`` does);
- ``stream``: ``iter_trace_turns`` + ``replay_turns`` (``refsim replay --stream``);

each ``cold`` (the clock starts after the modules are imported, as pyarrow's does, so Numba's
import and the loading of the cached kernels are timed) and ``warm`` (the child reads and
replays a one-turn trace first, outside the clock: the rate of a process that has its kernels,
such as a sweep over many traces). On the largest file the whole ``refsim replay`` command is
timed too, from the shell (interpreter start and every import included).

Start-up (first, ``--startup-runs N``, best of N, 0 skips; ``--startup-only`` stops after it):
wall seconds of ``python -c pass`` (the bare interpreter; ``import numpy`` beside it, the floor of
any command that reads a trace), ``python -m refsim.cli --version`` and
``python -m refsim.cli replay traces/demo.route.csv --cache-mb 256`` (the README's main job, on
the reference path: no Numba), and the same replay with the compiled kernels (loaded from the
Numba cache), each as overhead over the bare interpreter (the issue's target: <= 0.3 s), with the
children's CPU seconds (user + system) beside it, which the machine's load disturbs less. The
children may write bytecode (``PYTHONDONTWRITEBYTECODE`` is removed from their environment), so
after the first round refsim's modules load from ``.pyc`` files, as from an installed package.

``--crossover 1,4,16``: ``refsim replay`` of the demo trace written 1, 4, 16 times, reference path
against compiled kernels (the measurement behind ``refsim.jit.REFERENCE_MAX_BYTES``).

Printed per file: rows, file MiB, wall seconds, rows/s, the row-rate ratio to pyarrow's (>= 0.5
is the issue's target), peak RSS and RSS / file size (<= 4 is the target); then the cost per
the slope of seconds against rows between consecutive files (equal slopes = linear). The machine is shared: the 1-minute load average
is printed with every line, and only ratios within one run compare.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QWEN = "real-traces/bmoe-qwen3-30b-a3b/qwen.route.csv"

CHILD = r"""
import json, resource, sys, time
mode, path, budget, warm = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if mode.startswith("pyarrow"):
    t_import = time.perf_counter()
    import pyarrow.csv as pc
    with open(path, "rb") as fh:
        skip = 0
        for line in fh:
            if not line.startswith(b"#"):
                break
            skip += 1
    t0 = t_import if mode == "pyarrow cold" else time.perf_counter()
    rows = pc.read_csv(path, read_options=pc.ReadOptions(skip_rows=skip)).num_rows
else:
    from refsim.trace import read_trace, iter_trace_turns
    from refsim.studies.replay import replay_trace, replay_turns
    if warm:            # Numba imported and every kernel loaded before the clock starts
        replay_trace(read_trace(warm), budget)
        stream, turns = iter_trace_turns(warm)
        replay_turns(stream.header, turns, budget, keep_records=False)
    t0 = time.perf_counter()
    if mode == "stream":
        stream, turns = iter_trace_turns(path)
        replay_turns(stream.header, turns, budget, keep_records=False)
        rows = stream.n_rows
    else:
        tr = read_trace(path)
        rows = tr.n_rows
        if mode == "ingest+replay":
            replay_trace(tr, budget)
dt = time.perf_counter() - t0
print(json.dumps({"rows": rows, "s": dt,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


DEMO = ROOT / "traces" / "demo.route.csv"
COMPILED = ("import sys, refsim.jit; refsim.jit.REFERENCE_MAX_BYTES = -1; "
            "from refsim.cli import main; sys.exit(main())")


def _time_child(cmd: list, env: dict) -> tuple[float, float]:
    """(wall s, CPU s: user + system) of one run of ``cmd`` in a child process from the repository."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def startup(runs: int) -> None:
    """Best-of-``runs`` wall (and CPU) seconds of the start-up commands against the bare
    interpreter, run in turn so that a change of load touches them alike."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # as installed: modules load from their .pyc files
    replay = ["replay", str(DEMO), "--cache-mb", "256"]
    cmds = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "  (import numpy)": [sys.executable, "-c", "import numpy"],
        "refsim --version": [sys.executable, "-m", "refsim.cli", "--version"],
        "refsim replay demo": [sys.executable, "-m", "refsim.cli", *replay],
        "  (compiled kernels)": [sys.executable, "-c", COMPILED, *replay],
    }
    best = {name: (float("inf"), float("inf")) for name in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            wall, cpu = _time_child(cmd, env)
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    base_wall, base_cpu = best["python -c pass"]
    print(f"start-up, best of {runs} (load average {os.getloadavg()[0]:.2f}); overhead = the "
          f"command's seconds - the bare interpreter's (target <= 0.30 s)")
    print(f"  {'':22s} {'wall s':>7s} {'overhead':>8s} {'CPU s':>7s} {'overhead':>8s}")
    for name, (wall, cpu) in best.items():
        print(f"  {name:22s} {wall:7.3f} {wall - base_wall:8.3f} {cpu:7.3f} {cpu - base_cpu:8.3f}")


def crossover(turns: list[int], runs: int = 3) -> None:
    """Best-of-``runs`` seconds of ``refsim replay`` on the demo trace written N times, on the
    reference path and with the compiled kernels: where the two meet sets
    ``refsim.jit.REFERENCE_MAX_BYTES`` (docs/cli.md, "Start-up and progress")."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    reference = ("import sys, refsim.jit; refsim.jit.REFERENCE_MAX_BYTES = 1 << 62; "
                 "from refsim.cli import main; sys.exit(main())")

    def best(cmd):
        out = (float("inf"), float("inf"))
        for _ in range(runs):
            wall, cpu = _time_child(cmd, env)
            out = (min(out[0], wall), min(out[1], cpu))
        return out

    print(f"reference path against compiled kernels, best of {runs} (wall s / CPU s)")
    with tempfile.TemporaryDirectory(prefix="refsim-crossover-") as tmp:
        for n in turns:
            p = Path(tmp) / f"demo-{n}.route.csv"
            write_turns(DEMO, p, n)
            argv = ["replay", str(p), "--cache-mb", "256"]
            ref = best([sys.executable, "-c", reference, *argv])
            nb = best([sys.executable, "-c", COMPILED, *argv])
            print(f"  {n:3d} turn(s), {p.stat().st_size / 2**10:7.0f} KiB: reference "
                  f"{ref[0]:6.2f} / {ref[1]:5.2f}, compiled {nb[0]:6.2f} / {nb[1]:5.2f}  "
                  f"(load {os.getloadavg()[0]:.2f})")


def write_turns(src: Path, dst: Path, turns: int) -> None:
    """``src`` (a one-turn trace, turn 0) written ``turns`` times as turns 0..turns-1."""
    data = src.read_bytes()
    j = data.index(b"\n", data.index(b"\nturn,") + 1) + 1
    head, body = data[:j], data[j:]
    assert body.startswith(b"0,")
    with open(dst, "wb") as fh:
        fh.write(head)
        for t in range(turns):
            tb = str(t).encode()
            fh.write(tb + body[1:].replace(b"\n0,", b"\n" + tb + b","))


def measure(mode: str, path: Path, budget: int, warm: Path | None = None,
            repeat: int = 1) -> dict:
    """``mode`` on ``path`` in a fresh child, ``repeat`` times: the best (least seconds) run's
    figures, the median seconds beside them and the largest peak RSS of the runs. With ``warm``
    (a small trace) the child reads and replays it first, outside the clock, so Numba's import
    and the kernels' loading are not timed."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", CHILD, mode, str(path), str(budget),
                              str(warm or "")], check=True, capture_output=True, text=True,
                             env=env).stdout
        res = json.loads(out.splitlines()[-1])
        res["load"] = os.getloadavg()[0]
        runs.append(res)
    best = min(runs, key=lambda r: r["s"])
    best["median"] = statistics.median(r["s"] for r in runs)
    best["rss"] = max(r["rss"] for r in runs)
    return best


def command(argv: list[str], repeat: int) -> tuple[float, float]:
    """Best and median wall seconds of ``refsim ARGV`` in a fresh process (the interpreter's start
    and every import included), ``repeat`` runs."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    walls = [_time_child([sys.executable, "-m", "refsim.cli", *argv], env)[0] for _ in range(repeat)]
    return min(walls), statistics.median(walls)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", default="1,10,100")
    ap.add_argument("--stream-turns", type=int, default=1000,
                    help="turns of the streamed replay (0: skip)")
    ap.add_argument("--budget-mib", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=3, help="fresh children per measurement (best "
                    "and median printed)")
    ap.add_argument("--shared", default=os.environ.get("REFSIM_SHARED", "/work/shared"))
    ap.add_argument("--startup-runs", type=int, default=7,
                    help="best of N for the start-up section (0: skip it)")
    ap.add_argument("--startup-only", action="store_true",
                    help="stop after the start-up (and --crossover) sections")
    ap.add_argument("--crossover", default="",
                    help="turns of the demo trace for the reference-against-compiled section, "
                         "e.g. 1,4,16 (default: skip)")
    a = ap.parse_args()
    if a.crossover:
        crossover([int(x) for x in a.crossover.split(",")])
    if a.startup_runs:
        startup(a.startup_runs)
    if a.startup_only:
        return 0
    print()
    src = Path(a.shared) / QWEN
    budget = a.budget_mib << 20
    print(f"load average (1 min) at start: {os.getloadavg()[0]:.2f}; budget {a.budget_mib} MiB")
    with tempfile.TemporaryDirectory(prefix="refsim-scale-") as tmp:
        warm = Path(tmp) / "warm.route.csv"
        write_turns(src, warm, 1)
        measure("ingest+replay", warm, budget)               # Numba kernels compiled / cached
        measure("stream", warm, budget)
        per_row = {}
        rep = a.repeat
        print(f"best of {rep} fresh children per line (median beside it). 'cold': the clock "
              f"starts after the modules are imported, so Numba's import and the kernels' "
              f"loading are timed (pyarrow's import is not); 'warm': a 1-turn trace is read and "
              f"replayed first, outside the clock")
        for n in [int(x) for x in a.turns.split(",")]:
            p = Path(tmp) / f"qwen-{n}.route.csv"
            write_turns(src, p, n)
            mib = p.stat().st_size / 2**20
            base = measure("pyarrow", p, budget, repeat=rep)
            print(f"\n{n} turn(s): {base['rows']} rows, {mib:.1f} MiB of CSV")
            print(f"  {'':20s} {'s':>7s} {'median':>7s} {'rows/s':>11s} {'rate/pyarrow':>12s} "
                  f"{'RSS MiB':>8s} {'RSS/file':>8s}  load")
            got = {}
            for mode in ("pyarrow", "pyarrow cold", "ingest", "ingest+replay", "stream"):
                for warmed in ((None,) if mode.startswith("pyarrow") else (None, warm)):
                    r = base if mode == "pyarrow" else measure(mode, p, budget, warmed, rep)
                    label = mode if mode.startswith("pyarrow") else f"{mode} {'warm' if warmed else 'cold'}"
                    rate = r["rows"] / r["s"]
                    print(f"  {label:20s} {r['s']:7.2f} {r['median']:7.2f} {rate:11.0f} "
                          f"{rate / (base['rows'] / base['s']):12.2f} {r['rss']:8.0f} "
                          f"{r['rss'] / mib:8.2f}  {r['load']:.2f}")
                    per_row.setdefault(label, []).append((n, r["rows"], r["s"]))
                    got[label] = r
            print(f"  cold against cold: ingest+replay cold / pyarrow cold row rate "
                  f"{got['pyarrow cold']['s'] / got['ingest+replay cold']['s']:.2f} (both imports timed)")
            if n == max(int(x) for x in a.turns.split(",")):
                best, med = command(["replay", str(p), "--cache-mb", str(a.budget_mib)], rep)
                print(f"  {'refsim replay (cmd)':20s} {best:7.2f} {med:7.2f} "
                      f"{base['rows'] / best:11.0f} {base['s'] / best:12.2f}   (the whole command "
                      f"from the shell, interpreter start included)")
            p.unlink()
        print("\ncost against rows, seconds = fixed + rows x slope: the slope between consecutive "
              "files, as a ratio to the last one (1.00 = linear; the fixed part is start-up)")
        for mode, pts in per_row.items():
            seg = [(n1, n2, (s2 - s1) / (r2 - r1)) for (n1, r1, s1), (n2, r2, s2)
                   in zip(pts, pts[1:])]
            fixed = pts[0][2] - pts[0][1] * seg[-1][2] if seg else float("nan")
            print(f"  {mode:20s} fixed {fixed:6.2f} s  " + "  ".join(
                f"{n1}->{n2} turns: {sl / seg[-1][2]:.2f}" for n1, n2, sl in seg)
                + (f"  (last slope {seg[-1][2] * 1e9:.0f} ns/row)" if seg else ""))
        if a.stream_turns:
            p = Path(tmp) / f"qwen-{a.stream_turns}.route.csv"
            write_turns(src, p, a.stream_turns)
            r = measure("stream", p, budget)
            print(f"\nstreamed replay of {a.stream_turns} turns: {r['rows']} rows, "
                  f"{p.stat().st_size / 2**20:.0f} MiB of CSV, {r['s']:.1f} s, "
                  f"{r['rows'] / r['s']:.0f} rows/s, peak RSS {r['rss']:.0f} MiB  "
                  f"(load {r['load']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
