"""Lossy verify routing (refsim/streaming/verify_route.py): the two rules worked by hand on a tiny
layer, their invariants under hypothesis, and the live pass applying them to verify decodes only."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.errors import ConfigError
from refsim.streaming.verify_route import (VerifyRouter, VerifyRouting, cap_layer, cap_union, consensus,
                                           consensus_layer, parse_verify_routing)

# one layer, 3 positions, k = 2; summed weights: expert 4: .5+.7 = 1.2, 1: .5+.4 = .9, 7: .6, 2: .3
IDS = np.array([[4, 1], [4, 2], [7, 1]], np.int16)
W = np.array([[.5, .5], [.7, .3], [.6, .4]], np.float32)


def test_cap_hand_worked():
    # U = 2 keeps {4, 1}: position 1 loses 2 (.3), position 2 loses 7 (.6)
    assert cap_layer(IDS, W, 2).tolist() == [[False, False], [False, True], [True, False]]
    # U = 3 keeps {4, 1, 7}: only expert 2 goes
    assert cap_layer(IDS, W, 3).tolist() == [[False, False], [False, True], [False, False]]
    assert not cap_layer(IDS, W, 4).any()
    dropped, lost = cap_union(IDS[:, None], W[:, None], 2)
    assert dropped[:, 0].tolist() == cap_layer(IDS, W, 2).tolist()
    assert lost == pytest.approx(0.9)


def test_cap_ties_keep_the_lower_id_and_skip_unrouted_slots():
    ids = np.array([[5, 3], [-1, -1]], np.int16)           # 5 and 3 weigh .5 each; row 1 not routed
    w = np.array([[.5, .5], [np.nan, np.nan]], np.float32)
    assert cap_layer(ids, w, 1).tolist() == [[True, False], [False, False]]


def test_consensus_hand_worked():
    # ranking 4 (1.2), 1 (.9), 7 (.6), 2 (.3). T = .35: position 1's slot 1 (2, share .3) moves
    # to 1 (4 it has); position 2's shares .6 and .4 stay; position 0 is never changed
    out = consensus_layer(IDS, W, 0.35)
    assert out.tolist() == [[4, 1], [4, 1], [7, 1]]
    # T = .5: position 2's slot 1 (1, share .4) moves to 4, the best it lacks
    out = consensus_layer(IDS, W, 0.5)
    assert out.tolist() == [[4, 1], [4, 1], [7, 4]]
    new, lost = consensus(IDS[:, None], W[:, None], 0.5)
    assert new[:, 0].tolist() == out.tolist() and lost == pytest.approx(0.3 + 0.4)


def test_consensus_moves_the_lightest_slot_first():
    # position 1 has 1 (.05) and 6 (.15) below T = .2, and only one union expert it lacks (9):
    # the lighter slot (1) takes it, then no candidate is left for 6
    ids = np.array([[9, 3, 2], [3, 1, 6]], np.int16)
    w = np.array([[.6, .3, .1], [.8, .05, .15]], np.float32)
    assert consensus_layer(ids, w, 0.2).tolist() == [[9, 3, 2], [3, 9, 2]]


def test_parse_and_labels():
    assert parse_verify_routing("cap:12") == VerifyRouting("cap", 12.0)
    assert parse_verify_routing("cap:12").label == "cap:12"
    assert parse_verify_routing("consensus:0.1").label == "consensus:0.1"
    for bad, msg in (("cap", "expected cap:U"), ("drop:1", "expected cap:U"), ("cap:x", "a number"),
                     ("cap:1.5", "integer U >= 1"), ("cap:0", "integer U >= 1"), ("consensus:2", r"\[0, 1\]")):
        with pytest.raises(ConfigError, match=msg):
            parse_verify_routing(bad)


@st.composite
def layer(draw, max_rows=6):
    n = draw(st.integers(1, max_rows))
    k = draw(st.integers(1, 4))
    n_expert = draw(st.integers(k, 12))
    ids = np.array([draw(st.permutations(range(n_expert)))[:k] for _ in range(n)], np.int16)
    w = np.array(draw(st.lists(st.lists(st.floats(0.0625, 1.0, width=32), min_size=k, max_size=k),
                               min_size=n, max_size=n)), np.float32)
    return ids, w


@settings(max_examples=200, deadline=None)
@given(layer(), st.integers(1, 24))
def test_cap_properties(lw, cap):
    ids, w = lw
    union = np.unique(ids)
    d = cap_layer(ids, w, cap)
    kept = np.unique(ids[~d])
    assert kept.size <= cap and set(kept.tolist()) <= set(union.tolist())
    if cap >= union.size:
        assert not d.any()                                      # U >= union size: the identity
    else:
        assert kept.size == cap                                 # whole experts go, the U heaviest stay
        tot = {int(e): float(w[ids == e].sum()) for e in union}
        assert min(tot[int(e)] for e in kept) >= max(tot[int(e)] for e in np.unique(ids[d])) - 1e-6


@settings(max_examples=200, deadline=None)
@given(layer(), st.floats(0.0, 1.0))
def test_consensus_properties(lw, share):
    ids, w = lw
    out = consensus_layer(ids, w, share)
    assert out[0].tolist() == ids[0].tolist()                   # the first position never changes
    assert set(np.unique(out).tolist()) <= set(np.unique(ids).tolist())   # the union only narrows
    for j in range(ids.shape[0]):
        assert len(set(out[j].tolist())) == ids.shape[1]        # a row never selects an expert twice
        moved = out[j] != ids[j]
        assert np.all(w[j][moved] / w[j].sum() < share)          # only slots below the share move
    assert consensus_layer(ids, w, 0.0).tolist() == ids.tolist()  # T = 0: the identity
    if ids.shape[0] == 1:
        assert out.tolist() == ids.tolist()


@settings(max_examples=100, deadline=None)
@given(layer(), st.sampled_from(["cap:1", "cap:3", "consensus:0.3", "consensus:1"]), st.integers(0, 1))
def test_router_never_touches_a_plain_decode_or_a_prefill(lw, rule, phase):
    ids, w = lw
    r = VerifyRouter(rule)
    assert not r.applies(phase, 1)                              # one position: a plain decode
    assert not r.applies(0, ids.shape[0])                       # a prefill graph
    assert r.applies(1, 2)
    rec, run_ids, run_w, dropped = r.layer(ids, w)
    if rule.startswith("cap"):
        assert rec.tolist() == ids.tolist() and dropped.tolist() == cap_layer(ids, w, int(rule[4:])).tolist()
        assert np.all(run_w[dropped] == 0)
    else:
        assert rec.tolist() == consensus_layer(ids, w, float(rule[10:])).tolist() and not dropped.any()
        assert run_ids.tolist() == rec.tolist() and run_w.tolist() == w.tolist()
    changed = dropped | (rec != ids)
    assert r.weight_discarded == pytest.approx(float(w[changed].astype(np.float64).sum()))


def test_capped_rows_renormalise_their_survivors():
    r = VerifyRouter("cap:2")
    rec, run_ids, run_w, dropped = r.layer(IDS, W)
    # position 1 keeps 4 (.7) alone: scaled to 1; position 2 keeps 1 (.4): scaled to 1
    assert run_w.tolist() == [[.5, .5], [1.0, 0.0], [0.0, 1.0]]
    assert r.layers == 1 and r.changed == 2
    assert r.discarded_pct == pytest.approx(100 * 0.9 / 3.0)
