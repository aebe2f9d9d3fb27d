"""Limits and defaults of the engine's speculation flags (one flat module, no logic).

Source: bmoe-engine.md §1 (Parameters table; the engine's core/include/bmoe/config.h).
"""

DRAFT_MAX_DEFAULT = 3
"""``--draft N`` default: draft tokens asked per step."""

DRAFT_MAX_LIMIT = 8
"""``--draft N`` upper bound (``draft_max_limit``); the lower bound is 1."""

NGRAM_MIN_MATCH_DEFAULT = 3
"""``--ngram-min-match N`` default: shortest suffix match that may draft."""

NGRAM_MAX_MATCH = 12
"""``ngram_max_match``: the match-length cap. The engine has no CLI flag for it, so a run is
always at 12; the min-match flag is validated in ``1..NGRAM_MAX_MATCH``."""

NGRAM_MATCH_LIMIT = 64
"""``ngram_match_limit``: the config-level bound on ``ngram_max_match`` (``1..64``)."""

LLAMA_SIMPLE_SIZE_N = 12
"""llama.cpp ``ngram-simple`` default n-gram size (llama-cpp-notes.md §5.2)."""

LLAMA_SIMPLE_SIZE_M = 48
"""llama.cpp ``ngram-simple`` default continuation size (llama-cpp-notes.md §5.2)."""

SPEC_OFF, SPEC_MTP, SPEC_NGRAM = "off", "mtp", "ngram"
"""Values of the metrics preamble key ``spec=`` (bmoe-engine.md §4.1)."""

TOKEN_ID_MAX = 2**31 - 1
"""Largest token id: llama.cpp's ``llama_token`` is ``int32_t`` (include/llama.h)."""
