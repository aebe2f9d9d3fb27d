"""Matplotlib figures for the cache studies (optional extra: ``pip install 'refsim[plot]'``)."""

from __future__ import annotations


import math
import os

from refsim import MIB
from refsim.errors import ConfigError
from refsim.fileio import OutputKind, open_output, resolve_output
from refsim.fmt import num

INSTALL_HINT = "matplotlib is not installed; install it with: pip install 'refsim[plot]'"

PLOT_FORMATS = ("png", "pdf", "svg")
"""The ``--plot`` formats, named by the file's extension (matplotlib's ``savefig(format=)``)."""


def plot_format(path: str, what: str = "--plot") -> str:
    """The format ``path``'s extension names (``out.pdf`` -> ``"pdf"``, case-insensitive), checked
    before any work; a FIFO or device without an extension (``/dev/stdout``, ``/dev/null``)
    gets ``"png"``.

    Raises
    ------
    ConfigError
        ``"--plot out.jpg: unsupported extension '.jpg'; expected .png, .pdf or .svg"`` (also for a
        regular file with no extension), or the messages of :func:`refsim.fileio.resolve_output`.
    """
    ext = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if ext in PLOT_FORMATS:
        return ext
    if not ext and resolve_output(path, what, binary=True).kind is OutputKind.DIRECT:
        return "png"
    shown = f"unsupported extension '.{ext}'" if ext else "no extension"
    raise ConfigError(f"{what} {path}: {shown}; expected "
                      f"{', '.join('.' + f for f in PLOT_FORMATS[:-1])} or .{PLOT_FORMATS[-1]}")


def require_matplotlib() -> None:
    """Import matplotlib now (call it before a long computation whose result is to be plotted).

    Raises
    ------
    ConfigError
        ``--plot: matplotlib is not installed; install it with: pip install 'refsim[plot]'``.
    """
    _pyplot()


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ConfigError(f"--plot: {INSTALL_HINT}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend.

    Raises
    ------
    ConfigError
        ``--plot: matplotlib is not installed; ...`` when it is missing.
    """
    return _pyplot()


def finish_figure(plt, fig, path: str, title: str = "") -> None:
    """Title (when given), tight layout, save ``fig`` to ``path`` in the format its extension
    names (:func:`plot_format`: PNG, PDF or SVG) by :mod:`refsim.fileio`'s rules, close it."""
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    try:
        _save(fig, path)
    finally:
        plt.close(fig)


def _save(fig, path: str) -> None:
    """Save ``fig`` to ``path`` in the format its extension names (:func:`plot_format`), by
    :func:`refsim.fileio.open_output`'s rules (a regular file: temp file + rename; a FIFO or
    device: written in place).

    The figure is rendered to bytes in memory first, then written in one stream: matplotlib's
    PDF writer (and its PNG writer given a path) seeks back in its file, which a FIFO, a pipe or
    ``/dev/stdout`` on a pipe refuse (``ESPIPE``, "File or stream is not seekable").
    """
    import io
    fmt = plot_format(path)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=110)
    with open_output(path, "--plot", binary=True) as fh:
        fh.write(buf.getvalue())


