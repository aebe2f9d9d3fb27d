"""Four-rows-at-a-time exact products (refsim.kernels.simd_exact.exact_rows4) equal the one-row 8-lane float64
loop bit for bit (issue 18, item 2: the exact numerics faster without changing a result)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.forward.layers import linear_kernel
from refsim.kernels import simd, simd_exact
from refsim.kernels.mxfp4 import KVALUES
from refsim.kernels.registry import F16_TO_F32
from refsim.testing.rows4 import EXTREME_HALVES, compile_on_path, random_rows

KINDS = sorted(simd_exact.EXACT_ROWS4)
HALF_OFFSETS = {"f32": (), "q4_0": (0,), "q5_0": (0,), "q8_0": (0,), "mxfp4": (), "q4_k": (0, 2), "q5_k": (0, 2),
                "q6_k": (208,)}


def _case(kind, data, n_rows=8):
    """Random rows (every byte random; half scales extreme or any finite half; F32 rows finite floats of any
    exponent, zeros of both signs among them) and a float64 activation holding float32 values of any exponent."""
    qtype, nel, bsize = simd_exact.EXACT_ROWS4[kind]
    raw, nb, rng = random_rows(data, n_rows, bsize, HALF_OFFSETS[kind])
    if kind == "f32":                 # (F32 has no half fields)
        f = raw.view(np.float32)
        f[~np.isfinite(f)] = -0.0
    n_cols = nb * nel
    scale = data.draw(st.sampled_from([1.0, 1e-30, 1e30, 3e38]))
    x = (rng.standard_normal(n_cols) * scale).astype(np.float32).astype(np.float64)
    return qtype, raw, nb, x


_COMPILED: dict = {}


def _compiled(kind, avx2):
    key = (kind, avx2)
    if key not in _COMPILED:
        qtype = simd_exact.EXACT_ROWS4[kind][0]
        _COMPILED[key] = compile_on_path(          # F16C off: MXFP4's lookup reads AVX2 only
            lambda: lambda a, r, nb, x, t: simd_exact.exact_rows4(qtype, a, r, nb, x, t),
            "(uint8[:, ::1], intp, intp, float64[::1], float32[::1])", avx2, False)
    return _COMPILED[key]


def _bits(t) -> np.ndarray:
    """float64 bits, every NaN written as one NaN: LLVM does not fix which operand's NaN payload an addition or
    multiplication returns (it may commute them), so neither the one-row loop nor exact_rows4 has a defined NaN
    payload; NaN against a number, or a number against another number, still differs."""
    a = np.array(t, dtype=np.float64)
    return np.where(np.isnan(a), np.nan, a).view(np.uint64)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_four_rows_equal_the_one_row_loop_bit_for_bit(kind, data):
    # rows 4..7 (the pass prefetching past the last row): each lane the float64 the one-row loop sums, to the bit
    # (inf and NaN from extreme scales included), on the AVX2 and generic paths; and linear_kernel (rows4 on the
    # first 8 rows, then nothing left) equals it rounded to float32
    qtype, raw, nb, x = _case(kind, data)
    want = simd_exact.exact_rows4_python(qtype, raw, 4, nb, x, F16_TO_F32)
    for avx2 in sorted({False, simd.AVX2}):
        got = _compiled(kind, avx2)(raw, 4, nb, x, F16_TO_F32)
        assert np.array_equal(_bits(got), _bits(want)), f"{kind} AVX2={avx2}: {got} != {want}"
    out = np.empty((1, raw.shape[0]), np.float32)
    linear_kernel(qtype, raw, nb * simd_exact.EXACT_ROWS4[kind][1], F16_TO_F32, KVALUES,
                  x.astype(np.float32)[None], out)
    want32 = np.array(want, np.float32)
    assert np.array_equal(np.where(np.isnan(out[0, 4:]), np.nan, out[0, 4:]).view(np.uint32),
                          np.where(np.isnan(want32), np.nan, want32).view(np.uint32))


@pytest.mark.parametrize("kind", KINDS)
def test_linear_with_four_row_passes_equals_single_rows(kind):
    # 11 rows (two passes of four, three single rows) and 3 vectors equal one-row matrices bit for bit
    qtype, nel, bsize = simd_exact.EXACT_ROWS4[kind]
    rng = np.random.default_rng(3)
    n_cols = 512
    raw = rng.integers(0, 256, (11, n_cols // nel * bsize), dtype=np.uint8)
    if kind == "f32":
        raw = rng.standard_normal((11, n_cols)).astype(np.float32).view(np.uint8)
    for o in HALF_OFFSETS[kind]:
        for b in range(n_cols // nel):
            raw[:, b * bsize + o:b * bsize + o + 2] = rng.choice(EXTREME_HALVES[4:9], 11).view(np.uint8).reshape(11, 2)
    if kind == "mxfp4":
        raw[:, ::bsize] = rng.integers(118, 138, (11, n_cols // nel))
    x = rng.standard_normal((3, n_cols)).astype(np.float32)
    full = np.empty((3, 11), np.float32)
    linear_kernel(qtype, raw, n_cols, F16_TO_F32, KVALUES, x, full)
    single = np.empty((3, 11), np.float32)
    for r in range(11):
        linear_kernel(qtype, raw[r:r + 1], n_cols, F16_TO_F32, KVALUES, x, single[:, r:r + 1])
    assert np.array_equal(full.view(np.uint32), single.view(np.uint32)) and np.isfinite(full).all()
