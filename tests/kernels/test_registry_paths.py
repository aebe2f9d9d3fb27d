"""Every path the registry names, for every registered type (refsim/kernels/registry.py): the decoder, the
``vec_dot_type``, the one-row integer product, the four-row walkers of both numerics modes. The tests iterate
:data:`KERNELS` and read each type's facts from it, so a new type (a row of ``_TABLE``) is covered here with no
new test code, and a fact that disagrees with the code that implements it fails here."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q
from gguf.quants import dequantize
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.forward.actq import act_kind, quantize_activations
from refsim.forward.layers import linear_kernel
from refsim.kernels import KERNELS, dequantize_rows, registry, rows4, simd_exact, simd_ext
from refsim.kernels.ggml_matmul import EXT_TYPES, QDOT_ALL, QDOT_TYPES, act_block, qdot_matmul, qdot_pairs
from refsim.kernels.mxfp4 import KVALUES
from refsim.kernels.qdot import qdot_row, quantize_acts
from refsim.kernels.qdot_ext import ext_row
from refsim.kernels.registry import F16_TO_F32, QDOT, QDOT_EXT, kinds
from refsim.testing.strategies import QUANT_SCALE_FIELDS, quantized_weight_rows

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # gguf-py on random bytes

ALL = sorted(KERNELS, key=int)
WITH_DOT = [t for t in ALL if KERNELS[t].dot is not None]
FLOATS = (Q.F32, Q.F16, Q.BF16)

VEC_DOT_TYPE = {
    # ggml/src/ggml-cpu/ggml-cpu.c type_traits_cpu[...].vec_dot_type, read there (the oracle of this fact)
    Q.F32: Q.F32, Q.F16: Q.F16, Q.BF16: Q.BF16,
    Q.Q4_0: Q.Q8_0, Q.Q5_0: Q.Q8_0, Q.Q8_0: Q.Q8_0, Q.IQ4_NL: Q.Q8_0, Q.MXFP4: Q.Q8_0,
    Q.Q4_1: Q.Q8_1, Q.Q5_1: Q.Q8_1,
    Q.Q2_K: Q.Q8_K, Q.Q3_K: Q.Q8_K, Q.Q4_K: Q.Q8_K, Q.Q5_K: Q.Q8_K, Q.Q6_K: Q.Q8_K, Q.IQ4_XS: Q.Q8_K,
    Q.TQ1_0: Q.Q8_K, Q.TQ2_0: Q.Q8_K, Q.IQ1_S: Q.Q8_K, Q.IQ1_M: Q.Q8_K, Q.IQ2_XXS: Q.Q8_K, Q.IQ2_XS: Q.Q8_K,
    Q.IQ2_S: Q.Q8_K, Q.IQ3_XXS: Q.Q8_K, Q.IQ3_S: Q.Q8_K,
}

ACT_KIND_BEFORE = {0: 0, 1: 1, 30: 2, 2: 3, 6: 3, 8: 3, 39: 3, 12: 4, 13: 4, 14: 4, 3: 5, 7: 5, 20: 3, 10: 4, 11: 4,
                   23: 4, 34: 4, 35: 4, 16: 4, 17: 4, 22: 4, 18: 4, 21: 4, 19: 4, 29: 4}
"""refsim.forward.actq's hand-written ``_VEC_DOT`` table before the registry owned the fact (ggml id -> ACT_*)."""


def _bits32(a) -> np.ndarray:
    """float32 bits with every NaN written as one NaN (payloads are not part of any rule here)."""
    a = np.asarray(a, np.float32)
    return np.where(np.isnan(a), np.float32(np.nan), a).view(np.uint32)


# --- the facts themselves ---------------------------------------------------------------------------

