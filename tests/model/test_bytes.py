"""Exact byte accounting: a hand-worked small model and the Qwen3-30B-A3B-Q4_K_M twin vs the engine."""

import json
from pathlib import Path

import pytest

from refsim.cli import main
from refsim.model import open_model, qwen3_30b_a3b_q4_k_m_twin, write_synthetic
from refsim.model.synth import use_more_bits
from refsim.testing.shared import shared_path, skip_reason

TRACE = shared_path("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")

# Engine facts (bmoe-engine.md 3.1): Q6_K ffn_down_exps -> 3059712 B, Q4_K -> 2654208 B; attn_v follows
# the same layers (Q6_K 860160 B vs Q4_K 589824 B), so dense_bytes is 11953152 or 11682816.
Q6_LAYERS = set(range(0, 6)) | set(range(8, 42, 3)) | set(range(42, 48))
EXPECTED = [(3059712, 11953152) if il in Q6_LAYERS else (2654208, 11682816) for il in range(48)]


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    return open_model(qwen3_30b_a3b_q4_k_m_twin(tmp_path_factory.mktemp("twin") / "qwen3-30b-a3b-q4_k_m.header.gguf"))


def test_use_more_bits_pattern_is_the_encoded_one():
    assert {il for il in range(48) if use_more_bits(il, 48)} == Q6_LAYERS
    assert len(Q6_LAYERS) == 24


def test_twin_is_header_only_and_reproduces_the_committed_pattern(twin):
    assert not twin.has_data
    assert [(lb.expert_bytes, lb.dense_bytes) for lb in twin.layers] == EXPECTED
    assert twin.spec.n_layer == 48 and twin.spec.n_expert == 128 and twin.spec.n_expert_used == 8
    # hand-worked: gate/up Q4_K [2048, 768]: 768 rows * 2048/256*144 = 884736 B each
    lb = twin.layers[0]
    # down Q6_K [768, 2048]: 2048 rows * 768/256*210 = 1290240 B
    assert lb.expert_bytes == 2 * 884736 + 1290240 == 3059712
    assert dict(lb.expert_types) == {"ffn_gate_exps": "Q4_K", "ffn_up_exps": "Q4_K", "ffn_down_exps": "Q6_K"}
    # T at the engine's k=6: 24*(3059712+2654208)*6 = 822804480 B = 784.6875 MiB ("T 785" in the findings)
    assert twin.t_bytes(6) == 822804480
    assert twin.bytes.kv_bytes_per_token == 48 * 2 * 2 * 512
    assert twin.bytes.recurrent_bytes_per_seq == 0
    # llama.cpp's log: "file size = 17.28 GiB"; tensor bytes alone are 17.2767 GiB
    assert round(twin.bytes.file_tensor_bytes / 2**30, 2) == 17.28


def test_twin_weight_access_is_refused(twin):
    from refsim.errors import ModelFormatError
    with pytest.raises(ModelFormatError, match="header-only"):
        twin.raw("blk.0.ffn_up_exps.weight")
    with pytest.raises(ModelFormatError, match="header-only"):
        twin.expert_raw("blk.0.ffn_up_exps.weight", 3)
    with pytest.raises(ModelFormatError, match="header-only"):
        twin.dequantize("output_norm.weight")


@pytest.mark.skipif(not TRACE.exists(), reason=skip_reason(TRACE))
def test_twin_matches_engine_trace_preamble(twin):
    pairs = []
    with open(TRACE) as f:
        for line in f:
            if not line.startswith("#"):
                break
            fields = dict(x.split("=", 1) for x in line[1:].split() if "=" in x)
            if "layer" in fields:
                pairs.append((int(fields["expert_bytes"]), int(fields["dense_bytes"])))
    assert len(pairs) == 48
    assert [(lb.expert_bytes, lb.dense_bytes) for lb in twin.layers] == pairs


