"""Issue 12 section C: what the forward pass and the tokenizer rely on is checked when a GGUF is
opened, with llama.cpp's loader rules; each defect has its minimal input here.

Inputs are refsim's own synthetic seeds with one field rewritten by the raw writer
(:mod:`refsim.testing.gguf_files`, byte-identical to gguf-py's writer on an unedited seed, see
``test_raw_writer_reproduces_the_seed``). Expected numbers are worked by hand from the seed's dims
(qwen3moe: n_embd 64, 4 heads, 2 KV heads, head_dim 16, 8 experts, n_ff_exp 32, vocab 300).
"""

import numpy as np
import pytest
from gguf import GGUFEndian, GGUFReader, GGUFValueType as T, GGUFWriter

from refsim.cli import main
from refsim.errors import ModelFormatError
from refsim.model import open_model, read_header, write_synthetic
from refsim.model.spec import ModelSpec
from refsim.model.tokenizer import Tokenizer
from refsim.testing.gguf_files import KV, from_file, mutation_sites, to_bytes

Q35_DIMS = dict(n_embd=32, head_dim=8, n_ff_exp=32, n_ff_shexp=32, n_expert=4, ssm_state=8, rope_dim=4,
                rope_sections=(1, 1, 0, 0))


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    d = tmp_path_factory.mktemp("seeds")
    return {"q3": write_synthetic(d / "q3.gguf", "qwen3moe", "F32", seed=1),
            "q35": write_synthetic(d / "q35.gguf", "qwen35moe", "F32", nextn=True, seed=2, dims=Q35_DIMS)}


def _write(tmp_path, f, name="bad.gguf"):
    p = tmp_path / name
    p.write_bytes(to_bytes(f))
    return str(p)


def _refused(path, pattern):
    """open_model, inspect and memory all refuse ``path`` with one line matching ``pattern``."""
    with pytest.raises(ModelFormatError, match=pattern) as exc:
        open_model(path)
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)
    return str(exc.value)


def _cli_one_line(capsys, argv, path):
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(path) in err
    return err


def test_raw_writer_reproduces_the_seed(seeds):
    for p in seeds.values():
        assert to_bytes(from_file(p)) == open(p, "rb").read()


# --- C1: metadata value types as llama.cpp enforces them ------------------------------------

