"""gemma3 ``llamacpp`` numerics: llama.cpp's CPU arithmetic bit for bit (issue #8).

Goldens (both made with llama-cpp-python 0.3.36 on this AVX2/FMA/F16C machine, flash attention
off, prompt decoded as one batch, then one token per decode):

- tests/data/gemma3_llamacpp_tensors.json (tests/data/gemma3_make_tensor_digests.py): a digest of
  every named tensor of every layer (``attn_norm``, ``Qcur`` after RoPE, ``kqv_out``, ``ffn_geglu``,
  ``l_out``, ...) and of the logits, for a 6-token and a 17-token prompt and the one-token decodes
  after them — the two prompts take the different kernels (Q6_K vec_dot vs tiled, Q4_K gemm+gemv);
  once with an F32 KV cache (``sequences``) and once with llama.cpp's default F16 one (``kv_f16``);
- tests/data/gemma3_llamacpp.json (tests/data/gemma3_make_goldens.py): 64 greedy ids for five
  prompts (F32 KV). Free-running refsim must produce the same 5 x 64 ids (no tolerance, no near-tie
  escape: compare tests/forward/test_gemma3_llamacpp.py, which accepts near-ties in the ``ggml``
  numerics); and ``france_default``, the oracle README §3 run (``Llama()`` defaults: F16 KV): its
  top-5 and 20 greedy ids, which refsim reproduces free-running with an F16 cache.

The real model is a test dependency (the ``test`` extra): these tests fail, not skip, without it.
"""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from refsim.errors import ConfigError
from refsim.forward import gemma3
from refsim.forward import gemma3_llamacpp as G
from refsim.kernels import ggml_cpu as K
from refsim.model import open_model

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture(scope="module")
def model():
    return open_model(gemma3.gemma3_270m_path())


@pytest.fixture(scope="module")
def weights(model):
    return G.load_weights(model)


# --------------------------------------------------------------------------------------------
# kernels, hand-worked


def test_hsum8_and_vec_dot_f32_reduce_in_their_own_orders():
    # lanes 2^24, 1, -2^24, 1 (rest 0). hsum_float_8: (v0+v2) + (v1+v3) = 0 + 2 = 2.
    # GGML_F32x8_REDUCE: (v0+v1) + (v2+v3) = 2^24 (1 lost to rounding) + (1 - 2^24) = 1.
    x = np.zeros(32, np.float32)
    x[:4] = [2.0 ** 24, 1.0, -(2.0 ** 24), 1.0]
    assert K.hsum8(x[:8]) == 2.0
    out = np.empty((1, 1), np.float32)
    K.f32_vecdot_matmul(x[None], np.ones((1, 32), np.float32), out)
    assert out[0, 0] == 1.0
    K.f32_tinyblas_matmul(x[None], np.ones((1, 32), np.float32), out)
    assert out[0, 0] == 2.0


def test_q8_k_sign_ties_differ_between_the_two_quantizers():
    # |x| max 2 reached by -2 (first) and +2: the ref quantizer takes -2 (iscale = 63.5),
    # ggml_quantize_mat_q8_K_4x8 takes +2 (iscale = -63.5); 1 * 63.5 rounds half to even (64)
    x = np.zeros((1, 256), np.float32)
    x[0, 0], x[0, 5], x[0, 1] = -2.0, 2.0, 1.0
    q, d = K.quantize_q8_k_rows(x, False)
    assert d[0, 0] == np.float32(1 / np.float32(63.5)) and q[0, :6].tolist() == [-127, 64, 0, 0, 0, 127]
    q, d = K.quantize_q8_k_rows(x, True)
    assert d[0, 0] == np.float32(1 / np.float32(-63.5)) and q[0, :6].tolist() == [127, -64, 0, 0, 0, -127]


def test_rope_is_one_fused_multiply_add_per_output():
    # x0 = c = 1 + 2^-12, x1 = 1, s = 1 + 2^-11: x0*c = 1 + 2^-11 + 2^-24 exactly, which float32
    # rounds to 1 + 2^-11 = x1*s; unfused y0 would be 0, the fma keeps 2^-24
    e = np.float32(2.0 ** -12)
    x = np.array([[[1 + e, 1.0]]], np.float32)
    cache = np.array([[[1 + e, 1 + 2 * e]]], np.float32)
    out = np.empty_like(x)
    K.rope_neox(x, cache, out)
    assert out[0, 0, 0] == np.float32(2.0 ** -24)
    assert out[0, 0, 1] == np.float32(2 + 2.0 ** -10)   # 2 + 2^-10 + 2^-23 ties to even


def test_v_expf_edges():
    fb = np.empty(1, np.float32)
    ib = fb.view(np.int32)
    assert K.v_expf(np.float32(0.0), fb, ib) == 1.0
    assert K.v_expf(np.float32(-np.inf), fb, ib) == 0.0       # masked scores: exactly 0
    assert K.v_expf(np.float32(-200.0), fb, ib) == 0.0
    x = np.linspace(-80, 0, 4001, dtype=np.float32)
    got = np.array([K.v_expf(v, fb, ib) for v in x], np.float32)
    ulp = np.abs(got.view(np.int32).astype(np.int64) - np.exp(x.astype(np.float64)).astype(np.float32).view(np.int32))
    assert ulp.max() <= 2  # vec.h: "the maximum error is 1.45358 plus 0.5 ulps" (vs the rounded exp)


