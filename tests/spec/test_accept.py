"""Greedy acceptance (bmoe-engine.md §2 step 5): hand-worked cases and properties."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.spec import greedy_accept


def test_plain_path_has_no_draft_and_takes_row_zero():
    r = greedy_accept([], [42])
    assert (r.n_acc, r.emitted.tolist(), r.next_token, r.eog) == (0, [], 42, False)


def test_row_i_is_compared_with_draft_i_plus_one():
    # fed [tok, 5, 6, 7]; rows predict after tok, after 5, after 6, after 7
    r = greedy_accept([5, 6, 7], [5, 6, 9, 4])
    assert (r.n_acc, r.emitted.tolist(), r.next_token) == (2, [5, 6], 9)


def test_first_mismatch_rejects_everything_after_it():
    r = greedy_accept([5, 6, 7], [1, 6, 7, 8])   # rows 1 and 2 would match, but row 0 does not
    assert (r.n_acc, r.emitted.tolist(), r.next_token) == (0, [], 1)


def test_all_accepted_takes_the_bonus_from_the_last_row():
    r = greedy_accept([5, 6], [5, 6, 11])
    assert (r.n_acc, r.emitted.tolist(), r.next_token) == (2, [5, 6], 11)


def test_accepted_eog_counts_but_is_not_emitted_and_ends_generation():
    r = greedy_accept([5, 2, 7], [5, 2, 7, 8], eos_ids={2})
    assert (r.n_acc, r.emitted.tolist(), r.next_token, r.eog) == (2, [5], -1, True)


def test_rejected_eog_draft_does_nothing_special():
    r = greedy_accept([2], [3, 4], eos_ids={2})
    assert (r.n_acc, r.emitted.tolist(), r.next_token, r.eog) == (0, [], 3, False)


def test_wrong_row_count_is_an_error():
    with pytest.raises(ValueError, match="len\\(draft\\) \\+ 1 = 3"):
        greedy_accept([1, 2], [1, 2])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=8), st.data())
def test_accepted_prefix_is_the_longest_agreeing_prefix(draft, data):
    ids = data.draw(st.lists(st.integers(0, 3), min_size=len(draft) + 1,
                             max_size=len(draft) + 1))
    r = greedy_accept(draft, ids)
    n = r.n_acc
    assert 0 <= n <= len(draft)
    assert draft[:n] == ids[:n]
    assert n == len(draft) or draft[n] != ids[n]
    assert r.emitted.tolist() == draft[:n]
    assert r.next_token == ids[n]
    assert r.emitted.dtype == np.int32
