"""Integer block products of the further types (refsim/kernels/qdot_ext.py) against an independent
per-block reference: the integer codes come from gguf-py's own dequantisation of the block with its
scales set to 1 and 0, and the block terms are formed with the documented float64 rule in Python."""

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q
from gguf.quants import dequantize
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.errors import ConfigError
from refsim.kernels import KERNELS, ggml_matmul
from refsim.kernels.ggml_matmul import EXT_TYPES, QDOT_ALL, act_block, qdot_matmul, qdot_pairs
from refsim.kernels.qdot import QActs, quantize_acts
from refsim.kernels.registry import F16_TO_F32
from refsim.testing.strategies import QUANT_SCALE_FIELDS, quantized_weight_rows

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

EXT = list(EXT_TYPES)


def _h(v) -> bytes:
    return np.float16(v).tobytes()


def test_tables_agree_with_gguf_and_qdot():
    # the block table of these types is the registry's (one CHUNK: the dispatch's)
    for t in EXT:
        assert GGML_QUANT_SIZES[Q(t)] == (KERNELS[Q(t)].block_size, KERNELS[Q(t)].type_size)
    # every registered quantized type has an integer product
    assert {int(t) for t in KERNELS} - set(QDOT_ALL) == {int(Q.F32), int(Q.F16), int(Q.BF16), int(Q.IQ1_M)}


def _with_scales(raw, qtype, values):
    """Copy of ``raw`` with the block's f16 fields (QUANT_SCALE_FIELDS order) set to ``values``."""
    size, fields = QUANT_SCALE_FIELDS[int(qtype)]
    out = raw.copy()
    blocks = out.reshape(raw.shape[0], -1, size)
    for o, v in zip(fields, values):
        blocks[:, :, o:o + 2] = np.frombuffer(_h(v), np.uint8)
    return out


def _fields(raw, qtype):
    """(n_rows, n_blocks) float64 arrays of each f16 field."""
    size, fields = QUANT_SCALE_FIELDS[int(qtype)]
    blocks = raw.reshape(raw.shape[0], -1, size)
    return [blocks[:, :, o:o + 2].copy().view(np.float16)[..., 0].astype(np.float64) for o in fields]


def reference(raw, qtype, n_cols, acts):
    """The module table's float64 rule, block by block, from gguf-py's codes (see the module docstring)."""
    qtype = Q(qtype)
    n_rows = raw.shape[0]
    block = KERNELS[qtype].block_size
    f = _fields(raw, qtype)
    # the IQ2/IQ3 values at d = 1 are (2 s + 1) grid / 8 (IQ2), / 4 (IQ3_XXS), / 1 (IQ3_S): integers once scaled
    unit = {Q.IQ2_XXS: 8, Q.IQ2_XS: 8, Q.IQ2_S: 8, Q.IQ3_XXS: 4, Q.IQ1_S: 8}.get(qtype, 1)
    codes = dequantize(_with_scales(raw, qtype, (1.0, 0.0)), qtype).reshape(n_rows, -1, block).astype(np.float64) * unit
    assert (codes == np.rint(codes)).all()
    codes = codes.astype(np.int64)
    mins = None
    if qtype == Q.Q2_K:                                    # value = d * code - dmin * min
        mins = -dequantize(_with_scales(raw, qtype, (0.0, 1.0)), qtype).reshape(n_rows, -1, block).astype(np.int64)
    out = np.empty((acts.q.shape[0], n_rows), np.float32)
    for v in range(acts.q.shape[0]):
        xq = acts.q[v].astype(np.int64).reshape(-1, block)
        for r in range(n_rows):
            s = 0.0
            for b in range(n_cols // block):
                dd = float(f[0][r, b]) * float(acts.d[v, b])
                term = dd * float(int(codes[r, b] @ xq[b]))
                if qtype in (Q.Q4_1, Q.Q5_1):
                    term = term + float(f[1][r, b]) * float(acts.s[v, b])
                if mins is not None:
                    term = term - (float(f[1][r, b]) * float(acts.d[v, b])) * float(int(mins[r, b] @ xq[b]))
                s += term
            out[v, r] = np.float32(s / unit)
    return out


@st.composite
def products(draw):
    qtype = draw(st.sampled_from(EXT))
    raw, n_cols = draw(quantized_weight_rows(qtype))
    n_vec = draw(st.integers(1, 3))
    x = (np.random.default_rng(draw(st.integers(0, 2**32 - 1))).standard_normal((n_vec, n_cols)) * 2).astype(np.float32)
    if draw(st.booleans()):
        x[0, :act_block(qtype)] = 0                       # an all-zero activation block
    return qtype, raw, n_cols, x


@settings(max_examples=80, deadline=None)
@given(products(), st.sampled_from([0, 1, 2]))
def test_product_equals_the_per_block_reference(prod, tie):
    qtype, raw, n_cols, x = prod
    acts = quantize_acts(x, act_block(qtype), tie)
    got = qdot_matmul(raw, qtype, n_cols, acts)
    assert got.tobytes() == reference(raw, qtype, n_cols, acts).tobytes()


@settings(max_examples=40, deadline=None)
@given(products())
def test_batch_thread_and_pair_invariance(prod):
    qtype, raw, n_cols, x = prod
    acts = quantize_acts(x, act_block(qtype))
    s = acts.s if acts.s is not None else np.zeros((x.shape[0], 1), np.float32)
    one = np.empty((x.shape[0], raw.shape[0]), np.float32)
    par = np.empty_like(one)
    ggml_matmul.ext_kernel(qtype, raw, n_cols, acts.q, acts.d, s, F16_TO_F32, one)
    ggml_matmul.ext_kernel_parallel(qtype, raw, n_cols, acts.q, acts.d, s, F16_TO_F32, par)
    assert np.array_equal(one, par)
    for v in range(x.shape[0]):
        alone = qdot_matmul(raw, qtype, n_cols, quantize_acts(x[v:v + 1], act_block(qtype)))
        assert np.array_equal(alone, one[v:v + 1])
    raw3 = np.stack([raw, raw[::-1].copy()])
    ids = np.arange(x.shape[0]) % 2
    pairs = qdot_pairs(raw3, qtype, n_cols, ids, acts)
    for i, e in enumerate(ids):
        alone = qdot_matmul(raw3[e], qtype, n_cols, quantize_acts(x[i:i + 1], act_block(qtype)))
        assert np.array_equal(pairs[i], alone[0])


def test_q8_1_block_sum_rule():
    # s = f16(float32(amax / 127) * sum q): amax 3 -> d32 = 3/127; q = round(x * 127/3)
    x = np.zeros((1, 32), np.float32)
    x[0, :3] = [3.0, 1.0, -0.5]
    acts = quantize_acts(x, 32)
    assert acts.q[0, :3].tolist() == [127, 42, -21]                  # 42.33 -> 42, -21.17 -> -21
    d32 = np.float32(np.float32(3.0) / np.float32(127.0))
    assert acts.s[0, 0] == np.float32(np.float16(np.float32(d32 * np.float32(148))))
    assert acts.d[0, 0] == np.float32(np.float16(d32))


def test_q4_1_block_by_hand():
    # d = 0.5, m = -2, nibbles q_j = j % 16; activation integers with amax 127 -> d_x = 1, q_x = x
    q = np.arange(32) % 16
    block = _h(0.5) + _h(-2.0) + bytes(int(q[j]) | (int(q[j + 16]) << 4) for j in range(16))
    row = np.frombuffer(block, np.uint8).reshape(1, 20)
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 5], x[0, 20] = 127, -3, 10
    acts = quantize_acts(x, 32)
    assert acts.d[0, 0] == 1 and acts.s[0, 0] == 134
    want = 0.5 * (0 * 127 + 5 * -3 + 4 * 10) + -2.0 * 134
    assert qdot_matmul(row, int(Q.Q4_1), 32, acts)[0, 0] == np.float32(want)
    # equal to the float product of the dequantized weight (here exact: the Q8_1 sum is exact)
    w = dequantize(row, Q.Q4_1).astype(np.float64)
    assert np.float32(w[0] @ x[0].astype(np.float64)) == np.float32(want)


