#!/usr/bin/env python3
"""Decode speed of refsim's reference pass against llama.cpp on the same synthetic model.

    python benchmarks/forward.py [--quant Q4_0] [--tokens 16] [--threads 2] [--n-expert 128] [--rounds 3]
                                 [--numerics exact,ggml]

The model has Qwen3-30B-A3B's widths with 1/8 of its layers (``QWEN3_30B_A3B_EIGHTH``: n_embd
2048, 32/4 heads of 128, 128 experts top-8 of width 768, 6 layers, vocab 1024), written once
under ``$REFSIM_CACHE`` (or ~/.cache/refsim). Both engines decode the same prompt then
``--tokens`` single-token steps with the same thread count, each in its own child process (so
each peak RSS is its own); before the timed steps refsim prefaults its weight mappings
(``MADV_POPULATE_READ``, as llama.cpp reads the whole file at load; ``--cold`` leaves them to be
paged in during the steps); refsim runs once per numerics mode per round (``exact``: float64
accumulation; ``ggml``: llama.cpp's integer block products). Printed: tok/s of each (every
sample, best and median, with the load average around the runs) and the ratios (measured in
this run, best/best and median/median), the
bytes of weights one decode step touches (dense + k routed expert slices per layer + the
output matrix + one embedding row) and the DRAM bandwidth those bytes at that speed imply, and
refsim's peak RSS split into file-backed (the mapped GGUF) and anonymous memory: anonymous
memory must not grow with n_expert (experts are read through the mapping, one slice at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV0 = dict(os.environ)
"""The environment before refsim is imported (which sets OMP_WAIT_POLICY=PASSIVE if unset): what the
llama.cpp child gets, so llama.cpp runs as its users run it."""
PROMPT = [1, 5, 77, 123, 42, 299, 7, 260]


def _mem() -> dict:
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key = line.split(":")[0]
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(line.split()[1]) * 1024
    return out


MADV_POPULATE_READ = 22  # Linux >= 5.14: fill the page tables of a mapping (reads the pages into the page cache)


def _mappings(obj, seen: dict) -> dict:
    """Every ``mmap`` under a weights object (dataclasses, tuples, numpy.memmap views), by id."""
    import dataclasses

    import numpy as np
    if isinstance(obj, np.ndarray):
        b = obj
        while b is not None and not hasattr(b, "_mmap"):
            b = b.base
        if b is not None and b._mmap is not None:
            seen[id(b._mmap)] = b._mmap
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            _mappings(getattr(obj, f.name), seen)
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            _mappings(x, seen)
    return seen


def prefault(weights) -> int:
    """Populate the page tables of every tensor mapping of ``weights`` (``MADV_POPULATE_READ``)
    before the timed steps, as llama.cpp reads the whole file at load; returns the bytes advised
    (0 where the kernel refuses). File-backed RSS becomes the file; anonymous memory is unchanged."""
    total = 0
    for mm in _mappings(weights, {}).values():
        try:
            mm.madvise(MADV_POPULATE_READ)
            total += len(mm)
        except OSError:
            pass
    return total


def child_refsim(path: str, n_tokens: int, threads: int, numerics: str, cold: bool = False) -> dict:
    import numpy as np

    from refsim.forward import ForwardTarget   # before Numba starts its threads (refsim.kernels sets OMP_WAIT_POLICY)
    import numba
    numba.set_num_threads(threads)
    t = ForwardTarget(path, numerics)
    advised = 0 if cold else prefault(t.weights)
    t.prefill(np.array(PROMPT))          # also compiles / loads the Numba cache
    t.decode(np.array([PROMPT[-1]]), np.array([len(PROMPT)]))
    tok, pos = 11, len(PROMPT) + 1
    t0 = time.perf_counter()
    for _ in range(n_tokens):
        out = t.decode(np.array([tok]), np.array([pos]))
        tok, pos = int(out.argmax()[0]), pos + 1
    dt = time.perf_counter() - t0
    return dict(tok_s=n_tokens / dt, prefaulted=advised, **_mem())


def child_llama(path: str, n_tokens: int, threads: int) -> dict:
    import numpy as np
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=256, n_batch=64, n_threads=threads, n_threads_batch=threads,
                logits_all=False, verbose=False)
    llm.eval(PROMPT)
    llm.eval([PROMPT[-1]])
    tok = 11
    t0 = time.perf_counter()
    for _ in range(n_tokens):
        llm.eval([tok])
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    dt = time.perf_counter() - t0
    return dict(tok_s=n_tokens / dt, **_mem())


def _run_child(kind: str, args, numerics: str) -> dict | None:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--model", args.model,
           "--tokens", str(args.tokens), "--threads", str(args.threads), "--numerics", numerics or "exact"] \
        + (["--cold"] if args.cold else [])
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(ENV0, OMP_NUM_THREADS=str(args.threads)))
    if p.returncode != 0:
        print(f"{kind}: failed ({p.returncode}): {p.stderr.strip().splitlines()[-1:] }", file=sys.stderr)
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def touched_bytes_per_token(model) -> int:
    """Weight bytes one single-token decode reads: dense tensors of every layer, k expert slices
    per layer, ``output`` (or tied ``token_embd``) whole, and one row of ``token_embd``."""
    s = model.spec
    total = sum(model.dense_bytes(il) + s.n_expert_used * model.expert_bytes(il) for il in range(s.n_layer))
    out = model.tensor("output.weight" if "output.weight" in model.tensors else "token_embd.weight")
    emb = model.tensor("token_embd.weight")
    return total + out.n_bytes + emb.row_bytes + model.tensor("output_norm.weight").n_bytes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quant", default="Q4_0", help="synthetic quant (default Q4_0)")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-expert", type=int, default=128, help="experts per layer (default 128 = Qwen3-30B-A3B)")
    ap.add_argument("--numerics", default="exact,ggml", help="refsim numerics modes, comma-separated (default both)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating runs of each engine (best and median printed)")
    ap.add_argument("--cold", action="store_true",
                    help="do not prefault refsim's weight mappings: experts are paged in during the timed steps")
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        res = child_refsim(args.model, args.tokens, args.threads, args.numerics, args.cold) if args.child == "refsim" \
            else child_llama(args.model, args.tokens, args.threads)
        print(json.dumps(res))
        return 0

    sys.path.insert(0, REPO)
    from refsim import MIB
    from refsim.forward.builtin import cache_dir
    from refsim.model import QWEN3_30B_A3B_EIGHTH, open_model, write_synthetic
    dims = dict(QWEN3_30B_A3B_EIGHTH, n_expert=args.n_expert)
    path = os.path.join(cache_dir(), f"bench-qwen3moe-eighth-{args.quant}-e{args.n_expert}.gguf")
    if not os.path.exists(path):
        t0 = time.perf_counter()
        write_synthetic(path, "qwen3moe", args.quant, seed=0, dims=dims)
        print(f"wrote {path} in {time.perf_counter() - t0:.1f} s")
    args.model = path
    model = open_model(path)
    size = os.path.getsize(path)
    touched = touched_bytes_per_token(model)
    print(f"model: {path} ({size / MIB:.1f} MiB): n_embd {model.spec.n_embd}, {model.spec.n_layer} layers, "
          f"{model.spec.n_expert} experts top-{model.spec.n_expert_used}, quant {args.quant}; "
          f"threads {args.threads}, {args.tokens} timed decode steps")
    print(f"weights touched per token: {touched / MIB:.2f} MiB "
          f"(dense + {model.spec.n_expert_used} expert slices x {model.spec.n_layer} layers + output)")
    print("refsim's weight mappings: " + ("paged in during the timed steps (--cold)" if args.cold else
          "prefaulted before the timed steps (MADV_POPULATE_READ), as llama.cpp reads the file at load"))
    import importlib.util
    have_llama = importlib.util.find_spec("llama_cpp") is not None
    if not have_llama:
        print("llama.cpp: llama_cpp not importable (install refsim[oracle]); no baseline this run")
    # alternate the engines, --rounds times, and keep each one's best and median: a shared machine's
    # load then hits all alike (every sample is printed, with the load average before and after)
    modes = [m.strip() for m in args.numerics.split(",") if m.strip()]
    samples: dict[str, list[dict]] = {m: [] for m in modes}
    samples["llama.cpp"] = []
    load0 = os.getloadavg()
    for _ in range(args.rounds):
        for m in modes:
            r = _run_child("refsim", args, m)
            if r:
                samples[m].append(r)
        if have_llama:
            r = _run_child("llama", args, "")
            if r:
                samples["llama.cpp"].append(r)
    load1 = os.getloadavg()
    print(f"load average (1 min) before {load0[0]:.2f}, after {load1[0]:.2f} on {os.cpu_count()} cores")
    stats = {}
    for name, rs in samples.items():
        if not rs:
            continue
        tps = sorted(r["tok_s"] for r in rs)
        best = max(rs, key=lambda r: r["tok_s"])
        stats[name] = (tps[-1], statistics.median(tps))
        label = f"refsim ({name})" if name in modes else name
        print(f"{label}: samples {' '.join(f'{t:.2f}' for t in (r['tok_s'] for r in rs))} tok/s; best {tps[-1]:.2f}, "
              f"median {stats[name][1]:.2f} -> {touched * tps[-1] / 1e9:.2f} / {touched * stats[name][1] / 1e9:.2f} "
              f"GB/s of weights; peak RSS {best['VmHWM'] / MIB:.0f} MiB"
              + (f" (file-backed {best['RssFile'] / MIB:.0f} MiB, anonymous {best['RssAnon'] / MIB:.0f} MiB; "
                 f"file {size / MIB:.0f} MiB)" if name in modes else ""))
    if "llama.cpp" in stats:
        lb, lm = stats["llama.cpp"]
        for m in modes:
            if m in stats:
                print(f"ratio refsim ({m}) / llama.cpp: best/best {stats[m][0] / lb:.3f}, median/median "
                      f"{stats[m][1] / lm:.3f} (target >= 0.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
