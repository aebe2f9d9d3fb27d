"""Four-rows-at-a-time products (rows4.q4_0_rows4, q8_0_rows4, q5_0_rows4, mxfp4_rows4, q4_k_rows4, q5_k_rows4,
q6_k_rows4) equal the one-row functions of refsim.kernels.qdot bit for bit (issue 18: speed without changing a result)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.kernels import rows4, simd
from refsim.kernels.ggml_matmul import qdot_matmul
from refsim.kernels.qdot import qdot_row, quantize_acts
from refsim.kernels.registry import F16_TO_F32
from refsim.testing.rows4 import EXTREME_HALVES, code_paths, compile_on_path, float_bits, random_rows

KINDS = sorted(rows4._ROWS4_X)
EXTREME_F32 = np.array([0.0, 1.4e-45, 1.2e-38, 1e-20, 1.0 / 127, 1.0, 3e8, 3.4e38], np.float32)
"""Activation scales: zero, the smallest float32 subnormal and normal, up to near float32's largest."""


def _scale_offsets(kind: str) -> tuple[int, ...]:
    """Byte offsets of the half scales inside a block (none for MXFP4, whose scale byte takes any value)."""
    return {"q5_0": (0,), "mxfp4": (), "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,)}[kind]


def _case(kind: str, data, n_rows: int = 8):
    """Random rows of ``kind`` (every byte random, the half scales drawn from EXTREME_HALVES or any finite half)
    and one activation with arbitrary int8 values (-128 included), its block sums, extreme float32 scales."""
    nel, bsize = rows4._ROWS4_X[kind]
    raw, nb, rng = random_rows(data, n_rows, bsize, _scale_offsets(kind))
    n_cols = nb * nel
    xq = rng.integers(-128, 128, n_cols, dtype=np.int8)
    if data.draw(st.booleans()):
        xq[:] = data.draw(st.sampled_from([-128, 127, 0]))
    xd = rng.choice(EXTREME_F32, n_cols // nel) * rng.choice(np.array([1, -1], np.float32), n_cols // nel)
    xs = xq.astype(np.int32).reshape(-1, 32).sum(axis=1).astype(np.int32)
    return raw, nb, xq, xd.astype(np.float32), xs


_COMPILED: dict = {}


def _compiled(kind: str, avx2: bool, f16c: bool):
    """The compiled rows4 function of ``kind`` on the AVX2 / generic path, with / without F16C."""
    key = (kind, avx2, f16c)
    if key not in _COMPILED:
        py = getattr(rows4, f"{kind}_rows4")
        _COMPILED[key] = compile_on_path(
            lambda: lambda a, r, nb, q, d, s, t: py(a, r, nb, q, d, s, t),
            "(uint8[:, ::1], intp, intp, int8[::1], float32[::1], int32[::1], float32[::1])", avx2, f16c)
    return _COMPILED[key]


PATHS = code_paths()
_bits = float_bits


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_four_rows_equal_the_one_row_function_bit_for_bit(kind, data):
    # every lane of rows4 at r = 4 (the pass prefetching past the last row) is the float64 the one-row
    # function qdot_row returns for that row, to the bit (NaN/inf from extreme scales included), on every path
    raw, nb, xq, xd, xs = _case(kind, data)
    nel = rows4._ROWS4_X[kind][0]
    scratch = np.empty(32, np.int8)
    want = [qdot_row(rows4._ROWS4_X_QTYPE[kind], raw[r], raw[r].view(np.int8), nb * nel, xq, xd, xs, F16_TO_F32,
                     scratch) for r in range(4, 8)]
    for avx2, f16c in PATHS:
        got = _compiled(kind, avx2, f16c)(raw, 4, nb, xq, xd, xs, F16_TO_F32)
        assert np.array_equal(_bits(got), _bits(want)), f"{kind} AVX2={avx2} F16C={f16c}: {got} != {want}"


@pytest.mark.parametrize("kind,qtype,bsize", [("q4_0", 2, 18), ("q8_0", 8, 34)])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_four_q4_0_q8_0_rows_equal_the_one_row_function_bit_for_bit(kind, qtype, bsize, data):
    # rows4.q4_0_rows4 (two rows per register on AVX2: rows4._nibble_pairs) and q8_0_rows4 on every byte pattern,
    # any int8 activation (-128 included), extreme scales: every lane is qdot_row's float64 for that row
    raw, nb, rng = random_rows(data, 8, bsize, (0,))
    xq = rng.integers(-128, 128, nb * 32, dtype=np.int8)
    if data.draw(st.booleans()):
        xq[:] = data.draw(st.sampled_from([-128, 127, 0]))
    xd = (rng.choice(EXTREME_F32, nb) * rng.choice(np.array([1, -1], np.float32), nb)).astype(np.float32)
    xs = xq.astype(np.int32).reshape(-1, 32).sum(axis=1).astype(np.int32)
    scratch = np.empty(32, np.int8)
    want = [qdot_row(qtype, raw[r], raw[r].view(np.int8), nb * 32, xq, xd, xs, F16_TO_F32, scratch)
            for r in range(4, 8)]
    py = getattr(rows4, f"{kind}_rows4")
    for avx2, f16c in PATHS:
        key = (kind, avx2, f16c)
        if key not in _COMPILED:
            _COMPILED[key] = compile_on_path(
                lambda: lambda a, r, nb, q, d, s, t: py(a, r, nb, q, d, s, t),
                "(uint8[:, ::1], intp, intp, int8[::1], float32[::1], int32[::1], float32[::1])", avx2, f16c)
        got = _COMPILED[key](raw, 4, nb, xq, xd, xs, F16_TO_F32)
        assert np.array_equal(_bits(got), _bits(want)), f"{kind} AVX2={avx2} F16C={f16c}: {got} != {want}"


@pytest.mark.parametrize("kind", KINDS)
def test_qdot_with_four_row_passes_equals_single_rows(kind):
    # qdot_matmul on 11 rows (two passes of four, then three single rows) and 3 vectors equals the one-row
    # path (one-row matrices) bit for bit, on quantized-looking rows of real width
    nel, bsize = rows4._ROWS4_X[kind]
    rng = np.random.default_rng(7)
    n_cols = 2048
    raw = rng.integers(0, 256, (11, n_cols // nel * bsize), dtype=np.uint8)
    for o in _scale_offsets(kind):
        for b in range(n_cols // nel):
            raw[:, b * bsize + o:b * bsize + o + 2] = rng.choice(EXTREME_HALVES[4:9], 11).view(np.uint8).reshape(11, 2)
    if kind == "mxfp4":
        raw[:, ::bsize] = rng.integers(118, 138, (11, n_cols // nel))
    qtype = rows4._ROWS4_X_QTYPE[kind]
    acts = quantize_acts(rng.normal(size=(3, n_cols)).astype(np.float32), 256 if nel == 256 else 32)
    full = qdot_matmul(raw, qtype, n_cols, acts)
    single = np.concatenate([qdot_matmul(raw[r:r + 1], qtype, n_cols, acts) for r in range(11)], axis=1)
    assert np.array_equal(full.view(np.uint32), single.view(np.uint32))
    assert np.isfinite(full).all()


def _h(v) -> bytes:
    return np.float16(v).tobytes()


def test_four_row_mxfp4_by_hand():
    # row r: exponent byte 128 - r (scale 2^-r), every nibble 0x7 | 0xF << 4 (values 12 and -12: 6 and -6
    # doubled); activation 127 at element 0 (low nibble, +12) and 1 at element 16 (high nibble, -12), block
    # max 127 -> d_x = f16(127/127) = 1: row r's dot is 2^-r * (12 * 127 - 12 * 1) = 2^-r * 1512
    raw = np.stack([np.frombuffer(bytes([128 - r] + [0xF7] * 16), np.uint8) for r in range(4)])
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 16] = 127, 1
    acts = quantize_acts(x, 32)
    want = [2.0 ** -r * 1512 for r in range(4)]
    assert list(rows4.mxfp4_rows4(raw, 0, 1, acts.q[0], acts.d[0], acts.bsum[0], F16_TO_F32)) == want
    assert list(_compiled("mxfp4", simd.AVX2, simd.F16C)(raw, 0, 1, acts.q[0], acts.d[0], acts.bsum[0],
                                                         F16_TO_F32)) == want
    assert qdot_matmul(raw, 39, 32, acts)[0].tolist() == want


def test_four_row_q4_k_by_hand():
    # row r: d = 2^-r, dmin = 1; sub-block scales sc_j = j + 1 (j < 4: byte j = j + 1; j >= 4: low nibble of
    # byte j + 4, high bits 0), mins m_j = 1 for every j (bytes 4..7 = 1, high nibbles of bytes 8..11 = 1);
    # every nibble 2. Activation: 127 at element 0 of each sub-block: Q8_K's iscale = -127/127, so q = -127
    # there and d_x = -1. acc_sc = sum_j (j + 1) * 2 * -127 = -9144; acc_m = sum_j 1 * -127 = -1016;
    # row r: (2^-r * -1) * -9144 - (1 * -1) * -1016 = 2^-r * 9144 - 1016
    scales = bytes([1, 2, 3, 4, 1, 1, 1, 1] + [0x10 | (j + 1) for j in range(4, 8)])
    raw = np.stack([np.frombuffer(_h(2.0 ** -r) + _h(1.0) + scales + bytes([0x22] * 128), np.uint8)
                    for r in range(4)])
    x = np.zeros((1, 256), np.float32)
    x[0, ::32] = 127
    acts = quantize_acts(x, 256)
    want = [2.0 ** -r * 9144 - 1016 for r in range(4)]
    assert list(rows4.q4_k_rows4(raw, 0, 1, acts.q[0], acts.d[0], acts.bsum[0], F16_TO_F32)) == want
    assert list(_compiled("q4_k", simd.AVX2, simd.F16C)(raw, 0, 1, acts.q[0], acts.d[0], acts.bsum[0],
                                                        F16_TO_F32)) == want
