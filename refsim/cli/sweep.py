"""``refsim sweep TRACE --cache-mb LIST --policy LIST [--csv OUT] [--plot OUT.png]``."""

from __future__ import annotations

import json

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.cache.policies import parse_policy_list
from refsim.cli.common import (add_knob_args, check_outputs, knobs_from_args, report_stream,
                               warn_below_token_cycle)
from refsim.cli.device import (add_device_args, device_figures, for_input, load_device_args, trace_names,
                               warn_input_model,
                               n_target_decodes, n_target_positions, positions_per_decode,
                               tokens_per_decode)
from refsim.errors import UsageError
from refsim.fmt import num, plural
from refsim.scale.executor import ExecutorSpec, add_executor_args, require_dask
from refsim.scale.grid import TraceRef, pool_sweep, prefixed, remember, sweep_grid
from refsim.scale.inputs import expand_traces
from refsim.studies.sweep import (DEFAULT_BUDGETS_MIB, SWEEP_CSV_COLUMNS, default_policies,
                                  format_table, known_policies, parse_budgets_mib,
                                  sweep_csv_rows, write_sweep_csv)
from refsim.trace import read_trace


def add_parser(sub) -> None:
    p = sub.add_parser(
        "sweep", help="hit %% and flash MiB of a route trace at many budgets under many policies",
        description="Replay a route trace at every cache budget under every policy (exact; the "
                    "lru column from the one-pass curve). Output as the engine's route-replay.py.")
    p.add_argument("trace", nargs="+", metavar="TRACE",
                   help="route trace files (route_trace v1), globs or folders of *.route.csv; with "
                        "more than one, per-trace rows (a trace column) and the pooled rows "
                        "(docs/scale.md)")
    p.add_argument("--cache-mb", metavar="LIST",
                   default=",".join(str(b) for b in DEFAULT_BUDGETS_MIB),
                   help="budgets in MiB: N,N,... or START:STOP:STEP; a repeated budget is "
                        "dropped (first kept) (default: %(default)s)")
    p.add_argument("--policy", metavar="LIST", default=None,
                   help="policies, comma-separated, each NAME or NAME:KEY=VALUE[,KEY=VALUE] "
                        "(e.g. lru,s3fifo:small=0.2,ghost=0.9,arc); a repeated one is dropped "
                        f"(first kept) (default: all: {','.join(known_policies())})")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object instead of the tables (keys: docs/cache-studies.md)")
    p.add_argument("--csv", metavar="OUT",
                   help="write budget_mib,policy,hit_pct_cum,hit_pct_decode,read_mib,over_budget "
                        "to OUT (- = stdout)")
    p.add_argument("--plot", metavar="OUT.png",
                   help="write a plot of hit %% and MiB/token against the budget (matplotlib); "
                        "the format is the extension's: .png, .pdf or .svg")
    add_knob_args(p, route_ahead=True)
    add_device_args(p)
    add_executor_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    budgets = parse_budgets_mib(args.cache_mb)
    policies = parse_policy_list(args.policy) if args.policy is not None else known_policies()
    spec = ExecutorSpec.from_args(args)
    paths = expand_traces(args.trace)
    many = len(paths) > 1
    if many and args.plot is not None:
        raise UsageError(f"--plot with {len(paths)} traces: the plot is of one trace; give one "
                         f"TRACE (the table and --csv hold every trace and the pooled rows)")
    check_outputs({"--csv": args.csv, "--plot": args.plot},
                  {"TRACE": paths[0]} if not many else {f"TRACE {p}": p for p in paths})
    if spec.dask is not None:
        require_dask()
    if args.plot is not None:
        from refsim.studies.plot import plot_format, require_matplotlib
        plot_format(args.plot)  # the extension names a format we write
        require_matplotlib()  # before the sweep, not after it
    device = load_device_args(args, defer=True)
    facts, refs, knobs, warned = [], [], None, set()
    for path in paths:                 # every trace is checked before any cell runs
        trace = read_trace(path)
        trace.require_rows("sweep")
        h = trace.header
        if h.n_expert_used not in warned:
            warned.add(h.n_expert_used)
            knobs = knobs_from_args(args, h.n_expert_used)
        ref = TraceRef.of(path)
        remember(ref, trace)
        refs.append(ref)
        facts.append((path, h, trace.n_prompt, _Decodes(n_target_decodes(trace),
                                                        n_target_positions(trace))))
        del trace
    device = for_input(args, device, trace_names(h for _, h, _, _ in facts))   # their model's floor
    if knobs.any_on and args.policy is None:
        policies = default_policies(knobs)    # the knobs exist for the engine's LRU only
    results = sweep_grid(refs, budgets, policies, knobs, spec)
    t_all = [h.token_cycle_bytes for _, h, _, _ in facts]
    warn_below_token_cycle("sweep", [ExpertCache.mib_to_bytes(b) for b in budgets], max(t_all))
    warn_input_model(args, device, trace_names(h for _, h, _, _ in facts))
    out = report_stream({"--csv": args.csv})   # stderr when the CSV goes to stdout
    if args.json:
        tok_all = None
        if device is not None:
            tok_all = [[_tok_s(args, device, r, f[3], res.tokens) for r in res.rows]
                       for f, res in zip(facts, results)]
        doc = {"traces": [dict(_trace_json(path, h, n_prompt, res),
                               rows=_rows_json(res, tok_all[i] if tok_all else None))
                          for i, ((path, h, n_prompt, _), res) in enumerate(zip(facts, results))]}
        if many:
            pooled = pool_sweep(results)
            ptok = None
            if device is not None:
                ptok = [_tok_s(args, device, r, _pooled(facts), pooled.tokens) for r in pooled.rows]
            doc["pooled"] = {"n_batch": pooled.n_batch, "tokens": pooled.tokens,
                             "rows": _rows_json(pooled, ptok)}
        print(json.dumps(doc), file=out)
        if args.csv is not None and not many:
            write_sweep_csv(args.csv, results[0], tok_all[0] if tok_all else None)
        return 0
    for (path, h, n_prompt, _), result in zip(facts, results):
        if many:
            print(f"trace: {path}", file=out)
        print(f"model: {h.model} arch={h.arch}", file=out)
        print(f"shape: {h.n_layer} layers, {h.n_expert} experts, top-{h.n_expert_used}, "
              f"{num(h.expert_bytes[0] / MIB, 2)} MiB/expert (layer 0)", file=out)
        print(f"batches: {result.n_batch} ({n_prompt} prompt positions in turn 0, "
              f"{result.tokens} decoded tokens); T = {num(h.token_cycle_bytes / MIB, 1)} MiB", file=out)
    if knobs.any_on:
        print(f"knobs: --drop-cold-experts {knobs.drop_frac:g} --prefetch {knobs.prefetch} "
              f"--route-ahead {knobs.route_ahead}; "
              f"one ExpertCache replay per budget (dropped, spec_MiB, useful: decode only)", file=out)
    tok_s = pooled_tok_s = None
    if device is not None:
        tok_s = [[_tok_s(args, device, r, f[3], res.tokens) for r in res.rows]
                 for f, res in zip(facts, results)]
        d = device_figures(args, device, 0.0)
        print(f"pred_tok/s: device {args.device} (predicted, not measured; {plural(d.io_threads, 'lane')}, "
              f"{'--overlap' if d.overlap else 'serial'}, compute floor of {d.model})", file=out)
    if not many:
        result, tok_s = results[0], tok_s[0] if tok_s is not None else None
        for line in format_table(result, tok_s):
            print(line, file=out)
        if args.csv is not None:
            write_sweep_csv(args.csv, result, tok_s)
        if args.plot is not None:
            from refsim.studies.plot import plot_sweep
            h = facts[0][1]
            plot_sweep(result, args.plot, title=f"{h.model.rsplit('/', 1)[-1]}: cache budget sweep",
                       tok_s=tok_s)
        return 0
    pooled = pool_sweep(results)
    if device is not None:
        pooled_tok_s = [_tok_s(args, device, r, _pooled(facts), pooled.tokens)
                        for r in pooled.rows]
    width = max(len("trace"), *(len(p) for p in paths))
    note = None
    for i, (path, result) in enumerate(zip(paths, results)):
        lines = format_table(result, tok_s[i] if tok_s is not None else None)
        n = len(result.rows) + 1
        note = lines[n] if len(lines) > n else note      # the "holds Nx" note, once
        for line in prefixed("trace", width, lines[:1]) * (i == 0) + prefixed(path, width, lines[1:n]):
            print(line, file=out)
    if note is not None:
        print(note, file=out)
    print(f"pooled over {len(paths)} traces (counters and bytes summed over the traces, rates the "
          f"ratios of the sums; docs/scale.md): {pooled.n_batch} batches, {pooled.tokens} decoded "
          f"tokens", file=out)
    for line in format_table(pooled, pooled_tok_s):
        print(line, file=out)
    if args.csv is not None:
        write_many_csv(args.csv, paths, results, tok_s, pooled, pooled_tok_s)
    return 0


