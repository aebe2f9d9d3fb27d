"""Print every what-if term the shared runs identify (docs/whatif-terms.md's tables).

    python3 tools/whatif_terms.py [--boot N] [--seed S]

Reads ``$REFSIM_SHARED`` (default ``../shared``): the three recording sets of real-runs/, the
Qwen3-30B route trace's preamble, and the published cells (refsim.timing.cells). Prints, per
device: the fit's compute floor, each run's prefill split, the prefill groups' eps, the
tensor-size reading, eps per verify width, the published checks; the MTP head against its
published cost; the run-to-run noise; session calibrations; and the bands (bootstrap widths) of
the published host cells. Every figure is a library call (refsim.timing.*); this script only
prints.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile

from refsim.testing.recording_sets import (DESKTOP, PHONE_DROP, PHONE_LANES, QWEN36, SETS,
                                           check_shared_inputs, set_inputs)
from refsim.timing.band import bootstrap_devices, delta_band, tok_s_band
from refsim.timing.calibrate import calibrate_floor, calibrate_to_cell
from refsim.timing.cells import HOST_COPY, HOST_MTP, HOST_PROSE, PHONE_MTP, PHONE_NGRAM, predict_cell
from refsim.timing.head import PUBLISHED_HEAD_S_PER_TOKEN, head_ms_per_token
from refsim.timing.identify import identify_device
from refsim.timing.noise import PUBLISHED_REPEATS, log_sigma
from refsim.timing.plain import load_plain_runs
from refsim.timing.positions import bytes_eps, published_eps_checks, split_prefill, width_eps
from refsim.timing.terms import exact
from refsim.validators import int_in, seed


def short(label: str) -> str:
    return label.rsplit("/", 1)[-1].removesuffix(".csv")


def rng(t, d=3) -> str:
    return f"{t.value:.{d}f} [{t.lo:.{d}f}, {t.hi:.{d}f}]"


def device_section(name: str, tmp: str):
    inp = set_inputs(name, tmp)
    dt = identify_device(inp.specs, inp.sizes, inp.work, name=name)
    print(f"\n## {name}\n")
    for m, c in sorted(dt.device.compute.items()):
        print(f"- fit: C[{m}] = {c.value:.1f} ms (s.e. {c.se:.1f})")
    for n in dt.notes:
        print(f"- note: {n}")
    print("\n| run | P | prefill ms | U MiB | flash ms | mgmt ms | compute ms | C ms | eps_P |")
    print("|---|---|---|---|---|---|---|---|---|")
    for o in dt.prefills:
        s = split_prefill(dt.device, o)
        f3 = lambda t: f"{t[1]:.0f} [{t[0]:.0f}, {t[2]:.0f}]"  # noqa: E731
        print(f"| {short(o.label)} | {o.n_prompt} | {o.prefill_ms:.0f} | {rng(o.union, 0)} | "
              f"{f3(s.flash_ms)} | {f3(s.mgmt_ms)} | {f3(s.compute_ms)} | {f3(s.floor_ms)} | "
              f"{s.eps[1]:.3f} [{s.eps[0]:.3f}, {s.eps[2]:.3f}] |")
    print("\n| group (model, P, threads, overlap, cache) | runs | eps_P |")
    print("|---|---|---|")
    for k, t in dt.prefill_groups.items():
        n = sum(1 for o in dt.prefills if (o.model, o.n_prompt, o.threads, o.overlap, o.cache) == k)
        chosen = " (chosen)" if any(k == c for c, _ in dt.eps_prefill.values()) else ""
        print(f"| {k}{chosen} | {n} | {rng(t)} |")
    for m, (k, t) in dt.eps_prefill.items():
        w = inp.work.get(m)
        print(f"\n{m}: eps per verify width (roofline of eps_P and the tensor-size reading)")
        for width in (2, 3, 4, 5):
            eb = bytes_eps(w, width) if w is not None else None
            r = w.verify_elems(256) / w.prefill_elems(k[1]) if w is not None else 1.0
            e = width_eps(t, k[1], width, max(1.0, r), eb)
            extra = f", eps_bytes {rng(eb)}" if eb is not None else ""
            print(f"- w = {width}: eps {rng(e)}{extra}")
        if w is not None:
            print(f"- verify/prefill multiplies per position (ctx 256): {r:.3f}")
    if dt.repeats:
        for rep in dt.repeats:
            print(f"- repeat: {rep.name}: {', '.join(f'{x:.3f}' for x in rep.tok_s)} tok/s ({rep.note})")
    return dt, inp


def calibrations(name: str, dt):
    runs, _ = load_plain_runs(set_inputs(name, tempfile.mkdtemp()).specs, 50)
    print(f"\n{name}: session calibration of each run on the set's fit (rate)")
    for r in runs:
        c = calibrate_floor(dt.device, r)
        print(f"- {short(r.label)}: C {c.before_ms:.1f} -> {c.floor.value:.1f} ms ({c.moved_pct:+.1f} %), "
              f"[{c.floor.lo:.1f}, {c.floor.hi:.1f}] over its quarters")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boot", type=int_in(0, 1000), default=200, metavar="N",
                    help="bootstrap replicates per device (0..1000, default 200; 0: no refits)")
    ap.add_argument("--seed", type=seed, default=0, metavar="S",
                    help="the resampling seed (0..4294967295, default 0)")
    a = ap.parse_args(argv)
    check_shared_inputs()
    tmp = tempfile.mkdtemp()
    out = {n: device_section(n, tmp) for n in SETS}
    print("\n## Published speculation figures (checks, never inputs)\n")
    for t in published_eps_checks():
        print(f"- {t.name}: {rng(t)}")

    desk, inp = out[DESKTOP]
    work = inp.work[QWEN36]
    key, eps_p = desk.eps_prefill[QWEN36]
    print("\n## MTP head, host cells (C calibrated on each table's off cell, desktop fit)\n")
    print("| cell | tok/verify | head ms/token | published ms/token (effective vs reported) |")
    print("|---|---|---|---|")
    for table in (HOST_MTP, HOST_PROSE, HOST_COPY):
        cal = calibrate_to_cell(desk.device, table[0], "cell", 4, True)
        for c in table[1:]:
            if "mtp" not in c.name:
                continue
            e = width_eps(eps_p, key[1], c.draft + 1, work.verify_elems(256) / work.prefill_elems(key[1]),
                          bytes_eps(work, c.draft + 1))
            h = head_ms_per_token(work, cal.floor, e, c.draft, c.tokens_per_decode)
            pub = {"host prose mtp d3": 1000 * (1 / 7.32 - 1 / 8.80),
                   "host copy mtp d3": 1000 * (1 / 6.43 - 1 / 7.40)}.get(c.name)
            pub_s = (f"{pub:.1f}" if pub else
                     f"{1000 * PUBLISHED_HEAD_S_PER_TOKEN[0]:.0f}-{1000 * PUBLISHED_HEAD_S_PER_TOKEN[1]:.0f}")
            print(f"| {c.name} | {c.tokens_per_decode} | {rng(h, 1)} | {pub_s} |")

    print("\n## Run-to-run noise\n")
    reps_host = list(desk.repeats) + [r for r in PUBLISHED_REPEATS if r.device == "host"]

    def predict_repeat(rep, mib):
        cal = calibrate_to_cell(desk.device, _off(rep), "cell", 4, True).device
        return 1000.0 / float(cal.token_ms([mib], "cell", 4, True, True)["wall"][0])
    host = log_sigma(reps_host, predict_repeat, "noise_host")
    phone = log_sigma([r for r in PUBLISHED_REPEATS if r.device == "phone"], name="noise_phone")
    for t in (host, phone):
        print(f"- {t.line(4)}")
        print(f"  a change between two runs: sd {100 * math.sqrt(2) * t.value:.1f} %")

    print("\n## Session calibration\n")
    for n in SETS:
        calibrations(n, out[n][0])

    print(f"\n## Bands (level 0.9, {a.boot} bootstrap replicates, seed {a.seed})\n")
    runs, _ = load_plain_runs(inp.specs, 50)
    reps, notes = bootstrap_devices(runs, a.boot, a.seed)
    for n in notes:
        print(f"- note: {n}")
    print("| cell | rate | published | predicted (band) | params | eps | noise |")
    print("|---|---|---|---|---|---|---|")
    effective = {"host prose mtp d3": 7.32, "host copy mtp d3": 6.43}
    for table in (HOST_MTP, HOST_PROSE, HOST_COPY):
        off = table[0]
        for c in table[1:]:
            e = width_eps(eps_p, key[1], c.draft + 1, work.verify_elems(256) / work.prefill_elems(key[1]),
                          bytes_eps(work, c.draft + 1))
            rows = [("reported", c.tok_s, False)]
            if c.name in effective:
                rows.append(("effective", effective[c.name], True))
            for rate, published, eff in rows:
                b = delta_band(_cell_predictor(off, c, work, e, eff), _cell_predictor(off, off, work, e),
                               desk.device, reps, e, host.value)
                pub = 100.0 * (published / off.tok_s - 1.0)
                f2 = lambda p: f"{p[0]:+.1f}..{p[1]:+.1f}"  # noqa: E731
                print(f"| {c.name} | {rate} | {pub:+.1f} % | {b.point:+.1f} % [{b.lo:+.1f}, {b.hi:+.1f}] | "
                      f"{f2(b.parts['params'])} | {f2(b.parts['eps'])} | {f2(b.parts['noise'])} |")
    b = tok_s_band(lambda d: (lambda e: predict_cell(calibrate_to_cell(d, HOST_MTP[0], "cell", 4, True).device,
                                                     HOST_MTP[0], "cell", 4, True, 0.0)[0]),
                   desk.device, reps, None, host.value)
    print(f"\nhost mtp off (calibrated, so exact): {b.point:.2f} tok/s [{b.lo:.2f}, {b.hi:.2f}] "
          f"(params {b.parts['params'][0]:.3f}..{b.parts['params'][1]:.3f})")
    for r in runs[:3]:
        def plain(d, r=r):
            return lambda e: 1000.0 / float(d.token_ms(r.x, r.model, r.lanes, r.overlap, r.cache)["wall"].mean())
        b = tok_s_band(plain, desk.device, reps, None, 0.0)
        print(f"- {short(r.label)} uncalibrated: {b.point:.3f} tok/s, params only "
              f"[{b.lo:.3f}, {b.hi:.3f}] ({100 * (b.hi - b.lo) / 2 / b.point:.1f} % half-width); "
              f"measured {r.measured_tok_s:.3f}")
    return 0


def _off(rep):
    from refsim.timing.cells import Cell
    return Cell(rep.name, rep.tok_s[0], rep.mib_per_token[0])


def _cell_predictor(off, cell, work, eps_term, effective: bool = False):
    """Staged predictor of a published cell's tok/s (the engine's reported rate: drafting is
    outside it), or with ``effective`` its effective rate (the derived head added): the
    replicate is calibrated on the off cell, then the cell is priced at each eps."""
    def stage(d):
        cal = calibrate_to_cell(d, off, "cell", 4, True)

        def at(e):
            tok_s = predict_cell(cal.device, cell, "cell", 4, True, e)[0]
            if not effective or cell.draft == 0:
                return tok_s
            et = exact("eps", e, eps_term.unit, "assumed", "band sweep")
            h = head_ms_per_token(work, cal.floor, et, cell.draft, cell.tokens_per_decode)
            return 1000.0 / (1000.0 / tok_s + h.value)
        return at
    return stage


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(main))
