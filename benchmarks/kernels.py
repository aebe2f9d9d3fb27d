"""Kernel throughput: refsim's Numba dequantize / matvec vs gguf.quants.dequantize + numpy.dot, same run.

For each registered type, a weight of one Qwen3-30B-A3B expert projection's shape (768 rows x 2048
columns) of random finite blocks is decoded and multiplied by a vector. Printed per type:
packed MB/s of refsim dequantize and of gguf-py, their ratio, then refsim matvec against
gguf-py dequantize followed by numpy.dot (the baseline a NumPy forward pass would use), as
milliseconds and a ratio. Run: ``python benchmarks/kernels.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from gguf.quants import dequantize

from refsim.kernels import KERNELS, dequantize_rows, matvec, row_bytes


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _weights(qtype, n_rows: int, n_cols: int) -> np.ndarray:
    """Realistic blocks: normal weights / sqrt(n_cols) encoded as ``qtype`` (synth's encoder)."""
    from refsim.model.synth import _encode
    w = np.random.default_rng(0).standard_normal((n_rows, n_cols)).astype(np.float32) / np.sqrt(n_cols)
    raw = np.ascontiguousarray(_encode(w, qtype)).view(np.uint8).reshape(n_rows, row_bytes(qtype, n_cols))
    return raw


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rows", type=int, default=768)
    ap.add_argument("--cols", type=int, default=2048)
    a = ap.parse_args(argv)
    x = np.random.default_rng(1).standard_normal(a.cols).astype(np.float32)
    print(f"shape {a.rows} x {a.cols}, best of {a.repeat}; MB = 1e6 bytes of packed data")
    print(f"{'type':<6} {'refsim deq MB/s':>15} {'gguf deq MB/s':>13} {'ratio':>6}   "
          f"{'refsim matvec ms':>16} {'gguf+dot ms':>11} {'ratio':>6}")
    for qtype in sorted(KERNELS, key=int):
        raw = _weights(qtype, a.rows, a.cols)
        dequantize_rows(raw, qtype, a.cols), matvec(raw, qtype, a.cols, x)  # compile / warm
        mb = raw.nbytes / 1e6
        ref_view = raw.view(np.float32) if qtype.name == "F32" else raw
        t_ours = _best(lambda: dequantize_rows(raw, qtype, a.cols), a.repeat)
        t_gguf = _best(lambda: dequantize(ref_view, qtype), a.repeat)
        t_mv = _best(lambda: matvec(raw, qtype, a.cols, x), a.repeat)
        t_base = _best(lambda: np.dot(dequantize(ref_view, qtype).reshape(a.rows, a.cols), x), a.repeat)
        print(f"{qtype.name:<6} {mb / t_ours:>15.0f} {mb / t_gguf:>13.0f} {t_gguf / t_ours:>6.1f}x  "
              f"{t_mv * 1e3:>16.2f} {t_base * 1e3:>11.2f} {t_base / t_mv:>6.1f}x")


if __name__ == "__main__":
    main()
