"""``refsim view``: one self-contained HTML page of a route trace (and optionally a run's
per-token metrics). No network: the data is packed into the page as JSON and drawn by a small
hand-written script (SVG and canvas). docs/analysis.md, "refsim view".

What the page shows, all in the decode framing (one unit per decode event):

- tiles: model, decodes (verify ones), confirmed tokens, decode read MiB and MiB/token, the
  recorded decode hit rate (per lookup);
- the miss map: every (decode position, layer) cell coloured by its recorded outcome;
- the step × layer matrix of expert ids, paged, each id coloured miss / hit / prefetched /
  dropped, underlined when the previous decode also routed it, verify batches marked;
- per decode: read MiB and hit % over time, verify decodes marked;
- the union widening per layer: mean distinct experts of w consecutive decode positions
  (:func:`refsim.studies.union.window_union_sizes`) for w = 1..4;
- hot experts per layer (:func:`refsim.analysis.views.view_hot`);
- per-token metrics when given (a dict of per-token arrays, :func:`metrics_columns`).

Safety: every string from the files reaches the page either through :func:`html.escape` or
inside the JSON block with ``<``, ``>``, ``&`` and U+2028/9 escaped, and the script writes text
with ``textContent`` only, so a ``model=`` such as ``</script><script>...`` stays text.
"""

from __future__ import annotations

import html
import json
import os

import numpy as np

from refsim import MIB
from refsim.analysis import views as V
from refsim.analysis.frame import frame_trace
from refsim.events import DecodeKind, confirmed_tokens
from refsim.fileio import write_text_atomic
from refsim.fmt import pct, ratio
from refsim.studies.union import decode_positions, window_union_sizes
from refsim.trace import RouteTrace

UNION_WINDOWS = (1, 2, 3, 4)


def same_run_mismatches(trace: RouteTrace, run) -> list[str]:
    """What says a metrics CSV is not the trace's run: one ``"FIELD: trace X, metrics Y"`` per
    disagreement, empty when every stated field agrees.

    Compared where both files state them: the model file's name (the trace's ``model=`` path and
    the metrics preamble's ``model=`` file name, by base name: the engine writes the path in the
    trace and the name in the metrics), ``arch``, ``n_expert``, ``n_expert_used`` (the two
    preambles' model lines, docs/trace-format.md and docs/telemetry.md; not ``n_layer``, which
    the trace states as its streamed span and the metrics as the model's); the tokens (one
    metrics row per emitted token, bmoe-engine.md "per-token metrics"; the trace's confirmed
    tokens, :func:`refsim.events.confirmed_tokens`, a range when a turn's last verify decode
    does not record how many drafts it accepted); and the prompt (the trace's turn-0 prefill positions against the
    first ``# summary`` trailer's ``n_prompt``). A field one file lacks (a legacy metrics file
    has no preamble; a run stopped before its trailer has no ``n_prompt``) is not compared.

    Parameters
    ----------
    trace : RouteTrace
    run : refsim.telemetry.metrics_reader.MetricsRun

    Returns
    -------
    list of str
    """
    h = trace.header
    out = []
    stated = {"model": h.model, "arch": h.arch, "n_expert": str(h.n_expert),
              "n_expert_used": str(h.n_expert_used)}
    for key, ours in stated.items():
        theirs = run.config.get(key)
        if theirs is None:
            continue
        if key == "model":
            same = os.path.basename(theirs) == os.path.basename(ours)
        elif key == "arch":
            same = theirs == ours
        else:
            same = float(theirs) == int(ours)
        if not same:
            out.append(f"{key}: trace {ours}, metrics {theirs}")
    low = sum(confirmed_tokens(e) for e in trace.events)
    high = low + sum(e.n_draft for e in trace.events
                     if e.kind is DecodeKind.VERIFY and e.accepted is None)
    rows = len(run.line_numbers)
    if not low <= rows <= high:
        said = str(low) if high == low else f"{low}..{high}"
        out.append(f"tokens: trace {said}, metrics {rows} rows")
    if run.summaries and "n_prompt" in run.summaries[0] and trace.n_prompt:
        n_prompt = int(run.summaries[0]["n_prompt"])
        if n_prompt != trace.n_prompt:
            out.append(f"prompt tokens: trace {trace.n_prompt}, metrics {n_prompt}")
    return out


