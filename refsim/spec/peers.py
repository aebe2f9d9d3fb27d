"""The peers' n-gram rules, for comparison with the engine's (:mod:`refsim.spec.ngram`).

Each is a pure function ``(corpus, n_draft, min_match, max_match) -> (n,) int32`` over the same
corpus (context + just-confirmed token, last element). They are our statements of the rules,
written from the descriptions cited below, not ports of the peers' code.

- :func:`earliest_draft` — **earliest occurrence wins** (vLLM's n-gram proposer and Hugging
  Face's prompt-lookup decoding): try suffix lengths from the longest allowed down to
  ``min_match``; for the first length that occurs earlier in the corpus, take its leftmost
  occurrence. Differs from the engine when a suffix occurs more than once (the engine takes the
  most recent) and when a longer match is not the longest possible (the engine caps at
  ``max_match`` and then prefers recency; this rule prefers the earliest at that length).
- :func:`llama_simple_draft` — llama.cpp ``ngram-simple`` (llama-cpp-notes.md §5.2): one fixed
  n-gram size ``n`` (here ``min_match``), an exact match searched backwards from
  ``len - n - 1`` to 1 (index 0 never matches), the first (most recent) hit wins; the history
  must be longer than ``n + m + 1`` tokens; the continuation is at most ``m`` (= 48) tokens, and
  one shorter than ``n`` drafts nothing; the framework truncates it to ``n_draft``.

``RULES`` maps the CLI's ``--rule`` names to these functions and the engine's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from refsim.spec.constants import LLAMA_SIMPLE_SIZE_M, NGRAM_MAX_MATCH
from refsim.spec.ngram import ngram_draft

_EMPTY = np.zeros(0, dtype=np.int32)


def earliest_draft(corpus: Sequence[int] | np.ndarray, n_draft: int, min_match: int = 1,
                   max_match: int = NGRAM_MAX_MATCH) -> np.ndarray:
    """Draft by the earliest occurrence of the longest matching suffix (vLLM / HF rule).

    Parameters
    ----------
    corpus : (L,) int sequence
        Context + just-confirmed token.
    n_draft : int
        Most tokens to propose (<= 0: none).
    min_match, max_match : int
        Suffix lengths tried, from ``min(max_match, L - 1)`` down to ``max(1, min_match)``.

    Returns
    -------
    (n,) int32 ndarray
        ``C[i + m : i + m + n_draft]`` (clipped at the corpus end) for the leftmost ``i``
        with ``C[i : i + m] == C[L - m :]``, ``i + m <= L - 1``, at the longest such ``m``.

    Notes
    -----
    Sources: the vLLM n-gram proposer (``prompt_lookup_max``/``prompt_lookup_min``) and
    Hugging Face ``prompt_lookup_num_tokens``, as described in our words; the candidate must
    end before the corpus end so the suffix never matches itself, as in the engine.
    """
    c = np.asarray(corpus, dtype=np.int64)
    n = c.size
    lo = max(1, int(min_match))
    if n_draft <= 0 or n < 2:
        return _EMPTY.copy()
    for m in range(min(int(max_match), n - 1), lo - 1, -1):
        suffix = c[n - m:]
        for i in range(0, n - m):
            if np.array_equal(c[i:i + m], suffix):
                return c[i + m: i + m + int(n_draft)].astype(np.int32)
    return _EMPTY.copy()


def llama_simple_draft(corpus: Sequence[int] | np.ndarray, n_draft: int, min_match: int = 12,
                       max_match: int = NGRAM_MAX_MATCH,
                       size_m: int = LLAMA_SIMPLE_SIZE_M) -> np.ndarray:
    """llama.cpp ``ngram-simple``: fixed n-gram size, most recent exact hit, long history.

    Parameters
    ----------
    corpus : (L,) int sequence
        History followed by the just-sampled token (``id_last``).
    n_draft : int
        Truncation applied by the speculative framework (``draft.n_max``); <= 0: none.
    min_match : int, default 12
        The n-gram size ``size_n`` (the pattern is the corpus's last ``n`` tokens).
    max_match : int
        Unused (the rule has no variable length); kept for the common signature.
    size_m : int, default 48
        Continuation size ``size_m``.

    Returns
    -------
    (k,) int32 ndarray
        ``history[j + n : j + n + copy][:n_draft]`` with ``copy = min(m, len - (j + n))`` for
        the largest ``j`` in ``[1, len - n - 1]`` whose n-gram equals the pattern; empty when
        ``len <= n + m + 1``, nothing matches, or ``copy < n``. ``len`` = history length.

    Notes
    -----
    llama-cpp-notes.md §5.2 (common/ngram-map.cpp ``common_ngram_simple_draft``).
    """
    del max_match
    c = np.asarray(corpus, dtype=np.int64)
    n, m = int(min_match), int(size_m)
    if n_draft <= 0 or n < 1 or c.size < 1:
        return _EMPTY.copy()
    history = c[:-1]
    length = history.size
    if not length > n + m + 1:
        return _EMPTY.copy()
    pattern = c[c.size - n:]
    for j in range(length - n - 1, 0, -1):
        if np.array_equal(history[j:j + n], pattern):
            copy = min(m, length - (j + n))
            if copy < n:
                return _EMPTY.copy()
            return history[j + n: j + n + copy][:int(n_draft)].astype(np.int32)
    return _EMPTY.copy()


DraftRule = Callable[[Sequence[int], int, int, int], np.ndarray]

RULES: dict[str, DraftRule] = {
    "engine": ngram_draft,
    "earliest": earliest_draft,
    "llama-simple": llama_simple_draft,
}
"""``--rule`` name -> matcher ``(corpus, n_draft, min_match, max_match) -> (n,) int32``."""
