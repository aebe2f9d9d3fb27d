"""The policy package's shared parts, each with a hand-worked value: the per-batch lookups and
their counting (kernel_base), the linked lists (cache/linked.py), the one fast-path protocol
(``fast_replay`` -> ``PolicyResult``), the explicit registry, the per-layer random kernel
against its reference, and the engine LRU's grouped state (LruState / EventArrays)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refsim.cache.batches import BatchTrace
from refsim.cache.linked import (NONE, head, keys_newest_first, new_lists, push_head, push_tail,
                                 tail, unlink)
from refsim.cache.lru import C_EVICTIONS, C_HITS, C_LOOKUPS, C_READ, C_RESIDENT, EventArrays, \
    lru_apply_event, new_state
from refsim.cache.policies import POLICIES, Policy, get_policy
from refsim.cache.policies.kernel_base import (N_COUNTERS, OUT_EVICT, OUT_HITS, OUT_READ,
                                               OUT_RESIDENT, batch_lookups, count_batch)
from refsim.cache.policies.random import RandomPolicy
from refsim.cache.replay import reference_replay, replay_policy
from refsim.events import DecodeEvent, DecodeKind
from refsim.jit import reference
from refsim.testing.cache_streams import cache_budgets, cache_streams

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("python", [False, True], ids=["compiled", "reference"])
def test_batch_lookups_are_first_occurrences_in_order_and_count_batch_counts_them(python):
    keys = np.array([3, 1, 3, 2, 1, 5, 1, 1], np.int64)
    marks = np.full(6, -1, np.int32)
    looked = np.empty(8, np.int64)
    out = np.zeros(N_COUNTERS, np.int64)
    with reference() if python else _nothing():
        n = batch_lookups(keys, 0, 6, 0, marks, looked)
        assert (n, looked[:n].tolist()) == (4, [3, 1, 2, 5])
        assert marks.tolist() == [-1, 0, 0, 0, -1, 0]
        n = batch_lookups(keys, 6, 8, 1, marks, looked)      # batch 1: [1, 1] is one lookup
        assert (n, looked[:n].tolist(), int(marks[1])) == (1, [1], 1)
        count_batch(out, 2, 7, 4, 1)                          # verify kind, 7-byte entries
    assert (out[2], out[OUT_HITS + 2], out[OUT_READ + 2]) == (4, 3, 7)
    assert out.sum() == 4 + 3 + 7


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("python", [False, True], ids=["compiled", "reference"])
def test_linked_lists_push_at_both_ends_and_unlink(python):
    with reference() if python else _nothing():
        L = new_lists(5, 2)
        push_head(L, 0, 1)
        push_head(L, 0, 2)
        push_tail(L, 0, 3)                # list 0, newest first: 2 1 3
        push_head(L, 1, 4)
        assert (int(head(L, 0)), int(tail(L, 0)), int(head(L, 1))) == (2, 3, 4)
        assert keys_newest_first(L, 0) == [2, 1, 3]
        unlink(L, 1)
        assert keys_newest_first(L, 0) == [2, 3] and int(L[1, 0]) == NONE
        unlink(L, 2)
        unlink(L, 3)
        assert (int(head(L, 0)), int(tail(L, 0))) == (NONE, NONE)
        assert keys_newest_first(L, 1) == [4]


def test_the_registry_is_the_package_import_order():
    assert list(POLICIES) == ["lru", "lfu", "belady", "random", "layer", "layerlfu", "fifo",
                              "clock", "slru", "2q", "arc", "s3fifo", "lirs", "tinylfu",
                              "layer-opt"]
    assert all(POLICIES[n].fast_replay is not None for n in POLICIES)


def test_replay_policy_returns_what_fast_replay_wrote():
    bt = BatchTrace.from_events([DecodeEvent(DecodeKind.PLAIN, np.array([0]),
                                             np.array([[[0]]], np.int16))], [4], 2)
    pol = get_policy("arc")
    seen = []

    def fake(batches, budget_bytes, out):
        seen.append((batches, budget_bytes, out.size, int(out.sum())))
        out[:] = np.arange(N_COUNTERS)

    pol.fast_replay = fake
    r = replay_policy(bt, pol, 9)
    assert seen == [(bt, 9, N_COUNTERS, 0)]                   # zeroed counters, the budget
    nk = OUT_HITS
    assert r.lookups.tolist() == list(range(nk))
    assert r.hits.tolist() == list(range(nk, 2 * nk))
    assert r.read_bytes.tolist() == list(range(2 * nk, 3 * nk))
    assert (r.evictions, r.resident_bytes) == (OUT_EVICT, OUT_RESIDENT)
    assert (r.policy, r.budget_bytes, r.tokens) == ("arc", 9, bt.tokens)


class _MRU(Policy):
    """The docstring's example (not registered): evict the most recent stamp."""

    def reset(self, batches):
        self.stamp = {}

    def on_access(self, key, clock, next_use):
        self.stamp[key] = clock

    def to_evict(self, candidates):
        return max(candidates, key=self.stamp.__getitem__)


