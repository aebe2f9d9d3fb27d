"""Integer block products (refsim/kernels/qdot.py, simd.py, ggml_matmul.py): hand-worked blocks per weight type, the
vector block dots against their plain-Python twins, and properties (equal to the float64 product of
gguf-py's dequantization and the round-tripped activation; batch- and thread-invariant)."""

import numba
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from refsim.errors import ConfigError
from refsim.forward.actq import act_kind, quantize_activations
from refsim.kernels import rows4, simd
from refsim.kernels.ggml_matmul import (
    QDOT_TYPES,
    act_block,
    qdot_kernel,
    qdot_kernel_parallel,
    qdot_matmul,
    qdot_pairs,
)
from refsim.kernels.qdot import quantize_acts, round_tie
from refsim.kernels.registry import F16_TO_F32
from refsim.testing.strategies import quantized_weight_rows

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _h(v) -> bytes:
    return np.float16(v).tobytes()


# --- hand-worked blocks ------------------------------------------------------------------------

def test_q8_0_block_by_hand():
    # weight d = 0.5, q = 0..31 - 16; activation: integers with amax 127 -> d_x = 1, q_x = x
    qw = np.arange(32, dtype=np.int8) - 16
    row = np.frombuffer(_h(0.5) + qw.tobytes(), np.uint8)[None, :]
    x = np.zeros(32, np.float32)
    x[:4] = [127, -3, 5, 1]
    acts = quantize_acts(x[None], 32)
    assert acts.d.tolist() == [[1.0]] and acts.q[0, :4].tolist() == [127, -3, 5, 1]
    want = 0.5 * (-16 * 127 + -15 * -3 + -14 * 5 + -13 * 1)
    assert qdot_matmul(row, int(Q.Q8_0), 32, acts).tolist() == [[want]]


def test_q4_0_and_q5_0_blocks_by_hand():
    x = np.zeros(32, np.float32)
    x[[0, 16, 31]] = [127, 2, -1]          # element 0: byte 0 low; 16: byte 0 high; 31: byte 15 high
    acts = quantize_acts(x[None], 32)
    nib = np.zeros(16, np.uint8)
    nib[0] = 0x9C                          # low 12 -> 4, high 9 -> 1 (minus 8)
    nib[15] = 0x30                         # high 3 -> -5
    row4 = np.frombuffer(_h(0.25) + nib.tobytes(), np.uint8)[None, :]
    assert qdot_matmul(row4, int(Q.Q4_0), 32, acts)[0, 0] == 0.25 * (4 * 127 + 1 * 2 + -5 * -1)
    # Q5_0: high bit of element 16 set -> (9 | 16) - 16 = 9; others q - 16
    qh = np.uint32(1 << 16).tobytes()
    row5 = np.frombuffer(_h(0.25) + qh + nib.tobytes(), np.uint8)[None, :]
    assert qdot_matmul(row5, int(Q.Q5_0), 32, acts)[0, 0] == 0.25 * ((12 - 16) * 127 + 9 * 2 + (3 - 16) * -1)


def test_mxfp4_block_by_hand():
    x = np.zeros(32, np.float32)
    x[[0, 17]] = [127, 10]
    acts = quantize_acts(x[None], 32)
    nib = np.zeros(16, np.uint8)
    nib[0] = 0x07                          # element 0: kvalue[7] = 12
    nib[1] = 0xD0                          # element 17: kvalue[13] = -6
    row = np.frombuffer(bytes([130]) + nib.tobytes(), np.uint8)[None, :]   # 2^(130-128) = 4
    assert qdot_matmul(row, int(Q.MXFP4), 32, acts)[0, 0] == 4.0 * (12 * 127 + -6 * 10)


def _k_acts():
    x = np.full(256, -1.0, np.float32)     # Q8_K: max = -1, iscale = 127, q = -127, d = 1/127
    acts = quantize_acts(x[None], 256)
    assert (acts.q == -127).all() and acts.d[0, 0] == np.float32(1 / np.float32(127))
    assert (acts.bsum == -127 * 32).all()
    return acts


