"""``refsim whatif (TRACE | MODEL) --device D.json --cache-mb LIST --spec off,ngram:d=3:m=3``:
does a speculation configuration pay on this device, at this budget? (issue 29)

Per configuration and budget: positions and tokens per decode, MiB/token and hit %, every time
term, effective tok/s with a band, the change against ``off`` with a band, the verdict (gains /
within noise / loses) and the break-even acceptance -- all from
:func:`refsim.timing.verdict.price`.

Where the reads and the acceptance come from (:mod:`refsim.cli.whatif_sources`):

- a route trace: the exact union replay of the trace at the configuration's width, knobs on;
  acceptance and coverage from the ``--spec`` items themselves (``acceptance=``, ``coverage=``:
  labelled *assumed* in every output) or, for n-gram items without them, from a token stream
  (``--tokens FILE --prompt-len P``: :func:`refsim.spec.whatif.ngram_whatif`, exact for greedy
  decoding); with ``--spec-policy`` other than ``fixed``, a policy replay on a seeded acceptance
  stream (:func:`refsim.studies.spec_policy.policy_replay`), each speculation row preceded by
  ``fixed`` through the same replay and stream (``[fixed replay]``; JSON ``fixed_replay_rows``,
  each naming its policy row by ``policy_row``): the policy is the only difference between the
  two, not between the policy row and the union replay's rows of no ``--spec-policy``;
- a model (``MODEL.gguf``, ``builtin``): every configuration run live at every budget through
  :func:`refsim.session.simulate` (``refsim run``'s path, ``--spec-policy`` included), its
  acceptance, coverage, drafts per decode and reads its own counters (``measured: live run``).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import sys

from refsim.cli.common import (add_knob_args, knobs_from_args, nonneg_float, positive_int,
                               token_ids)
from refsim.cli.device import add_device_args, for_input, gguf_names, load_device_args, warn_input_model
from refsim import MIB
from refsim.cache.expert_cache import ExpertCache
from refsim.errors import ConfigError, UsageError, warning_line
from refsim.fmt import CSV_NA
from refsim.timing.defaults import EPS_INTERVAL as DEFAULT_EPS_INTERVAL   # one interval: breakeven --plot draws it too
from refsim.validators import milliseconds, percent, positive_mib

COLUMNS = ("config", "budget_mib", "eff_tok_s", "eff_tok_s_lo", "eff_tok_s_hi", "delta_pct",
           "delta_lo_pct", "delta_hi_pct", "verdict", "acceptance", "coverage", "acceptance_source",
           "positions_per_decode", "tokens_per_decode", "mib_per_token", "hit_pct", "ms_per_token",
           "breakeven_acceptance", "compute_ms", "extra_positions_ms", "bookkeeping_ms",
           "contention_ms", "flash_ms", "stall_ms", "head_ms", "memory_ms", "policy", "row")
TEXT_COLUMNS = ("config", "verdict", "acceptance_source", "policy", "row")
"""The CSV's text columns; the others are numbers, where n/a is ``nan`` (docs/cli.md, "Numbers")."""
POLICY_ROW, FIXED_REPLAY_ROW = "policy", "fixed replay"
"""The CSV's last column, ``row`` (not a price's field): ``fixed replay`` on a ``[fixed replay]``
row (``--spec-policy`` on a trace: JSON ``fixed_replay_rows``, written just before the row of the
policy it is read against, as in the table), ``policy`` on every other row (JSON ``rows``: priced
with the ``policy`` column's policy)."""