@pytest.mark.parametrize("key, kv, expected", [
    ("tokenizer.ggml.tokens", KV("tokenizer.ggml.tokens", T.STRING, "<unk>"),
     r"key tokenizer.ggml.tokens has type str, expected arr\[str\]"),
    ("tokenizer.ggml.bos_token_id", KV("tokenizer.ggml.bos_token_id", T.STRING, "1"),
     r"key tokenizer.ggml.bos_token_id has type str, expected u32"),
    ("qwen3moe.expert_used_count", KV("qwen3moe.expert_used_count", T.BOOL, True),      # was taken as 1
     r"key qwen3moe.expert_used_count has type bool, expected u32"),
    ("qwen3moe.attention.layer_norm_rms_epsilon",                                          # a UINT32-typed float
     KV("qwen3moe.attention.layer_norm_rms_epsilon", T.UINT32, 1),
     r"key qwen3moe.attention.layer_norm_rms_epsilon has type u32, expected f32"),
    ("qwen3moe.attention.layer_norm_rms_epsilon",                                          # an inf 1-element array
     KV("qwen3moe.attention.layer_norm_rms_epsilon", T.ARRAY, [float("inf")], T.FLOAT32),
     r"key qwen3moe.attention.layer_norm_rms_epsilon has type arr\[f32\], expected f32"),
    ("qwen3moe.attention.head_count", KV("qwen3moe.attention.head_count", T.ARRAY, [float("inf")], T.FLOAT32),
     r"key qwen3moe.attention.head_count has type arr\[f32\], expected arr\[u32\] or arr\[i32\] or arr\[bool\] "
     r"of 2 elements"),
    ("qwen3moe.context_length", KV("qwen3moe.context_length", T.UINT64, 256),
     r"key qwen3moe.context_length has type u64, expected u32"),
    ("qwen3moe.rope.freq_base", KV("qwen3moe.rope.freq_base", T.FLOAT64, 10000.0),
     r"key qwen3moe.rope.freq_base has type f64, expected f32"),
    ("general.architecture", KV("general.architecture", T.ARRAY, ["qwen3moe"], T.STRING),
     r"key general.architecture has type arr\[str\], expected str"),
    ("tokenizer.ggml.add_bos_token", KV("tokenizer.ggml.add_bos_token", T.UINT8, 1),
     r"key tokenizer.ggml.add_bos_token has type u8, expected bool"),
    ("tokenizer.ggml.token_type", KV("tokenizer.ggml.token_type", T.ARRAY, [1] * 300, T.UINT32),
     r"key tokenizer.ggml.token_type has type arr\[u32\], expected arr\[i32\]"),
    # was accepted: llama.cpp reads the scores as a raw float array, so i32 scores are the floats
    # of their bits there; refsim took them as the integers
    ("tokenizer.ggml.scores", KV("tokenizer.ggml.scores", T.ARRAY, [-i for i in range(300)], T.INT32),
     r"key tokenizer.ggml.scores has type arr\[i32\], expected arr\[f32\]"),
])
def test_a_key_of_the_wrong_type_names_key_type_and_expected_type(tmp_path, seeds, capsys, key, kv, expected):
    f = from_file(seeds["q3"])
    f.set(kv.key, kv.vtype, kv.value, kv.etype)
    p = _write(tmp_path, f)
    _refused(p, expected)
    for cmd in ("inspect", "memory"):
        assert key in _cli_one_line(capsys, [cmd, p], p)


def test_a_nested_array_is_refused_at_its_byte(tmp_path, seeds):
    f = from_file(seeds["q35"])
    f.set("qwen35moe.rope.dimension_sections", T.ARRAY, [(T.INT32, [1, 1]), (T.INT32, [0, 0])], T.ARRAY)
    p = _write(tmp_path, f)
    msg = _refused(p, r"value of 'qwen35moe.rope.dimension_sections' is an array of arrays .*\(at byte \d+")
    # the byte is just after the element type u32 gguf-py's reader sees for that key in the seed
    site = next(s for s in mutation_sites(seeds["q35"]) if s.what == "qwen35moe.rope.dimension_sections element type")
    assert f"at byte {site.offset + 4}," in msg


def test_per_layer_arrays_as_llama_cpp_reads_them(tmp_path, seeds):
    """``head_count_kv`` may be one u32 or an array of one value per block (get_key_or_arr)."""
    base = open_model(seeds["q3"]).spec
    f = from_file(seeds["q3"])
    f.set("qwen3moe.attention.head_count_kv", T.ARRAY, [2, 2], T.INT32)
    assert open_model(_write(tmp_path, f, "arr.gguf")).spec == base
    f.set("qwen3moe.attention.head_count_kv", T.ARRAY, [2, 2, 2], T.INT32)
    _refused(_write(tmp_path, f), r"key qwen3moe.attention.head_count_kv has 3 elements, expected 2")
    f.set("qwen3moe.attention.head_count_kv", T.ARRAY, [2, 1], T.INT32)
    _refused(_write(tmp_path, f), r"key qwen3moe.attention.head_count_kv differs by layer \(\[2, 1\]\)")


def test_dimension_sections_scalar_is_repeated_and_a_short_array_refused(tmp_path, seeds):
    f = from_file(seeds["q35"])
    f.set("qwen35moe.rope.dimension_sections", T.INT32, 1)
    assert open_model(_write(tmp_path, f, "s.gguf")).spec.rope_sections == (1, 1, 1, 1)
    f.set("qwen35moe.rope.dimension_sections", T.ARRAY, [1, 1, 0], T.INT32)
    _refused(_write(tmp_path, f), r"key qwen35moe.rope.dimension_sections has 3 elements, expected 4")


