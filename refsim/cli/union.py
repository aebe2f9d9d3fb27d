"""``refsim union TRACE --window 1..8 [--cache-mb N]``: the verify-batch widening study."""

from __future__ import annotations

import dataclasses
import json

from refsim.cache import ExpertCache
from refsim.cli.common import (add_knob_args, cache_mib, draft_width, fraction, int_list, knobs_from_args,
                               seed, warn_below_token_cycle)
from refsim.cli.device import (add_device_args, device_figures, eps_line, for_input, load_device_args,
                               trace_names, warn_input_model)
from refsim.errors import UsageError
from refsim.fmt import NA, budget_mib, num, plural, ratio
from refsim.scale.executor import ExecutorSpec, add_executor_args, require_dask
from refsim.scale.grid import TraceRef, pool_union, prefixed, remember, union_grid
from refsim.scale.inputs import expand_traces
from refsim.trace import read_trace


def add_parser(sub) -> None:
    p = sub.add_parser(
        "union", help="per-layer expert union and flash MiB of verify batches of width w",
        description="For windows of w consecutive decode positions: the per-layer union of the "
                    "top-k sets (mean, p50, p90) and, with --cache-mb, the flash MiB a verify "
                    "batch of width w would read (decode positions replayed in batches of w).")
    p.add_argument("trace", nargs="+", metavar="TRACE",
                   help="route trace files (route_trace v1), globs or folders of *.route.csv; with "
                        "more than one, per-trace rows (a trace column) and the pooled rows "
                        "(docs/scale.md)")
    p.add_argument("--window", type=int_list(1), default=list(range(1, 9)), metavar="W",
                   help="window widths: N, N,M,... or A..B (default 1..8)")
    p.add_argument("--cache-mb", metavar="N", type=cache_mib,
                   help="cache budget in MiB for the replay (omit: union sizes only)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object instead of the table (keys: docs/cache-studies.md)")
    g = p.add_argument_group("draft policy on an acceptance stream (docs/spec-policies.md)")
    g.add_argument("--spec-policy", action="append", default=None, metavar="NAME[:K=V,...]",
                   help="also replay the decode positions as the loop with this draft policy would decode "
                        "them (fixed, backoff, cost, union; repeatable), against no drafts and fixed; needs "
                        "--cache-mb")
    g.add_argument("--draft", type=draft_width, default=None, metavar="N",
                   help="--spec-policy: the candidate's draft tokens per step, 1..8 (default 3)")
    g.add_argument("--accept", type=fraction, default=None, metavar="F",
                   help="--spec-policy: acceptance of a --draft N verify on the stream, in [0, 1) "
                        "(default 0.5)")
    g.add_argument("--coverage", type=fraction, default=None, metavar="F",
                   help="--spec-policy: share of steps with a candidate, in [0, 1] (default 1)")
    g.add_argument("--seed", type=seed, default=None, metavar="N",
                   help="--spec-policy: the acceptance stream's seed (default 0)")
    add_knob_args(p)
    add_device_args(p)
    add_executor_args(p)
    p.set_defaults(func=run)


POLICY_STREAM = {"draft": 3, "accept": 0.5, "coverage": 1.0, "seed": 0}
"""Defaults of the acceptance stream ``--spec-policy`` replays on (:mod:`refsim.studies.spec_policy`)."""


def _policy_args(args, budget) -> dict | None:
    """The stream's settings when ``--spec-policy`` is given (None otherwise); usage errors for a
    stream flag without it, for it without ``--cache-mb``, and ``--accept 1``."""
    given = [f"--{k}" for k in POLICY_STREAM if getattr(args, k) is not None]
    if not args.spec_policy:
        if given:
            raise UsageError(f"{given[0]} without --spec-policy: it sets the acceptance stream the policies "
                             f"replay on")
        return None
    if budget is None:
        raise UsageError("--spec-policy without --cache-mb: the policies are compared by the replay's reads")
    st = {k: (v if getattr(args, k) is None else getattr(args, k)) for k, v in POLICY_STREAM.items()}
    if st["accept"] >= 1.0:
        raise UsageError(f"argument --accept: expected a number in [0, 1), got '{args.accept:g}'")
    from refsim.spec.policies import parse_spec_policy
    for p in args.spec_policy:
        parse_spec_policy(p)
    return st


def policy_table(trace, budget, knobs, st: dict, policies) -> list:
    """:func:`refsim.studies.spec_policy.policy_rows` of one trace for the CLI."""
    from refsim.studies.spec_policy import policy_rows
    return policy_rows(trace, budget, policies, st["draft"], st["coverage"], st["accept"], st["seed"],
                       knobs if knobs is not None and knobs.any_on else None)


