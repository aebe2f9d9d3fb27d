"""The Numba twin equals the pure matcher; the peers' rules and where they differ."""

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

from refsim.spec import RULES, earliest_draft, llama_simple_draft, ngram_draft, ngram_draft_numba
from refsim.testing.strategies import corpora, ngram_params
from refsim.testing.shared import shared_path, skip_reason

VECTORS = shared_path("reference", "ngram_vectors.jsonl")


@pytest.mark.skipif(not VECTORS.exists(), reason=skip_reason(VECTORS))
def test_numba_twin_passes_the_engine_vectors():
    for line in VECTORS.read_text().splitlines():
        v = json.loads(line)
        got = ngram_draft_numba(v["corpus"], v["n_draft"], v["min_match"], v["max_match"])
        assert got.tolist() == v["expected"], v["name"]


@settings(max_examples=200, deadline=None)
@given(corpora(), ngram_params())
def test_numba_twin_equals_pure(c, params):
    n_draft, mn, mx = params
    a = ngram_draft(c, n_draft, mn, mx)
    b = ngram_draft_numba(c, n_draft, mn, mx)
    assert a.dtype == b.dtype == np.int32
    assert a.tolist() == b.tolist()


def test_numba_twin_equals_pure_on_a_long_copy_heavy_corpus():
    rng = np.random.default_rng(7)
    base = rng.integers(0, 50, size=400)
    corpus = np.concatenate([base, base[100:300], rng.integers(0, 50, 20), base[37:61]])
    for k in range(corpus.size - 60, corpus.size + 1, 3):
        c = corpus[:k]
        for mn in (1, 3, 5):
            assert ngram_draft(c, 8, mn, 12).tolist() == ngram_draft_numba(c, 8, mn, 12).tolist()


# --- peers ----------------------------------------------------------------------------------

def test_rules_registry_names():
    assert list(RULES) == ["engine", "earliest", "llama-simple"]


def test_earliest_differs_from_engine_on_equal_length_matches():
    # engine vector 9: two equal-length occurrences of 1 2 3; the engine takes the most recent
    c = [7, 1, 2, 3, 40, 8, 1, 2, 3, 50, 9, 1, 2, 3]
    assert ngram_draft(c, 1, 3, 12).tolist() == [50]
    assert earliest_draft(c, 1, 3, 12).tolist() == [40]


def test_earliest_agrees_with_engine_on_a_unique_occurrence():
    c = [1, 2, 3, 4, 5, 6, 0, 1, 2, 3]
    assert earliest_draft(c, 3, 3, 12).tolist() == ngram_draft(c, 3, 3, 12).tolist() == [4, 5, 6]


def test_earliest_prefers_longest_then_leftmost():
    # suffix "1 2" occurs at 0 and 4; the 3-token suffix "9 1 2" occurs only at 3 -> longest wins
    c = [1, 2, 5, 9, 1, 2, 6, 9, 1, 2]
    assert earliest_draft(c, 2, 2, 12).tolist() == [6, 9]
    assert ngram_draft(c, 2, 2, 12).tolist() == [6, 9]
    # with max_match 2 both rules look at "1 2": the engine takes j=5 (recent), earliest i=0
    assert ngram_draft(c, 1, 2, 2).tolist() == [6]
    assert earliest_draft(c, 1, 2, 2).tolist() == [5]


@settings(max_examples=200, deadline=None)
@given(corpora(), ngram_params())
def test_earliest_draft_follows_an_earlier_occurrence(c, params):
    n_draft, mn, mx = params
    d = earliest_draft(c, n_draft, mn, mx).tolist()
    assert len(d) <= max(n_draft, 0)
    # empty exactly when the engine (same floor and cap) drafts nothing: both need a suffix of
    # length >= min_match occurring earlier (lengths are capped identically)
    if n_draft > 0 and mx >= max(1, mn):
        assert (len(d) == 0) == (ngram_draft(c, n_draft, mn, mx).size == 0)


def _history(n_noise, rng):
    return rng.integers(100, 200, size=n_noise).tolist()


def test_llama_simple_needs_a_long_history():
    # the engine drafts from a repeated trigram in a 10-token corpus; ngram-simple needs
    # len(history) > n + m + 1 = 3 + 48 + 1
    c = [1, 2, 3, 4, 5, 6, 0, 1, 2, 3]
    assert ngram_draft(c, 3, 3, 12).tolist() == [4, 5, 6]
    assert llama_simple_draft(c, 3, 3).size == 0


def test_llama_simple_fixed_size_most_recent_vs_engine_longest():
    rng = np.random.default_rng(1)
    # older occurrence "8 1 2 3" (4-gram match) followed by 40; recent "1 2 3" followed by 50
    c = ([8, 1, 2, 3, 40] + _history(60, rng) + [9, 1, 2, 3, 50] + _history(8, rng)
         + [8, 1, 2, 3])
    assert ngram_draft(c, 1, 3, 12).tolist() == [40]          # longest (4) wins
    assert llama_simple_draft(c, 1, 3).tolist() == [50]       # fixed n=3, most recent wins


def test_llama_simple_never_matches_index_zero():
    rng = np.random.default_rng(2)
    c = [1, 2, 3, 77] + _history(60, rng) + [1, 2, 3]
    assert ngram_draft(c, 1, 3, 12).tolist() == [77]
    assert llama_simple_draft(c, 1, 3).size == 0


def test_llama_simple_continuation_shorter_than_n_drafts_nothing():
    rng = np.random.default_rng(3)
    # history = noise + 1 2 3 1 2 (len 65); the hit j=60 leaves 65 - 63 = 2 tokens (< n = 3)
    c = _history(60, rng) + [1, 2, 3, 1, 2, 3]
    assert llama_simple_draft(c, 3, 3).size == 0
    assert ngram_draft(c, 3, 3, 12).tolist() == [1, 2, 3]   # overlap allowed in the engine
