"""``backoff``: shrink the width on rejection, disable after repeated misses, re-probe.

Based on two peers' n-gram drafters:

- llama.cpp's drafting (``common/ngram-cache.cpp`` with ``examples/lookup``; ``common/speculative.h``
  ``n_min``, "do not add drafts smaller than this") drafts only what its n-gram statistics
  support and sends no draft below a minimum, so such a step is a plain decode;
- vLLM's n-gram proposer (``vllm/spec_decode/ngram_worker.py``, prompt lookup decoding) proposes
  nothing when the suffix does not match, and speculation can be switched off per batch and back
  on (``speculative_disable_by_batch_size``).

Neither shrinks by acceptance; the rule below is ours and is readable top to bottom:

1. the width starts at ``draft_max``;
2. after a verify decode that accepted every token, the width grows by one (up to ``draft_max``);
   after a rejection it becomes ``max(min_width, n_acc + 1)`` (what would have sufficed, plus
   one to keep probing);
3. after ``patience`` consecutive verify decodes that accepted nothing, drafting is disabled for
   ``cooldown`` steps that had a candidate (plain decodes), then re-probed at width ``min_width``.
"""

from refsim.spec.policies.base import DraftPolicy, StepView, register


@register
class BackoffPolicy(DraftPolicy):
    """Parameters: ``patience`` (>= 1, default 2), ``cooldown`` (>= 0, default 8),
    ``min_width`` (>= 1, default 1)."""

    name = "backoff"
    PARAMS = {"patience": (int, 2, "an integer >= 1"), "cooldown": (int, 8, "an integer >= 0"),
              "min_width": (int, 1, "an integer >= 1")}

    def __init__(self, **params):
        super().__init__(**params)
        self._w = None
        self._misses = 0
        self._off = 0
        self._max = 8

    @property
    def wants_view(self) -> bool:
        return False

    def width(self, view: StepView) -> int:
        self._max = view.draft_max
        if self._w is None:
            self._w = view.draft_max
        if view.candidate.size == 0:
            return 0
        if self._off > 0:
            self._off -= 1
            if self._off == 0:
                self._w = self.params["min_width"]
            return 0
        return int(min(self._w, view.candidate.size))

    def observe(self, n: int, n_acc: int) -> None:
        super().observe(n, n_acc)
        if n <= 0:
            return
        if n_acc == n:
            self._w = min(self._w + 1, self._max)
            self._misses = 0
            return
        self._w = max(self.params["min_width"], n_acc + 1)
        self._misses = self._misses + 1 if n_acc == 0 else 0
        if self._misses >= self.params["patience"]:
            self._misses = 0
            self._off = self.params["cooldown"]
            if self._off == 0:
                self._w = self.params["min_width"]