def plot_sweep(result, path: str, title: str = "", tok_s: list | None = None) -> None:
    """Hit % (decode-only solid, cumulative dotted) and decode MiB/token against the budget,
    one colour per policy, with the token cycle T marked and the points that hold more than their
    budget (:attr:`refsim.studies.sweep.SweepRow.over_budget`) ringed in red; written to
    ``path`` (PNG, PDF or SVG by its extension, :func:`plot_format`).

    Parameters
    ----------
    result : refsim.studies.sweep.SweepResult
    path : str
        Output path (``.png``, ``.pdf`` or ``.svg``).
    title : str, optional
    tok_s : list of float, optional
        One predicted tok/s per row (``--device``): a third panel, tok/s against the budget.

    Raises
    ------
    ConfigError
        If matplotlib is missing (the message says how to install it) or the path cannot be
        written.
    """
    plt = _pyplot()
    if tok_s is None:
        fig, (ax_hit, ax_mib) = plt.subplots(1, 2, figsize=(12, 4.8))
    else:
        fig, (ax_hit, ax_mib, ax_tps) = plt.subplots(1, 3, figsize=(17, 4.8))
        for i, pol in enumerate(result.policies):
            idx = [j for j, r in enumerate(result.rows) if r.policy == pol]
            ax_tps.plot([result.rows[j].budget_mib for j in idx], [math.nan if tok_s[j] is None else tok_s[j] for j in idx], "-o",
                        ms=3, color=f"C{i}", label=pol)
        ax_tps.set_xlabel("cache budget (MiB)")
        ax_tps.set_ylabel("predicted decode tok/s (device model, not measured)")
        ax_tps.grid(alpha=0.3)
    t_mib = result.t_bytes / MIB

    def y(v):                                   # an undefined rate (None) is a gap, not a 0
        return math.nan if v is None else v

    marked = False
    for i, pol in enumerate(result.policies):
        rows = [r for r in result.rows if r.policy == pol]
        x = [r.budget_mib for r in rows]
        color = f"C{i}"
        ax_hit.plot(x, [y(r.summary.hit_pct_decode) for r in rows], "-o", ms=3, color=color,
                    label=pol)
        ax_hit.plot(x, [y(r.summary.hit_pct_cum) for r in rows], ":", color=color)
        ax_mib.plot(x, [y(r.summary.mib_per_token) for r in rows], "-o", ms=3, color=color,
                    label=pol)
        over = [r for r in rows if r.over_budget]      # holds more than the budget: ringed
        if over:
            label = None if marked else "holds > budget"
            marked = True
            ax_hit.plot([r.budget_mib for r in over], [y(r.summary.hit_pct_decode) for r in over],
                        "o", ms=9, mfc="none", mec="red", label=label)
            ax_mib.plot([r.budget_mib for r in over], [y(r.summary.mib_per_token) for r in over],
                        "o", ms=9, mfc="none", mec="red", label=label)
    for ax in (ax_hit, ax_mib):
        ax.axvline(t_mib, color="k", lw=0.8, ls="--")
        ax.text(t_mib, 0.98, f" T = {num(t_mib, 0)} MiB", transform=ax.get_xaxis_transform(),
                va="top", fontsize=8)
        ax.set_xlabel("cache budget (MiB)")
        ax.grid(alpha=0.3)
    ax_hit.set_ylabel("hit % (solid: decode-only, dotted: cumulative)")
    ax_hit.set_ylim(0, 100)
    ax_mib.set_ylabel("flash read, MiB per token (decode)")
    ax_hit.legend(fontsize=8)
    if marked:
        ax_mib.legend(fontsize=8)
    finish_figure(plt, fig, path, title)


def plot_knob_grid(results: dict, path: str, title: str = "") -> None:
    """Hit % (decode) and MiB/token against the budget, one line per (F, K) of
    ``--drop-cold-experts F`` / ``--prefetch K``.

    Parameters
    ----------
    results : dict of (float, int) -> SweepResult
        :func:`refsim.studies.sweep.sweep_knobs` results keyed by (F, K); lines are coloured
        by F and styled by K.
    path : str
        Output: PNG, PDF or SVG by its extension (:func:`plot_format`), by refsim.fileio's rules.
    """
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    fracs = sorted({f for f, _ in results})
    styles = ["-", "--", ":", "-."]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for (f, kk), res in sorted(results.items()):
        x = [r.budget_mib for r in res.rows]
        kw = dict(color=colours[fracs.index(f) % len(colours)], linestyle=styles[kk % len(styles)],
                  marker="o", markersize=3, label=f"F={f:g} K={kk}")
        a.plot(x, [r.summary.hit_pct_decode for r in res.rows], **kw)
        b.plot(x, [r.summary.mib_per_token for r in res.rows], **kw)
    a.set_xlabel("cache budget (MiB)")
    a.set_ylabel("decode hit %")
    b.set_xlabel("cache budget (MiB)")
    b.set_ylabel("decode MiB / token (prefetch reads included)")
    b.legend(fontsize=7, ncol=2)
    finish_figure(plt, fig, path, title)
