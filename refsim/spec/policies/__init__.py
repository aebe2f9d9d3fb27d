"""Draft policies: how many of the draft source's tokens a step verifies (issue 30).

=================  ==============================================================
module             contents
=================  ==============================================================
:mod:`.base`       :class:`DraftPolicy`, :class:`StepView`, :class:`AcceptStats`,
                   :data:`POLICIES`, :func:`parse_spec_policy`
:mod:`.predict`    :class:`RouteMemory` (previous-occurrence routes),
                   :func:`extra_bytes` (predicted bytes of each width)
:mod:`.fixed`      ``fixed``: today's engine, the default
:mod:`.backoff`    ``backoff``: shrink on rejection, disable, re-probe
:mod:`.cost`       ``cost``: expected tokens per predicted ms
:mod:`.union`      ``union``: truncate at a predicted-bytes threshold
=================  ==============================================================

Every policy only chooses a width, so each is lossless (greedy's tokens exactly). Registration
is explicit: the imports below fill :data:`POLICIES` in this order.
"""

from refsim.spec.policies.base import (POLICIES, AcceptStats, DraftPolicy, StepView,
                                       parse_spec_policy, register)
from refsim.spec.policies import fixed  # noqa: F401  (registers fixed)
from refsim.spec.policies import backoff  # noqa: F401  (backoff)
from refsim.spec.policies import cost  # noqa: F401  (cost)
from refsim.spec.policies import union  # noqa: F401  (union)
from refsim.spec.policies.predict import RouteMemory, extra_bytes

__all__ = ["POLICIES", "AcceptStats", "DraftPolicy", "StepView", "parse_spec_policy", "register",
           "RouteMemory", "extra_bytes"]
