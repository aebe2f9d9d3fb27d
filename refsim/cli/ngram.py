"""``refsim ngram --corpus 1,2,3,... --draft N --min-match M [--max-match K] [--rule R]``.

Prints the draft the matcher proposes for a corpus (context + just-confirmed token) as
comma-separated ids, or an empty line when it drafts nothing. A debugging aid over
:data:`refsim.spec.peers.RULES`. Flags follow the engine's load-time rules
(:class:`refsim.spec.config.SpecConfig`): ``--draft`` 1..8, ``--min-match`` 1..``--max-match``
(1..12 at the default 12), ``--max-match`` 1..64; a value the engine would refuse is refused
here rather than answered with an empty or misleading draft. ``--min-match`` is checked once
``--max-match`` is known, so every bad value gets the same range text (docs/cli.md, "Conventions").
"""

from __future__ import annotations

from refsim.cli.common import check_value, draft_width, int_in, token_ids
from refsim.spec.constants import (DRAFT_MAX_LIMIT, NGRAM_MATCH_LIMIT, NGRAM_MAX_MATCH,
                                   NGRAM_MIN_MATCH_DEFAULT)
from refsim.spec.peers import RULES


def add_parser(sub) -> None:
    p = sub.add_parser(
        "ngram", help="print the n-gram draft for a corpus (debugging aid)",
        description="Print the draft an n-gram matcher proposes for CORPUS (prompt + generated "
                    "+ the just-confirmed token, last) as comma-separated ids; an empty line "
                    "when it drafts nothing.")
    p.add_argument("--corpus", required=True, type=token_ids, metavar="IDS",
                   help="comma-separated token ids; the last is the just-confirmed token")
    p.add_argument("--draft", type=draft_width, default=3, metavar="N",
                   help=f"most draft tokens, 1..{DRAFT_MAX_LIMIT} (default 3)")
    p.add_argument("--min-match", default=str(NGRAM_MIN_MATCH_DEFAULT), metavar="M",
                   help="shortest match that drafts, 1..--max-match (default 3; for "
                        "llama-simple the fixed n-gram size)")
    p.add_argument("--max-match", type=int_in(1, NGRAM_MATCH_LIMIT), default=NGRAM_MAX_MATCH,
                   metavar="K",
                   help=f"match-length cap, 1..{NGRAM_MATCH_LIMIT} (default 12, the engine's fixed value)")
    p.add_argument("--rule", choices=list(RULES), default="engine",
                   help="matcher: the engine's (default), earliest occurrence (vLLM/HF), or "
                        "llama.cpp ngram-simple")
    p.set_defaults(func=run)


def run(args) -> int:
    min_match = check_value("--min-match", args.min_match,
                            int_in(1, args.max_match, " (at most --max-match)"))
    draft = RULES[args.rule](args.corpus, args.draft, min_match, args.max_match)
    print(",".join(str(int(t)) for t in draft))
    return 0
