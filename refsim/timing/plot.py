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
        command's: :data:`refsim.timing.defaults.EPS_INTERVAL`, 0-1.2, ``refsim whatif``'s band).
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


def plot_breakeven_budgets(table: dict, path: str, bands: dict | None = None, band_label: str = "",
                           title: str = "") -> dict:
    """Break-even against the cache budget, one line per draft width (several ``--cache-mb``).

    Left: the acceptance each draft width needs at each budget (100 % marked), with the band of
    ``bands`` (the rows at two other position costs) around each line. Right: the predicted plain
    decoding tok/s at each budget (``1000 / plain_ms``), the baseline speculation must beat.

    Parameters
    ----------
    table : dict of float -> list of BreakevenRow
        Budget (MiB) -> its rows, in draft order (every budget the same drafts).
    path : str
        Output (``.png``, ``.pdf`` or ``.svg``).
    bands : dict of float -> (rows_lo, rows_hi), optional
    band_label, title : str

    Returns
    -------
    dict
        ``budget_mib`` (list), ``acceptance_needed_pct`` (draft -> list over budgets) and
        ``plain_tok_s`` (list): the plotted series.
    """
    plt = pyplot()
    budgets = list(table)
    drafts = [r.draft for r in table[budgets[0]]]
    fig, (ax_a, ax_p) = plt.subplots(1, 2, figsize=(11, 4.4))
    alpha = {}
    for k, d in enumerate(drafts):
        alpha[d] = [table[b][k].acceptance_needed_pct for b in budgets]
        color = f"C{k % 10}"
        if bands is not None:
            lo = [bands[b][0][k].acceptance_needed_pct for b in budgets]
            hi = [bands[b][1][k].acceptance_needed_pct for b in budgets]
            ax_a.fill_between(budgets, [min(x, y) for x, y in zip(lo, hi)],
                              [max(x, y) for x, y in zip(lo, hi)], color=color, alpha=0.12,
                              label=band_label if k == 0 else None)
        ax_a.plot(budgets, alpha[d], "-o", ms=3, color=color, label=f"d = {d}")
    ax_a.axhline(100.0, color="k", lw=0.8, ls="--")
    ax_a.text(budgets[0], 100.0, " 100 %: above it no acceptance pays", va="bottom", fontsize=8)
    ax_a.set_xlabel("cache budget (MiB)")
    ax_a.set_ylabel("acceptance needed, % of drafts (predicted)")
    plain = [1000.0 / table[b][0].plain_ms for b in budgets]
    ax_p.plot(budgets, plain, "-o", ms=3, color="k")
    ax_p.set_xlabel("cache budget (MiB)")
    ax_p.set_ylabel("plain decoding tok/s (predicted, not measured)")
    for ax in (ax_a, ax_p):
        ax.grid(alpha=0.3)
    ax_a.legend(fontsize=8)
    finish_figure(plt, fig, path, title)
    return {"budget_mib": budgets, "acceptance_needed_pct": alpha, "plain_tok_s": plain}


def plot_whatif(prices, path: str, title: str = "", auto: bool = False) -> dict:
    """``refsim whatif --plot``: per budget, a bar per configuration with its band.

    Left: effective tok/s (``off`` included), the band as an error bar. Right: the change against
    ``off`` in % with its band, 0 marked (a bar whose band crosses 0 is *within noise*).

    Parameters
    ----------
    prices : list of refsim.timing.verdict.Price
        In the command's order (budget, then configuration).
    path : str
        Output (``.png``, ``.pdf`` or ``.svg``).
    auto : bool
        ``--cache-mb auto``: each configuration at its own budget (the speculative memory leaves
        the cache), so the bars form one group, labelled ``auto``, and each configuration's
        legend entry names its budget.

    Returns
    -------
    dict
        ``budgets`` (``["auto"]`` under ``auto``), ``configs`` and per config ``eff_tok_s`` /
        ``delta_pct`` lists over budgets (point, lo, hi triples): the plotted series.

    Raises
    ------
    ConfigError
        matplotlib missing; the path cannot be written.
    """
    from refsim.cache import ExpertCache
    from refsim.fmt import budget_mib, num
    plt = pyplot()
    configs = list(dict.fromkeys(p.config.label for p in prices))
    if auto:
        budgets = ["auto"]
        at = {("auto", p.config.label): p for p in prices}
        legend = {p.config.label: f"{p.config.label} ({num(p.budget_mib, 1)} MiB)"
                  for p in prices}
    else:
        budgets = sorted({p.budget_mib for p in prices})
        at = {(p.budget_mib, p.config.label): p for p in prices}
        legend = {c: c for c in configs}
    fig, (ax_t, ax_d) = plt.subplots(1, 2, figsize=(11, 4.4))
    n = len(configs)
    width = 0.8 / n
    eff, delta = {}, {}
    for k, c in enumerate(configs):
        xs = [i + (k - (n - 1) / 2) * width for i in range(len(budgets))]
        ps = [at[(b, c)] for b in budgets]
        eff[c] = [(p.eff_tok_s.point, p.eff_tok_s.lo, p.eff_tok_s.hi) for p in ps]
        ax_t.bar(xs, [e[0] for e in eff[c]], width,
                 yerr=[[e[0] - e[1] for e in eff[c]], [e[2] - e[0] for e in eff[c]]],
                 capsize=3, color=f"C{k % 10}", label=legend[c])
        if c != "off":
            delta[c] = [(p.delta.point, p.delta.lo, p.delta.hi) for p in ps]
            ax_d.bar(xs, [d[0] for d in delta[c]], width,
                     yerr=[[d[0] - d[1] for d in delta[c]], [d[2] - d[0] for d in delta[c]]],
                     capsize=3, color=f"C{k % 10}", label=legend[c])
    ax_d.axhline(0.0, color="k", lw=0.8)
    for ax in (ax_t, ax_d):
        ax.set_xticks(range(len(budgets)))
        ax.set_xticklabels(["auto (each configuration's own)" if b == "auto" else
                            budget_mib(ExpertCache.mib_to_bytes(b)) for b in budgets])
        ax.set_xlabel("cache budget (MiB)")
        ax.grid(alpha=0.3, axis="y")
        if ax.get_legend_handles_labels()[0]:       # only off: no change bars, no legend
            ax.legend(fontsize=8)
    ax_t.set_ylabel("effective tok/s (predicted, band)")
    ax_d.set_ylabel("change against off, % (predicted, band)")
    finish_figure(plt, fig, path, title)
    return {"budgets": budgets, "configs": configs, "eff_tok_s": eff, "delta_pct": delta}
