"""``refsim bench --plot``: per-token throughput and the time split of recorded runs (PNG).

Matplotlib is the optional ``plot`` extra; :func:`refsim.studies.plot.require_matplotlib` says how
to install it.
"""

from __future__ import annotations

import numpy as np

from refsim.studies.plot import _pyplot, _save

MAX_PLOTTED_RUNS = 12
"""Runs one figure shows (one row of two panels each); later runs are left out, with a note."""


def plot_bench(runs, rows, path: str) -> int:
    """One row per run: (left) tok/s of each token (1000 / its ms) over the run, the trimmed
    per-token mean as tok/s (1000 / mean ms) with its 95 % CI band and the trimmed warm-up
    shaded; (right) compute, flash wait (``io_ms`` serial / ``stall_ms`` under overlap) and
    ``mgmt_ms`` per token stacked, in ms, with the token's wall time as a line.

    Parameters
    ----------
    runs : list of refsim.telemetry.metrics_reader.MetricsRun
    rows : list of refsim.studies.bench.BenchRow
        ``bench_run`` of each run, same order.
    path : str
        Output PNG (written atomically).

    Returns
    -------
    int
        Runs plotted (at most :data:`MAX_PLOTTED_RUNS`).

    Raises
    ------
    ConfigError
        If matplotlib is missing or the path cannot be written.
    """
    plt = _pyplot()
    shown = list(zip(runs, rows))[:MAX_PLOTTED_RUNS]
    fig, axes = plt.subplots(len(shown), 2, figsize=(13, 3.2 * len(shown)), squeeze=False)
    for (run, row), (ax_t, ax_s) in zip(shown, axes):
        ms = run.token_wall_ms()
        x = np.arange(1, ms.size + 1)
        rate = np.where(ms > 0, 1000.0 / np.where(ms > 0, ms, 1.0), np.nan)
        ax_t.plot(x, rate, lw=0.7, color="C0", label="per token")
        if row.tok_s_mean is not None:          # None: no decode time measured (row.untimed)
            ax_t.axhline(row.tok_s_mean, color="k", lw=0.8, ls=":",
                         label=f"tokens / decode s = {row.tok_s_mean:.2f}")
        t = row.trimmed
        if t is not None:
            ax_t.axvspan(0.5, t.trim + 0.5, color="0.85", lw=0, label=f"first {t.trim} trimmed")
            ax_t.axhline(t.tok_s, color="C3", lw=1.2,
                         label=f"1000 / trimmed mean = {t.tok_s:.2f} (mean {t.mean_ms:.1f} ms)")
            ax_t.axhspan(1000.0 / t.ci_hi_ms, 1000.0 / t.ci_lo_ms, color="C3", alpha=0.2, lw=0,
                         label=f"95% CI [{t.ci_lo_ms:.1f}, {t.ci_hi_ms:.1f}] ms")
        ax_t.set_ylabel("decode tok/s")
        ax_t.set_title(row.label, fontsize=9)
        ax_t.legend(fontsize=7, loc="upper right")
        parts = [("compute", run.token_ms("compute_ms"), "C2"),
                 ("flash wait (stall)" if row.overlap else "flash wait (io)",
                  run.token_ms("stall_ms" if row.overlap else "io_ms"), "C1"),
                 ("mgmt", run.token_ms("mgmt_ms"), "C4")]
        parts = [(name, v, c) for name, v, c in parts if v is not None]
        if parts:
            ax_s.stackplot(x, *[v for _, v, _ in parts], labels=[n for n, _, _ in parts],
                           colors=[c for _, _, c in parts], alpha=0.8, lw=0)
        ax_s.plot(x, ms, color="k", lw=0.5, label="wall")
        ax_s.set_ylabel("ms per token")
        ax_s.legend(fontsize=7, loc="upper right")
        for ax in (ax_t, ax_s):
            ax.set_xlabel("token")
            ax.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return len(shown)
