"""``refsim ngram-whatif --tokens FILE --prompt-len P [-n N --eog ID | --model GGUF] --draft 1..8
--min-match 1..8``.

Acceptance, coverage and tokens per decode for every (draft, min-match) cell, from one greedy
token stream (prompt + generated): :func:`refsim.spec.whatif.ngram_whatif`, with the live run's
stop rule: ``-n`` and, for a run that stopped at an end-of-generation token, that token
(``--eog ID``, or the model's ``tokenizer.ggml.eos_token_id`` with ``--model``, the rule
``refsim run`` stops by). A cell that never drafted has no acceptance: ``n/a`` in the table,
``nan`` in the CSV (:mod:`refsim.fmt`).
"""

from __future__ import annotations

import csv
import sys

from refsim.cli.common import int_list, positive_int, token_id
from refsim.errors import ConfigError
from refsim.fmt import csv_num, num, pct_text
from refsim.spec.constants import DRAFT_MAX_LIMIT, NGRAM_MAX_MATCH
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
    p.add_argument("-n", "--n-predict", type=positive_int, default=None, metavar="N",
                   help="the live run's -n (default: the stream's generated length, a run that "
                        "stopped at -n)")
    eog = p.add_mutually_exclusive_group()
    eog.add_argument("--eog", type=token_id, default=None, metavar="ID",
                     help="the run stopped at this end-of-generation token before -n (refsim run "
                          "--json: eog_token); drafting it ends the generation as live")
    eog.add_argument("--model", metavar="GGUF", default=None,
                     help="take the end-of-generation token from the model, as refsim run does "
                          "(tokenizer.ggml.eos_token_id; a header-only file works)")
    p.add_argument("--draft", type=int_list(1, DRAFT_MAX_LIMIT), default=list(range(1, 9)),
                   metavar="D", help=f"draft widths: N, N,M,... or A..B, 1..{DRAFT_MAX_LIMIT} "
                                     f"(default 1..8)")
    p.add_argument("--min-match", type=int_list(1, NGRAM_MAX_MATCH), default=list(range(1, 9)),
                   metavar="M", help=f"min-match values, 1..{NGRAM_MAX_MATCH} (default 1..8)")
    p.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    p.set_defaults(func=run)


def _model_eog(path: str) -> int | None:
    """The end-of-generation id ``refsim run`` stops at for the model at ``path``, or None."""
    from refsim.spec.forward_target import eog_ids
    from refsim.model import open_model
    ids = eog_ids(open_model(path))
    if len(ids) > 1:   # pragma: no cover - eog_ids reads one key today
        raise ConfigError(f"--model {path}: several end-of-generation ids {sorted(ids)}; give "
                          f"--eog ID (refsim run --json: eog_token)")
    return next(iter(ids), None)


def run(args) -> int:
    stream = read_token_file(args.tokens)
    eog = _model_eog(args.model) if args.model is not None else args.eog
    cells = ngram_whatif(stream, args.prompt_len, args.draft, args.min_match,
                         n_predict=args.n_predict, eog=eog)
    if args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(COLUMNS)
        for c in cells:
            w.writerow([c.draft, c.min_match, c.tokens, c.decodes, c.drafted, c.accepted,
                        c.drafted_steps, csv_num(c.acceptance_pct, 1), csv_num(c.coverage_pct, 1),
                        csv_num(c.tokens_per_decode, 2)])
        return 0
    n_gen = stream.size - args.prompt_len
    stop = (f"stopped at -n {n_gen}" if args.n_predict in (None, n_gen)
            else f"stopped at end-of-generation token {eog} before -n {args.n_predict}")
    print(f"stream: {stream.size} tokens, prompt {args.prompt_len}, generated {n_gen} ({stop})")
    print(f"{'draft':>5} {'min':>4} {'accept':>8} {'coverage':>8} {'tok/dec':>8} {'decodes':>8}")
    for c in cells:
        print(f"{c.draft:>5} {c.min_match:>4} {pct_text(c.acceptance_pct):>8} "
              f"{pct_text(c.coverage_pct):>8} {num(c.tokens_per_decode, 2):>8} {c.decodes:>8}")
    return 0
