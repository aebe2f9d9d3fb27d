"""``fixed``: today's engine -- verify every candidate token (``--draft N``), the default.

Source: bmoe-engine.md §2 "Per step" (the engine drafts ``min(draft_max, room)`` tokens and
verifies all of them).
"""

from refsim.spec.policies.base import DraftPolicy, StepView, register


@register
class FixedPolicy(DraftPolicy):
    """Width = the candidate's length (reproduces a run without a policy byte for byte)."""

    name = "fixed"
    PARAMS: dict = {}

    @property
    def wants_view(self) -> bool:
        return False

    def width(self, view: StepView) -> int:
        return int(view.candidate.size)
