"""The types added for issue 18 end to end: llama.cpp's own dequantize_row_* (when llama_cpp imports)
agrees bit for bit with refsim's kernels, and a type refsim still has no kernel for fails with a
ConfigError naming the file, the tensor and the type (library and CLI) instead of a ValueError from
inside a kernel loop."""

import ctypes
import importlib.util
import os

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from refsim.cli import main
from refsim.errors import ConfigError
from refsim.kernels import KERNELS, dequantize_rows
from refsim.model import open_model, write_synthetic
from refsim.testing.strategies import QUANT_SCALE_FIELDS

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

LLAMA_NAMES = {Q.Q4_0: "q4_0", Q.Q4_1: "q4_1", Q.Q5_0: "q5_0", Q.Q5_1: "q5_1", Q.Q8_0: "q8_0", Q.Q2_K: "q2_K",
               Q.Q3_K: "q3_K", Q.Q4_K: "q4_K", Q.Q5_K: "q5_K", Q.Q6_K: "q6_K", Q.IQ4_NL: "iq4_nl",
               Q.IQ4_XS: "iq4_xs", Q.TQ1_0: "tq1_0", Q.TQ2_0: "tq2_0", Q.MXFP4: "mxfp4", Q.IQ2_XXS: "iq2_xxs",
               Q.IQ2_XS: "iq2_xs", Q.IQ2_S: "iq2_s", Q.IQ3_XXS: "iq3_xxs", Q.IQ3_S: "iq3_s", Q.IQ1_S: "iq1_s",
               Q.IQ1_M: "iq1_m"}
"""Registered quantized type -> the suffix of ggml-quants.c ``dequantize_row_<suffix>``."""


def _libggml_base():
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "lib", "libggml-base.so")
    return ctypes.CDLL(path) if os.path.exists(path) else None


def test_every_quantized_type_has_its_llama_cpp_name():
    assert set(LLAMA_NAMES) == {t for t in KERNELS if t not in (Q.F32, Q.F16, Q.BF16)}


@pytest.mark.skipif(_libggml_base() is None, reason="llama_cpp (with lib/libggml-base.so) not importable")
@pytest.mark.parametrize("qtype", sorted(LLAMA_NAMES, key=int), ids=lambda t: t.name)
def test_dequantize_bit_exact_against_llama_cpp(qtype):
    # llama.cpp's own decoder (ggml-quants.c dequantize_row_*, the CPU get_rows of a token embedding)
    f = getattr(_libggml_base(), f"dequantize_row_{LLAMA_NAMES[qtype]}")
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    f.restype = None
    k = KERNELS[qtype]
    rng = np.random.default_rng(int(qtype))
    nb = 2048
    raw = rng.integers(0, 256, (nb, k.type_size), dtype=np.uint8)
    for o in QUANT_SCALE_FIELDS[int(qtype)][1]:                       # finite scales of every magnitude
        h = (rng.uniform(1, 2, nb) * 2.0 ** rng.integers(-24, 15, nb) * rng.choice([-1, 1], nb)).astype(np.float16)
        raw[:, o:o + 2] = h.view(np.uint8).reshape(nb, 2)
    if qtype == Q.IQ1_M:                                              # its d lives in four top nibbles
        bits = (rng.uniform(1, 2, nb) * 2.0 ** rng.integers(-24, 15, nb)).astype(np.float16).view(np.uint16)
        for n in range(4):
            raw[:, 49 + 2 * n] = (raw[:, 49 + 2 * n] & 15) | (((bits >> (4 * n)) & 15) << 4).astype(np.uint8)
    raw[:8] = 0                                                       # all-zero blocks
    raw = np.ascontiguousarray(raw.reshape(1, -1))
    want = np.empty(nb * k.block_size, np.float32)
    f(raw.ctypes.data, want.ctypes.data, want.size)
    got = dequantize_rows(raw, qtype, want.size)[0]
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()


