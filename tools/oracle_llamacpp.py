#!/usr/bin/env python3
"""llama.cpp as an oracle: logits and routes of a GGUF, computed by llama.cpp in a subprocess.

Usage::

    python tools/oracle_llamacpp.py MODEL.gguf --tokens 1,5,77 --out OUT.npz [--threads 2]
    python tools/oracle_llamacpp.py MODEL.gguf --tokens 1,5,77 --greedy 16 --out OUT.npz  # llama.cpp greedy
    python tools/oracle_llamacpp.py --make-goldens tests/data/oracle   # regenerate the goldens

Needs the optional extra ``oracle`` (``pip install 'refsim[oracle]'`` = llama-cpp-python).

llama.cpp runs in a child process (``--worker``) because a bad file can ``GGML_ASSERT`` and
abort the whole process; the parent reports that as an error naming the file. Settings are the
ones under which llama.cpp matches a float reference to ~1e-6 (shared/reference/oracle/README.md):

- KV cache in F32 (``type_k = type_v = GGML_TYPE_F32``), flash attention off;
- one ubatch holding every token, every token asking for logits (otherwise llama.cpp skips
  the last layer's MoE for the other rows: the last-layer rule, llama-cpp-notes.md §1.3);
- routes read through ``cb_eval`` on the nodes ``ffn_moe_topk-<il>`` (I32 ``[k, n_tokens]``,
  a non-contiguous view of the argsort) and ``ffn_moe_weights_norm-<il>`` (llama-cpp-notes.md §7).

The output ``.npz`` holds ``tokens (n,) int32``, ``logits (n, n_vocab) float32``,
``routes (n, n_layer, k) int16``, ``weights (n, n_layer, k) float32`` and ``meta`` (a JSON
string: llama-cpp-python version, threads, settings).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

GOLDEN_TOKENS = [1, 5, 77, 123, 42, 299, 7, 260, 77, 123, 42, 3]
"""Tokens the golden files are made from (12 positions; a repeat makes the cache/attention non-trivial)."""

GOLDEN_RECIPES = {
    "F32": dict(arch="qwen3moe", quant="F32", seed=21),
    "Q8_0": dict(arch="qwen3moe", quant="Q8_0", seed=22),
    "Q4_0": dict(arch="qwen3moe", quant="Q4_0", seed=23),
    "MXFP4": dict(arch="qwen3moe", quant="MXFP4", seed=24),
    "mixed": dict(arch="qwen3moe", quant="mixed", seed=25),
    "Q4_1": dict(arch="qwen3moe", quant="Q4_1", seed=26),
    "Q5_1": dict(arch="qwen3moe", quant="Q5_1", seed=35),
    "IQ4_NL": dict(arch="qwen3moe", quant="IQ4_NL", seed=28),
    "IQ4_XS": dict(arch="qwen3moe", quant="IQ4_XS", seed=29),
    "Q3_K": dict(arch="qwen3moe", quant="Q3_K", seed=31),
    "Q2_K": dict(arch="qwen3moe", quant="Q2_K", seed=32),
    "TQ1_0": dict(arch="qwen3moe", quant="TQ1_0", seed=33),
    "TQ2_0": dict(arch="qwen3moe", quant="TQ2_0", seed=34),
}
"""Synthetic models (``refsim.model.write_synthetic`` arguments) with a committed golden each;
``mixed`` is the Q4_K_M-like K-quant mix (Q4_K, Q6_K ``ffn_down_exps``/``attn_v``/``output``).
(Seeds 27 and 30 are skipped: their Q5_1 / TQ2_0 models have an activation near-tie, at position
11 / 8, that none of the golden test's tie rules reproduces: refsim's ``attn_norm`` there is one
float32 ulp from llama.cpp's, and ``x * 127 / amax`` lands two ulps from a half, so one Q8 code
differs; in the TQ2_0 model that code is in layer 0's K/V and shifts every later position.)"""


def tensor_digest(path: str) -> str:
    """sha256 over every tensor's name, type, shape and raw bytes (metadata excluded), hex.

    Goldens record it so a test can tell "the synthetic writer now makes other weights"
    (regenerate the goldens) from "refsim computes differently" (a bug).
    """
    from refsim.model import open_model
    m = open_model(path)
    h = hashlib.sha256()
    for name, ti in m.tensors.items():
        h.update(f"{name}:{int(ti.ggml_type)}:{list(ti.shape_gguf)};".encode())
        h.update(np.ascontiguousarray(m.raw(name)).tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# worker (runs inside the child process; imports llama_cpp)

def _route_callback(L, captured: dict):
    """A ``cb_eval`` that copies ``ffn_moe_topk-<il>`` (I32) and ``ffn_moe_weights_norm-<il>`` into
    ``captured`` as (n_tokens, k) arrays (the last decode's values; llama-cpp-notes.md §7)."""
    from refsim.testing.ggml_tensor import GGML_TYPE_F32, GGML_TYPE_I32, read_tensor, tensor_at, tensor_name

    @L.ggml_backend_sched_eval_callback
    def cb(t_ptr, ask, _user):
        t = tensor_at(t_ptr)
        name = tensor_name(t)
        want = name.startswith("ffn_moe_topk-") or name.startswith("ffn_moe_weights_norm-")
        if ask:
            return want
        if name.startswith("ffn_moe_topk-") and t.type == GGML_TYPE_I32:
            captured[name] = read_tensor(t, np.int32).reshape(-1, int(t.ne[0]))   # (n_tokens, k)
        elif want and t.type == GGML_TYPE_F32:
            # weights_norm is [1, k, n_tokens] (or [k, n_tokens]): rows of k per token
            k = int(t.ne[1]) if int(t.ne[0]) == 1 else int(t.ne[0])
            captured[name] = read_tensor(t, np.float32).reshape(-1, k)
        return True
    return cb


def _open(L, model: str, n_ctx: int, n_batch: int, threads: int, cb):
    """Load ``model`` and make a context with the oracle settings (F32 KV, no flash attention)."""
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    model_p = L.llama_model_load_from_file(model.encode(), mp)
    if not model_p:
        raise SystemExit(f"llama.cpp could not load {model}")
    cp = L.llama_context_default_params()
    cp.n_ctx = max(64, n_ctx)
    cp.n_batch = cp.n_ubatch = max(n_batch, 1)
    cp.n_threads = cp.n_threads_batch = threads
    cp.type_k = cp.type_v = 0  # GGML_TYPE_F32
    if hasattr(cp, "flash_attn_type"):
        cp.flash_attn_type = 0  # LLAMA_FLASH_ATTN_TYPE_DISABLED
    elif hasattr(cp, "flash_attn"):
        cp.flash_attn = False
    cp.cb_eval = cb
    cp.cb_eval_user_data = None
    ctx = L.llama_init_from_model(model_p, cp)
    if not ctx:
        raise SystemExit(f"llama.cpp could not create a context for {model}")
    return model_p, ctx


def _decode(L, ctx, model: str, tokens: list[int], pos0: int, logits_rows) -> None:
    """One ``llama_decode`` of ``tokens`` at positions ``pos0..``; rows in ``logits_rows`` ask for logits."""
    n = len(tokens)
    batch = L.llama_batch_init(n, 0, 1)
    for i, tok in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = tok, pos0 + i, 1, i in logits_rows
        batch.seq_id[i][0] = 0
    batch.n_tokens = n
    rc = L.llama_decode(ctx, batch)
    L.llama_batch_free(batch)
    if rc != 0:
        raise SystemExit(f"llama_decode returned {rc} for {model}")


def _routes(captured: dict) -> tuple[np.ndarray, np.ndarray]:
    layers = sorted({int(k.rsplit("-", 1)[1]) for k in captured if k.startswith("ffn_moe_topk-")})
    if not layers:
        raise SystemExit("no ffn_moe_topk nodes were observed (not an MoE model?)")
    routes = np.stack([captured[f"ffn_moe_topk-{il}"] for il in layers], axis=1).astype(np.int16)
    weights = np.stack([captured.get(f"ffn_moe_weights_norm-{il}", np.full(routes[:, 0].shape, np.nan))
                        for il in layers], axis=1).astype(np.float32)
    return routes, weights


def _worker(model: str, tokens: list[int], out: str, threads: int) -> None:
    import llama_cpp as L
    captured: dict[str, np.ndarray] = {}
    n = len(tokens)
    cb = _route_callback(L, captured)      # held here: llama.cpp keeps only the C pointer
    model_p, ctx = _open(L, model, n, n, threads, cb)
    _decode(L, ctx, model, tokens, 0, range(n))
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model_p))
    logits = np.stack([np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()
                       for i in range(n)]).astype(np.float32)
    routes, weights = _routes(captured)
    meta = dict(llama_cpp_python=getattr(L, "__version__", "?"), threads=threads, type_kv="F32",
                flash_attn="off", n_ubatch=n, logits_all=True)
    L.llama_free(ctx)
    L.llama_model_free(model_p)
    del cb
    _save(out, tokens=np.asarray(tokens, np.int32), logits=logits, routes=routes, weights=weights,
          meta=np.array(json.dumps(meta)))