def _budgets(text: str):
    """``--cache-mb``: ``auto``, or the MiB budgets of ``N[,N,...]`` or ``START:STOP:STEP`` (mixed
    too) read by :func:`refsim.studies.sweep.parse_budgets_mib`, ``sweep``'s and ``timing
    breakeven``'s parser: the same bounds (:data:`refsim.cache.expert_cache.CACHE_MB_RANGE` each, at most
    :data:`~refsim.studies.sweep.MAX_BUDGETS`) and the same messages.

    Raises
    ------
    UsageError
        ``argument --cache-mb: expected N[,N,...] or START:STOP:STEP, each ..., got 'ITEM'``.
    """
    if text.strip() == "auto":
        return "auto"
    from refsim.studies.sweep import parse_budgets_mib
    return parse_budgets_mib(text)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "whatif", help="does a speculation configuration pay on a device? verdict with a band",
        description="Price off / --ngram / --mtp configurations on a fitted device at each cache "
                    "budget: every time term, effective tok/s and the change against off with "
                    "bands, a verdict and the break-even acceptance (predictions, never "
                    "measurements; docs/timing.md).")
    p.add_argument("source", metavar="TRACE|MODEL",
                   help="route trace (route_trace v1): its union replay gives the reads; or a "
                        "model (MODEL.gguf, or builtin: refsim run's built-in synthetic qwen3moe): every "
                        "configuration is run live at every budget (refsim run's path) and its own "
                        "counters give the acceptance, coverage and reads")
    p.add_argument("--cache-mb", required=True, metavar="LIST",
                   help="cache budgets in MiB: N,N,... or START:STOP:STEP (as refsim sweep; a "
                        "repeated budget is priced once, the first kept); or auto (with --ram-mb "
                        "and --gguf: each configuration at its own --cache-mb auto budget, the "
                        "speculative memory taken from the cache)")
    p.add_argument("--ram-mb", type=positive_mib, metavar="R",
                   help="MiB available before the contexts are created (with --gguf): the memory "
                        "ledger (refsim memory) prices the speculative memory")
    p.add_argument("--ctx", type=positive_int, default=None, metavar="N",
                   help="context length for the ledger (default 2048, or n_ctx_train if smaller)")
    p.add_argument("--spec", required=True, metavar="LIST",
                   help="configurations: off,ngram:d=3:m=3[:acceptance=A:coverage=C],"
                        "mtp:d=3[:acceptance=A] (off is always priced: the baseline); d in 1..8 "
                        "and m in 1..12 (refsim run's --draft and --ngram-min-match), A and C "
                        "in [0, 1]")
    p.add_argument("--tokens", metavar="FILE",
                   help="with a TRACE: token ids (prompt then generated): the n-gram items' "
                        "acceptance and coverage, exact (refsim ngram-whatif)")
    p.add_argument("--prompt-len", type=positive_int, metavar="P", help="with --tokens")
    p.add_argument("--spec-policy", default=None, metavar="NAME[:K=V,...]",
                   help="draft policy of every speculation configuration (fixed, backoff, cost, "
                        "union; docs/spec-policies.md; default fixed): with MODEL the live run's "
                        "own; with a TRACE a policy replay on a seeded acceptance stream of the "
                        "configuration's acceptance and coverage, each row after a [fixed replay] "
                        "row of the same replay and stream")
    g = p.add_argument_group("live run (with MODEL)")
    one = g.add_mutually_exclusive_group()
    one.add_argument("--prompt", metavar="TEXT", help="prompt text (default refsim run's)")
    one.add_argument("--prompt-tokens", metavar="IDS", type=token_ids,
                     help="prompt token ids, e.g. 1,5,77")
    g.add_argument("-n", "--n-predict", type=positive_int, default=None, metavar="N",
                   help="tokens to generate per run (default 32)")
    p.add_argument("--head-ms", type=milliseconds, metavar="MS",
                   help="the MTP head's compute per emitted token, ms (assumed); or --gguf")
    p.add_argument("--gguf", metavar="MODEL.gguf",
                   help="with a TRACE: the model's tensor table (the MTP head's share of a "
                        "trunk position, the memory ledger), the trace's own model (checked as "
                        "refsim replay --model does); a MODEL source is its own")
    p.add_argument("--position-cost-interval", metavar="LO,HI", default=None,
                   help=f"the interval eps is swept over in the band (default "
                        f"{DEFAULT_EPS_INTERVAL[0]:g},{DEFAULT_EPS_INTERVAL[1]:g}: what the shared "
                        f"prefills allow, docs/whatif-terms.md)")
    p.add_argument("--baseline", metavar="RUN.csv[@k=v,...]",
                   help="the same session's plain run (engine metrics CSV): re-fits the device's "
                        "compute floor and nothing else, and says by how much")
    p.add_argument("--noise-pct", type=percent, default=None, metavar="SD",
                   help="run-to-run noise, sd of ln tok/s of one run in %%, 0..100 (default: the "
                        "engine's published byte-identical repeats, pooled with the device file's "
                        "own when timing fit found repeats among its runs; refsim.timing.noise)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object with a rows list")
    out.add_argument("--csv", action="store_true", help="CSV rows")
    out.add_argument("--explain", action="store_true",
                     help="every term: value, unit, source, interval")
    p.add_argument("--plot", metavar="OUT.png",
                   help="bars of effective tok/s and of the change against off, with their bands "
                        "(.png, .pdf or .svg; needs matplotlib)")
    add_knob_args(p)
    add_device_args(p)
    p.set_defaults(func=run)