def metrics_of_trace(path: str, trace: RouteTrace) -> dict[str, list[float]]:
    """:func:`metrics_columns` of the metrics CSV at ``path``, refused when it is not the run of
    ``trace`` (:func:`same_run_mismatches`; issue 26 C2: another model's run was drawn beside
    the trace with no word).

    Raises
    ------
    ConfigError
        ``"PATH: not the run of TRACE (model: trace A, metrics B; ...)"``.
    MetricsFormatError
        As :func:`metrics_columns`.
    """
    from refsim.errors import ConfigError
    from refsim.telemetry.metrics_reader import read_metrics

    run = read_metrics(path)
    wrong = same_run_mismatches(trace, run)
    if wrong:
        raise ConfigError(f"{path}: not the run of {trace.path} ({'; '.join(wrong)})")
    return _columns(run)


def metrics_columns(path: str) -> dict[str, list[float]]:
    """Per-token columns of an engine/refsim metrics CSV, by name: ``{column: [value per row]}``.

    Read and validated by :func:`refsim.telemetry.metrics_reader.read_metrics` (every layout:
    ``bmoe_metrics v2``, ``v1``, legacy with or without header), so the page shows exactly what
    ``refsim bench`` reads. A file whose times are a device model's predictions (preamble
    ``times=predicted``, ``refsim run --device``) has its time columns named so, e.g.
    ``wall_ms (predicted: dev.json)``, and the page labels them that way.

    Raises
    ------
    MetricsFormatError
        Naming ``file:line`` (see :func:`~refsim.telemetry.metrics_reader.read_metrics`).
    """
    from refsim.telemetry.metrics_reader import read_metrics

    return _columns(read_metrics(path))


def _columns(run) -> dict[str, list[float]]:
    """:func:`metrics_columns` of a read ``MetricsRun``."""
    timed = ("wall_ms", "io_ms", "compute_ms", "stall_ms", "mgmt_ms")

    def label(name: str) -> str:
        if run.predicted_by is None or name not in timed:
            return name
        return f"{name} (predicted: {run.predicted_by})"
    return {label(name): run.data[name].astype(float).tolist() for name in run.columns}


