"""Scan-resistant policies (fifo, clock, slru, 2q, arc, s3fifo) as libCacheSim states them,
under the engine's batch rules, byte-weighted.

Each class is one :class:`~refsim.cache.policy.AdmitPolicy`: the policy keeps its own queues
(and ghost lists) and decides, for each miss, what to evict to make room and where the new entry
goes; the cache (:func:`refsim.cache.policy.reference_replay`) owns the counters and the
residency and checks the policy's choices. The definitions follow libCacheSim's C sources
(``libCacheSim/cache/eviction/<Name>.c``, github.com/1a1a11a/libCacheSim, as shipped in the
PyPI package ``libcachesim`` >= 0.3.5), including their integer roundings of the sub-queue
sizes and their admission refusals, so that on a one-layer, top-1 trace (every batch one lookup)
each equals libCacheSim's counts exactly (tests/cache/test_policies_libcachesim.py). Where
libCacheSim's variant departs from the paper it is noted on the class.

Batch rules (docs/cache-studies.md, "Scan-resistant policies"): the lookups of a batch are
resolved first, in token-major order of first occurrence (a hit promotes as the class says; a
miss is read and noted, and a ghost list is consulted and cleared for it); then the batch's misses
are admitted in that order, each after evicting, as the per-request policy would, until
``resident + size <= budget``. A victim is never a key the batch touched: where the policy's
choice is such a key, it is passed over in place and the next one in the same order is taken
(then the policy's other queue); if no untouched key is left, eviction stops and the cache stays
over budget until a later batch. A key the policy refuses is read, used by its batch, and not
resident afterwards.

Sizes: a key's entry has its layer's size (``BatchTrace.expert_bytes``), and every queue
capacity is in bytes, as libCacheSim's are with ``obj_size`` = the entry size.
"""

from __future__ import annotations

from collections import OrderedDict

from refsim.cache.policy import AdmitPolicy
from refsim.errors import ConfigError, UsageError, value_message

__all__ = ["FIFO", "Clock", "SLRU", "TwoQ", "ARC", "S3FIFO", "LIRS", "TinyLFU"]


def _pop_oldest(q: OrderedDict, protected) -> tuple | None:
    """Remove and return ``(key, value)`` of the oldest entry of ``q`` (its first) whose key is
    not in ``protected``, or None; protected entries passed over keep their places."""
    skipped = []
    found = None
    while q:
        k, v = q.popitem(last=False)
        if k in protected:
            skipped.append((k, v))
            continue
        found = (k, v)
        break
    for k, v in reversed(skipped):
        q[k] = v
        q.move_to_end(k, last=False)
    return found


def _ratio(policy, key: str) -> None:
    v = getattr(policy, key)
    if not 0.0 <= v <= 1.0:
        raise UsageError(value_message("--policy", f"{policy.name}:{key}= a number in [0, 1]", v))


class FIFO(AdmitPolicy, name="fifo"):
    """First in, first out: evict the entry resident longest; a hit changes nothing
    (libCacheSim ``FIFO.c``)."""

    def fast_replay(self, bt, budget, out):
        """Numba fast path (:func:`refsim.cache.admit_kernel.fifo_clock_kernel`)."""
        from refsim.cache.admit_kernel import fifo_clock_kernel
        fifo_clock_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind,
                          bt.expert_bytes, bt.n_expert, budget, 0, 0, out)

    def setup(self):
        self.q: OrderedDict[int, None] = OrderedDict()

    def evict(self, protected, incoming):
        got = _pop_oldest(self.q, protected)
        return None if got is None else got[0]

    def insert(self, key, size, protected):
        self.q[key] = None
        return True, []


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

    def fast_replay(self, bt, budget, out):
        """Numba fast path (:func:`refsim.cache.admit_kernel.fifo_clock_kernel`)."""
        from refsim.cache.admit_kernel import fifo_clock_kernel
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