def _eps_interval(args):
    """``--position-cost-interval`` as ``(lo, hi)``; without it, with ``--position-cost``, the
    shared prefills' interval (:data:`refsim.timing.defaults.EPS_INTERVAL`); else None (the
    device file's own interval, or the default's). Usage errors."""
    if args.position_cost_interval is None:
        if args.position_cost is None:
            return None
        lo, hi = DEFAULT_EPS_INTERVAL
        if not lo <= args.position_cost <= hi:
            raise UsageError(f"--position-cost {args.position_cost:g}: outside the default "
                             f"interval {lo:g}..{hi:g} (what the shared prefills allow); give "
                             f"--position-cost-interval LO,HI holding it")
        return lo, hi
    try:
        lo, hi = (float(x) for x in args.position_cost_interval.split(","))
    except ValueError:
        raise UsageError(f"--position-cost-interval {args.position_cost_interval!r}: "
                         f"expected LO,HI") from None
    if not (0.0 <= lo <= hi and math.isfinite(hi)):
        raise UsageError(f"--position-cost-interval {lo:g},{hi:g}: expected 0 <= LO <= HI, finite")
    if args.position_cost is not None and not lo <= args.position_cost <= hi:
        raise UsageError(f"--position-cost-interval {lo:g},{hi:g}: expected 0 <= LO <= "
                         f"--position-cost ({args.position_cost:g}) <= HI")
    return lo, hi


def _eps(args, dev, model: str, width: int):
    """The eps Term of a ``width``-position configuration (:func:`refsim.timing.positions.
    resolve_eps`: ``--position-cost``, else the device file's reading, else the labelled
    default), its interval replaced by ``--position-cost-interval`` when given.

    Raises
    ------
    UsageError
        ``--position-cost-interval`` that does not hold the value.
    """
    from dataclasses import replace

    from refsim.timing.positions import resolve_eps
    iv = _eps_interval(args)
    t = resolve_eps(dev, model, width, args.position_cost, iv)
    if iv is not None:
        if not iv[0] <= t.value <= iv[1]:
            raise UsageError(f"--position-cost-interval {iv[0]:g},{iv[1]:g}: does not hold eps "
                             f"{t.value:g} of a {width}-position verify decode ("
                             f"{'the device file' if t.kind == 'fitted' else t.kind})")
        t = replace(t, lo=iv[0], hi=iv[1],
                    note="interval: --position-cost-interval" if args.position_cost_interval
                    else "interval: the shared prefills' (docs/whatif-terms.md)")
    elif t.kind == "assumed":
        t = replace(t, note="interval: the shared prefills' (docs/whatif-terms.md)")
    return t


def _sigma(args, dev) -> tuple:
    """``(sigma, source)``: the run-to-run noise of the band (sd of ln tok/s of one run, a ratio)
    and what gave it: ``--noise-pct``, else :func:`refsim.timing.noise.band_noise` (the published
    byte-identical repeats, pooled with the device file's own when ``timing fit`` stored some)."""
    if args.noise_pct is not None:
        return args.noise_pct / 100.0, f"--noise-pct {args.noise_pct:g}"
    from refsim.timing.noise import band_noise
    t, source = band_noise(dev)
    return t.value, source


def _check_spec(args, live):
    """``--spec``'s items (:func:`refsim.timing.verdict.parse_spec_list`), and what the command
    line alone shows they need, before any input is read (usage errors, exit 2).

    Raises
    ------
    UsageError
        :func:`~refsim.timing.verdict.parse_spec_list`'s; ``--tokens`` without ``--prompt-len``
        or the reverse; an ``mtp:`` item on a trace without ``--gguf`` or ``--head-ms``; on a
        trace, speculation items without ``acceptance=`` (or n-gram items without
        ``coverage=``) that ``--tokens`` does not measure: every such item's
        :attr:`refsim.timing.verdict.SpecConfig.tokens_per_decode` message, joined by ``; `` in
        one line.
    """
    from refsim.timing.verdict import parse_spec_list
    cfgs = parse_spec_list(args.spec)
    if (args.tokens is None) != (args.prompt_len is None):
        raise UsageError("--tokens and --prompt-len go together")
    mtp = [c.label for c in cfgs if c.kind == "mtp"]
    if mtp and live is None and args.gguf is None and args.head_ms is None:
        raise UsageError(f"--spec {mtp[0]}: the MTP head's compute needs --gguf MODEL.gguf (its "
                         f"tensor table) or --head-ms MS on a trace")
    if live is None:
        lacking = []
        for c in cfgs:
            if _from_tokens(args, c):
                continue                # measured from --tokens (_configs)
            try:
                c.tokens_per_decode     # SpecConfig's own refusal of a missing number
            except ConfigError as exc:
                lacking.append(str(exc))
        if lacking:
            # the command line lacks what the items need (acceptance=, coverage= or --tokens):
            # a usage error, SpecConfig's message of every such item, in one line
            raise UsageError("; ".join(lacking))
    return cfgs


