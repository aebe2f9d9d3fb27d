"""A token's misses, lane rounds and batches from its bytes (refsim.io.geometry): hand-worked,
properties, and the shared runs' decompositions."""

import csv

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refsim.errors import ConfigError
from refsim.io.geometry import (GEMMA4_26B, QWEN3_30B, QWEN36_35B, ReadGeometry, expected_batches,
                                expected_rounds, geometry_for, misses_from_bytes)
from refsim.testing.shared import require_shared


def test_expected_rounds_and_batches_hand_worked():
    # 2 misses among 48 x 8 slots: same layer with probability 7/383 (3 + 3 = 6 requests: 3
    # rounds on 2 lanes), else two layers (2 rounds each)
    p_same = 7 / 383
    assert expected_rounds([2], 3, 2, 48, 8)[0] == pytest.approx(3 * p_same + 4 * (1 - p_same), abs=1e-12)
    assert expected_batches([2], 48, 8)[0] == pytest.approx(p_same * 1 + (1 - p_same) * 2, abs=1e-12)
    # every slot a miss (cache off): 48 layers of 24 requests on 4 lanes = 6 rounds each
    assert expected_rounds([384], 3, 4, 48, 8)[0] == 288.0
    assert expected_batches([384, 0, 1], 48, 8).tolist() == pytest.approx([48.0, 0.0, 1.0], abs=1e-12)
    # one lane: a round per request
    assert expected_rounds([57], 3, 1, 48, 8)[0] == pytest.approx(171.0, abs=1e-9)
    # a fractional count interpolates
    mid = expected_rounds([2.5], 3, 2, 48, 8)[0]
    assert mid == pytest.approx(0.5 * (expected_rounds([2], 3, 2, 48, 8)[0]
                                       + expected_rounds([3], 3, 2, 48, 8)[0]), abs=1e-12)


@given(st.integers(0, 384), st.integers(1, 8))
def test_rounds_bounds(m, lanes):
    r = expected_rounds([m], 3, lanes, 48, 8)[0]
    b = expected_batches([m], 48, 8)[0]
    assert 3 * m / lanes - 1e-9 <= r <= 3 * m + 1e-9          # lanes help at most L-fold
    assert b - 1e-9 <= r                                       # at least a round per batch
    assert b <= min(m, 48) + 1e-9                              # a batch needs a miss


def test_expected_rounds_against_sampling():
    rng = np.random.default_rng(1)
    for m, lanes in ((10, 4), (60, 4), (150, 2)):
        sims = [np.ceil(3 * np.bincount(rng.choice(384, m, replace=False) // 8, minlength=48)
                        / lanes).sum() for _ in range(4000)]
        assert expected_rounds([m], 3, lanes, 48, 8)[0] == pytest.approx(np.mean(sims), rel=0.01)


def test_misses_from_bytes_hand_worked():
    w6, w4 = QWEN3_30B.windows
    assert (w6, w4) == (3072000, 2666496)          # 3059712 + 3 blocks, 2654208 + 3 blocks
    m, ok = misses_from_bytes([0, 3 * w6 + 2 * w4, 2 * w6 - 512, 456413184], QWEN3_30B)
    assert m.tolist() == [0.0, 5.0, 2.0, 159.0] and ok.all()
    # bytes no combination gives: the mean-window estimate, flagged inexact
    m, ok = misses_from_bytes([w6 + 1], QWEN3_30B)
    assert not ok[0] and m[0] == pytest.approx((w6 + 1) / QWEN3_30B.mean_window)
    m, ok = misses_from_bytes([GEMMA4_26B.windows[0] * 3], GEMMA4_26B)
    assert not ok[0] and m[0] == pytest.approx(3 * GEMMA4_26B.windows[0] / GEMMA4_26B.mean_window)
    with pytest.raises(ConfigError):
        misses_from_bytes([-1], QWEN3_30B)


@settings(max_examples=60)
@given(st.integers(0, 192), st.integers(0, 192))
def test_decomposition_is_unique_for_the_qwen_geometries(a, b):
    for g in (QWEN3_30B, QWEN36_35B):
        cap = g.k * g.layers[0]
        a2, b2 = min(a, cap), min(b, cap)
        m, ok = misses_from_bytes([a2 * g.windows[0] + b2 * g.windows[1]], g)
        assert ok[0] and m[0] == a2 + b2


def test_geometry_names():
    assert geometry_for("qwen") is QWEN3_30B and geometry_for("gemma") is GEMMA4_26B
    assert geometry_for("Qwen_Qwen3.6-35B-A3B-Q4_K_M.gguf") is QWEN36_35B
    with pytest.raises(ConfigError, match="its requests per miss are not known"):
        geometry_for("llama-70b", "r.csv")


def _read_bytes(path):
    with open(path) as fh:
        return [int(r[5]) for r in csv.reader(fh) if r and r[0].isdigit() and int(r[5])]


def test_every_shared_qwen_row_decomposes_with_a_block_per_slice():
    # the window rule derived on the trace, checked on every recorded row of the other runs: with
    # a block more per slice every row of every Qwen run decomposes uniquely; with windows equal
    # to the slices most rows have no solution at all
    base = require_shared("real-runs")
    sets = [(QWEN36_35B, sorted(base.glob("desktop-2026-07-24-qwen36/*.csv"))
             + sorted(base.glob("phone-2026-07-22-drop-cold/*.csv"))),
            (QWEN3_30B, sorted(base.glob("phone-2026-07-12-cache-lanes/qwen_*.csv")))]
    expect_bare_fail = {QWEN36_35B.name: 5603, QWEN3_30B.name: 1426}
    for g, files in sets:
        rows = [b for f in files for b in _read_bytes(f)]
        m, ok = misses_from_bytes(rows, g)
        assert ok.all(), g.name
        slices = tuple(w - 3 * 4096 for w in g.windows)
        bare = ReadGeometry(g.name, g.n_layer, g.k, 3, slices, g.layers, True, g.eof_short)
        _, ok_bare = misses_from_bytes(rows, bare)
        assert int((~ok_bare).sum()) >= expect_bare_fail[g.name]
    assert len([b for f in sets[0][1] for b in _read_bytes(f)]) == 8080


def test_uniform_spread_matches_the_traces_rounds(qwen_trace):
    # the one place the per-layer rounds are known exactly: the shared trace's replay
    from refsim import MIB
    from refsim.io.requests import missed_in_order
    from refsim.studies.replay import replay_trace
    rep = replay_trace(qwen_trace, 4000 * MIB)
    real, est = [], []
    for rec, ev in zip(rep.records, qwen_trace.events):
        if ev.kind.name != "PLAIN":
            continue
        il, _ = missed_in_order(ev.routes, rec.charged_bytes)
        ml = np.bincount(il, minlength=48)
        real.append(np.ceil(3 * ml / 4).sum())
        est.append(expected_rounds([ml.sum()], 3, 4, 48, 6)[0])
    real, est = np.array(real), np.array(est)
    assert np.mean(np.abs(est - real) / real) < 0.02          # 1.4 % (docs/io.md)
    assert abs(est.mean() - real.mean()) / real.mean() < 0.015