def _script_json(obj) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``</script>``, no ``<!--``)."""
    return (json.dumps(obj, separators=(",", ":"), allow_nan=False)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def page_data(trace: RouteTrace, metrics: dict | None = None) -> dict:
    """The page's payload (JSON-ready). Row arrays are per (decode, position), all phases, in
    trace order; ``ids`` / ``code`` are flat ``[row][layer][slot]`` (``-1`` = not routed);
    ``code`` = residency (0 miss, 1 hit, 2 prefetched) or 3 dropped, +4 when the previous
    decode routed the id in this layer, +8 when an earlier position of the same batch did."""
    h = trace.header
    fr = frame_trace(trace, "decode", phase=None)
    layers = fr.layers()
    lidx = {il: j for j, il in enumerate(layers)}
    k = h.n_expert_used
    repeat, in_batch = V.repeat_flags(fr)
    pairs, row = np.unique(np.stack([fr.unit, fr.step], axis=1), axis=0, return_inverse=True)
    row = row.reshape(-1)
    n_rows = pairs.shape[0]
    ids = np.full((n_rows, len(layers), k), -1, np.int64)
    code = np.full((n_rows, len(layers), k), -1, np.int64)
    li = np.array([lidx[x] for x in fr.layer.tolist()], np.int64)
    ids[row, li, fr.slot] = fr.expert
    code[row, li, fr.slot] = (np.where(fr.dropped, 3, fr.residency) + 4 * repeat + 8 * in_batch)
    row_unit, row_step = pairs[:, 0], pairs[:, 1]
    occ = V.occurrences(fr)["idx"]
    lookups = np.bincount(fr.unit[occ], minlength=fr.n_units)
    hits = np.bincount(fr.unit[occ], weights=(fr.residency[occ] != 0), minlength=fr.n_units)
    read = np.bincount(fr.unit, weights=fr.bytes, minlength=fr.n_units)
    events = [trace.events[i] for i in fr.unit_event.tolist()]
    dec = fr.unit_phase == 1
    d_look, d_hit = int(lookups[dec].sum()), int(hits[dec].sum())
    tokens = int(fr.unit_tokens.sum())
    union = None
    try:
        _pos, routes, dropped = decode_positions(trace.events)
        union = {"windows": [w for w in UNION_WINDOWS if w <= routes.shape[0]], "mean": []}
        for w in union["windows"]:
            sizes = window_union_sizes(routes, h.n_expert, w, dropped)
            union["mean"].append([float(sizes[:, il].mean()) for il in layers])
    except Exception:          # a prefill-only trace: no decode positions, no widening panel
        union = None
    hot = V.view_hot(frame_trace(trace, "decode", phase=1), 12) if dec.any() else \
        {"top": 12, "layers": []}
    return {
        "meta": dict(model=h.model, label=os.path.basename(h.model), arch=h.arch,
                     n_layer=h.n_layer, n_expert=h.n_expert, k=k, path=trace.path,
                     rows=trace.n_rows, n_prompt=trace.n_prompt),
        "layers": layers,
        "expert_mib": [int(h.expert_bytes[il]) / MIB for il in layers],
        "row_unit": row_unit.tolist(), "row_step": row_step.tolist(),
        "ids": ids.ravel().tolist(), "code": code.ravel().tolist(),
        "units": dict(first=fr.unit_first.tolist(), npos=fr.unit_npos.tolist(),
                      kind=[V.KIND_NAMES[int(x)] for x in fr.unit_kind.tolist()],
                      turn=fr.unit_turn.tolist(), phase=fr.unit_phase.tolist(),
                      read_mib=(read / MIB).tolist(), lookups=lookups.tolist(),
                      hits=hits.astype(np.int64).tolist(),
                      accepted=[e.accepted for e in events], tokens=fr.unit_tokens.tolist()),
        "totals": dict(decodes=int(dec.sum()), verify=int((fr.unit_kind == 2).sum()),
                       tokens=tokens, decode_read_mib=float(read[dec].sum()) / MIB,
                       # None (JSON null, "n/a" on the page) over zero tokens / lookups
                       mib_per_token=ratio(float(read[dec].sum()) / MIB, tokens),
                       hit_pct_decode=pct(d_hit, d_look),
                       dropped=int(fr.dropped.sum())),
        "union": union,
        "hot": hot,
        "metrics": metrics,
    }


def render_page(trace: RouteTrace, metrics: dict | None = None) -> str:
    """The whole HTML page as one string."""
    data = page_data(trace, metrics)
    title = html.escape(f"refsim view - {data['meta']['label'] or 'route trace'}")
    return (_PAGE.replace("__TITLE__", title)
            .replace("__DATA__", _script_json(data)))


def write_page(trace: RouteTrace, path: str, metrics: dict | None = None) -> int:
    """Write the page to ``path`` atomically; returns its size in bytes."""
    text = render_page(trace, metrics)
    write_text_atomic(path, text, "--html")
    return len(text.encode("utf-8"))


_PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<title>__TITLE__</title>
<style>
:root{--bg:#f5f7f8;--card:#fff;--ink:#14201f;--mut:#5d6e70;--line:#d8e0e2;--miss:#c4561a;
--hit:#cfd8da;--pre:#0e8c80;--drop:#7a4fc4;--ver:#2f6fd6}
*{box-sizing:border-box}body{margin:0;background:var(--bg);color:var(--ink);
font:14px/1.45 system-ui,sans-serif}.wrap{max-width:1400px;margin:0 auto;padding:20px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:15px;margin:0;padding:10px 14px;border-bottom:1px solid var(--line)}
.sub{color:var(--mut);margin:0 0 14px;word-break:break-all}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:8px;margin-bottom:14px}
.tile{background:var(--card);border:1px solid var(--line);border-radius:7px;padding:9px 11px}
.tile .k{font-size:11px;text-transform:uppercase;letter-spacing:.08em;color:var(--mut)}
.tile .v{font-size:20px;font-weight:600}
.panel{background:var(--card);border:1px solid var(--line);border-radius:8px;margin-bottom:14px;overflow:hidden}
.note{padding:8px 14px;color:var(--mut);font-size:12.5px}.body{padding:10px 14px;overflow:auto}
.legend span{display:inline-flex;align-items:center;gap:5px;margin-right:14px;font-size:12px}
.sw{width:11px;height:11px;border-radius:2px;display:inline-block}
table{border-collapse:collapse;font:11px ui-monospace,Menlo,Consolas,monospace}
th,td{padding:2px 5px;border-bottom:1px solid #eef2f3;white-space:nowrap;text-align:left}
th{background:#edf2f3;position:sticky;top:0}
td.st{color:var(--mut);text-align:right}tr.verify td.st{color:var(--ver);font-weight:700}
tr.turn td{border-top:2px solid var(--ver)}
.e{padding:0 2px;border-radius:2px;margin-right:2px}.e0{background:#f7e0d0;color:var(--miss);font-weight:600}
.e1{color:#334}.e2{background:#d5edea;color:var(--pre);font-weight:600}.e3{color:var(--drop);text-decoration:line-through}
.rep{box-shadow:inset 0 -2px 0 var(--pre)}.inb{box-shadow:inset 0 -2px 0 var(--ver)}
.pager{padding:8px 14px;border-top:1px solid var(--line);display:flex;gap:8px;align-items:center}
button{font:inherit;padding:3px 10px;border:1px solid var(--line);border-radius:5px;background:#fff;cursor:pointer}
svg text{font:10px system-ui,sans-serif;fill:var(--mut)}.bar{display:inline-block;height:8px;background:var(--pre);vertical-align:middle}
.err{color:#b00;font-weight:700}
</style></head><body><div class="wrap">
<h1 id="title"></h1><p class="sub" id="subtitle"></p>
<div class="tiles" id="tiles"></div>
<div class="panel"><h2>Miss map: every decode position x layer</h2>
<div class="note">One column per (decode, position) in trace order, one row per layer. Orange: the
cell's slots missed (darker = more), teal: prefetched hit, purple: dropped, grey: hit. Blue ticks
under the map mark verify decodes; a blue line, a new turn; the dashed line, the end of prefill.</div>
<div class="body"><canvas id="heat"></canvas></div></div>
<div class="panel"><h2>Per decode: flash read and hit rate</h2>
<div class="note">Bars: MiB the decode read (the trace's expert_bytes column); line: the decode's
recorded hit % over its lookups (one per distinct expert of a layer batch). Blue bars are verify
decodes.</div><div class="body" id="perdecode"></div></div>
<div class="panel"><h2>Step x layer matrix</h2>
<div class="legend note"><span><i class="sw" style="background:#f7e0d0"></i>miss</span>
<span><i class="sw" style="background:var(--hit)"></i>hit</span><span><i class="sw" style="background:#d5edea"></i>prefetched hit</span>
<span><i class="sw" style="background:var(--drop)"></i>dropped (never read)</span>
<span><i class="sw" style="box-shadow:inset 0 -2px 0 var(--pre)"></i>also routed by the previous decode</span>
<span><i class="sw" style="box-shadow:inset 0 -2px 0 var(--ver)"></i>earlier in the same batch (verify decode or prefill chunk)</span>
<span style="color:var(--ver);font-weight:700">step in blue = verify batch</span></div>
<div class="body" style="max-height:70vh"><table id="matrix"></table></div>
<div class="pager"><button id="prev">&larr; earlier</button><button id="next">later &rarr;</button><span id="page" class="note"></span></div></div>
<div class="panel"><h2>Union widening per layer</h2>
<div class="note">Mean distinct experts routed by w consecutive decode positions, per layer: what a
verify batch of width w reads at most. w = 1 is top-k.</div><div class="body" id="union"></div></div>
<div class="panel"><h2>Hot experts per layer (decode)</h2>
<div class="note">unique: experts the layer routed at all; coverage: share of its routings carried
by the 12 busiest (ties: first routed first).</div><div class="body"><table id="hot"></table></div></div>
<div class="panel" id="metrics-panel"><h2>Per-token metrics</h2><div class="body" id="metrics"></div></div>
<p class="note" id="status"></p>
</div>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
window.addEventListener("error", ev => { document.body.dataset.error = String(ev.message); });
const D = JSON.parse(document.getElementById("data").textContent);
const L = D.layers.length, K = D.meta.k, NR = D.row_unit.length, PAGE = 32;
const $ = id => document.getElementById(id);
function el(tag, attrs, text){ const e = document.createElement(tag);
  for (const a in (attrs||{})) e.setAttribute(a, attrs[a]); if (text !== undefined) e.textContent = text; return e; }
const SVGNS = "http://www.w3.org/2000/svg";
function sv(tag, attrs, text){ const e = document.createElementNS(SVGNS, tag);
  for (const a in attrs) e.setAttribute(a, attrs[a]); if (text !== undefined) e.textContent = text; return e; }
const fmt = (x, d) => (x === null || x === undefined) ? "n/a" : Number(x).toFixed(d);

$("title").textContent = "Route trace: " + (D.meta.label || "(no model name)");
$("subtitle").textContent = D.meta.model + "  ·  " + D.meta.arch + "  ·  " + D.meta.path;
const T = D.totals;
[["decodes", T.decodes + (T.verify ? " (" + T.verify + " verify)" : "")],
 ["tokens confirmed", T.tokens], ["layers x experts, top-k", D.meta.n_layer + " x " + D.meta.n_expert + ", " + K],
 ["decode read", fmt(T.decode_read_mib, 1) + " MiB"], ["read per token", fmt(T.mib_per_token, 2) + " MiB"],
 ["decode hit (recorded)", fmt(T.hit_pct_decode, 1) + " %"], ["dropped routings", T.dropped],
 ["prompt positions", D.meta.n_prompt]].forEach(([k, v]) => {
  const t = el("div", {class: "tile"}); t.appendChild(el("div", {class: "k"}, k));
  t.appendChild(el("div", {class: "v"}, String(v))); $("tiles").appendChild(t); });

// ── miss map (canvas) ───────────────────────────────────────────
(function heat(){
  const c = $("heat"), cw = Math.max(2, Math.min(24, Math.floor(1300 / Math.max(1, NR)))),
        ch = Math.max(3, Math.min(16, Math.floor(400 / Math.max(1, L)))), foot = 8;
  c.width = NR * cw; c.height = L * ch + foot; c.style.width = c.width + "px";
  const g = c.getContext("2d"); g.fillStyle = "#fff"; g.fillRect(0, 0, c.width, c.height);
  for (let r = 0; r < NR; r++) for (let l = 0; l < L; l++) {
    let miss = 0, pre = 0, drop = 0, n = 0;
    for (let s = 0; s < K; s++) { const v = D.code[(r * L + l) * K + s]; if (v < 0) continue;
      const o = v & 3; n++; if (o === 0) miss++; else if (o === 2) pre++; else if (o === 3) drop++; }
    if (!n) continue;
    g.fillStyle = "#dfe6e8"; g.fillRect(r * cw, l * ch, cw, ch);
    if (drop) { g.fillStyle = "#7a4fc4"; g.globalAlpha = 0.3 + 0.7 * drop / n; g.fillRect(r * cw, l * ch, cw, ch); }
    if (pre) { g.fillStyle = "#0e8c80"; g.globalAlpha = 0.3 + 0.7 * pre / n; g.fillRect(r * cw, l * ch, cw, ch); }
    if (miss) { g.fillStyle = "#c4561a"; g.globalAlpha = 0.25 + 0.75 * miss / n; g.fillRect(r * cw, l * ch, cw, ch); }
    g.globalAlpha = 1;
  }
  for (let r = 0; r < NR; r++) { const u = D.row_unit[r];
    if (D.units.kind[u] === "verify") { g.fillStyle = "#2f6fd6"; g.fillRect(r * cw, L * ch + 2, cw, foot - 2); }
    if (r > 0 && D.units.turn[u] !== D.units.turn[D.row_unit[r - 1]]) { g.fillStyle = "#2f6fd6"; g.fillRect(r * cw, 0, 1, L * ch); }
    if (r > 0 && D.units.phase[u] === 1 && D.units.phase[D.row_unit[r - 1]] === 0) {
      g.fillStyle = "#000"; for (let y = 0; y < L * ch; y += 4) g.fillRect(r * cw, y, 1, 2); } }
})();

// ── per-decode chart (SVG) ──────────────────────────────────────
(function perDecode(){
  const U = D.units, idx = []; for (let u = 0; u < U.first.length; u++) if (U.phase[u] === 1) idx.push(u);
  const box = $("perdecode");
  if (!idx.length) { box.textContent = "no decodes in this trace"; return; }
  const W = 1300, H = 220, pl = 46, pr = 40, pt = 10, pb = 28, iw = W - pl - pr, ih = H - pt - pb;
  const s = sv("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, id: "perdecode-svg"});
  const maxMib = Math.max(1e-9, ...idx.map(u => U.read_mib[u])), bw = iw / idx.length;
  s.appendChild(sv("line", {x1: pl, y1: pt + ih, x2: pl + iw, y2: pt + ih, stroke: "#999"}));
  idx.forEach((u, i) => { const h = ih * U.read_mib[u] / maxMib;
    const r = sv("rect", {x: pl + i * bw, y: pt + ih - h, width: Math.max(1, bw - 0.5), height: h,
      fill: U.kind[u] === "verify" ? "#2f6fd6" : "#9fb4b8"});
    r.appendChild(sv("title", {}, "decode " + u + " at step " + U.first[u] + " (" + U.kind[u] + ", " + U.npos[u] +
      " positions): " + fmt(U.read_mib[u], 1) + " MiB, " + U.hits[u] + "/" + U.lookups[u] + " hits"));
    s.appendChild(r); });
  let d = ""; idx.forEach((u, i) => { const hp = U.lookups[u] ? U.hits[u] / U.lookups[u] : 0;
    d += (i ? "L" : "M") + fmt(pl + (i + 0.5) * bw, 1) + " " + fmt(pt + ih * (1 - hp), 1); });
  s.appendChild(sv("path", {d: d, fill: "none", stroke: "#c4561a", "stroke-width": 1.5}));
  s.appendChild(sv("text", {x: 4, y: pt + 8}, fmt(maxMib, 0) + " MiB"));
  s.appendChild(sv("text", {x: 4, y: pt + ih}, "0"));
  s.appendChild(sv("text", {x: pl + iw + 4, y: pt + 8}, "100 %"));
  s.appendChild(sv("text", {x: pl + iw + 4, y: pt + ih}, "0 %"));
  s.appendChild(sv("text", {x: pl, y: H - 8}, "decode 1 (step " + U.first[idx[0]] + ")"));
  s.appendChild(sv("text", {x: pl + iw - 160, y: H - 8}, "decode " + idx.length + " (step " + U.first[idx[idx.length - 1]] + ")"));
  box.appendChild(s);
})();

// ── matrix (paged table) ────────────────────────────────────────
let page = 0; const pages = Math.max(1, Math.ceil(NR / PAGE));
const M = $("matrix"); M.dataset.rows = NR; M.dataset.layers = L; M.dataset.k = K;
function matrix(){
  M.textContent = "";
  const th = el("thead"), hr = el("tr"); hr.appendChild(el("th", {}, "step")); hr.appendChild(el("th", {}, "decode"));
  D.layers.forEach(l => hr.appendChild(el("th", {}, "L" + l))); th.appendChild(hr); M.appendChild(th);
  const tb = el("tbody");
  for (let r = page * PAGE; r < Math.min(NR, (page + 1) * PAGE); r++) {
    const u = D.row_unit[r], kind = D.units.kind[u];
    const tr = el("tr", {class: kind + (r > 0 && D.units.turn[D.row_unit[r - 1]] !== D.units.turn[u] ? " turn" : "")});
    tr.appendChild(el("td", {class: "st"}, String(D.row_step[r])));
    tr.appendChild(el("td", {class: "st"}, (kind === "verify" ? "v" : kind === "prefill" ? "p" : "") + u));
    for (let l = 0; l < L; l++) { const td = el("td");
      for (let s = 0; s < K; s++) { const i = (r * L + l) * K + s, e = D.ids[i]; if (e < 0) continue;
        const v = D.code[i], o = v & 3;
        const sp = el("span", {class: "e e" + o + (v & 4 ? " rep" : "") + (v & 8 ? " inb" : "")}, String(e));
        sp.title = "expert " + e + " · " + ["miss", "hit", "prefetched hit", "dropped"][o] + " · layer " + D.layers[l] + " · step " + D.row_step[r];
        td.appendChild(sp); }
      tr.appendChild(td); }
    tb.appendChild(tr); }
  M.appendChild(tb);
  $("page").textContent = "rows " + (page * PAGE + 1) + "–" + Math.min(NR, (page + 1) * PAGE) + " of " + NR + " (page " + (page + 1) + " / " + pages + ")";
  $("prev").disabled = page === 0; $("next").disabled = page >= pages - 1;
}
$("prev").onclick = () => { page = Math.max(0, page - 1); matrix(); };
$("next").onclick = () => { page = Math.min(pages - 1, page + 1); matrix(); };
matrix();

// ── union widening (SVG lines per w) ────────────────────────────
(function union(){
  const box = $("union");
  if (!D.union) { box.textContent = "no decode positions in this trace"; return; }
  const W = 1300, H = 230, pl = 40, pb = 26, pt = 10, iw = W - pl - 120, ih = H - pt - pb;
  const s = sv("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, id: "union-svg"});
  const ymax = Math.max(1, ...D.union.mean.flat()), cols = ["#9fb4b8", "#0e8c80", "#2f6fd6", "#c4561a"];
  const x = j => pl + (L > 1 ? iw * j / (L - 1) : iw / 2), y = v => pt + ih * (1 - v / ymax);
  D.union.windows.forEach((w, wi) => { let d = "";
    D.union.mean[wi].forEach((v, j) => { d += (j ? "L" : "M") + fmt(x(j), 1) + " " + fmt(y(v), 1); });
    s.appendChild(sv("path", {d: d, fill: "none", stroke: cols[wi % 4], "stroke-width": 1.6}));
    s.appendChild(sv("text", {x: pl + iw + 8, y: pt + 12 + 14 * wi, fill: cols[wi % 4]}, "w = " + w)); });
  s.appendChild(sv("text", {x: 2, y: pt + 8}, fmt(ymax, 1)));
  s.appendChild(sv("text", {x: 2, y: pt + ih}, "0"));
  s.appendChild(sv("text", {x: pl, y: H - 6}, "layer " + D.layers[0]));
  s.appendChild(sv("text", {x: pl + iw - 50, y: H - 6}, "layer " + D.layers[L - 1]));
  box.appendChild(s);
})();

// ── hot experts ─────────────────────────────────────────────────
(function hot(){
  const t = $("hot"), hr = el("tr");
  ["layer", "unique", "coverage", "busiest experts: id·routings"].forEach(h => hr.appendChild(el("th", {}, h)));
  t.appendChild(hr);
  D.hot.layers.forEach(x => { const tr = el("tr");
    tr.appendChild(el("td", {}, "L" + x.layer)); tr.appendChild(el("td", {}, x.unique + " / " + D.meta.n_expert));
    tr.appendChild(el("td", {}, fmt(x.coverage_pct, 1) + " %"));
    const td = el("td"), mx = x.top.length ? x.top[0][1] : 1;
    x.top.forEach(([e, c]) => { const b = el("span", {class: "bar"}); b.style.width = Math.max(2, 40 * c / mx) + "px";
      td.appendChild(b); td.appendChild(el("span", {}, " " + e + "·" + c + "  ")); });
    tr.appendChild(td); t.appendChild(tr); });
})();

// ── per-token metrics (dict of arrays) ──────────────────────────
(function metrics(){
  const box = $("metrics"), m = D.metrics;
  if (!m) { $("metrics-panel").style.display = "none"; return; }
  const pref = ["wall_ms", "io_ms", "compute_ms", "stall_ms", "read_bytes", "cache_hit_pct", "mtp_batch", "rss_mib"];
  const skip = ["step", "steps", "turn"];
  const names = pref.filter(n => n in m).concat(Object.keys(m).filter(n => !pref.includes(n) && !skip.includes(n))).filter(
    n => m[n].some(v => v !== null && v !== 0)).slice(0, 12);
  names.forEach(n => { const v = m[n], W = 640, H = 90, s = sv("svg", {width: W, height: H, class: "metric"});
    const ok = v.filter(x => x !== null), lo = Math.min(...ok), hi = Math.max(...ok), sp = hi - lo || 1;
    let d = "", j = 0; v.forEach((x, i) => { if (x === null) return;
      d += (j++ ? "L" : "M") + fmt(40 + 590 * i / Math.max(1, v.length - 1), 1) + " " + fmt(10 + 60 * (1 - (x - lo) / sp), 1); });
    s.appendChild(sv("path", {d: d, fill: "none", stroke: "#0e8c80", "stroke-width": 1.2}));
    s.appendChild(sv("text", {x: 40, y: 86}, n + "  (min " + lo.toPrecision(4) + ", max " + hi.toPrecision(4) + ", " + v.length + " tokens)"));
    box.appendChild(s); });
})();

$("status").textContent = "rendered " + NR + " rows x " + L + " layers";
document.body.dataset.ready = "1";
</script></body></html>
"""