def _unused_flags(args, cfgs) -> list:
    """Lines for flags given that no ``--spec`` item uses (warnings, not errors: the figures are
    what they would be without them): ``--head-ms`` without an ``mtp:`` item; ``--tokens`` when no
    n-gram item takes its numbers from it (:func:`_from_tokens`)."""
    out = []
    if args.head_ms is not None and not any(c.kind == "mtp" for c in cfgs):
        out.append(f"--head-ms {args.head_ms:g}: no mtp: item in --spec; unused")
    if args.tokens is not None and not any(_from_tokens(args, c) for c in cfgs):
        out.append(f"--tokens {args.tokens}: no ngram: item in --spec leaves acceptance and "
                   f"coverage to it; unused")
    return out


def _from_tokens(args, c) -> bool:
    """Item ``c`` takes its acceptance and coverage from ``--tokens``: an n-gram item giving
    neither, when ``--tokens`` is given."""
    return (args.tokens is not None and c.kind == "ngram" and c.acceptance is None
            and c.coverage is None)


def _configs(args, cfgs):
    """``cfgs`` with the n-gram items' acceptance and coverage from ``--tokens`` if given."""
    if args.tokens is None:
        return cfgs
    from refsim.spec.whatif import ngram_whatif, read_token_file
    stream = read_token_file(args.tokens)
    out = []
    for c in cfgs:
        if _from_tokens(args, c):
            cell = ngram_whatif(stream, args.prompt_len, [c.draft], [c.min_match])[0]
            c = type(c).measured(c.kind, c.draft, c.min_match, cell.decodes, cell.drafted_steps,
                                 cell.drafted, cell.accepted,
                                 f"measured: {args.tokens} (ngram-whatif)")
        out.append(c)
    return out


def _policy(args):
    """The ``--spec-policy`` policy, or None for ``fixed`` (today's path, which it equals)."""
    if args.spec_policy is None:
        return None
    from refsim.spec.policies import parse_spec_policy
    pol = parse_spec_policy(args.spec_policy)
    return None if pol.name == "fixed" else pol


def _head(args, model):
    from refsim.timing.terms import exact
    if model is not None and args.head_ms is None:
        from refsim.timing.work import position_work
        work = position_work(model)
        return (work, None) if work.has_head else (None, None)
    if args.head_ms is not None:
        return None, exact("head_ms", args.head_ms, "ms/token", "assumed", "--head-ms")
    return None, None


class _Ledger:
    """The memory ledger's figures per configuration (refsim.cache.ledger, ``refsim memory``'s
    code): the ``--cache-mb auto`` budget, the speculative memory, and what RAM leaves beside a
    plain run's contexts, dense weights and the engine's floor."""

    def __init__(self, model, args):
        from refsim.cli.memory import CTX_DEFAULT
        n_train = model.spec.n_ctx_train
        self.ctx = args.ctx or (min(CTX_DEFAULT, n_train) if n_train > 0 else CTX_DEFAULT)
        self.model, self.ram = model, args.ram_mb

    def ledger(self, cfg):
        from refsim.cache.ledger import memory_ledger
        return memory_ledger(self.model, self.ctx, cfg.draft, cfg.kind == "mtp",
                             ram_mb=self.ram or 0.0)

    def spec_mib(self, cfg) -> float:
        """What the configuration adds to the plain run's resident demand, MiB: the speculative
        memory and, with ``--mtp``, the nextn block's dense tensors where the dense set is
        resident (``anon``/``ahwb``: as :meth:`headroom_mib` counts the trunk's), the rule of
        :func:`refsim.cache.demand.added_demand` less the page cache (which headroom leaves out)."""
        if cfg.kind == "off":
            return 0.0
        from refsim.cache.demand import added_demand
        from refsim.cache.ledger import memory_ledger
        led = self.ledger(cfg)
        plain = memory_ledger(self.model, self.ctx, 0, False, ram_mb=self.ram or 0.0)
        total, _ = added_demand(self.model, plain, led, 0)
        page = (led.dense_bytes - plain.dense_bytes) if led.dense_weights not in ("anon", "ahwb") else 0
        return (total - page) / MIB

    def auto_mib(self, cfg) -> float:
        return self.ledger(cfg).budget_bytes / MIB

    def headroom_mib(self, budget_mib: float) -> float | None:
        """RAM left beside the plain run's resident demand at ``budget_mib`` of cache."""
        if not self.ram:
            return None
        from refsim.cache.ledger import memory_ledger
        led = memory_ledger(self.model, self.ctx, 0, False, ram_mb=self.ram)
        dense = led.dense_bytes if led.dense_weights in ("anon", "ahwb") else 0
        return (led.ram_bytes - led.context_bytes - dense) / MIB - led.floor_mb - budget_mib


