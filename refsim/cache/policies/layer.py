"""``layer`` and ``layerlfu``: LRU and LFU inside a per-layer partition (route-replay.py's
table, bmoe-engine.md §5): each layer may hold ``budget_bytes // n_layer`` bytes and a batch
evicts only from its own layer (n_layer = the trace preamble's). A partition is then an
independent cache over its layer's own batches, so the fast path is the global policy's kernel
run once per layer sub-trace (:func:`~refsim.cache.policies.kernel_base.replay_partitions`);
``layer-opt`` (:mod:`refsim.cache.policies.layer_opt`) changes only the shares.
"""

from __future__ import annotations

from refsim.cache.policies.lfu import LFU
from refsim.cache.policies.lru import LRU


class LayerLRU(LRU, name="layer"):
    """LRU inside a per-layer partition: each layer may hold ``budget_bytes // n_layer`` bytes
    and a batch evicts only from its own layer (n_layer = the trace preamble's)."""

    partitioned = True


class LayerLFU(LFU, name="layerlfu"):
    """LFU (as :class:`~refsim.cache.policies.lfu.LFU`) inside the per-layer partition of
    :class:`LayerLRU`."""

    partitioned = True
