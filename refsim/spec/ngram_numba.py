"""Numba twin of :func:`refsim.spec.ngram.ngram_draft` for long corpora.

Same rules, same results (property-tested equal in tests/spec/test_ngram_numba.py); the
kernel takes only an array and ints. ``NUMBA_DISABLE_JIT=1`` runs it as Python.
"""

from __future__ import annotations

import numpy as np

from refsim.jit import njit
from refsim.spec.constants import NGRAM_MAX_MATCH, NGRAM_MIN_MATCH_DEFAULT


@njit(cache=True)
def ngram_match_kernel(corpus, min_match, max_match):
    """(best_j, best_len) over a (L,) int64 corpus; (-1, 0) when nothing reaches ``min_match``.

    Rules: bmoe-engine.md §1 (see :mod:`refsim.spec.ngram`). Integer comparisons only.
    """
    if min_match < 1:
        min_match = 1
    n = corpus.shape[0]
    if max_match < min_match or n < min_match + 1:
        return -1, 0
    end = n - 1
    target = corpus[end]
    best_j = -1
    best_len = 0
    for j in range(end - 1, min_match - 2, -1):
        if corpus[j] != target:
            continue
        cap = min(max_match, j + 1)
        m = 1
        while m < cap and corpus[j - m] == corpus[end - m]:
            m += 1
        if m > best_len:
            best_j = j
            best_len = m
            if best_len >= max_match:
                break
    if best_len < min_match:
        return -1, 0
    return best_j, best_len


def ngram_draft_numba(corpus, n_draft: int, min_match: int = NGRAM_MIN_MATCH_DEFAULT,
                      max_match: int = NGRAM_MAX_MATCH) -> np.ndarray:
    """Numba-backed :func:`refsim.spec.ngram.ngram_draft`.

    Parameters
    ----------
    corpus : (L,) int array-like
        Converted to int64 (no copy when it already is).
    n_draft, min_match, max_match : int
        As in :func:`refsim.spec.ngram.ngram_draft`.

    Returns
    -------
    (n,) int32 ndarray
    """
    c = np.ascontiguousarray(corpus, dtype=np.int64)
    if n_draft <= 0:
        return np.zeros(0, dtype=np.int32)
    best_j, _ = ngram_match_kernel(c, int(min_match), int(max_match))
    if best_j < 0:
        return np.zeros(0, dtype=np.int32)
    n = min(int(n_draft), c.size - 1 - best_j)
    return c[best_j + 1: best_j + 1 + n].astype(np.int32)