@pytest.mark.parametrize("sections, ok", [
    ((4, 2, 2, 0), True),                  # sum 8 = key_length: the largest ggml accepts
    ((1, 1, 0, 0), True),                  # the seed's: pairs wrap modulo 2
    ((5, 2, 2, 0), False),                 # sum 9 > key_length 8
    ((2**31 - 1, 0, 0, 0), False),         # was accepted (the huge value of the mutation campaign)
    ((0, 0, 0, 0), False),                 # ggml divides by the sum
])
def test_dimension_sections_are_bounded_by_the_head(tmp_path, seeds, sections, ok):
    f = from_file(seeds["q35"])
    f.set("qwen35moe.rope.dimension_sections", T.ARRAY, list(sections), T.INT32)
    p = _write(tmp_path, f)
    if ok:
        assert open_model(p).spec.rope_sections == sections
    else:
        _refused(p, rf"qwen35moe.rope.dimension_sections \[{', '.join(map(str, sections))}\]: expected 4 values "
                    rf">= 0 with a sum in 1..key_length 8 \(ggml's ggml_mrope_cache_init")


def test_dimension_sections_as_a_bool_array_are_refused(tmp_path, seeds):
    """Found by an independent mutation campaign: an arr[bool] was read as sections (1, 1, 1, 0).
    llama.cpp's get_arr takes only int32/uint32 (or float32) arrays; a scalar i32 is repeated
    4 times, as get_key_or_arr does."""
    f = from_file(seeds["q35"])
    f.set("qwen35moe.rope.dimension_sections", T.ARRAY, [True, True, True, False], T.BOOL)
    _refused(_write(tmp_path, f), r"qwen35moe.rope.dimension_sections")
    g = from_file(seeds["q35"])
    g.set("qwen35moe.rope.dimension_sections", T.INT32, 2)
    assert open_model(_write(tmp_path, g)).spec.rope_sections == (2, 2, 2, 2)


@pytest.mark.parametrize("eps", [3.4e38, 1.0])
def test_an_absurd_rms_epsilon_is_refused(tmp_path, seeds, eps):
    # 3.4e38 was accepted (every RMSNorm then returns ~0); the bound is < 1
    f = from_file(seeds["q3"])
    f.set("qwen3moe.attention.layer_norm_rms_epsilon", T.FLOAT32, eps)
    _refused(_write(tmp_path, f), r"key qwen3moe.attention.layer_norm_rms_epsilon is [0-9.e+]+, expected a "
                                  r"finite number > 0 and < 1 \(real models use 1e-6..1e-5")


def test_in_memory_metadata_still_reads_with_inferred_types(seeds):
    """Metadata built in memory (no types) infers them from the values; a float eps that is 0 in
    float32 is refused (it would divide by zero in every RMSNorm)."""
    h = read_header(seeds["q3"])
    assert ModelSpec.from_metadata(dict(h.metadata), "m.gguf", 300) == open_model(seeds["q3"]).spec
    bad = dict(h.metadata, **{"qwen3moe.attention.layer_norm_rms_epsilon": 1e-50})
    with pytest.raises(ModelFormatError, match=r"m.gguf: key qwen3moe.attention.layer_norm_rms_epsilon is 1e-50, "
                                               r"expected a finite number > 0"):
        ModelSpec.from_metadata(bad, "m.gguf", 300)


# --- C2: every tensor the forward pass reads, shape against the hparams ----------------------

