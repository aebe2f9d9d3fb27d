"""The measured tables of docs/io.md, from the shared Qwen3-30B trace and its metrics:

1. the data phase scan: for every 32-aligned phase of the data section modulo 4096, how many of
   the 128 decodes' windows differ from the engine's recorded read_bytes;
2. the per-decode lane rounds the replay gives exactly, against their expectation from the
   decode's miss count alone (refsim.io.geometry.expected_rounds) and the linear share 3m/L;
3. requests per token, KiB per request and the busiest lane's MiB per token by budget and lanes.

    PYTHONPATH=. python3 tools/io_tables.py TRACE METRICS [--budgets 2000,4000,8000]
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np

from refsim import MIB
from refsim.io.geometry import expected_rounds
from refsim.io.layout import layout_from_model
from refsim.io.requests import IoConfig, IoTally, missed_in_order
from refsim.model import open_model, qwen3_30b_a3b_q4_k_m_twin
from refsim.studies.replay import replay_trace
from refsim.telemetry.metrics_reader import read_metrics
from refsim.trace import read_trace


def decode_windows(trace, report, model, data_start, lanes=4, overlap=False):
    tally = IoTally(layout_from_model(model, data_start=data_start), IoConfig(lanes, overlap))
    tally.add_part(trace, report.parts[0])
    return tally, [w for (w, _), e in zip(list(tally.pending), trace.events) if e.kind.name == "PLAIN"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("metrics")
    ap.add_argument("--budgets", default="2000,4000,8000")
    args = ap.parse_args(argv)
    trace = read_trace(args.trace)
    recorded = read_metrics(args.metrics).column("read_bytes").tolist()
    with tempfile.TemporaryDirectory() as d:
        model = open_model(qwen3_30b_a3b_q4_k_m_twin(f"{d}/twin.gguf"))
    rep = replay_trace(trace, 4000 * MIB)

    print("| data start mod 4096 | decodes whose windows differ from read_bytes |")
    print("|---|---|")
    by_count: dict[int, list[int]] = {}
    for phase in range(0, 4096, 32):
        _, got = decode_windows(trace, rep, model, 36 * 4096 + phase)
        by_count.setdefault(sum(a != b for a, b in zip(got, recorded)), []).append(phase)
    for n, phases in sorted(by_count.items()):
        shown = ", ".join(map(str, phases)) if len(phases) <= 6 else f"{len(phases)} phases"
        print(f"| {shown} | {n} of {len(recorded)} |")

    budgets = [int(b) for b in args.budgets.split(",")]
    print()
    print("| budget MiB | lanes | misses/decode | rounds (replay) | expected | 3m/L | mean abs dev |")
    print("|---|---|---|---|---|---|---|")
    reports = {b: replay_trace(trace, b * MIB) for b in budgets}
    k = trace.header.n_expert_used
    for b in budgets:
        per = []
        for rec, ev in zip(reports[b].records, trace.events):
            if ev.kind.name == "PLAIN":
                il, _ = missed_in_order(ev.routes, rec.charged_bytes)
                per.append(np.bincount(il, minlength=trace.header.n_layer))
        for lanes in (2, 4, 8):
            real = np.array([np.ceil(3 * ml / lanes).sum() for ml in per])
            m = np.array([ml.sum() for ml in per])
            est = expected_rounds(m, 3, lanes, trace.header.n_layer, k)
            dev = np.mean(np.abs(est - real) / np.maximum(real, 1))
            print(f"| {b} | {lanes} | {m.mean():.1f} | {real.mean():.1f} | {est.mean():.1f} | "
                  f"{(3 * m / lanes).mean():.1f} | {100 * dev:.1f} % |")

    print()
    print("| budget MiB | lanes | requests/token | KiB/request | window MiB/token | busiest lane "
          "MiB/token | rounds/token | batches/token |")
    print("|---|---|---|---|---|---|---|---|")
    for b in budgets:
        for lanes in (1, 2, 4, 8):
            tally, _ = decode_windows(trace, reports[b], model, 38400, lanes)
            t = sum(1 for e in trace.events if e.kind.name == "PLAIN")
            n, w = tally.requests[1], tally.window_bytes[1]
            print(f"| {b} | {lanes} | {n / t:.1f} | {w / n / 1024:.1f} | {w / MIB / t:.2f} | "
                  f"{tally.lane_bytes[1] / MIB / t:.2f} | {tally.rounds[1] / t:.1f} | "
                  f"{tally.batches[1] / t:.1f} |")
    return 0


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    raise SystemExit(run_interruptible(main))
