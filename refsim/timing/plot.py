"""The ``refsim timing breakeven --plot`` figure (optional extra: ``pip install 'refsim[plot]'``).

Written by :func:`refsim.studies.plot.finish_figure`'s rules (the extension names the format:
PNG, PDF or SVG; refsim.fileio's atomic write)."""

from __future__ import annotations

import math

from refsim.studies.plot import finish_figure, pyplot


def plot_breakeven(rows, path: str, band: tuple | None = None, title: str = "") -> dict:
    """Break-even acceptance and tokens needed per drafted decode against the draft width.

    Left: the acceptance a draft width needs to beat plain decoding (``acceptance_needed_pct``,
    :class:`refsim.timing.breakeven.BreakevenRow`), with the region above the curve (speculation
    pays) shaded and 100 % marked (above it no acceptance pays). Right: the tokens a drafted
    decode must confirm (``t(w)/t(1)``) against the most it can (``1 + d``, every draft accepted).

    Parameters
    ----------
    rows : list of BreakevenRow
        At the command's ``--position-cost``, in draft order.
    path : str
        Output (``.png``, ``.pdf`` or ``.svg``).
    band : (rows_lo, rows_hi, label), optional
        The same rows at two other position costs, drawn as a band around the curve (the
        uncertainty docs/timing.md gives, 0.2-0.4).
    title : str, optional

    Returns
    -------
    dict
        The plotted series (``draft``, ``acceptance_needed_pct``, ``tokens_needed``, ``band_lo``,
        ``band_hi``; the last two None without ``band``), for checking what the figure shows.

    Raises
    ------
    ConfigError
        matplotlib missing; the path cannot be written.
    """
    plt = pyplot()
    d = [r.draft for r in rows]
    alpha = [r.acceptance_needed_pct for r in rows]
    need = [r.tokens_needed for r in rows]
    fig, (ax_a, ax_t) = plt.subplots(1, 2, figsize=(11, 4.4))
    lo = hi = None
    if band is not None:
        rows_lo, rows_hi, label = band
        lo = [r.acceptance_needed_pct for r in rows_lo]
        hi = [r.acceptance_needed_pct for r in rows_hi]
        ax_a.fill_between(d, [min(a, b) for a, b in zip(lo, hi)], [max(a, b) for a, b in zip(lo, hi)],
                          color="C0", alpha=0.18, label=label)
        ax_t.fill_between(d, [min(a.tokens_needed, b.tokens_needed) for a, b in zip(rows_lo, rows_hi)],
                          [max(a.tokens_needed, b.tokens_needed) for a, b in zip(rows_lo, rows_hi)],
                          color="C0", alpha=0.18, label=label)
    top = max([110.0] + [a for a in alpha if math.isfinite(a)] + (hi or []) + (lo or []))
    ax_a.fill_between(d, alpha, [top] * len(d), color="C2", alpha=0.08,
                      label="speculation pays (acceptance above the curve)")
    ax_a.plot(d, alpha, "-o", color="C0", ms=4, label="acceptance needed")
    ax_a.axhline(100.0, color="k", lw=0.8, ls="--")
    ax_a.text(d[0], 100.0, " 100 %: above it no acceptance pays", va="bottom", fontsize=8)
    ax_a.set_xlabel("draft width d (verify decode of d + 1 positions)")
    ax_a.set_ylabel("acceptance needed, % of drafts (predicted)")
    ax_a.set_ylim(min([0.0] + alpha), top)
    ax_t.plot(d, need, "-o", color="C0", ms=4, label="tokens needed t(w)/t(1)")
    ax_t.plot(d, [1 + x for x in d], ":", color="k", label="most a decode confirms, 1 + d")
    ax_t.set_xlabel("draft width d")
    ax_t.set_ylabel("tokens a drafted decode must confirm (predicted)")
    for ax in (ax_a, ax_t):
        ax.set_xticks(d)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    finish_figure(plt, fig, path, title)
    return {"draft": d, "acceptance_needed_pct": alpha, "tokens_needed": need, "band_lo": lo,
            "band_hi": hi}