def test_attn_output_declared_1d_is_refused_before_any_number_is_printed(tmp_path, seeds, capsys):
    """The issue's case: ``blk.1.attn_output`` declared [64] instead of [64, 64] changed dense_bytes
    and the generated tokens with exit 0."""
    f = from_file(seeds["q3"])
    t = f.tensor("blk.1.attn_output.weight")
    t.ne, t.data = (64,), t.data[:64 * 4]
    p = _write(tmp_path, f)
    _refused(p, r"tensor 'blk.1.attn_output.weight' has shape \[64\], expected \[64, 64\] \(from the qwen3moe hparams\)")
    for cmd in (["inspect", p], ["memory", p], ["run", p, "-n", "2", "--prompt-tokens", "1,2"]):
        assert "blk.1.attn_output.weight" in _cli_one_line(capsys, cmd, p)


# (tensor, new ne, expected ne): D=64, H*hd=64, KV*hd=32, E=8, F=32, V=300 (qwen3moe seed);
# D=32, 2*H*hd=64, KV*hd=16, C=2*2*8+4*8=64, Hv=4, Dv=8, S=32 (qwen35moe seed, MTP block 4)
SHAPES = [
    ("q3", "token_embd.weight", (64, 299), "[64, 300]"),
    ("q3", "output.weight", (64, 301), "[64, 300]"),
    ("q3", "output_norm.weight", (32,), "[64]"),
    ("q3", "blk.0.attn_norm.weight", (64, 1), "[64]"),
    ("q3", "blk.0.attn_q.weight", (64, 32), "[64, 64]"),
    ("q3", "blk.1.attn_k.weight", (64, 64), "[64, 32]"),
    ("q3", "blk.1.attn_v.weight", (32, 64), "[64, 32]"),
    ("q3", "blk.0.attn_q_norm.weight", (32,), "[16]"),
    ("q3", "blk.0.attn_k_norm.weight", (8,), "[16]"),
    ("q3", "blk.1.ffn_norm.weight", (128,), "[64]"),
    ("q3", "blk.0.ffn_up_exps.weight", (64, 64, 8), "[64, 32, 8]"),
    ("q3", "blk.0.ffn_down_exps.weight", (32, 32, 8), "[32, 64, 8]"),
    ("q35", "blk.0.attn_qkv.weight", (32, 32), "[32, 64]"),
    ("q35", "blk.0.attn_gate.weight", (32, 16), "[32, 32]"),
    ("q35", "blk.1.ssm_conv1d.weight", (8, 64), "[4, 64]"),
    ("q35", "blk.2.ssm_beta.weight", (32, 8), "[32, 4]"),
    ("q35", "blk.2.ssm_alpha.weight", (32, 2), "[32, 4]"),
    ("q35", "blk.0.ssm_dt.bias", (8,), "[4]"),
    ("q35", "blk.0.ssm_a", (2,), "[4]"),
    ("q35", "blk.1.ssm_norm.weight", (16,), "[8]"),
    ("q35", "blk.0.ssm_out.weight", (64, 32), "[32, 32]"),
    ("q35", "blk.3.attn_q.weight", (32, 32), "[32, 64]"),
    ("q35", "blk.3.attn_output.weight", (32, 64), "[32, 32]"),
    ("q35", "blk.2.ffn_gate_shexp.weight", (32, 64), "[32, 32]"),
    ("q35", "blk.2.ffn_down_shexp.weight", (64, 32), "[32, 32]"),
    ("q35", "blk.1.ffn_gate_inp_shexp.weight", (64,), "[32] or [32, 1]"),
    ("q35", "blk.4.nextn.eh_proj.weight", (32, 32), "[64, 32]"),
    ("q35", "blk.4.nextn.enorm.weight", (64,), "[32]"),
    ("q35", "blk.4.nextn.hnorm.weight", (16,), "[32]"),
    ("q35", "blk.4.nextn.shared_head_norm.weight", (8,), "[32]"),
    ("q35", "blk.4.attn_k_norm.weight", (4,), "[8]"),
]


