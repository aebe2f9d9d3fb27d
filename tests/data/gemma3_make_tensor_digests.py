"""Write tests/data/gemma3_llamacpp_tensors.json: sha256 of every named tensor llama.cpp computes.

Run once where llama-cpp-python is installed (it is not a test dependency)::

    python tests/data/gemma3_make_tensor_digests.py [GGUF]   (default: refsim's cached Gemma-3-270M)

For each sequence of :data:`SEQUENCES` it decodes the prompt as one batch, then each continuation
token alone (as llama-cpp-python's ``eval`` and tests/data/gemma3_make_goldens.py do), with the
settings of the goldens (n_ctx 512, n_batch = n_ubatch 512, 2 threads, F32 KV cache, flash
attention off, every row an output) -> ``sequences``; then once more with llama.cpp's default F16
KV cache (``type_k = type_v = F16``, the oracle README's setting) -> ``kv_f16.sequences``. A ``cb_eval`` callback reads every float32 node; for the names
refsim's gemma3 ``tap`` emits (``attn_norm-<il>``, ``Qcur-<il>``, ...; the last node of that name in
the decode, i.e. ``Qcur``/``Kcur`` after RoPE) it records ``rows x cols:digest`` (:func:`entry`; the
digest is of the float32 bytes in row-major order, ggml ``ne[0]`` fastest), and each decode's logits.
tests/forward/test_gemma3_bitexact.py compares refsim's ``llamacpp`` numerics with these.

Asking the callback for every node makes the scheduler compute nodes one at a time, which turns off
the CPU backend's RMS_NORM+MUL fusion; the fused kernel computes ``(x * scale) * w`` exactly as the
unfused pair does (ggml-cpu/ops.cpp ``ggml_compute_forward_rms_norm_f32``), so the bits are those of
an ordinary run (the greedy goldens, made without a callback, agree).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np

from refsim.fileio import write_text_atomic
from refsim.testing.ggml_tensor import GGML_TYPE_F32, read_tensor, tensor_at, tensor_name

SEQUENCES = [
    # 6-token prompt: Q6_K by vec_dot (< 8 rows), Q4_K by gemm (4 rows) + gemv (2 rows)
    {"prompt": [2, 818, 5279, 529, 7001, 563], "cont": [506, 5279]},
    # 17-token prompt: Q6_K tiled (>= 8 rows), Q4_K gemm (16 rows) + gemv (1 row)
    {"prompt": [2, 155122, 1217, 496, 5139, 236772, 3255, 5697, 11936, 1262, 236764, 532, 3217, 625, 47369,
                855, 236761], "cont": [107]},
]

NAMES = ("embd", "inp_scaled", "attn_norm", "Qcur_normed", "Kcur_normed", "Qcur", "Kcur", "Vcur", "kqv_out",
         "attn_post_norm", "sa_out", "ffn_norm", "ffn_gate", "ffn_up", "ffn_geglu", "ffn_out", "ffn_post_norm",
         "l_out", "result_norm", "result_output")
"""refsim gemma3 tap names; llama.cpp's node is ``<name>-<il>`` (``<name>`` for the global ones)."""


def digest(a: np.ndarray) -> str:
    """First 20 hex digits (80 bits) of the sha256 of a float32 array's bytes in C order."""
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float32).tobytes()).hexdigest()[:20]


def entry(a: np.ndarray) -> str:
    """``"<rows>x<cols>:<digest>"`` of a tensor viewed as (rows, ne[0])."""
    return f"{a.size // a.shape[-1]}x{a.shape[-1]}:{digest(a)}"


GGML_TYPE_F16 = 1
"""ggml ``type_k``/``type_v`` id of F16 (F32 is 0)."""


def run_sequences(L, model, cp, kv_type: int, n_vocab: int, current: dict) -> list:
    """Decode every sequence of :data:`SEQUENCES` in a fresh context with ``type_k = type_v = kv_type``."""
    cp.type_k = cp.type_v = kv_type
    sequences = []
    for seq in SEQUENCES:
        ctx = L.llama_init_from_model(model, cp)
        calls = []
        p = 0
        for toks in [seq["prompt"]] + [[t] for t in seq["cont"]]:
            current.clear()
            b = L.llama_batch_init(len(toks), 0, 1)
            for i, tok in enumerate(toks):
                b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, p + i, 1, True
                b.seq_id[i][0] = 0
            b.n_tokens = len(toks)
            if L.llama_decode(ctx, b) != 0:
                raise SystemExit("llama_decode failed")
            logits = np.stack([np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()
                               for i in range(len(toks))])
            L.llama_batch_free(b)
            tensors = {k: entry(v) for k, v in sorted(current.items())}
            calls.append({"tokens": toks, "pos0": p, "tensors": tensors, "logits": entry(logits)})
            p += len(toks)
        L.llama_free(ctx)
        sequences.append({"prompt": seq["prompt"], "cont": seq["cont"], "calls": calls})
    return sequences


def main(path: str) -> None:
    import llama_cpp as L

    wanted = {n for n in NAMES}
    current: dict[str, np.ndarray] = {}

    @L.ggml_backend_sched_eval_callback
    def cb(t_ptr, ask, _user):
        if ask:
            return True
        t = tensor_at(t_ptr)
        name = tensor_name(t)
        base = name.rsplit("-", 1)[0] if name.rsplit("-", 1)[-1].isdigit() else name
        if t.type == GGML_TYPE_F32 and base in wanted:
            current[name] = read_tensor(t, np.float32)  # the last node of a name wins (Qcur/Kcur: after RoPE)
        return True

    L.llama_backend_init()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 512, 512, 512
    cp.n_threads = cp.n_threads_batch = 2
    cp.flash_attn_type = 0     # disabled
    cp.cb_eval, cp.cb_eval_user_data = cb, None
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    out = {"llama_cpp_python": L.__version__, "model": os.path.basename(path),
           "settings": "n_ctx=512, n_batch=n_ubatch=512, n_threads=2, F32 KV, flash_attn off, all rows output",
           "system_info": L.llama_print_system_info().decode().strip(),
           "sequences": run_sequences(L, model, cp, 0, n_vocab, current),
           "kv_f16": {"settings": "as above with type_k=type_v=F16 (llama.cpp's default)",
                      "sequences": run_sequences(L, model, cp, GGML_TYPE_F16, n_vocab, current)}}
    L.llama_model_free(model)
    dst = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gemma3_llamacpp_tensors.json")
    write_text_atomic(dst, json.dumps(out, indent=1))
    print(f"wrote {dst}")


if __name__ == "__main__":
    from refsim.forward.gemma3 import gemma3_270m_path
    main(sys.argv[1] if len(sys.argv) > 1 else gemma3_270m_path())