def policy_dict(row) -> dict:
    """One policy row as ``--json`` prints it."""
    d = dataclasses.asdict(row)
    d["positions_per_decode"] = row.positions_per_decode
    d["tokens_per_decode"] = row.tokens_per_decode
    return d


def policy_lines(rows, args, device) -> list[str]:
    """The policy block's table: one line per row, ``x fixed`` against the second row."""
    width = max(len("policy"), *(len(r.policy) for r in rows))
    head = (f"{'policy':<{width}}  {'decodes':>7}  {'pos/dec':>7}  {'tok/dec':>7}  {'MiB/token':>9}  "
            f"{'x fixed':>7}  {'hit_dec%':>8}")
    if device is not None:
        head += f"  {'pred_tok/s':>10}"
    out = [head]
    fixed = rows[1].mib_per_token
    for r in rows:
        line = (f"{r.policy:<{width}}  {r.decodes:>7}  {r.positions_per_decode:>7.3f}  {r.tokens_per_decode:>7.3f}  "
                f"{num(r.mib_per_token, 2):>9}  {num(ratio(r.mib_per_token, fixed), 2):>7}  "
                f"{num(r.hit_pct_decode, 3):>8}")
        if device is not None:
            d = device_figures(args, device, r.mib_per_token or 0.0, r.tokens_per_decode)
            line += f"  {num(d.predicted_tok_s, 3):>10}"
        out.append(line)
    return out


def run(args) -> int:
    budget = ExpertCache.mib_to_bytes(args.cache_mb) if args.cache_mb is not None else None
    if args.device is not None and budget is None:
        raise UsageError("--device without --cache-mb: the predicted time needs the replay's reads")
    stream = _policy_args(args, budget)
    spec = ExecutorSpec.from_args(args)
    paths = expand_traces(args.trace)
    if spec.dask is not None:
        require_dask()
    device = load_device_args(args, defer=True)
    refs, headers, knobs, warned = [], [], None, set()
    kept = []       # --spec-policy: the traces as read, replayed again below (a FIFO reads once)
    for path in paths:                 # every trace is checked before any cell runs
        trace = read_trace(path)
        if trace.header.n_expert_used not in warned:
            warned.add(trace.header.n_expert_used)
            knobs = knobs_from_args(args, trace.header.n_expert_used)
        ref = TraceRef.of(path)
        remember(ref, trace)
        refs.append(ref)
        headers.append((trace.path, trace.header))
        if stream is not None:
            kept.append(trace)
        del trace
    device = for_input(args, device, trace_names(h for _, h in headers))   # the traces' model's floor
    per_trace = union_grid(refs, args.window, budget, knobs, spec)
    if budget is not None:      # as replay and sweep: T of the widest trace (docs/cache-studies.md)
        warn_below_token_cycle("union", [budget], max(h.token_cycle_bytes for _, h in headers))
    warn_input_model(args, device, trace_names(h for _, h in headers))
    knobs_on = knobs.any_on
    policies = None
    if stream is not None:      # after the grid, on the traces read above (never read twice)
        policies = [policy_table(t, budget, knobs, stream, args.spec_policy) for t in kept]
        del kept
    if args.json:
        def rows(pairs_or_rows):
            out = []
            for r in pairs_or_rows:
                d = dataclasses.asdict(r)
                if device is not None and budget is not None:
                    d["predicted_tok_s"] = _predicted(args, device, r, knobs_on).predicted_tok_s
                out.append(d)
            return out
        doc = {"budget_bytes": budget,
               "traces": [{"path": tpath, "n_layer": h.n_layer, "n_expert": h.n_expert,
                           "n_expert_used": h.n_expert_used,
                           "rows": rows([r for r, _ in pairs])}
                          for (tpath, h), pairs in zip(headers, per_trace)]}
        if len(paths) > 1:
            doc["pooled"] = rows(pool_union(per_trace))
        if policies is not None:
            doc["spec_policy"] = {"stream": stream,
                                  "traces": [[policy_dict(r) for r in rs] for rs in policies]}
        print(json.dumps(doc))
        return 0
    for tpath, h in headers:
        print(f"trace: {tpath} ({h.n_layer} layers, {h.n_expert} experts, "
              f"top-{h.n_expert_used})")
    head = f"{'w':>2}  {'windows':>7}  {'union':>6}  {'p50':>5}  {'p90':>5}  {'union_MiB':>9}"
    if budget is not None:
        print(f"replay at {budget_mib(budget)} MiB; decode positions in batches of w")
        head += f"  {'decodes':>7}  {'read_MiB':>9}  {'MiB/token':>9}  {'x w=1':>6}  {'hit_dec%':>8}"
        if device is not None:
            d = device_figures(args, device, 0.0)
            print(f"pred_tok/s: device {args.device} (predicted, not measured; {plural(d.io_threads, 'lane')}, "
                  f"{'--overlap' if d.overlap else 'serial'}, compute floor of {d.model}, every "
                  f"draft accepted: w tokens per decode, {eps_line(args, device, sorted(set(args.window)))}"
                  + (f"; priced on the knob columns, --drop-cold-experts {knobs.drop_frac:g} "
                     f"--prefetch {knobs.prefetch}" if knobs_on else "") + ")")
            head += f"  {'pred_tok/s':>10}"
        if knobs_on:
            print(f"knob columns: the same replay with --drop-cold-experts {knobs.drop_frac:g} "
                  f"--prefetch {knobs.prefetch} (the drop rule per token row of each batch)")
            head += f"  {'k_MiB/tok':>9}  {'k x w=1':>7}  {'k_hit%':>6}  {'dropped':>13}"
    if len(paths) == 1:
        print(head)
        for line in table_lines([r for r, _ in per_trace[0]], args, device, budget, knobs_on):
            print(line)
        print_policies(paths, policies, stream, args, device, knobs_on)
        return 0
    width = max(len("trace"), *(len(p) for p in paths))
    print(f"{'trace':<{width}}  {head}")
    for path, pairs in zip(paths, per_trace):
        for line in prefixed(path, width, table_lines([r for r, _ in pairs], args, device, budget,
                                                      knobs_on)):
            print(line)
    print(f"pooled over {len(paths)} traces (union sizes over every window and layer of every "
          f"trace; decodes, hits, lookups, bytes and tokens summed, rates the ratios of the sums; "
          f"docs/scale.md)")
    print(head)
    for line in table_lines(pool_union(per_trace), args, device, budget, knobs_on):
        print(line)
    print_policies(paths, policies, stream, args, device, knobs_on)
    return 0


