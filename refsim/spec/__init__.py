"""Speculative decoding: the n-gram drafter, greedy acceptance and the loop.

Public API:

- :func:`ngram_draft` / :func:`ngram_match` — the engine's matcher (pure);
  :func:`ngram_draft_numba` its Numba twin; :data:`RULES` with the peers' rules.
- :func:`greedy_accept` — acceptance of a draft against the target's argmax.
- :class:`SpeculativeLoop`, :func:`run_generation` -> :class:`RunResult` — the loop, emitting
  decode events into a :class:`refsim.cache.ExpertCache`.
- :class:`Target`, :class:`TargetOutput` — what a model must provide.
- :class:`NoDraft`, :class:`NgramDraft`, :class:`DraftSource` — draft sources.
- :class:`SpecConfig`, :func:`draft_source_for` — the engine's flags and their validation.
"""

from refsim.spec.accept import AcceptResult, greedy_accept
from refsim.spec.config import SpecConfig
from refsim.spec.draft import Draft, DraftSource, NgramDraft, NoDraft
from refsim.spec.loop import (RunResult, SpeculativeLoop, StepRecord, draft_source_for,
                              run_generation)
from refsim.spec.ngram import ngram_draft, ngram_draft_ctx, ngram_match
from refsim.spec.ngram_numba import ngram_draft_numba
from refsim.spec.peers import RULES, earliest_draft, llama_simple_draft
from refsim.spec.target import Target, TargetOutput

__all__ = ["ngram_draft", "ngram_draft_ctx", "ngram_match", "ngram_draft_numba", "RULES",
           "earliest_draft", "llama_simple_draft", "greedy_accept", "AcceptResult",
           "SpeculativeLoop", "run_generation", "RunResult", "StepRecord", "Target",
           "TargetOutput", "Draft", "DraftSource", "NoDraft", "NgramDraft", "SpecConfig",
           "draft_source_for"]
