#!/usr/bin/env python3
"""Decode speed of refsim's reference pass against llama.cpp on the same synthetic model.

    python benchmarks/forward.py [--quant Q4_0|Q4_K_M|MXFP4|all|TYPE,...] [--tokens 32] [--threads 2]
                                 [--n-expert 128] [--rounds 3] [--numerics exact,ggml]

The model has Qwen3-30B-A3B's widths with 1/8 of its layers (``QWEN3_30B_A3B_EIGHTH``: n_embd
2048, 32/4 heads of 128, 128 experts top-8 of width 768, 6 layers, vocab 1024), written once
under ``$REFSIM_CACHE`` (or ~/.cache/refsim). Both engines decode the same prompt then
``--tokens`` single-token steps with the same thread count, each in its own child process (so
each peak RSS is its own); before the timed steps refsim prefaults its weight mappings
(``MADV_POPULATE_READ``, then one byte of every page read, as llama.cpp reads the whole file at load;
``--cold`` leaves them to be paged in during the steps); refsim runs once per numerics mode per round (``exact``: float64
accumulation; ``ggml``: llama.cpp's integer block products), after one untimed child per mode that
fills Numba's on-disk cache (so no timed child compiles, and no printed RSS holds a compile's memory). Printed: tok/s of each (every
sample, best and median, with the load average before it and the share of CPU time the hypervisor stole
during its timed steps, from /proc/stat) and the ratios (measured in
this run, best/best and median/median), the
bytes of weights one decode step touches (dense + k routed expert slices per layer + the
output matrix + one embedding row) and the DRAM bandwidth those bytes at that speed imply, and
refsim's peak RSS split into file-backed (the mapped GGUF) and anonymous memory: anonymous
memory must not grow with n_expert (experts are read through the mapping, one slice at a time).

``--quant`` takes a synthetic type (:data:`refsim.model.synth.QUANTS`) or one of the real mixes of
:data:`MIXES`, comma-separated, or ``all`` (:data:`ALL`). Each run also measures the machine's read
bandwidth (:func:`read_bandwidth`: NumPy sums over a 1 GiB array, 1 and ``--threads`` threads) so the
GB/s of weights each engine reaches can be set against it.
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
N_CTX = 512
"""llama.cpp's context (and batch: llama-cpp-python keeps one logits row per batch slot when ``logits_all`` is off,
indexed by position, so a batch smaller than the context fails past its size): the prompt, one untimed step and
``--tokens`` timed steps must fit."""

MIXES = {
    # llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M as llama_tensor_get_type (src/llama-quant.cpp) assigns it to
    # a qwen3moe model: output Q6_K; attn_v and ffn_down(_exps) Q6_K on use_more_bits layers, Q4_K on
    # the others; everything else Q4_K (token_embd included). Its Q5_K rules (attn_qkv; attn_output when
    # n_expert == 8) do not apply to qwen3moe. synth's 'mixed' is exactly this on qwen3moe.
    "Q4_K_M": "mixed",
    # LLAMA_FTYPE_MOSTLY_MXFP4_MOE (the type of unsloth's Qwen3.6-35B-A3B-MXFP4_MOE): 3-D tensors
    # (ne[2] > 1, the routed experts) MXFP4, every other quantized tensor (output and token_embd
    # included) Q8_0; norms and the router F32 (src/llama-quant.cpp, the MXFP4_MOE branches).
    "MXFP4": {"ffn_gate_exps": "MXFP4", "ffn_up_exps": "MXFP4", "ffn_down_exps": "MXFP4", "default": "Q8_0"},
}
"""``--quant`` names of real files' type mixes -> the ``write_synthetic`` quant recipe."""

ALL = ("Q4_K_M", "MXFP4", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
       "IQ4_XS", "TQ1_0", "TQ2_0")
"""``--quant all``: the two real mixes, then every quantized synthetic type, one per run (the float types
F32/F16/BF16 are left out: at these widths their files are 7-15 GB). Pure MXFP4 is ``--quant MXFP4-pure``."""


def recipe(name: str):
    """The ``write_synthetic`` quant of a ``--quant`` name (a mix of :data:`MIXES`, ``MXFP4-pure``, or a
    synthetic type)."""
    if name in MIXES:
        return MIXES[name]
    return "MXFP4" if name == "MXFP4-pure" else name