def _calibrate(spec: str, dev, model: str):
    """:func:`refsim.timing.calibrate.calibrate_floor` on the session's plain run ``spec``.

    The run must be of a model the device was fitted on (``refsim timing predict``'s rule,
    :meth:`refsim.timing.model.DeviceModel.compute_floor`) and of the model whose floor is priced
    (``model``): a run of another model says nothing about this one's floor.

    Raises
    ------
    ConfigError
        Not a plain run; a model the device does not know; another model than ``model``.
    """
    from refsim.timing.calibrate import calibrate_floor
    from refsim.timing.plain import load_plain_runs
    runs, notes = load_plain_runs([spec], dev.trim)
    if not runs:
        raise ConfigError(f"--baseline {spec}: not a plain run ({'; '.join(notes) or 'nothing read'}"
                          f"): the floor is calibrated on plain decoding only")
    run = runs[0]
    dev.compute_floor(run.model, where=f"--baseline {run.label}")
    if run.model != model:
        raise ConfigError(f"--baseline {run.label}: a run of model {run.model!r}, the compute "
                          f"floor priced is {model!r}'s: the baseline must be a run of that model")
    return calibrate_floor(dev, run, model), run


def _replicates(dev, run, model: str) -> tuple:
    """The device file's bootstrap refits (``timing fit --boot``), each with its floor re-fitted on
    the ``--baseline`` run as the point fit's is (``run`` None: as stored); a refit the run cannot
    calibrate (no positive floor) is left out."""
    from refsim.errors import ConfigError
    from refsim.timing.calibrate import calibrate_floor
    reps = dev.replicate_devices()
    if run is None:
        return reps
    out = []
    for r in reps:
        try:
            out.append(calibrate_floor(r, run, model).device)
        except ConfigError:
            continue
    return tuple(out)