class SLRU(AdmitPolicy, name="slru"):
    """Segmented LRU with ``segments`` LRU segments of ``budget // segments`` bytes each
    (libCacheSim ``SLRU.c``; default 4 segments, as there).

    A hit in the top segment moves the entry to that segment's head; a hit below promotes it to
    the head of the next segment up, and while a segment is over its size its tail is demoted to
    the head of the segment below; a demotion out of segment 0 is an eviction (of segment 0's
    oldest untouched entry). That eviction happens at the hit, inside the batch: the one place a
    policy here evicts before the batch ends (it needs mixed sizes or a budget not divisible by
    ``segments``, libCacheSim's SLRU_cool). A new entry goes to the head of the lowest segment
    with room for it, else of segment 0; eviction takes the tail of the lowest non-empty
    segment. An entry larger than one segment is not admitted. libCacheSim's variant differs
    from the paper's two-segment SLRU (probationary + protected) in the segment count and in
    inserting into any segment with room."""

    params = {"segments": 4}

    def check_params(self):
        if not 1 <= self.segments <= 64:
            raise ConfigError(f"--policy slru: segments={self.segments} is not in 1..64")

    def fast_replay(self, bt, budget, out):
        """Numba fast path (:func:`refsim.cache.admit_kernel.slru_kernel`)."""
        from refsim.cache.admit_kernel import slru_kernel
        slru_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                    bt.n_expert, budget, int(self.segments), out)

    def setup(self):
        n = self.segments
        self.seg = [OrderedDict() for _ in range(n)]
        self.seg_bytes = [0] * n
        self.seg_max = [self.budget_bytes // n] * n
        self.where: dict[int, int] = {}

    def can_insert(self, size):
        return size <= self.budget_bytes and size <= self.seg_max[0]

    def _move(self, key, src, dst):
        size = self.size(key)
        del self.seg[src][key]
        self.seg_bytes[src] -= size
        self.seg[dst][key] = None
        self.seg_bytes[dst] += size
        self.where[key] = dst

    def _cool(self, i, protected, out) -> bool:
        if i == 0:
            v = self.evict(protected, 0)
            if v is None:
                return False
            out.append(v)
            return True
        k = next(iter(self.seg[i]))
        self._move(k, i, i - 1)
        while self.seg_bytes[i - 1] > self.seg_max[i - 1]:
            if not self._cool(i - 1, protected, out):
                break
        return True

    def hit(self, key, protected):
        i = self.where[key]
        n = self.segments
        if i == n - 1:
            self.seg[i].move_to_end(key)
            return []
        self._move(key, i, i + 1)
        out: list[int] = []
        while self.seg_bytes[i + 1] > self.seg_max[i + 1]:
            if not self._cool(i + 1, protected, out):
                break
        return out

    def evict(self, protected, incoming):
        for i in range(self.segments):
            if self.seg_bytes[i] > 0:
                got = _pop_oldest(self.seg[i], protected)
                if got is not None:
                    k = got[0]
                    self.seg_bytes[i] -= self.size(k)
                    del self.where[k]
                    return k
        return None

    def insert(self, key, size, protected):
        nth = 0
        for i in range(self.segments):
            if self.seg_bytes[i] + size <= self.seg_max[i]:
                nth = i
                break
        self.seg[nth][key] = None
        self.seg_bytes[nth] += size
        self.where[key] = nth
        return True, []


class TwoQ(AdmitPolicy, name="2q"):
    """2Q (Johnson & Shasha, VLDB 1994), the full version with A1in, A1out and Am, as
    libCacheSim ``TwoQ.c`` states it.

    A1in is a FIFO of ``kin × budget`` bytes (truncated to an integer); A1out a ghost FIFO of
    keys evicted from A1in, ``kout × budget`` bytes of their sizes; Am an LRU of the rest. A hit
    in A1in changes nothing; a hit in Am moves the entry to Am's head. A miss whose key is in
    A1out (removed from it at the lookup) goes to Am (making room inside Am by its LRU order),
    any other miss to A1in. Eviction: A1in's oldest (into A1out) while A1in is over its size,
    else Am's least recent. Defaults ``kin=0.25``, ``kout=0.5`` (the paper's and libCacheSim's
    ``Ain-size-ratio``, ``Aout-size-ratio``). An entry larger than A1in is not admitted."""

    params = {"kin": 0.25, "kout": 0.5}

    def check_params(self):
        _ratio(self, "kin")
        _ratio(self, "kout")

    def fast_replay(self, bt, budget, out):
        """Numba fast path (:func:`refsim.cache.admit_kernel.twoq_kernel`)."""
        from refsim.cache.admit_kernel import twoq_kernel
        twoq_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                    bt.n_expert, budget, float(self.kin), float(self.kout), out)

    def setup(self):
        c = self.budget_bytes
        self.ain_max = int(c * self.kin)
        self.aout_max = int(c * self.kout)
        self.am_max = c - self.ain_max
        self.ain: OrderedDict[int, None] = OrderedDict()
        self.aout: OrderedDict[int, None] = OrderedDict()
        self.am: OrderedDict[int, None] = OrderedDict()
        self.ain_bytes = self.aout_bytes = self.am_bytes = 0
        self.from_ghost: set[int] = set()

    def can_insert(self, size):
        return size <= self.ain_max

    def hit(self, key, protected):
        if key in self.am:
            self.am.move_to_end(key)
        return []

    def miss(self, key):
        if key in self.aout:
            del self.aout[key]
            self.aout_bytes -= self.size(key)
            self.from_ghost.add(key)

    def _to_ghost(self, key):
        size = self.size(key)
        if size > self.aout_max:
            return
        while self.aout_bytes + size > self.aout_max:
            k, _ = self.aout.popitem(last=False)
            self.aout_bytes -= self.size(k)
        self.aout[key] = None
        self.aout_bytes += size

    def _evict_ain(self, protected):
        got = _pop_oldest(self.ain, protected)
        if got is None:
            return None
        k = got[0]
        self.ain_bytes -= self.size(k)
        self._to_ghost(k)
        return k

    def _evict_am(self, protected):
        got = _pop_oldest(self.am, protected)
        if got is None:
            return None
        self.am_bytes -= self.size(got[0])
        return got[0]

    def evict(self, protected, incoming):
        if self.ain_bytes > self.ain_max:
            v = self._evict_ain(protected)
            if v is not None:
                return v
        v = self._evict_am(protected)
        return v if v is not None else self._evict_ain(protected)

    def insert(self, key, size, protected):
        if key in self.from_ghost:
            self.from_ghost.discard(key)
            if size > self.am_max:
                return False, []
            out = []
            while self.am_bytes + size > self.am_max:
                v = self._evict_am(protected)
                if v is None:
                    break
                out.append(v)
            self.am[key] = None
            self.am_bytes += size
            return True, out
        self.ain[key] = None
        self.ain_bytes += size
        return True, []


