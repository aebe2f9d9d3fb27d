"""PNG figures of the reuse, workset and overlap views (``refsim analyze --plot``; matplotlib is
the optional ``plot`` extra). The numbers plotted are the views' own (refsim.analysis.views)."""

from __future__ import annotations

import numpy as np

from refsim import MIB
from refsim.analysis import views as V
from refsim.analysis.frame import PHASES, frame_trace
from refsim.studies.plot import finish_figure, pyplot, require_matplotlib

__all__ = ["plot_analysis", "require_matplotlib"]


def plot_analysis(trace, opt, path: str) -> None:
    """Write the PNG of view ``opt.view`` (reuse, workset or overlap) to ``path``.

    - reuse: the share of reuses at distance <= d (pooled over the selected layers) against d,
      and each layer's p50 and p90;
    - workset: each layer's distinct experts after n units (thin lines) and the union's MiB
      (Σ_layers expert_bytes × distinct, right axis);
    - overlap: each layer's mean overlap at lags 1, 2, 4, 8 and the pooled mean.

    Raises
    ------
    ConfigError
        matplotlib missing, an empty selection, or the path cannot be written.
    """
    plt = pyplot()
    fr = frame_trace(trace, opt.framing, PHASES[opt.phase], opt.turn, opt.steps, opt.layers)
    unit = "decodes" if fr.framing == "decode" else "steps"
    title = f"{trace.header.model.rsplit('/', 1)[-1]} - {opt.view} ({fr.framing} framing, " \
            f"{opt.phase})"
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    if opt.view == "reuse":
        dist = V.reuse_distances(fr)
        pooled = np.sort(np.concatenate([d for d, _s in dist.values()] or [np.zeros(0)]))
        if pooled.size:
            x = np.arange(0, int(pooled[-1]) + 1)
            a.step(x, 100.0 * np.searchsorted(pooled, x, side="right") / pooled.size,
                   where="post")
        a.set_xscale("symlog", linthresh=1)
        a.set_xlabel(f"reuse distance d ({unit})")
        a.set_ylabel("% of reuses at distance <= d (all layers)")
        rows = V.view_reuse(fr)["layers"]
        lay = [r["layer"] for r in rows if r["n_reuse"]]
        b.plot(lay, [r["p50"] for r in rows if r["n_reuse"]], "-o", ms=3, label="p50")
        b.plot(lay, [r["p90"] for r in rows if r["n_reuse"]], "-o", ms=3, label="p90")
        b.set_xlabel("layer")
        b.set_ylabel(f"reuse distance ({unit})")
        b.legend(fontsize=8)
    elif opt.view == "workset":
        curves = V.workset_curves(fr)
        eb = trace.header.expert_bytes
        n = max(c.size for c in curves.values())
        union = np.zeros(n)
        for il, c in curves.items():
            a.plot(np.arange(1, c.size + 1), c, lw=0.6, alpha=0.6)
            full = np.concatenate([c, np.full(n - c.size, c[-1])])
            union += full * int(eb[il])
        a.axhline(trace.header.n_expert, color="k", lw=0.8, ls="--")
        a.set_xlabel(f"{unit} seen")
        a.set_ylabel("distinct experts per layer (one line per layer)")
        b.plot(np.arange(1, n + 1), union / MIB)
        b.set_xlabel(f"{unit} seen")
        b.set_ylabel("union of routed experts, MiB (all layers)")
    else:
        res = V.view_overlap(fr)
        lay = [r["layer"] for r in res["layers"]]
        for g in res["lags"]:
            a.plot(lay, [r["lag_pct"][str(g)] for r in res["layers"]], "-o", ms=2.5,
                   label=f"lag {g}")
        a.set_xlabel("layer")
        a.set_ylabel(f"mean % of a unit's experts in the unit lag {unit} earlier")
        a.legend(fontsize=8)
        b.bar([str(g) for g in res["lags"]], [res["all"][str(g)] for g in res["lags"]])
        b.set_xlabel(f"lag ({unit})")
        b.set_ylabel("mean overlap %, all layers pooled")
    for ax in (a, b):
        ax.grid(alpha=0.3)
    finish_figure(plt, fig, path, title)