def test_a_policy_without_a_fast_path_runs_the_reference_replay():
    ev = lambda e: DecodeEvent(DecodeKind.PLAIN, np.array([0]),  # noqa: E731
                               np.array([[[e]]], np.int16))
    bt = BatchTrace.from_events([ev(0), ev(1), ev(2), ev(0), ev(2)], [1], 3)
    # budget 2: [2] evicts the most recent untouched (1), so [0] and the last [2] hit
    r = replay_policy(bt, _MRU(), 2)
    assert (int(r.lookups.sum()), int(r.hits.sum()), r.evictions) == (5, 2, 1)
    assert _MRU.fast_replay is None


class _LayerRandom(RandomPolicy):
    """Random inside the per-layer partition (not registered): random_partitioned_kernel."""

    partitioned = True


@given(cache_streams().flatmap(lambda s: st.tuples(st.just(s), cache_budgets(s.header))),
       st.integers(0, 3))
def test_partitioned_random_fast_path_equals_the_reference(sb, seed):
    stream, budget = sb
    h = stream.header
    bt = BatchTrace.from_events(stream.events, h.expert_bytes, h.n_expert)
    fast = replay_policy(bt, _LayerRandom(seed=seed), budget)
    ref = reference_replay(bt, _LayerRandom(seed=seed), budget)
    assert (fast.lookups.tolist(), fast.hits.tolist(), fast.read_bytes.tolist(), fast.evictions,
            fast.resident_bytes) == (ref.lookups.tolist(), ref.hits.tolist(),
                                     ref.read_bytes.tolist(), ref.evictions, ref.resident_bytes)


def test_no_policy_module_imports_the_replay_and_mrc_imports_first():
    """The layering that removed cycle C1: policies -> base/kernel_base/linked, never upward
    to refsim.cache.replay; refsim.cache.mrc can be the first module imported."""
    for path in (REPO / "refsim" / "cache" / "policies").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "refsim.cache.replay", path
    for first in ("refsim.cache.mrc", "refsim.cache.policies.layer_opt", "refsim.cache.replay"):
        res = subprocess.run([sys.executable, "-c", f"import {first}"], capture_output=True,
                             text=True, cwd=REPO, env={"PYTHONPATH": str(REPO)})
        assert res.returncode == 0, res.stderr


def test_lru_state_and_event_arrays_apply_a_hand_worked_event():
    # one layer of 1-byte entries, 3 experts, budget 2: loads [0], [1], [2] evict 0
    st_ = new_state(np.array([1], np.int64), 3, 2)
    assert (st_.links.shape, st_.links.dtype, st_.counters.shape) == ((4, 3), np.int32, (11,))
    gen = 0
    for e in (0, 1, 2):
        routes = np.array([[[e]]], np.int16)
        ev = EventArrays(routes=routes, weights=np.full((1, 1, 1), np.nan, np.float32),
                         dropped_in=np.zeros((1, 1, 1), np.bool_),
                         deferred=np.zeros(1, np.bool_), pred_routes=routes,
                         pred_weights=np.full((1, 1, 1), np.nan, np.float32),
                         residency=np.full((1, 1, 1), -1, np.int8),
                         charged=np.zeros((1, 1, 1), np.int64),
                         dropped=np.zeros((1, 1, 1), np.bool_))
        gen = lru_apply_event(ev, st_, 0, 1, gen, np.float32(0.0), True, False, 0, 0, -1)
        assert (int(ev.residency[0, 0, 0]), int(ev.charged[0, 0, 0])) == (0, 1)
    c = st_.counters
    assert gen == 3
    assert (c[C_LOOKUPS], c[C_HITS], c[C_READ], c[C_EVICTIONS], c[C_RESIDENT]) == (3, 0, 3, 1, 2)
    assert keys_newest_first(st_.links, 0) == [2, 1] and st_.resident.tolist() == [False, True,
                                                                                  True]
