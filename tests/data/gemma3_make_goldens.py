"""Write tests/data/gemma3_llamacpp.json: llama.cpp's ids and greedy output on the real Gemma-3-270M.

Run once where llama-cpp-python is installed (it is not a test dependency)::

    python tests/data/gemma3_make_goldens.py [GGUF]   (default: refsim's cached Gemma-3-270M)

What it records (all with llama-cpp-python, the llama.cpp vendored by its version, printed in
the file):

- ``tokenize``: for each sentence of :data:`SENTENCES`, ``Llama.tokenize(text, add_bos=True,
  special=False)`` and ``Llama.detokenize(ids)`` (hex of the bytes).
- ``generate``: for each prompt, greedy ids (one ``eval`` per token, argmax of the last row, as
  shared/reference/oracle/gemma_llama.py), the prompt's ids, the top-5 (id, logit) of the first
  row, and each step's top-1 minus top-2 logit margin. Settings: F32 KV cache
  (``type_k = type_v = 0``) and flash attention off, the setting under which llama.cpp matches a
  float reference (oracle README "Numbers for test design").
- ``france_default``: the oracle README's run (default context settings: F16 KV cache), top-5
  and 20 greedy ids, to compare with the numbers printed there.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

SENTENCES = [
    "The capital of France is",
    "The quick brown fox jumps over the lazy dog.",
    "Explain how a solid-state drive stores data, and why it wears out.",
    "def add(a, b):\n    return a + b\n",
    "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "naïve café — 日本語のテキスト, Ελληνικά, русский язык, emoji 🙂🚀",
    "a  b   c    d\n\n\nend\t\ttabs   ",
    "   leading spaces and trailing   ",
    "<bos> and <start_of_turn>user\n[multimodal] <start_of_image>",
    "1234567890 3.14159 1e-9 0x7fff_ffff",
    "<div class=\"x\">Hello</div> https://example.com/a?b=c&d=e",
    "Ünïcödé ＦＵＬＬＷＩＤＴＨ ｶﾀｶﾅ \u200b zero\u00a0width",
    "\x01 control \x7f chars and a lone\r\ncarriage return",
    "",
    " ",
    "\n",
]

PROMPTS = [
    "The capital of France is",
    "Explain how a solid-state drive stores data, and why it wears out.",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea,",
    "La capitale de la France est",
]

N_GREEDY = 64


def _greedy(llm, ids, n):
    llm.reset()
    llm.eval(ids)
    last = np.asarray(llm.scores[len(ids) - 1], dtype=np.float32)
    top5 = [(int(i), float(last[i])) for i in np.argsort(-last, kind="stable")[:5]]
    gen, margins = [], []
    row = last
    for _ in range(n):
        srt = np.sort(row)
        margins.append(float(srt[-1] - srt[-2]))
        nxt = int(row.argmax())
        gen.append(nxt)
        llm.eval([nxt])
        row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    return top5, gen, margins


def main(path: str) -> None:
    from refsim.fileio import write_text_atomic
    import llama_cpp
    from llama_cpp import Llama

    out = {"llama_cpp_python": llama_cpp.__version__, "model": os.path.basename(path),
           "settings": "n_ctx=512, n_batch=512, n_threads=2, logits_all, type_k=type_v=F32, flash_attn off",
           "tokenize": [], "generate": []}
    llm = Llama(model_path=path, n_ctx=512, n_batch=512, logits_all=True, n_threads=2, verbose=False,
                seed=0, type_k=0, type_v=0, flash_attn=False)
    for s in SENTENCES:
        ids = llm.tokenize(s.encode("utf-8"), add_bos=True, special=False)
        out["tokenize"].append({"text": s, "ids": list(map(int, ids)),
                                "detok_hex": llm.detokenize(ids[1:]).hex()})
    for p in PROMPTS:
        ids = llm.tokenize(p.encode("utf-8"), add_bos=True, special=False)
        top5, gen, margins = _greedy(llm, ids, N_GREEDY)
        out["generate"].append({"prompt": p, "prompt_ids": list(map(int, ids)), "top5": top5, "greedy": gen,
                                "margins": [round(m, 5) for m in margins],
                                "text": llm.detokenize(gen).decode("utf-8", "replace")})
    del llm
    llm = Llama(model_path=path, n_ctx=512, n_batch=128, logits_all=True, n_threads=2, verbose=False, seed=0)
    ids = llm.tokenize(b"The capital of France is", add_bos=True, special=False)
    top5, gen, margins = _greedy(llm, ids, 20)
    out["france_default"] = {"settings": "Llama() defaults as in oracle/gemma_llama.py (F16 KV)",
                             "prompt_ids": list(map(int, ids)), "top5": top5, "greedy": gen}
    dst = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gemma3_llamacpp.json")
    write_text_atomic(dst, json.dumps(out, ensure_ascii=False, indent=1))
    print(f"wrote {dst}")


if __name__ == "__main__":
    from refsim.forward.gemma3 import gemma3_270m_path
    main(sys.argv[1] if len(sys.argv) > 1 else gemma3_270m_path())
