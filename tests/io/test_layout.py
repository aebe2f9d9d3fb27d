"""Slice layouts from a GGUF's tensor table (refsim.io.layout), against gguf-py's reader."""

import os

import gguf
import numpy as np
import pytest

from refsim.errors import ConfigError
from refsim.io.layout import SPLIT_SLOTS, layout_from_model
from refsim.model import open_model, write_synthetic
from refsim.trace.format import TraceHeader


@pytest.fixture(scope="module")
def synth_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("layout") / "m.gguf"
    write_synthetic(path, "qwen3moe", quant="mixed", seed=3)
    return open_model(path)


def test_offsets_and_strides_are_the_tensor_tables(synth_model):
    lay = layout_from_model(synth_model)
    reader = gguf.GGUFReader(synth_model.path)            # an outside reader of the same table
    table = {t.name: t for t in reader.tensors}
    n_expert = synth_model.spec.n_expert
    assert lay.n_expert == n_expert and lay.file_size == os.path.getsize(synth_model.path)
    for il in range(synth_model.spec.n_layer):
        assert lay.slot_names[il] == SPLIT_SLOTS
        for p, suffix in enumerate(SPLIT_SLOTS):
            t = table[f"blk.{il}.{suffix}.weight"]
            assert lay.offsets[il, p] == t.data_offset
            assert lay.strides[il, p] * n_expert == t.n_bytes
        assert lay.expert_bytes[il] == synth_model.expert_bytes(il)
    # expert e's slice is where the model's own memory map reads it
    off = lay.slice_offsets(1, [2])[0, 2]
    raw = np.fromfile(synth_model.path, dtype=np.uint8, count=int(lay.strides[1, 2]), offset=int(off))
    assert (raw == synth_model.expert_raw("blk.1.ffn_down_exps.weight", 2).ravel()).all()


def test_data_start_shifts_every_offset_and_the_end(synth_model):
    base = layout_from_model(synth_model)
    h = synth_model.header
    moved = layout_from_model(synth_model, data_start=h.data_start + 4096 + 32)
    assert (moved.offsets - base.offsets == 4096 + 32).all()
    assert moved.file_size == base.file_size + 4096 + 32
    with pytest.raises(ConfigError, match="multiple of"):
        layout_from_model(synth_model, data_start=h.data_start + 1)
    with pytest.raises(ConfigError, match="power of two"):
        layout_from_model(synth_model, block=3000)


def test_header_only_twin_ends_where_its_data_would(tmp_path):
    from refsim.model import qwen3_30b_a3b_q4_k_m_twin
    m = open_model(qwen3_30b_a3b_q4_k_m_twin(tmp_path / "twin.gguf"))
    lay = layout_from_model(m, data_start=38400)
    # 18550716416 tensor bytes after the data start; the gate/up/down strides of the preamble
    assert lay.file_size == 38400 + 18550716416
    assert lay.strides[0].tolist() == [884736, 884736, 1290240]
    assert lay.strides[6].tolist() == [884736, 884736, 884736]
    assert lay.offsets[47, 2] + 128 * 1290240 == lay.file_size


def test_check_trace_refuses_another_model(synth_model):
    lay = layout_from_model(synth_model)
    n = synth_model.spec.n_layer
    eb = lay.expert_bytes[:n].copy()
    ok = TraceHeader("m.gguf", "qwen3moe", n, lay.n_expert, 2, eb, np.ones(n, np.int64))
    lay.check_trace(ok, "t.csv")
    eb[1] += 1
    bad = TraceHeader("m.gguf", "qwen3moe", n, lay.n_expert, 2, eb, np.ones(n, np.int64))
    with pytest.raises(ConfigError, match=r"t.csv: layer 1: .* the trace's preamble says"):
        lay.check_trace(bad, "t.csv")