def print_policies(paths, policies, stream, args, device, knobs_on) -> None:
    """The ``--spec-policy`` block (nothing without it): per trace, the policies' table."""
    if policies is None:
        return
    print(f"draft policies (refsim.studies.spec_policy): the decode positions as the loop with each policy "
          f"would decode them, on an acceptance stream (--draft {stream['draft']}: a candidate on "
          f"{stream['coverage']:g} of the steps, acceptance {stream['accept']:g}, seed {stream['seed']}); "
          f"a rejected draft routes as the position half the trace away; predicted routes: the trace's own"
          + ("; knobs on" if knobs_on else ""))
    for path, rows in zip(paths, policies):
        if len(paths) > 1:
            print(f"trace: {path}")
        for line in policy_lines(rows, args, device):
            print(line)


def table_lines(rows, args, device, budget, knobs_on) -> list[str]:
    """The table's lines of one trace's (or the pooled) rows; ``x w=1`` is against the first
    w=1 row of ``rows``."""
    out = []
    base = kbase = None
    for r in rows:
        line = (f"{r.window:>2}  {r.n_windows:>7}  {r.union_mean:>6.2f}  {r.union_p50:>5.1f}  "
                f"{r.union_p90:>5.1f}  {num(r.union_mib_mean, 1):>9}")
        if budget is not None:
            if r.window == 1:
                base = r.mib_per_token
            rel = num(ratio(r.mib_per_token, base), 2) if r.mib_per_token is not None and base else NA
            line += (f"  {r.decodes:>7}  {num(r.read_mib, 1):>9}  {num(r.mib_per_token, 2):>9}  {rel:>6}  "
                     f"{num(r.hit_pct_decode, 3):>8}")
            if device is not None:
                line += f"  {num(_predicted(args, device, r, knobs_on).predicted_tok_s, 3):>10}"
            if knobs_on:
                if r.window == 1:
                    kbase = r.knob_mib_per_token
                kr = num(ratio(r.knob_mib_per_token, kbase), 2) if kbase else NA
                line += (f"  {num(r.knob_mib_per_token, 2):>9}  {kr:>7}  {num(r.knob_hit_pct_decode, 1):>6}  "
                         f"{f'{r.knob_dropped}/{r.knob_routed}':>13}")
        out.append(line)
    return out


def _predicted(args, device, r, knobs_on: bool):
    """The predicted column of row ``r``: a ``w``-wide verify batch, every draft accepted, priced
    by :func:`refsim.timing.whatif.width_whatif` (``refsim whatif``'s pricing rule) on the reads the
    table shows beside it -- the knob columns when a knob is on (issue 29 item 1)."""
    from refsim.timing.whatif import width_whatif
    dev, name, model = device
    mib = r.knob_mib_per_token if knobs_on else r.mib_per_token
    from refsim.timing.device_options import DeviceOptions
    return width_whatif(dev, name, model, args.io_threads, args.overlap, r.window, mib or 0.0,
                        DeviceOptions.from_args(args).eps(device, r.window))
