"""``refsim replay TRACE --cache-mb N [--csv OUT] [--json]``: replay a route trace through the LRU."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json


from refsim import MIB
from refsim.cache import ExpertCache
from refsim.cli.common import (add_knob_args, cache_mib, check_outputs, knobs_from_args,
                               report_stream, warn_below_token_cycle)
from refsim.errors import ConfigError, UsageError, value_message
from refsim.fileio import open_output
from refsim.fmt import budget_mib, num, pct_text
from refsim.jit import reference_if_small
from refsim.cli.device import (add_device_args, device_figures, for_input, load_device_args, trace_names,
                               verify_width, warn_input_model,
                               n_target_decodes, n_target_positions, positions_per_decode,
                               tokens_per_decode)
from refsim.cli.io_flags import add_io_args, check_io_args, io_tally, request_writer
from refsim.studies.replay import DECODE_COLUMNS, ReplayReport, replay_trace, replay_turns
from refsim.telemetry.lines import knob_lines
from refsim.trace import iter_trace_turns, read_trace

CSV_COLUMNS = DECODE_COLUMNS
IO_CSV_COLUMNS = ("window_read_bytes", "requests")
"""Added after :data:`CSV_COLUMNS` with ``--model`` (docs/io.md)."""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "replay", help="replay a route trace through the engine's LRU expert cache",
        description="Replay a route_trace v1 file through the engine's LRU expert cache and "
                    "compare with the residency the engine recorded.")
    p.add_argument("trace", help="route trace file (route_trace v1)")
    p.add_argument("--cache-mb", required=True, metavar="N", type=cache_mib,
                   help="cache budget in MiB (2^20 bytes), 2^-20..2^40")
    p.add_argument("--policy", metavar="SPEC", default="lru",
                   help="cache policy NAME or NAME:KEY=VALUE[,KEY=VALUE] (refsim sweep --help "
                        "lists them; default: %(default)s, the engine's). Other than lru: a "
                        "summary only (no --csv, no residency comparison)")
    p.add_argument("--csv", metavar="OUT", help="write a per-decode table (CSV) to OUT (- = stdout)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.add_argument("--predict-log", action="store_true",
                   help="score the previous-token predictor and a static hot list per layer "
                        "(the engine's expert-prediction.md; decode rows)")
    add_knob_args(p, route_ahead=True, predict=True)
    add_device_args(p)
    add_io_args(p)
    p.add_argument("--stream", action="store_true",
                   help="read and replay the trace turn by turn, in memory bounded by one turn "
                        "(not by the file; a FIFO is copied to a temporary file first); the same "
                        "output as without it (--policy lru only)")
    p.set_defaults(func=run)


def write_event_csv(path: str, report: ReplayReport) -> None:
    """Per-event table: one row per decode event (prefill chunks included), by refsim.fileio's rules (``-`` = stdout)."""
    with open_output(path, "--csv") as fh:
        write = event_csv_writer(fh, report.io)
        for r in report.records:
            write(r)


def event_csv_writer(fh, io=None):
    """Write the table's header to ``fh``; returns ``write(record)`` for its rows, numbered.
    With ``io`` (an :class:`refsim.io.requests.IoTally` fed the same events first) each row adds
    :data:`IO_CSV_COLUMNS`."""
    w = csv.writer(fh, lineterminator="\n")
    w.writerow(CSV_COLUMNS + (IO_CSV_COLUMNS if io is not None else ()))
    count = [0]

    def write(r) -> None:
        row = [count[0], r.kind.name.lower(), r.first_position, r.n_pos, r.lookups, r.hits,
               r.read_bytes, r.resident_bytes]
        if io is not None:
            row += list(io.take())
        w.writerow(row)
        count[0] += 1
    return write


def summary_json(report: ReplayReport, io_summary=None) -> dict:
    """The ``--json`` object: the cache summary plus the residency comparison (and, with
    ``--model``, the windows, requests and lanes: :meth:`refsim.io.summary.IoSummary.json_keys`)."""
    out = report.summary.as_dict()
    out["residency_rows"] = report.residency_rows
    out["residency_agree"] = report.residency_agree
    if report.knobs is not None:
        out["knobs"] = report.knobs.as_dict()
    if io_summary is not None:
        out.update(io_summary.json_keys())
    return out