def run(args) -> int:
    from refsim.cli.whatif_sources import (LiveSource, TraceSource, check_live_configs,
                                           check_live_flags, live_model, open_live_model)
    from refsim.timing.verdict import Device, price
    cache_mb = _budgets(args.cache_mb)          # the command line alone: first (sweep's order)
    if args.device is None:
        raise UsageError("--device is required: the verdict is a device's")
    live = live_model(args.source)
    check_live_flags(args, live)
    cfgs = _check_spec(args, live)
    unused = _unused_flags(args, cfgs)          # warned after pricing (a refusal stays alone)
    _eps_interval(args)
    loaded = load_device_args(args, defer=True)
    policy = _policy(args)
    if args.plot is not None:
        from refsim.fileio import check_outputs
        from refsim.studies.plot import plot_format, require_matplotlib
        check_outputs({"--plot": args.plot}, {"MODEL" if live else "TRACE": args.source,
                                              "--device": args.device})
        _check_plot_not_stdout(args)
        plot_format(args.plot)          # the extension names a format we write, before any work
        require_matplotlib()
    # the input first: its model picks the device's compute floor, or is warned about
    trace = model_file = model_path = None
    if live is not None:
        model_path, model_file = open_live_model(live)
        names = gguf_names(model_path, model_file)
    else:
        from refsim.trace import read_trace
        trace = read_trace(args.source)
        names = [trace.header.model]
    loaded = for_input(args, loaded, names)
    dev, name, model = loaded
    cal = base_run = None
    if args.baseline is not None:
        cal, base_run = _calibrate(args.baseline, dev, model)
    reps = _replicates(dev, base_run, model)
    if cal is not None:
        dev = cal.device
    sigma, sigma_src = _sigma(args, dev)
    cfgs = _configs(args, cfgs)
    if live is not None:
        check_live_configs(cfgs, live, model_file)
    elif args.gguf is not None:
        from refsim.cli.whatif_sources import check_mtp_block
        from refsim.model import open_model
        model_file = open_model(args.gguf)
        check_mtp_block(cfgs, f"--gguf {args.gguf}", model_file)
    if (cache_mb == "auto" or args.ram_mb is not None) and model_file is None:
        raise UsageError("--cache-mb auto and --ram-mb need --gguf: the memory ledger is the model's")
    if cache_mb == "auto" and args.ram_mb is None:
        raise UsageError("--cache-mb auto needs --ram-mb R")
    led = _Ledger(model_file, args) if model_file is not None else None
    work, head = _head(args, model_file)
    from refsim.timing.positions import resolve_eps
    # off has no extra position: its eps prices nothing and is not checked against the interval
    eps_of = {c.label: (_eps(args, dev, model, c.width) if c.kind != "off" else
                        resolve_eps(dev, model, 2, args.position_cost)) for c in cfgs}
    eps = eps_of[next((c.label for c in cfgs if c.kind != "off"), cfgs[0].label)]
    dv = Device(dev, model, args.io_threads, args.overlap, eps, sigma=sigma, work=work, head=head,
                replicates=reps)
    if live is not None:
        knobs = knobs_from_args(args, None, traced=False, cmd="whatif")
        source = LiveSource(args, live, knobs, policy)
    else:
        if model_file is not None:
            # the model must be the trace's (refsim replay --model's check): its tensor table
            # prices the head and the ledger of this trace's reads
            from refsim.io.layout import layout_from_model
            layout_from_model(model_file).check_trace(trace.header, args.source)
        knobs = knobs_from_args(args, trace.header.n_expert_used, cmd="whatif")
        t_bytes = trace.header.token_cycle_bytes
        source = TraceSource(trace, sorted({1} | {c.width for c in cfgs}), knobs, policy,
                             args.spec_policy)

    prices, measured = [], []
    # with a policy on a trace, each speculation row also gets `fixed` through the policy's own
    # replay (same stream, same rejected rule): the policy's delta is read against it, not against
    # the union replay's rows of no --spec-policy (docs/timing.md "The draft policy")
    replayed = {}       # index in prices of a policy row -> (its fixed-replay price, measured)
    # a repeated budget is priced once, the first kept (timing breakeven's rule)
    budgets = ([None] if cache_mb == "auto" else list(dict.fromkeys(cache_mb)))
    for fixed in budgets:
        at = {c.label: (led.auto_mib(c) if fixed is None else fixed) for c in cfgs}
        off_mib = at["off"]
        for c in cfgs:
            mib = at[c.label]

            def priced(fixed_replay: bool):
                cfg, reads, off_reads, counts = (source.priced(c, mib, off_mib, fixed_replay=True)
                                                 if fixed_replay else source.priced(c, mib, off_mib))
                return price(dataclasses.replace(dv, eps=eps_of[c.label]), cfg, reads, budget_mib=mib,
                             spec_mib=led.spec_mib(c) if led else 0.0,
                             headroom_mib=led.headroom_mib(mib) if led else None,
                             off_reads=off_reads,
                             memory=None if led or c.kind == "off" else _no_ledger()), counts
            if policy is not None and live is None and c.kind != "off":
                replayed[len(prices)] = priced(True)
            pr, counts = priced(False)
            prices.append(pr)
            measured.append(counts)
    if live is None and cache_mb != "auto":
        # as replay and union: a budget below one token cycle; after pricing, so that a refused
        # configuration's error stays the only line
        from refsim.cli.common import warn_below_token_cycle
        warn_below_token_cycle("whatif", [ExpertCache.mib_to_bytes(b) for b in cache_mb],
                               t_bytes)
    warn_input_model(args, loaded, names)      # after pricing too: a refusal stays the only line
    for text in unused:
        print(warning_line("whatif", text), file=sys.stderr)
    what = f"{args.source}" if live is None else f"{model_path} (live)"
    if args.plot is not None:
        from refsim.timing.plot import plot_whatif
        plot_whatif(prices, args.plot, f"refsim whatif: {what} on {name}",
                    auto=cache_mb == "auto")
    policy_label = "fixed" if policy is None else policy.label()
    if args.json:
        doc = ({"trace": args.source} if live is None else
               {"model": model_path, "builtin": model_path != live, "source": "live run",
                "n_predict": source.n_predict})
        doc |= {"device": name, "device_model": model,
                "overlap": args.overlap, "io_threads": args.io_threads,
                # off has no extra position: no eps (docs/timing.md "The terms")
                "eps": eps.as_dict(),
                "eps_by_config": {k: None if k == "off" else t.as_dict() for k, t in eps_of.items()},
                "noise_sd": sigma, "noise_source": sigma_src,
                "calibration": None if cal is None else {
                    "baseline": args.baseline, "before_ms": cal.before_ms,
                    "floor": cal.floor.as_dict(), "moved_ms": cal.moved_ms,
                    "moved_pct": cal.moved_pct, "measured_tok_s": cal.measured_tok_s,
                    "predicted_before_tok_s": cal.predicted_before_tok_s,
                    "predicted_after_tok_s": cal.predicted_after_tok_s},
                "spec_policy": policy_label, "predicted": True,
                "rows": [p.row() | {"terms": _term_dicts(p),
                                    "notes": list(p.notes)}
                         | ({} if m is None else {"measured": m})
                         for p, m in zip(prices, measured)]}
        if replayed:
            doc["fixed_replay_rows"] = [
                p.row() | {"policy_row": i, "terms": _term_dicts(p), "notes": list(p.notes),
                           "measured": m}
                for i, (p, m) in sorted(replayed.items())]
        print(json.dumps(_finite(doc), indent=1, allow_nan=False))
        return 0
    if args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(COLUMNS)
        for i, p in enumerate(prices):      # the table's rows in its order
            for q, kind in (((replayed[i][0], FIXED_REPLAY_ROW),) if i in replayed else ()) \
                    + ((p, POLICY_ROW),):
                r = q.row() | {"row": kind}
                w.writerow([(CSV_NA if k not in TEXT_COLUMNS else "") if r[k] is None else r[k]
                            for k in COLUMNS])
        return 0
    knob_text = (f", knobs --drop-cold-experts {knobs.drop_frac:g} --prefetch {knobs.prefetch}"
                 if knobs.any_on else "")
    if live is None:
        print(f"trace: {args.source}; device {name} (predicted, not measured), compute floor of "
              f"{model}, {args.io_threads} lanes, {'--overlap' if args.overlap else 'serial'}"
              + knob_text)
    else:
        print(f"model: {model_path}{' (built-in)' if model_path != live else ''}: every "
              f"configuration run live at every budget ({source.generated()}; refsim run's "
              f"path): acceptance, coverage and reads are each run's own counters (measured: "
              f"live run); device {name} (predicted, not measured), compute floor of {model}, "
              f"{args.io_threads} lanes, {'--overlap' if args.overlap else 'serial'}" + knob_text)
    if policy is not None:
        how = ("the live run's own" if live is not None else
               "replayed on a seeded acceptance stream of each configuration's acceptance and "
               "coverage (refsim.studies.spec_policy); [fixed replay]: the same replay with "
               "fixed, the row the policy's differs from by the policy alone")
        print(f"draft policy: {policy_label} (lossless: it picks the width only), {how}")
    if cal is not None:
        print(cal.line())
    spec_eps = {k: t for k, t in eps_of.items() if k != "off"} or eps_of
    shown = sorted({(t.value, t.lo, t.hi) for t in spec_eps.values()})
    eps_text = ((f"eps {eps.value:.3f} [{eps.lo:.3f}, {eps.hi:.3f}]" if eps.kind == "fitted" else
                 f"eps {eps.value:g} [{eps.lo:g}, {eps.hi:g}]") if len(shown) == 1 else
                "eps " + ", ".join(f"{k} {t.value:.3f} [{t.lo:.3f}, {t.hi:.3f}]"
                                   for k, t in spec_eps.items()))
    eps_from = (("the device file's" + (", interval --position-cost-interval"
                                        if args.position_cost_interval and len(eps_of) > 1
                                        else ""))
                if {t.kind for t in spec_eps.values()} == {"fitted"} else
                "--position-cost" if args.position_cost is not None else
                "assumed: the device file does not identify it")
    print(f"band {int(100 * dv.level)} %: {eps_text} ({eps_from}), noise sd "
          f"{100 * sigma:.2f} % ({sigma_src}); " + (
              f"parameters' spread: {len(reps)} bootstrap refits stored in the device file"
              + (" (each re-calibrated on --baseline)" if cal is not None else "") if reps else
              "parameters' spread not estimated (the device file stores no bootstrap refits: "
              "refsim timing fit --boot N)"))
    if any(p.config.kind != "off" and p.config.source == "assumed" for p in prices):
        print("acceptance/coverage marked * are assumed (given in --spec)")
    shown = [(q, _cells(q, tag, args.cache_mb.strip() == "auto")) for i, p in enumerate(prices)
             for q, tag in (((replayed[i][0], "fixed replay"),) if i in replayed else ())
             + ((p, None),)]
    widths = [max([w, len(title)] + [len(c[k]) for _, c in shown])
              for k, (title, _, w, _) in enumerate(TABLE)]
    print(_row([title for title, *_ in TABLE], widths))
    for q, cells in shown:
        print(_row(cells, widths))
        if args.explain:
            for t in q.terms:
                print(f"{'':{widths[0] + 2}}{_term_line(q, t)}")
    return 0


