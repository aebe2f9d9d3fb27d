"""``clock``: CLOCK (second chance) with an n-bit counter, as libCacheSim ``Clock.c`` states it,
under the engine's batch rules, byte-weighted (:mod:`refsim.cache.policies`). Its fast path is
:func:`refsim.cache.policies.fifo.fifo_clock_kernel` with counters up to ``2**bits - 1``.
"""

from __future__ import annotations

from collections import OrderedDict

from refsim.cache.policies.base import AdmitPolicy
from refsim.cache.policies.fifo import fifo_clock_kernel
from refsim.errors import ConfigError


class Clock(AdmitPolicy, name="clock"):
    """CLOCK (second chance) with an ``bits``-bit counter (libCacheSim ``Clock.c``).

    A hit raises the entry's counter by one, up to ``2**bits - 1``. A new entry enters at the
    head with counter ``init``. To evict, look at the tail: a counter >= 1 is decremented and the
    entry moves to the head; the first entry found at 0 is evicted. Parameters: ``bits`` = 1
    (the classic one reference bit), ``init`` = 0 (libCacheSim ``n_bit_counter``,
    ``init_freq``)."""

    params = {"bits": 1, "init": 0}

    def check_params(self):
        if not 1 <= self.bits <= 30:
            raise ConfigError(f"--policy clock: bits={self.bits} is not in 1..30")
        if not 0 <= self.init <= (1 << self.bits) - 1:
            raise ConfigError(f"--policy clock: init={self.init} is not in 0..2**bits-1")

    def setup(self):
        self.q: OrderedDict[int, int] = OrderedDict()      # key -> counter; last = head
        self.max_freq = (1 << self.bits) - 1

    def fast_replay(self, batches, budget_bytes, out):
        """Numba fast path (:func:`~refsim.cache.policies.fifo.fifo_clock_kernel` with counters
        up to ``2**bits - 1``)."""
        bt, budget = batches, budget_bytes
        fifo_clock_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind,
                          bt.expert_bytes, bt.n_expert, budget, (1 << self.bits) - 1,
                          self.init, out)

    def hit(self, key, protected):
        if self.q[key] < self.max_freq:
            self.q[key] += 1
        return []

    def evict(self, protected, incoming):
        q, skipped, victim = self.q, [], None
        while q:
            k, f = q.popitem(last=False)
            if k in protected:
                skipped.append((k, f))
                continue
            if f >= 1:
                q[k] = f - 1                               # second chance: to the head
                continue
            victim = k
            break
        for k, f in reversed(skipped):
            q[k] = f
            q.move_to_end(k, last=False)
        return victim

    def insert(self, key, size, protected):
        self.q[key] = self.init
        return True, []
