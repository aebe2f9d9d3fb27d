"""What the loop calls: builds each step's :class:`StepView` for a policy and feeds it outcomes.

The loop (:class:`refsim.spec.loop.SpeculativeLoop`) makes three calls: :meth:`PolicyDriver.seen`
for every target event the cache applied (the route memory learns its rows),
:meth:`PolicyDriver.choose` once the draft source proposed (the width to verify), and
:meth:`PolicyDriver.observe` after acceptance.
"""

from __future__ import annotations

import numpy as np

from refsim.events import DecodeEvent
from refsim.spec.policies.base import DraftPolicy, StepView
from refsim.spec.policies.predict import RouteMemory


class PolicyDriver:
    """One generation's policy, route memory and cache view.

    Parameters
    ----------
    policy : DraftPolicy
    n_layer, k : int
        The target's layers and ``n_expert_used``.
    cache : refsim.cache.ExpertCache or None
        Residency is read from it at each step (None: the view has no residency).
    device : object or None
        The device model handed to the policy.
    """

    def __init__(self, policy: DraftPolicy, n_layer: int, k: int, cache=None, device=None):
        self.policy, self.cache, self.device = policy, cache, device
        self.memory = RouteMemory(n_layer, k)
        self.widths: list[int] = []
        """The width chosen at each step that had a candidate."""

    def seen(self, event: DecodeEvent) -> None:
        """Learn a target event's rows (draft-context events are not the target's routes)."""
        if not event.kind.draft_context and self.policy.wants_view:
            self.memory.record(event.tokens, event.routes)

    def choose(self, drafts: np.ndarray, tok: int, draft_max: int) -> int:
        """The width, ``0..len(drafts)``, the policy gives this step's candidate."""
        resident = eb = pred = None
        if self.policy.wants_view:
            if self.cache is not None:
                resident = self.cache.resident_mask()
                eb = self.cache.expert_bytes
            pred = self.memory.predict(np.concatenate(([tok], drafts)))
        view = StepView(candidate=drafts, probs=None, draft_max=draft_max, resident=resident,
                        expert_bytes=eb, pred_routes=pred, stats=self.policy.stats,
                        device=self.device)
        w = int(self.policy.width(view))
        if not 0 <= w <= drafts.size:
            raise ValueError(f"draft policy {self.policy.name} returned width {w} for a "
                             f"candidate of {drafts.size}")
        self.widths.append(w)
        return w

    def observe(self, n: int, n_acc: int) -> None:
        self.policy.observe(n, n_acc)
