"""``refsim memory MODEL [--ctx N] [--draft N] [--mtp | --ngram] [--ram-mb R]``: the memory ledger.

Prints what the run holds outside the expert cache (KV, recurrent state and its ``n_rs_seq``
rollback snapshots, the MTP draft context, dense weights) and, with ``--ram-mb``, the
``--cache-mb auto`` budget with and without speculation and their difference: the MiB
speculation takes from the expert cache. Logic: :mod:`refsim.cache.ledger`.

With ``--device DEVICE.json`` it also prints what that device predicts from the model's bytes
alone (:func:`refsim.timing.whatif.memory_whatif`): plain decoding at 0 MiB/token (all hits), at
``--hit-pct P`` (a decode-only hit without a knob, said in the output), at a run's own
``--mib-per-token M`` (the engine's summary figure, drop or not) and at one token cycle T (all
misses). The engine's cumulative ``cache_hit_pct`` is refused (``--hit-kind cumulative``): it fixes
no read level. With ``--ram-mb`` as well it prints the
resident demand by kind for the ``--dense-weights`` mode and the memory-pressure term
(:mod:`refsim.timing.pressure`, the fault model fitted on the shared phone runs:
docs/memory-pressure.md), beside and not inside the lines above.
"""

from __future__ import annotations

import dataclasses
import json

from refsim import MAX_CACHE_MIB, MIB
from refsim.cli.common import (MIB_RANGE, draft_width, mib, nonneg_float, nonneg_int, percent,
                               positive_int, positive_mib)
from refsim.cli.device import add_device_args, for_input, gguf_names, load_device_args, warn_input_model
from refsim.errors import ConfigError, UsageError
from refsim.fmt import num, plural