def test_gelu_table_is_llamacpps():
    # digest of libggml-cpu.so's ggml_table_gelu_f16 (finite halves; read after a decode with
    # llama-cpp-python 0.3.36): the contracted fma + glibc tanhf reproduce all 63488 entries;
    # the uncontracted formula differs in 234 (e.g. gelu(-1.8173828) = -0.06286621 vs -0.06292725)
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    tab = G.gelu_table().astype(np.float16).view(np.uint16)[np.isfinite(x)]
    assert hashlib.sha256(tab.tobytes()).hexdigest()[:20] == "6be7bd8fd6b8a8fb4b70"
    assert G.gelu_table()[np.float16(-1.8173828).view(np.uint16)] == np.float32(-0.06286621)


def test_f16_cache_rounds_to_nearest_even():
    # halves near 1 are 2^-10 apart: 1 + 2^-11 ties to 1 (even), 1 + 3*2^-11 ties to 1 + 2^-9 (even);
    # 65520 is the first value that rounds to inf; F32 keeps every value
    x = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 65519.0, 65520.0, 2.0 ** -24, 2.0 ** -26], np.float32)
    want = np.array([1.0, 1 + 2.0 ** -9, 65504.0, np.inf, 2.0 ** -24, 0.0], np.float32)
    assert np.array_equal(K.round_f16(x), want)
    kv = G.LlamaKVCache(1, 1, 6, 6, 4, kv_type="f16")
    kv.write(0, 0, x.reshape(1, 1, 6), -x.reshape(1, 1, 6))
    k, v = kv.view(0, 1)
    assert np.array_equal(k[0, 0], want) and np.array_equal(v[0, 0], -want)
    assert kv.bytes_per_token() == 2 * 12 and G.LlamaKVCache(1, 1, 6, 6).bytes_per_token() == 4 * 12
    with pytest.raises(ConfigError, match="q8_0"):
        G.LlamaKVCache(1, 1, 6, 6, kv_type="q8_0")


def test_f16_attention_takes_sgemm_for_several_rows():
    # one query against key 0 = zeros (score 0) and key 1 whose products with q are, per element,
    # 2^24, 1, -2^24, 1 (k = 2048, 1, -2048, 1; q = 8192, 1, 8192, 1: all exact halves).
    # ggml_vec_dot_f16 (one row, and every F32 K x Q) sums (2^24 + 1) + (-2^24 + 1) = 1;
    # tinyBLAS (F16, two rows) hsum gives (2^24 - 2^24) + (1 + 1) = 2. V = (0; 1), so the output is
    # softmax p_1 = e^s / (1 + e^s) rounded to F16: s = 1 -> 0.7310 (1497/2048), s = 2 -> 0.8809 (1804/2048)
    hd, n_kv = 32, 8
    kc = np.zeros((n_kv, 1, hd), np.float32)
    kc[1, 0, :4] = [2048.0, 1.0, -2048.0, 1.0]
    vc = np.zeros((n_kv, 1, hd), np.float32)
    vc[1, 0, 0] = 1.0
    q = np.zeros((2, 1, hd), np.float32)
    q[:, 0, :4] = [8192.0, 1.0, 8192.0, 1.0]
    p1, p2 = np.float32(1497 / 2048), np.float32(1804 / 2048)
    one = G.attention(q[:1], kc, vc, np.array([1]), 0, "f16")
    two = G.attention(q, kc, vc, np.array([1, 1]), 0, "f16")
    two32 = G.attention(q, kc, vc, np.array([1, 1]), 0, "f32")
    assert one[0, 0] == p1 and two[0, 0] == two[1, 0] == p2
    assert two32[0, 0] != p2 and abs(two32[0, 0] - 0.7310586) < 1e-6   # F32: vec_dot, softmax not rounded


# --------------------------------------------------------------------------------------------
# the real model against llama.cpp


def _entry(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a, dtype=np.float32)
    return f"{a.size // a.shape[-1]}x{a.shape[-1]}:" + hashlib.sha256(a.tobytes()).hexdigest()[:20]


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
def test_every_named_tensor_is_bit_identical(weights, model, kv_type):
    gold = json.loads((DATA / "gemma3_llamacpp_tensors.json").read_text(encoding="utf-8"))
    assert gold["llama_cpp_python"] == "0.3.36"
    for seq in (gold["sequences"] if kv_type == "f32" else gold["kv_f16"]["sequences"]):
        st = G.new_state(model.spec, kv_type=kv_type)
        for call in seq["calls"]:
            got: dict[str, str] = {}
            order: list[str] = []

            def tap(name, il, a, got=got, order=order):
                key = name if il < 0 else f"{name}-{il}"
                got[key] = _entry(a)
                order.append(key)

            toks = np.array(call["tokens"])
            res = G.decode(weights, st, toks, call["pos0"] + np.arange(toks.size), tap=tap)
            want = call["tensors"]
            assert set(want) <= set(got), sorted(set(want) - set(got))[:5]
            bad = [k for k in order if k in want and got[k] != want[k]]
            assert not bad, f"prompt {seq['prompt'][:3]}.. call at pos {call['pos0']}: first differing tensor {bad[0]}"
            assert _entry(res.logits) == call["logits"]


