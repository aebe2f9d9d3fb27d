"""``union``: truncate the draft where the widened union's predicted non-resident bytes cross a
threshold.

The widening is what speculation costs in bytes (bmoe-engine.md, the closing note: 97 % of the
speculative bytes are the verify batch's union). This policy keeps the longest prefix ``d1..dw``
whose predicted extra bytes (:func:`refsim.spec.policies.predict.extra_bytes`, residency now and
each draft token's previous-occurrence routes) stay at or below ``mib`` MiB (2^20 bytes).
Without a cache every width costs nothing predicted and the whole candidate is verified.
"""

import numpy as np

from refsim.spec.policies.base import DraftPolicy, StepView, register
from refsim.spec.policies.predict import extra_bytes

MIB = 1 << 20


@register
class UnionPolicy(DraftPolicy):
    """Parameters: ``mib`` (>= 0, default 8: the threshold in MiB), ``unknown`` (>= 0, default 1:
    fraction of ``k`` experts per layer charged for a position without a prediction)."""

    name = "union"
    PARAMS = {"mib": (float, 8.0, "a number >= 0"), "unknown": (float, 1.0, "a number >= 0")}

    def width(self, view: StepView) -> int:
        n = int(view.candidate.size)
        if n == 0 or view.resident is None or view.pred_routes is None:
            return n
        k = view.pred_routes.shape[2]
        extra = extra_bytes(view.pred_routes, view.resident, view.expert_bytes,
                            self.params["unknown"] * k * float(view.expert_bytes.sum()))
        return int(np.searchsorted(extra, self.params["mib"] * MIB, side="right") - 1)
