"""Synthetic models: every arch x quant loads, is deterministic, small, and matches gguf-py's reader."""

import json
import os

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize

from refsim.cli import main
from refsim.errors import ConfigError
from refsim.model import QUANTS, open_model, write_synthetic
from refsim.model.k_quantize import (quantize_iq4_nl, quantize_iq4_xs, quantize_q2_k, quantize_q3_k, quantize_q4_k,
                                     quantize_q5_k, quantize_q6_k)
from refsim.model.synth import QWEN3_30B_A3B_EIGHTH, resolve_dims, tensor_plan

VARIANTS = [("qwen3moe", False), ("qwen35moe", False), ("qwen35moe", True)]


@pytest.mark.parametrize("quant", QUANTS)
@pytest.mark.parametrize("arch,nextn", VARIANTS)
def test_synthetic_loads_and_agrees_with_gguf_reader(tmp_path, arch, nextn, quant):
    path = write_synthetic(tmp_path / "m.gguf", arch=arch, quant=quant, nextn=nextn, seed=3)
    assert os.path.getsize(path) < 5 * 2**20
    m = open_model(path)
    assert m.has_data and m.spec.arch == arch and m.spec.nextn_predict_layers == int(nextn)
    r = gguf.GGUFReader(path)
    assert [t.name for t in r.tensors] == list(m.tensors)
    for t in r.tensors:
        ti = m.tensors[t.name]
        assert (ti.ggml_type, ti.shape_gguf, ti.data_offset, ti.n_bytes) == (
            t.tensor_type, tuple(int(x) for x in t.shape), t.data_offset, t.n_bytes)
    # the required metadata keys of the llama.cpp recipe (oracle README section 4)
    keys = ["context_length", "embedding_length", "block_count", "attention.head_count", "attention.head_count_kv",
            "attention.layer_norm_rms_epsilon", "expert_count", "expert_used_count", "expert_feed_forward_length"]
    if arch == "qwen35moe":
        keys += ["expert_shared_feed_forward_length", "rope.dimension_sections", "ssm.conv_kernel", "ssm.state_size",
                 "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size"] + (["nextn_predict_layers"] if nextn else [])
    for k in keys:
        assert f"{arch}.{k}" in m.metadata
    assert m.metadata["tokenizer.ggml.model"] == "llama" and len(m.metadata["tokenizer.ggml.tokens"]) == 300
    if quant not in ("mixed",):
        assert m.tensor("blk.0.ffn_up_exps.weight").ggml_type == Q[quant]
    assert m.tensor("blk.0.ffn_gate_inp.weight").ggml_type == Q.F32


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = write_synthetic(tmp_path / "a.gguf", "qwen35moe", "Q8_0", nextn=True, seed=7)
    b = write_synthetic(tmp_path / "b.gguf", "qwen35moe", "Q8_0", nextn=True, seed=7)
    c = write_synthetic(tmp_path / "c.gguf", "qwen35moe", "Q8_0", nextn=True, seed=8)
    assert open(a, "rb").read() == open(b, "rb").read() != open(c, "rb").read()


def test_write_is_atomic_and_leaves_no_temp_on_error(tmp_path):
    with pytest.raises(ConfigError):
        write_synthetic(tmp_path / "x.gguf", "qwen3moe", "F32", dims={"n_vocab": 10})
    assert os.listdir(tmp_path) == []


def test_bad_arguments():
    with pytest.raises(ConfigError, match="unknown quant"):
        resolve_dims("qwen3moe", "IQ2_XXS", None)
    with pytest.raises(ConfigError, match="qwen3moe or qwen35moe"):
        resolve_dims("llama", "F32", None)
    with pytest.raises(ConfigError, match="unknown dims"):
        resolve_dims("qwen3moe", "F32", {"n_experts": 3})


