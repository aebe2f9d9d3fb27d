"""Published verdicts, predicted: print docs/timing.md's validation table of ``refsim whatif``.

    REFSIM_SHARED=../shared python3 tools/whatif_validate.py [--boot N] [--seed S]

Fits each device on its recording set's plain runs, calibrates each published session on its off
cell, and predicts every published speculation cell of bmoe-engine.md §7 from its acceptance,
coverage and tokens per decode through ``refsim.timing.verdict.price`` on the shared Qwen3-30B
route trace at the budget whose plain MiB/token matches the off cell (refsim.timing.validate).
Every figure is a library call; this script only prints (markdown).
"""

from __future__ import annotations

import argparse
import sys
import tempfile


def main(argv=None) -> int:
    from refsim.testing.recording_sets import check_shared_inputs
    from refsim.testing.validation_inputs import validation_inputs
    from refsim.validators import int_in, seed
    from refsim.timing.validate import (SESSIONS, markdown, published_reads_markdown,
                                        recorded_fault_check, validate)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boot", type=int_in(0, 1000), default=200, metavar="N",
                    help="bootstrap replicates per device (0..1000, default 200; 0: no refits)")
    ap.add_argument("--seed", type=seed, default=0, metavar="S",
                    help="the resampling seed (0..4294967295, default 0)")
    a = ap.parse_args(argv)
    check_shared_inputs()
    inputs = validation_inputs(tempfile.mkdtemp())
    result = validate(inputs, n_boot=a.boot, seed=a.seed)
    print(f"## Published verdicts, predicted ({a.boot} bootstrap replicates, seed {a.seed}, "
          f"band level 0.9)\n")
    print("### Inputs\n")
    for name, dev in sorted(inputs.devices.items()):
        t = dev.terms
        print(f"- {name}: device {t.name}, fitted on {len(t.device.fitted_on)} plain runs; "
              f"eps_P {dev.eps_prefill.value:.3f} [{dev.eps_prefill.lo:.3f}, "
              f"{dev.eps_prefill.hi:.3f}] at P = {dev.n_prompt} ({dev.eps_source}); noise sd "
              f"{100 * dev.sigma.value:.2f} % of one run")
        if dev.auto_sigma is not None:
            a = dev.auto_sigma
            print(f"- {name}: --cache-mb auto budget, run to run: sd {a.value:.4f} of ln cache_mb "
                  f"[{a.lo:.4f}, {a.hi:.4f}] ({a.source})")
    for s in SESSIONS:
        cal = result.calibrations[s.name]
        budget, mib = result.budgets[s.name]
        print(f"- {s.name}: off {s.off.tok_s:g} tok/s at {s.off.mib_per_token:g} MiB/token -> "
              f"C {cal.floor.value:.1f} ms/token on the {s.device} device; trace budget {budget} "
              f"MiB reads {mib:.2f} MiB/token plain "
              f"(--drop-cold-experts {s.drop_frac:g})")
    for n in result.notes:
        print(f"- note: {n}")
    print("\n### Table\n")
    print("\n".join(markdown(result)))
    print("\n### Terms of each prediction (ms per emitted token)\n")
    print("| cell | rate | eps | mean drafts | tok/decode | compute | extra positions | stall | "
          "bookkeeping + contention | head | memory [interval] |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in result.rows:
        p = r.price
        v = {t.name: t for t in p.terms}
        e = v["extra_positions"].source.split(" (")[0]
        print(f"| {r.cell.name} | {r.rate} | {e} | {p.config.drafts:.3f} | "
              f"{p.tokens_per_decode:.3f} | {v['compute'].value:.1f} | "
              f"{v['extra_positions'].value:.1f} | {v['stall'].value + v['flash'].value:.1f} | "
              f"{v['bookkeeping'].value + v['contention'].value:.1f} | {v['head'].value:.1f} | "
              f"{v['memory'].value:.1f} [{v['memory'].lo:.1f}, {v['memory'].hi:.1f}] |")
    print("\n### Check (never an input): the phone cells at their recorded faults\n")
    print("| cell | rate | memory term, recorded faults [t_f's interval] | predicted Δ [band] | "
          "published Δ | inside |")
    print("|---|---|---|---|---|---|")
    for r in result.rows:
        if r.device != "phone":
            continue
        mem, p = recorded_fault_check(r)
        d = p.delta
        print(f"| {r.cell.name} | {r.rate} | {mem.value:.1f} [{mem.lo:.1f}, {mem.hi:.1f}] ms/token | "
              f"{d.point:+.1f} % [{d.lo:+.1f}, {d.hi:+.1f}] | {r.published_pct:+.1f} % | "
              f"{'yes' if d.lo <= r.published_pct <= d.hi else 'no'} |")
    print("\n### Check (never an input): every cell at the MiB/token it published\n")
    print("\n".join(published_reads_markdown(result, inputs.trace)))
    print("\n### Criteria (issue 29)\n")
    for line in result.criteria.lines():
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(main))