def _greedy_worker(model: str, prompt: list[int], n_predict: int, out: str, threads: int) -> None:
    """llama.cpp's own greedy generation: the prompt in one batch (logits on its last row only,
    so the last layer routes that row alone: the last-layer rule), then one token per decode,
    each the argmax of the previous logits (lowest id on an exact tie, as ``numpy.argmax``)."""
    import llama_cpp as L
    captured: dict[str, np.ndarray] = {}
    n = len(prompt)
    cb = _route_callback(L, captured)      # held here: llama.cpp keeps only the C pointer
    model_p, ctx = _open(L, model, n + n_predict, n, threads, cb)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model_p))
    _decode(L, ctx, model, prompt, 0, {n - 1})
    gen, logits, routes, weights = [], [], [], []
    for step in range(n_predict):
        row = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()
        logits.append(row)
        gen.append(int(np.argmax(row)))
        if step == n_predict - 1:
            break
        captured.clear()
        _decode(L, ctx, model, [gen[-1]], n + step, {0})
        r, w = _routes(captured)
        routes.append(r[0])
        weights.append(w[0])
    meta = dict(llama_cpp_python=getattr(L, "__version__", "?"), threads=threads, type_kv="F32",
                flash_attn="off", greedy=True, n_prompt=n, n_predict=n_predict)
    L.llama_free(ctx)
    L.llama_model_free(model_p)
    del cb
    _save(out, prompt=np.asarray(prompt, np.int32), tokens=np.asarray(gen, np.int32),
          logits=np.stack(logits).astype(np.float32),
          routes=np.stack(routes).astype(np.int16) if routes else np.zeros((0, 0, 0), np.int16),
          weights=np.stack(weights).astype(np.float32) if weights else np.zeros((0, 0, 0), np.float32),
          meta=np.array(json.dumps(meta)))


