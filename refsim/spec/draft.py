"""Draft sources: who proposes the tokens a verify decode checks.

A draft source is asked once per step, before the target decode, with the corpus the engine
keeps (``ctx`` = prompt + emitted tokens, and ``last`` = the just-confirmed token ``tok``,
which is not yet in ``ctx``) and the width ``n_max = min(draft_max, room)``. It returns a
:class:`Draft`: the tokens, and any decode events its own model ran (an MTP head's draft
context; those are ``DecodeKind.DRAFT`` and are fed to the same cache). After acceptance the
loop calls ``accept(n_acc)``, which may return more events (the MTP catch-up).

Sources here: :class:`NoDraft` (speculation off) and :class:`NgramDraft` (the engine's
n-gram drafter, or a peer rule for comparison). The MTP source is future work: it needs the
forward pass's nextn block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from refsim.errors import ConfigError
from refsim.events import DecodeEvent
from refsim.spec.constants import NGRAM_MAX_MATCH, NGRAM_MIN_MATCH_DEFAULT, SPEC_NGRAM, SPEC_OFF
from refsim.spec.ngram_numba import ngram_draft_numba
from refsim.spec.peers import RULES


@dataclass(frozen=True)
class Draft:
    """One proposal.

    Attributes
    ----------
    tokens : (n,) int32 ndarray
        Draft tokens ``d1..dn`` (``n`` may be 0).
    events : tuple of DecodeEvent
        Decodes the source ran to draft (``DecodeKind.DRAFT``); empty for n-gram.
    """

    tokens: np.ndarray
    events: tuple[DecodeEvent, ...] = field(default=())


@runtime_checkable
class DraftSource(Protocol):
    """What the loop asks of a draft source.

    Attributes
    ----------
    name : {'off', 'ngram', 'mtp'}
        The metrics preamble's ``spec=`` value and the summary lines' ``<src>``.
    """

    name: str

    def draft(self, ctx: np.ndarray, last: int, n_past: int, n_max: int) -> Draft: ...

    def accept(self, n_acc: int) -> tuple[DecodeEvent, ...]: ...


class NoDraft:
    """Speculation off: never drafts (every step is a plain one-token decode)."""

    name = SPEC_OFF

    def draft(self, ctx: np.ndarray, last: int, n_past: int, n_max: int) -> Draft:
        return Draft(np.zeros(0, dtype=np.int32))

    def accept(self, n_acc: int) -> tuple[DecodeEvent, ...]:
        return ()


class NgramDraft:
    """The n-gram (prompt lookup) source: no model, no reads, no events.

    Parameters
    ----------
    min_match : int, default 3
        ``--ngram-min-match``.
    max_match : int, default 12
        ``ngram_max_match``.
    rule : {'engine', 'earliest', 'llama-simple'}, default 'engine'
        Matcher (:data:`refsim.spec.peers.RULES`); 'engine' runs the Numba twin of
        :func:`refsim.spec.ngram.ngram_draft` (same results, fast on long corpora).

    Raises
    ------
    ConfigError
        For an unknown rule.
    """

    name = SPEC_NGRAM

    def __init__(self, min_match: int = NGRAM_MIN_MATCH_DEFAULT,
                 max_match: int = NGRAM_MAX_MATCH, rule: str = "engine"):
        if rule not in RULES:
            raise ConfigError(f"--rule: expected one of {', '.join(RULES)}, got {rule!r}")
        self.min_match = int(min_match)
        self.max_match = int(max_match)
        self.rule = rule
        self._fn = ngram_draft_numba if rule == "engine" else RULES[rule]
        if rule == "engine":      # compile (or load) the kernel now, so the first draft's time --
            self._fn(np.zeros(2, np.int64), 1, 1, 1)   # the 'drafting costs' line -- is drafting only

    def draft(self, ctx: np.ndarray, last: int, n_past: int, n_max: int) -> Draft:
        corpus = np.append(np.asarray(ctx, dtype=np.int64), np.int64(last))
        return Draft(self._fn(corpus, n_max, self.min_match, self.max_match))

    def accept(self, n_acc: int) -> tuple[DecodeEvent, ...]:
        return ()

    def __repr__(self) -> str:
        return f"NgramDraft(min_match={self.min_match}, max_match={self.max_match}, " \
               f"rule={self.rule!r})"