class ARC(AdmitPolicy, name="arc"):
    """ARC (Megiddo & Modha, FAST 2003) as libCacheSim ``ARC.c`` states it, in bytes.

    T1 and T2 are LRU lists of resident entries (seen once / at least twice since entering),
    B1 and B2 their ghost lists, ``p`` the adaptive target for T1 (bytes, a float). A hit in T1
    moves the entry to T2's head, in T2 to T2's head. A miss found in B1 raises
    ``p`` by ``max(|B2| / |B1|, 1)`` (sizes in bytes, before the key leaves B1) up to the budget;
    found in B2 lowers it by ``max(|B1| / |B2|, 1)`` down to 0; either way the key leaves the
    ghost list and is inserted at T2's head after REPLACE makes room, REPLACE evicting T1's tail
    into B1 if T1 is non-empty and (|T1| > p or (|T1| = p and the key came from B2)) or T2 is
    empty, else T2's tail into B2. Any other miss enters T1's head, after case IV of the
    paper: if ``|T1| + |B1| + size > budget``, drop B1's oldest and REPLACE when B1 is
    non-empty, else evict T1's tail without a ghost; otherwise, when all four lists hold at least
    ``2 × budget`` bytes, drop B2's oldest (if any), then REPLACE. libCacheSim's sizes are bytes
    where the paper counts pages; the ghost deltas are ratios of byte sizes. No parameters."""

    def fast_replay(self, bt, budget, out):
        """Numba fast path (:func:`refsim.cache.admit_kernel.arc_kernel`)."""
        from refsim.cache.admit_kernel import arc_kernel
        arc_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                   bt.n_expert, budget, out)

    def setup(self):
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()
        self.t1_bytes = self.t2_bytes = self.b1_bytes = self.b2_bytes = 0
        self.p = 0.0
        self.ghost_of: dict[int, int] = {}       # pending miss -> 1 (from B1) or 2 (from B2)
        self.cur = 0

    def hit(self, key, protected):
        if key in self.t1:
            del self.t1[key]
            size = self.size(key)
            self.t1_bytes -= size
            self.t2[key] = None
            self.t2_bytes += size
        else:
            self.t2.move_to_end(key)
        return []

    def miss(self, key):
        size = self.size(key)
        c = self.budget_bytes
        if key in self.b1:
            delta = max(self.b2_bytes / self.b1_bytes, 1.0)
            self.p = min(self.p + delta, float(c))
            self.b1_bytes -= size
            del self.b1[key]
            self.ghost_of[key] = 1
        elif key in self.b2:
            delta = max(self.b1_bytes / self.b2_bytes, 1.0)
            self.p = max(self.p - delta, 0.0)
            self.b2_bytes -= size
            del self.b2[key]
            self.ghost_of[key] = 2

    def admit(self, key, size, protected, occupied):
        self.cur = self.ghost_of.pop(key, 0)
        got = super().admit(key, size, protected, occupied)
        self.cur = 0                             # (also when the entry was not admitted)
        return got

    def _evict_list(self, one: bool, protected, ghost: bool = True):
        got = _pop_oldest(self.t1 if one else self.t2, protected)
        if got is None:
            return None
        k = got[0]
        size = self.size(k)
        if one:
            self.t1_bytes -= size
            if ghost:
                self.b1[k] = None
                self.b1_bytes += size
        else:
            self.t2_bytes -= size
            self.b2[k] = None
            self.b2_bytes += size
        return k

    def _replace(self, protected):
        t1 = self.t1_bytes
        from_t1 = (t1 > 0 and (t1 > self.p or (t1 == self.p and self.cur == 2))) \
            or self.t2_bytes == 0
        v = self._evict_list(from_t1, protected)
        return v if v is not None else self._evict_list(not from_t1, protected)

    def _drop_ghost(self, one: bool):
        g = self.b1 if one else self.b2
        k, _ = g.popitem(last=False)
        if one:
            self.b1_bytes -= self.size(k)
        else:
            self.b2_bytes -= self.size(k)

    def evict(self, protected, incoming):
        c = self.budget_bytes
        if self.cur:
            return self._replace(protected)
        if self.t1_bytes + self.b1_bytes + incoming > c:
            if self.b1_bytes > 0:
                self._drop_ghost(True)
                return self._replace(protected)
            v = self._evict_list(True, protected, ghost=False)
            return v if v is not None else self._replace(protected)
        if self.t1_bytes + self.b1_bytes + self.t2_bytes + self.b2_bytes >= 2 * c \
                and self.b2_bytes > 0:
            self._drop_ghost(False)
        return self._replace(protected)

    def insert(self, key, size, protected):
        if self.cur:
            self.t2[key] = None
            self.t2_bytes += size
        else:
            self.t1[key] = None
            self.t1_bytes += size
        self.cur = 0
        return True, []