def read_bandwidth(threads: int, mib: int = 1024, reps: int = 5) -> dict:
    """Best read bandwidth in GB/s (1e9 bytes/s) of summing a ``mib`` MiB float64 array with NumPy, on one
    thread and on ``threads`` threads (each summing its own contiguous slice; NumPy releases the GIL in
    the reduction), best of ``reps``. The array is written first, so page faults are not timed."""
    import threading

    import numpy as np
    a = np.ones(mib * 2 ** 20 // 8)
    out = {}
    for n in sorted({1, threads}):
        parts = np.array_split(a, n)
        best = 0.0
        for _ in range(reps):
            ts = [threading.Thread(target=np.sum, args=(p,)) for p in parts]
            t0 = time.perf_counter()
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            best = max(best, a.nbytes / (time.perf_counter() - t0) / 1e9)
        out[n] = best
    return out


def _mem() -> dict:
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key = line.split(":")[0]
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(line.split()[1]) * 1024
    return out


def _cpu_jiffies() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs from /proc/stat's ``cpu`` line ((0, 0) where it cannot be read):
    steal is time the hypervisor ran something else while this VM's vCPU wanted to run."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (v[7] if len(v) > 7 else 0), sum(v[:8])
    except (OSError, ValueError):
        return 0, 0


def _steal_pct(j0: tuple[int, int]) -> float | None:
    """Per cent of all CPUs' time stolen by the hypervisor since ``j0`` (None when /proc/stat has nothing)."""
    s1, t1 = _cpu_jiffies()
    return None if t1 <= j0[1] else 100.0 * (s1 - j0[0]) / (t1 - j0[1])


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
    """Populate the page tables of every tensor mapping of ``weights`` (``MADV_POPULATE_READ``) and read one
    byte of every 4 KiB page, before the timed steps, as llama.cpp reads the whole file at load; returns the
    bytes advised (0 where the kernel refuses). File-backed RSS becomes the file; anonymous memory is unchanged.

    Why the read as well: on this VM a page that has not been touched for a minute or so costs ~1 us on its
    next touch even when it is in the page cache and mapped (the host's memory, not the guest's page tables:
    no guest page fault is counted). Measured on the Q4_K_M model, one thread, the expert blocks of 6 layers
    for 8 freshly drawn experts per layer: 45.8 ms best / 67.6 ms median with page tables populated only,
    12.4 / 16.8 ms once every page had been read (18.4 / 11.3 ms when the same experts repeat). llama.cpp's
    load reads (or repacks) the file just before its timed steps, so without the read refsim would pay that
    first touch inside its timed steps and llama.cpp would not."""
    import numpy as np
    total = 0
    for mm in _mappings(weights, {}).values():
        try:
            mm.madvise(MADV_POPULATE_READ)
            total += len(mm)
        except OSError:
            pass
        pages = np.frombuffer(mm, dtype=np.uint8)[::4096]
        int(pages.sum())
        del pages
    return total


def child_refsim(path: str, n_tokens: int, threads: int, numerics: str, cold: bool = False) -> dict:
    import numpy as np

    from refsim.spec.forward_target import ForwardTarget   # before Numba starts its threads (refsim.kernels sets OMP_WAIT_POLICY)
    import numba
    numba.set_num_threads(threads)
    t = ForwardTarget(path, numerics)
    advised = 0 if cold else prefault(t.weights)
    t.prefill(np.array(PROMPT))          # also compiles / loads the Numba cache
    t.decode(np.array([PROMPT[-1]]), np.array([len(PROMPT)]))
    tok, pos = 11, len(PROMPT) + 1
    j0 = _cpu_jiffies()
    t0 = time.perf_counter()
    for _ in range(n_tokens):
        out = t.decode(np.array([tok]), np.array([pos]))
        tok, pos = int(out.argmax()[0]), pos + 1
    dt = time.perf_counter() - t0
    return dict(tok_s=n_tokens / dt, steal=_steal_pct(j0), prefaulted=advised, **_mem())


def child_llama(path: str, n_tokens: int, threads: int) -> dict:
    import numpy as np
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=N_CTX, n_batch=N_CTX, n_threads=threads, n_threads_batch=threads,
                logits_all=False, verbose=False)
    llm.eval(PROMPT)
    llm.eval([PROMPT[-1]])
    tok = 11
    j0 = _cpu_jiffies()
    t0 = time.perf_counter()
    for _ in range(n_tokens):
        llm.eval([tok])
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    dt = time.perf_counter() - t0
    return dict(tok_s=n_tokens / dt, steal=_steal_pct(j0), **_mem())


