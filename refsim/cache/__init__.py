"""Expert cache models and flash-byte accounting, fed by decode events.

``ExpertCache`` is the engine's global LRU with a byte budget (bmoe-engine.md §3.2);
``CacheSummary`` derives hit rates and MiB from its counters. What-if studies
(docs/cache-studies.md): ``BatchTrace`` (events as layer batches), the policy registry
``POLICIES`` / ``get_policy`` / ``replay_policy`` (the engine's lru, lfu, belady, random, layer,
layerlfu; fifo, clock, slru, 2q, arc, s3fifo, lirs, tinylfu; layer-opt),
and the exact one-pass LRU curve ``lru_curve`` / ``LruCurve``.
"""

from refsim.cache.expert_cache import (TARGET_DECODE_KINDS, CacheStats, EventRecord,
                                       ExpertCache)
from refsim.cache.summary import CacheSummary
from refsim.cache.batches import BatchTrace  # noqa: E402  (after the cache it builds on)
from refsim.cache.policy import (POLICIES, Policy, PolicyResult, get_policy,  # noqa: E402
                                 reference_replay, replay_policy)
from refsim.cache import policies as _policies  # noqa: E402,F401  (registers the built-ins)
from refsim.cache.mrc import LruCurve, lru_curve  # noqa: E402

__all__ = ["ExpertCache", "CacheStats", "EventRecord", "CacheSummary", "TARGET_DECODE_KINDS",
           "BatchTrace", "POLICIES", "Policy", "PolicyResult", "get_policy", "replay_policy",
           "reference_replay", "lru_curve", "LruCurve"]
