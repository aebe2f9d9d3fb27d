"""Bad input: every malformed file gives ModelFormatError naming the file; nothing crashes or hangs."""

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from gguf import GGMLQuantizationType as Q

from refsim.cli import main
from refsim.errors import ModelFormatError
from refsim.model import open_model, write_header_only, write_synthetic
from refsim.model.synth import _add_metadata, resolve_dims, tensor_plan


def _header_only(path, drop_key=None, drop_tensor=None, expert_count=None, arch_name=None, n_expert_tensors=None):
    """A header-only qwen3moe (default small dims) with one thing broken."""
    c = resolve_dims("qwen3moe", "F32", None)

    def meta(w):
        _add_metadata(w, "qwen3moe", c, nextn=False, vocab=False)
        if expert_count is not None:
            w.kv_data[0]["qwen3moe.expert_count"].value = expert_count
        if drop_key:
            del w.kv_data[0][drop_key]
        if arch_name:
            w.kv_data[0]["general.architecture"].value = arch_name

    dims = dict(c, n_expert=n_expert_tensors or c["n_expert"])
    tensors = [(n, s, Q.F32) for n, s, _ in tensor_plan("qwen3moe", dims, False) if n != drop_tensor]
    return write_header_only(path, "qwen3moe", meta, tensors)


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    d = tmp_path_factory.mktemp("valid")
    return {"data": open(write_synthetic(d / "q8.gguf", "qwen3moe", "Q8_0"), "rb").read(),
            "header": open(_header_only(d / "h.gguf"), "rb").read()}


def _open_bytes(tmp_path, data, name="bad.gguf"):
    p = tmp_path / name
    p.write_bytes(data)
    return open_model(p), p


def test_header_only_baseline_opens(tmp_path, valid):
    m, _ = _open_bytes(tmp_path, valid["header"])
    assert not m.has_data and m.spec.n_expert == 8


@pytest.mark.parametrize("cut", [0, 3, 7, 20, 100, 1000])
def test_truncated_header(tmp_path, valid, cut):
    with pytest.raises(ModelFormatError, match="bad.gguf"):
        _open_bytes(tmp_path, valid["data"][:cut])


def test_truncated_data_section(tmp_path, valid):
    with pytest.raises(ModelFormatError, match=r"bad.gguf: tensor .* lies outside the file"):
        _open_bytes(tmp_path, valid["data"][:-100])


def test_wrong_magic(tmp_path, valid):
    with pytest.raises(ModelFormatError, match="bad.gguf: not a GGUF file"):
        _open_bytes(tmp_path, b"GGML" + valid["data"][4:])


@pytest.mark.parametrize("version", [1, 4, 99])
def test_unsupported_version(tmp_path, valid, version):
    with pytest.raises(ModelFormatError, match=f"unsupported GGUF version {version}"):
        _open_bytes(tmp_path, valid["data"][:4] + struct.pack("<I", version) + valid["data"][8:])


def _tensor_type_offset(data: bytes, name: bytes) -> int:
    pos = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    n_dims = struct.unpack_from("<I", data, pos)[0]
    return pos + 4 + 8 * n_dims


def test_unknown_ggml_type(tmp_path, valid):
    data = bytearray(valid["data"])
    struct.pack_into("<I", data, _tensor_type_offset(data, b"output_norm.weight"), 77)
    with pytest.raises(ModelFormatError, match="'output_norm.weight' has unknown ggml type 77"):
        _open_bytes(tmp_path, bytes(data))


def test_tensor_offset_outside_file(tmp_path, valid):
    # an offset past the end also breaks llama.cpp's running-sum rule, which is checked first
    data = bytearray(valid["data"])
    struct.pack_into("<Q", data, _tensor_type_offset(data, b"output_norm.weight") + 4, 1 << 40)
    with pytest.raises(ModelFormatError, match=r"'output_norm.weight' has offset 1099511627776 .*, expected \d+"):
        _open_bytes(tmp_path, bytes(data))