@pytest.mark.parametrize("qtype", ALL, ids=lambda t: t.name)
def test_facts_agree_with_ggml_and_gguf(qtype):
    k = KERNELS[qtype]
    assert (k.block_size, k.type_size) == GGML_QUANT_SIZES[qtype]
    assert k.vec_dot_type == VEC_DOT_TYPE[qtype]
    assert k.act_block == GGML_QUANT_SIZES[k.vec_dot_type][0]
    assert k.family in {f"refsim.kernels.{m}" for m in ("floats", "legacy", "k_quants", "iq4", "iq_grid", "ternary",
                                                          "mxfp4")}
    assert k.decoder.__name__ == f"decode_row_{qtype.name.lower()}" and k.decoder.__module__ == k.family
    assert k.decoder_lut == ("e2m1" if qtype == Q.MXFP4 else None if qtype in (Q.F32, Q.BF16) else "f16")
    # the ints the Numba loops compare against are gguf's ids
    assert getattr(registry, qtype.name) == int(qtype) == k.kind
    # an integer product needs an int8 activation, and a walker of the ggml mode needs an integer product
    assert (k.dot is not None) <= (k.vec_dot_type in (Q.Q8_0, Q.Q8_1, Q.Q8_K))
    assert k.rows4 <= (k.dot is not None)
    assert k.dot in (QDOT, QDOT_EXT, None)
    assert (qtype in FLOATS) == (k.vec_dot_type in FLOATS)
    assert act_kind(qtype) == ACT_KIND_BEFORE[int(qtype)]


def test_derived_int_tables():
    assert registry.QDOT_TYPES == (2, 6, 8, 39, 12, 13, 14)          # the order qdot.py's table had
    assert set(registry.EXT_TYPES) == {3, 7, 20, 10, 11, 23, 34, 35, 19, 16, 17, 22, 18, 21}
    assert QDOT_ALL == registry.QDOT_TYPES + registry.EXT_TYPES
    assert set(QDOT_ALL) == {int(t) for t in WITH_DOT}
    assert set(registry.ROWS4_TYPES) == {int(t) for t in ALL if KERNELS[t].rows4}
    assert set(registry.EXACT4_TYPES) == {0, 2, 6, 8, 12, 13, 14, 39}
    for t in ALL:
        assert registry.BLOCK_SIZE[int(t)] == KERNELS[t].block_size
        assert registry.TYPE_SIZE[int(t)] == KERNELS[t].type_size
        assert registry.EXACT4_BLOCK[int(t)] == ((256 if KERNELS[t].block_size == 256 else 32) if KERNELS[t].exact4
                                                 else 0)
    unregistered = [i for i in range(len(registry.BLOCK_SIZE)) if i not in {int(t) for t in ALL}]
    assert not registry.BLOCK_SIZE[unregistered].any() and not registry.EXACT4_BLOCK[unregistered].any()


def test_walkers_implement_exactly_the_flagged_types():
    ggml4 = set(rows4.BY_TYPE) | set(simd_ext.ROWS4_EXT_QTYPE.values())
    assert ggml4 == {int(t) for t in ALL if KERNELS[t].rows4}
    assert set(rows4.BY_TYPE) == set(kinds(dot=QDOT, rows4=True))
    assert set(simd_ext.ROWS4_EXT_QTYPE.values()) == set(kinds(dot=QDOT_EXT, rows4=True))
    assert set(simd_exact.EXACT_QTYPES) == {int(t) for t in ALL if KERNELS[t].exact4}
    # and what each walker module can walk is what the registry says it walks (an unmarked walker is a slowdown
    # no product would show)
    assert set(simd_ext.BLOCK_TERMS) == {Q(t).name.lower() for t in kinds(dot=QDOT_EXT, rows4=True)}
    assert set(simd_exact.DECODED) == {Q(t).name.lower() for t in kinds(exact4=True)}
    for kind, (qt, nel, nbytes) in simd_exact.EXACT_ROWS4.items():
        assert Q(qt).name.lower() == kind and nel % KERNELS[Q(qt)].block_size == 0
        assert nbytes == KERNELS[Q(qt)].row_bytes(nel)


def test_unknown_type_is_named_with_the_supported_ones():
    from refsim.errors import ConfigError
    with pytest.raises(ConfigError, match=r"no kernel for ggml type Q8_K \(id 15\) \(supported: F32, F16, BF16, Q4_0, "):
        registry.kernel_for(Q.Q8_K)
    with pytest.raises(ConfigError, match="has no integer product"):
        act_block(Q.IQ1_M)


# --- the decoder --------------------------------------------------------------------------------------

@st.composite
def rows_of(draw, qtype, max_rows=5):
    """(raw, n_cols) of ``qtype``: quantized_weight_rows' finite-scale rows, or random finite floats."""
    if qtype in FLOATS:
        n_cols = 32 * draw(st.integers(1, 3))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        return np.stack([rows_of_float(qtype, n_cols, rng) for _ in range(draw(st.integers(1, max_rows)))]), n_cols
    return draw(quantized_weight_rows(int(qtype), max_rows=max_rows))