@pytest.mark.parametrize("seed, name, ne, expected", SHAPES)
def test_every_forward_tensor_shape_is_checked_at_open(tmp_path, seeds, seed, name, ne, expected):
    f = from_file(seeds[seed])
    t = f.tensor(name)
    t.ne = ne
    t.data = (t.data + bytes(t.n_bytes))[:t.n_bytes]
    exp = expected.replace("[", r"\[").replace("]", r"\]")
    _refused(_write(tmp_path, f), rf"tensor '{name}' has shape \[.*\], expected {exp}")


@pytest.mark.parametrize("name, qtype, type_name", [
    ("blk.0.attn_norm.weight", 26, "I32"),          # was refused only when the kernel ran
    ("output_norm.weight", 24, "I8"),
    ("blk.1.attn_q.weight", 28, "F64"),
])
def test_a_tensor_of_a_non_weight_type_is_refused_at_open(tmp_path, seeds, capsys, name, qtype, type_name):
    f = from_file(seeds["q3"])
    t = f.tensor(name)
    t.qtype = qtype
    t.data = (t.data * 2)[:t.n_bytes]
    p = _write(tmp_path, f)
    _refused(p, rf"tensor '{name}' has ggml type {type_name}, expected a weight type \(float or quantized")
    for cmd in ("inspect", "memory"):
        assert name in _cli_one_line(capsys, [cmd, p], p)


def test_an_unknown_or_renamed_tensor_is_refused(tmp_path, seeds):
    """A renamed optional tensor would silently switch the output to the tied embedding."""
    f = from_file(seeds["q3"])
    f.tensor("output.weight").name = "outpuu.weight"
    _refused(_write(tmp_path, f), r"tensor\(s\) 'outpuu.weight' are not part of a qwen3moe model with block_count 2")


def test_arch_rules_the_passes_rely_on_are_checked_at_open(tmp_path, seeds):
    f = from_file(seeds["q3"])
    f.set("qwen3moe.rope.dimension_count", T.UINT32, 8)
    _refused(_write(tmp_path, f), r"qwen3moe: needs qwen3moe.rope.dimension_count == attention.key_length == "
                                  r"value_length, got 8, 16, 16")
    g = from_file(seeds["q35"])
    g.set("qwen35moe.ssm.group_count", T.UINT32, 3)
    _refused(_write(tmp_path, g), r"qwen35moe.ssm.\* conv_kernel 4, state_size 8, group_count 3, time_step_rank 4, inner_size 32: need .*"
                                  r"time_step_rank % group_count == 0")


# --- C3: layout, bounds, byte order --------------------------------------------------------