def _run_child(kind: str, args, numerics: str, tokens: int | None = None) -> dict | None:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--model", args.model,
           "--tokens", str(tokens or args.tokens), "--threads", str(args.threads), "--numerics", numerics or "exact"] \
        + (["--cold"] if args.cold else [])
    load = os.getloadavg()[0]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(ENV0, OMP_NUM_THREADS=str(args.threads)))
    if p.returncode != 0:
        print(f"{kind}: failed ({p.returncode}): {p.stderr.strip().splitlines()[-1:] }", file=sys.stderr)
        return None
    return dict(json.loads(p.stdout.strip().splitlines()[-1]), load=load)


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
    ap.add_argument("--quant", default="Q4_0",
                    help="synthetic type, real mix (Q4_K_M, MXFP4; MXFP4-pure = every matrix MXFP4), comma-separated, "
                         "or 'all' (default Q4_0)")
    ap.add_argument("--tokens", type=int, default=32, help=f"timed decode steps per sample (1..{N_CTX - len(PROMPT) - 1}; default 32)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-expert", type=int, default=128, help="experts per layer (default 128 = Qwen3-30B-A3B)")
    ap.add_argument("--numerics", default="exact,ggml", help="refsim numerics modes, comma-separated (default both)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating runs of each engine (best and median printed)")
    ap.add_argument("--cold", action="store_true",
                    help="do not prefault refsim's weight mappings: experts are paged in during the timed steps")
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not 1 <= args.tokens <= N_CTX - len(PROMPT) - 1:
        ap.error(f"--tokens: {args.tokens} is not in 1..{N_CTX - len(PROMPT) - 1} (the context is {N_CTX} positions)")
    for flag, v, hi in (("--threads", args.threads, 256), ("--rounds", args.rounds, 1000), ("--n-expert", args.n_expert, 512)):
        if not 1 <= v <= hi:
            ap.error(f"{flag}: {v} is not in 1..{hi}")
    if not args.child:
        sys.path.insert(0, REPO)
        from refsim.model.synth import QWEN3_30B_A3B_EIGHTH
        k = QWEN3_30B_A3B_EIGHTH["n_expert_used"]
        if args.n_expert < k:
            ap.error(f"--n-expert: {args.n_expert} is fewer than the {k} experts each token uses")
    bad_modes = [m.strip() for m in args.numerics.split(",") if m.strip() and m.strip() not in ("exact", "ggml")]
    if bad_modes or not args.numerics.replace(",", "").strip():
        ap.error(f"--numerics: {', '.join(repr(m) for m in bad_modes) or 'empty list'} (choose exact, ggml or both, "
                 "comma-separated)")
    if args.child:
        res = child_refsim(args.model, args.tokens, args.threads, args.numerics, args.cold) if args.child == "refsim" \
            else child_llama(args.model, args.tokens, args.threads)
        print(json.dumps(res))
        return 0

    sys.path.insert(0, REPO)
    from refsim.model.synth import QUANTS
    names = list(ALL) if args.quant == "all" else [q.strip() for q in args.quant.split(",") if q.strip()]
    bad = [q for q in names if q not in MIXES and q != "MXFP4-pure" and q not in QUANTS]
    if bad or not names:
        ap.error(f"--quant: unknown {', '.join(bad) or 'empty list'} (choose from {', '.join(MIXES)}, MXFP4-pure, all, "
                 f"{', '.join(q for q in QUANTS if q not in MIXES)})")
    # refsim's children compile into (or load from) refsim.jitcache's folder for this source tree (each
    # child's import of refsim.kernels picks it), so no timed code is a stale compile of an older callee
    from refsim import jitcache
    print(f"Numba cache of refsim's children: " + (f"{ENV0['NUMBA_CACHE_DIR']} (set by the caller)"
          if ENV0.get("NUMBA_CACHE_DIR") else f"{jitcache.base_dir()}/{jitcache.source_digest()} (refsim.jitcache: "
                                              "keyed by the refsim source)"))
    bw = read_bandwidth(args.threads)
    print("read bandwidth (NumPy sum over 1 GiB, best of 5): "
          + ", ".join(f"{n} thread{'s' if n > 1 else ''} {g:.1f} GB/s" for n, g in bw.items())
          + f"; load average (1 min) {os.getloadavg()[0]:.2f}")
    for q in names:
        bench_one(args, q, bw)
    return 0


