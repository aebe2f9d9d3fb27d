"""The six built-in policies of the engine's ``route-replay.py`` (bmoe-engine.md §5); importing
this module also registers the scan-resistant ones (:mod:`refsim.cache.admit_policies`) and
``layer-opt`` (:mod:`refsim.cache.layer_opt`), after these six.

Each class is the reference definition (Python hooks, run by
:func:`refsim.cache.policy.reference_replay`) and names its Numba fast path. The choices the
engine's table leaves open were pinned by reproducing every point of the engine authors'
``qwen-curve.csv`` exactly (tests/cache/test_policies_qwen.py, docs/cache-studies.md):

- ``lfu`` counts *lookups* (unique per batch, not occurrences), and a key's count survives its
  eviction (the occurrence-count and reset-on-evict variants miss 11 of 11 points);
- ``random`` is ``random.Random(1234).choice`` over the unprotected resident keys in the order
  they became resident (a hit does not reorder them);
- ``belady`` breaks ties (several keys with the same next use, e.g. never again) by taking the
  oldest-resident key; on the qwen trace every tie-break tried gives the same curve.
"""

from __future__ import annotations

import random

import numpy as np

from refsim.cache.batches import NEVER, BatchTrace
from refsim.cache.policy import Policy
from refsim.cache.policy_kernel import KIND_BELADY, KIND_LFU, KIND_LRU, KIND_RANDOM
from refsim.errors import UsageError, value_message

__all__ = ["LRU", "LFU", "Belady", "RandomPolicy", "LayerLRU", "LayerLFU", "NEVER"]


class LRU(Policy, name="lru"):
    """Least recently used: evict the smallest stamp; the stamp is a clock bumped on every
    occurrence, so a batch leaves its keys ordered by last occurrence. This is the engine's
    cache (bmoe-engine.md §3.2) and equals :class:`~refsim.cache.ExpertCache`."""

    kernel = KIND_LRU

    def reset(self, batches: BatchTrace) -> None:
        self.stamp: dict[int, int] = {}

    def on_access(self, key, clock, next_use):
        self.stamp[key] = clock

    def to_evict(self, candidates):
        return min(candidates, key=self.stamp.__getitem__)


class LFU(Policy, name="lfu"):
    """Least frequently used: evict the smallest (lookups of the key so far, stamp).

    A lookup is the first occurrence of a key in a batch; the count is kept when the key is
    evicted and grows again if it returns. Ties on the count go to the least recent stamp."""

    kernel = KIND_LFU

    def reset(self, batches):
        self.stamp: dict[int, int] = {}
        self.count: dict[int, int] = {}

    def on_lookup(self, key, hit):
        self.count[key] = self.count.get(key, 0) + 1

    def on_access(self, key, clock, next_use):
        self.stamp[key] = clock

    def to_evict(self, candidates):
        return min(candidates, key=lambda k: (self.count[k], self.stamp[k]))


class Belady(Policy, name="belady"):
    """Belady's furthest-next-use: evict the key whose next use (batch index) is furthest;
    never used again = infinity. Ties go to the oldest-resident key. An oracle: it is built
    from the whole trace (``BatchTrace.next_use``), so it is a bound, not a runnable cache."""

    kernel = KIND_BELADY

    def reset(self, batches):
        self.next_use: dict[int, int] = {}

    def on_access(self, key, clock, next_use):
        self.next_use[key] = next_use

    def to_evict(self, candidates):
        return max(candidates, key=self.next_use.__getitem__)   # first maximum wins


class RandomPolicy(Policy, name="random"):
    """Evict ``rng.choice(candidates)`` with ``rng = random.Random(seed)`` (default 1234, the
    engine's), candidates oldest-resident first. The fast path replays CPython's Mersenne
    Twister words, so both paths pick the same victims."""

    kernel = KIND_RANDOM
    params = {"seed": 1234}

    def check_params(self):
        if self.seed < 0:       # random.Random(-1) seeds with abs(-1): the same victims as seed=1
            raise UsageError(value_message("--policy", "random:seed= an integer >= 0 (random.Random takes "
                                           "the absolute value of a negative seed)", self.seed))

    def reset(self, batches):
        self.rng = random.Random(self.seed)

    def to_evict(self, candidates):
        return self.rng.choice(candidates)

    def fast_args(self, n_words: int = 1 << 17) -> dict:
        """The first ``n_words`` 32-bit outputs of ``random.Random(seed)``.

        ``getrandbits(32 * n)`` fills its result with successive 32-bit outputs, least
        significant first (CPython ``_randommodule.c``), so the little-endian words are the
        outputs in order (checked against ``getrandbits(32)`` in the tests). The stream of a
        seed never changes, so it is kept (read-only) per ``(seed, n_words)``: drawing 2**17
        words costs ~2 ms, more than the replay itself."""
        got = _WORDS.get((self.seed, n_words))
        if got is None:
            if len(_WORDS) > 16:
                _WORDS.clear()
            big = random.Random(self.seed).getrandbits(32 * n_words)
            got = np.frombuffer(big.to_bytes(4 * n_words, "little"), dtype="<u4")
            got.flags.writeable = False
            _WORDS[(self.seed, n_words)] = got
        return {"words": got}


_WORDS: dict[tuple[int, int], np.ndarray] = {}
"""MT19937 output words of ``random.Random(seed)`` per ``(seed, n_words)`` (RandomPolicy)."""


class LayerLRU(LRU, name="layer"):
    """LRU inside a per-layer partition: each layer may hold ``budget_bytes // n_layer`` bytes
    and a batch evicts only from its own layer (n_layer = the trace preamble's)."""

    partitioned = True


class LayerLFU(LFU, name="layerlfu"):
    """LFU (as :class:`LFU`) inside the per-layer partition of :class:`LayerLRU`."""

    partitioned = True


from refsim.cache import admit_policies as _admit_policies  # noqa: E402,F401  (registers them)
from refsim.cache import layer_opt as _layer_opt  # noqa: E402,F401  (registers layer-opt)