class _Decodes:
    """What :func:`tokens_per_decode` and :func:`positions_per_decode` read of a trace: its
    counts of target decodes and of their positions."""

    def __init__(self, n_decodes: int, n_positions: int):
        self.n_decodes = n_decodes
        self.n_positions = n_positions


def _pooled(facts) -> _Decodes:
    """The traces' decodes and positions summed (the pooled rows)."""
    return _Decodes(sum(f[3].n_decodes for f in facts), sum(f[3].n_positions for f in facts))


def _tok_s(args, device, r, decodes: _Decodes, tokens: int) -> float:
    """Predicted tok/s of sweep point ``r``: its MiB/token, the trace's tokens and positions per
    target decode (the compute is paid per position: issue 29 item 1); None (``n/a``) when the
    trace decoded no token."""
    return device_figures(args, device, r.summary.mib_per_token,   # None (no token): n/a
                          tokens_per_decode(decodes, tokens),
                          positions_per_decode=positions_per_decode(decodes)).predicted_tok_s


def write_many_csv(path, paths, results, tok_s, pooled, pooled_tok_s) -> None:
    """``--csv`` of many traces: a first column ``trace`` (the path as given), then the one-trace
    columns; the per-trace rows in trace order, then the pooled rows (``trace`` = ``(pooled)``)."""
    import csv
    from refsim.fileio import open_output
    from refsim.scale.grid import POOLED
    with open_output(path, "--csv") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(("trace",) + SWEEP_CSV_COLUMNS + (("predicted_tok_s",) if tok_s is not None else ()))
        for i, (p, res) in enumerate(zip(paths, results)):
            w.writerows([p] + row for row in sweep_csv_rows(res, tok_s[i] if tok_s is not None else None))
        w.writerows([POOLED] + row for row in sweep_csv_rows(pooled, pooled_tok_s))


def _trace_json(path, h, n_prompt, res) -> dict:
    """One trace's identity in ``sweep --json`` (docs/cache-studies.md)."""
    return {"path": path, "model": h.model, "arch": h.arch, "n_layer": h.n_layer,
            "n_expert": h.n_expert, "n_expert_used": h.n_expert_used, "n_prompt": n_prompt,
            "t_bytes": int(h.token_cycle_bytes), "n_batch": res.n_batch, "tokens": res.tokens}


def _rows_json(res, tok_s) -> list[dict]:
    """``sweep --json``'s points: budget and policy, every CacheSummary field at full precision,
    ``over_budget``, the knob counters (null without a knob) and ``predicted_tok_s`` (null
    without ``--device``)."""
    return [{"budget_mib": r.budget_mib, "policy": r.policy, **r.summary.as_dict(),
             "over_budget": r.over_budget,
             "knobs": r.knobs.as_dict() if r.knobs is not None else None,
             "predicted_tok_s": tok_s[i] if tok_s is not None else None}
            for i, r in enumerate(res.rows)]