def bench_one(args, quant: str, bw: dict) -> None:
    """One ``--quant`` name: write the model if absent, alternate the engines ``--rounds`` times, print."""
    from refsim import MIB
    from refsim.forward.builtin import cache_dir
    from refsim.model import QWEN3_30B_A3B_EIGHTH, open_model, write_synthetic
    dims = dict(QWEN3_30B_A3B_EIGHTH, n_expert=args.n_expert)
    path = os.path.join(cache_dir(), f"bench-qwen3moe-eighth-{quant}-e{args.n_expert}.gguf")
    if not os.path.exists(path):
        t0 = time.perf_counter()
        write_synthetic(path, "qwen3moe", recipe(quant), seed=0, dims=dims)
        print(f"wrote {path} in {time.perf_counter() - t0:.1f} s")
    args.model = path
    model = open_model(path)
    size = os.path.getsize(path)
    touched = touched_bytes_per_token(model)
    types: dict[str, int] = {}
    for t in model.tensors.values():
        types[t.ggml_type.name] = types.get(t.ggml_type.name, 0) + t.n_bytes
    print(f"\n== {quant}: {path} ({size / MIB:.1f} MiB; "
          + ", ".join(f"{k} {v / MIB:.1f} MiB" for k, v in sorted(types.items(), key=lambda kv: -kv[1])) + ")")
    print(f"model: n_embd {model.spec.n_embd}, {model.spec.n_layer} layers, "
          f"{model.spec.n_expert} experts top-{model.spec.n_expert_used}, quant {quant}; "
          f"threads {args.threads}, {args.tokens} timed decode steps")
    print(f"weights touched per token: {touched / MIB:.2f} MiB "
          f"(dense + {model.spec.n_expert_used} expert slices x {model.spec.n_layer} layers + output)")
    print("refsim's weight mappings: " + ("paged in during the timed steps (--cold)" if args.cold else
          "prefaulted and every page read before the timed steps (MADV_POPULATE_READ), as llama.cpp reads the file "
          "at load"))
    import importlib.util
    have_llama = importlib.util.find_spec("llama_cpp") is not None
    if not have_llama:
        print("llama.cpp: llama_cpp not importable (install refsim[oracle]); no baseline this run")
    # alternate the engines, --rounds times, and keep each one's best and median: a shared machine's
    # load then hits all alike (every sample is printed with the 1-minute load average before it)
    modes = [m.strip() for m in args.numerics.split(",") if m.strip()]
    samples: dict[str, list[dict]] = {m: [] for m in modes}
    samples["llama.cpp"] = []
    # one untimed child per numerics mode first: it compiles the kernels into Numba's on-disk cache, so no
    # timed child compiles (compiling leaves ~300-500 MiB of anonymous memory behind, which the RSS printed
    # below would otherwise show for whichever sample compiled)
    for m in modes:
        _run_child("refsim", args, m, tokens=1)
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
    top = bw[max(bw)]
    for name, rs in samples.items():
        if not rs:
            continue
        tps = sorted(r["tok_s"] for r in rs)
        best = max(rs, key=lambda r: r["tok_s"])
        stats[name] = (tps[-1], statistics.median(tps))
        label = f"refsim ({name})" if name in modes else name
        shown = " ".join(f"{r['tok_s']:.2f} (load {r['load']:.2f}"
                         + (f", steal {r['steal']:.0f} %)" if r.get("steal") is not None else ")") for r in rs)
        print(f"{label}: samples {shown} tok/s; "
              f"best {tps[-1]:.2f}, median {stats[name][1]:.2f} -> {touched * tps[-1] / 1e9:.2f} / "
              f"{touched * stats[name][1] / 1e9:.2f} GB/s of weights ({100 * touched * tps[-1] / 1e9 / top:.0f} % / "
              f"{100 * touched * stats[name][1] / 1e9 / top:.0f} % of the {max(bw)}-thread read bandwidth); "
              f"peak RSS {best['VmHWM'] / MIB:.0f} MiB"
              + (f" (file-backed {best['RssFile'] / MIB:.0f} MiB, anonymous {best['RssAnon'] / MIB:.0f} MiB; "
                 f"file {size / MIB:.0f} MiB)" if name in modes else ""))
    if "llama.cpp" in stats:
        lb, lm = stats["llama.cpp"]
        for m in modes:
            if m in stats:
                print(f"ratio refsim ({m}) / llama.cpp [{quant}]: best/best {stats[m][0] / lb:.3f}, median/median "
                      f"{stats[m][1] / lm:.3f} (target >= 0.8 on Q4_K_M and MXFP4, >= 0.5 otherwise)")


if __name__ == "__main__":
    sys.exit(main())