def _check_plot_not_stdout(args) -> None:
    """``--plot`` may not be standard output's file (``/dev/stdout``, or the file ``>`` sends the
    output to): the table, ``--json`` or ``--csv`` always goes there, so the PNG would be mixed
    with it. Compared by ``os.stat`` of the path and ``os.fstat`` of standard output (st_dev,
    st_ino; :func:`refsim.cli.common.report_stream`'s test); the path is not opened.

    Raises
    ------
    UsageError
        ``--plot /dev/stdout: the same file as standard output, where the table goes; expected
        another file``.
    """
    from refsim.cli.common import report_stream
    if report_stream({"--plot": args.plot}) is not sys.stdout:
        what = "--json" if args.json else "--csv" if args.csv else "the table"
        raise UsageError(f"--plot {args.plot}: the same file as standard output, where {what} "
                         f"goes; expected another file")


def _finite(x):
    """JSON has no nan: a break-even that never comes (nan) is written null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def _term_dicts(p) -> list:
    """``p``'s terms for ``--json``: a term that does not apply (``off``'s extra positions,
    :meth:`refsim.timing.verdict.Price.not_applicable`) has value, lo and hi null."""
    return [t.as_dict() | ({"value": None, "lo": None, "hi": None} if p.not_applicable(t) else {})
            for t in p.terms]


def _term_line(p, t) -> str:
    """``--explain``'s line of term ``t`` of ``p``: ``name = - (source)`` when it does not apply."""
    return f"{t.name} = - ({t.source})" if p.not_applicable(t) else t.line()


