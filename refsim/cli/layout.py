"""``refsim layout MODEL.gguf TRACE... --cache-mb N``: the file layout as a what-if (docs/io.md,
"File layout"; issue 28 item 3)."""

from __future__ import annotations

import json

from refsim.cli.common import cache_mib, nonneg_int
from refsim.cli.device import (add_device_args, device_figures, for_input, gguf_names, trace_names,
                               verify_width, warn_input_model)
from refsim.cli.io_flags import block_size
from refsim.errors import ConfigError, UsageError
from refsim.fmt import plural
from refsim.io.window import ENGINE_BLOCK_BYTES

COLUMNS = ("trace", "layout", "eval_decodes", "tokens", "slices_per_token", "requests_per_token",
           "window_mib_per_token", "predicted_ms_per_token", "time_model")


def fraction(text: str) -> float:
    """``type=`` validator of ``--fit-fraction``: a number strictly between 0 and 1."""
    import argparse
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def turn_list(text: str) -> list[int]:
    """``type=`` validator of ``--fit-turns``/``--eval-turns``: comma-separated turn numbers."""
    import argparse
    try:
        out = sorted({int(t) for t in text.split(",")})
    except ValueError:
        out = []
    if not out or out[0] < 0 or out[-1] > 2**31 - 1:
        raise argparse.ArgumentTypeError(f"expected turn numbers like 0,2, each an integer in "
                                         f"0..2147483647, got {text!r}")
    return out


def add_parser(sub) -> None:
    p = sub.add_parser(
        "layout", help="the file layout as a what-if: co-activated experts adjacent, merged reads",
        description="Propose, per layer, an order of the expert slices that places co-activated "
                    "experts adjacent (greedy chain on the co-activation graph of the fitting "
                    "decodes; refsim.io.placement), and report reads per token, merged requests "
                    "and window MiB/token before and after on held-apart decodes, replayed "
                    "through the engine's LRU. Writes the permutation, never a model.")
    p.add_argument("model", metavar="MODEL.gguf",
                   help="the GGUF the traces were recorded with, or its header-only twin")
    p.add_argument("trace", nargs="+", metavar="TRACE", help="route trace files (route_trace v1)")
    p.add_argument("--cache-mb", type=cache_mib, required=True, metavar="N",
                   help="cache budget in MiB for the replay")
    split = p.add_mutually_exclusive_group()
    split.add_argument("--fit-fraction", type=fraction, default=None, metavar="F",
                       help="fit on the first F of each trace's decodes, evaluate on the rest "
                            "(default 0.5 without --fit-turns)")
    split.add_argument("--fit-turns", type=turn_list, metavar="T,..",
                       help="fit on these turns' decodes (with --eval-turns)")
    p.add_argument("--eval-turns", type=turn_list, metavar="T,..",
                   help="with --fit-turns: evaluate on these turns' decodes (disjoint from the "
                        "fitting turns)")
    p.add_argument("--merge-gap", type=nonneg_int, default=0, metavar="BYTES",
                   help="merge slices of one decode and layer whose file gap is <= BYTES into one "
                        "request (default 0: touching slices; the engine itself does not merge)")
    p.add_argument("--data-start", type=nonneg_int, metavar="BYTES",
                   help="the real file's data-section offset when MODEL is a header-only twin")
    p.add_argument("--block-size", type=block_size, default=ENGINE_BLOCK_BYTES, metavar="BYTES",
                   help=f"O_DIRECT alignment (default {ENGINE_BLOCK_BYTES}, the engine's)")
    p.add_argument("--out", metavar="PERM.json",
                   help="write the permutation (per layer, the expert at each slice position)")
    p.add_argument("--json", action="store_true", help="print the table as one JSON object")
    add_device_args(p)
    p.set_defaults(func=run)


def split_events(trace, args):
    """``(fit, evaluate)``: the trace's generation decodes (:data:`GENERATION_KINDS`) as event
    indices, by ``--fit-turns``/``--eval-turns`` or ``--fit-fraction`` (default 0.5, in order)."""
    from refsim.cache.summary import GENERATION_KINDS
    dec = [i for i, ev in enumerate(trace.events) if ev.kind in GENERATION_KINDS]
    if args.fit_turns is not None:
        fit = [i for i in dec if trace.events[i].turn in args.fit_turns]
        ev = [i for i in dec if trace.events[i].turn in args.eval_turns]
        return fit, ev
    n_fit = int(len(dec) * (args.fit_fraction or 0.5))
    return dec[:n_fit], dec[n_fit:]


def evaluate(trace, records, indices, layout, cfg):
    """The :class:`refsim.io.summary.IoSummary` of the events ``indices`` read under ``layout``."""
    from refsim.events import confirmed_tokens
    from refsim.io.requests import IoTally
    from refsim.io.summary import IoSummary
    tally = IoTally(layout, cfg)
    tokens = 0
    for i in indices:
        ev = trace.events[i]
        tally.add_event(ev.kind, ev.routes, records[i].charged_bytes)
        tokens += confirmed_tokens(ev)
    return IoSummary.from_tally(tally, tokens), tokens


