"""``refsim ngram-whatif --tokens FILE --prompt-len P --draft 1..8 --min-match 1..8``.

Acceptance, coverage and tokens per decode for every (draft, min-match) cell, from one greedy
token stream (prompt + generated): :func:`refsim.spec.whatif.ngram_whatif`. A cell that never
drafted has no acceptance: ``n/a`` in the table, ``nan`` in the CSV (:mod:`refsim.fmt`).
"""

from __future__ import annotations

import csv
import sys

from refsim.cli.common import int_range, positive_int
from refsim.fmt import csv_num, num, pct_text
from refsim.spec.whatif import ngram_whatif, read_token_file

COLUMNS = ("draft", "min_match", "tokens", "decodes", "drafted", "accepted", "drafted_steps",
           "acceptance_pct", "coverage_pct", "tokens_per_decode")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "ngram-whatif", help="n-gram acceptance/coverage over a draft x min-match grid",
        description="Replay the engine's n-gram loop offline on one greedy token stream for "
                    "every --draft x --min-match cell (exact for greedy decoding).")
    p.add_argument("--tokens", required=True, metavar="FILE",
                   help="token ids (prompt then generated), separated by commas or whitespace")
    p.add_argument("--prompt-len", required=True, type=positive_int, metavar="P",
                   help="how many leading ids are the prompt")
    p.add_argument("--draft", type=int_range, default=[1, 2, 3, 4, 5, 6, 7, 8], metavar="D",
                   help="draft widths: N, N,M,... or A..B (default 1..8)")
    p.add_argument("--min-match", type=int_range, default=[1, 2, 3, 4, 5, 6, 7, 8],
                   metavar="M", help="min-match values (default 1..8)")
    p.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    p.set_defaults(func=run)


def run(args) -> int:
    stream = read_token_file(args.tokens)
    cells = ngram_whatif(stream, args.prompt_len, args.draft, args.min_match)
    if args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(COLUMNS)
        for c in cells:
            w.writerow([c.draft, c.min_match, c.tokens, c.decodes, c.drafted, c.accepted,
                        c.drafted_steps, csv_num(c.acceptance_pct, 1), csv_num(c.coverage_pct, 1),
                        csv_num(c.tokens_per_decode, 2)])
        return 0
    print(f"stream: {stream.size} tokens, prompt {args.prompt_len}, generated "
          f"{stream.size - args.prompt_len}")
    print(f"{'draft':>5} {'min':>4} {'accept':>8} {'coverage':>8} {'tok/dec':>8} {'decodes':>8}")
    for c in cells:
        print(f"{c.draft:>5} {c.min_match:>4} {pct_text(c.acceptance_pct):>8} "
              f"{pct_text(c.coverage_pct):>8} {num(c.tokens_per_decode, 2):>8} {c.decodes:>8}")
    return 0