def test_q4_k_and_q5_k_superblocks_by_hand():
    acts = _k_acts()
    dx = float(acts.d[0, 0])
    sc, m = 3, 5                           # every sub-block: 6-bit scale 3, min 5
    scales = bytes([sc] * 4 + [m] * 4 + [(m << 4) | sc] * 4)
    nibs = bytes([0x21] * 128)             # sub-blocks 2c: q = 1; 2c + 1: q = 2
    row4 = np.frombuffer(_h(0.5) + _h(0.25) + scales + nibs, np.uint8)[None, :]
    isum_sc = sc * (-127 * 32) * (1 + 2) * 4
    isum_m = m * (-127 * 32) * 8
    want = (0.5 * dx) * isum_sc - (0.25 * dx) * isum_m
    assert qdot_matmul(row4, int(Q.Q4_K), 256, acts)[0, 0] == np.float32(want)
    # Q5_K: high bit j of byte i is element i of sub-block j; set it for sub-block 1 only
    qh = bytes([0x02] * 32)
    row5 = np.frombuffer(_h(0.5) + _h(0.25) + scales + qh + nibs, np.uint8)[None, :]
    isum_sc5 = isum_sc + sc * 16 * (-127 * 32)
    want5 = (0.5 * dx) * isum_sc5 - (0.25 * dx) * isum_m
    assert qdot_matmul(row5, int(Q.Q5_K), 256, acts)[0, 0] == np.float32(want5)


def test_q6_k_superblock_by_hand():
    acts = _k_acts()
    dx = float(acts.d[0, 0])
    ql = bytes([0x5A] * 128)               # low nibble 10 (elements kk < 64), high nibble 5 (kk >= 64)
    qh = bytes([0b11100100] * 64)          # 2-bit fields 0, 1, 2, 3 for kk // 32 = 0..3
    sc = np.arange(1, 17, dtype=np.int8) * np.array([1, -1] * 8, np.int8)
    row = np.frombuffer(ql + qh + sc.tobytes() + _h(0.125), np.uint8)[None, :]
    want = 0
    for g in range(16):
        kk = (g & 7) * 16
        q = ((10 if kk < 64 else 5) | (((0b11100100 >> (2 * (kk >> 5))) & 3) << 4)) - 32
        want += int(sc[g]) * q * -127 * 16
    assert qdot_matmul(row, int(Q.Q6_K), 256, acts)[0, 0] == np.float32((0.125 * dx) * want)


# --- activation quantisation ---------------------------------------------------------------------

def test_round_tie_rules():
    assert [round_tie(np.float32(v), 0) for v in (2.5, 3.5, -45.5)] == [2.0, 4.0, -46.0]
    assert [round_tie(np.float32(v), 1) for v in (2.5, -45.5)] == [3.0, -45.0]
    assert [round_tie(np.float32(v), 2) for v in (2.5, -45.5)] == [2.0, -46.0]
    below = np.nextafter(np.float32(37.5), np.float32(0))               # one ulp below the half
    assert round_tie(below, 0) == 37.0 and round_tie(below, 1) == 38.0 and round_tie(below, 2) == 37.0
    two = np.nextafter(below, np.float32(0))                            # two ulps: not a near-half
    assert round_tie(two, 1) == 37.0


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([32, 256]), st.integers(1, 3), st.sampled_from([0, 1, 2]))
def test_quantized_activations_round_trip_is_actq(seed, block, n_vec, tie):
    x = (np.random.default_rng(seed).standard_normal((n_vec, 2 * block)) * 3).astype(np.float32)
    x[0, :block] = 0                                                   # an all-zero block
    acts = quantize_acts(x, block, tie)
    assert np.array_equal(acts.dequantize(), quantize_activations(x, 3 if block == 32 else 4, tie))
    if block == 256:
        assert np.array_equal(acts.bsum, acts.q.reshape(n_vec, -1, 32).astype(np.int32).sum(2))
    for v in range(n_vec):                                             # row by row
        one = quantize_acts(x[v:v + 1], block, tie)
        assert np.array_equal(one.q, acts.q[v:v + 1]) and np.array_equal(one.d, acts.d[v:v + 1])


# --- the vector block dots against their Python twins ----------------------------------------------

