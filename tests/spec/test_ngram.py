"""The engine's n-gram matcher: the 17 engine vectors, hand-worked cases, and properties that
state the rules independently of the implementation (bmoe-engine.md §1)."""

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.spec import ngram_draft, ngram_draft_ctx, ngram_match
from refsim.testing.strategies import corpora, ngram_params
from refsim.testing.shared import shared_path, skip_reason

VECTORS = shared_path("reference", "ngram_vectors.jsonl")


def _vectors():
    if not VECTORS.exists():
        return []
    return [json.loads(line) for line in VECTORS.read_text().splitlines() if line.strip()]


@pytest.mark.skipif(not VECTORS.exists(), reason=skip_reason(VECTORS))
def test_there_are_17_vectors():
    assert len(_vectors()) == 17


@pytest.mark.parametrize("v", _vectors(), ids=lambda v: v["name"])
def test_engine_vector(v):
    got = ngram_draft(v["corpus"], v["n_draft"], v["min_match"], v["max_match"])
    assert got.dtype == np.int32
    assert got.tolist() == v["expected"]
    # the engine's signature: ctx without the last token, and last
    got2 = ngram_draft_ctx(v["corpus"][:-1], v["corpus"][-1], v["n_draft"], v["min_match"],
                           v["max_match"])
    assert got2.tolist() == v["expected"]


# --- hand-worked cases -------------------------------------------------------------------

def test_overlapping_match_drafts_the_pattern_tail():
    # C = 4 5 4 5 4 ; end=4 (token 4). Candidate j=2: suffix 4,5,4 == C[0..2]? C[..2]=4 5 4,
    # C[..4] ends 4 5 4 -> m=3 (cap 3). Draft = C[3:]= [5, 4] (clipped at end - j = 2).
    assert ngram_match([4, 5, 4, 5, 4], 3, 12) == (2, 3)
    assert ngram_draft([4, 5, 4, 5, 4], 8, 3, 12).tolist() == [5, 4]


def test_min_match_zero_counts_as_one():
    # C = 3 1 3 ; the single token 3 recurs at j=0 (length 1); draft = C[1:1+2] = [1, 3]
    assert ngram_draft([3, 1, 3], 2, 0, 12).tolist() == [1, 3]
    assert ngram_draft([3, 1, 3], 2, 1, 12).tolist() == [1, 3]


def test_early_stop_at_max_match_keeps_most_recent():
    # every 1-token match has length 1 = max_match; the first (most recent) candidate wins
    assert ngram_match([7, 1, 7, 2, 7], 1, 1) == (2, 1)
    assert ngram_draft([7, 1, 7, 2, 7], 1, 1, 1).tolist() == [2]


def test_match_length_reported_is_capped_by_position():
    # j=1 can match at most j+1 = 2 tokens even though the corpus repeats further back
    assert ngram_match([9, 9, 9], 1, 12) == (1, 2)


# --- properties ---------------------------------------------------------------------------

def _oracle(c, n_draft, min_match, max_match):
    """Brute force over every candidate: longest capped common suffix, most recent on ties."""
    min_match = max(1, min_match)
    L = len(c)
    if n_draft <= 0 or max_match < min_match or L < min_match + 1:
        return []
    best = (0, -1)
    for j in range(L - 1):
        cap = min(max_match, j + 1)
        m = 0
        while m < cap and c[j - m] == c[L - 1 - m]:
            m += 1
        best = max(best, (m, j))
    m, j = best
    if m < min_match:
        return []
    return c[j + 1: j + 1 + min(n_draft, L - 1 - j)]


@settings(max_examples=200, deadline=None)
@given(corpora(), ngram_params())
def test_equals_brute_force_oracle(c, params):
    n_draft, mn, mx = params
    assert ngram_draft(c, n_draft, mn, mx).tolist() == _oracle(c, n_draft, mn, mx)


@settings(max_examples=200, deadline=None)
@given(corpora(), ngram_params())
def test_draft_follows_an_occurrence_of_the_matched_suffix(c, params):
    n_draft, mn, mx = params
    d = ngram_draft(c, n_draft, mn, mx).tolist()
    assert len(d) <= max(n_draft, 0)
    j, m = ngram_match(c, mn, mx)
    if not d:
        return
    assert m >= max(1, mn) and m <= mx
    # the m tokens ending at j equal the corpus's last m tokens, j is strictly before the end
    assert j < len(c) - 1
    assert c[j - m + 1: j + 1] == c[len(c) - m:]
    # the draft is what follows that occurrence
    assert d == c[j + 1: j + 1 + len(d)]
    # and it is as long as allowed: min(n_draft, tokens left after j)
    assert len(d) == min(n_draft, len(c) - 1 - j)


@settings(max_examples=200, deadline=None)
@given(corpora(), st.integers(1, 8), st.integers(1, 12))
def test_empty_iff_best_match_below_min(c, n_draft, mn):
    mx = 12
    L = len(c)
    best = 0
    for j in range(L - 1):
        m = 0
        while m < min(mx, j + 1) and c[j - m] == c[L - 1 - m]:
            m += 1
        best = max(best, m)
    empty = ngram_draft(c, n_draft, mn, mx).size == 0
    assert empty == (best < mn)


@settings(max_examples=200, deadline=None)
@given(corpora(), st.integers(1, 8), st.integers(1, 6))
def test_no_longer_match_exists_and_ties_go_to_most_recent(c, n_draft, mn):
    j, m = ngram_match(c, mn, 12)
    if j < 0:
        return
    L = len(c)
    for jj in range(L - 1):
        mm = 0
        while mm < min(12, jj + 1) and c[jj - mm] == c[L - 1 - mm]:
            mm += 1
        assert mm <= m
        if mm == m:
            assert jj <= j