def test_missing_required_key(tmp_path):
    with pytest.raises(ModelFormatError, match="missing required key.*qwen3moe.expert_used_count"):
        open_model(_header_only(tmp_path / "k.gguf", drop_key="qwen3moe.expert_used_count"))


def test_missing_required_tensor(tmp_path):
    with pytest.raises(ModelFormatError, match=r"k.gguf: missing required tensor.*blk.1.attn_k.weight"):
        open_model(_header_only(tmp_path / "k.gguf", drop_tensor="blk.1.attn_k.weight"))


def test_expert_count_disagrees_with_tensor_shape(tmp_path):
    with pytest.raises(ModelFormatError, match="expert count"):
        open_model(_header_only(tmp_path / "e.gguf", n_expert_tensors=4))


def test_unsupported_architecture(tmp_path):
    with pytest.raises(ModelFormatError, match=r"unsupported architecture 'llama' \(supported: qwen3moe, qwen35moe, gemma3\)"):
        open_model(_header_only(tmp_path / "a.gguf", arch_name="llama"))


def test_missing_file_and_cli_error(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nope.gguf")]) == 1
    assert "nope.gguf: cannot open" in capsys.readouterr().err


@st.composite
def mutations(draw):
    """A list of edits: ('flip', pos, byte), ('u64', pos, value) or ('cut', pos), simplest first."""
    edits = []
    while draw(st.booleans()) or not edits:
        kind = draw(st.sampled_from(["flip", "u64", "cut"]))
        pos = draw(st.floats(0, 1, exclude_max=True))
        if kind == "flip":
            edits.append(("flip", pos, draw(st.integers(0, 255))))
        elif kind == "u64":
            edits.append(("u64", pos, draw(st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**40, 2**63, 2**64 - 1]))))
        else:
            edits.append(("cut", pos))
        if len(edits) >= 4:
            break
    return edits


def _apply(data: bytes, edits, header_len: int) -> bytes:
    out = bytearray(data)
    for e in edits:
        pos = int(e[1] * min(len(out), header_len))  # aim at the header, where the lengths are
        if e[0] == "flip" and pos < len(out):
            out[pos] = e[2]
        elif e[0] == "u64" and pos + 8 <= len(out):
            struct.pack_into("<Q", out, pos, e[2])
        elif e[0] == "cut":
            del out[pos:]
    return bytes(out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=mutations(), which=st.sampled_from(["header", "data"]))
def test_mutated_headers_give_clean_errors(tmp_path, valid, edits, which):
    data = valid[which]
    header_len = len(valid["header"])
    bad = _apply(data, edits, header_len)
    try:
        m, _ = _open_bytes(tmp_path, bad)
    except ModelFormatError as exc:
        assert "bad.gguf" in str(exc)
    else:
        assert m.spec.arch == "qwen3moe"
        if m.has_data:
            name = "blk.0.ffn_down_exps.weight"
            if name in m.tensors:
                try:
                    m.dequantize(name)
                except ModelFormatError:
                    pass


def test_a_fifo_or_folder_is_named_not_called_an_empty_file(tmp_path, capsys):
    # `cat model.gguf | refsim memory /dev/stdin` and a FIFO said "empty file, not a GGUF"; the
    # reader maps the file, so a pipe is refused for what it is, before any open (no block on a
    # FIFO without a writer)
    fifo = tmp_path / "m.gguf"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        with pytest.raises(ModelFormatError, match=r": not a regular file \(a FIFO, pipe, device or "
                                                   r"folder\); expected a GGUF file"):
            open_model(path)
    assert main(["memory", str(fifo)]) == 1
    assert capsys.readouterr().err == (f"refsim memory: error: {fifo}: not a regular file (a FIFO, pipe, "
                                       "device or folder); expected a GGUF file, which is read by mapping it\n")