@njit(cache=True)
def _jit_dots(a, ai, b, word, out):
    out[0] = simd.dot_i8x32(ai, 3, b, 1)
    out[1] = simd.dot_i8x16(ai, 5, b, 7)
    out[2] = simd.dot_nib16x2(a, 2, 8, b, 0)
    out[3] = simd.dot_nib16x2(a, 9, 16, b, 4)
    out[4] = simd.dot_field32(a, 1, 4, 15, b, 2)
    out[5] = simd.dot_field32(a, 6, 5, 1, b, 3)
    out[6] = simd.dot_bits32(word, b, 5)
    out[7] = simd.dot_q6x16(a, 4, 4, 20, 6, b, 9)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_vector_block_dots_equal_their_python_twins(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, 64, dtype=np.uint8)
    b = rng.integers(-128, 128, 64).astype(np.int8)
    word = np.uint32(rng.integers(0, 2**32))
    got = np.zeros(8, np.int64)
    _jit_dots(a, a.view(np.int8), b, word, got)
    ai = a.view(np.int8)
    want = [simd.dot_i8x32(ai, 3, b, 1), simd.dot_i8x16(ai, 5, b, 7), simd.dot_nib16x2(a, 2, 8, b, 0),
            simd.dot_nib16x2(a, 9, 16, b, 4), simd.dot_field32(a, 1, 4, 15, b, 2), simd.dot_field32(a, 6, 5, 1, b, 3),
            simd.dot_bits32(word, b, 5), simd.dot_q6x16(a, 4, 4, 20, 6, b, 9)]
    assert got.tolist() == want
    # and the twins by their definitions
    assert want[0] == int((ai[3:35].astype(int) * b[1:33]).sum())
    assert want[2] == int((np.concatenate([(a[2:18] & 15), a[2:18] >> 4]).astype(int) - 8) @ b[0:32].astype(int))


# --- properties per weight type ------------------------------------------------------------------

@st.composite
def products(draw):
    """(qtype, raw rows, n_cols, activations (n_vec, n_cols) float32)."""
    qtype = draw(st.sampled_from(QDOT_TYPES))
    raw, n_cols = draw(quantized_weight_rows(qtype))
    n_vec = draw(st.integers(1, 3))
    x = (np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal((n_vec, n_cols)) * 2).astype(np.float32)
    return qtype, raw, n_cols, x


@settings(max_examples=60, deadline=None)
@given(products(), st.sampled_from([0, 1, 2]))
def test_product_is_the_float64_product_of_the_round_trips(prod, tie):
    qtype, raw, n_cols, x = prod
    acts = quantize_acts(x, act_block(qtype), tie)
    got = qdot_matmul(raw, qtype, n_cols, acts)
    w = dequantize(raw, Q(qtype)).reshape(raw.shape[0], n_cols).astype(np.float64)
    want = quantize_activations(x, act_kind(qtype), tie).astype(np.float64) @ w.T
    # the same real number up to float64 rounding and gguf-py's float32 dequantisation roundings
    scale = np.abs(quantize_activations(x, act_kind(qtype), tie)).astype(np.float64) @ np.abs(w).T
    assert (np.abs(got - want) <= 2e-7 * scale + 1e-30).all()


@settings(max_examples=60, deadline=None)
@given(products())
def test_batch_and_thread_invariance(prod):
    qtype, raw, n_cols, x = prod
    acts = quantize_acts(x, act_block(qtype))
    out = np.empty((x.shape[0], raw.shape[0]), np.float32)
    qdot_kernel(qtype, raw, raw.view(np.int8), n_cols, acts.q, acts.d, acts.bsum, F16_TO_F32, out)
    par = np.empty_like(out)
    qdot_kernel_parallel(qtype, raw, raw.view(np.int8), n_cols, acts.q, acts.d, acts.bsum, F16_TO_F32, par)
    assert np.array_equal(out, par)
    for v in range(x.shape[0]):
        assert np.array_equal(qdot_matmul(raw, qtype, n_cols, quantize_acts(x[v:v + 1], act_block(qtype))), out[v:v + 1])
    # expert pairs: every (expert, vector) pair as its own product
    raw3 = np.stack([raw, raw[::-1].copy()])
    ids = np.arange(x.shape[0]) % 2
    pairs = qdot_pairs(raw3, qtype, n_cols, ids, acts)
    for i, e in enumerate(ids):
        one = qdot_matmul(raw3[e], qtype, n_cols, quantize_acts(x[i:i + 1], act_block(qtype)))
        assert np.array_equal(pairs[i:i + 1], one)


def test_thread_count_does_not_change_bits():
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, (300, 8 * 18), dtype=np.uint8)
    raw.reshape(300, 8, 18)[:, :, :2] = np.frombuffer(_h(0.01), np.uint8)
    acts = quantize_acts(rng.standard_normal((2, 256)).astype(np.float32), 32)
    runs = []
    n0 = numba.get_num_threads()
    try:
        for n in range(1, n0 + 1):
            numba.set_num_threads(n)
            out = np.empty((2, 300), np.float32)
            qdot_kernel_parallel(int(Q.Q4_0), raw, raw.view(np.int8), 256, acts.q, acts.d, acts.bsum, F16_TO_F32, out)
            runs.append(out)
    finally:
        numba.set_num_threads(n0)
    assert all(np.array_equal(runs[0], r) for r in runs)