class S3FIFO(AdmitPolicy, name="s3fifo"):
    """S3-FIFO (Yang et al., SOSP 2023) as libCacheSim ``S3FIFO.c`` states it, in bytes.

    A small FIFO S of ``int(small × budget)`` bytes, a main FIFO M of the rest, a ghost FIFO G of
    ``int(ghost × budget)`` bytes of keys evicted from S. Each resident entry has a counter: a
    hit adds 1 (uncapped in S and M). A miss whose key is in G (removed from it at the lookup)
    enters M's head with counter 0; any other miss enters S's head with counter 0. Eviction:
    from M while M is over its size or S is empty, else from S. From S: the tail with counter
    ``>= threshold`` moves to M's head with counter 0 (no eviction, continue); else it is
    evicted into G. From M: the tail with counter ``>= 1`` is reinserted at M's head with
    counter ``min(counter, 3) - 1``; else it is evicted. Defaults ``small=0.1``, ``ghost=0.9``,
    ``threshold=2`` (libCacheSim's ``fifo-size-ratio``, ``ghost-size-ratio``,
    ``move-to-main-threshold``).

    libCacheSim's variant, matched here: until the first eviction, a miss that finds S full
    (``|S| >= small × budget``) enters M instead (warm-up); a key leaving S moves to M at counter >= 2 (the paper
    says > 1 on a 2-bit counter, the same), M's counter is capped at 3 only on reinsertion; an
    entry of size > the small FIFO is not admitted (and with size = the small FIFO, room is made
    and then the entry is still not admitted); so below ``1 / small`` entries of budget nothing
    is ever cached."""

    params = {"small": 0.1, "ghost": 0.9, "threshold": 2}

    def check_params(self):
        _ratio(self, "small")
        if not 0.0 <= self.ghost <= 10.0:
            raise ConfigError(f"--policy s3fifo: ghost={self.ghost} is not in [0, 10]")
        if self.threshold < 1:
            raise ConfigError(f"--policy s3fifo: threshold={self.threshold} is not >= 1")

    def fast_replay(self, bt, budget, out):
        """Numba fast path (:func:`refsim.cache.admit_kernel.s3fifo_kernel`)."""
        from refsim.cache.admit_kernel import s3fifo_kernel
        s3fifo_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                      bt.n_expert, budget, float(self.small), float(self.ghost),
                      int(self.threshold), out)

    def setup(self):
        c = self.budget_bytes
        self.s_max = int(c * self.small)
        self.m_max = c - self.s_max
        self.g_max = int(c * self.ghost)
        self.s: OrderedDict[int, int] = OrderedDict()
        self.m: OrderedDict[int, int] = OrderedDict()
        self.g: OrderedDict[int, None] = OrderedDict()
        self.s_bytes = self.m_bytes = self.g_bytes = 0
        self.from_ghost: set[int] = set()
        self.has_evicted = False

    def can_insert(self, size):
        return size <= self.s_max and size <= self.budget_bytes

    def hit(self, key, protected):
        if key in self.s:
            self.s[key] += 1
        else:
            self.m[key] += 1
        return []

    def miss(self, key):
        if self.g_max > 0 and key in self.g:
            del self.g[key]
            self.g_bytes -= self.size(key)
            self.from_ghost.add(key)

    def _to_ghost(self, key):
        size = self.size(key)
        if self.g_max <= 0 or size > self.g_max:
            return
        while self.g_bytes + size > self.g_max:
            k, _ = self.g.popitem(last=False)
            self.g_bytes -= self.size(k)
        self.g[key] = None
        self.g_bytes += size

    def _evict_small(self, protected):
        s, skipped, victim = self.s, [], None
        while s:
            k, f = s.popitem(last=False)
            if k in protected:
                skipped.append((k, f))
                continue
            size = self.size(k)
            self.s_bytes -= size
            if f >= self.threshold:
                self.m[k] = 0
                self.m_bytes += size
                continue
            self._to_ghost(k)
            victim = k
            break
        for k, f in reversed(skipped):
            s[k] = f
            s.move_to_end(k, last=False)
        return victim

    def _evict_main(self, protected):
        m, skipped, victim = self.m, [], None
        while m:
            k, f = m.popitem(last=False)
            if k in protected:
                skipped.append((k, f))
                continue
            if f >= 1:
                m[k] = min(f, 3) - 1
                continue
            self.m_bytes -= self.size(k)
            victim = k
            break
        for k, f in reversed(skipped):
            m[k] = f
            m.move_to_end(k, last=False)
        return victim

    def evict(self, protected, incoming):
        self.has_evicted = True
        if self.m_bytes > self.m_max or self.s_bytes == 0:
            return self._evict_main(protected)
        v = self._evict_small(protected)
        return v if v is not None else self._evict_main(protected)

    def insert(self, key, size, protected):
        if key in self.from_ghost:
            self.from_ghost.discard(key)
            self.m[key] = 0
            self.m_bytes += size
            return True, []
        if size >= self.s_max:
            return False, []
        if not self.has_evicted and self.s_bytes >= self.s_max:
            self.m[key] = 0                       # warm-up: S full before any eviction
            self.m_bytes += size
            return True, []
        self.s[key] = 0
        self.s_bytes += size
        return True, []