def test_mixed_types_and_per_tensor_mapping(tmp_path):
    m = open_model(write_synthetic(tmp_path / "m.gguf", "qwen3moe",
                                   {"ffn_down_exps": "Q6_K", "ffn_gate_exps": "MXFP4", "default": "Q8_0"},
                                   dims={"n_embd": 256, "n_ff_exp": 256, "n_expert": 2}))
    types = dict(m.layers[0].expert_types)
    assert types == {"ffn_gate_exps": "MXFP4", "ffn_up_exps": "Q8_0", "ffn_down_exps": "Q6_K"}
    # per-expert stride summed over three different types: 256 rows each
    assert m.expert_bytes(0) == 256 * (256 // 32 * 17) + 256 * (256 // 32 * 34) + 256 * 210


def test_bigger_dims_plan_is_one_eighth_of_qwen3_30b():
    c = resolve_dims("qwen3moe", "Q4_K", QWEN3_30B_A3B_EIGHTH)
    plan = {n: s for n, s, _ in tensor_plan("qwen3moe", c, False)}
    assert plan["blk.5.ffn_down_exps.weight"] == (128, 2048, 768) and "blk.6.attn_q.weight" not in plan


@pytest.mark.parametrize("quantizer,qtype", [(quantize_q4_k, Q.Q4_K), (quantize_q5_k, Q.Q5_K), (quantize_q6_k, Q.Q6_K)])
def test_k_quantizers_round_trip_through_gguf(quantizer, qtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((8, 512)) * rng.uniform(0.01, 10, (8, 1))).astype(np.float32)
    packed = quantizer(x)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    assert packed.shape == (8, 512 // block * size) and packed.dtype == np.uint8
    y = dequantize(packed, qtype)
    bits = {Q.Q4_K: 4, Q.Q5_K: 5, Q.Q6_K: 6}[qtype]
    # error per element is at most about one quantization step of its sub-block
    step = (2 * np.abs(x).max(axis=1, keepdims=True)) / (2 ** bits - 1)
    assert np.all(np.abs(y - x) <= 1.1 * step)
    assert np.array_equal(dequantize(quantizer(np.zeros((1, 256), np.float32)), qtype), np.zeros((1, 256), np.float32))


def test_cli_synth_then_inspect(tmp_path, capsys):
    out = tmp_path / "s.gguf"
    assert main(["synth", "--arch", "qwen35moe", "--nextn", "--quant", "Q4_0", "--seed", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["arch"] == "qwen35moe" and r["has_data"] is True and len(r["layers"]) == 5 and r["layers"][4]["nextn"]
    assert r["recurrent_bytes_per_seq"] == 16896 and r["n_expert"] == 8 and r["n_expert_used"] == 2


@pytest.mark.parametrize("quantizer,qtype,levels", [(quantize_q2_k, Q.Q2_K, 3), (quantize_q3_k, Q.Q3_K, 7),
                                                    (quantize_iq4_nl, Q.IQ4_NL, 15), (quantize_iq4_xs, Q.IQ4_XS, 15)])
def test_low_bit_quantizers_round_trip_through_gguf(quantizer, qtype, levels):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((8, 512)) * rng.uniform(0.01, 10, (8, 1))).astype(np.float32)
    packed = quantizer(x)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    assert packed.shape == (8, 512 // block * size) and packed.dtype == np.uint8
    y = dequantize(packed, qtype)
    # error per element within about one step of the row's range over the type's levels (IQ4's table
    # steps are up to 24/127 of the block maximum: 1.6x a uniform 4-bit step)
    step = (2 * np.abs(x).max(axis=1, keepdims=True)) / levels
    assert np.all(np.abs(y - x) <= (1.6 if qtype in (Q.IQ4_NL, Q.IQ4_XS) else 1.1) * step)
    # better than a coin: the error is well below the signal
    assert np.abs(y - x).mean() < 0.5 * np.abs(x).mean()
    assert np.array_equal(dequantize(quantizer(np.zeros((1, 256), np.float32)), qtype), np.zeros((1, 256), np.float32))
    # the extreme of each 32 (IQ4_NL) is reproduced to f16 precision
    if qtype == Q.IQ4_NL:
        b = x.reshape(-1, 32)
        i = np.abs(b).argmax(1)
        np.testing.assert_allclose(y.reshape(-1, 32)[np.arange(len(i)), i], b[np.arange(len(i)), i], rtol=2**-10)
