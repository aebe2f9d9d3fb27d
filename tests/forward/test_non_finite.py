"""NaN/inf in a model never becomes printed tokens: bad metadata is refused when the file is
opened, a non-finite logit stops the run with the file and the position named."""

import numpy as np
import pytest

from refsim.errors import ModelFormatError
from refsim.model import open_model, write_synthetic
from refsim.model.spec import ModelSpec
from refsim.spec.forward_target import ForwardTarget


def test_non_finite_metadata_is_refused(tiny_models):
    md = dict(tiny_models["F32"].metadata)
    for key, value in (("qwen3moe.attention.layer_norm_rms_epsilon", float("nan")),
                       ("qwen3moe.rope.freq_base", float("inf")),
                       ("qwen3moe.attention.layer_norm_rms_epsilon", 0.0)):
        bad = dict(md, **{key: value})
        with pytest.raises(ModelFormatError, match=rf"m.gguf: key {key} is {value!r}, expected a finite number > 0"):
            ModelSpec.from_metadata(bad, "m.gguf", token_embd_rows=300)


def test_a_nan_weight_stops_the_run_naming_the_position(tmp_path):
    path = write_synthetic(tmp_path / "nan.gguf", "qwen3moe", "F32", seed=5)
    t = open_model(path).tensor("blk.1.ffn_down_exps.weight")
    with open(path, "r+b") as fh:                  # every expert's first value of layer 1: NaN
        stride = t.n_bytes // t.shape_np[0]
        for e in range(t.shape_np[0]):
            fh.seek(t.data_offset + e * stride)
            fh.write(np.float32(np.nan).tobytes())
    target = ForwardTarget(path)
    with pytest.raises(ModelFormatError, match=r"nan.gguf: decode 0 produced a non-finite logit \(nan at "
                                               r"position 2, token id 0\)"):
        target.prefill(np.array([1, 5, 7]))
