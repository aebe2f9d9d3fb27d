"""The co-activation layout (refsim.io.placement) and the permuted geometry it is evaluated on
(SliceLayout.permuted): hand-worked cases and properties."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refsim.errors import ConfigError
from refsim.events import DecodeEvent, DecodeKind
from refsim.io.placement import adjacent_weight, coactivation, fit_layout, greedy_chain
from refsim.io.requests import IoConfig, event_requests
from tests.io.test_requests import small_layout


def test_greedy_chain_hand_worked():
    w = np.zeros((5, 5), dtype=np.int64)
    for a, b, x in ((0, 3, 9), (3, 4, 7), (1, 2, 7), (4, 1, 2), (0, 4, 5), (2, 0, 1)):
        w[a, b] = w[b, a] = x
    # edges by weight: 0-3 (9), then 1-2 and 3-4 (7; (1, 2) first), 0-4 (5) closes 0-3-4: skip,
    # 1-4 (2) joins the chains: 0-3-4-1-2; 0-2 (1): 0 and 2 are ends of one chain: skip
    assert greedy_chain(w).tolist() == [0, 3, 4, 1, 2]
    assert adjacent_weight(w, np.argsort([0, 3, 4, 1, 2])) == 9 + 7 + 2 + 7
    # no co-activation: the file order; two separate pairs: by their smallest ids
    assert greedy_chain(np.zeros((3, 3))).tolist() == [0, 1, 2]
    w2 = np.zeros((4, 4), dtype=np.int64)
    w2[3, 1] = w2[1, 3] = 1
    w2[2, 0] = w2[0, 2] = 1
    assert greedy_chain(w2).tolist() == [0, 2, 1, 3]


@settings(max_examples=50)
@given(st.permutations(list(range(9))), st.lists(st.integers(1, 50), min_size=8, max_size=8))
def test_greedy_chain_recovers_a_hidden_path(hidden, weights):
    # a graph that is one path: the chain is that path (the optimum), in one of its directions
    n = len(hidden)
    w = np.zeros((n, n), dtype=np.int64)
    for (a, b), x in zip(zip(hidden[:-1], hidden[1:]), weights):
        w[a, b] = w[b, a] = x
    order = greedy_chain(w).tolist()
    assert sorted(order) == list(range(n))
    assert order in (hidden, hidden[::-1])
    assert adjacent_weight(w, np.argsort(order)) == sum(weights)


@settings(max_examples=40)
@given(st.integers(2, 12).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.integers(0, 5), min_size=n * n, max_size=n * n))))
def test_greedy_chain_is_a_permutation(case):
    n, flat = case
    w = np.array(flat).reshape(n, n)
    w = w + w.T
    order = greedy_chain(w)
    assert sorted(order.tolist()) == list(range(n))
    # every kept neighbour pair was co-activated or the boundary between two chains
    assert adjacent_weight(w, np.argsort(order)) >= 0


def ev(routes, kind=DecodeKind.PLAIN):
    r = np.array(routes, dtype=np.int16)
    return DecodeEvent(kind, np.arange(r.shape[0]), r)


def test_coactivation_and_fit_hand_worked():
    events = [ev([[[5, 1], [0, 2]]]), ev([[[1, 5], [2, 3]], [[6, 1], [2, -1]]])]
    w = coactivation(events, 2, 8)
    assert w[0, 1, 5] == w[0, 5, 1] == 2 and w[0, 1, 6] == 1 and w[0, 5, 6] == 1
    assert w[0, 1, 1] == 2 and w[1, 2, 2] == 2 and w[1, 0, 2] == 1 and w[1, 2, 3] == 1
    slot_of = fit_layout(events, 2, 8)
    # layer 0: 1-5 (2), then 1-6 (1, before 5-6 which would close the cycle): chain 5-1-6 walked
    # from its smaller end 5; then 0, 2, 3, 4, 7 alone: order 0, 2, 3, 4, 5, 1, 6, 7
    assert np.argsort(slot_of[0]).tolist() == [0, 2, 3, 4, 5, 1, 6, 7]
    # layer 1: 0-2, 2-3 (1 each): 0-2-3, then 1, 4, 5, 6, 7
    assert np.argsort(slot_of[1]).tolist() == [0, 2, 3, 1, 4, 5, 6, 7]


def test_permuted_layout_places_slices():
    lay = small_layout()
    slot_of = np.tile(np.arange(8), (2, 1))
    slot_of[0] = [0, 1, 2, 4, 3, 5, 6, 7]          # layer 0: experts 3 and 4 swap places
    perm = lay.permuted(slot_of)
    assert perm.slice_offsets(0, [3, 4]).tolist() == [
        [1000 + 4 * 4096, 1000 + 12 * 4096, 1000 + 16 * 4096 + 4 * 6144],
        [1000 + 3 * 4096, 1000 + 11 * 4096, 1000 + 16 * 4096 + 3 * 6144]]
    routes = np.array([[[4, 0, 3], [1, 6, 2]]], dtype=np.int16)
    charged = np.array([[[9, 0, 9], [0, 9, 0]]], dtype=np.int64)
    a = event_requests(routes, charged, lay, IoConfig())
    b = event_requests(routes, charged, perm, IoConfig())
    assert a.expert.tolist() == b.expert.tolist()
    assert b.offset[:3].tolist() == a.offset[3:6].tolist()     # expert 4 now where 3 was
    ident = lay.permuted(np.tile(np.arange(8), (2, 1)))
    c = event_requests(routes, charged, ident, IoConfig())
    assert c.offset.tolist() == a.offset.tolist() and c.window.tolist() == a.window.tolist()
    for bad in (np.zeros((2, 8)), np.tile(np.arange(8), (3, 1)), np.tile(np.arange(1, 9), (2, 1))):
        with pytest.raises(ConfigError, match="permutation of 0..7"):
            lay.permuted(bad)