class LIRS(AdmitPolicy, name="lirs"):
    """LIRS (Jiang & Zhang, SIGMETRICS 2002), the paper's algorithm in bytes.

    Keys are LIR (low inter-reference recency: resident, the bulk of the budget) or HIR
    (resident in the small list Q, or non-resident but still remembered in the recency stack
    S). S orders keys by recency (LIR, resident HIR and non-resident HIR), and its bottom is
    always an LIR key (*pruning* removes HIR keys from the bottom). Sizes: the resident HIR part
    is ``max(int(hir × budget), largest entry)`` bytes, the LIR part the rest (none if negative).

    - Hit on an LIR key: it moves to the top of S (then prune).
    - Hit on a resident HIR key: it moves to the top of S. If it was in S, it becomes LIR and
      leaves Q, and while the LIR part is over its size the bottom LIR key of S is demoted to
      HIR at the end of Q (and leaves S; then prune). If it was not in S, it stays HIR and moves
      to the end of Q.
    - Miss: room is made by evicting Q's front (if the key is in S it stays there as
      non-resident HIR). A key remembered in S as non-resident HIR becomes LIR at the top of S,
      with demotions as above; a new key becomes LIR while the LIR part has room (warm-up),
      else resident HIR at the top of S and the end of Q.
    - S is bounded to ``stack × budget`` bytes of keys by forgetting the oldest non-resident HIR
      keys (libCacheSim's limitStack; the paper leaves S unbounded). A hit never evicts.

    Defaults ``hir=0.01`` (the paper's and libCacheSim's 1 %), ``stack=2.0``. When Q holds only
    protected keys (batches), the bottom-most untouched LIR key is evicted instead.

    Not equal to libCacheSim's ``LIRS.c``, which departs from the paper in two ways: a hit on a
    resident HIR key outside S demotes an LIR key first (the paper demotes none), and when that
    demotion evicts Q's front and the front is the hit key itself, the key is evicted from Q yet
    stays "resident" in S without being counted in the occupied bytes, so the cache holds more
    than its budget; on some traces libCacheSim's LIRS then has more hits than Belady's optimum
    (tests/cache/test_policies_libcachesim.py shows one), which no cache of that size can have.
    """

    params = {"hir": 0.01, "stack": 2.0}
    LIR, HIR, NONRES = 0, 1, 2

    def check_params(self):
        if not 0.0 < self.hir < 1.0:
            raise ConfigError(f"--policy lirs: hir={self.hir} is not in (0, 1)")
        if not self.stack >= 1.0:
            raise ConfigError(f"--policy lirs: stack={self.stack} is not >= 1")

    def fast_replay(self, bt, budget, out):
        """Numba fast path (:func:`refsim.cache.admit_kernel.lirs_kernel`)."""
        from refsim.cache.admit_kernel import lirs_kernel
        lirs_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                    bt.n_expert, budget, float(self.hir), float(self.stack), out)

    def setup(self):
        c = self.budget_bytes
        self.hir_max = max(int(c * self.hir), max(self._eb))
        self.lir_max = max(0, c - self.hir_max)    # (a budget under two entries: no LIR part)
        self.s: OrderedDict[int, int] = OrderedDict()      # key -> LIR/HIR/NONRES; last = top
        self.q: OrderedDict[int, None] = OrderedDict()     # resident HIR; last = end
        self.nh: OrderedDict[int, None] = OrderedDict()    # non-resident HIR in S, oldest first
        self.s_bytes = self.lir_bytes = self.hir_bytes = 0
        self.s_max = int(self.stack * c)

    def _prune(self):
        s = self.s
        while s:
            k = next(iter(s))
            st = s[k]
            if st == self.LIR:
                return
            del s[k]
            self.s_bytes -= self.size(k)
            if st == self.NONRES:
                del self.nh[k]

    def _demote_bottom(self):
        self._prune()                             # (HIR keys can sit below when no LIR was)
        k = next(iter(self.s))                    # the bottom-most LIR key
        size = self.size(k)
        del self.s[k]
        self.s_bytes -= size
        self.lir_bytes -= size
        self.q[k] = None
        self.hir_bytes += size
        self._prune()

    def _limit_stack(self):
        while self.s_bytes > self.s_max and self.nh:
            k, _ = self.nh.popitem(last=False)
            del self.s[k]
            self.s_bytes -= self.size(k)

    def _to_lir(self, key, size):
        self.s[key] = self.LIR
        self.s.move_to_end(key)
        self.lir_bytes += size
        while self.lir_bytes > self.lir_max:
            self._demote_bottom()

    def hit(self, key, protected):
        size = self.size(key)
        st = self.s.get(key)
        if st == self.LIR:
            self.s.move_to_end(key)
            self._prune()
        elif st == self.HIR:
            del self.q[key]
            self.hir_bytes -= size
            self._to_lir(key, size)
        else:                                     # resident HIR not in S
            self.s[key] = self.HIR
            self.s_bytes += size
            self.q.move_to_end(key)
            self._limit_stack()
        return []

    def evict(self, protected, incoming):
        got = _pop_oldest(self.q, protected)
        if got is not None:
            k = got[0]
            self.hir_bytes -= self.size(k)
            if k in self.s:
                self.s[k] = self.NONRES
                self.nh[k] = None
            return k
        for k, st in self.s.items():              # only protected HIR keys: an untouched LIR
            if st == self.LIR and k not in protected:
                size = self.size(k)
                del self.s[k]
                self.s_bytes -= size
                self.lir_bytes -= size
                self._prune()
                return k
        return None

    def insert(self, key, size, protected):
        st = self.s.get(key)
        if st == self.NONRES:
            del self.nh[key]
            self._to_lir(key, size)
        elif self.lir_bytes + size <= self.lir_max:
            self.s[key] = self.LIR
            self.s_bytes += size
            self.lir_bytes += size
        else:
            self.s[key] = self.HIR
            self.s_bytes += size
            self.q[key] = None
            self.hir_bytes += size
        self._limit_stack()
        return True, []


