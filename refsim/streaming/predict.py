"""Expert-prediction accuracy counters (the engine's core/predict_stats.h) and the live probe of
``refsim run --predict-log`` (engine-docs/expert-prediction.md).

The unit is the **slot**: a predictor scores ``hits / slots`` (of the k experts a routing
selected, how many it had named) and ``exact``, the routings it named whole. In
:mod:`refsim.streaming` (below ``forward`` and ``studies``) because the forward pass feeds the probe
and the studies score traces with the same counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class PredictorStats:
    """predict_stats.h ``PredictorStats``: rows (routings scored), slots (Σ top-k), hits
    (predicted experts the router selected), exact (routings wholly predicted)."""

    rows: int = 0
    slots: int = 0
    hits: int = 0
    exact: int = 0

    def add(self, predicted: set, actual: set) -> None:
        """Score one routing: ``predicted`` and ``actual`` expert-id sets."""
        self.rows += 1
        self.slots += len(actual)
        n = len(predicted & actual)
        self.hits += n
        self.exact += n == len(actual)

    def merge(self, other: "PredictorStats") -> None:
        self.rows += other.rows
        self.slots += other.slots
        self.hits += other.hits
        self.exact += other.exact

    @property
    def hit_pct(self) -> float:
        """100 × hits / slots (0 when nothing was scored)."""
        return 100.0 * self.hits / self.slots if self.slots else 0.0

    @property
    def exact_pct(self) -> float:
        """100 × exact / rows (0 when nothing was scored)."""
        return 100.0 * self.exact / self.rows if self.rows else 0.0


LIVE_PREDICTORS = ("stale-gate", "prev-token", "control")


@dataclass
class PredictProbe:
    """The live ``--predict-log`` probe, fed by the forward pass once per MoE layer.

    Per decode graph and layer l, against the router's selection for the graph's last routed
    position (router_hook.cpp ``score_layer``):

    - **stale-gate**: layer l's router matrix applied to layer l-1's gate input (the FFN-norm
      output of the same position), top-k; layer 0 and the run's first decode graph are
      unscored ("could not rank", counted apart);
    - **prev-token**: the previous graph's last routed position at layer l (prefill included,
      so the first decode is scored against the prompt's last token);
    - **control**: layer l's own matrix on layer l's own input: must score exactly 100 %.

    Attributes
    ----------
    per_layer : dict of name -> list of PredictorStats
    unranked : int
        Decode routings the stale-gate could not rank.
    """

    n_layer: int
    per_layer: dict = field(default_factory=dict)
    unranked: int = 0

    def __post_init__(self) -> None:
        self.per_layer = {n: [PredictorStats() for _ in range(self.n_layer)] for n in LIVE_PREDICTORS}
        self._prev: dict[int, set] = {}
        self._stale: dict[int, set] = {}
        self._decodes = 0
        self._phase = 0

    def begin_graph(self, phase: int) -> None:
        """A new graph starts (0 prefill, 1 decode)."""
        self._phase = phase
        self._stale = {}
        if phase == 1:
            self._decodes += 1

    def layer(self, il: int, ids: np.ndarray, x: np.ndarray, rank) -> None:
        """Layer ``il`` routed ``ids`` (k,) for the graph's last routed position, whose gate input
        is ``x`` (1, n_embd); ``rank(j, x)`` gives layer j's top-k ids (1, k) for input x."""
        actual = set(int(e) for e in ids)
        if self._phase == 1:
            if il in self._prev:
                self.per_layer["prev-token"][il].add(self._prev[il], actual)
            if self._decodes > 1:
                self.per_layer["control"][il].add(set(rank(il, x)[0].tolist()), actual)
                if il in self._stale:
                    self.per_layer["stale-gate"][il].add(self._stale[il], actual)
                else:
                    self.unranked += 1
            else:
                self.unranked += 1
            if self._decodes > 1 and il + 1 < self.n_layer:
                self._stale[il + 1] = set(rank(il + 1, x)[0].tolist())
        self._prev[il] = actual

    def total(self, name: str) -> PredictorStats:
        t = PredictorStats()
        for s in self.per_layer[name]:
            t.merge(s)
        return t

    def lines(self) -> list[str]:
        """The engine's report (expert-prediction.md, "Reading the report"); ``-`` where a
        predictor has no routings at a layer."""
        sg, pv, ct = (self.total(n) for n in LIVE_PREDICTORS)
        out = [f"moe-predict: stale-gate {sg.hit_pct:.1f}% of routed slots ({sg.exact_pct:.1f}% whole "
               f"routings) | prev-token {pv.hit_pct:.1f}% ({pv.exact_pct:.1f}%) | fresh-gate control "
               f"{ct.hit_pct:.1f}% ({ct.exact_pct:.1f}%)",
               f"moe-predict: scored — stale-gate {sg.rows} routings/{sg.slots} slots, prev-token "
               f"{pv.rows}/{pv.slots}, control {ct.rows}/{ct.slots}; {self.unranked} routings the "
               f"stale-gate could not rank",
               *layer_table(["stale", "prev", "ctrl"],
                            [self.per_layer[n] for n in LIVE_PREDICTORS], self.per_layer["prev-token"])]
        return out


def layer_table(heads: list[str], columns: list[list[PredictorStats]],
                routings: list[PredictorStats]) -> list[str]:
    """The per-layer table of a ``moe-predict`` report: one column of slot hit % per predictor
    (``-`` where it scored nothing at that layer) and the routings scored (from ``routings``)."""
    out = [f"  {'layer':>5}  " + "  ".join(f"{h:>6}" for h in heads) + f"  {'routings':>8}"]
    for il in range(len(routings)):
        cells = [f"{c[il].hit_pct:>5.1f}%" if c[il].rows else f"{'-':>6}" for c in columns]
        out.append(f"  {il:>5}  " + "  ".join(cells) + f"  {routings[il].rows:>8}")
    return out
