"""Cache policies for what-if replays: one module per policy, each holding its readable
reference class and its Numba kernel side by side (libCacheSim's one file per eviction
algorithm, ``libCacheSim/cache/eviction/<Name>.c``); this module is the registry.

=================  ===================================================================
module             policies
=================  ===================================================================
:mod:`.base`       :class:`Policy`, :class:`AdmitPolicy`, :data:`POLICIES`,
                   :func:`get_policy`, :func:`parse_policy_list`
:mod:`.kernel_base` the counter layout, the per-batch lookup driver, partition runs
:mod:`.lru`        ``lru``, the engine's (equals :class:`~refsim.cache.ExpertCache`)
:mod:`.lfu`        ``lfu``
:mod:`.belady`     ``belady`` (an oracle bound)
:mod:`.random`     ``random``
:mod:`.layer`      ``layer``, ``layerlfu`` (per-layer partitions)
:mod:`.fifo`       ``fifo`` (and the FIFO/CLOCK kernel)
:mod:`.clock`      ``clock``
:mod:`.slru`       ``slru``
:mod:`.twoq`       ``2q``
:mod:`.arc`        ``arc``
:mod:`.s3fifo`     ``s3fifo``
:mod:`.lirs`       ``lirs``
:mod:`.tinylfu`    ``tinylfu``
:mod:`.layer_opt`  ``layer-opt`` (per-layer LRU with the optimal shares)
=================  ===================================================================

The first six are the engine's ``route-replay.py`` table (bmoe-engine.md §5); the choices it
leaves open were pinned by reproducing every point of the engine authors' ``qwen-curve.csv``
(tests/cache/test_policies_qwen.py, docs/cache-studies.md). fifo to tinylfu are libCacheSim's
eviction algorithms (:class:`AdmitPolicy`), stated as its C sources
(``libCacheSim/cache/eviction/<Name>.c``, github.com/1a1a11a/libCacheSim, as shipped in the PyPI
package ``libcachesim`` >= 0.3.5) state them, including their integer roundings of the
sub-queue sizes and their admission refusals, so that on a one-layer, top-1 trace (every batch
one lookup) each equals libCacheSim's counts exactly (tests/cache/test_policies_libcachesim.py);
where libCacheSim departs from the paper it is noted on the class.

Batch rules of those (docs/cache-studies.md, "Scan-resistant policies"): the lookups of a batch
are resolved first, in token-major order of first occurrence (a hit promotes as the class says;
a miss is read and noted, and a ghost list is consulted and cleared for it); then the batch's
misses are admitted in that order, each after evicting, as the per-request policy would, until
``resident + size <= budget``. A victim is never a key the batch touched: where the policy's
choice is such a key, it is passed over in place and the next one in the same order is taken
(then the policy's other queue); if no untouched key is left, eviction stops and the cache stays
over budget until a later batch. A key the policy refuses is read, used by its batch, and not
resident afterwards. Sizes: a key's entry has its layer's size (``BatchTrace.expert_bytes``),
and every queue capacity is in bytes, as libCacheSim's are with ``obj_size`` = the entry size.

Registration is explicit: the imports below run each module's class statements in this order,
which is the registry's (and the sweep's default) order. A policy module imports only
:mod:`.base`, :mod:`.kernel_base`, :mod:`refsim.cache.linked` and the policy it builds on.
"""

from refsim.cache.policies.base import (POLICIES, AdmitPolicy, Policy, get_policy,
                                        parse_policy_list)
from refsim.cache.policies import lru  # noqa: F401  (registers lru)
from refsim.cache.policies import lfu  # noqa: F401  (lfu)
from refsim.cache.policies import belady  # noqa: F401  (belady)
from refsim.cache.policies import random  # noqa: F401  (random)
from refsim.cache.policies import layer  # noqa: F401  (layer, layerlfu)
from refsim.cache.policies import fifo  # noqa: F401  (fifo)
from refsim.cache.policies import clock  # noqa: F401  (clock)
from refsim.cache.policies import slru  # noqa: F401  (slru)
from refsim.cache.policies import twoq  # noqa: F401  (2q)
from refsim.cache.policies import arc  # noqa: F401  (arc)
from refsim.cache.policies import s3fifo  # noqa: F401  (s3fifo)
from refsim.cache.policies import lirs  # noqa: F401  (lirs)
from refsim.cache.policies import tinylfu  # noqa: F401  (tinylfu)
from refsim.cache.policies import layer_opt  # noqa: F401  (layer-opt)

__all__ = ["POLICIES", "Policy", "AdmitPolicy", "get_policy", "parse_policy_list"]
