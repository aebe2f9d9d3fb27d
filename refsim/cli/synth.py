"""``refsim synth --arch qwen3moe|qwen35moe [--nextn] [--quant TYPE] [--seed N] --out PATH``, or
``refsim synth --like NAME --header-only --out PATH``: a real model's header-only twin."""

from __future__ import annotations

from refsim.cli.common import seed as _seed
from refsim.model.synth import QUANTS, qwen3_30b_a3b_q4_k_m_twin, qwen36_35b_a3b_twin

LIKE = {"qwen3.6-35b-a3b": qwen36_35b_a3b_twin, "qwen3-30b-a3b": qwen3_30b_a3b_q4_k_m_twin}
"""``--like`` names: the header-only twins of :mod:`refsim.model.synth` (Qwen3.6-35B-A3B with its
nextn block, Q4_K_M-like types; Qwen3-30B-A3B-Q4_K_M)."""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("synth", help="write a small seeded synthetic GGUF in the real tensor layout")
    p.add_argument("--arch", choices=("qwen3moe", "qwen35moe"),
                   help="the small synthetic model's architecture (required without --like)")
    p.add_argument("--like", choices=tuple(LIKE),
                   help="a real model's header-only twin (its tensor table and metadata, no "
                        "weights: for refsim memory and byte accounting at real widths; docs/hybrid.md); "
                        "needs --header-only")
    p.add_argument("--header-only", action="store_true",
                   help="write the header and tensor table only (with --like)")
    p.add_argument("--nextn", action="store_true", help="qwen35moe: add the nextn/MTP block")
    p.add_argument("--quant", choices=QUANTS, default="F32", help="weight type (default F32; mixed = Q4_K_M-like)")
    p.add_argument("--seed", type=_seed, default=0, help="random seed, 0..2^32-1 (default 0)")
    p.add_argument("--out", required=True,
                   help="output .gguf path (a file is replaced atomically; binary, so not -)")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from refsim.errors import UsageError
    if args.like is None and args.arch is None:
        raise UsageError("the following arguments are required: --arch (or --like NAME --header-only)")
    if args.like is not None:
        given = [f for f, on in (("--arch", args.arch is not None), ("--nextn", args.nextn),
                                 ("--quant", args.quant != "F32"), ("--seed", args.seed != 0)) if on]
        if given:
            raise UsageError(f"argument --like: not allowed with {', '.join(given)} (the twin is "
                             f"the real model's layout)")
        if not args.header_only:
            raise UsageError("argument --like: needs --header-only (a twin has no weights)")
    elif args.header_only:
        raise UsageError("argument --header-only: only with --like")

    from refsim.cli.common import check_outputs
    from refsim.fileio import OutputKind, resolve_output
    from refsim.model.synth import write_synthetic
    check_outputs({"--out": args.out}, binary=("--out",))
    in_place = resolve_output(args.out, "--out", binary=True).kind is OutputKind.DIRECT
    if args.like is not None:
        path = LIKE[args.like](args.out)
    else:
        path = write_synthetic(args.out, arch=args.arch, quant=args.quant, nextn=args.nextn,
                               seed=args.seed)
    # a FIFO or /dev/stdout carries the GGUF: the path goes to stderr, not into the stream
    print(path, file=sys.stderr if in_place else sys.stdout)
    return 0