def print_counters(s) -> None:
    """The budget, lookup, hit and read lines of a CacheSummary (both replay paths)."""
    print(f"budget: {budget_mib(s.budget_bytes)} MiB; T (one token cycle): {num(s.t_mib, 1)} MiB")
    print(f"lookups: {s.lookups} (prefill {s.prefill_lookups}, decode {s.decode_lookups}); "
          f"hits: {s.hits}")
    print(f"hit: {pct_text(s.hit_pct_cum)} cumulative (prefill included), "
          f"{pct_text(s.hit_pct_decode)} decode-only")
    print(f"read: {num(s.read_mib, 1)} MiB in all, {num(s.decode_read_mib, 1)} MiB in decode, "
          f"{num(s.mib_per_token, 2)} MiB/token")


def print_text(trace, report: ReplayReport) -> None:
    s = report.summary
    h = trace.header
    print(f"trace: {trace.path}")
    print(f"model: {h.model} arch={h.arch} n_layer={h.n_layer} n_expert={h.n_expert} "
          f"n_expert_used={h.n_expert_used}")
    print(f"events: {trace.n_events} ({trace.n_prompt} prompt positions in turn 0, {s.tokens} "
          f"decoded tokens), {trace.n_rows} rows")
    print_counters(s)
    print(f"resident: {num(s.resident_bytes / MIB, 1)} MiB; {s.evictions} evictions, "
          f"{s.rereads} re-reads")
    if report.knobs is not None:
        for line in knob_lines(report.knobs):
            print(line)
    if report.residency_rows:
        n_bad = report.residency_rows - report.residency_agree
        listed = (f"; the first {len(report.disagreements)} of the {n_bad} that differ:"
                  if n_bad > len(report.disagreements) else ":" if n_bad else "")
        print(f"residency: {report.residency_agree} of {report.residency_rows} rows agree with "
              f"the engine's record{listed}")
        recorded = dict(h.extra).get("cache_mb")
        if report.residency_agree < report.residency_rows and recorded is not None:
            try:       # the recorded budget converted as --cache-mb is (ExpertCache.mib_to_bytes)
                same = ExpertCache.mib_to_bytes(float(recorded)) == s.budget_bytes
            except (ValueError, ConfigError):
                same = True                          # an unreadable cache_mb= says nothing
            if not same:
                print(f"  (the preamble says the trace was recorded at cache_mb={recorded}; at another "
                      f"budget the residency is expected to differ)")
        if report.residency_agree < report.residency_rows and report.knobs is not None:
            print("  (--drop-cold-experts/--prefetch/--route-ahead change what is resident: rows differ "
                  "from a record made without the same knobs)")
        for d in report.disagreements:
            print(f"  line {d.line}: step={d.step} layer={d.layer} slot={d.slot} "
                  f"expert={d.expert} recorded={d.recorded} replayed={d.replayed}")
    silent = trace.unrouted_layers
    if silent:
        print(f"note: layer(s) {', '.join(map(str, silent))} of the preamble route no row in the whole "
              f"trace: an --mtp run's trace (the engine does not record the MTP head's draft routings), "
              f"so this replay lacks the head's lookups and reads, and T counts the head's entries")


def run_policy(args, trace, policy, budget: int) -> int:
    """``--policy`` other than the engine's lru: replay the layer batches under ``policy``."""
    from refsim.cache.batches import BatchTrace
    from refsim.cache.replay import replay_policy

    h = trace.header
    bt = BatchTrace.from_block(trace.block, h.expert_bytes, h.n_expert)
    s = replay_policy(bt, policy, budget).summary(h.token_cycle_bytes)
    warn_below_token_cycle("replay", [budget], s.t_bytes)
    if args.json:
        out = s.as_dict()
        out["policy"] = policy.label
        print(json.dumps(out))
        return 0
    print(f"trace: {trace.path}")
    print(f"policy: {policy.label}")
    print_counters(s)
    print(f"resident: {num(s.resident_bytes / MIB, 1)} MiB; {s.evictions} evictions")
    return 0


