"""Speculative decoding: the n-gram drafter, greedy acceptance and the loop.

Public API:

- :func:`ngram_draft` / :func:`ngram_match` — the engine's matcher (pure);
  :func:`ngram_draft_numba` its Numba twin; :data:`RULES` with the peers' rules.
- :func:`greedy_accept` — acceptance of a draft against the target's argmax.
- :class:`SpeculativeLoop`, :func:`run_generation` -> :class:`RunResult` — the loop, emitting
  decode events into a :class:`refsim.cache.ExpertCache`.
- :class:`Target`, :class:`TargetOutput` — what a model must provide; :class:`ForwardTarget` —
  a GGUF model's reference forward pass as a Target (:mod:`refsim.spec.forward_target`).
- :class:`NoDraft`, :class:`NgramDraft`, :class:`DraftSource` — draft sources.
- :class:`SpecConfig`, :func:`draft_source_for` — the engine's flags and their validation.
"""

from refsim.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "AcceptResult": "accept", "greedy_accept": "accept", "SpecConfig": "config", "Draft": "draft",
    "DraftSource": "draft", "NgramDraft": "draft", "NoDraft": "draft", "RunResult": "loop",
    "SpeculativeLoop": "loop", "StepRecord": "loop", "draft_source_for": "loop",
    "run_generation": "loop", "ngram_draft": "ngram", "ngram_draft_ctx": "ngram",
    "ngram_match": "ngram", "ngram_draft_numba": "ngram_numba", "RULES": "peers",
    "earliest_draft": "peers", "llama_simple_draft": "peers", "Target": "target",
    "TargetOutput": "target", "ForwardTarget": "forward_target",
})
__all__ = ["ngram_draft", "ngram_draft_ctx", "ngram_match", "ngram_draft_numba", "RULES",
           "earliest_draft", "llama_simple_draft", "greedy_accept", "AcceptResult",
           "SpeculativeLoop", "run_generation", "RunResult", "StepRecord", "Target",
           "TargetOutput", "Draft", "DraftSource", "NoDraft", "NgramDraft", "SpecConfig",
           "draft_source_for", "ForwardTarget"]