def test_iq4_nl_block_by_hand():
    # d = 0.25, nibbles 0 and 15 -> -127 and 113
    block = _h(0.25) + bytes([0xF0] + [0x88] * 15)                  # element 0: 0 (-127), element 16: 15 (113)
    row = np.frombuffer(block, np.uint8).reshape(1, 18)
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 16], x[0, 1] = 127, -1, 2
    acts = quantize_acts(x, 32)
    want = 0.25 * (-127 * 127 + 113 * -1 + 1 * 2)                   # nibble 8 -> 1
    assert qdot_matmul(row, int(Q.IQ4_NL), 32, acts)[0, 0] == np.float32(want)


def test_q2_k_superblock_by_hand():
    # scales byte g: scale 2, min 3 everywhere; d = 1, dmin = 0.5; all quants 1 (bits 01 in every field)
    block = bytes([0x32] * 16) + bytes([0x55] * 64) + _h(1.0) + _h(0.5)
    row = np.frombuffer(block, np.uint8).reshape(1, 84)
    x = np.zeros((1, 256), np.float32)
    x[0, 0], x[0, 200] = 127, -64                                   # Q8_K: max 127 -> iscale -1, d_x = -1, q = -x
    acts = quantize_acts(x, 256)
    assert acts.d[0, 0] == -1 and acts.q[0, 0] == -127 and acts.q[0, 200] == 64
    want = 1.0 * (2 * 1 * 127 + 2 * 1 * -64) - 0.5 * (3 * 127 + 3 * -64)
    assert qdot_matmul(row, int(Q.Q2_K), 256, acts)[0, 0] == np.float32(want)
    w = dequantize(row, Q.Q2_K).astype(np.float64)
    assert w[0, 0] == 2 - 1.5 and float(w[0] @ x[0].astype(np.float64)) == want


def test_q8_1_weights_need_the_block_sums():
    acts = quantize_acts(np.ones((1, 32), np.float32), 32)
    bare = QActs(acts.q, acts.d, acts.bsum, 32)
    with pytest.raises(ConfigError, match="Q8_1 activations"):
        qdot_matmul(np.zeros((1, 20), np.uint8), int(Q.Q4_1), 32, bare)
    with pytest.raises(ConfigError, match="in blocks of 256"):
        qdot_matmul(np.zeros((1, 84), np.uint8), int(Q.Q2_K), 256, acts)
    with pytest.raises(ConfigError, match="last axis 136"):
        qdot_matmul(np.zeros((1, 84), np.uint8), int(Q.IQ4_XS), 256, quantize_acts(np.ones((1, 256), np.float32), 256))
