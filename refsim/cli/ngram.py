"""``refsim ngram --corpus 1,2,3,... --draft N --min-match M [--max-match K] [--rule R]``.

Prints the draft the matcher proposes for a corpus (context + just-confirmed token) as
comma-separated ids, or an empty line when it drafts nothing. A debugging aid over
:data:`refsim.spec.peers.RULES`; values are the matcher's raw inputs (``--draft 0`` and
``--max-match`` below ``--min-match`` are allowed, as in the engine's test vectors).
"""

from __future__ import annotations

import argparse

from refsim.spec.constants import NGRAM_MATCH_LIMIT, NGRAM_MAX_MATCH, NGRAM_MIN_MATCH_DEFAULT
from refsim.spec.peers import RULES


def _token_list(text: str) -> list[int]:
    try:
        out = [int(t) for t in text.split(",") if t.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated token ids like 1,2,3, got {text!r}") from None
    if not out or any(t < 0 for t in out):
        raise argparse.ArgumentTypeError(
            f"expected at least one non-negative token id, got {text!r}")
    return out


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _max_match(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= NGRAM_MATCH_LIMIT:
        raise argparse.ArgumentTypeError(f"expected 1..{NGRAM_MATCH_LIMIT}, got {text!r}")
    return value


def add_parser(sub) -> None:
    p = sub.add_parser(
        "ngram", help="print the n-gram draft for a corpus (debugging aid)",
        description="Print the draft an n-gram matcher proposes for CORPUS (prompt + generated "
                    "+ the just-confirmed token, last) as comma-separated ids; an empty line "
                    "when it drafts nothing.")
    p.add_argument("--corpus", required=True, type=_token_list, metavar="IDS",
                   help="comma-separated token ids; the last is the just-confirmed token")
    p.add_argument("--draft", type=_nonneg_int, default=3, metavar="N",
                   help="most draft tokens (default 3)")
    p.add_argument("--min-match", type=_nonneg_int, default=NGRAM_MIN_MATCH_DEFAULT,
                   metavar="M", help="shortest match that drafts (default 3; for llama-simple "
                             "the fixed n-gram size)")
    p.add_argument("--max-match", type=_max_match, default=NGRAM_MAX_MATCH, metavar="K",
                   help="match-length cap (default 12, the engine's fixed value)")
    p.add_argument("--rule", choices=list(RULES), default="engine",
                   help="matcher: the engine's (default), earliest occurrence (vLLM/HF), or "
                        "llama.cpp ngram-simple")
    p.set_defaults(func=run)


def run(args) -> int:
    draft = RULES[args.rule](args.corpus, args.draft, args.min_match, args.max_match)
    print(",".join(str(int(t)) for t in draft))
    return 0
