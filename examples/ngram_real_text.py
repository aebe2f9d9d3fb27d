#!/usr/bin/env python3
"""The seeds' n-gram experiment on real text: Gemma-3-270M, greedy, speculation off vs ``--ngram``.

Two prompts (docs/real-model.md), given as plain text after ``<bos>`` (the file is the base
model, not the instruction-tuned one: in Gemma's turn format it only echoes the question):

- **prose**: "Explain how a solid-state drive stores data, and why it wears out."
- **copy-heavy**: a real C file (:data:`C_FILE`, ~320 tokens) in the prompt, with "Repeat the
  following C file unchanged, adding a comment above each function", and the start of the
  answer ("Here is the file, unchanged, ...```c") so that the base model begins the copy.

Each is generated for ``-n`` greedy tokens (default 256) with speculation off and with the
engine's n-gram drafter at ``--draft 1`` and ``3`` and ``--ngram-min-match 3``, ``5``, ``8``.
Printed per cell, with the engine's definitions (docs/telemetry.md, refsim.telemetry.RunStats):

- acceptance = accepted / drafted draft tokens (%);
- tok/dec = tokens per target decode (plain + verify);
- drafted = decodes that carried a draft / decodes (%, "drafted steps");
- MiB/tok = dense bytes read per token: every target decode reads every tensor once (the 18
  blocks, ``output_norm`` and the tied ``token_embd``, 246,587,904 bytes = 235.16 MiB; there
  is no expert cache to hit), so ``decodes * 246587904 / 2**20 / tokens``; the prefill is not
  counted, as in the engine's per-token figure;
- tok/s = tokens / measured seconds of refsim's own target decodes (this machine, not a device);
- same = the emitted ids equal plain greedy's (speculation must not change greedy output).

One cell at a time, with the metrics CSV and the engine's summary lines, is
``refsim run <gemma.gguf> --ngram --draft 3 --ngram-min-match 5 -n 256 --numerics ggml``.

Usage::

    python examples/ngram_real_text.py [-n 256] [--numerics ggml] [--prompts prose,copy]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from refsim import MIB
from refsim.forward.gemma3 import gemma3_270m_path
from refsim.model import open_model
from refsim.model.tokenizer import Tokenizer
from refsim.spec import NgramDraft, run_generation
from refsim.spec.forward_target import ForwardTarget
from refsim.telemetry.stats import RunStats

C_FILE = r"""#include <stddef.h>
#include <string.h>

struct ring {
    unsigned char *buf;
    size_t cap;
    size_t head;
    size_t len;
};

void ring_init(struct ring *r, unsigned char *storage, size_t cap)
{
    r->buf = storage;
    r->cap = cap;
    r->head = 0;
    r->len = 0;
}

size_t ring_push(struct ring *r, const unsigned char *src, size_t n)
{
    size_t i;
    for (i = 0; i < n && r->len < r->cap; i++) {
        r->buf[(r->head + r->len) % r->cap] = src[i];
        r->len++;
    }
    return i;
}

size_t ring_pop(struct ring *r, unsigned char *dst, size_t n)
{
    size_t i;
    for (i = 0; i < n && r->len > 0; i++) {
        dst[i] = r->buf[r->head];
        r->head = (r->head + 1) % r->cap;
        r->len--;
    }
    return i;
}
"""

PROMPTS = {
    "prose": "Explain how a solid-state drive stores data, and why it wears out.",
    "copy": ("Repeat the following C file unchanged, adding a comment above each function.\n\n"
             "```c\n" + C_FILE + "```\n\nHere is the file, unchanged, with a comment above each function:\n\n```c\n"),
}

CELLS = [(None, None)] + [(d, m) for d in (1, 3) for m in (3, 5, 8)]
"""(draft, min_match); (None, None) = speculation off."""


def dense_bytes_per_decode(model) -> int:
    """Bytes of every tensor in the file: what one dense decode reads (tied output included);
    the figure ``refsim run`` prints for a dense model."""
    return model.bytes.file_tensor_bytes


def run_cells(target: ForwardTarget, prompt: np.ndarray, n_predict: int, per_decode: int):
    rows, plain = [], None
    for draft, mm in CELLS:
        target.trim(0)
        src = None if draft is None else NgramDraft(min_match=mm)
        res = run_generation(target, src, prompt, n_predict, draft_max=draft or 3)
        st = RunStats.from_run(res)
        if plain is None:
            plain = res.tokens
        rows.append(dict(cell="off" if draft is None else f"d{draft} m{mm}", acc=st.acceptance_pct if draft else None,
                         tpd=st.tokens_per_decode, drafted=st.coverage_pct, decodes=st.decodes, tokens=st.tokens,
                         mib=st.decodes * per_decode / MIB / max(st.tokens, 1), tok_s=st.tok_s,
                         same=bool(np.array_equal(res.tokens, plain)), ids=res.tokens))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=256, help="greedy tokens per cell (default 256)")
    ap.add_argument("--numerics", default="ggml", choices=("exact", "ggml", "llamacpp"),
                    help="llamacpp = llama.cpp's arithmetic bit for bit (not batch-invariant: a "
                         "verify decode may round differently from a plain one, as in the engine)")
    ap.add_argument("--kv-type", default="f32", choices=("f32", "f16"),
                    help="KV cache type (f16 = llama.cpp's default; llamacpp numerics only)")
    ap.add_argument("--prompts", default="prose,copy", help="comma list of: " + ", ".join(PROMPTS))
    args = ap.parse_args(argv)
    model = open_model(gemma3_270m_path())
    tok = Tokenizer.from_model(model)
    t0 = time.perf_counter()
    target = ForwardTarget(model, numerics=args.numerics, capacity=1024, kv_type=args.kv_type)
    print(f"# Gemma-3-270M Q4_K_M ({model.path}); numerics={args.numerics}; load {time.perf_counter() - t0:.1f} s; "
          f"-n {args.n}; dense bytes/decode {dense_bytes_per_decode(model)}")
    per_decode = dense_bytes_per_decode(model)
    for name in args.prompts.split(","):
        prompt = tok.encode(PROMPTS[name])
        rows = run_cells(target, prompt, args.n, per_decode)
        print(f"\n## {name}: prompt {prompt.size} tokens; plain greedy output:")
        print("   " + tok.decode(rows[0]["ids"]).replace("\n", "\n   "))
        print(f"\n| {'spec':8} | {'accept %':>8} | {'tok/dec':>7} | {'drafted %':>9} | {'decodes':>7} | "
              f"{'MiB/tok':>7} | {'tok/s':>6} | same |")
        print("|" + "|".join(["-" * 10, "-" * 10, "-" * 9, "-" * 11, "-" * 9, "-" * 9, "-" * 8, "------"]) + "|")
        for r in rows:
            acc = "-" if r["acc"] is None else f"{r['acc']:.1f}"
            print(f"| {r['cell']:8} | {acc:>8} | {r['tpd']:7.2f} | {r['drafted']:9.1f} | {r['decodes']:7d} | "
                  f"{r['mib']:7.1f} | {r['tok_s']:6.2f} | {'yes' if r['same'] else 'NO':4} |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
