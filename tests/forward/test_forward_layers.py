"""Hand-worked cases for every readable block of refsim.forward.layers (and the router of
refsim.forward.routing) and the activation round trips; the fused kernels are in test_fused.py."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize

from refsim.errors import ConfigError
from refsim.forward.actq import ACT_BF16, ACT_F16, ACT_NONE, ACT_Q8_0, ACT_Q8_K, act_kind, quantize_activations
from refsim.forward.layers import (ExpertWeights, Numerics, QWeight, attention, linear, logit_margin, moe_ffn,
                                   rms_norm, rope_neox, swiglu)
from refsim.forward.routing import route_topk
from refsim.kernels import dequantize_rows

EXACT, GGML = Numerics("exact"), Numerics("ggml")


def test_numerics_rejects_unknown_mode():
    with pytest.raises(ConfigError, match="--numerics"):
        Numerics("fast")


def test_rms_norm_hand_worked():
    # x = [3, 4]: mean(x^2) = 12.5, 1/sqrt(12.5) = 0.28284271; weight [1, 2]
    y = rms_norm(np.array([[3.0, 4.0]], np.float32), np.array([1.0, 2.0], np.float32), 0.0)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, np.float32([[3 * np.float32(1 / np.sqrt(12.5)), 8 * np.float32(1 / np.sqrt(12.5))]]))
    # per-head use: [n_pos, n_head, head_dim] keeps its shape; each head normalised alone
    x = np.array([[[1, 1], [2, 2]]], np.float32)
    np.testing.assert_allclose(rms_norm(x, np.ones(2, np.float32), 0.0), np.ones((1, 2, 2)), rtol=1e-7)


def test_rope_neox_position_zero_is_identity_and_pairs_are_half_apart():
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 8)
    for num in (EXACT, GGML):
        np.testing.assert_array_equal(rope_neox(x, np.array([0]), 8, 10000.0, num), x)
    # n_rot = 4 of head_dim 8, position 1, base 1: every pair (i, i+2) turns by 1 radian; dims 4..7 pass
    y = rope_neox(x, np.array([1]), 4, 1.0, EXACT)[0, 0]
    c, s = np.float32(np.cos(1.0)), np.float32(np.sin(1.0))
    np.testing.assert_allclose(y[:4], [0 * c - 2 * s, 1 * c - 3 * s, 0 * s + 2 * c, 1 * s + 3 * c], rtol=1e-6)
    np.testing.assert_array_equal(y[4:], x[0, 0, 4:])
    # base 10000, n_rot 4: pair 1 turns by pos * 10000^(-2/4) = pos / 100
    z = rope_neox(np.float32([[[0, 1, 0, 0]]]), np.array([50]), 4, 10000.0, EXACT)[0, 0]
    np.testing.assert_allclose(z, [0, np.cos(0.5), 0, np.sin(0.5)], atol=1e-7)
    with pytest.raises(ConfigError, match="n_rot"):
        rope_neox(x, np.array([0]), 3, 1.0, EXACT)


def test_rope_ggml_angles_are_float32_products():
    # ggml: theta_1 = (float)pos * powf(base, -2/n_rot); at pos 7, base 10000, n_rot 4
    x = np.float32([[[0, 1, 0, 0]]])
    z = rope_neox(x, np.array([7]), 4, 10000.0, GGML)[0, 0]
    th = np.float32(7) * np.float32(np.power(np.float32(10000), np.float32(-0.5)))
    np.testing.assert_array_equal(z[[1, 3]], [np.float32(np.cos(th)), np.float32(np.sin(th))])


def _libm_powf():
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("m")
    if not name:
        return None
    f = ctypes.CDLL(name).powf
    f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float, ctypes.c_float]
    return f


def test_rope_tables_take_the_c_librarys_pow_not_numpys_vector_power():
    import math

    from refsim.forward.layers import _rope_tables
    # hand-worked: 10000^(-2/64) = exp(-ln(10000) / 32) = 0.749894209332...; its float32 neighbours are
    # 0.749894201755... (7.6e-9 away, the nearest) and 0.749894261360... (5.2e-8 away, what NumPy's AVX-512
    # power gave on 2026-12-03, moving the trained tiny model's 17th greedy step off llama.cpp's by 6.4e-3)
    ts, inv = _rope_tables(64, 10000.0)
    assert np.float32(ts).view(np.uint32) == np.float32(0.749894201755523681640625).view(np.uint32)
    assert inv.dtype == np.float64 and inv.tolist() == [math.pow(10000.0, -2.0 * i / 64) for i in range(32)]
    assert inv[16] == 0.01                                       # 10000^(-1/2), exact


@settings(max_examples=200, deadline=None)
@given(st.floats(1.0, 1e8, width=32), st.sampled_from([2, 4, 32, 64, 80, 96, 128, 256]))
def test_rope_theta_scale_is_powf(base, n_rot):
    """ggml's theta_scale is the C library's ``powf(freq_base, -2.0f / n_dims)`` (ggml-cpu ops.cpp), bit for bit."""
    from refsim.forward.layers import _rope_tables
    powf = _libm_powf()
    if powf is None:
        pytest.skip("no C math library found by ctypes")
    want = np.float32(powf(np.float32(base), np.float32(-2.0) / np.float32(n_rot)))
    assert np.float32(_rope_tables(n_rot, float(base))[0]).view(np.uint32) == want.view(np.uint32)


def test_route_topk_softmax_topk_renormalise():
    # logits log(1), log(2), log(3), log(4): probs 0.1 0.2 0.3 0.4; top-2 = 3, 2; weights 4/7, 3/7
    ids, w, m = route_topk(np.log(np.float32([[1, 2, 3, 4]])).astype(np.float32), 2)
    assert ids.dtype == np.int16 and ids.tolist() == [[3, 2]]
    np.testing.assert_allclose(w, [[4 / 7, 3 / 7]], rtol=1e-6)
    np.testing.assert_allclose(m, [0.3 - 0.2], rtol=1e-5)   # k-th chosen minus best unchosen
    # exact tie: the lower id wins
    ids, w, _ = route_topk(np.zeros((1, 4), np.float32), 2)
    assert ids.tolist() == [[0, 1]] and w.tolist() == [[0.5, 0.5]]
    # k = n_expert: weights are the softmax itself; no other set exists, margin inf
    ids, w, m = route_topk(np.float32([[0.0, 0.0]]), 2)
    assert m.tolist() == [np.inf] and w.tolist() == [[0.5, 0.5]]
    with pytest.raises(ConfigError, match="k=3"):
        route_topk(np.zeros((1, 2), np.float32), 3)


def test_route_weight_sum_is_clamped():
    # two tiny probabilities: sum below 6.1035e-5 -> divided by the floor, not renormalised to 1
    logits = np.float32([[0.0, -20.0, -20.0]])
    ids, w, _ = route_topk(logits, 3)
    assert ids.tolist() == [[0, 1, 2]]
    np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-6)
    ids, w, _ = route_topk(np.float32([[30.0, 0.0, 0.0, 0.0]]), 1)
    assert w.tolist() == [[1.0]]


def test_attention_hand_worked():
    # one key: output = its value; two keys with equal scores: the mean of the values
    q = np.zeros((1, 2, 4), np.float32)
    k = np.zeros((2, 1, 4), np.float32)
    v = np.float32([[[1, 2, 3, 4]], [[3, 4, 5, 6]]])
    out0 = attention(q, k, v, np.array([0]))
    np.testing.assert_array_equal(out0, [[[1, 2, 3, 4], [1, 2, 3, 4]]])       # GQA: both heads read kv head 0
    out1 = attention(q, k, v, np.array([1]))
    np.testing.assert_array_equal(out1, [[[2, 3, 4, 5], [2, 3, 4, 5]]])
    # scores 0 and 2*... : q=[2,0,0,0], k1=[1,0,0,0]: s1 = 2/sqrt(4) = 1 -> p = [1/(1+e), e/(1+e)]
    q2 = np.float32([[[2, 0, 0, 0]]])
    k2 = np.float32([[[0, 0, 0, 0]], [[1, 0, 0, 0]]])
    out = attention(q2, k2, v, np.array([1]))
    p1 = np.e / (1 + np.e)
    np.testing.assert_allclose(out[0, 0], (1 - p1) * v[0, 0] + p1 * v[1, 0], rtol=1e-6)
    with pytest.raises(ConfigError, match="not in the KV cache"):
        attention(q2, k2, v, np.array([2]))


def test_swiglu_hand_worked():
    g = np.float32([[0.0, 1.0, -1.0]])
    u = np.float32([[5.0, 2.0, 2.0]])
    np.testing.assert_allclose(swiglu(g, u), [[0.0, 2 / (1 + np.exp(-1)), -2 / (1 + np.exp(1))]], rtol=1e-6)


def test_logit_margin():
    np.testing.assert_allclose(logit_margin(np.float32([[1, 5, 3], [2, 2, 0]])), [2, 0])


def test_q8_0_round_trip_hand_worked():
    # amax 127 -> d = 1 (exact in f16), id = 1: values round half to even (2.5 -> 2, 3.5 -> 4, -0.5 -> -0)
    x = np.zeros((1, 32), np.float32)
    x[0, :5] = [127.0, 2.5, 3.5, -0.5, 1.49]
    y = quantize_activations(x, ACT_Q8_0)
    assert y[0, :5].tolist() == [127.0, 2.0, 4.0, 0.0, 1.0]
    # d is stored as f16: amax 1 -> d = 1/127 -> f16(1/127) = 0.007873535...
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 1] = 1.0, 0.5
    y = quantize_activations(x, ACT_Q8_0)
    dh = np.float32(np.float16(np.float32(1) / np.float32(127)))
    assert y[0, 0] == dh * 127 and y[0, 1] == dh * 64  # 63.5 -> 64 (half to even)
    assert quantize_activations(np.zeros((2, 32), np.float32), ACT_Q8_0).tolist() == np.zeros((2, 32)).tolist()


def test_q8_0_agrees_with_gguf_reference_on_random_rows():
    # away from exact halves, ggml's AVX2 rule and gguf-py's reference quantizer agree
    x = np.random.default_rng(3).standard_normal((4, 256)).astype(np.float32)
    ref = dequantize_rows(quantize(x, Q.Q8_0), Q.Q8_0, 256)
    np.testing.assert_array_equal(quantize_activations(x, ACT_Q8_0), ref)


def test_q8_k_round_trip_hand_worked():
    # max is the signed element of largest |x|: -2 -> iscale = 63.5, d = 1/63.5; 1 -> 63.5 -> 64 (even)
    x = np.zeros((1, 256), np.float32)
    x[0, :3] = [-2.0, 1.0, 0.5]
    y = quantize_activations(x, ACT_Q8_K)
    d = np.float32(1) / np.float32(63.5)
    # iscale * -2 = -127, iscale * 1 = 63.5 -> 64 (half to even), iscale * 0.5 = 31.75 -> 32
    assert y[0, :3].tolist() == [np.float32(d * -127), np.float32(d * 64), np.float32(d * 32)]
    assert y[0, 0] == -2.0
    # positive max: q = -127 * x / max would be -127 -> clamp only matters for +128
    x[0, :3] = [2.0, -1.0, 0.0]
    y = quantize_activations(x, ACT_Q8_K)
    d = np.float32(1) / np.float32(-63.5)
    assert y[0, :2].tolist() == [np.float32(d * -127), np.float32(d * 64)]
    assert not quantize_activations(np.zeros((1, 256), np.float32), ACT_Q8_K).any()


def test_float_activation_round_trips():
    x = np.float32([[1 + 2 ** -12, 1 + 2 ** -9, -3.0, 1 + 3 * 2 ** -9]])
    assert quantize_activations(x, ACT_F16).tolist() == [[1.0, 1 + 2 ** -9, -3.0, 1 + 3 * 2 ** -9]]
    # bf16 keeps 8 mantissa bits, half to even: 1+2^-8 -> 1, 1+3*2^-8 -> 1+2^-6
    xb = np.float32([[1 + 2 ** -8, 1 + 3 * 2 ** -8, 2.0, -1.5]])
    assert quantize_activations(xb, ACT_BF16).tolist() == [[1.0, 1 + 2 ** -6, 2.0, -1.5]]
    assert quantize_activations(x, ACT_NONE) is not None


def test_act_kind_table():
    assert act_kind(Q.F32) == ACT_NONE and act_kind(Q.F16) == ACT_F16 and act_kind(Q.BF16) == ACT_BF16
    assert {act_kind(t) for t in (Q.Q4_0, Q.Q5_0, Q.Q8_0, Q.MXFP4)} == {ACT_Q8_0}
    assert {act_kind(t) for t in (Q.Q4_K, Q.Q5_K, Q.Q6_K)} == {ACT_Q8_K}


def _qweight(w: np.ndarray, qtype) -> QWeight:
    return QWeight(np.ascontiguousarray(quantize(w, qtype) if qtype != Q.F32 else w.view(np.uint8)), int(qtype), w.shape[1])


@pytest.mark.parametrize("qtype", [Q.F32, Q.Q8_0, Q.Q4_0])
def test_linear_equals_float64_product_of_dequantized_rows(qtype):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 64)).astype(np.float32)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    qw = _qweight(w, qtype)
    wd = dequantize_rows(qw.raw, qtype, 64).astype(np.float64)
    np.testing.assert_allclose(linear(qw, x, EXACT), (x.astype(np.float64) @ wd.T), rtol=1e-6, atol=1e-6)
    # ggml mode = the same product on Q8_0 round-tripped activations (F32 weights: unchanged)
    xg = quantize_activations(x, act_kind(qtype)).astype(np.float64)
    np.testing.assert_allclose(linear(qw, x, GGML), (xg @ wd.T), rtol=1e-6, atol=1e-6)
    assert qw.rows(np.array([2, 0])).tolist() == dequantize_rows(qw.raw, qtype, 64)[[2, 0]].tolist()


def test_qweight_rejects_wrong_row_bytes():
    with pytest.raises(ConfigError, match="do not hold"):
        QWeight(np.zeros((2, 10), np.uint8), int(Q.Q8_0), 32)


def test_moe_ffn_hand_worked_identity_experts():
    # n_embd = n_ff = 32, F32. Expert e: gate = I*a_e, up = I, down = I -> y = silu(a_e x) * x
    n = 32
    eye = np.eye(n, dtype=np.float32)
    a = [1.0, 2.0, 3.0]
    gate = np.stack([eye * s for s in a]).view(np.uint8).reshape(3, n, n * 4)
    up = np.stack([eye] * 3).view(np.uint8).reshape(3, n, n * 4)
    ex = ExpertWeights(gate, up, up.copy(), 0, 0, 0, n, n)
    x = np.full((2, n), 0.5, np.float32)
    ids = np.array([[2, 0], [1, 2]], np.int16)
    w = np.float32([[0.75, 0.25], [0.5, 0.5]])
    out = moe_ffn(x, ids, w, ex, EXACT)
    silu = lambda z: z / (1 + np.exp(-z))  # noqa: E731
    np.testing.assert_allclose(out[0], 0.75 * silu(1.5) * 0.5 + 0.25 * silu(0.5) * 0.5, rtol=1e-6)
    np.testing.assert_allclose(out[1], 0.5 * silu(1.0) * 0.5 + 0.5 * silu(1.5) * 0.5, rtol=1e-6)
    # rows=False positions are skipped (zeros), the rest unchanged
    out2 = moe_ffn(x, ids, w, ex, EXACT, rows=np.array([False, True]))
    assert not out2[0].any() and out2[1].tolist() == out[1].tolist()


def test_fused_q4_0_single_vector_path_is_bit_identical_to_the_generic_path():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((24, 96)).astype(np.float32)
    qw = _qweight(w, Q.Q4_0)
    x = rng.standard_normal((2, 96)).astype(np.float32)
    both = linear(qw, x, EXACT)                      # n_vec = 2: decode rows, then dot8
    one = np.concatenate([linear(qw, x[i:i + 1], EXACT) for i in range(2)])  # fused
    assert np.array_equal(both, one)


def test_activation_tie_rules():
    # 2.5 and -45.5 are exact halves after scaling (amax 127 -> id 1): even / up / down
    x = np.zeros((1, 32), np.float32)
    x[0, :3] = [127.0, 2.5, -45.5]
    assert quantize_activations(x, ACT_Q8_0, 0)[0, 1:3].tolist() == [2.0, -46.0]
    assert quantize_activations(x, ACT_Q8_0, 1)[0, 1:3].tolist() == [3.0, -45.0]
    assert quantize_activations(x, ACT_Q8_0, 2)[0, 1:3].tolist() == [2.0, -46.0]
    with pytest.raises(ConfigError, match="act_tie"):
        Numerics("ggml", "odd")


@pytest.mark.parametrize("qtype", [Q.F32, Q.Q8_0, Q.Q4_0])
def test_expert_linear_equals_one_linear_per_pair(qtype):
    from refsim.forward.layers import expert_linear
    rng = np.random.default_rng(9)
    w = rng.standard_normal((3, 40, 64)).astype(np.float32)
    raw3 = np.stack([_qweight(w[e], qtype).raw for e in range(3)])
    ids = np.array([2, 0, 2])
    x = rng.standard_normal((3, 64)).astype(np.float32)
    for num in (EXACT, GGML):
        got = expert_linear(raw3, int(qtype), 64, ids, x, num)
        want = np.concatenate([linear(QWeight(raw3[e], int(qtype), 64), x[i:i + 1], num) for i, e in enumerate(ids)])
        assert np.array_equal(got, want)


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q5_0, Q.MXFP4, Q.Q4_K, Q.Q5_K, Q.Q6_K],
                         ids=lambda t: t.name)
def test_exact_linear_is_the_scalar_dot8_of_the_decoded_rows(qtype):
    # the 8-lane vector accumulation (refsim/kernels/simd.py acc8_*) is bit-identical to the scalar
    # reference _dot8 (element c into partial sum c % 8) for every type, 1 and 3 vectors
    from refsim.forward.layers import _dot8
    from refsim.kernels import KERNELS
    k = KERNELS[qtype]
    n = 512
    rng = np.random.default_rng(int(qtype))
    if qtype in (Q.F32, Q.F16, Q.BF16):
        w = rng.standard_normal((7, n)).astype(np.float32)
        raw = w.view(np.uint8) if qtype == Q.F32 else (w.astype(np.float16).view(np.uint8) if qtype == Q.F16
                                                          else (w.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8))
    else:
        from refsim.testing.strategies import QUANT_SCALE_FIELDS
        raw = rng.integers(0, 256, (7, k.row_bytes(n)), dtype=np.uint8)
        size, offs = QUANT_SCALE_FIELDS[int(qtype)]   # finite scales at each block's scale offsets
        blocks = raw.reshape(7, -1, size)
        for o in offs:
            blocks[:, :, o:o + 2] = np.array([0.01], np.float16).view(np.uint8)
        if qtype == Q.MXFP4:
            blocks[:, :, 0] = 125
    raw = np.ascontiguousarray(raw)
    qw = QWeight(raw, int(qtype), n)
    x = rng.standard_normal((3, n)).astype(np.float32)
    wd = dequantize_rows(raw, qtype, n)
    want = np.array([[np.float32(_dot8(wd[r], x[v])) for r in range(7)] for v in range(3)], dtype=np.float32)
    assert np.array_equal(linear(qw, x, EXACT), want)
    assert np.array_equal(linear(qw, x[1:2], EXACT), want[1:2])
