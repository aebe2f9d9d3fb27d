"""Four-rows-at-a-time products of the further types (refsim.kernels.simd_ext: Q4_1, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K,
TQ1_0, TQ2_0) equal the one-row reference qdot_ext.ext_row bit for bit, on the AVX2 and generic paths, with and
without F16C (issue 18: speed without changing a result)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.kernels import qdot_ext, simd_ext
from refsim.kernels.ggml_matmul import qdot_matmul
from refsim.kernels.qdot import quantize_acts
from refsim.kernels.registry import F16_TO_F32
from refsim.testing.rows4 import EXTREME_HALVES, code_paths, compile_on_path, float_bits, random_rows

KINDS = sorted(simd_ext.ROWS4_EXT)
EXTREME_F32 = np.array([0.0, 1.4e-45, 1.2e-38, 1e-20, 1.0 / 127, 1.0, 3e8, 3.4e38], np.float32)
"""Activation scales and Q8_1 block sums: zero, the smallest float32 subnormal and normal, up to near float32's largest."""
HALF_OFFSETS = {"q4_1": (0, 2), "q5_1": (0, 2), "iq4_nl": (0,), "iq4_xs": (0,), "q2_k": (80, 82), "q3_k": (108,),
                "tq1_0": (52,), "tq2_0": (64,)}
"""Byte offsets of the half fields (d, and m / dmin) inside a block."""


def _case(kind: str, data, n_rows: int = 8):
    """Random rows of ``kind`` (every byte random, the halves drawn from EXTREME_HALVES or any finite half), one
    activation with arbitrary int8 values (-128 included, or all equal), extreme float32 scales and Q8_1 sums."""
    nel, bsize = simd_ext.ROWS4_EXT[kind]
    raw, nb, rng = random_rows(data, n_rows, bsize, HALF_OFFSETS[kind])
    n_cols = nb * nel
    xq = rng.integers(-128, 128, n_cols, dtype=np.int8)
    if data.draw(st.booleans()):
        xq[:] = data.draw(st.sampled_from([-128, 127, 0]))
    sign = np.array([1, -1], np.float32)
    xd = (rng.choice(EXTREME_F32, n_cols // nel) * rng.choice(sign, n_cols // nel)).astype(np.float32)
    xs = (rng.choice(EXTREME_F32, n_cols // 32) * rng.choice(sign, n_cols // 32)).astype(np.float32)
    return raw, nb, xq, xd, xs


_COMPILED: dict = {}


def _compiled(kind: str, avx2: bool, f16c: bool):
    key = (kind, avx2, f16c)
    if key not in _COMPILED:
        qtype = simd_ext.ROWS4_EXT_QTYPE[kind]
        _COMPILED[key] = compile_on_path(
            lambda: lambda a, r, nb, q, d, s, t: simd_ext.ext_rows4(qtype, a, r, nb, q, d, s, t),
            "(uint8[:, ::1], intp, intp, int8[::1], float32[::1], float32[::1], float32[::1])", avx2, f16c)
    return _COMPILED[key]


PATHS = code_paths()
_bits = float_bits


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_four_rows_equal_the_one_row_function_bit_for_bit(kind, data):
    # every lane at r = 4 (the pass prefetching past the last row) is the float64 ext_row returns for that row, to
    # the bit (NaN/inf from extreme scales included), on every path
    raw, nb, xq, xd, xs = _case(kind, data)
    qtype = simd_ext.ROWS4_EXT_QTYPE[kind]
    n_cols = nb * simd_ext.ROWS4_EXT[kind][0]
    want = [qdot_ext.ext_row(qtype, raw[r], n_cols, xq, xd, xs, F16_TO_F32) for r in range(4, 8)]
    assert np.array_equal(_bits(simd_ext.ext_rows4_python(qtype, raw, 4, nb, xq, xd, xs, F16_TO_F32)), _bits(want))
    for avx2, f16c in PATHS:
        got = _compiled(kind, avx2, f16c)(raw, 4, nb, xq, xd, xs, F16_TO_F32)
        assert np.array_equal(_bits(got), _bits(want)), f"{kind} AVX2={avx2} F16C={f16c}: {got} != {want}"


@pytest.mark.parametrize("kind", KINDS)
def test_qdot_with_four_row_passes_equals_single_rows(kind):
    # qdot_matmul on 11 rows (two passes of four, then three single rows) and 3 vectors equals the one-row path
    # (one-row matrices) bit for bit, on rows of real width with ordinary scales
    nel, bsize = simd_ext.ROWS4_EXT[kind]
    rng = np.random.default_rng(7)
    n_cols = 2048
    raw = rng.integers(0, 256, (11, n_cols // nel * bsize), dtype=np.uint8)
    for o in HALF_OFFSETS[kind]:
        for b in range(n_cols // nel):
            raw[:, b * bsize + o:b * bsize + o + 2] = rng.choice(EXTREME_HALVES[4:9], 11).view(np.uint8).reshape(11, 2)
    qtype = simd_ext.ROWS4_EXT_QTYPE[kind]
    acts = quantize_acts(rng.normal(size=(3, n_cols)).astype(np.float32), 256 if nel == 256 else 32)
    full = qdot_matmul(raw, qtype, n_cols, acts)
    single = np.concatenate([qdot_matmul(raw[r:r + 1], qtype, n_cols, acts) for r in range(11)], axis=1)
    assert np.array_equal(full.view(np.uint32), single.view(np.uint32))
    assert np.isfinite(full).all()


def test_four_row_tq1_0_by_hand():
    # TQ1_0 row r: d = 2^-r, qs[0] = 0xFF and every other byte 0. The digits of 0xFF are all 2 (255 * 3^p mod 256 =
    # 255, 253, 247, 229, 175, each times 3 >> 8 = 2: q = +1) and those of 0 all 0 (q = -1); qs[0] holds elements
    # 0, 32, 64, 96, 128. With every activation 1 (scale 1) row r's dot is 2^-r * (5 - 251) = 2^-r * -246.
    raw = np.zeros((4, 54), np.uint8)
    raw[:, 0] = 0xFF
    for r in range(4):
        raw[r, 52:54] = np.frombuffer(np.float16(2.0 ** -r).tobytes(), np.uint8)
    xq = np.ones(256, np.int8)
    xd = np.ones(1, np.float32)
    xs = np.zeros(8, np.float32)
    want = [2.0 ** -r * -246 for r in range(4)]
    assert [qdot_ext.ext_row(34, raw[r], 256, xq, xd, xs, F16_TO_F32) for r in range(4)] == want
    for avx2, f16c in PATHS:
        assert list(_compiled("tq1_0", avx2, f16c)(raw, 0, 1, xq, xd, xs, F16_TO_F32)) == want
