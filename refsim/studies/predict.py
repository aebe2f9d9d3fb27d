"""Expert-prediction accuracy on a recorded trace (``refsim replay --predict-log``).

The engine's ``--predict-log`` (engine-docs/expert-prediction.md; core/predict_stats.h) scores
predictors per layer against what the router chose. The unit is the **slot**: a predictor scores
``hits / slots`` (of the k experts a routing selected, how many it had named) and, beside it, the
fraction of routings whose entire top-k set it named (``exact``). On a recorded trace only
predictors that need no hidden state exist:

- **prev-token**: the experts the previous decode graph routed at the same layer (its last
  routed position, as the engine's ``prev_ids_`` records). Scored on every decode graph that has
  a previous decode graph, against the graph's last routed position (``score_layer``). The first
  decode graph is unscored ("the first token of a run is unscored"); the online probe would score
  it against the prompt's last row.
- **static hot list**: the k experts the run's decode rows route most often at that layer (the
  engine's offline comparison, 2026-07-15-route-trace findings), scored on the same routings.
  The score depends only on the counts, not on how ties are broken.
- **prompt hot list**: the same, counted over the prefill rows only (the warm-up a static
  preload could use).

On the engine's qwen trace this gives 38.0 % (prev-token) and 37.6 % (static hot list), the
figures of prefetch.md, and 17.9 % for the prompt hot list (the findings' third row).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from refsim.streaming.predict import PredictorStats, layer_table

PREDICTORS = ("prev-token", "hot-list", "prompt-hot-list")


@dataclass
class PredictReport:
    """Per layer and in all, one :class:`PredictorStats` per name in :data:`PREDICTORS`."""

    n_layer: int
    per_layer: dict[str, list[PredictorStats]] = field(default_factory=dict)
    total: dict[str, PredictorStats] = field(default_factory=dict)


def _last_row(ids: np.ndarray) -> set | None:
    """Expert set of the last routed position of a (n_pos, k) block, None if none is routed."""
    for p in range(ids.shape[0] - 1, -1, -1):
        row = ids[p][ids[p] >= 0]
        if row.size:
            return set(row.tolist())
    return None


def predict_log(trace) -> PredictReport:
    """Score the trace-only predictors (module docstring) on ``trace`` (a RouteTrace).

    Returns
    -------
    PredictReport
    """
    h = trace.header
    k = h.n_expert_used
    rep = PredictReport(h.n_layer, {n: [PredictorStats() for _ in range(h.n_layer)]
                                    for n in PREDICTORS})
    decode = [e for e in trace.events if e.phase == 1 and not e.kind.draft_context]
    prompt = [e for e in trace.events if e.phase == 0]
    for il in range(h.n_layer):
        counts = Counter(int(x) for e in decode for x in e.routes[:, il].ravel() if x >= 0)
        pcounts = Counter(int(x) for e in prompt for x in e.routes[:, il].ravel() if x >= 0)
        hot = {e for e, _ in counts.most_common(k)}
        phot = {e for e, _ in pcounts.most_common(k)}
        prev = None
        for e in decode:
            actual = _last_row(e.routes[:, il])
            if actual is None:
                continue
            if prev is not None:
                rep.per_layer["prev-token"][il].add(prev, actual)
                rep.per_layer["hot-list"][il].add(hot, actual)
                rep.per_layer["prompt-hot-list"][il].add(phot, actual)
            prev = actual
    for n in PREDICTORS:
        t = PredictorStats()
        for s in rep.per_layer[n]:
            t.merge(s)
        rep.total[n] = t
    return rep


def predict_lines(rep: PredictReport) -> list[str]:
    """The report in the shape of the engine's ``moe-predict:`` lines and per-layer table
    (expert-prediction.md, "Reading the report"); a predictor with no routings at a layer
    prints ``-``."""
    t = rep.total
    pv, hl, ph = t["prev-token"], t["hot-list"], t["prompt-hot-list"]
    out = [f"moe-predict: prev-token {pv.hit_pct:.1f}% of routed slots ({pv.exact_pct:.1f}% whole "
           f"routings) | static hot list {hl.hit_pct:.1f}% ({hl.exact_pct:.1f}%) | prompt hot "
           f"list {ph.hit_pct:.1f}% ({ph.exact_pct:.1f}%)",
           f"moe-predict: scored — prev-token {pv.rows} routings/{pv.slots} slots, hot lists "
           f"{hl.rows}/{hl.slots}; the stale-gate and its control need hidden states (refsim run)",
           *layer_table(["prev", "hot", "prompt"], [rep.per_layer[n] for n in PREDICTORS],
                        rep.per_layer["prev-token"])]
    return out
