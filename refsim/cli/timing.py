"""``refsim timing fit|predict|validate``: a device model fitted to the engine's recorded runs
(docs/timing.md)."""

from __future__ import annotations

import contextlib
import json
import os
import sys

import numpy as np

from refsim.cli.common import (add_knob_args, check_outputs, int_list, knobs_from_args,
                               nonneg_int, positive_int, report_stream, seed)
from refsim.validators import int_in, milliseconds, position_cost
from refsim.errors import ConfigError
from refsim.fileio import write_text_atomic
from refsim.fmt import budget_mib, plural
from refsim.spec.constants import DRAFT_MAX_LIMIT
from refsim.timing import DeviceModel, fit_device, leave_one_out, load_device, load_runs, predict_run
from refsim.timing.breakeven import DEFAULT_EPS, breakeven
from refsim.timing.defaults import EPS_INTERVAL
from refsim.timing.model import PARAMS
from refsim.timing.whatif import DEFAULT_IO_THREADS
from refsim.timing.runs import split_spec

RUN_HELP = ("per-token metrics CSV(s) of one device (bmoe_metrics v1/v2 or legacy); a file that "
            "does not say its model or lanes (legacy) takes them after '@': "
            "RUN.csv@model=NAME,io_threads=N[,overlap=0|1][,cache_mb=M]")


def add_parser(sub) -> None:
    p = sub.add_parser("timing", help="a device time model fitted to recorded runs (fit, predict, "
                                      "validate, breakeven)",
                       description="A per-token time model of one device (compute floor, cache "
                                   "bookkeeping, flash bandwidth and lanes, the --overlap stall), "
                                   "fitted to the engine's per-token metrics CSVs. docs/timing.md.")
    tsub = p.add_subparsers(dest="timing_command", metavar="ACTION")
    tsub.required = True

    f = tsub.add_parser("fit", help="fit a device's parameters to several of its runs",
                        description="Fit one device's parameters to several of its runs; print "
                                    "each with its jackknife standard error and the fit's "
                                    "per-run residuals; write DEVICE.json.")
    f.add_argument("runs", nargs="+", metavar="RUN.csv", help=RUN_HELP)
    f.add_argument("--out", required=True, metavar="DEVICE.json", help="the device file to write (- = stdout)")
    f.add_argument("--name", default="", help="a name stored in the device file (default: the "
                                              "--out file's stem; with --out -, the folder of the "
                                              "runs)")
    f.add_argument("--gguf", action="append", default=[], metavar="[KEY=]MODEL.gguf",
                   help="the runs' model's tensor table (a header-only twin works: refsim synth "
                        "--like): identifies the compute of a verify decode's extra positions "
                        "(eps) from the runs' serial prefills and stores it in the device file, "
                        "where every --device command takes it (docs/whatif-terms.md); KEY = the "
                        "compute floor it belongs to (default: the file's name if that is a key, "
                        "else the device's only one); repeatable")
    f.add_argument("--boot", type=int_in(0, 1000), default=0, metavar="N",
                   help="also store N bootstrap refits over the runs (resampled within each model "
                        "and mode; 0..1000, default 0): refsim whatif's band then carries the "
                        "parameters' spread (docs/whatif-terms.md); --seed picks the resamples")
    f.add_argument("--seed", type=seed, default=0, metavar="S",
                   help="with --boot: the resampling seed (default 0)")
    _io_model(f)
    _common(f)
    f.set_defaults(func=run_fit)

    q = tsub.add_parser("predict", help="predict runs' decode tok/s from their counters",
                        description="Predict each run's mean decode tok/s (after the warm-up "
                                    "trim) from its configuration and per-token flash reads "
                                    "alone, and print it beside the measured figure.")
    q.add_argument("device", metavar="DEVICE.json", help="written by refsim timing fit")
    q.add_argument("runs", nargs="+", metavar="RUN.csv", help=RUN_HELP)
    q.add_argument("--trim", type=nonneg_int, default=None, metavar="N",
                   help="warm-up tokens left out (default: the device file's)")
    q.add_argument("--json", action="store_true", help="print JSON (keys predicted_tok_s, "
                                                        "measured_tok_s, error_pct, ...)")
    q.set_defaults(func=run_predict)

    b = tsub.add_parser("breakeven", help="the acceptance a draft width needs to beat plain "
                                          "decoding at a cache budget",
                        description="From a route trace's verify-batch widening at --cache-mb "
                                    "(refsim union) and a device model: per draft width, the "
                                    "tokens a drafted decode must confirm and the acceptance it "
                                    "needs to beat plain decoding. docs/timing.md.")
    b.add_argument("trace", metavar="TRACE", help="route trace (route_trace v1)")
    b.add_argument("--device", required=True, metavar="DEVICE.json", help="from refsim timing fit")
    b.add_argument("--cache-mb", required=True, metavar="LIST",
                   help="cache budget(s) in MiB: N, N,N,... or START:STOP:STEP, each 2^-20..2^40 "
                        "(a repeated budget is dropped); several budgets: one table row per "
                        "budget and draft, and --plot draws them against the budget")
    b.add_argument("--draft", type=int_list(1, DRAFT_MAX_LIMIT), default=list(range(1, 9)),
                   metavar="D", help="draft widths: N, N,M,... or A..B, 1..8 (default 1..8)")
    b.add_argument("--model", metavar="KEY", help="which of the device's compute floors to use "
                                                  "(default: the trace's model's, by file name; "
                                                  "else the device's only one, with a warning "
                                                  "when the trace names another model)")
    b.add_argument("--io-threads", type=positive_int, default=DEFAULT_IO_THREADS, metavar="L",
                   help="I/O lanes (default 4, the engine's)")
    b.add_argument("--overlap", action="store_true", help="the run uses --overlap")
    b.add_argument("--position-cost", type=position_cost, default=None, metavar="EPS",
                   help=f"compute of each extra verify position as a fraction of one position's "
                        f"(default: the device file's at each draft's width, identified by timing "
                        f"fit --gguf; else {DEFAULT_EPS}, assumed; the shared prefills allow "
                        f"{EPS_INTERVAL[0]:g}-{EPS_INTERVAL[1]:g}, docs/whatif-terms.md)")
    b.add_argument("--draft-ms", type=milliseconds, default=0.0, metavar="MS",
                   help="drafting cost per drafted decode, ms (the MTP head's; default 0)")
    b.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_knob_args(b)
    b.add_argument("--plot", metavar="OUT.png",
                   help="figure (.png, .pdf or .svg by the extension): acceptance needed and "
                        "tokens needed against the draft width, with the band of position costs "
                        f"{EPS_INTERVAL[0]:g}-{EPS_INTERVAL[1]:g} (refsim whatif's interval; needs "
                        "matplotlib)")
    b.set_defaults(func=run_breakeven)

    v = tsub.add_parser("validate", help="leave-one-run-out check of the model on one device's runs",
                        description="For each run: fit on the others, predict it; print "
                                    "predicted vs measured tok/s, the error, its median and worst.")
    v.add_argument("runs", nargs="+", metavar="RUN.csv", help=RUN_HELP)
    _io_model(v)
    _common(v)
    v.set_defaults(func=run_validate)