def _save(path: str, **arrays) -> None:
    """``np.savez_compressed`` to ``path`` atomically (refsim.fileio.atomic_path)."""
    from refsim.fileio import atomic_path
    with atomic_path(path, "--out", suffix=".npz") as tmp:
        np.savez_compressed(tmp, **arrays)


# ---------------------------------------------------------------------------------------------
# parent side

class OracleError(RuntimeError):
    """llama.cpp failed (abort, load failure, timeout); the message names the model."""


def available() -> bool:
    """True if ``llama_cpp`` can be imported (without importing it here)."""
    import importlib.util
    return importlib.util.find_spec("llama_cpp") is not None


def run_oracle(model: str, tokens: list[int], threads: int = 2, timeout_s: float = 300.0) -> dict:
    """Run llama.cpp on ``model`` in a child process and return its outputs.

    Parameters
    ----------
    model : str
        GGUF path.
    tokens : list of int
        Token ids at positions ``0..n-1``, all asking for logits.
    threads : int, default 2
    timeout_s : float, default 300
        Seconds before the child is killed.

    Returns
    -------
    dict
        ``tokens``, ``logits (n, n_vocab) float32``, ``routes (n, n_layer, k) int16``,
        ``weights (n, n_layer, k) float32``, ``meta`` (dict).

    Raises
    ------
    OracleError
        If the child exits non-zero (e.g. a GGML_ASSERT abort), times out, or writes nothing.
    """
    res = run_worker(os.path.abspath(__file__), model,
                     ["--tokens", ",".join(str(t) for t in tokens), "--threads", str(threads)], timeout_s)
    res["meta"] = json.loads(str(res["meta"]))
    return res


def run_greedy(model: str, prompt: list[int], n_predict: int, threads: int = 2, timeout_s: float = 300.0) -> dict:
    """llama.cpp's greedy generation of ``n_predict`` tokens after ``prompt`` (child process).

    Returns
    -------
    dict
        ``prompt``, ``tokens (n_predict,) int32`` (the generated ids), ``logits (n_predict, n_vocab)
        float32`` (row i: the logits token i was chosen from), ``routes (n_predict - 1, n_layer, k)
        int16`` and ``weights`` (the decodes of generated tokens 0..n_predict-2), ``meta`` (dict).

    Raises
    ------
    OracleError
        As :func:`run_oracle`.
    """
    res = run_worker(os.path.abspath(__file__), model,
                     ["--tokens", ",".join(str(t) for t in prompt), "--threads", str(threads),
                      "--greedy", str(n_predict)], timeout_s)
    res["meta"] = json.loads(str(res["meta"]))
    return res