def _no_ledger():
    """The memory term of a speculation row without a model's ledger (no ``--gguf``): its
    speculative memory is unknown, so pressure is not assessed (docs/timing.md "Memory")."""
    from refsim.timing.terms import exact
    return exact("memory", 0.0, "ms/token", "not_modelled",
                 "speculative memory unknown (no --gguf: the memory ledger is the model's): memory "
                 "pressure not assessed")


def _budget(mib: float, auto: bool = False) -> str:
    """A budget as the shortest MiB text giving back the same bytes (:func:`refsim.fmt.budget_mib`,
    replay's; docs/cli.md "Numbers"); an ``auto`` budget (the ledger's, no flag's text to give
    back) to 0.1 MiB as ``refsim memory`` prints it, its exact MiB in ``--json``'s
    ``budget_mib``."""
    if auto:
        from refsim.fmt import num
        return num(mib, 1)
    from refsim.fmt import budget_mib
    return budget_mib(ExpertCache.mib_to_bytes(mib))


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}"


TABLE = (("budget", ">", 7, "  "), ("config", "<", 16, " "), ("accept", ">", 7, " "),
         ("cover", ">", 6, " "), ("pos/dec", ">", 7, " "), ("tok/dec", ">", 7, " "),
         ("MiB/tok", ">", 8, " "), ("hit%", ">", 6, " "), ("eff_tok/s [band]", ">", 22, " "),
         ("delta% [band]", ">", 24, "  "), ("verdict", "<", 12, " "), ("break-even", ">", 10, ""))
"""The table's columns: title, alignment, least width (a column widens to its longest cell:
a long label with its policy, a budget such as 123456.25) and the separator after it."""


def _row(cells, widths) -> str:
    """One line of the table: each cell aligned in its column's width (:data:`TABLE`)."""
    return "".join(f"{c:{align}{w}}{sep}" for c, w, (_, align, _, sep) in zip(cells, widths, TABLE))


def _cells(p, tag: str | None = None, auto: bool = False) -> tuple:
    """One table row's cells (:data:`TABLE`'s columns); ``tag`` (``fixed replay``) bracketed
    after the configuration instead of its policy; ``auto``: the budget is ``--cache-mb auto``'s
    (:func:`_budget`)."""
    c = p.config
    label = (f"{c.label} [{tag}]" if tag is not None else
             c.label if c.kind == "off" or c.policy == "fixed" else f"{c.label} [{c.policy}]")
    mark = "*" if c.kind != "off" and c.source == "assumed" else ""
    acc = "" if c.kind == "off" else _pct(c.acceptance) + mark
    # MTP drafts every decode unless a live run or a policy replay measured its coverage
    shown = c.kind == "ngram" or (c.kind == "mtp" and c.coverage is not None)
    cov = _pct(c.coverage) + mark if shown else ""
    b = p.eff_tok_s
    band = f"{b.point:.3f} [{b.lo:.3f}, {b.hi:.3f}]"
    if p.delta is None:
        delta, verdict, be = "", "baseline", ""
    else:
        d = p.delta
        delta = f"{d.point:+.1f} [{d.lo:+.1f}, {d.hi:+.1f}]"
        verdict = p.verdict
        be = ("n/a" if p.breakeven_acceptance is None else
              "never" if math.isnan(p.breakeven_acceptance)
              else f"{100 * p.breakeven_acceptance:.1f}%")
    hit = "n/a" if p.hit_pct is None else f"{p.hit_pct:.1f}"
    return (_budget(p.budget_mib, auto), label, acc, cov, f"{p.positions_per_decode:.2f}",
            f"{p.tokens_per_decode:.2f}", f"{p.mib_per_token:.2f}", hit, band, delta, verdict, be)