CTX_DEFAULT = 2048
"""``--ctx`` when not given (clamped to the model's ``n_ctx_train``)."""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("memory", help="memory ledger and the --cache-mb auto budget",
                              description="Memory a run holds outside the expert cache, and the "
                                          "engine's --cache-mb auto budget with and without speculation.")
    p.add_argument("model", help="GGUF model (header-only files work), or a name refsim run "
                                 "takes: builtin, gemma-3-270m")
    p.add_argument("--ctx", type=positive_int, default=None,
                   help="context length in tokens, 1..the model's n_ctx_train (default 2048, or "
                        "n_ctx_train if smaller)")
    p.add_argument("--draft", type=draft_width, default=None,
                   help="draft width 1..8 (default 3); needs --mtp or --ngram")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--mtp", action="store_true", help="MTP draft source (needs a nextn block)")
    src.add_argument("--ngram", action="store_true", help="n-gram draft source")
    p.add_argument("--ram-mb", type=positive_mib, default=None, metavar="R",
                   help="MiB available before the contexts are created (> 0); prints the auto budget")
    p.add_argument("--ubatch", type=nonneg_int, default=0,
                   help="target ubatch (default 0 = --ctx); with --ngram or --mtp it must "
                        "hold the verify batch (--draft + 1)")
    p.add_argument("--dense-weights", choices=("mmap", "warm", "anon", "ahwb"), default="anon",
                   help="how the engine holds the dense (non-expert) weights; anon and ahwb count "
                        "against --ram-mb in the auto budget (default anon, the engine's; "
                        "bmoe-engine.md §3.3-3.4)")
    p.add_argument("--cache-floor-mb", type=mib, default=1536.0, help="default 1536")
    p.add_argument("--cache-ceil-mb", type=mib, default=0.0, help="default 0 (no cap)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object instead of text (keys: docs/hybrid.md)")
    g = add_device_args(p, positions=False)
    g.add_argument("--hit-pct", type=percent, default=None, metavar="P",
                   help="with --device: also predict plain decoding at this decode hit %% "
                        "(refsim replay's decode-only figure at the budget, without a knob), read "
                        "as (1 - P/100) x T MiB/token")
    g.add_argument("--hit-kind", choices=("decode", "cumulative"), default="decode",
                   help="which hit --hit-pct is: decode (default; refsim replay's hit_dec%%, no "
                        "knob); cumulative, the engine's cache_hit_pct (prefill included, dropped "
                        "misses counted), is refused: no read level follows from it")
    g.add_argument("--mib-per-token", type=nonneg_float, default=None, metavar="M",
                   help="with --device: also predict plain decoding at a run's own MiB/token (the "
                        "engine's summary read_MiB / tokens, with --drop-cold-experts or not; at "
                        "most 2^40)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Validate every flag, compute both ledgers and their budgets, then print (nothing is
    printed when a check fails)."""
    from refsim.cache.ledger import memory_ledger
    from refsim.model import open_model
    from refsim.spec import SpecConfig
    # the engine's rules, as refsim run applies them: --draft 1..8, only with a draft source
    config = SpecConfig.from_flags(ngram=args.ngram, mtp=args.mtp, draft=args.draft)
    if config.enabled and 0 < args.ubatch < config.draft_max + 1:
        raise UsageError(f"argument --ubatch: expected 0 (= --ctx) or an integer >= --draft + 1 = "
                         f"{config.draft_max + 1} (the verify batch), got '{args.ubatch}'")
    for flag, given in (("--hit-pct", args.hit_pct is not None),
                        ("--mib-per-token", args.mib_per_token is not None)):
        if given and args.device is None:
            raise UsageError(f"{flag} without --device: it sets the device model's what-if")
    if args.hit_kind == "cumulative":
        from refsim.timing.whatif import ENGINE_HIT_REFUSAL
        raise UsageError(ENGINE_HIT_REFUSAL)
    if args.mib_per_token is not None and args.mib_per_token > MAX_CACHE_MIB:
        # the project's MiB ceiling (docs/cli.md): 2^40 MiB = 2^60 bytes, the largest MiB count
        # whose bytes an int64 holds; beyond it the "prediction" is an overflow, not a device time
        raise UsageError(f"argument --mib-per-token: expected {MIB_RANGE}, got "
                         f"'{args.mib_per_token:g}'")
    device = load_device_args(args, defer=True)
    from refsim.session import named_model_path
    path = named_model_path(args.model)
    model = open_model(path)   # builtin, gemma-3-270m: refsim run's names
    names = gguf_names(path, model)
    device = for_input(args, device, names)     # the model's own floor
    n_ctx_train = model.spec.n_ctx_train
    if args.ctx is None:
        args.ctx = min(CTX_DEFAULT, n_ctx_train) if n_ctx_train > 0 else CTX_DEFAULT
    elif n_ctx_train > 0 and args.ctx > n_ctx_train:
        raise ConfigError(f"--ctx: expected 1..{n_ctx_train} (the model's n_ctx_train), "
                          f"got {args.ctx}")
    ram_mb = args.ram_mb or 0.0  # None = not given: no auto budget
    kw = dict(ram_mb=ram_mb, n_ubatch=args.ubatch, dense_weights=args.dense_weights,
              floor_mb=args.cache_floor_mb, ceil_mb=args.cache_ceil_mb)
    spec_on = config.enabled
    base = memory_ledger(model, args.ctx, 0, False, **kw)
    led = memory_ledger(model, args.ctx, config.preamble_draft_max, args.mtp, **kw)
    base_budget, led_budget = base.budget_bytes, led.budget_bytes  # validates floor/ceil
    lines = led.lines()
    src = config.spec
    warn_input_model(args, device, names)      # after the ledger: a refusal stays the only line
    if args.json:
        print(json.dumps(_json(args, model, led, base_budget if ram_mb and spec_on else None,
                               device)))
        return 0
    print(f"# memory model={model.path} arch={model.spec.arch} n_ctx={args.ctx} spec={src} "
          f"draft_max={led.draft_max} n_rs_seq={led.n_rs_seq}")
    for line in lines:
        print(line)
    if ram_mb and spec_on:
        diff = base_budget - led_budget
        change = (f"speculation takes {num(diff / MIB, 1)} MiB from the expert cache" if diff >= 0 else
                  f"the budget grows by {num(-diff / MIB, 1)} MiB: the cap is the streamed set, and --mtp "
                  f"adds the head's experts to it")
        print(f"cache-mb auto without speculation: {num(base_budget / MIB, 1)} MiB; {change} "
              f"(context items {num(led.speculation_bytes / MIB, 1)} MiB)")
    if device is not None:
        _device_lines(args, device, model, led, led_budget)
    return 0


def _json(args, model, led, base_budget, device) -> dict:
    """The ``--json`` object (docs/hybrid.md "refsim memory --json"): the run's words, every
    ledger field (bytes, its ``lines()`` items; ``context_bytes``, ``speculation_bytes``,
    ``avail_bytes`` added), the exact auto
    budgets in bytes (null without ``--ram-mb``), and with ``--device`` its predicted cases."""
    out = {"model": model.path, "arch": model.spec.arch, "n_ctx": args.ctx,
           "spec": "mtp" if args.mtp else "ngram" if args.ngram else "off",
           "ledger": {**dataclasses.asdict(led), "context_bytes": led.context_bytes,
                      "speculation_bytes": led.speculation_bytes, "avail_bytes": led.avail_bytes},
           "budget_bytes": led.budget_bytes,
           "budget_without_speculation_bytes": base_budget}
    if device is not None:
        from refsim.timing.whatif import memory_whatif
        dev, name, key = device
        cases = memory_whatif(dev, name, key, model.t_bytes() / MIB, args.io_threads,
                              args.overlap, args.hit_pct, args.mib_per_token)
        out["device"] = {"name": name, "model": key, "io_threads": args.io_threads,
                         "overlap": bool(args.overlap), "hit_kind": "decode",
                         "cases": [{"case": c.case, "mib_per_token": c.mib_per_token,
                                    "predicted_s_per_token": c.whatif.predicted_s_per_token,
                                    "predicted_tok_s": c.whatif.predicted_tok_s} for c in cases]}
    return out


def _device_lines(args, loaded, model, led, budget) -> None:
    """``--device``: predicted plain decoding at the read levels the model's bytes fix."""
    from refsim.timing.whatif import memory_whatif
    dev, name, key = loaded
    t_mib = model.t_bytes() / MIB
    from refsim.timing.whatif import HIT_DEFINITION
    cases = memory_whatif(dev, name, key, t_mib, args.io_threads, args.overlap, args.hit_pct,
                          args.mib_per_token)
    print(f"device {name} (predicted, not measured): plain decoding, one position per decode, "
          f"expert cache on, {plural(args.io_threads, 'lane')}, {'--overlap' if args.overlap else 'serial'}, "
          f"compute floor of {key}"
          + (f"; hit % = {HIT_DEFINITION}" if args.hit_pct is not None else ""))
    width = max(12, *(len(c.case) + 1 for c in cases))
    for c in cases:
        w = c.whatif
        print(f"  {c.case + ':':<{width}} {num(c.mib_per_token, 1):>8} MiB/token -> "
              f"{w.predicted_s_per_token:.4f} s/token, {w.predicted_tok_s:.3f} tok/s")
    if budget is not None:
        _pressure_lines(args, name, model, led, budget, t_mib)
    if budget is not None and budget >= led.total_expert_bytes:
        print(f"  the auto budget ({num(budget / MIB, 1)} MiB) holds the whole streamed set: a warm "
              f"cache reads 0 MiB/token, the all-hits line")
    else:
        at = f" at {num(budget / MIB, 1)} MiB" if budget is not None else ""
        print(f"  the hit rate{at} is a trace's: refsim replay TRACE --cache-mb N --device {name} "
              f"predicts it; refsim timing breakeven prices speculation's wider verify decodes")


