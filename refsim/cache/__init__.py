"""Expert cache models and flash-byte accounting, fed by decode events.

``ExpertCache`` is the engine's global LRU with a byte budget (bmoe-engine.md §3.2);
``CacheSummary`` derives hit rates and MiB from its counters. What-if studies
(docs/cache-studies.md): ``BatchTrace`` (events as layer batches), the policies
(:mod:`refsim.cache.policies`, one module each: the engine's lru, lfu, belady, random, layer,
layerlfu; fifo, clock, slru, 2q, arc, s3fifo, lirs, tinylfu; layer-opt) with their registry
``POLICIES`` / ``get_policy``, the replays ``replay_policy`` / ``reference_replay``
(:mod:`refsim.cache.replay`) and their ``PolicyResult``, and the exact one-pass LRU curve
``lru_curve`` / ``LruCurve``.
"""

from refsim.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "TARGET_DECODE_KINDS": "expert_cache", "CacheStats": "expert_cache",
    "EventRecord": "expert_cache", "ExpertCache": "expert_cache", "CacheSummary": "summary",
    "BatchTrace": "batches", "POLICIES": "policies", "Policy": "policies",
    "PolicyResult": "result", "get_policy": "policies", "reference_replay": "replay",
    "replay_policy": "replay",
    "LruCurve": "mrc", "lru_curve": "mrc",
})
__all__ = ["ExpertCache", "CacheStats", "EventRecord", "CacheSummary", "TARGET_DECODE_KINDS",
           "BatchTrace", "POLICIES", "Policy", "PolicyResult", "get_policy", "replay_policy",
           "reference_replay", "lru_curve", "LruCurve"]
