"""Recurrent state rollback with n_rs_seq snapshots (llama-cpp-notes.md §4.3): decode prompt ->
draft batch -> reject a suffix -> decode the correction equals a fresh run, for every split;
rollback beyond n_rs_seq fails as llama.cpp's seq_rm does."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refsim.errors import ConfigError
from refsim.forward import qwen35moe as Q
from refsim.model import open_model, write_synthetic
from refsim.spec.forward_target import ForwardTarget


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    d = tmp_path_factory.mktemp("rb")
    m = open_model(write_synthetic(d / "h.gguf", "qwen35moe", "F32", nextn=False, seed=7))
    return m, Q.load_weights(m)


@st.composite
def rollback_cases(draw, n_vocab=300):
    """(prompt, drafts, n_keep, correction, n_rs_seq): keep ``n_keep`` of the draft batch."""
    prompt = draw(st.lists(st.integers(0, n_vocab - 1), min_size=1, max_size=6))
    drafts = draw(st.lists(st.integers(0, n_vocab - 1), min_size=1, max_size=5))
    n_keep = draw(st.integers(0, len(drafts) - 1))
    n_rs_seq = draw(st.integers(len(drafts) - n_keep, 8))
    correction = draw(st.integers(0, n_vocab - 1))
    return prompt, drafts, n_keep, correction, n_rs_seq


def _run(w, spec, chunks, n_rs_seq=0):
    s = Q.new_state(spec, n_rs_seq=n_rs_seq)
    p, outs = 0, []
    for c in chunks:
        outs.append(Q.decode(w, s, c, np.arange(p, p + len(c))))
        p += len(c)
    return s, outs


@settings(max_examples=25)
@given(rollback_cases())
def test_reject_suffix_equals_fresh_run(hybrid, case):
    m, w = hybrid
    prompt, drafts, n_keep, correction, n_rs_seq = case
    s, _ = _run(w, m.spec, [prompt, drafts], n_rs_seq)
    s.trim(len(prompt) + n_keep)
    got = Q.decode(w, s, [correction], [len(prompt) + n_keep])
    _, fresh = _run(w, m.spec, [prompt + drafts[:n_keep] + [correction]])
    np.testing.assert_array_equal(got.logits[0], fresh[0].logits[-1])
    np.testing.assert_array_equal(got.routes[0], fresh[0].routes[-1])
    np.testing.assert_array_equal(got.h_nextn[0], fresh[0].h_nextn[-1])


def test_every_split_of_a_verify_batch(hybrid):
    m, w = hybrid
    prompt, drafts = [1, 5, 77, 123, 42, 299], [7, 260, 33]
    for n_keep in range(len(drafts) + 1):
        s, _ = _run(w, m.spec, [prompt, drafts], n_rs_seq=3)
        s.trim(len(prompt) + n_keep)
        got = Q.decode(w, s, [150], [len(prompt) + n_keep]).logits[0]
        _, fresh = _run(w, m.spec, [prompt + drafts[:n_keep] + [150]])
        np.testing.assert_array_equal(got, fresh[0].logits[-1])


def test_rollback_across_batches_is_exact(hybrid):
    # three one-token decodes, then remove all three (refsim keeps states across batches)
    m, w = hybrid
    s, _ = _run(w, m.spec, [[1, 2], [3], [4], [5]], n_rs_seq=3)
    assert s.rec.snapshot_positions == [2, 3, 4, 5]
    s.trim(2)
    got = Q.decode(w, s, [9], [2]).logits[0]
    _, fresh = _run(w, m.spec, [[1, 2, 9]])
    np.testing.assert_array_equal(got, fresh[0].logits[-1])


def test_beyond_n_rs_seq_fails_like_seq_rm(hybrid):
    m, w = hybrid
    s, _ = _run(w, m.spec, [[1, 2, 3, 4, 5]], n_rs_seq=2)
    with pytest.raises(ConfigError, match="n_rs_seq = 2"):
        s.trim(2)                    # r = 3 > 2
    assert s.n == 5 and s.rec.n == 5  # nothing removed: recurrent first, then KV
    s.trim(3)                        # r = 2 is fine
    assert s.n == 3
    s0, _ = _run(w, m.spec, [[1, 2, 3]], n_rs_seq=0)
    with pytest.raises(ConfigError, match="n_rs_seq = 0"):
        s0.trim(2)
    s0.trim(3)                       # r = 0: no-op


def test_slots_held_are_one_plus_n_rs_seq(hybrid):
    m, w = hybrid
    s, _ = _run(w, m.spec, [[1, 2, 3, 4, 5, 6, 7]], n_rs_seq=3)
    assert s.rec.snapshot_positions == [4, 5, 6, 7]   # 3 snapshots + the live state
    assert s.rec.slot_bytes == m.bytes.recurrent_bytes_per_seq


def test_forward_target_trim_uses_rollback(hybrid):
    m, _ = hybrid
    t = ForwardTarget(m)
    t.prefill(np.array([1, 5, 77]))
    t.decode(np.array([7, 8, 9]), np.array([3, 4, 5]))
    t.trim(4)
    a = t.decode(np.array([11]), np.array([4])).logits[0]
    f = ForwardTarget(m)
    b = f.prefill(np.array([1, 5, 77, 7, 11])).logits[0]
    np.testing.assert_array_equal(a, b)