@pytest.fixture(scope="module")
def unsupported_model(tmp_path_factory):
    # gguf-py cannot quantize NVFP4, refsim cannot decode it: write zero blocks of its size for two matrices
    from refsim.model import synth
    path = str(tmp_path_factory.mktemp("unsup") / "nvfp4.gguf")
    mp = pytest.MonkeyPatch()
    encode = synth._encode

    def fake(value, qtype):
        if qtype != Q.NVFP4:
            return encode(value, qtype)
        return np.zeros(value.shape[:-1] + (value.shape[-1] // 64 * 36,), np.uint8)
    mp.setattr(synth, "_encode", fake)
    try:
        write_synthetic(path, "qwen3moe", {"attn_q": "NVFP4", "ffn_down_exps": "NVFP4", "default": "Q8_0"}, seed=1,
                        dims=dict(n_embd=256, head_dim=64, n_ff_exp=256, n_expert=4))
    finally:
        mp.undo()
    return path


def test_a_type_without_a_kernel_names_the_tensor_and_type(unsupported_model):
    from refsim.forward import qwen3moe
    m = open_model(unsupported_model)                                 # inspect-level open still works
    assert m.tensor("blk.1.attn_q.weight").ggml_type == Q.NVFP4
    with pytest.raises(ConfigError, match=r"nvfp4\.gguf: tensor 'blk\.0\.attn_q\.weight': no kernel for "
                                          r"ggml type NVFP4 \(id \d+\) \(supported: .*TQ2_0"):
        qwen3moe.load_weights(m)
    with pytest.raises(ConfigError, match=r"tensor 'blk\.1\.ffn_down_exps\.weight': no kernel for ggml type NVFP4"):
        m.dequantize("blk.1.ffn_down_exps.weight", rows=[0])
    assert m.dequantize("blk.0.attn_k.weight", rows=[0]).shape == (1, 256)     # the Q8_0 tensors decode


def test_cli_run_reports_it_in_one_line(unsupported_model, capsys):
    assert main(["inspect", unsupported_model]) == 0           # byte accounting needs no kernel
    capsys.readouterr()
    assert main(["run", unsupported_model, "--prompt-tokens", "1,2", "-n", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "attn_q.weight': no kernel for ggml type NVFP4" in err[0]


@pytest.mark.parametrize("quant", ["Q5_1", "IQ4_XS"])
def test_cli_synth_then_run_in_a_new_type(tmp_path, quant, capsys):
    out = str(tmp_path / f"{quant}.gguf")
    assert main(["synth", "--arch", "qwen3moe", "--quant", quant, "--seed", "4", "--out", out]) == 0
    assert open_model(out).tensor("blk.0.ffn_up_exps.weight").ggml_type == Q[quant]
    capsys.readouterr()
    assert main(["run", out, "--prompt-tokens", "1,5,77", "-n", "3", "--numerics", "ggml", "--json"]) == 0
    assert capsys.readouterr().out.strip().startswith("{")


def _oracle():
    spec = importlib.util.spec_from_file_location(
        "oracle_llamacpp", os.path.join(os.path.dirname(__file__), "..", "..", "tools", "oracle_llamacpp.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.skipif(_libggml_base() is None, reason="llama_cpp not importable (optional extra 'oracle')")
def test_live_iq3_s_model_requantized_by_llama_cpp(tmp_path):
    # no quantizer writes IQ3_S here, so llama.cpp's own llama_model_quantize (pure IQ3_S, in a child
    # process) requantizes a refsim F32 synthetic; refsim's ggml mode (Q8_K round trip) then matches
    # llama.cpp's logits, routes and greedy tokens
    import subprocess
    import sys

    from refsim.forward import Numerics, qwen3moe
    oracle = _oracle()
    src = write_synthetic(tmp_path / "f32.gguf", "qwen3moe", "F32", seed=36,
                          dims=dict(n_embd=256, head_dim=64, n_expert=4, n_ff_exp=256))
    out = str(tmp_path / "iq3_s.gguf")
    code = ("import sys, llama_cpp as L\np = L.llama_model_quantize_default_params()\n"
            "p.ftype = L.LLAMA_FTYPE_MOSTLY_IQ3_S; p.pure = True; p.nthread = 2\n"
            "sys.exit(L.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))")
    subprocess.run([sys.executable, "-c", code, src, out], check=True, capture_output=True, timeout=300)
    m = open_model(out)
    assert m.tensor("blk.0.ffn_up_exps.weight").ggml_type == Q.IQ3_S
    live = oracle.run_oracle(out, oracle.GOLDEN_TOKENS)
    res = qwen3moe.decode(qwen3moe.load_weights(m), qwen3moe.new_state(m.spec), oracle.GOLDEN_TOKENS,
                          np.arange(len(oracle.GOLDEN_TOKENS)), Numerics("ggml"))
    assert np.abs(res.logits - live["logits"]).max() <= 1e-4
    assert np.array_equal(res.routes, live["routes"])
    assert np.array_equal(res.argmax, live["logits"].argmax(1))
