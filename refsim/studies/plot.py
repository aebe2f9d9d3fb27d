"""Matplotlib figures for the cache studies (optional extra: ``pip install 'refsim[plot]'``)."""

from __future__ import annotations


from refsim import MIB
from refsim.errors import ConfigError
from refsim.fileio import atomic_path

INSTALL_HINT = "matplotlib is not installed; install it with: pip install 'refsim[plot]'"


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


def _save(fig, path: str) -> None:
    """Save ``fig`` as PNG to ``path`` atomically (temp file in the same folder + rename)."""
    with atomic_path(path, "--plot", suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)


def plot_sweep(result, path: str, title: str = "") -> None:
    """Hit % (decode-only solid, cumulative dotted) and decode MiB/token against the budget,
    one colour per policy, with the token cycle T marked; written to ``path`` (PNG).

    Parameters
    ----------
    result : refsim.studies.sweep.SweepResult
    path : str
        Output PNG path.
    title : str, optional

    Raises
    ------
    ConfigError
        If matplotlib is missing (the message says how to install it) or the path cannot be
        written.
    """
    plt = _pyplot()
    fig, (ax_hit, ax_mib) = plt.subplots(1, 2, figsize=(12, 4.8))
    t_mib = result.t_bytes / MIB
    for i, pol in enumerate(result.policies):
        rows = [r for r in result.rows if r.policy == pol]
        x = [r.budget_mib for r in rows]
        color = f"C{i}"
        ax_hit.plot(x, [r.summary.hit_pct_decode for r in rows], "-o", ms=3, color=color,
                    label=pol)
        ax_hit.plot(x, [r.summary.hit_pct_cum for r in rows], ":", color=color)
        ax_mib.plot(x, [r.summary.mib_per_token for r in rows], "-o", ms=3, color=color,
                    label=pol)
    for ax in (ax_hit, ax_mib):
        ax.axvline(t_mib, color="k", lw=0.8, ls="--")
        ax.text(t_mib, 0.98, f" T = {t_mib:.0f} MiB", transform=ax.get_xaxis_transform(),
                va="top", fontsize=8)
        ax.set_xlabel("cache budget (MiB)")
        ax.grid(alpha=0.3)
    ax_hit.set_ylabel("hit % (solid: decode-only, dotted: cumulative)")
    ax_hit.set_ylim(0, 100)
    ax_mib.set_ylabel("flash read, MiB per token (decode)")
    ax_hit.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    try:
        _save(fig, path)
    finally:
        plt.close(fig)


def plot_knob_grid(results: dict, path: str, title: str = "") -> None:
    """Hit % (decode) and MiB/token against the budget, one line per (F, K) of
    ``--drop-cold-experts F`` / ``--prefetch K``.

    Parameters
    ----------
    results : dict of (float, int) -> SweepResult
        :func:`refsim.studies.sweep.sweep_knobs` results keyed by (F, K); lines are coloured
        by F and styled by K.
    path : str
        PNG output (atomic).
    """
    plt = _pyplot()
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
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