def _pressure_lines(args, name, model, led, budget, t_mib) -> None:
    """``--device`` with ``--ram-mb``: resident demand and the memory-pressure term at the auto
    budget, a full context (``--ctx`` positions attended) and the hit level of ``--hit-pct``
    (default all hits: the most a token touches)."""
    from refsim.cache.demand import model_demand
    from refsim.timing.pressure import PHONE_FIT, fault_time, predict_majflt
    d = model_demand(model, led, budget)
    for line in d.lines():
        print(f"  {line}")
    if d.evictable_bytes == 0:
        return
    pct = 100.0 if args.hit_pct is None else args.hit_pct
    w = d.touched_bytes(pct / 100.0 * t_mib * MIB, args.ctx) / MIB
    m = predict_majflt(PHONE_FIT, d.total_bytes / MIB, args.ram_mb, w, d.evictable_bytes / MIB)
    t = fault_time(PHONE_FIT, m)
    e = max(0.0, d.total_bytes / MIB + PHONE_FIT.reserve.value - args.ram_mb)
    print(f"  memory pressure (fault model of the 2026-07-22 phone runs, not {name}'s; "
          f"docs/memory-pressure.md): evicted {num(e, 1)} MiB, touched {num(w, 1)} MiB/token at "
          f"hit {num(pct, 1)}% -> {m.value:.1f} [{m.lo:.1f}, {m.hi:.1f}] major faults/token, "
          f"+{t.value:.1f} [{t.lo:.1f}, {t.hi:.1f}] ms/token (not in the lines above)")