def predicted_ms(args, device, s, trace, indices, tokens):
    """``(ms/token, time model)`` of an evaluation on ``--device``, or ``(None, None)``.

    The request and lane term (:mod:`refsim.timing.requests`, ``timing fit --io-model
    requests``) when the device file carries it and the reads are serial: it prices the
    requests, rounds and layer batches the layout changes; otherwise the per-MiB term at the
    window MiB (it sees the layout only through the window bytes). Features per target decode, as
    ``replay --model --device`` forms them.
    """
    if device is None or not tokens or s.window_mib_per_token is None:
        return None, None
    from refsim import MIB
    from refsim.events import DecodeKind
    target = [trace.events[i] for i in indices
              if trace.events[i].kind in (DecodeKind.PLAIN, DecodeKind.VERIFY)]
    decodes = len(target)
    tpd = max(1.0, tokens / decodes) if decodes else 1.0
    # the compute is paid per position, rejected drafts included (issue 29 item 1)
    ppd = max(tpd, sum(e.n_pos for e in target) / decodes) if decodes else 1.0
    dev, name, model = device
    if dev.requests is None or args.overlap or not decodes:
        whatif = device_figures(args, device, s.window_mib_per_token, tpd,
                                positions_per_decode=ppd, width=verify_width(target))
        return 1000.0 * whatif.predicted_s_per_token, "per_mib"
    import numpy as np

    from refsim.timing.requests import IoFeatures, requests_from_json
    from refsim.timing.whatif import request_whatif
    rm = requests_from_json(name, dev.requests, dev)
    f = IoFeatures(*(np.array([v / decodes]) for v in (
        s.decode_window_read_bytes / MIB, (s.lane_bytes_per_token or 0.0) * tokens / MIB,
        s.decode_rounds, s.decode_batches)))
    from refsim.timing.device_options import DeviceOptions
    whatif = request_whatif(rm, name, f, tpd, model, args.io_threads, args.overlap,
                            DeviceOptions.from_args(args).eps(device, verify_width(target)),
                            positions_per_decode=ppd)
    return 1000.0 * whatif.predicted_s_per_token, "requests"


def check_args(args) -> None:
    if (args.fit_turns is None) != (args.eval_turns is None):
        raise UsageError("--fit-turns and --eval-turns go together")
    if args.fit_turns is not None and set(args.fit_turns) & set(args.eval_turns):
        raise UsageError(f"--eval-turns {','.join(map(str, args.eval_turns))}: expected turns "
                         f"held apart from --fit-turns")


def run(args) -> int:
    from refsim.cache import ExpertCache
    from refsim.fileio import check_outputs, write_text_atomic
    from refsim.io.layout import layout_from_model
    from refsim.io.placement import fit_layout
    from refsim.io.requests import IoConfig
    from refsim.model import open_model
    from refsim.studies.replay import replay_trace
    from refsim.trace import read_trace

    check_args(args)
    check_outputs({"--out": args.out}, {"MODEL.gguf": args.model,
                                        **{f"TRACE {t}": t for t in args.trace}})
    from refsim.timing.device_options import DeviceOptions
    device = DeviceOptions.from_args(args).load(True, defer=True)   # --io-threads/--overlap: the lanes
    budget = ExpertCache.mib_to_bytes(args.cache_mb)
    model = open_model(args.model)
    layout = layout_from_model(model, args.block_size, True, args.data_start)
    parts = []
    for path in args.trace:
        trace = read_trace(path)
        trace.require_rows("layout")
        layout.check_trace(trace.header, path)
        fit, ev = split_events(trace, args)
        if not ev:
            raise ConfigError(f"{path}: no decode to evaluate on (the split leaves none held "
                              f"apart)")
        parts.append((path, trace, fit, ev))
    # the model's own floor: the GGUF's names, then the traces' (a header-only twin's file name
    # is its own, the traces name the model they were recorded with)
    names = gguf_names(args.model, model) + trace_names(p[1].header for p in parts)
    device = for_input(args, device, names)
    fit_events = [p[1].events[i] for p in parts for i in p[2]]
    if not fit_events:
        raise ConfigError(f"{args.trace[0]}: no decode to fit the layout on")
    slot_of = fit_layout(fit_events, layout.n_layer, layout.n_expert)
    after = layout.permuted(slot_of)
    cfg = IoConfig(args.io_threads, args.overlap, args.merge_gap)
    rows = []
    for path, trace, fit, ev in parts:
        records = replay_trace(trace, budget).records
        for name, lay in (("file", layout), ("co-activation", after)):
            s, tokens = evaluate(trace, records, ev, lay, cfg)
            ms, used = predicted_ms(args, device, s, trace, ev, tokens)
            rows.append({"trace": path, "layout": name, "eval_decodes": len(ev),
                         "tokens": tokens, "slices_per_token": s.slices_per_token,
                         "requests_per_token": s.requests_per_token,
                         "window_mib_per_token": s.window_mib_per_token,
                         "predicted_ms_per_token": ms, "time_model": used})
    warn_input_model(args, device, names)      # after the work: a refusal stays the only line
    if args.out is not None:
        doc = {"format": "refsim-layout v1", "model": args.model, "fit_decodes":
               len(fit_events), "method": "greedy chain on per-layer co-activation",
               "order": [[int(e) for e in row.argsort()] for row in slot_of]}
        write_text_atomic(args.out, json.dumps(doc) + "\n", "--out")
    if args.json:
        print(json.dumps({"merge_gap": args.merge_gap, "fit_decodes": len(fit_events),
                          "rows": rows}))
        return 0
    print(f"layout: {args.model}; fitted on {len(fit_events)} decodes; held-apart decodes "
          f"evaluated; --merge-gap {args.merge_gap}, block {args.block_size} B, "
          f"{plural(cfg.lanes, 'lane')} {'--overlap' if args.overlap else 'serial'}")
    print(",".join(COLUMNS))
    for r in rows:
        print(",".join(_cell(r[c]) for c in COLUMNS))
    return 0


def _cell(v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)
