"""Speed of the n-gram matcher: pure Python vs the Numba twin on long corpora.

Prints seconds per call and the ratio against the pure function measured in the same run
(no absolute thresholds). Run: python benchmarks/bench_ngram.py
"""

from __future__ import annotations

import time

import numpy as np

from refsim.spec import ngram_draft, ngram_draft_numba
from refsim.testing import copy_heavy_document


def _time(fn, *args, repeat=5):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ngram_draft_numba(np.arange(20), 3, 3, 12)   # compile / load the cache outside the timing
    for n in (1_000, 10_000, 100_000):
        corpus = np.asarray(copy_heavy_document(n, n_vocab=200, seed=1), dtype=np.int64)
        same = ngram_draft(corpus, 8, 3, 12).tolist() == ngram_draft_numba(corpus, 8, 3, 12).tolist()
        assert same
        t_pure = _time(ngram_draft, corpus, 8, 3, 12)
        t_nb = _time(ngram_draft_numba, corpus, 8, 3, 12)
        print(f"corpus {n:>7} tokens: pure {t_pure * 1e3:8.3f} ms, numba {t_nb * 1e3:8.3f} ms, "
              f"speed-up x{t_pure / t_nb:.1f}")


if __name__ == "__main__":
    main()
