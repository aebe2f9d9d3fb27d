"""``refsim analyze``: run one view on a trace selection and render it as text or JSON.

The text keeps the layout of the engine's ``route-analyze.py`` (same section titles, columns
and number formats), so the two can be read side by side; the JSON carries every number at full
precision. Definitions: docs/analysis.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim.analysis import views as V
from refsim.analysis.frame import PHASES, frame_trace, in_span
from refsim.errors import ConfigError
from refsim.trace import RouteTrace

CELL_MODES = ("experts", "weights", "mb", "hit")


@dataclass
class AnalyzeOptions:
    """What ``refsim analyze`` was asked (flags of the same names)."""

    view: str
    framing: str = "decode"
    phase: str = "decode"
    turn: int | None = None
    steps: list | None = None
    layers: list | None = None
    top: int = 8
    max_steps: int = 20
    cells: str = "experts"
    budget_bytes: int | None = None


def analyze(trace: RouteTrace, opt: AnalyzeOptions) -> dict:
    """Compute view ``opt.view`` on ``trace``; returns the JSON-ready report.

    Raises
    ------
    ConfigError
        Unknown view, phase or cell mode; an empty selection (see :func:`frame_trace`).
    """
    if opt.view not in V.VIEWS:
        raise ConfigError(f"--view {opt.view!r}: expected one of {', '.join(V.VIEWS)}")
    if opt.phase not in PHASES:
        raise ConfigError(f"--phase {opt.phase!r}: expected prefill, decode or all")
    if opt.cells not in CELL_MODES:
        raise ConfigError(f"--cells {opt.cells!r}: expected one of {', '.join(CELL_MODES)}")
    phase = PHASES[opt.phase]
    matrix = opt.view == "matrix"
    fr = frame_trace(trace, opt.framing, phase, opt.turn, None if matrix else opt.steps,
                     opt.layers)
    h = trace.header
    head = dict(trace=trace.path, model=h.model, arch=h.arch, n_layer=h.n_layer,
                n_expert=h.n_expert, n_expert_used=h.n_expert_used, framing=opt.framing,
                phase=opt.phase, turn=opt.turn, rows=fr.n_rows, units=fr.n_units,
                verify_decodes=int((fr.unit_kind == 2).sum()) if opt.framing == "decode" else 0,
                dropped=int(fr.dropped.sum()), view=opt.view)
    if matrix:
        if opt.steps is not None:          # a decode is shown when one of its positions is
            show = np.array([u for u in range(fr.n_units) if in_span(
                np.arange(fr.unit_first[u], fr.unit_last[u] + 1), opt.steps).any()], np.int64)
            if not show.size:
                raise ConfigError("no rows for that --steps selection")
        else:
            show = np.arange(min(fr.n_units, opt.max_steps) if opt.max_steps else fr.n_units)
        head["window"] = "steps" if opt.steps is not None else f"first {show.size}"
        result = V.view_matrix(fr, show, fr.layers())
        result["cells_mode"] = opt.cells
    elif opt.view == "hot":
        result = V.view_hot(fr, opt.top)
    elif opt.view == "cache":
        if opt.budget_bytes is not None and opt.framing != "decode":
            raise ConfigError("--cache-mb replays decodes: use it with --framing decode")
        result = V.view_cache(fr, trace, opt.budget_bytes)
    else:
        result = getattr(V, f"view_{opt.view}")(fr)
    head["result"] = result
    return head


def _unitword(rep: dict) -> str:
    return "decodes" if rep["framing"] == "decode" else "steps"


def format_text(rep: dict) -> str:
    """The report as text (the engine script's layout; extra columns on the right)."""
    out = [f"model   {rep['model']}",
           f"arch    {rep['arch']}   n_layer {rep['n_layer']}   n_expert {rep['n_expert']}   "
           f"n_expert_used {rep['n_expert_used']}",
           f"phase   {rep['phase']}   rows {rep['rows']}",
           f"framing {rep['framing']}   {rep['units']} {_unitword(rep)}"
           + (f" ({rep['verify_decodes']} verify)" if rep["framing"] == "decode" else "")
           + (f"   turn {rep['turn']}" if rep["turn"] is not None else "")]
    if rep["dropped"]:
        out.append(f"NOTE    cache-aware dropping was ON: {rep['dropped']} of {rep['rows']} routings "
                   f"({100.0 * rep['dropped'] / rep['rows']:.1f}%) were discarded and never read.")
    r = rep["result"]
    out += globals()[f"_text_{rep['view']}"](rep, r)
    return "\n".join(out) + "\n"


def _head(title: str) -> list[str]:
    return ["", f"=== {title} ==="]


def _text_matrix(rep, r):
    mode, fw = r["cells_mode"], rep["framing"]
    layers = r["layers"]
    out = []
    if rep["window"].startswith("first"):
        out.append(f"(showing the {rep['window']} {_unitword(rep)}; use --steps to pick a window)")
    marks = "'*' = also routed at this layer on the previous " + (
        "decode, '+' = earlier in the same verify batch, '~' = dropped" if fw == "decode"
        else "step")
    out += _head(f"step x layer matrix - cells: {mode}  ({marks})")
    texts = [[V.matrix_cell_text(row["cells"][str(il)], mode, fw) if str(il) in row["cells"]
              else "" for il in layers] for row in r["rows"]]
    width = [max([len(f"L{il}")] + [len(t[j]) for t in texts]) for j, il in enumerate(layers)]
    dec = fw == "decode"
    multi_turn = len({row["turn"] for row in r["rows"]}) > 1
    out.append("%6s | " % "step" + ("%-7s | " % "decode" if dec else "")
               + " | ".join("%-*s" % (w, f"L{il}") for w, il in zip(width, layers)))
    for row, t in zip(r["rows"], texts):
        name = (f"t{row['turn']}." if multi_turn else "") + (
            f"v{row['unit']}" if row["kind"] == "verify" else str(row["unit"]))
        tag = ("%-7s | " % name) if dec else ""
        out.append("%6d | " % row["step"] + tag
                   + " | ".join("%-*s" % (w, c) for w, c in zip(width, t)))
    return out


def _text_hot(rep, r):
    out = _head(f"hot experts per layer (top {r['top']}) - 'coverage' = share of this layer's "
                f"activations")
    out.append("%5s %7s %8s  %s" % ("layer", "unique", "coverage", "expert:activations"))
    for x in r["layers"]:
        out.append("%5d %7d %7.1f%%  %s" % (x["layer"], x["unique"], x["coverage_pct"],
                                            " ".join("%d:%d" % (e, c) for e, c in x["top"])))
    return out


def _text_reuse(rep, r):
    out = _head(f"reuse distance per (layer, expert), in {r['unit']}")
    out.append("%5s %8s %8s %8s %8s %9s" % ("layer", "n_reuse", "p50", "p90", "max", "never_2nd"))
    for x in r["layers"]:
        if not x["n_reuse"]:
            out.append("%5d %8d %8s %8s %8s %9d" % (x["layer"], 0, "-", "-", "-", x["never_2nd"]))
        else:
            out.append("%5d %8d %8d %8d %8d %9d" % (x["layer"], x["n_reuse"], x["p50"], x["p90"],
                                                    x["max"], x["never_2nd"]))
    out += ["", "never_2nd = experts this layer " + ("looked up in one decode only."
                                                       if rep["framing"] == "decode"
                                                       else "routed exactly once.")]
    return out


def _text_overlap(rep, r):
    what = "decodes" if rep["framing"] == "decode" else "steps"
    out = _head(f"routing overlap with earlier {what} (mean % of the experts shared)")
    out.append("%5s " % "layer" + " ".join("%9s" % ("lag %d" % g) for g in r["lags"]))
    for x in r["layers"]:
        out.append("%5d " % x["layer"] + " ".join("%8.1f%%" % x["lag_pct"][str(g)]
                                                  for g in r["lags"]))
    out.append("%5s " % "ALL" + " ".join("%8.1f%%" % r["all"][str(g)] for g in r["lags"]))
    return out


def _text_workset(rep, r):
    out = _head(f"cumulative unique experts (working-set growth), over {r['unit']}")
    marks = r["marks"]
    out.append("%5s %7s " % ("layer", "of") + " ".join("%7s" % ("s%d" % m) for m in marks))
    for x in r["layers"]:
        out.append("%5d %7d " % (x["layer"], x["of"]) + " ".join(
            "%7s" % ("-" if v is None else v) for v in x["at"]))
    if marks:
        dec = rep["framing"] == "decode"
        out += ["", "At %s %d the union of %s experts is %.1f MiB of expert weights across all "
                "layers." % ("decode" if dec else "step", marks[-1],
                             "looked-up" if dec else "routed", r["union_mib"])]
    return out


def _text_cache(rep, r):
    rp = "replay_hit_pct" in r["all"]
    cnt = r["counted"]
    out = _head(f"cache outcome per layer (share of {cnt})")
    out.append("%5s %9s %9s %9s %10s %8s" % ("layer", "miss", "hit", "prefetch", cnt, "dropped")
               + (" %10s %8s" % ("replay_hit", "agree") if rp else ""))

    def line(name, x):
        s = "%5s %8.1f%% %8.1f%% %8.1f%% %10d %8d" % (name, x["miss_pct"], x["hit_pct"],
                                                     x["prefetch_pct"], x["n"], x["dropped"])
        if rp:
            s += " %9.1f%% %8d" % (x["replay_hit_pct"], x["replay_agree"])
        return s
    for x in r["layers"]:
        out.append(line("%5d" % x["layer"], x))
    out.append(line("ALL", r["all"]))
    if rp:
        out.append(f"\nreplay: the whole trace through refsim's LRU at "
                   f"{r['all']['budget_mib']:.1f} MiB; replay_hit = share of the same {cnt} that hit")
    if r["prefetch_by_slot"]:
        out.append("\nprefetch hits by rank slot (0 = the router's top choice): "
                   + " ".join("s%s:%d" % (s, c) for s, c in r["prefetch_by_slot"].items()))
    else:
        out.append("\nno prefetch hits recorded (--prefetch off, or every guess missed).")
    return out


def _text_entropy(rep, r):
    if not r["layers"]:
        return _head("routing entropy") + ["no weights in this trace - nothing to measure."]
    k = r["k"]
    out = _head("routing entropy per layer (bits; max = %.2f at k=%d) and top-1 weight share"
                % (r["max_bits"], k))
    out.append("%5s %9s %14s" % ("layer", "entropy", "top-1 share"))
    for x in r["layers"]:
        out.append("%5d %9.2f %13.1f%%" % (x["layer"], x["entropy_bits"], x["top1_pct"]))
    return out


def _text_bytes(rep, r):
    out = _head("expert bytes read")
    line = "total %.1f MiB over %d %s (%.2f MiB/%s average)" % (
        r["total_mib"], r["units"], r["unit"], r["mib_per_unit"], r["unit"][:-1])
    if r.get("tokens"):
        line += "; %d tokens confirmed (%.2f MiB/token)" % (r["tokens"], r["mib_per_token"])
    out.append(line)
    out.append("\n%5s %12s %12s %12s" % ("layer", "read MiB", "expert MiB", "dense MiB"))
    for x in r["layers"]:
        out.append("%5d %12.1f %12.2f %12.1f" % (x["layer"], x["read_mib"], x["expert_mib"],
                                                 x["dense_mib"]))
    out.append("\ndense total %.1f MiB - resident, never streamed (not a per-step figure)."
               % r["dense_total_mib"])
    return out