def test_offsets_must_be_the_running_padded_sum(tmp_path, seeds):
    """Two tensors swapped in the data section (offsets still disjoint and aligned) were accepted;
    llama.cpp's gguf.cpp refuses any offset that is not the running padded sum."""
    f = from_file(seeds["q3"])
    sizes = [-(-t.n_bytes // 32) * 32 for t in f.tensors]
    offs = list(np.cumsum([0] + sizes[:-1]))
    offs[3], offs[4] = offs[4], offs[3]                 # attn_norm / attn_q of block 0, in file order
    f.offsets = [int(o) for o in offs]
    p = _write(tmp_path, f)
    name = f.tensors[3].name
    site = next(s for s in mutation_sites(seeds["q3"]) if s.what == f"tensor {name} offset")
    _refused(p, rf"tensor '{name}' has offset {offs[3]} \(u64 at byte {site.offset}\), expected {offs[4]}: ")


def test_a_file_ending_inside_the_padding_is_truncated_not_header_only(tmp_path, seeds):
    data = open(seeds["q3"], "rb").read()
    r = GGUFReader(seeds["q3"])
    data_start = int(r.tensors[0].data_offset)           # gguf-py's view of where the data section begins
    infos_end = max(s.offset + s.size for s in mutation_sites(seeds["q3"]) if s.dtype != "data")
    assert infos_end < data_start - 1                     # this seed has padding to cut into
    for cut in (infos_end, data_start):                   # header-only: nothing of the data section
        (tmp_path / "h.gguf").write_bytes(data[:cut])
        assert not open_model(tmp_path / "h.gguf").has_data
    (tmp_path / "bad.gguf").write_bytes(data[:infos_end + 1])
    _refused(tmp_path / "bad.gguf", rf"truncated GGUF: the file ends at byte {infos_end + 1}, inside the padding "
                                    rf"before the data section at byte {data_start}")


@pytest.mark.parametrize("value", [0])
def test_context_length_zero_is_refused(tmp_path, seeds, value):
    f = from_file(seeds["q3"])
    f.set("qwen3moe.context_length", T.UINT32, value)
    _refused(_write(tmp_path, f), r"qwen3moe.context_length must be > 0, got 0")


def test_big_endian_is_named_as_big_endian(tmp_path, seeds):
    f = from_file(seeds["q3"])
    f.endian = ">"
    _refused(_write(tmp_path, f), r"big-endian GGUF \(version field 0x03000000 is version 3 byte-swapped\)")
    # gguf-py's own big-endian writer (an outside check that the raw writer's byte order is right)
    p = tmp_path / "gguf_py_be.gguf"
    w = GGUFWriter(str(p), "qwen3moe", endianess=GGUFEndian.BIG)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    _refused(p, r"big-endian GGUF \(version field 0x03000000 is version 3")


def test_over_long_name_and_empty_key(tmp_path, seeds):
    f = from_file(seeds["q3"])
    f.tensor("output.weight").name = "o" * 64
    _refused(_write(tmp_path, f), r"tensor #2 name 'o+' \(at byte \d+\) is 64 bytes, expected < 64 \(GGML_MAX_NAME\)")
    g = from_file(seeds["q3"])
    g.kv.insert(1, KV("", T.UINT32, 1))
    _refused(_write(tmp_path, g), r"key #1 is empty")


# --- C4: the tokenizer, at open time -------------------------------------------------------
# synthetic vocab: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF> (BYTE), 259.. '▁a', '▁b', ...

def _vocab_case(f, case):
    toks = f.get("tokenizer.ggml.tokens").value
    if case == "duplicate":
        toks[299] = toks[259]
        return r"key tokenizer.ggml.tokens: duplicate piece '▁a' at indices 259 and 299"
    if case == "byte_typed_normal":
        f.get("tokenizer.ggml.token_type").value[259] = 6
        return r"key tokenizer.ggml.token_type\[259\] is BYTE \(6\) but the piece is '▁a', expected '<0xXX>'"
    if case == "empty":
        f.get("tokenizer.ggml.tokens").value = []
        return r"key tokenizer.ggml.tokens is empty"
    if case == "empty_piece":
        toks[260] = ""
        return r"key tokenizer.ggml.tokens\[260\] is an empty piece"
    if case == "scores_short":
        f.get("tokenizer.ggml.scores").value = f.get("tokenizer.ggml.scores").value[:299]
        return r"tokenizer.ggml.tokens has 300 entries but tokenizer.ggml.scores has 299; expected equal lengths"
    if case == "types_long":
        f.get("tokenizer.ggml.token_type").value.append(1)
        return r"tokenizer.ggml.tokens has 300 entries but tokenizer.ggml.token_type has 301"
    if case == "nan_score":
        f.get("tokenizer.ggml.scores").value[270] = float("nan")
        return r"key tokenizer.ggml.scores\[270\] is nan, expected a finite merge score"
    if case == "bos_out_of_range":
        f.set("tokenizer.ggml.bos_token_id", T.UINT32, 300)
        return r"key tokenizer.ggml.bos_token_id = 300 is not a token id: tokenizer.ggml.tokens has 300 tokens \(0..299\)"
    if case == "token_type_2_32_minus_1":        # was accepted; llama.cpp reads it as UNDEFINED
        f.get("tokenizer.ggml.token_type").value[265] = -1      # 0xFFFFFFFF as an i32
        return (r"key tokenizer.ggml.token_type\[265\] is -1, expected a llama.cpp token type 0..6 \(UNDEFINED, "
                r"NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE")
    if case == "token_type_7":
        f.get("tokenizer.ggml.token_type").value[3] = 7
        return r"key tokenizer.ggml.token_type\[3\] is 7, expected a llama.cpp token type 0..6"
    if case == "eos_wrong_type":
        f.set("tokenizer.ggml.eos_token_id", T.INT32, -1)
        return r"key tokenizer.ggml.eos_token_id has type i32, expected u32"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["duplicate", "byte_typed_normal", "empty", "empty_piece", "scores_short",
                                  "types_long", "nan_score", "bos_out_of_range", "eos_wrong_type",
                                  "token_type_2_32_minus_1", "token_type_7"])
def test_vocabulary_defects_are_one_line_errors_at_open(tmp_path, seeds, capsys, case):
    f = from_file(seeds["q3"])
    pattern = _vocab_case(f, case)
    p = _write(tmp_path, f)
    _refused(p, pattern)
    for cmd in ("inspect", "memory"):
        _cli_one_line(capsys, [cmd, p], p)


def test_sentencepiece_refusals_become_one_line_errors(tmp_path, seeds):
    """A vocabulary llama.cpp loads but SentencePiece cannot hold (a NUL in a piece) is a
    ModelFormatError naming the file, never sentencepiece's RuntimeError."""
    f = from_file(seeds["q3"])
    f.get("tokenizer.ggml.tokens").value[261] = "a\x00b"
    m = open_model(_write(tmp_path, f))
    with pytest.raises(ModelFormatError, match=r"bad.gguf: SentencePiece refuses the vocabulary: .*null"):
        Tokenizer.from_model(m)


# --- C5 (a type refsim has no kernel for): tests/kernels/test_new_types.py (NVFP4, since Q4_1 has
# a kernel now)


def test_a_bool_array_reads_as_llama_cpp_does(tmp_path, seeds):
    """gguf.cpp reads a bool as an int8 and takes ``!= 0``: byte 2 is True, as gguf-py's reader says."""
    f = from_file(seeds["q35"])
    f.set("qwen35moe.attention.recurrent_layers", T.ARRAY, [1, 2, 255, 0, 0], T.BOOL)
    p = _write(tmp_path, f)
    s = open_model(p).spec
    assert s.recurrent_layers == (True, True, True, False)     # the MTP block's entry is not used
    raw = GGUFReader(p).fields["qwen35moe.attention.recurrent_layers"]
    assert [int(raw.parts[i].view(np.uint8)[0]) for i in raw.data] == [1, 2, 255, 0, 0]   # the bytes on disk


def test_bytes_past_the_described_data_are_named(tmp_path, seeds, caplog):
    """Found by an independent mutation campaign: the last tensor retyped to a smaller type (or
    4 KiB of junk appended) was read with no word; llama.cpp ignores such bytes too, so refsim
    reads the file and warns once, naming the count and where the described data ends. The
    library logs it (``refsim.model``; it printed ``refsim: warning:`` itself): each command
    shows it as its own warning (issue 26 C13, tests/model/test_trailing_bytes.py)."""
    import logging
    data = open(seeds["q3"], "rb").read()
    p = tmp_path / "junk.gguf"
    p.write_bytes(data + b"\0" * 4096)
    with caplog.at_level(logging.WARNING, logger="refsim.model"):
        assert open_model(p).spec == open_model(seeds["q3"]).spec
    said = [r.getMessage() for r in caplog.records if r.name == "refsim.model"]
    assert len(said) == 1
    assert said[0].startswith(f"{p}: 4096 bytes after byte {len(data)} (the end of the last ")