def _io_model(p) -> None:
    p.add_argument("--io-model", choices=("mib", "requests"), default="mib",
                   help="serial flash time per MiB (default) or, also, by requests and lanes "
                        "(refsim.timing.requests; the runs' models must be known to "
                        "refsim.io.geometry): fit stores it in the device file with both models' "
                        "leave-one-out errors, validate prints both")


def _common(p) -> None:
    p.add_argument("--trim", type=nonneg_int, default=50, metavar="N",
                   help="warm-up tokens left out of every run (default 50, as the engine authors' "
                        "drop-cold findings)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def _runs(args, trim: int, need: int, why: str = ""):
    """The runs the device model describes. One outcome: if at least ``need`` remain, a note per
    run left out (an mmap run) and the runs; else one error that says what was left out and why
    (never a note and then an error)."""
    runs, notes = load_runs(args.runs, trim, skip_unmodelled=True)
    if len(runs) < need:
        left = f"; {'; '.join(notes)}" if notes else ""
        raise ConfigError(f"{len(runs)} of the {len(args.runs)} run(s) given are described by the "
                          f"device model; expected at least {need}{why}{left}")
    for note in notes:
        print(f"{args._parser.prog}: note: {note}", file=sys.stderr)
    return runs


def _fmt(v: float | None, nd: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{nd}g}" if abs(v) < 1e-3 and v != 0 else f"{v:.{nd}f}"


def run_fit(args) -> int:
    check_outputs({"--out": args.out}, {f"RUN {p}": split_spec(p)[0] for p in args.runs})
    runs = _runs(args, args.trim, 2, " to fit a device")
    name = args.name or default_device_name(args.out, [split_spec(p)[0] for p in args.runs])
    dev = fit_device(runs, name=name)
    preds = [predict_run(dev, r) for r in runs]
    rm = None
    if args.io_model == "requests":
        from dataclasses import replace

        from refsim.timing.requests import fit_requests, run_features, with_loo
        feats = [run_features(r) for r in runs]
        rm = with_loo(fit_requests(runs, feats, dev), runs, feats)
        dev = replace(dev, requests=rm.as_dict())
    eps_notes = []
    if args.boot:
        from dataclasses import replace

        from refsim.timing.band import bootstrap_devices
        reps, more = bootstrap_devices(runs, args.boot, args.seed)
        dev = replace(dev, replicates=tuple(DeviceModel.replicate_doc(d) for d in reps))
        eps_notes += list(more)
    if args.gguf:
        from dataclasses import replace
        pc, more = _position_cost(args, dev)
        eps_notes += list(more)                 # after --boot's, not in place of them
        dev = replace(dev, position_cost=pc)
    # the runs' own repeats (refsim.timing.identify's rule): the device's run-to-run noise
    from refsim.timing.noise import with_device_noise
    dev = with_device_noise(dev, runs, name=name)
    write_text_atomic(args.out, _device_text(dev, args.out), what="--out")
    with contextlib.redirect_stdout(report_stream({"--out": args.out})):   # stderr if --out -
        return _report_fit(args, dev, runs, preds, rm, eps_notes)


def default_device_name(out: str, paths: list[str]) -> str:
    """The device's name when ``timing fit`` is given no ``--name``: the ``--out`` file's stem
    (``desktop.json`` -> ``desktop``), what the user called the device; with ``--out -``, the
    name of the folder every run is in (``desktop-2026-07-24-qwen36``), or ``device`` when they
    share none (the runs' count, the name before, said nothing a user recognises)."""
    if out != "-":
        stem = os.path.splitext(os.path.basename(out))[0]
        if stem:
            return stem
    dirs = {os.path.dirname(os.path.realpath(p)) for p in paths}
    folder = os.path.basename(dirs.pop()) if len(dirs) == 1 else ""
    return folder or "device"


def _device_text(dev, out: str) -> str:
    """``dev``'s device file text, once the device reader's own checks accept it
    (:func:`refsim.timing.model.parse_device`, what every ``--device`` command reads it with): a
    fit steered out of bounds by its runs (a ``tail`` s.e. of 8e9 ms, an infinite value) is
    refused here, naming the key, and nothing is written.

    Raises
    ------
    ConfigError
        The reader's one-line refusal, naming the fitted device and the key out of bounds.
    """
    from refsim.timing.model import parse_device
    text = dev.to_json(allow_nan=True)      # a non-finite value reaches the reader, named there
    parse_device(f"the fitted device (not written to {'stdout' if out == '-' else out})",
                 text.encode("utf-8"))
    return text


def _gguf_keys(args, dev) -> dict:
    """``{compute-floor key: GGUF path}`` from ``--gguf [KEY=]PATH`` (the ``run_fit`` help)."""
    import os
    out = {}
    keys = sorted(dev.compute)
    for item in args.gguf:
        key, eq, path = item.partition("=")
        if not eq or os.path.exists(item):
            key, path = "", item
        if not key:
            base = os.path.basename(path)
            if base in dev.compute:
                key = base
            elif len(keys) == 1 and len(args.gguf) == 1:
                key = keys[0]
            else:
                raise ConfigError(f"--gguf {item}: which compute floor? give KEY=PATH with KEY one "
                                  f"of {', '.join(keys)}")
        if key not in dev.compute:
            raise ConfigError(f"--gguf {item}: {key!r} is not a compute floor of these runs "
                              f"({', '.join(keys)})")
        if key in out:
            raise ConfigError(f"--gguf: {key!r} given twice")
        out[key] = path
    return out


def _check_gguf_matches_runs(args, key: str, path: str, model) -> None:
    """A ``--gguf`` table must be the runs' model: its ``n_expert`` and ``n_expert_used`` equal,
    and its ``n_layer`` (with or without the nextn block) equal, to what the preamble of every run
    of compute floor ``key`` states (a legacy file states none and is not checked).

    Raises
    ------
    ConfigError
        Naming the flag, the file and the run that disagrees.
    """
    from refsim.telemetry.metrics_reader import read_metrics
    from refsim.timing.runs import split_spec
    sp = model.spec
    layers = {sp.n_layer, sp.n_layer - sp.nextn_predict_layers}
    for spec in args.runs:
        f, over = split_spec(spec)
        cfg = read_metrics(f, sidecar=False).config
        if over.get("model", cfg.get("model")) != key:
            continue
        for name, ok, want in (("n_expert", {sp.n_expert}, sp.n_expert),
                               ("n_expert_used", {sp.n_expert_used}, sp.n_expert_used),
                               ("n_layer", layers, sp.n_layer)):
            got = cfg.get(name)
            if got is not None and got.isdigit() and int(got) not in ok:
                raise ConfigError(f"--gguf {path}: {name} {want}, but {f} (model {key}) states "
                                  f"{name}={got}: not the runs' model")


def _position_cost(args, dev) -> tuple:
    """``(position_cost, notes)``: per model given ``--gguf``, the eps readings of its serial
    prefill group (:func:`refsim.timing.identify.identify_device` on the same runs;
    :func:`refsim.timing.positions.position_cost_entry`). An overlap group only bounds eps
    (docs/whatif-terms.md): such a model gets no entry, and a note says so."""
    from refsim.model import open_model
    from refsim.timing.identify import identify_device
    from refsim.timing.positions import position_cost_entry
    from refsim.timing.prefill import ExpertSizes
    from refsim.timing.work import position_work
    paths = _gguf_keys(args, dev)
    sizes, work = {}, {}
    for key, path in paths.items():
        model = open_model(path)
        _check_gguf_matches_runs(args, key, path, model)
        work[key] = position_work(model)
        sizes[key] = ExpertSizes.from_model_bytes(model.bytes, model.spec.n_expert_used,
                                                  f"{path}'s tensor table")
    terms = identify_device(args.runs, sizes, work, name=dev.name, trim=args.trim)
    pc, notes = {}, []
    for key in paths:
        got = terms.eps_prefill.get(key)
        if got is None:
            notes.append(f"{key}: no run has prefill figures; eps not identified")
            continue
        group, eps_p = got
        if group[3]:
            notes.append(f"{key}: only --overlap prefills (an overlap prefill bounds eps, it does not "
                         f"identify it: eps_P {eps_p.value:.3f} [{eps_p.lo:.3f}, {eps_p.hi:.3f}]); "
                         f"not stored")
            continue
        src = (f"prefills of {dev.name or 'these runs'}: {group[1]} positions, "
               f"{group[2]} threads, {'cache' if group[4] else 'no cache'}; "
               f"{eps_p.source}")
        pc[key] = position_cost_entry(eps_p, group[1], work[key], source=src[:4096])
    return pc, notes


def _report_fit(args, dev, runs, preds, rm=None, eps_notes=()) -> int:
    """The ``timing fit`` report (JSON or text) on ``sys.stdout``."""
    for note in eps_notes:
        print(f"{args._parser.prog}: note: {note}", file=sys.stderr)
    if args.json:
        doc = json.loads(dev.to_json())
        doc["residuals"] = [p.as_dict() for p in preds]
        print(json.dumps(doc))
        return 0
    print(f"device: {dev.name}; {len(runs)} runs ({dev.serial_runs} serial, {dev.overlap_runs} "
          f"--overlap), first {dev.trim} tokens of each left out")
    print("parameter  value  (jackknife s.e.)  unit  meaning")
    for m, c in sorted(dev.compute.items()):
        print(f"  C[{m}]  {_fmt(c.value, 2)}  ({_fmt(c.se, 2)})  ms/token  compute floor")
    for k, (unit, meaning) in PARAMS.items():
        p = dev.params[k]
        shown = f"{_fmt(p.value)}  ({_fmt(p.se)})" if p.identified else "not identified (0)"
        print(f"  {k}  {shown}  {unit}  {meaning}")
    a = dev.params["a"]
    if a.identified and a.value > 0:
        print(f"flash bandwidth ceiling 1000/a: {1000.0 / a.value:.0f} MiB/s")
    print("fit residuals (mean decode tok/s over the kept tokens):")
    for p in preds:
        print(f"  {p.label}: predicted {p.predicted_tok_s:.3f}, measured {p.measured_tok_s:.3f}, "
              f"error {p.error_pct:+.1f}%")
    if rm is not None:
        _report_requests(rm)
    if dev.replicates:
        print(f"bootstrap: {len(dev.replicates)} refits over the runs stored (seed {args.seed}): "
              f"refsim whatif's band carries the parameters' spread")
    if dev.noise is not None:
        from refsim.timing.noise import stored_noise
        t = stored_noise(dev)
        print(f"run-to-run noise: sd {100 * t.value:.2f} % [{100 * t.lo:.2f}, {100 * t.hi:.2f}] of "
              f"ln tok/s of one run, {plural(dev.noise['df'], 'degree')} of freedom, from "
              f"{plural(len(dev.noise['repeats']), 'repeat')} among the runs: {t.source} "
              f"(refsim whatif's band pools it with the engine's published repeats unless "
              f"--noise-pct)")
    if dev.position_cost:
        from refsim.timing.positions import device_eps
        for key in sorted(dev.position_cost):
            e = [device_eps(dev, key, w) for w in (2, 4)]
            print(f"  eps[{key}]  extra position, fraction of C: w=2 {e[0].value:.3f} "
                  f"[{e[0].lo:.3f}, {e[0].hi:.3f}], w=4 {e[1].value:.3f} [{e[1].lo:.3f}, "
                  f"{e[1].hi:.3f}]  (prefill {dev.position_cost[key]['n_prompt']} positions and "
                  f"the tensor table; docs/whatif-terms.md)")
    print(f"wrote {args.out}")
    return 0


def _report_requests(rm) -> None:
    """The request term's lines of ``timing fit --io-model requests``."""
    from refsim.timing.requests import REQ_PARAMS
    print("serial flash by requests and lanes: io = i0 + a x + b x_lane + c rounds + d batches "
          "(each >= 0)")
    for k, (unit, meaning) in REQ_PARAMS.items():
        p = rm.params[k]
        shown = (f"{_fmt(p.value)}  ({_fmt(p.se)})" if p.identified else
                 "held at 0 (the fit drove it below 0)" if k in rm.held else "not identified (0)")
        print(f"  {k}  {shown}  {unit}  {meaning}")
    print(f"  tail  {_fmt(rm.tail)}")
    if rm.loo:
        lo = rm.loo
        print(f"leave-one-run-out |error| over {lo['runs']} runs: per MiB median "
              f"{lo['per_mib']['median_pct']:.1f}%, worst {lo['per_mib']['worst_pct']:.1f}%; by "
              f"requests median {lo['requests']['median_pct']:.1f}%, worst "
              f"{lo['requests']['worst_pct']:.1f}%: " + (
                  "--device outputs use the request term where they count requests (replay "
                  "--model, layout), the per-MiB term elsewhere" if rm.better else
                  "--device outputs use the per-MiB term, except serial layout --device: it prices by "
                  "requests, the one term that sees the requests a layout changes"))


def run_predict(args) -> int:
    dev = load_device(args.device)
    runs = _runs(args, dev.trim if args.trim is None else args.trim, 1)
    preds = [predict_run(dev, r) for r in runs]
    if args.json:
        print(json.dumps({"device": args.device, "runs": [p.as_dict() for p in preds]}))
        return 0
    for p in preds:
        print(f"{p.label}: predicted {p.predicted_tok_s:.3f} tok/s ({p.predicted_ms:.1f} ms/token), "
              f"measured {p.measured_tok_s:.3f} tok/s ({p.measured_ms:.1f} ms/token), error "
              f"{p.error_pct:+.1f}% over {p.tokens} tokens")
    return 0


def run_validate(args) -> int:
    runs = _runs(args, args.trim, 3, " (leaving one out, each fit needs 2)")
    if args.io_model == "requests":
        return _validate_pair(args, runs)
    held = leave_one_out(runs)
    errs = [abs(h.prediction.error_pct) for h in held if h.prediction is not None]
    summary = {"median_abs_error_pct": float(np.median(errs)) if errs else None,
               "worst_abs_error_pct": float(max(errs)) if errs else None,
               "predicted": len(errs), "runs": len(held)}
    if args.json:
        print(json.dumps({"holdouts": [
            {"run": h.label, **(h.prediction.as_dict() if h.prediction else {}),
             "reason": h.reason or None} for h in held], **summary}))
        return 0
    print("leave-one-run-out: each run predicted by a fit on the others (mean decode tok/s)")
    for h in held:
        if h.prediction is None:
            print(f"  {h.label}: not predicted: {h.reason}")
        else:
            p = h.prediction
            print(f"  {h.label}: predicted {p.predicted_tok_s:.3f}, measured {p.measured_tok_s:.3f}, "
                  f"error {p.error_pct:+.1f}%")
    med, worst = summary["median_abs_error_pct"], summary["worst_abs_error_pct"]
    print(f"|error|: median {_fmt(med, 1)}%, worst {_fmt(worst, 1)}% over {len(errs)} of "
          f"{len(held)} runs")
    return 0


def _validate_pair(args, runs) -> int:
    """``timing validate --io-model requests``: both models left out run by run."""
    from refsim.timing.requests import leave_one_out_pair, loo_summary, run_features
    held = leave_one_out_pair(runs, [run_features(r) for r in runs])
    summary = loo_summary(held)
    if args.json:
        rows = []
        for h in held:
            row = {"run": h.label, "reason": h.reason or None}
            for key, p in (("per_mib", h.per_mib), ("requests", h.requests)):
                row[key] = p.as_dict() if p is not None else None
            rows.append(row)
        print(json.dumps({"holdouts": rows, "summary": summary}))
        return 0
    print("leave-one-run-out, per MiB and by requests and lanes (mean decode tok/s)")
    for h in held:
        if h.per_mib is None:
            print(f"  {h.label}: not predicted: {h.reason}")
            continue
        p, q = h.per_mib, h.requests
        req = (f"by requests {q.predicted_tok_s:.3f} ({q.error_pct:+.1f}%)" if q is not None
               else f"by requests not predicted: {h.reason}")
        print(f"  {h.label}: measured {p.measured_tok_s:.3f}; per MiB {p.predicted_tok_s:.3f} "
              f"({p.error_pct:+.1f}%); {req}")
    if summary is None:
        print("no run predicted by both models")
    else:
        print(f"|error| over {summary['runs']} runs: per MiB median "
              f"{summary['per_mib']['median_pct']:.1f}%, worst {summary['per_mib']['worst_pct']:.1f}%; "
              f"by requests median {summary['requests']['median_pct']:.1f}%, worst "
              f"{summary['requests']['worst_pct']:.1f}%")
    return 0


def _eps_words(eps_of: dict) -> str:
    """``extra position ... x C`` for the breakeven header: one value, or each draft's."""
    terms = list(eps_of.values())
    if {t.kind for t in terms} == {"fitted"}:
        return "extra position eps(w) x C from the device file (" + ", ".join(
            f"d{d} {t.value:.3f}" for d, t in eps_of.items()) + ")"
    why = "--position-cost" if terms[0].source == "--position-cost" else \
        "assumed: the device file does not identify it"
    return f"extra position {terms[0].value:g} x C ({why})"


def run_breakeven(args) -> int:
    from refsim import MIB
    from refsim.cache import ExpertCache
    from refsim.studies.sweep import parse_budgets_mib
    from refsim.studies.union import union_study
    from refsim.trace import read_trace

    from refsim.timing.whatif import model_warning, resolve_model

    budgets_mib = list(dict.fromkeys(parse_budgets_mib(args.cache_mb)))   # first kept
    check_outputs({"--plot": args.plot}, {"TRACE": args.trace, "--device": args.device})
    if args.plot is not None:
        from refsim.studies.plot import plot_format, require_matplotlib
        plot_format(args.plot)          # the extension names a format we write, before any work
        require_matplotlib()
    dev = load_device(args.device)
    if args.model is not None:
        resolve_model(dev, args.model, "--model")       # a model the device lacks: before the trace
    trace = read_trace(args.trace)
    names = [trace.header.model]                        # the trace's model picks its floor
    model = resolve_model(dev, args.model, "--model", input_models=names)
    knobs = knobs_from_args(args, trace.header.n_expert_used, cmd="timing breakeven")
    widths = sorted({1} | {d + 1 for d in args.draft})
    unions = {b: union_study(trace, widths, ExpertCache.mib_to_bytes(b),
                             knobs if knobs.any_on else None) for b in budgets_mib}

    from refsim.timing.positions import resolve_eps
    eps_of = {d: resolve_eps(dev, model, d + 1, args.position_cost) for d in args.draft}

    def at(union, eps: float | None):
        """Rows of the chosen drafts at ``eps`` (None: each draft at its own width's eps)."""
        out = []
        for e in sorted({eps_of[d].value for d in args.draft} if eps is None else {eps}):
            rows = breakeven(dev, union, model, args.io_threads, args.overlap, True, e,
                             args.draft_ms, knobs=knobs.any_on)
            out += [r for r in rows if r.draft in set(args.draft)
                    and (eps is not None or eps_of[r.draft].value == e)]
        return sorted(out, key=lambda r: r.draft)

    table = {b: at(u, None) for b, u in unions.items()}
    text = model_warning(dev, args.device, model, args.model, names, "--model")
    if text is not None:      # after the work, so a refusal stays the only stderr line
        import logging
        logging.getLogger("refsim.timing").warning(text)
    mode = '--overlap' if args.overlap else 'serial'
    if args.plot is not None:
        from refsim.timing.plot import plot_breakeven, plot_breakeven_budgets
        lo, hi = EPS_INTERVAL                      # whatif's band interval (docs/timing.md)
        bands = {b: (at(u, lo), at(u, hi)) for b, u in unions.items()}
        label = f"position cost {lo:g}-{hi:g}"
        where = (f"{os.path.basename(args.trace)}; {plural(args.io_threads, 'lane')}, {mode}; predicted")
        if len(budgets_mib) == 1:
            (b,) = budgets_mib
            plot_breakeven(table[b], args.plot, (*bands[b], label),
                           title=f"break-even on {os.path.basename(args.device)} at "
                                 f"{ExpertCache.mib_to_bytes(b) / MIB:.0f} MiB ({where})")
        else:
            plot_breakeven_budgets(table, args.plot, bands, label,
                                   title=f"break-even on {os.path.basename(args.device)} "
                                         f"({where})")
    if args.json:
        rows = [{"cache_mb": ExpertCache.mib_to_bytes(b) / MIB, **r.as_dict()}
                for b, rs in table.items() for r in rs]
        print(json.dumps({"trace": args.trace, "device": args.device, "model": model,
                          "budgets_mib": [ExpertCache.mib_to_bytes(b) / MIB for b in budgets_mib],
                          "io_threads": args.io_threads, "overlap": args.overlap,
                          "position_cost": args.position_cost,
                          "eps_by_draft": {str(d): eps_of[d].value for d in args.draft},
                          "eps_source": sorted({eps_of[d].source for d in args.draft}),
                          "draft_ms": args.draft_ms,
                          "drop_cold_experts": knobs.drop_frac, "prefetch": knobs.prefetch,
                          "rows": rows}))
        return 0
    print(f"trace: {args.trace}; device: {args.device} (compute floor of {model}); "
          f"{plural(args.io_threads, 'lane')}; {mode}; {_eps_words(eps_of)}; "
          f"drafting {args.draft_ms:g} ms per drafted decode"
          + (f"; knobs --drop-cold-experts {knobs.drop_frac:g} --prefetch {knobs.prefetch}"
             if knobs.any_on else ""))
    print(f"{'budget_mib':>10}  {'plain_ms':>8}  {'plain_tok/s':>11}  {'draft':>5}  "
          f"{'MiB/decode':>10}  {'verify_ms':>9}  {'tokens_needed':>13}  {'acceptance_needed':>17}")
    for b, rows in table.items():
        for r in rows:
            print(f"{budget_mib(ExpertCache.mib_to_bytes(b)):>10}  {r.plain_ms:>8.1f}  "
                  f"{1000.0 / r.plain_ms:>11.2f}  {r.draft:>5}  {r.mib_per_decode:>10.1f}  "
                  f"{r.verify_ms:>9.1f}  {r.tokens_needed:>13.2f}  {r.acceptance_needed_pct:>16.1f}%")
    print("a drafted decode pays off when it confirms more than tokens_needed tokens, i.e. when "
          "acceptance (accepted / drafted) exceeds acceptance_needed, whatever the coverage")
    return 0
