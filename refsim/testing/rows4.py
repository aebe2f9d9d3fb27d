"""Random blocks and compiled variants for the four-rows kernel tests (tests/kernels/test_rows4*.py,
test_exact_rows4.py): each kernel is checked bit for bit against its one-row reference on random rows
with extreme scales, on the AVX2 and generic code paths."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

EXTREME_HALVES = np.array([0.0, -0.0, 2.0 ** -24, -(2.0 ** -24), 2.0 ** -14, 6.1e-5, 1.0, -1.0, 0.0137, 65504.0,
                           -65504.0, 3.0e4], np.float16)
"""Finite half scales: zero (both signs), the smallest subnormal, the smallest normal, the largest (65504)."""


def random_rows(data, n_rows: int, bsize: int, half_offsets) -> tuple[np.ndarray, int, np.random.Generator]:
    """``(raw, nb, rng)``: ``n_rows`` rows of 1-3 random blocks of ``bsize`` bytes (every byte random), the
    half fields at ``half_offsets`` inside each block drawn from :data:`EXTREME_HALVES` or any finite half;
    ``rng`` seeded by hypothesis for the caller's further draws."""
    nb = data.draw(st.integers(1, 3))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    raw = rng.integers(0, 256, (n_rows, nb * bsize), dtype=np.uint8)
    for o in half_offsets:
        for b in range(nb):
            if data.draw(st.booleans()):
                h = rng.choice(EXTREME_HALVES, n_rows)
            else:   # any finite half
                bits = rng.integers(0, 1 << 16, n_rows, dtype=np.uint16)
                bits[(bits & 0x7C00) == 0x7C00] &= 0xBFFF
                h = bits.view(np.float16)
            raw[:, b * bsize + o:b * bsize + o + 2] = h.view(np.uint8).reshape(n_rows, 2)
    return raw, nb, rng


def compile_on_path(make, signature: str, avx2: bool, f16c: bool):
    """``njit(make())`` compiled for ``signature`` with :mod:`refsim.kernels.simd`'s ``AVX2``/``F16C``
    switches set as given while it compiles (the intrinsics read them then), restored after."""
    from numba import njit

    from refsim.kernels import simd

    old = simd.AVX2, simd.F16C
    simd.AVX2, simd.F16C = avx2, f16c
    try:
        f = njit(make())
        f.compile(signature)
    finally:
        simd.AVX2, simd.F16C = old
    return f


def code_paths() -> list[tuple[bool, bool]]:
    """The (AVX2, F16C) code paths this machine can run: generic, and AVX2 with and without F16C."""
    from refsim.kernels import simd

    return sorted({(False, False), (simd.AVX2, False), (simd.AVX2, simd.F16C)})


def float_bits(t) -> np.ndarray:
    """float64 values as their uint64 bits (so -0.0 differs from 0.0 and NaN compares by payload)."""
    return np.array(t, dtype=np.float64).view(np.uint64)
