"""Kernels: bit-exact dequantization vs gguf-py for every registered type; matmul vs float64 NumPy.

Tests iterate the registry (``KERNELS``), so a new type is covered without new test code.
"""

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q
from gguf.quants import dequantize
from hypothesis import given, settings, strategies as st

from refsim.errors import ConfigError
from refsim.kernels import KERNELS, dequantize_rows, matmul, matvec, row_bytes

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # gguf-py on random bytes (inf/nan scales)

TYPES = sorted(KERNELS, key=int)
EXPECTED_TYPES = {Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K,
                  Q.Q6_K, Q.IQ4_NL, Q.IQ4_XS, Q.TQ1_0, Q.TQ2_0, Q.MXFP4, Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS,
                  Q.IQ3_S, Q.IQ1_S, Q.IQ1_M}


def test_registry_covers_the_required_types():
    assert set(KERNELS) == EXPECTED_TYPES
    for t, k in KERNELS.items():
        assert (k.block_size, k.type_size) == GGML_QUANT_SIZES[t]


def reference(raw: np.ndarray, qtype) -> np.ndarray:
    """gguf-py's dequantization of (n_rows, row_bytes) uint8 rows, as float32 (n_rows, n_cols)."""
    if qtype == Q.F32:
        return raw.view(np.float32).copy()
    return dequantize(raw, qtype).reshape(raw.shape[0], -1)


def assert_bit_equal(got: np.ndarray, want: np.ndarray, qtype, ctx=""):
    """Bitwise equality; NaNs must be NaN in both (payloads of signalling NaNs may be quieted)."""
    assert got.shape == want.shape and got.dtype == want.dtype == np.float32
    nan = np.isnan(want)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (nan & np.isnan(got))
    if not same.all():
        k = KERNELS[qtype]
        bad = np.argwhere(~same)
        r, c = bad[0]
        block = c // k.block_size
        raise AssertionError(f"{qtype.name}{ctx}: {len(bad)} values differ; first at row {r} block {block}: "
                             f"got {got[r, c]!r} want {want[r, c]!r}")


@st.composite
def quant_rows(draw, qtype):
    """(n_rows, row_bytes) uint8 of random bytes for ``qtype``, some rows all-zero, and n_cols."""
    k = KERNELS[qtype]
    n_blocks = draw(st.integers(1, 3))
    n_rows = draw(st.integers(1, 4))
    n_cols = n_blocks * max(k.block_size, 1) * (8 if k.block_size == 1 else 1)
    seed = draw(st.integers(0, 2**32 - 1))
    raw = np.random.default_rng(seed).integers(0, 256, (n_rows, k.row_bytes(n_cols)), dtype=np.uint8)
    zero_rows = draw(st.lists(st.integers(0, n_rows - 1), max_size=2))
    raw[zero_rows] = 0
    return raw, n_cols


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_all_zero_blocks(qtype):
    n_cols = 2 * max(KERNELS[qtype].block_size, 32)
    raw = np.zeros((3, row_bytes(qtype, n_cols)), dtype=np.uint8)
    out = dequantize_rows(raw, qtype, n_cols)
    assert_bit_equal(out, reference(raw, qtype), qtype)
    assert not out.any()


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_random_blocks_bit_exact(qtype):
    @settings(max_examples=40, deadline=None)
    @given(quant_rows(qtype))
    def check(rows_cols):
        raw, n_cols = rows_cols
        assert_bit_equal(dequantize_rows(raw, qtype, n_cols), reference(raw, qtype), qtype)
    check()