def test_bad_inputs_raise_config_errors():
    acts = quantize_acts(np.ones((1, 32), np.float32), 32)
    with pytest.raises(ConfigError, match="no integer product"):
        qdot_matmul(np.zeros((2, 128), np.uint8), int(Q.F32), 32, acts)
    with pytest.raises(ConfigError, match="need 2-D uint8 with last axis 18"):
        qdot_matmul(np.zeros((2, 20), np.uint8), int(Q.Q4_0), 32, acts)
    with pytest.raises(ConfigError, match="in blocks of 256"):
        qdot_matmul(np.zeros((2, 144), np.uint8), int(Q.Q4_K), 256, acts)
    with pytest.raises(ConfigError, match="blocks of 32"):
        quantize_acts(np.ones((1, 40), np.float32), 32)
    with pytest.raises(ConfigError, match="expert ids"):
        qdot_pairs(np.zeros((2, 3, 18), np.uint8), int(Q.Q4_0), 32, [2], acts)


def test_block_table_agrees_with_gguf():
    # the (elements, bytes) per block the dispatch checks rows against (the registry's) are gguf's: a row of
    # two blocks of gguf's size is accepted, one byte more or less is not
    from gguf import GGML_QUANT_SIZES
    for t in QDOT_TYPES:
        block, size = GGML_QUANT_SIZES[Q(t)]
        acts = quantize_acts(np.zeros((1, 2 * block), np.float32), act_block(t))
        assert qdot_matmul(np.zeros((3, 2 * size), np.uint8), t, 2 * block, acts).shape == (1, 3)
        for bad in (2 * size - 1, 2 * size + 1):
            with pytest.raises(ConfigError, match=f"last axis {2 * size}"):
                qdot_matmul(np.zeros((3, bad), np.uint8), t, 2 * block, acts)


def test_unsigned_nibble_dot_same_on_the_avx2_and_generic_paths(monkeypatch):
    rng = np.random.default_rng(11)
    a = rng.integers(0, 256, 40, dtype=np.uint8)
    b = rng.integers(-128, 128, 40).astype(np.int8)
    want = simd.dot_nibu16x2(a, 3, b, 5)
    q = a[3:19].astype(int)
    assert want == int(np.concatenate([q & 15, q >> 4]) @ b[5:37].astype(int))
    for flag in sorted({False, simd.AVX2}):
        monkeypatch.setattr(simd, "AVX2", flag)           # read when the intrinsic is compiled
        f = njit(lambda a, b: simd.dot_nibu16x2(a, 3, b, 5))
        assert f(a, b) == want, f"AVX2={flag}"


def test_f16_round_and_quantize_acts_into_match_numpy():
    # the in-Numba half rounding used by the fused decode paths: every 4099th float32 bit pattern, and every
    # float32 around the half normal/subnormal and overflow boundaries (an exhaustive run over ~1e9 values agreed)
    from numba import njit

    from refsim.kernels.qdot import f16_round, quantize_acts_into

    @njit
    def apply(x, out):
        for i in range(x.shape[0]):
            out[i] = f16_round(x[i])

    bits = [np.arange(0, 1 << 32, 4099, dtype=np.uint64).astype(np.uint32)]
    for edge in (2.0 ** -25, 2.0 ** -24, 2.0 ** -14, 65504.0, 65520.0):
        c = int(np.float32(edge).view(np.uint32))
        bits.append(np.arange(c - 3000, c + 3000, dtype=np.uint32))
    x = np.concatenate(bits).view(np.float32)
    out = np.empty_like(x)
    apply(x, out)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = x.astype(np.float16).astype(np.float32)
    assert np.array_equal(out.view(np.uint32)[~np.isnan(ref)], ref.view(np.uint32)[~np.isnan(ref)])
    assert np.isnan(out[np.isnan(ref)]).all()
    rng = np.random.default_rng(3)
    for block in (32, 256):
        for tie in (0, 1, 2):
            xs = (rng.standard_normal((5, 512)) * rng.choice([1e-6, 1.0, 1e3], (5, 1))).astype(np.float32)
            xs[2] = 0
            a = quantize_acts(xs, block, tie)
            q, d, bs = np.empty_like(a.q), np.empty_like(a.d), np.empty_like(a.bsum)
            quantize_acts_into(xs, block, tie, q, d, bs)
            assert np.array_equal(q, a.q) and np.array_equal(d.view(np.uint32), a.d.view(np.uint32))
            assert np.array_equal(bs, a.bsum)


