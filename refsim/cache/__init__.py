"""Expert cache models and flash-byte accounting, fed by decode events.

``ExpertCache`` is the engine's global LRU with a byte budget (bmoe-engine.md §3.2);
``CacheSummary`` derives hit rates and MiB from its counters.
"""

from refsim.cache.expert_cache import (TARGET_DECODE_KINDS, CacheStats, EventRecord,
                                       ExpertCache)
from refsim.cache.summary import CacheSummary

__all__ = ["ExpertCache", "CacheStats", "EventRecord", "CacheSummary", "TARGET_DECODE_KINDS"]