@pytest.mark.parametrize("qtype", ALL, ids=lambda t: t.name)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_the_row_loops_dispatch_to_the_registered_decoder(qtype, data):
    raw, n_cols = data.draw(rows_of(qtype))
    got = dequantize_rows(raw, qtype, n_cols)
    want = np.stack([KERNELS[qtype].decode_row(raw[r], n_cols) for r in range(raw.shape[0])])
    assert np.array_equal(_bits32(got), _bits32(want))
    if qtype != Q.F32:                                             # and the decoder is gguf-py's (outside oracle)
        ref = dequantize(raw, qtype).reshape(raw.shape[0], n_cols)
        assert np.array_equal(_bits32(got), _bits32(ref))


# --- the ggml mode: one row, four rows ------------------------------------------------------------------

def _one_row_reference(qtype, row, n_cols, acts, v):
    """float32 of the one-row product the registry names for ``qtype`` (``dot``), called directly."""
    k = KERNELS[qtype]
    if k.dot == QDOT:
        return np.float32(qdot_row(k.kind, row, row.view(np.int8), n_cols, acts.q[v], acts.d[v], acts.bsum[v],
                                   F16_TO_F32, np.empty(32, np.int8)))
    assert k.dot == QDOT_EXT
    s = acts.s[v] if acts.s is not None else np.zeros(n_cols // 32, np.float32)
    return np.float32(ext_row(k.kind, row, n_cols, acts.q[v], acts.d[v], s, F16_TO_F32))


def _oracle(raw, qtype, n_cols, x, acts):
    """The product as real numbers, in float64: gguf-py's dequantized rows times the activation's round trip (for
    Q8_1 types with llama.cpp's rounded block sums ``s`` in place of ``d * sum q`` in the ``m`` term); and the sum
    of the magnitudes, which bounds the float64 and float32 roundings that separate it from the kernel's value."""
    k = KERNELS[qtype]
    w = dequantize(raw, qtype).reshape(raw.shape[0], n_cols).astype(np.float64)
    xr = quantize_activations(x, act_kind(qtype)).astype(np.float64)
    want = xr @ w.T
    scale = np.abs(xr) @ np.abs(w).T
    if k.vec_dot_type == Q.Q8_1:
        size, fields = QUANT_SCALE_FIELDS[int(qtype)]
        m = raw.reshape(raw.shape[0], -1, size)[:, :, fields[1]:fields[1] + 2].copy().view(np.float16)[..., 0]
        m = m.astype(np.float64)                                      # (n_rows, n_blocks) the blocks' mins
        delta = acts.s.astype(np.float64) - acts.d.astype(np.float64) * acts.bsum    # (n_vec, n_blocks)
        want = want + delta @ m.T
        scale = scale + np.abs(acts.s.astype(np.float64)) @ np.abs(m).T
    return want, scale


@pytest.mark.parametrize("qtype", WITH_DOT, ids=lambda t: t.name)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_one_row_product_is_the_registered_reference_and_the_real_product(qtype, data):
    raw, n_cols = data.draw(rows_of(qtype, max_rows=3))            # < 4 rows: the one-row path only
    n_vec = data.draw(st.integers(1, 2))
    x = (np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).standard_normal((n_vec, n_cols)) * 2
         ).astype(np.float32)
    acts = quantize_acts(x, act_block(qtype))
    got = qdot_matmul(raw, int(qtype), n_cols, acts)
    for v in range(n_vec):
        for r in range(raw.shape[0]):
            assert _bits32(got[v, r]) == _bits32(_one_row_reference(qtype, raw[r], n_cols, acts, v))
    want, scale = _oracle(raw, qtype, n_cols, x, acts)
    assert (np.abs(got - want) <= 2e-7 * scale + 1e-30).all()