def test_inspect_json_on_twin(twin, capsys):
    assert main(["inspect", twin.path, "--json", "-k", "6"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["arch"] == "qwen3moe" and r["n_layer"] == 48 and r["has_data"] is False
    assert [(x["expert_bytes"], x["dense_bytes"]) for x in r["layers"]] == EXPECTED
    assert r["t_mib"] == 784.6875 and r["kv_bytes_per_token"] == 98304 and r["recurrent_bytes_per_seq"] == 0


def test_inspect_table_says_header_only(twin, capsys):
    assert main(["inspect", twin.path]) == 0
    out = capsys.readouterr().out
    assert "header-only" in out and "3059712" in out and "11682816" in out


def test_hand_worked_small_qwen3moe_f32_and_q8_0(tmp_path):
    # dims: n_embd 64, 4 heads (2 kv) x 16, 8 experts of width 32, 2 layers, vocab 300
    m = open_model(write_synthetic(tmp_path / "f32.gguf", "qwen3moe", "F32"))
    assert [lb.expert_bytes for lb in m.layers] == [3 * 32 * 64 * 4] * 2          # 24576
    # norms 256+64+64+256, q 64x64x4, k/v 32x64x4, out 64x64x4, router 8x64x4
    assert [lb.dense_bytes for lb in m.layers] == [640 + 16384 + 8192 * 2 + 16384 + 2048] * 2
    m = open_model(write_synthetic(tmp_path / "q8.gguf", "qwen3moe", "Q8_0"))
    # Q8_0 rows of 64 -> 2 blocks x 34 = 68 B; of 32 -> 34 B
    assert m.expert_bytes(0) == 32 * 68 + 32 * 68 + 64 * 34 == 6528
    assert m.dense_bytes(1) == 64 * 68 + 32 * 68 * 2 + 64 * 68 + 640 + 2048 == 15744
    assert m.t_bytes() == 2 * 2 * 6528
    assert m.bytes.kv_bytes_per_token == 2 * 2 * (2 * 16) * 2                       # 2 layers, K+V, F16
    assert m.bytes.total_expert_bytes == 2 * 8 * 6528


def test_hand_worked_qwen35moe_with_nextn(tmp_path):
    m = open_model(write_synthetic(tmp_path / "q35.gguf", "qwen35moe", "F32", nextn=True))
    s = m.spec
    assert (s.n_layer, s.n_layer_all, s.nextn_predict_layers) == (4, 5, 1)
    assert s.recurrent_layers == (True, True, True, False) and s.attention_layers() == [3]
    assert [lb.is_nextn for lb in m.layers] == [False] * 4 + [True]
    assert all(lb.expert_bytes == 3 * 32 * 64 * 4 for lb in m.layers)
    # shared expert: gate_inp_shexp 64x4 + gate/up/down 32x64x4
    assert all(lb.shared_expert_bytes == 256 + 3 * 8192 for lb in m.layers)
    # conv 4*(4-1)*(64 + 2*2*16) + ssm 4*16*64 per recurrent layer, 3 layers
    assert m.bytes.recurrent_bytes_per_seq == 3 * (4 * 3 * 128 + 4 * 16 * 64) == 16896
    assert m.bytes.kv_bytes_per_token == 2 * 32 * 2 and m.bytes.kv_bytes_per_token_nextn == 2 * 32 * 2
    assert m.t_bytes() == 4 * 2 * 24576 and m.bytes.t_bytes(2, nextn=True) == 2 * 24576
    assert m.bytes.total_expert_bytes == 5 * 8 * 24576 and m.bytes.trunk_expert_bytes == 4 * 8 * 24576


def test_expert_raw_reads_exactly_that_slice(tmp_path):
    m = open_model(write_synthetic(tmp_path / "q.gguf", "qwen3moe", "Q4_0"))
    name = "blk.1.ffn_down_exps.weight"
    ti = m.tensor(name)
    stride = ti.n_bytes // 8
    full = m.raw(name).reshape(-1)
    for e in (0, 5, 7):
        sl = m.expert_raw(name, e)
        assert sl.shape == (64, 32 // 32 * 18)
        assert sl.tobytes() == full[e * stride:(e + 1) * stride].tobytes()