class _CountingBloomFilter:
    """libCacheSim's ``minimalIncrementCBF`` (dataStructure/minimalIncrementCBF.c): counters
    sized for ``entries`` at false-positive rate ``error``; key ``k`` maps to counters
    ``(a + i*b) mod n`` (32-bit unsigned arithmetic), ``a``/``b`` the low 32 bits of XXH64 of
    the 8-byte little-endian object id with seeds 0x12345678 / 0x12344321 (hash.h HASH_SEED0/1).
    ``add`` increments every hashed counter; ``estimate`` is their minimum; ``decay`` halves."""

    SEED0, SEED1 = 0x12345678, 0x12344321

    def __init__(self, entries: int, error: float = 0.001):
        import math

        import xxhash

        self._xxh = xxhash.xxh64_intdigest
        bpe = -math.log(error) / 0.480453013918201
        self.hashes = int(math.ceil(0.693147180559945 * bpe))
        n = int(min(math.ceil(bpe * entries), 2**31 - 1))
        if n < self.hashes:
            n = self.hashes * 2
        self.n = n
        self.bf = [0] * n
        self._idx: dict[int, list[int]] = {}

    def slot_table(self, n_keys: int):
        """(n_keys, hashes) int32 array: the counters of key ``k`` (object id ``k + 1``); the
        filter has fewer than 2**31 counters, so an index fits."""
        import numpy as np
        return np.array([self._slots(k + 1) for k in range(n_keys)], dtype=np.int32).reshape(
            n_keys, self.hashes)

    def _slots(self, obj_id: int) -> list[int]:
        got = self._idx.get(obj_id)
        if got is None:
            raw = obj_id.to_bytes(8, "little")
            a = self._xxh(raw, self.SEED0) & 0xFFFFFFFF
            b = self._xxh(raw, self.SEED1) & 0xFFFFFFFF
            got = [((a + i * b) & 0xFFFFFFFF) % self.n for i in range(self.hashes)]
            self._idx[obj_id] = got
        return got

    def estimate(self, obj_id: int) -> int:
        bf = self.bf
        return min(bf[x] for x in self._slots(obj_id))

    def add(self, obj_id: int) -> None:
        bf = self.bf
        for x in self._slots(obj_id):
            bf[x] += 1

    def decay(self) -> None:
        self.bf = [v >> 1 for v in self.bf]


