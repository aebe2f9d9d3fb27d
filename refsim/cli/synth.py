"""``refsim synth --arch qwen3moe|qwen35moe [--nextn] [--quant TYPE] [--seed N] --out PATH``."""

from __future__ import annotations

from refsim.cli.common import seed as _seed
from refsim.model.synth import QUANTS


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("synth", help="write a small seeded synthetic GGUF in the real tensor layout")
    p.add_argument("--arch", choices=("qwen3moe", "qwen35moe"), required=True)
    p.add_argument("--nextn", action="store_true", help="qwen35moe: add the nextn/MTP block")
    p.add_argument("--quant", choices=QUANTS, default="F32", help="weight type (default F32; mixed = Q4_K_M-like)")
    p.add_argument("--seed", type=_seed, default=0, help="random seed, 0..2^32-1 (default 0)")
    p.add_argument("--out", required=True,
                   help="output .gguf path (a file is replaced atomically; binary, so not -)")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from refsim.cli.common import check_outputs
    from refsim.fileio import OutputKind, resolve_output
    from refsim.model.synth import write_synthetic
    check_outputs({"--out": args.out}, binary=("--out",))
    in_place = resolve_output(args.out, "--out", binary=True).kind is OutputKind.DIRECT
    path = write_synthetic(args.out, arch=args.arch, quant=args.quant, nextn=args.nextn, seed=args.seed)
    # a FIFO or /dev/stdout carries the GGUF: the path goes to stderr, not into the stream
    print(path, file=sys.stderr if in_place else sys.stdout)
    return 0