def test_free_running_greedy_equals_llamacpp(weights, model):
    gold = json.loads((DATA / "gemma3_llamacpp.json").read_text(encoding="utf-8"))
    assert gold["settings"].startswith("n_ctx=512, n_batch=512") and "F32" in gold["settings"]
    for run in gold["generate"]:
        ids = run["prompt_ids"]
        st = G.new_state(model.spec)
        res = G.decode(weights, st, np.array(ids), np.arange(len(ids)), out_rows=[len(ids) - 1])
        gen = [int(res.argmax[0])]
        for i in range(len(run["greedy"]) - 1):
            res = G.decode(weights, st, np.array([gen[-1]]), np.array([len(ids) + i]))
            gen.append(int(res.argmax[0]))
        assert gen == run["greedy"], (run["prompt"], next(i for i in range(len(gen)) if gen[i] != run["greedy"][i]))


def test_dispatch_through_the_pass_table(weights, model):
    # the table (arch, numerics) -> pass gives ("gemma3", "llamacpp") the llamacpp pass (gemma3.decode no
    # longer dispatches into it); the first prompt row's logits equal the golden's top-5 logits to the last
    # bit (README prompt; tests/data/gemma3_llamacpp.json)
    from refsim.forward.passes import pass_for
    p = pass_for("gemma3", "llamacpp")
    assert p.load_weights is G.load_weights and not p.hooks
    gold = json.loads((DATA / "gemma3_llamacpp.json").read_text(encoding="utf-8"))["generate"][0]
    ids = gold["prompt_ids"]
    res = p.decode(weights, p.new_state(model.spec), ids, np.arange(len(ids)), None, out_rows=[len(ids) - 1])
    top5 = np.argsort(-res.logits[0], kind="stable")[:5]
    assert [(int(i), float(res.logits[0, i])) for i in top5] == [(i, v) for i, v in gold["top5"]]


def test_readme_run_free_running_with_f16_kv(weights, model):
    # oracle README §3: Llama(n_ctx=512, logits_all=True, n_threads=2) defaults = F16 KV, flash
    # attention off; prompt in one eval, then one token per eval. Same top-5 (ids and float32
    # logits, to the last bit) and the same 20 greedy ids, free-running. (With an F32 cache
    # llama.cpp's own run differs from README at step 5.)
    gold = json.loads((DATA / "gemma3_llamacpp.json").read_text(encoding="utf-8"))["france_default"]
    ids = gold["prompt_ids"]
    assert ids == [2, 818, 5279, 529, 7001, 563] and "F16 KV" in gold["settings"]
    st = G.new_state(model.spec, kv_type="f16")             # the llamacpp pass's public entry points
    assert isinstance(st, G.LlamaKVCache) and st.kv_type == "f16"
    res = G.decode(weights, st, np.array(ids), np.arange(len(ids)), out_rows=[len(ids) - 1])
    top5 = np.argsort(-res.logits[0], kind="stable")[:5]
    assert [int(i) for i in top5] == [506, 496, 9079, 886, 3224]          # the, a, Paris, one, known
    assert [(int(i), float(res.logits[0, i])) for i in top5] == [(i, v) for i, v in gold["top5"]]
    gen = [int(res.argmax[0])]
    for i in range(19):
        res = G.decode(weights, st, np.array([gen[-1]]), np.array([len(ids) + i]))
        gen.append(int(res.argmax[0]))
    assert gen == [506, 5279, 529, 506, 2891, 529, 7001, 236761, 1030, 563, 506, 7488, 3207, 528, 7001, 236761,
                   1030, 563, 506, 5279] == gold["greedy"]


def test_forward_target_runs_the_llamacpp_numerics(model, tiny_models):
    # the speculative loop's Target: plain greedy through ForwardTarget(numerics="llamacpp",
    # kv_type="f16") is README's run (prefill in one decode, then one token per decode)
    from refsim.spec import run_generation
    from refsim.spec.forward_target import ForwardTarget
    t = ForwardTarget(model, numerics="llamacpp", kv_type="f16")
    assert t.numerics_name == "llamacpp" and isinstance(t.state, G.LlamaKVCache)
    res = run_generation(t, None, np.array([2, 818, 5279, 529, 7001, 563]), 20)
    assert res.tokens.tolist() == [506, 5279, 529, 506, 2891, 529, 7001, 236761, 1030, 563, 506, 7488, 3207,
                                   528, 7001, 236761, 1030, 563, 506, 5279]
    with pytest.raises(ConfigError, match="only the llamacpp numerics"):
        ForwardTarget(model, numerics="ggml", kv_type="f16")
    with pytest.raises(ConfigError, match="implemented for gemma3 only"):
        ForwardTarget(tiny_models["F32"], numerics="llamacpp")       # a qwen3moe
