"""``cost``: the width that maximises expected tokens per predicted millisecond.

Expected tokens of width ``w`` (greedy acceptance stops at the first rejection):
``E(w) = 1 + sum_{i=1..w} prod_{j<=i} p_j`` with ``p_j`` the running conditional acceptance of
position ``j`` (:meth:`AcceptStats.p_accept`, a Beta(1, 1) posterior mean). Predicted time:
``T(w) = ms_base + w * ms_pos + 1000 * extra(w) / (mibs * 2^20)`` with ``extra(w)`` the predicted
non-resident bytes the widened union adds (:func:`refsim.spec.policies.predict.extra_bytes`).
The rule is the peers' "expected tokens per ms" width choice (issue 30) with the verify cost
taken from the cache instead of a measured per-width time. Ties keep the wider width (today's).
"""

import numpy as np

from refsim.spec.policies.base import DraftPolicy, StepView, register
from refsim.spec.policies.predict import extra_bytes

MIB = 1 << 20


@register
class CostPolicy(DraftPolicy):
    """Parameters: ``ms_base`` (> 0, default 20: a plain decode's ms), ``ms_pos`` (>= 0, default
    1: compute ms per extra position), ``mibs`` (> 0, default 1000: flash MiB/s), ``unknown``
    (>= 0, default 1: fraction of ``k`` experts per layer read for a position without a
    prediction)."""

    name = "cost"
    PARAMS = {"ms_base": (float, 20.0, "a number > 0"), "ms_pos": (float, 1.0, "a number >= 0"),
              "mibs": (float, 1000.0, "a number > 0"), "unknown": (float, 1.0, "a number >= 0")}

    def predicted_ms(self, view: StepView) -> np.ndarray:
        """(n + 1,) float: ``T(w)`` for ``w = 0..n``."""
        n = view.candidate.size
        p = self.params
        extra = np.zeros(n + 1)
        if view.resident is not None and view.pred_routes is not None:
            k = view.pred_routes.shape[2]
            extra = extra_bytes(view.pred_routes, view.resident, view.expert_bytes,
                                p["unknown"] * k * float(view.expert_bytes.sum()))
        return p["ms_base"] + p["ms_pos"] * np.arange(n + 1) + 1000.0 * extra / (p["mibs"] * MIB)

    def expected_tokens(self, n: int) -> np.ndarray:
        """(n + 1,) float: ``E(w)`` for ``w = 0..n``."""
        pj = np.array([self.stats.p_accept(i) for i in range(n)])
        return 1.0 + np.concatenate(([0.0], np.cumsum(np.cumprod(pj))))

    def width(self, view: StepView) -> int:
        n = int(view.candidate.size)
        if n == 0:
            return 0
        rate = self.expected_tokens(n) / self.predicted_ms(view)
        return int(n - np.argmax(rate[::-1]))