def _rows4_case(kind: str, n_rows: int, n_cols: int, seed: int):
    """Rows of ``kind`` ('q4_0' | 'q8_0') with random bytes (int8 -128 included), finite half scales
    (subnormal, zero and negative included), and one Q8_0 activation with a 127 in every block."""
    rng = np.random.default_rng(seed)
    bsize = rows4._ROWS4[kind]
    raw = rng.integers(0, 256, (n_rows, n_cols // 32 * bsize), dtype=np.uint8)
    halves = np.array([0.5, -0.25, 6.1e-5, 3e-7, 0.0, -1.5e3, 0.0137], np.float16)
    for b in range(n_cols // 32):
        raw[:, b * bsize:b * bsize + 2] = rng.choice(halves, n_rows).view(np.uint8).reshape(n_rows, 2)
    x = rng.normal(size=(1, n_cols)).astype(np.float32)
    x[0, ::32] = 40.0                                     # the block maximum: q = 127
    return raw, quantize_acts(x, 32)


@pytest.mark.parametrize("kind", ["q4_0", "q8_0"])
def test_four_row_dots_equal_the_one_row_functions(kind, monkeypatch):
    # rows4.q4_0_rows4 / q8_0_rows4 (four rows per pass, used by qdot for Q4_0/Q8_0 rows) give every row
    # the same float64 sum, bit for bit, as the one-row functions: checked against the plain-Python twin,
    # against qdot on one-row matrices (the one-row path), on the AVX2 and generic paths, with and without F16C
    qtype = int(Q.Q4_0) if kind == "q4_0" else int(Q.Q8_0)
    raw, acts = _rows4_case(kind, 8, 96, seed=5)
    py = rows4.q4_0_rows4 if kind == "q4_0" else rows4.q8_0_rows4
    want = np.array(py(raw, 4, 3, acts.q[0], acts.d[0], acts.bsum[0], F16_TO_F32))
    one_row = np.array([qdot_matmul(raw[r:r + 1], qtype, 96, acts)[0, 0] for r in range(4, 8)])
    assert np.array_equal(want.astype(np.float32), one_row)
    for avx2 in sorted({False, simd.AVX2}):
        for f16c in sorted({False, simd.F16C and avx2}):
            monkeypatch.setattr(simd, "AVX2", avx2)       # read when the intrinsics are compiled
            monkeypatch.setattr(simd, "F16C", f16c)
            f = njit(lambda a, q, d, s, t: py(a, 4, 3, q, d, s, t))
            got = np.array(f(raw, acts.q[0], acts.d[0], acts.bsum[0], F16_TO_F32))
            assert np.array_equal(got.view(np.uint64), want.view(np.uint64)), f"AVX2={avx2} F16C={f16c}"
    # and in qdot: 11 rows = two passes of four (the first prefetching the second) plus three single rows
    raw, acts = _rows4_case(kind, 11, 2048, seed=6)
    full = qdot_matmul(raw, qtype, 2048, acts)
    single = np.concatenate([qdot_matmul(raw[r:r + 1], qtype, 2048, acts) for r in range(11)], axis=1)
    assert np.array_equal(full.view(np.uint32), single.view(np.uint32))


def test_four_row_q4_0_dot_by_hand():
    # rows r = 0..3: d = 2^-r, every nibble r + 8 (q = r); activation: 127 at element 0, 1 at element 16
    # (block max 127 -> d_x = 1); row r's dot is 2^-r * r * (127 + 1)
    rows = [np.frombuffer(_h(2.0 ** -r) + bytes([(r + 8) * 17] * 16), np.uint8) for r in range(4)]
    raw = np.stack(rows)
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 16] = 127, 1
    acts = quantize_acts(x, 32)
    want = [2.0 ** -r * r * 128 for r in range(4)]
    assert list(rows4.q4_0_rows4(raw, 0, 1, acts.q[0], acts.d[0], acts.bsum[0], F16_TO_F32)) == want
    assert qdot_matmul(raw, int(Q.Q4_0), 32, acts)[0].tolist() == want
