"""Hand-worked cases for the SPM tokenizer rules on a tiny vocabulary, and its bad-input errors.

The rules (refsim/model/tokenizer.py module docstring, from llama.cpp's SPM tokenizer):
user-defined texts are cut out first (longest first); spaces become '▁'; adjacent symbols merge
by highest score, ties leftmost; unknown characters fall back to <0xXX> byte tokens.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refsim.errors import ModelFormatError
from refsim.model.tokenizer import (BYTE, CONTROL, NORMAL, USER_DEFINED, Tokenizer, _varint, partition,
                                    sentencepiece_model_bytes)

pytest.importorskip("sentencepiece")

# id: 0 <pad>, 1 <eos>, 2 <bos>, 3 <unk>, 4..259 bytes, then the pieces below
PIECES = [("▁", -10.0, NORMAL), ("a", -11.0, NORMAL), ("b", -12.0, NORMAL), ("c", -13.0, NORMAL),
          ("ab", -1.0, NORMAL), ("bc", -2.0, NORMAL), ("abc", -3.0, NORMAL), ("aa", -4.0, NORMAL),
          ("▁a", -5.0, NORMAL), ("  ", 0.0, USER_DEFINED), ("\n\n", 0.0, USER_DEFINED),
          ("<s>", -1000.0, CONTROL)]


def tiny_metadata(**over):
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)] + [p for p, _, _ in PIECES]
    scores = [-1000.0] * 4 + [0.0] * 256 + [s for _, s, _ in PIECES]
    types = [CONTROL] * 4 + [BYTE] * 256 + [t for _, _, t in PIECES]
    md = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.scores": np.array(scores, np.float32), "tokenizer.ggml.token_type": np.array(types, np.int32),
          "tokenizer.ggml.bos_token_id": 2, "tokenizer.ggml.eos_token_id": 1, "tokenizer.ggml.unknown_token_id": 3,
          "tokenizer.ggml.padding_token_id": 0, "tokenizer.ggml.add_bos_token": True,
          "tokenizer.ggml.add_space_prefix": False}
    md.update(over)
    return md


TOK = None


def tok():
    global TOK
    if TOK is None:
        TOK = Tokenizer.from_metadata(tiny_metadata(), "tiny.gguf")
    return TOK


def ids(*pieces):
    t = tok()
    return [t.pieces.index(p) for p in pieces]


def test_varint_wire_format():
    assert _varint(0) == b"\x00" and _varint(1) == b"\x01" and _varint(127) == b"\x7f"
    assert _varint(128) == b"\x80\x01" and _varint(300) == b"\xac\x02"


def test_model_bytes_start_with_first_piece():
    md = tiny_metadata()
    b = sentencepiece_model_bytes(md["tokenizer.ggml.tokens"], md["tokenizer.ggml.scores"],
                                  md["tokenizer.ggml.token_type"], 3, 2, 1, 0)
    # field 1 (pieces), length 14: piece "<pad>" (0a 05), score -1000.0f (15 00 00 7a c4), type NORMAL (18 01)
    assert b[:16] == bytes.fromhex("0a0e0a053c7061643e15""00007ac4""1801")


def test_merge_highest_score_first():
    # "abc": pairs ab (-1) and bc (-2): ab merges first, then ab+c = abc (-3)
    assert tok().encode("abc", add_bos=False).tolist() == ids("abc")
    # "bca": bc (-2) merges; "bca" / "ca" are not pieces
    assert tok().encode("bca", add_bos=False).tolist() == ids("bc", "a")


def test_equal_scores_merge_leftmost():
    # "aaa": pairs (0,1) and (1,2) are both "aa"; the leftmost merges -> [aa, a], not [a, aa]
    assert tok().encode("aaa", add_bos=False).tolist() == ids("aa", "a")
    assert tok().encode("aaaa", add_bos=False).tolist() == ids("aa", "aa")


def test_space_is_escaped_and_merges():
    # " ab": symbols ▁ a b; pairs ▁a (-5), ab (-1): ab first, then "▁ab" is not a piece
    assert tok().encode(" ab", add_bos=False).tolist() == ids("▁", "ab")
    assert tok().encode(" a", add_bos=False).tolist() == ids("▁a")


def test_byte_fallback():
    # 'é' = C3 A9 is not a piece
    assert tok().encode("é", add_bos=False).tolist() == [4 + 0xC3, 4 + 0xA9]


def test_user_defined_cut_out_first_control_not():
    # "a  b": the user-defined "  " is cut before escaping, so no "▁" symbols are formed
    assert tok().encode("a  b", add_bos=False).tolist() == ids("a", "  ", "b")
    assert tok().encode("x\n\n", add_bos=False).tolist() == [4 + ord("x")] + ids("\n\n")
    # "<s>" is CONTROL: typed text is ordinary characters (bytes here: '<', 's', '>' are no pieces)
    assert tok().encode("<s>", add_bos=False).tolist() == [4 + ord("<"), 4 + ord("s"), 4 + ord(">")]


def test_bos_and_decode():
    t = tok()
    e = t.encode(" ab  c\n\né")
    assert e[0] == 2
    assert t.decode(e) == " ab  c\n\né"
    assert t.decode_bytes([2, 1, 3]) == b""  # control tokens print nothing


def test_partition_longest_first_each_occurrence():
    specials = [("aaa", 10), ("aa", 11)]
    assert partition("aaaaa", specials) == [10, 11]
    assert partition("xaay aaa", specials) == ["x", 11, "y ", 10]
    assert partition("", specials) == []


@given(st.text(alphabet=st.characters(blacklist_characters="\u2581", blacklist_categories=("Cs",)), max_size=40))
def test_decode_inverts_encode(text):
    t = tok()
    assert t.decode(t.encode(text)) == text


def test_errors_name_the_file_and_key():
    with pytest.raises(ModelFormatError, match="tiny.gguf: tokenizer.ggml.model is 'gpt2'"):
        Tokenizer.from_metadata(tiny_metadata(**{"tokenizer.ggml.model": "gpt2"}), "tiny.gguf")
    md = tiny_metadata()
    md["tokenizer.ggml.scores"] = md["tokenizer.ggml.scores"][:-1]
    with pytest.raises(ModelFormatError, match="expected equal lengths"):
        Tokenizer.from_metadata(md, "tiny.gguf")
    md = tiny_metadata()
    md["tokenizer.ggml.tokens"] = list(md["tokenizer.ggml.tokens"])
    md["tokenizer.ggml.tokens"][4 + 0x41] = "A"
    with pytest.raises(ModelFormatError, match=r"token_type\[69\] is BYTE \(6\) but the piece is 'A'"):
        Tokenizer.from_metadata(md, "tiny.gguf")
    md["tokenizer.ggml.token_type"] = md["tokenizer.ggml.token_type"].copy()
    md["tokenizer.ggml.token_type"][4 + 0x41] = NORMAL     # a NORMAL 'A': then byte 0x41 has no token
    with pytest.raises(ModelFormatError, match="no byte token <0x41>"):
        Tokenizer.from_metadata(md, "tiny.gguf")
    with pytest.raises(ModelFormatError, match="bos_token_id = 999 is not a token id"):
        Tokenizer.from_metadata(tiny_metadata(**{"tokenizer.ggml.bos_token_id": 999}), "tiny.gguf")
    with pytest.raises(ModelFormatError, match="token id -1 outside"):
        tok().piece_bytes(-1)
