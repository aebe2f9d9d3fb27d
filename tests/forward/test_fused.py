"""The fused one-position kernels and passes (refsim.forward.fused) against the readable blocks and passes
they stand for: the same bits, kernel by kernel, pass by pass, with and without the streaming hooks.

Moved here from test_forward_layers.py and test_forward_qwen3moe.py (the kernels' and the one-call decode's
equality tests), beside new ones that hold the target's fused passes equal to the readable passes under any
split of a decode and with every hook set."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from hypothesis import given, settings

from refsim.errors import ConfigError
from refsim.forward import fused, qwen3moe, qwen35moe
from refsim.forward.layers import ExpertWeights, Numerics, QWeight, attention, linear, moe_ffn, rms_norm, rope_neox
from refsim.forward.routing import route_topk
from refsim.streaming.hooks import LayerHooks
from refsim.streaming.predict import PredictProbe
from refsim.streaming.route_ahead import RouteAhead
from refsim.streaming.stale_gate import PredictPrefetch
from refsim.testing.strategies import decode_splits

EXACT, GGML = Numerics("exact"), Numerics("ggml")


def random_qweight(rng, t, rows, cols):
    """A ``[cols -> rows]`` QWeight of type ``t`` with random codes and small positive f16 scales
    (random bytes there would make inf/nan scales); F32 weights are normal draws."""
    from refsim.kernels import KERNELS
    from refsim.testing.strategies import QUANT_SCALE_FIELDS
    if t == Q.F32:
        return QWeight(rng.standard_normal((rows, cols)).astype(np.float32).view(np.uint8), int(t), cols)
    raw = rng.integers(0, 256, (rows, KERNELS[t].row_bytes(cols)), dtype=np.uint8)
    size, offs = QUANT_SCALE_FIELDS[int(t)]
    blocks = raw.reshape(rows, -1, size)
    for o in offs:
        blocks[..., o:o + 2] = (rng.uniform(0.5, 1, blocks.shape[:2]) * 2.0 ** -6).astype(np.float16).view(
            np.uint8).reshape(*blocks.shape[:2], 2)
    if t == Q.MXFP4:
        blocks[..., 0] = rng.integers(118, 126, blocks.shape[:2])
    return QWeight(raw, int(t), cols)


@pytest.mark.parametrize("types", [(Q.Q4_0, Q.Q4_0, Q.Q4_0), (Q.Q8_0, Q.Q5_0, Q.MXFP4), (Q.Q4_K, Q.Q5_K, Q.Q6_K),
                                   (Q.Q4_0, Q.Q8_0, Q.Q6_K), (Q.Q4_K, Q.Q4_K, Q.Q8_0)], ids=lambda t: "-".join(q.name for q in t))
@pytest.mark.parametrize("tie", ["even", "up", "down"])
def test_fused_one_position_moe_is_bit_identical_to_the_unfused_path(types, tie):
    # ggml mode, one position: fused.moe_ffn runs the whole block in one Numba call (_moe_one_kernel);
    # the readable block's per-projection path must give the same bits, and so must a batched call
    rng = np.random.default_rng(sum(int(t) for t in types))
    n_exp, n_embd, n_ff, k = 5, 512, 256, 3
    from refsim.kernels import KERNELS
    from refsim.testing.strategies import QUANT_SCALE_FIELDS
    raws = []
    for t, (rows, cols) in zip(types, [(n_ff, n_embd), (n_ff, n_embd), (n_embd, n_ff)]):
        raw = rng.integers(0, 256, (n_exp, rows, KERNELS[t].row_bytes(cols)), dtype=np.uint8)
        size, offs = QUANT_SCALE_FIELDS[int(t)]      # random quants, finite scales
        blocks = raw.reshape(n_exp, rows, -1, size)
        for o in offs:
            blocks[..., o:o + 2] = (rng.uniform(0.5, 1, blocks.shape[:3]) * 2.0 ** -6).astype(np.float16).view(
                np.uint8).reshape(*blocks.shape[:3], 2)
        if t == Q.MXFP4:
            blocks[..., 0] = rng.integers(118, 126, blocks.shape[:3])
        raws.append(raw)
    ex = ExpertWeights(*raws, *(int(t) for t in types), n_embd, n_ff)
    num = Numerics("ggml", tie)
    assert fused.moe_static(ex, num) is not None and fused.moe_static(ex, EXACT) is None
    x = rng.standard_normal((4, n_embd)).astype(np.float32)
    x[1, :64] *= 1e-3
    ids = np.array([[4, 0, 2], [1, 1, 3], [0, 4, 3], [2, 3, 1]], np.int16)
    w = rng.random((4, k)).astype(np.float32)
    batch = moe_ffn(x, ids, w, ex, num)
    assert np.array_equal(fused.moe_ffn(x, ids, w, ex, num), batch)          # several positions: the blocks
    for p in range(4):
        one = fused.moe_ffn(x[p:p + 1], ids[p:p + 1], w[p:p + 1], ex, num)
        assert np.array_equal(one, moe_ffn(x[p:p + 1], ids[p:p + 1], w[p:p + 1], ex, num))
        assert np.array_equal(one[0], batch[p])
    with pytest.raises(ConfigError, match="expert ids"):
        fused.moe_ffn(x[:1], np.array([[0, 5, 1]], np.int16), w[:1], ex, num)


@pytest.mark.parametrize("types", [(Q.Q4_0, Q.Q4_0, Q.Q4_0), (Q.Q8_0, Q.Q5_0, Q.MXFP4), (Q.Q4_K, Q.Q5_K, Q.Q6_K)],
                         ids=lambda t: "-".join(q.name for q in t))
@pytest.mark.parametrize("tie", ["even", "up"])
def test_fused_one_position_qkv_is_bit_identical_to_the_unfused_blocks(types, tie):
    rng = np.random.default_rng(7 + sum(int(t) for t in types))
    n_embd, H, KV, hd = 512, 4, 2, 64
    ws = [random_qweight(rng, t, rows, n_embd) for t, rows in zip(types, (H * hd, KV * hd, KV * hd))]
    norms = [rng.uniform(0.5, 1.5, n).astype(np.float32) for n in (n_embd, hd, hd)]
    num = Numerics("ggml", tie)
    eps = 1e-6
    for pos in (0, 5, 300):
        h = rng.standard_normal((1, n_embd)).astype(np.float32)
        positions = np.array([pos], np.int64)
        a, q, k, v = fused.qkv_one(h, norms[0], *ws, norms[1], norms[2], eps, positions, hd, 1e6, H, KV, hd, num)
        a2 = rms_norm(h, norms[0], eps)
        q2 = rope_neox(rms_norm(linear(ws[0], a2, num).reshape(1, H, hd), norms[1], eps), positions, hd, 1e6, num)
        k2 = rope_neox(rms_norm(linear(ws[1], a2, num).reshape(1, KV, hd), norms[2], eps), positions, hd, 1e6, num)
        v2 = linear(ws[2], a2, num).reshape(1, KV, hd)
        for got, want in ((a, a2), (q, q2), (k, k2), (v, v2)):
            assert got.shape == want.shape and np.array_equal(got, want)
    assert fused.qkv_one(h, norms[0], *ws, norms[1], norms[2], eps, positions, hd, 1e6, H, KV, hd, EXACT) is None


@pytest.mark.parametrize("wo_type,router_type", [(Q.Q4_0, Q.F32), (Q.Q8_0, Q.Q4_0), (Q.Q4_K, Q.Q6_K), (Q.MXFP4, Q.Q8_0)],
                         ids=lambda t: t.name)
@pytest.mark.parametrize("tie", ["even", "down"])
def test_fused_one_position_attention_and_routing_are_bit_identical_to_the_unfused_blocks(wo_type, router_type, tie):
    # ggml mode, one position: attn_route_one (attention, wo, residual, ffn_norm, router, top-k in one call,
    # heads and rows split over threads) gives the blocks' own bits
    rng = np.random.default_rng(int(wo_type) * 100 + int(router_type))
    n_embd, H, KV, hd, n_expert, k = 512, 4, 2, 64, 21, 3

    wo, router = random_qweight(rng, wo_type, n_embd, H * hd), random_qweight(rng, router_type, n_expert, n_embd)
    ffn_norm = rng.uniform(0.5, 1.5, n_embd).astype(np.float32)
    num = Numerics("ggml", tie)
    for n_kv in (1, 6, 37):
        q = rng.standard_normal((1, H, hd)).astype(np.float32)
        kc = rng.standard_normal((n_kv, KV, hd)).astype(np.float32)
        vc = rng.standard_normal((n_kv, KV, hd)).astype(np.float32)
        h = rng.standard_normal((1, n_embd)).astype(np.float32)
        positions = np.array([n_kv - 1], np.int64)
        got = fused.attn_route_one(q, kc, vc, positions, wo, h, ffn_norm, 1e-6, router, k, num)
        o = attention(q, kc, vc, positions).reshape(1, H * hd)
        h1 = h + linear(wo, o, num)
        f = rms_norm(h1, ffn_norm, 1e-6)
        logits = linear(router, f, num)
        want = (o, h1, f, logits) + route_topk(logits, k)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype and np.array_equal(g, w)
    assert fused.attn_route_one(q, kc, vc, positions, wo, h, ffn_norm, 1e-6, router, k, EXACT) is None
    assert fused.attn_route_one(q, kc[:-1], vc[:-1], positions, wo, h, ffn_norm, 1e-6, router, k, num) is None


@pytest.fixture(scope="module")
def one_call_models(tmp_path_factory):
    """Small qwen3moe files whose every layer takes the one-call ggml decode: Q8_0, the Q4_K_M-like mix and
    the MXFP4 mix of benchmarks/forward.py (MXFP4 experts, Q8_0 elsewhere)."""
    from refsim.model import open_model, write_synthetic
    d = tmp_path_factory.mktemp("one-call")
    recipes = {"Q8_0": "Q8_0", "mixed": "mixed",
               "MXFP4": {"ffn_gate_exps": "MXFP4", "ffn_up_exps": "MXFP4", "ffn_down_exps": "MXFP4", "default": "Q8_0"}}
    return {name: open_model(write_synthetic(d / f"{name}.gguf", "qwen3moe", r, seed=5)) for name, r in recipes.items()}


@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "mixed", "MXFP4"])
def test_one_call_decode_equals_the_layer_by_layer_path(tiny_models, one_call_models, name):
    """A plain one-position ggml decode runs every layer in one Numba call (fused._decode_one_kernel); a tap
    sends the same decode layer by layer through Python: logits, routes, weights and margins are the same bits,
    position after position (the KV rows the one-call path writes in place included)."""
    model = tiny_models[name] if name in tiny_models else one_call_models[name]
    w = qwen3moe.load_weights(model)
    num = Numerics("ggml")
    assert fused.qwen3moe_one_static(w, num) is not None and fused.qwen3moe_one_static(w, Numerics("exact")) is None
    toks = [3, 200, 17, 17, 88, 1, 250, 42, 9, 130]
    st_one, st_py = qwen3moe.new_state(w.spec, capacity=4), qwen3moe.new_state(w.spec, capacity=4)   # both grow
    for i, t in enumerate(toks):
        one = fused.qwen3moe_decode(w, st_one, [t], [i], num)
        py = fused.qwen3moe_decode(w, st_py, [t], [i], num, tap=lambda name, il, a: None)
        for field in ("logits", "routes", "weights", "margin", "route_margin"):
            assert np.array_equal(getattr(one, field), getattr(py, field), equal_nan=True), (name, i, field)
        assert np.array_equal(st_one._k[0][:i + 1], st_py._k[0][:i + 1])
        assert np.array_equal(st_one._v[-1][:i + 1], st_py._v[-1][:i + 1])
    assert (one.routes >= 0).all() and np.isfinite(one.logits).all()


# ---- the target's fused passes equal the readable passes -------------------------------------

FIELDS = ("logits", "out_rows", "routes", "weights", "margin", "route_margin", "dropped", "pred_routes",
          "pred_weights")


def assert_same_result(a, b, where=""):
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), (where, name)
        if x is not None:
            assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), (where, name)


@settings(max_examples=20, deadline=None)
@given(split=decode_splits(n_vocab=300, max_width=7))
def test_fused_pass_under_any_split_is_the_readable_whole_decode(tiny_models, split):
    """The target's ggml pass (one-call decode for one position, fused MoE block for the rest) decodes any
    split of a token run to the bits of one readable decode of the whole run; a prefill whose last layer
    routes one row (out_rows) too."""
    tokens, sizes = split
    w = qwen3moe.load_weights(tiny_models["Q4_0"])
    whole = qwen3moe.decode(w, qwen3moe.new_state(w.spec), tokens, np.arange(len(tokens)), GGML)
    st = qwen3moe.new_state(w.spec)
    parts, p0 = [], 0
    for n in sizes:
        parts.append(fused.qwen3moe_decode(w, st, tokens[p0:p0 + n], np.arange(p0, p0 + n), GGML))
        p0 += n
    for name in ("logits", "routes", "weights", "route_margin"):
        assert np.array_equal(np.concatenate([getattr(r, name) for r in parts]), getattr(whole, name), equal_nan=True)
    n = len(tokens)
    last = [n - 1]
    assert_same_result(fused.qwen3moe_decode(w, qwen3moe.new_state(w.spec), tokens, np.arange(n), GGML, out_rows=last),
                       qwen3moe.decode(w, qwen3moe.new_state(w.spec), tokens, np.arange(n), GGML, out_rows=last))


class RecordingGate:
    """A drop seam that drops every cold, light slot (nothing resident, F = 1) and records every call the
    pass makes into it, in order."""

    drop_renorm = True

    def __init__(self, k):
        self.thr, self.calls = np.float32(1.0 / k), []

    def drop_threshold(self, il):
        self.calls.append(("threshold", il))
        return self.thr

    def resident(self, il, ids):
        self.calls.append(("resident", il, np.asarray(ids).tolist()))
        return np.zeros(np.shape(ids), bool)

    def routed(self, il, rows, ids, weights, dropped):
        self.calls.append(("routed", il, np.asarray(rows).tolist(), np.asarray(ids).tolist(),
                           np.asarray(weights).tolist(), np.asarray(dropped).tolist()))

    def predicted(self, t, rows, ids, weights):
        self.calls.append(("predicted", t, list(rows), np.asarray(ids).tolist(), np.asarray(weights).tolist()))


@pytest.fixture(scope="module")
def deep_q4(tmp_path_factory):
    """A 4-layer Q4_0 qwen3moe (the stale gate's horizon 2 needs layers 2 and 3)."""
    from refsim.model import open_model, write_synthetic
    d = tmp_path_factory.mktemp("fused-deep")
    return open_model(write_synthetic(d / "deep.gguf", "qwen3moe", "Q4_0", seed=11, dims={"n_layer": 4}))


@pytest.mark.parametrize("knob", ["gate", "probe", "ahead", "predictor", "gate+predictor"])
def test_fused_layers_call_the_hooks_as_the_readable_layers_do(deep_q4, knob):
    """One-position ggml decodes through the fused layers (qwen3moe_layer_one: hooks set, so no one-call
    decode) give the readable pass's results, and the hooks see the same calls and end with the same
    counters."""
    w = qwen3moe.load_weights(deep_q4)
    assert fused.qwen3moe_one_static(w, GGML) is not None      # every layer fuses: the hooks are what differ
    k = w.spec.n_expert_used
    runs = []
    for decode in (fused.qwen3moe_decode, qwen3moe.decode):
        st = qwen3moe.new_state(w.spec)
        hooks = LayerHooks(probe=PredictProbe(w.spec.n_layer) if knob == "probe" else None,
                           ahead=RouteAhead(1) if knob == "ahead" else None,
                           predictor=PredictPrefetch() if "predictor" in knob else None)
        gates, results = [], []
        toks = [3, 200, 17, 17, 88, 1]
        results.append(decode(w, st, toks[:2], [0, 1], GGML, out_rows=[1], hooks=hooks))   # a prefill: no hook acts
        for i, t in enumerate(toks[2:], start=2):
            hooks.begin_graph(1)
            if "gate" in knob:
                hooks.gate = RecordingGate(k)
                gates.append(hooks.gate)
            results.append(decode(w, st, [t], [i], GGML, hooks=hooks))
        runs.append((results, [g.calls for g in gates], hooks))
    (got, got_calls, got_hooks), (want, want_calls, want_hooks) = runs
    for i, (a, b) in enumerate(zip(got, want)):
        assert_same_result(a, b, i)
    assert got_calls == want_calls
    if "gate" in knob:
        assert any(any(d) for c in got_calls for call in c if call[0] == "routed" for d in call[5])   # drops made
    if knob == "probe":
        assert got_hooks.probe.per_layer == want_hooks.probe.per_layer
        assert got_hooks.probe.total("control").rows > 0
    if knob == "ahead":
        assert (got_hooks.ahead.committed, got_hooks.ahead.passthrough, got_hooks.ahead.agree_slots) == (
            want_hooks.ahead.committed, want_hooks.ahead.passthrough, want_hooks.ahead.agree_slots)
        assert got_hooks.ahead.committed > 0
    if "predictor" in knob:
        assert got_hooks.predictor.predictions == want_hooks.predictor.predictions > 0


@pytest.fixture(scope="module")
def hybrid_q8(tmp_path_factory):
    """A small qwen35moe file with the MTP head, Q8_0 throughout: its experts take the fused MoE block."""
    from refsim.model import open_model, write_synthetic
    d = tmp_path_factory.mktemp("fused35")
    return open_model(write_synthetic(d / "q8.gguf", "qwen35moe", "Q8_0", nextn=True, seed=4))


def test_fused_qwen35moe_pass_and_mtp_head_are_the_readable_ones(hybrid_q8):
    """The qwen35moe ggml pass (the fused MoE block) and its MTP head decode give the readable pass's bits,
    one position at a time (where the fused block runs) and batched."""
    w = qwen35moe.load_weights(hybrid_q8)
    assert all(fused.moe_static(L.ffn.experts, GGML) is not None for L in w.layers)
    toks = [5, 77, 123, 42, 7, 9]
    st_f, st_r = qwen35moe.new_state(w.spec), qwen35moe.new_state(w.spec)
    for i, t in enumerate(toks):
        a = fused.qwen35moe_decode(w, st_f, [t], [i], GGML)
        b = qwen35moe.decode(w, st_r, [t], [i], GGML)
        assert_same_result(a, b, i)
        assert np.array_equal(a.h_nextn, b.h_nextn)
    both = [f(w, qwen35moe.new_state(w.spec), toks, np.arange(len(toks)), GGML)
            for f in (fused.qwen35moe_decode, qwen35moe.decode)]
    assert_same_result(*both)
    h = both[1].h_nextn[:1]
    kv_f, kv_r = qwen35moe.new_mtp_state(w.spec), qwen35moe.new_mtp_state(w.spec)
    for i, t in enumerate(toks[:3]):
        a = fused.qwen35moe_mtp_decode(w, kv_f, [t], [i], h, GGML)
        b = qwen35moe.mtp_decode(w, kv_r, [t], [i], h, GGML)
        for name in ("logits", "h", "routes", "weights"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (i, name)
        h = b.h
