"""The engine's n-gram (prompt-lookup) drafter as a pure function over token ids.

Rules, in our words (bmoe-engine.md §1 "Function contract"; the engine's
core/src/engine/ngram_draft.cpp, tests/ngram_test.cpp):

1. The corpus ``C`` is the context (prompt + emitted tokens) followed by the just-confirmed
   token ``last``; ``L = len(C)``, ``end = L - 1`` is the position of the pattern's last token.
2. ``n_draft <= 0`` drafts nothing; ``min_match < 1`` is raised to 1; ``max_match < min_match``
   drafts nothing; ``L < min_match + 1`` drafts nothing.
3. Candidates are the positions ``j`` from ``end - 1`` down to ``min_match - 1`` (most recent
   first; ``end`` itself never, so the pattern never matches itself) with ``C[j] == C[end]``.
   The match length is the longest common suffix of ``C[..j]`` and ``C[..end]``, capped at
   ``min(max_match, j + 1)``. Overlap with the pattern is allowed.
4. A candidate replaces the best only when strictly longer, so the most recent wins among equal
   lengths; the scan stops once the best reaches ``max_match``.
5. Best length below ``min_match``: no draft. Otherwise the draft is ``C[best_j + 1 ...]``, at
   most ``min(n_draft, end - best_j)`` tokens (clipped at the corpus end; it may include
   ``last`` itself).

The peers' rules (earliest occurrence, llama.cpp ``ngram-simple``) are in
:mod:`refsim.spec.peers`; a Numba twin for long corpora is in :mod:`refsim.spec.ngram_numba`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from refsim.spec.constants import NGRAM_MAX_MATCH, NGRAM_MIN_MATCH_DEFAULT

_EMPTY = np.zeros(0, dtype=np.int32)


def ngram_match(corpus: Sequence[int] | np.ndarray, min_match: int = NGRAM_MIN_MATCH_DEFAULT,
                max_match: int = NGRAM_MAX_MATCH) -> tuple[int, int]:
    """Best earlier occurrence of the corpus suffix, by the engine's rules.

    Parameters
    ----------
    corpus : (L,) int sequence
        Token ids: prompt + emitted tokens + the just-confirmed token (the last element).
    min_match : int, default 3
        Floor on the match length (``--ngram-min-match``); values < 1 count as 1.
    max_match : int, default 12
        Cap on the match length (``ngram_max_match``).

    Returns
    -------
    best_j : int
        Corpus index of the last token of the winning occurrence, or -1 when no candidate
        reaches ``min_match`` (or the inputs rule drafting out).
    best_len : int
        Its match length in tokens (capped), or 0 with ``best_j == -1``.

    Notes
    -----
    bmoe-engine.md §1, rules 1-6. Cost O(L × max_match) token comparisons.
    """
    c = corpus.tolist() if isinstance(corpus, np.ndarray) else list(corpus)
    min_match = max(1, int(min_match))
    max_match = int(max_match)
    n = len(c)
    if max_match < min_match or n < min_match + 1:
        return -1, 0
    end = n - 1
    target = c[end]
    best_j, best_len = -1, 0
    for j in range(end - 1, min_match - 2, -1):
        if c[j] != target:
            continue
        cap = min(max_match, j + 1)
        m = 1
        while m < cap and c[j - m] == c[end - m]:
            m += 1
        if m > best_len:
            best_j, best_len = j, m
            if best_len >= max_match:
                break
    if best_len < min_match:
        return -1, 0
    return best_j, best_len


def ngram_draft(corpus: Sequence[int] | np.ndarray, n_draft: int,
                min_match: int = NGRAM_MIN_MATCH_DEFAULT,
                max_match: int = NGRAM_MAX_MATCH) -> np.ndarray:
    """Draft tokens for the next verify decode (the engine's n-gram drafter).

    Parameters
    ----------
    corpus : (L,) int sequence
        Prompt + emitted tokens + the just-confirmed token (last element).
    n_draft : int
        Most tokens to propose: ``min(--draft, room)`` in the loop; <= 0 drafts nothing.
    min_match : int, default 3
        ``--ngram-min-match``; values < 1 count as 1.
    max_match : int, default 12
        ``ngram_max_match``.

    Returns
    -------
    (n,) int32 ndarray
        The tokens that followed the winning occurrence, ``0 <= n <= n_draft``; empty when
        the best match is shorter than ``min_match``.

    Examples
    --------
    >>> ngram_draft([1, 2, 3, 4, 5, 6, 0, 1, 2, 3], 3).tolist()
    [4, 5, 6]
    >>> ngram_draft([1, 2, 1, 2, 1, 2], 3).tolist()   # clipped at the corpus end
    [1, 2]
    """
    if n_draft <= 0:
        return _EMPTY.copy()
    best_j, _ = ngram_match(corpus, min_match, max_match)
    if best_j < 0:
        return _EMPTY.copy()
    c = np.asarray(corpus, dtype=np.int64)
    end = c.size - 1
    n = min(int(n_draft), end - best_j)
    return c[best_j + 1: best_j + 1 + n].astype(np.int32)


def ngram_draft_ctx(ctx: Sequence[int] | np.ndarray, last: int, n_max: int,
                    min_match: int = NGRAM_MIN_MATCH_DEFAULT,
                    max_match: int = NGRAM_MAX_MATCH) -> np.ndarray:
    """The engine's call signature: ``ctx`` (without the current token) and ``last``.

    Same as ``ngram_draft(list(ctx) + [last], n_max, min_match, max_match)``.
    """
    corpus = np.append(np.asarray(ctx, dtype=np.int64), np.int64(last))
    return ngram_draft(corpus, n_max, min_match, max_match)