def stream_replay(args, budget: int, stack):
    """``--stream``: the turns of :func:`refsim.trace.iter_trace_turns` through one LRU, the CSV
    rows written as each event is replayed (the file appears, atomically, at the end)."""
    stream, turns = iter_trace_turns(args.trace)
    io = make_io(args, stream.header, stack)
    stream.n_decodes = 0                     # target decodes, for --device's tokens per decode
    stream.n_positions = 0                   # and their positions, for its compute

    def counted(parts):
        for part in parts:
            stream.n_decodes += n_target_decodes(part)
            stream.n_positions += n_target_positions(part)
            yield part

    turns = counted(turns)
    with contextlib.ExitStack() as csv_stack:
        on_record = None
        if args.csv is not None:
            on_record = event_csv_writer(csv_stack.enter_context(open_output(args.csv, "--csv")), io)
        knobs = knobs_from_args(args, stream.header.n_expert_used)
        report = replay_turns(stream.header, turns, budget, on_record=on_record, knobs=knobs,
                              keep_records=False, io=io)  # memory independent of the trace's length
        stream.require_rows("replay")
    return stream, report


def make_io(args, header, stack):
    """The replay's :class:`refsim.io.requests.IoTally` (None without ``--model``), its
    ``--requests`` table opened on ``stack``.

    Raises
    ------
    UsageError
        ``--model`` with a knob whose speculative reads the windows do not cover.
    """
    if args.io_model is None:
        return None
    knobs = [f for f, on in (("--prefetch", args.prefetch), ("--route-ahead", args.route_ahead),
                             ("--predict-prefetch", args.predict_prefetch)) if on]
    if knobs:
        raise UsageError(f"--model with {knobs[0]}: the windows cover demand reads only; the "
                         f"speculative reads' slices are not modelled (docs/io.md)")
    io = io_tally(args, header, args.trace)
    if args.requests is not None:
        io.on_requests = request_writer(stack.enter_context(open_output(args.requests, "--requests")),
                                        io.layout)
    return io


def device_by_requests(args, device, io_summary, trace, report, per_mib):
    """With ``--device`` of a device file that carries the request term (``timing fit --io-model
    requests``) and ``--model`` (the exact requests): both predictions and which is used -- the
    request term where its leave-one-out median error on the device's runs is at most the per-MiB
    term's (:attr:`refsim.timing.requests.RequestModel.better`), else the per-MiB term, said so.
    None otherwise. Under ``--overlap`` the request term does not apply (the stall is per MiB)."""
    if device is None or io_summary is None or device[0].requests is None:
        return None
    import numpy as np

    from refsim.timing.requests import IoFeatures, requests_from_json
    from refsim.timing.whatif import request_whatif
    dev, name, model = device
    rm = requests_from_json(name, dev.requests, dev)
    loo = rm.loo
    why = ("no leave-one-out on the device's runs" if not loo else
           f"leave-one-out median |error| {loo['requests']['median_pct']:.1f}% by requests, "
           f"{loo['per_mib']['median_pct']:.1f}% per MiB")
    if args.overlap:
        return {"used": "per_mib", "requests": None, "loo": loo, "whatif": None,
                "line": "  io: the request term describes serial reads; under --overlap the "
                        "stall is per MiB"}
    gen = report.summary.tokens
    decodes = getattr(trace, "n_decodes", None) or n_target_decodes(trace)
    if not decodes or not gen:
        return None
    f = IoFeatures(*(np.array([v / decodes]) for v in (
        io_summary.decode_window_read_bytes / MIB,
        (io_summary.lane_bytes_per_token or 0.0) * gen / MIB,
        io_summary.decode_rounds, io_summary.decode_batches)))
    from refsim.timing.device_options import DeviceOptions
    req = request_whatif(rm, name, f, tokens_per_decode(trace, gen), model, args.io_threads,
                         args.overlap,
                         DeviceOptions.from_args(args).eps(device, verify_width(trace.events)),
                         positions_per_decode=positions_per_decode(trace))
    used = "requests" if rm.better else "per_mib"
    other = per_mib if used == "requests" else req
    label = "per MiB" if used == "requests" else "by requests and lanes"
    line = (f"  io {'by requests and lanes' if used == 'requests' else 'per MiB'} ({why}); "
            f"{label}: {other.predicted_s_per_token:.4f} s/token, {other.predicted_tok_s:.3f} "
            f"tok/s")
    return {"used": used, "requests": req.as_dict(), "per_mib": per_mib.as_dict(), "loo": loo,
            "whatif": req, "line": line}


