"""Print the memory-pressure model against every shared phone run (docs/memory-pressure.md).

    python3 tools/pressure_table.py

Reads ``$REFSIM_SHARED`` (default ``../shared``): the 2026-07-22 phone runs (the fit, and the
recorded majflt/token), the 2026-07-12 phone runs and their ``.metrics`` sidecars. Prints the fit's
terms, predicted vs recorded majflt/token on every shared phone run, the published phone cells'
direction (copy-prompt fault storm, the two ``off`` runs), and the ``--dense-weights`` term.
Every figure is a library call (refsim.timing.pressure, refsim.timing.pressure_cells); this
script only prints. About 5 s.
"""

from __future__ import annotations

import sys
import tempfile

from refsim import MIB


def short(label: str) -> str:
    return label.rsplit("/", 1)[-1].removesuffix(".csv")


def rng(t, d=1) -> str:
    return f"{t.value:.{d}f} [{t.lo:.{d}f}, {t.hi:.{d}f}]"


def main() -> int:
    from refsim.cache.demand import model_demand
    from refsim.testing.recording_sets import PHONE_DROP, PHONE_LANES
    from refsim.testing.shared import shared_or_error
    shared_or_error(("real-runs", PHONE_DROP), ("real-runs", PHONE_LANES))
    from refsim.cache.ledger import memory_ledger
    from refsim.model import open_model
    from refsim.telemetry.metrics_reader import read_metrics
    from refsim.testing.pressure_runs import LANES_MODELS, drop_cold_runs, lanes_files
    from refsim.testing.twins import qwen36_twin
    from refsim.timing.pressure import dense_mode_delta, fit_pressure
    from refsim.timing.pressure_cells import cell_rows, lanes_rows, recorded_rows

    tmp = tempfile.mkdtemp()
    runs, demands = drop_cold_runs(tmp)
    fit = fit_pressure(runs, "phone 2026-07-22 drop-cold")
    print("## The fit (4 phone runs, 2026-07-22)\n")
    for t in fit.terms():
        print(f"- {t.line(4)}")

    print("\n## Runs that record faults (2026-07-22; Qwen3.6, cache 3000 MiB, ahwb)\n")
    print("| run | drop | recorded majflt/tok (kept) | summary majflt/tok | q = swap/(rss+swap) | "
          "W MiB/tok | model, g pooled [g's interval] | model, g of the other 3 |")
    print("|---|---|---|---|---|---|---|---|")
    files = [read_metrics(r.label) for r in runs]
    rows = recorded_rows(fit, runs, [f.summary["majflt/tok"] for f in files])
    for row, f in zip(rows, files):
        print(f"| {short(row.label)} | {f.config['drop_cold_frac']} | {row.recorded:.1f} | "
              f"{row.summary:.2f} | {row.evicted_fraction:.4f} | {row.touched_mib:.1f} | "
              f"{rng(row.pooled)} | {row.loo:.1f} |")

    print("\n## Runs without a fault column (2026-07-12; legacy layout)\n")
    print("| run | cache MiB | R = MemAvailable before, MiB | demand D MiB | W MiB/tok | "
          "R - anon demand MiB | recorded MemAvailable floor MiB | recorded majflt/tok | "
          "model majflt/tok |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in lanes_rows(fit, lanes_files(), LANES_MODELS):
        what = "mmap (whole file)" if row.mmap else f"{row.cache_mib:.0f}"
        print(f"| {row.label} | {what} | {row.ram_mib:.0f} | {row.demand_mib:.0f} | "
              f"{row.touched_mib:.0f} | {row.ram_mib - row.anon_mib:.0f} | {row.floor_mib:.0f} | not recorded | {rng(row.predicted)} |")

    model = open_model(qwen36_twin(f"{tmp}/q36-cells.gguf"))
    n_ctx = 4096

    def ledger_for(spec: str, draft: int):
        return memory_ledger(model, n_ctx, draft, spec == "mtp", dense_weights="ahwb")

    base = demands[1]  # the drop 0 run's demand: cache 3000 MiB, ahwb, n_ctx 4096
    fixed = base.touched_bytes(0.0, n_ctx // 2) / MIB
    print("\n## Published phone cells (bmoe-engine.md §7): change from each cell's off base\n")
    print(f"Base eviction E0 = {rng(fit.evicted)} MiB (the 2026-07-22 runs' swap at this recipe); "
          f"a cell adds the ledger's speculation bytes (n_ctx {n_ctx}) to E and to the pool; hits "
          f"per token from the cell's MiB/token and hit; g cancels in the ratio.")
    print("\n| cell | recorded majflt/tok | base | speculation adds MiB | recorded ratio | "
          "model ratio [E0's ends] |")
    print("|---|---|---|---|---|---|")
    for row in cell_rows(fit, ledger_for, base.pinned_bytes / MIB, base.evictable_bytes / MIB, fixed):
        c = row.cell
        rec = "–".join(f"{x:g}" for x in c.majflt)
        bases = " / ".join(c.base)
        rr = (f"{row.recorded_ratio[0]:.2f}" if row.recorded_ratio[0] == row.recorded_ratio[1]
              else f"{row.recorded_ratio[0]:.2f}–{row.recorded_ratio[1]:.2f}")
        print(f"| {c.name} | {rec} | {bases} | {row.added_mib:.1f} | {rr} | {rng(row.ratio, 2)} |")

    print("\n## --dense-weights: what the shared runs say\n")
    seen: dict = {}
    from refsim.testing.recording_sets import DESKTOP, PHONE_DROP, set_specs
    for name in (DESKTOP, PHONE_DROP):
        for spec in set_specs(name):
            run = read_metrics(spec)
            key = (name, run.config.get("dense_weights"), int(bool(run.column("majflt").any())))
            seen[key] = seen.get(key, 0) + 1
    for (name, mode, measured), n in sorted(seen.items()):
        print(f"- {name}: {n} runs with dense_weights={mode}, majflt {'recorded' if measured else 'unmeasured (0)'}")
    print(f"- phone-2026-07-12-cache-lanes: {len(lanes_files())} runs, legacy layout: no dense_weights "
          f"key and no majflt column")
    anon = model_demand(model, memory_ledger(model, n_ctx, 0, False, dense_weights="anon"),
                        base.expert_cache_bytes)
    print("\n| run | hits + KV read MiB/tok | measured ms/tok | model anon - ahwb ms/tok | as % of the run | "
          "published anon -> ahwb |")
    print("|---|---|---|---|---|---|")
    for r, f in zip(runs, files):
        hits = float((r.touched_mib - base.touched_bytes(0.0, 0) / MIB).mean())
        t = dense_mode_delta(fit, anon, base, hits, 0)
        ms = float(f.token_wall_ms()[50:].mean())
        print(f"| {short(r.label)} | {hits:.1f} | {ms:.1f} | {rng(t)} | "
              f"{100 * t.value / ms:.1f} [{100 * t.lo / ms:.1f}, {100 * t.hi / ms:.1f}] % | "
              f"+17.9 % tok/s (anon time = 1.179 x ahwb: {0.179 * ms:.1f} ms) |")
    return 0


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(main))
