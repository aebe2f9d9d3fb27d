"""qwen3moe reference pass: an independent float64 NumPy check, batch invariance, KV trim, the
last-layer rule, the Target adapter and bad input."""

import numpy as np
import pytest
from gguf.quants import dequantize
from hypothesis import given, settings

from refsim.errors import ConfigError, ModelFormatError
from refsim.events import NOT_ROUTED
from refsim.forward import ARCHS, Numerics, qwen3moe
from refsim.spec.forward_target import ForwardTarget
from refsim.spec.target import Target
from refsim.testing.strategies import decode_splits

TOKENS = [1, 5, 77, 123, 42, 299, 7, 260]


def _np_reference(model, tokens):
    """Plain float64 qwen3moe written from llama-cpp-notes.md §2 (no refsim code)."""
    s = model.spec

    def W(name):
        ti = model.tensor(name)
        return dequantize(model.raw(name), ti.ggml_type).reshape(tuple(reversed(ti.shape_gguf))).astype(np.float64)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + s.rms_eps) * w

    def rope(x, pos):
        half = s.n_rot // 2
        ang = pos[:, None] * s.rope_freq_base ** (-2.0 * np.arange(half) / s.n_rot)
        c, sn = np.cos(ang)[:, None], np.sin(ang)[:, None]
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * c - b * sn, a * sn + b * c], -1)

    T, pos = len(tokens), np.arange(len(tokens), dtype=np.float64)
    h = W("token_embd.weight")[tokens]
    routes = np.zeros((T, s.n_layer, s.n_expert_used), np.int64)
    for il in range(s.n_layer):
        b = f"blk.{il}."
        a = rms(h, W(b + "attn_norm.weight"))
        q = rope(rms((a @ W(b + "attn_q.weight").T).reshape(T, s.n_head, -1), W(b + "attn_q_norm.weight")), pos)
        k = rope(rms((a @ W(b + "attn_k.weight").T).reshape(T, s.n_head_kv, -1), W(b + "attn_k_norm.weight")), pos)
        v = (a @ W(b + "attn_v.weight").T).reshape(T, s.n_head_kv, -1)
        g = s.n_head // s.n_head_kv
        o = np.zeros_like(q)
        for hh in range(s.n_head):
            sc = q[:, hh] @ k[:, hh // g].T / np.sqrt(s.head_dim_k) + np.triu(np.full((T, T), -np.inf), 1)
            p = np.exp(sc - sc.max(-1, keepdims=True))
            o[:, hh] = (p / p.sum(-1, keepdims=True)) @ v[:, hh // g]
        h = h + o.reshape(T, -1) @ W(b + "attn_output.weight").T
        f = rms(h, W(b + "ffn_norm.weight"))
        lg = f @ W(b + "ffn_gate_inp.weight").T
        pr = np.exp(lg - lg.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        top = np.argsort(-pr, -1, kind="stable")[:, :s.n_expert_used]
        routes[:, il] = top
        G, U, D = W(b + "ffn_gate_exps.weight"), W(b + "ffn_up_exps.weight"), W(b + "ffn_down_exps.weight")
        for t in range(T):
            w = pr[t, top[t]] / pr[t, top[t]].sum()
            for e, we in zip(top[t], w):
                gg, uu = G[e] @ f[t], U[e] @ f[t]
                h[t] += we * (D[e] @ (gg / (1 + np.exp(-gg)) * uu))
    return rms(h, W("output_norm.weight")) @ W("output.weight").T, routes


@pytest.mark.parametrize("quant", ["F32", "Q4_0"])
def test_exact_mode_matches_float64_reference(tiny_models, quant):
    model = tiny_models[quant]
    ref, ref_routes = _np_reference(model, TOKENS)
    w = qwen3moe.load_weights(model)
    res = qwen3moe.decode(w, qwen3moe.new_state(model.spec), TOKENS, np.arange(8))
    assert res.logits.shape == (8, 300) and res.logits.dtype == np.float32
    assert res.routes.shape == (8, 2, 2) and res.routes.dtype == np.int16
    assert res.weights.dtype == np.float32 and res.margin.shape == (8,)
    assert np.abs(res.logits - ref).max() < 1e-5 * max(1.0, np.abs(ref).max())
    assert np.array_equal(res.routes, ref_routes)
    np.testing.assert_allclose(res.weights.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(res.margin, np.diff(np.sort(res.logits, 1)[:, -2:], axis=1)[:, 0], rtol=1e-6)


@settings(max_examples=25)
@given(split=decode_splits(n_vocab=300, max_width=9))
def test_batch_invariance(tiny_models, split):
    """N positions in one call == any split into consecutive calls, bit for bit (logits, routes, weights)."""
    tokens, sizes = split
    for quant, mode in (("Q4_0", "exact"), ("Q4_0", "ggml"), ("F32", "exact")):
        w = _weights(tiny_models[quant])
        num = Numerics(mode)
        whole = qwen3moe.decode(w, qwen3moe.new_state(w.spec), tokens, np.arange(len(tokens)), num)
        st = qwen3moe.new_state(w.spec)
        parts, p0 = [], 0
        for n in sizes:
            parts.append(qwen3moe.decode(w, st, tokens[p0:p0 + n], np.arange(p0, p0 + n), num))
            p0 += n
        assert np.array_equal(np.concatenate([r.logits for r in parts]), whole.logits)
        assert np.array_equal(np.concatenate([r.routes for r in parts]), whole.routes)
        assert np.array_equal(np.concatenate([r.weights for r in parts]), whole.weights)


_W = {}


def _weights(model):
    if model.path not in _W:
        _W[model.path] = qwen3moe.load_weights(model)
    return _W[model.path]


def test_width_1_to_9_one_call_equals_single_position_calls(tiny_models):
    w = _weights(tiny_models["Q4_0"])
    toks = [3, 200, 17, 17, 17, 88, 1, 299, 42]
    for n in range(1, 10):
        whole = qwen3moe.decode(w, qwen3moe.new_state(w.spec), toks[:n], np.arange(n))
        st = qwen3moe.new_state(w.spec)
        ones = [qwen3moe.decode(w, st, [t], [i]) for i, t in enumerate(toks[:n])]
        assert np.array_equal(np.concatenate([r.logits for r in ones]), whole.logits)
        assert np.array_equal(np.concatenate([r.routes for r in ones]), whole.routes)


def test_trim_then_redecode_is_identical(tiny_models):
    w = _weights(tiny_models["Q4_0"])
    st = qwen3moe.new_state(w.spec)
    qwen3moe.decode(w, st, TOKENS[:5], np.arange(5))
    a = qwen3moe.decode(w, st, [9, 10, 11], [5, 6, 7])          # a rejected draft
    assert st.n == 8
    st.trim(6)                                                  # keep the first draft token
    b = qwen3moe.decode(w, st, [10, 250], [6, 7])
    assert np.array_equal(b.logits[0], a.logits[1])             # same prefix -> same row
    fresh = qwen3moe.decode(w, qwen3moe.new_state(w.spec), TOKENS[:5] + [9, 10, 250], np.arange(8))
    assert np.array_equal(fresh.logits[6:], b.logits)
    with pytest.raises(ConfigError, match="n_keep 9"):
        st.trim(9)
    with pytest.raises(ConfigError, match="contiguously from 8"):
        qwen3moe.decode(w, st, [1], [3])


def test_last_layer_routes_only_output_rows(tiny_models):
    w = _weights(tiny_models["F32"])
    full = qwen3moe.decode(w, qwen3moe.new_state(w.spec), TOKENS, np.arange(8))
    pre = qwen3moe.decode(w, qwen3moe.new_state(w.spec), TOKENS, np.arange(8), out_rows=[7])
    assert pre.logits.shape == (1, 300) and pre.out_rows.tolist() == [7]
    assert np.array_equal(pre.logits[0], full.logits[7])
    assert (pre.routes[:7, -1] == NOT_ROUTED).all() and np.isnan(pre.weights[:7, -1]).all()
    assert np.array_equal(pre.routes[7], full.routes[7])
    assert np.array_equal(pre.routes[:, :-1], full.routes[:, :-1])       # earlier layers route everything


def test_forward_target_protocol_and_prefill(tiny_models):
    t = ForwardTarget(tiny_models["Q4_0"])
    assert isinstance(t, Target) and t.n_layer == 2 and t.n_expert == 8 and t.n_expert_used == 2
    assert t.eos_ids == frozenset([2])
    out = t.prefill(np.array(TOKENS[:4]))
    assert out.n_rows == 1 and (out.routes[:3, 1] == NOT_ROUTED).all() and (out.routes[3] >= 0).all()
    out2 = t.decode(np.array([5, 6]), np.array([4, 5]))
    assert out2.n_rows == 2 and (out2.routes >= 0).all()
    assert t.min_margin == min(float(r.margin.min()) for r in t.results)
    t.trim(4)
    with pytest.raises(ConfigError, match="empty KV"):
        t.prefill(np.array([1]))


def test_bad_input(tiny_models, tmp_path):
    w = _weights(tiny_models["F32"])
    st = qwen3moe.new_state(w.spec)
    with pytest.raises(ConfigError, match="0..299"):
        qwen3moe.decode(w, st, [300], [0])
    with pytest.raises(ConfigError, match="as many positions"):
        qwen3moe.decode(w, st, [1, 2], [0])
    with pytest.raises(ConfigError, match="out_rows"):
        qwen3moe.decode(w, st, [1, 2], [0, 1], out_rows=[2])
    with pytest.raises(ConfigError, match="--numerics"):
        ForwardTarget(tiny_models["F32"], "fast")
    from refsim.model import open_model, qwen3_30b_a3b_q4_k_m_twin
    twin = open_model(qwen3_30b_a3b_q4_k_m_twin(tmp_path / "twin.gguf"))     # header-only: no weights
    with pytest.raises(ModelFormatError, match="header-only"):
        ForwardTarget(twin)
    assert ARCHS["qwen3moe"] is qwen3moe