@pytest.mark.parametrize("qtype", WITH_DOT, ids=lambda t: t.name)
def test_four_rows_at_a_time_equal_the_one_row_path(qtype):
    # 11 contiguous rows (with a walker: two passes of four, then three rows one at a time) and 3 vectors, as one
    # matrix and as 11 one-row matrices, and as expert pairs: the same bits
    k = KERNELS[qtype]
    rng = np.random.default_rng(int(qtype))
    size, fields = QUANT_SCALE_FIELDS[int(qtype)]
    n_cols = 2048
    raw = rng.integers(0, 256, (11, n_cols // k.block_size * size), dtype=np.uint8)
    blocks = raw.reshape(11, -1, size)
    for o in fields:
        blocks[:, :, o:o + 2] = (rng.uniform(0.5, 1, blocks.shape[:2]) * 2.0 ** -6).astype(np.float16)[..., None].view(
            np.uint8)
    if qtype == Q.MXFP4:
        blocks[:, :, 0] = rng.integers(118, 126, blocks.shape[:2])
    acts = quantize_acts(rng.standard_normal((3, n_cols)).astype(np.float32), k.act_block)
    full = qdot_matmul(raw, int(qtype), n_cols, acts)
    single = np.concatenate([qdot_matmul(raw[r:r + 1], int(qtype), n_cols, acts) for r in range(11)], axis=1)
    assert np.isfinite(full).all() and np.array_equal(full.view(np.uint32), single.view(np.uint32))
    pairs = qdot_pairs(np.stack([raw, raw[::-1].copy()]), int(qtype), n_cols, np.array([1, 0, 1]), acts)
    assert np.array_equal(pairs[0], full[0, ::-1]) and np.array_equal(pairs[1], full[1])
    assert (int(qtype) in QDOT_TYPES) == (k.dot == QDOT) and (int(qtype) in EXT_TYPES) == (k.dot == QDOT_EXT)


# --- the exact mode: one row, four rows --------------------------------------------------------------------

def _more_rows(row, qtype, n_cols, n, rng):
    """``(n, row_bytes)``: ``row`` then ``n - 1`` rows like it: new random quants, the same scale fields (floats:
    new random values)."""
    out = np.repeat(row, n, axis=0)
    if qtype in FLOATS:
        for r in range(1, n):
            out[r] = rows_of_float(qtype, n_cols, rng)
        return out
    size, fields = QUANT_SCALE_FIELDS[int(qtype)]
    keep = np.zeros(size, bool)
    for o in fields:
        keep[o:o + 2] = True
    keep[0] |= qtype == Q.MXFP4                                     # its scale byte
    blocks = out.reshape(n, -1, size)
    fresh = rng.integers(0, 256, blocks.shape, dtype=np.uint8)
    blocks[1:, :, ~keep] = fresh[1:, :, ~keep]
    return out


def rows_of_float(qtype, n_cols, rng):
    """One row of random finite values of the float type ``qtype``, as its bytes."""
    x = (rng.standard_normal(n_cols) * 3).astype(np.float32)
    if qtype == Q.BF16:
        return (x.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    return x.astype(np.float32 if qtype == Q.F32 else np.float16).view(np.uint8)


@pytest.mark.parametrize("qtype", ALL, ids=lambda t: t.name)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_exact_mode_rows_are_the_float64_dot_of_the_decoded_rows(qtype, data):
    # linear_kernel (every type; the exact-4 walker where the registry has one) on 9 contiguous rows equals the
    # same rows one at a time, and each value is the float64 8-lane dot of the registered decoder's row
    raw, n_cols = data.draw(rows_of(qtype, max_rows=1))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    raw = _more_rows(raw[:1], qtype, n_cols, 9, rng)
    x = rng.standard_normal((2, n_cols)).astype(np.float32)
    full = np.empty((2, 9), np.float32)
    linear_kernel(int(qtype), raw, n_cols, F16_TO_F32, KVALUES, x, full)
    for r in range(9):
        one = np.empty((2, 1), np.float32)
        linear_kernel(int(qtype), raw[r:r + 1], n_cols, F16_TO_F32, KVALUES, x, one)
        assert np.array_equal(_bits32(full[:, r]), _bits32(one[:, 0]))
        w = KERNELS[qtype].decode_row(raw[r], n_cols).astype(np.float64)
        for v in range(2):
            lanes = [sum(float(w[c]) * float(x[v, c]) for c in range(j, n_cols, 8)) for j in range(8)]
            dot8 = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
            assert _bits32(full[v, r]) == _bits32(np.float32(dot8))