_SLOTS: dict = {}


def _cbf_slots(entries: int, n_keys: int):
    """(counters, hashes, (n_keys, hashes) slot table) of a filter sized for ``entries``,
    cached: the table depends only on the filter size and the keys."""
    got = _SLOTS.get((entries, n_keys))
    if got is None:
        if len(_SLOTS) > 256:
            _SLOTS.clear()
        f = _CountingBloomFilter(entries)
        got = _SLOTS[(entries, n_keys)] = (f.n, f.hashes, f.slot_table(n_keys))
    return got


class TinyLFU(AdmitPolicy, name="tinylfu"):
    """W-TinyLFU (Einziger, Friedman & Manes, ACM TOS 2017) as libCacheSim ``WTinyLFU.c``
    states it: a window LRU of ``int(window × budget)`` bytes in front of a main segmented LRU
    (two segments, 1:4, libCacheSim ``SLRU`` with ``seg-size=1:4``, as :class:`SLRU`), and a
    counting Bloom filter of the keys' frequencies (:class:`_CountingBloomFilter`) deciding
    which of the window's victim and the main's victim stays.

    - A hit in the window moves the key to the window's head; a hit in main promotes it as
      :class:`SLRU` does and counts it in the filter (every ``32 × main entries`` main hits all
      counters are halved).
    - A miss enters the window's head and is counted. To make room for it, one eviction at a
      time: take the window's least recent key W (counted again): while main has room, W
      moves to main and the next W is taken; else with M = main's victim (its lowest non-empty
      segment's least recent key), if W's estimate is above M's, M is evicted and W moves to
      main, otherwise W is evicted. An empty window evicts main's victim. The window may hold
      more than its share (only the total is bounded). An entry larger than the window or
      main's first segment is not admitted.

    Default ``window=0.01`` (the paper's and libCacheSim's 1 %). The filter is sized for the
    main part in entries (``entries = main bytes // smallest entry``, error 0.001); libCacheSim
    sizes it (and the decay period) by the main part in *bytes*, which is the same for unit
    sizes and, for MiB-sized entries, asks for 2**31 counters; so refsim equals libCacheSim
    on unit sizes (tests) and deliberately differs with byte sizes."""

    params = {"window": 0.01}

    def check_params(self):
        _ratio(self, "window")

    def setup(self):
        c = self.budget_bytes
        self.w_max = int(c * self.window)
        self.m_cap = c - self.w_max
        self.win: OrderedDict[int, None] = OrderedDict()
        self.w_bytes = 0
        main = SLRU(segments=2)
        main._eb, main._ne, main.budget_bytes = self._eb, self._ne, self.m_cap
        main.setup()
        main.seg_max = [int(1.0 / 5 * self.m_cap), int(4.0 / 5 * self.m_cap)]
        self.main = main
        unit = min(self._eb)
        self.cbf = _CountingBloomFilter(self.m_cap // unit)
        self.max_requests = 32 * (self.m_cap // unit)
        self.requests = 0

    def _main_bytes(self):
        return sum(self.main.seg_bytes)

    def fast_replay(self, bt, budget, out):
        """Numba fast path (:func:`refsim.cache.admit_kernel.tinylfu_kernel`); the sizes are
        :meth:`setup`'s, the filter's slots come from :func:`_cbf_slots` (cached)."""
        import numpy as np

        from refsim.cache.admit_kernel import tinylfu_kernel
        w_max = int(budget * self.window)
        m_cap = budget - w_max
        unit = int(bt.expert_bytes.min())
        n, hashes, slots = _cbf_slots(m_cap // unit, bt.n_layer * bt.n_expert)
        # the counters are the kernel's hot random accesses (``hashes`` per count): int32 halves
        # their footprint. A count is a main hit, an insert or a window departure (<= 2 per
        # lookup) and raises a counter by at most ``hashes``, so 2 x hashes x occurrences
        # bound every counter (int64 beyond 2**31)
        bf = np.zeros(n, np.int32 if 2 * hashes * bt.keys.size < 2**31 else np.int64)
        tinylfu_kernel(bt.keys, bt.batch_start, bt.batch_layer, bt.batch_kind, bt.expert_bytes,
                       bt.n_expert, budget, w_max, int(1.0 / 5 * m_cap), int(4.0 / 5 * m_cap),
                       32 * (m_cap // unit), slots, bf, out)

    def hit(self, key, protected):
        if key in self.win:
            self.win.move_to_end(key)
            return []
        out = self.main.hit(key, protected)
        self.cbf.add(key + 1)
        self.requests += 1
        if self.requests >= self.max_requests:
            self.requests = 0
            self.cbf.decay()
        return out

    def can_insert(self, size):
        return size <= self.budget_bytes and size <= self.w_max and \
            size <= self.m_cap and size <= self.main.seg_max[0]

    def evict(self, protected, incoming):
        """One ``WTinyLFU_evict`` call: window victims move to main while it has room, then one
        key is evicted (the window's victim or, if that one is the more frequent, main's)."""
        while True:
            got = _pop_oldest(self.win, protected)
            if got is None:
                return self.main.evict(protected, 0)
            w = got[0]
            size = self.size(w)
            self.w_bytes -= size
            if self._main_bytes() + size <= self.m_cap:
                self.main.insert(w, size, protected)
                self.cbf.add(w + 1)
                continue
            m = next((k for seg in self.main.seg for k in seg if k not in protected), None)
            if m is not None and self.cbf.estimate(w + 1) > self.cbf.estimate(m + 1):
                v = self.main.evict(protected, 0)
                self.main.insert(w, size, protected)
                self.cbf.add(w + 1)
                return v
            self.cbf.add(w + 1)
            return w

    def insert(self, key, size, protected):
        self.win[key] = None
        self.w_bytes += size
        self.cbf.add(key + 1)
        return True, []