def _finite_rows(qtype, n_rows, n_cols, seed):
    """Random rows whose decode is finite (scales drawn as real halves), for matmul checks."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (n_rows, row_bytes(qtype, n_cols)), dtype=np.uint8)
    w = reference(raw, qtype)
    bad = ~np.isfinite(w).all(axis=1) | (np.abs(w).max(axis=1) > 1e4)
    raw[bad] = 0
    return raw


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_matmul_matches_float64_numpy(qtype):
    n_cols = 512 if KERNELS[qtype].block_size == 256 else 96
    raw = _finite_rows(qtype, 7, n_cols, 1)
    x = np.random.default_rng(2).standard_normal((3, n_cols)).astype(np.float32)
    want = (reference(raw, qtype).astype(np.float64) @ x.T.astype(np.float64)).T
    got = matmul(raw, qtype, n_cols, x)
    assert got.shape == (3, 7) and got.dtype == np.float32
    # float64 accumulation rounded once: within one float32 ulp of the float64 result
    np.testing.assert_allclose(got, want, rtol=2**-23, atol=1e-30)
    np.testing.assert_array_equal(matvec(raw, qtype, n_cols, x[1]), got[1])


def test_kernel_reads_only_the_rows_given():
    rng = np.random.default_rng(0)
    full = rng.integers(0, 256, (10, row_bytes(Q.Q8_0, 64)), dtype=np.uint8)
    assert_bit_equal(dequantize_rows(full[3:5], Q.Q8_0, 64), reference(full, Q.Q8_0)[3:5], Q.Q8_0)


def test_bad_arguments():
    with pytest.raises(ConfigError, match="no kernel for ggml type"):
        dequantize_rows(np.zeros((1, 36), np.uint8), Q.NVFP4, 64)
    with pytest.raises(ConfigError, match="not a positive multiple"):
        dequantize_rows(np.zeros((1, 18), np.uint8), Q.Q4_0, 33)
    with pytest.raises(ConfigError, match=r"need \(n_rows, 18\)"):
        dequantize_rows(np.zeros((1, 19), np.uint8), Q.Q4_0, 32)
    with pytest.raises(ConfigError, match="expected"):
        matmul(np.zeros((1, 18), np.uint8), Q.Q4_0, 32, np.zeros((2, 31), np.float32))


QUANTIZED = [t for t in TYPES if t not in (Q.F32, Q.F16, Q.BF16)]


def test_every_quantized_type_declares_its_scale_fields():
    from refsim.testing.strategies import QUANT_SCALE_FIELDS
    for t in QUANTIZED:
        assert QUANT_SCALE_FIELDS[int(t)][0] == KERNELS[t].type_size, t.name


@pytest.mark.parametrize("qtype", QUANTIZED, ids=lambda t: t.name)
def test_every_scale_bit_pattern_bit_exact(qtype):
    # each float scale field takes all 65536 half bit patterns (every exponent, subnormals, +-0,
    # +-inf, NaNs), one block each, the other bytes random; MXFP4's E8M0 byte takes all 256 values
    from refsim.testing.strategies import QUANT_SCALE_FIELDS
    size, fields = QUANT_SCALE_FIELDS[int(qtype)]
    k = KERNELS[qtype]
    rng = np.random.default_rng(int(qtype))
    n_blocks = 256 if qtype == Q.MXFP4 else 1 << 16
    for o in fields or (0,):
        blocks = rng.integers(0, 256, (n_blocks, size), dtype=np.uint8)
        if fields:
            blocks[:, o:o + 2] = np.arange(1 << 16, dtype=np.uint16).view(np.uint8).reshape(-1, 2)
        elif qtype == Q.IQ1_M:                              # d's 16 bits in the top nibbles of bytes 49, 51, 53, 55
            h = np.arange(1 << 16)
            for n in range(4):
                blocks[:, 49 + 2 * n] = (blocks[:, 49 + 2 * n] & 15) | (((h >> (4 * n)) & 15) << 4)
        else:
            blocks[:, 0] = np.arange(256, dtype=np.uint8)
        raw = blocks.reshape(64, -1)                       # 64 rows of n_blocks / 64 blocks
        n_cols = n_blocks // 64 * k.block_size
        assert_bit_equal(dequantize_rows(raw, qtype, n_cols), reference(raw, qtype), qtype, f" field {o}")
