"""tools/train_tiny_moe.py's torch graph is refsim's qwen3moe reference pass (skips without torch).

The training script checks this on its own model before it writes anything; here the same check
runs on a small model with weights scaled up so that attention, routing and the norms all matter
(random norm weights, logits of order 1-10), against an F32 GGUF read back by refsim.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from refsim.model.synth import _spm_vocab  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("train_tiny_moe", REPO / "tools" / "train_tiny_moe.py")
train = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train)


def test_torch_graph_equals_refsim_reference_pass(tmp_path):
    c = dict(train.CONFIG, n_layer=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_expert=8, n_expert_used=2,
             n_ff_exp=32, n_vocab=300, n_ctx=64)
    torch.manual_seed(3)
    model = train.build_model_class()(c)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            else:
                p.mul_(25.0)           # std 0.5: real attention patterns and decisive routes
    tokens = (np.arange(48) * 37 + 5) % 300
    res = train.agreement(model, _spm_vocab(300), tokens, str(tmp_path))
    assert res["max_rel_dlogit"] <= 1e-5, res
    assert res["argmax_equal"] == 1.0 and res["route_sets_equal"] == 1.0, res


SMALL35 = dict(n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_expert=8, n_expert_used=2, n_ff_exp=32,
               n_ff_shexp=32, n_vocab=300, n_ctx=64, ssm_state=16, ssm_group=2, ssm_dt_rank=4, rope_dim=8,
               rope_sections=(2, 1, 1, 0))
"""A small qwen35moe (3 delta-net layers, 1 attention layer, the MTP block) for the graph check."""


def _scaled_qwen35(seed: int):
    torch.manual_seed(seed)
    model = train.build_model_class("qwen35moe")(dict(train.CONFIG35, **SMALL35))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("A_log", "ssm_dt", "ssm_conv1d")):
                continue             # the delta net's own init (decays, dt bias, conv taps) is already O(1)
            if p.dim() == 1:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            else:
                p.mul_(25.0)
    return model


def test_qwen35moe_torch_graph_and_mtp_head_equal_refsim(tmp_path):
    """The qwen35moe torch model (chunked gated delta rule, gated attention, shared expert, MTP
    head) against refsim's token-by-token pass and ``mtp_decode`` on 48 tokens (3 chunks of 16).
    Measured: relative |Δlogit| 2.4e-5 (trunk) and 3.6e-5 (MTP head); the delta net's float32
    state accounts for it (a float64 torch model differs from refsim as much). Reading key head
    ``h // 2`` instead of ``h % 2`` (``repeat_interleave`` for the tiled ``repeat``) gives 1.2."""
    tokens = (np.arange(48) * 37 + 5) % 300
    res = train.agreement(_scaled_qwen35(3), _spm_vocab(300), tokens, str(tmp_path))
    assert res["max_rel_dlogit"] <= 1e-4 and res["mtp_max_rel_dlogit"] <= 1e-4, res
    assert res["argmax_equal"] == 1.0 and res["route_sets_equal"] == 1.0, res
    assert res["mtp_argmax_equal"] == 1.0 and res["mtp_route_sets_equal"] == 1.0, res