def run(args) -> int:
    budget = ExpertCache.mib_to_bytes(args.cache_mb)
    if args.policy != "lru":        # the registry (every policy's module) only when another is named
        from refsim.cache.policies import parse_policy_list
        policies = parse_policy_list(args.policy)
        if len(policies) != 1:
            raise UsageError(value_message("--policy", "one policy (refsim sweep takes several)",
                                           args.policy))
        policy = policies[0]
    check_io_args(args)
    if args.policy != "lru" and policy.label != "lru":
        if args.stream:
            raise UsageError(f"--stream with --policy {policy.label}: streaming needs --policy lru")
        if args.csv is not None:
            raise UsageError(f"--csv with --policy {policy.label}: the per-decode table needs "
                             f"--policy lru")
        trace = read_trace(args.trace)
        trace.require_rows("replay")
        if knobs_from_args(args, trace.header.n_expert_used).any_on or args.predict_log or \
                args.device is not None or args.io_model is not None:
            raise UsageError(f"--policy {policy.label}: the streaming knobs, --predict-log, "
                             f"--device and --model act on the engine's LRU replay only; expected "
                             f"--policy lru")
        return run_policy(args, trace, policy, budget)
    check_outputs({"--csv": args.csv, "--requests": args.requests},
                  {"TRACE": args.trace, "GGUF": args.io_model})
    device = load_device_args(args, defer=True)
    with contextlib.ExitStack() as stack:
        if args.stream:
            if args.predict_log:
                raise UsageError("--stream with --predict-log: the predictors score the whole "
                                 "trace; drop --stream")
            trace, report = stream_replay(args, budget, stack)
        else:
            with reference_if_small(args.trace):  # a small trace never imports Numba (refsim.jit)
                trace = read_trace(args.trace)
                trace.require_rows("replay")
                knobs = knobs_from_args(args, trace.header.n_expert_used)
                io = make_io(args, trace.header, stack)
                report = replay_trace(trace, budget, knobs=knobs, io=io)
    device = for_input(args, device, trace_names([trace.header]))    # the trace's model's floor
    warn_below_token_cycle("replay", [budget], report.summary.t_bytes)
    warn_input_model(args, device, trace_names([trace.header]))
    io_summary = None
    if report.io is not None:
        from refsim.io.summary import IoSummary
        io_summary = IoSummary.from_tally(report.io, report.summary.tokens)
    if args.csv is not None and not args.stream:
        write_event_csv(args.csv, report)
    pred = None
    if args.predict_log:
        from refsim.studies.predict import predict_log
        pred = predict_log(trace)
    # the device was fitted on the engine's read_bytes, which are windows: with --model, price those
    mib = (io_summary.window_mib_per_token if io_summary is not None
           else report.summary.mib_per_token)
    timed = device_figures(args, device, mib,                  # None (no decoded token): n/a
                           tokens_per_decode(trace, report.summary.tokens),
                           positions_per_decode=positions_per_decode(trace),
                           width=verify_width(trace.events) if device is not None else None)
    by_req = device_by_requests(args, device, io_summary, trace, report, timed)
    if by_req is not None and by_req["used"] == "requests":
        timed = by_req["whatif"]
    with contextlib.redirect_stdout(report_stream({"--csv": args.csv,
                                                   "--requests": args.requests})):
        if args.json:
            out = summary_json(report, io_summary)
            if timed is not None:
                out["device"] = timed.as_dict()
            if by_req is not None:
                out["device_io"] = {k: v for k, v in by_req.items() if k not in ("whatif", "line")}
            if pred is not None:
                out["predict"] = {n: dataclasses.asdict(s) | {"hit_pct": s.hit_pct,
                                                              "exact_pct": s.exact_pct}
                                  for n, s in pred.total.items()}
            print(json.dumps(out))
        else:
            print_text(trace, report)
            if io_summary is not None:
                print(io_summary.line())
            if timed is not None:
                print(timed.line())
            if by_req is not None:
                print(by_req["line"])
            if pred is not None:
                from refsim.studies.predict import predict_lines
                for line in predict_lines(pred):
                    print(line)
    return 0