def run_worker(script: str, model: str, args: list[str], timeout_s: float) -> dict:
    """Run ``script --worker MODEL --out OUT.npz *args`` in a child process; return OUT's arrays.

    The child is where llama.cpp runs: a bad file can abort it (GGML_ASSERT) without taking the
    caller down.

    Raises
    ------
    OracleError
        If the child exits non-zero, times out after ``timeout_s`` seconds, or writes nothing.
    """
    with tempfile.TemporaryDirectory(prefix="refsim-oracle-") as d:
        out = os.path.join(d, "out.npz")
        cmd = [sys.executable, script, "--worker", model, "--out", out, *args]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise OracleError(f"{model}: llama.cpp did not finish in {timeout_s:g} s") from None
        if proc.returncode != 0 or not os.path.exists(out):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise OracleError(f"{model}: llama.cpp exited with code {proc.returncode}: {' | '.join(tail)}")
        with np.load(out) as z:
            return {k: z[k] for k in z.files}


def make_goldens(folder: str, threads: int = 2, names: list[str] | None = None) -> list[str]:
    """Write ``qwen3moe-<name>.npz`` for every :data:`GOLDEN_RECIPES` entry (or only ``names``) into ``folder``.

    Each file holds the oracle outputs on :data:`GOLDEN_TOKENS`, plus ``recipe`` (JSON) and
    ``digest`` (:func:`tensor_digest` of the model it was made from).
    """
    from refsim.model import write_synthetic
    os.makedirs(folder, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="refsim-goldens-") as d:
        for name, recipe in GOLDEN_RECIPES.items():
            if names is not None and name not in names:
                continue
            path = write_synthetic(os.path.join(d, f"{name}.gguf"), **recipe)
            res = run_oracle(path, GOLDEN_TOKENS, threads=threads)
            out = os.path.join(folder, f"qwen3moe-{name}.npz")
            _save(out, tokens=res["tokens"], logits=res["logits"], routes=res["routes"], weights=res["weights"],
                  meta=np.array(json.dumps(res["meta"])), recipe=np.array(json.dumps(recipe)),
                  digest=np.array(tensor_digest(path)))
            written.append(out)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", help="GGUF model")
    ap.add_argument("--tokens", default=",".join(map(str, GOLDEN_TOKENS)), help="token ids, e.g. 1,5,77")
    ap.add_argument("--out", help="output .npz")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--make-goldens", metavar="DIR", help="regenerate the golden files into DIR")
    ap.add_argument("--only", metavar="NAMES", help="with --make-goldens: only these comma-separated recipe names")
    ap.add_argument("--greedy", type=int, default=0, metavar="N",
                    help="generate N tokens greedily after --tokens (llama.cpp's own loop) instead")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    from refsim.errors import ConfigError
    from refsim.fileio import check_writable
    tokens = [int(t) for t in a.tokens.split(",") if t.strip()]
    if a.worker:
        if a.greedy:
            _greedy_worker(a.model, tokens, a.greedy, a.out, a.threads)
        else:
            _worker(a.model, tokens, a.out, a.threads)
        return 0
    if not available():
        print("oracle_llamacpp: llama_cpp is not importable; install the extra: pip install 'refsim[oracle]'",
              file=sys.stderr)
        return 1
    try:
        if a.make_goldens:
            names = None if a.only is None else [n for n in a.only.split(",") if n]
            unknown = set(names or ()) - set(GOLDEN_RECIPES)
            if unknown:
                raise ConfigError(f"--only: unknown recipe(s) {sorted(unknown)} (known: {', '.join(GOLDEN_RECIPES)})")
            for p in make_goldens(a.make_goldens, a.threads, names):
                print(p)
            return 0
        if not a.model or not a.out:
            ap.error("MODEL and --out are required (or --make-goldens DIR)")
        check_writable(a.out, "--out")                 # before llama.cpp runs, not after
        if a.greedy:
            res = run_greedy(a.model, tokens, a.greedy, a.threads)
            res["digest"] = tensor_digest(a.model)      # which weights the golden belongs to
            _save(a.out, **{k: (np.array(json.dumps(v)) if k == "meta" else v) for k, v in res.items()})
            print(f"{a.out}: greedy tokens {res['tokens'].tolist()}")
            return 0
        res = run_oracle(a.model, tokens, a.threads)
        _save(a.out, tokens=res["tokens"], logits=res["logits"], routes=res["routes"], weights=res["weights"],
              meta=np.array(json.dumps(res["meta"])))
        print(f"{a.out}: logits {res['logits'].shape}, routes {res['routes'].shape}, "
              f"argmax {res['logits'].argmax(1).tolist()}")
    except (OracleError, ConfigError) as exc:
        print(f"oracle_llamacpp: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(main))
