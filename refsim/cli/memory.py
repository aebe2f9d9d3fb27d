"""``refsim memory MODEL [--ctx N] [--draft N] [--mtp | --ngram] [--ram-mb R]``: the memory ledger.

Prints what the run holds outside the expert cache (KV, recurrent state and its ``n_rs_seq``
rollback snapshots, the MTP draft context, dense weights) and, with ``--ram-mb``, the
``--cache-mb auto`` budget with and without speculation and their difference: the MiB
speculation takes from the expert cache. Logic: :mod:`refsim.cache.ledger`.
"""

from __future__ import annotations

from refsim import MIB
from refsim.cli.common import positive_int
from refsim.errors import ConfigError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("memory", help="memory ledger and the --cache-mb auto budget",
                              description="Memory a run holds outside the expert cache, and the "
                                          "engine's --cache-mb auto budget with and without speculation.")
    p.add_argument("model", help="GGUF model (header-only files work)")
    p.add_argument("--ctx", type=positive_int, default=2048, help="context length in tokens (default 2048)")
    p.add_argument("--draft", type=positive_int, default=3, help="draft width 1..8 (default 3)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--mtp", action="store_true", help="MTP draft source (needs a nextn block)")
    src.add_argument("--ngram", action="store_true", help="n-gram draft source")
    p.add_argument("--ram-mb", type=float, default=0.0, metavar="R",
                   help="MiB available before the contexts are created; prints the auto budget")
    p.add_argument("--ubatch", type=int, default=0, help="target ubatch (default 0 = --ctx)")
    p.add_argument("--dense-weights", choices=("mmap", "warm", "anon", "ahwb"), default="anon")
    p.add_argument("--cache-floor-mb", type=float, default=1536.0, help="default 1536")
    p.add_argument("--cache-ceil-mb", type=float, default=0.0, help="default 0 (no cap)")
    p.set_defaults(func=run)


def run(args) -> int:
    from refsim.cache.ledger import memory_ledger
    from refsim.model import open_model
    if args.draft > 8:
        raise ConfigError(f"--draft: expected 1..8, got {args.draft}")
    model = open_model(args.model)
    kw = dict(ram_mb=args.ram_mb, n_ubatch=args.ubatch, dense_weights=args.dense_weights,
              floor_mb=args.cache_floor_mb, ceil_mb=args.cache_ceil_mb)
    spec_on = args.mtp or args.ngram
    base = memory_ledger(model, args.ctx, 0, False, **kw)
    led = memory_ledger(model, args.ctx, args.draft if spec_on else 0, args.mtp, **kw)
    src = "mtp" if args.mtp else "ngram" if args.ngram else "off"
    print(f"# memory model={model.path} arch={model.spec.arch} n_ctx={args.ctx} spec={src} "
          f"draft_max={led.draft_max} n_rs_seq={led.n_rs_seq}")
    for line in led.lines():
        print(line)
    if args.ram_mb and spec_on:
        diff = base.budget_bytes - led.budget_bytes
        change = (f"speculation takes {diff / MIB:.1f} MiB from the expert cache" if diff >= 0 else
                  f"the budget grows by {-diff / MIB:.1f} MiB: the cap is the streamed set, and --mtp "
                  f"adds the head's experts to it")
        print(f"cache-mb auto without speculation: {base.budget_bytes / MIB:.1f} MiB; {change} "
              f"(context items {led.speculation_bytes / MIB:.1f} MiB)")
    return 0
