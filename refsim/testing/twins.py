"""Header-only twins of real models: the real tensor table (names, shapes, quant types), no
weights. For byte accounting at real widths (the memory ledger, the what-if terms) without the
real file.

Moved here from tests/cache/test_ledger.py (and examples/spec_study.py, which had the same
function) so that tests, examples and tools call one implementation.
"""

from __future__ import annotations

from refsim.model import synth


def qwen36_twin(path):
    """Header-only Qwen3.6-35B-A3B-like file at ``path``: real widths (llama-cpp-notes.md §3, slime
    numbers), 40 trunk layers + the nextn block, Q4_K_M-like types (``synth.mixed_type``). Its
    trunk token cycle is T = 581.25 MiB, the real Q4_K_M file's ``token_demand_MiB`` 581.2
    (shared/real-runs desktop summaries). Returns the path."""
    from gguf import GGMLQuantizationType as Q
    dims = dict(synth.DEFAULT_DIMS, n_layer_35=40, n_embd=2048, n_head=16, n_head_kv=2, head_dim=256,
                n_expert=256, n_expert_used=8, n_ff_exp=512, n_ff_shexp=512, n_vocab=248320, n_ctx=262144,
                ssm_conv=4, ssm_state=128, ssm_group=16, ssm_dt_rank=32, rope_dim=64,
                rope_sections=(11, 11, 10, 0), rope_base=1e7)
    tensors = [(n, s, Q.F32 if k != "w" else synth.mixed_type(n, 41))
               for n, s, k in synth.tensor_plan("qwen35moe", dims, True)]
    return synth.write_header_only(path, "qwen35moe",
                                   lambda w: synth._add_metadata(w, "qwen35moe", dims, True, vocab=False), tensors)
