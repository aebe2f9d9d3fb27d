"""The engine's LRU (:class:`~refsim.cache.ExpertCache`) driven next to a tiny OrderedDict model of
its rules (:class:`refsim.testing.traces.ModelLRU`) by a hypothesis state machine (STYLE.md
anchor 9; hypothesis ``tutorial/stateful.rst``): each rule loads one event through one of the
cache's three entry points (``apply``, a ``LayerFeed`` layer by layer, ``apply_block``), and after
every step the two agree on the residency each slot saw, the counters and the LRU order, and the
cache's bytes obey the batch rules (bmoe-engine.md §3.2, rules 1-3 of :mod:`refsim.cache.lru`)."""

from __future__ import annotations

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from refsim.cache import ExpertCache
from refsim.events import NOT_ROUTED, DecodeEvent, DecodeKind, EventBlock
from refsim.testing.traces import ModelLRU

MAX_LAYER, MAX_EXPERT, MAX_K, MAX_POS = 3, 6, 3, 4


def slot_rows():
    """(n_pos, MAX_LAYER, MAX_K) raw expert draws: -1 = not routed, else reduced modulo the
    machine's n_expert (a slot repeats an id when two draws meet: duplicates in a batch)."""
    row = st.lists(st.integers(-1, MAX_EXPERT - 1), min_size=MAX_K, max_size=MAX_K)
    layer = st.lists(row, min_size=MAX_LAYER, max_size=MAX_LAYER)
    return st.lists(layer, min_size=1, max_size=MAX_POS)


class ExpertCacheMachine(RuleBasedStateMachine):
    """An ExpertCache and a ModelLRU fed the same events."""

    @initialize(n_layer=st.integers(1, MAX_LAYER), n_expert=st.integers(1, MAX_EXPERT),
                k=st.integers(1, MAX_K),
                sizes=st.lists(st.sampled_from([1, 2, 3, 5, 8]), min_size=MAX_LAYER,
                               max_size=MAX_LAYER),
                budget=st.integers(1, 40))
    def setup(self, n_layer, n_expert, k, sizes, budget):
        self.n_layer, self.n_expert, self.k = n_layer, n_expert, k
        self.sizes = sizes[:n_layer]
        self.budget = budget
        self.cache = ExpertCache(self.sizes, n_expert, budget)
        self.model = ModelLRU(budget, self.sizes)
        self.pos = 0
        self.last_union: set[tuple[int, int]] = set()

    def _event(self, raw, kind=DecodeKind.PLAIN) -> DecodeEvent:
        r = np.array(raw, np.int64)[:, :self.n_layer, :self.k]
        routes = np.where(r < 0, NOT_ROUTED, r % self.n_expert).astype(np.int16)
        n_pos = routes.shape[0]
        if n_pos > 1 and kind is DecodeKind.PLAIN:
            kind = DecodeKind.VERIFY
        ev = DecodeEvent(kind, np.arange(self.pos, self.pos + n_pos, dtype=np.int64), routes,
                         weights=np.where(routes >= 0, np.float32(0.5),
                                          np.float32(np.nan)).astype(np.float32),
                         n_draft=n_pos - 1 if kind is DecodeKind.VERIFY else 0,
                         accepted=0 if kind is DecodeKind.VERIFY else None)
        self.pos += n_pos
        return ev

    def _model_event(self, ev: DecodeEvent) -> list[list[int]]:
        """The model loads the event's layer batches; per layer, the residency of its routed
        slots before the batch (token-major)."""
        out = []
        for il in range(self.n_layer):
            ids = ev.routes[:, il, :][ev.routes[:, il, :] >= 0]
            out.append(self.model.load(il, ids))
            self.last_union = {(il, int(e)) for e in ids}
        return out

    def _check_record(self, ev: DecodeEvent, residency: np.ndarray, want: list[list[int]]):
        for il in range(self.n_layer):
            sel = ev.routes[:, il, :] >= 0
            assert residency[:, il, :][sel].tolist() == want[il]
            assert (residency[:, il, :][~sel] == -1).all()

    @rule(raw=slot_rows())
    def apply_one_event(self, raw):
        ev = self._event(raw)
        rec = self.cache.apply(ev)
        self._check_record(ev, rec.residency, self._model_event(ev))

    @rule(raw=slot_rows())
    def feed_layer_by_layer(self, raw):
        ev = self._event(raw)
        want = []
        feed = self.cache.open_event(ev.kind, ev.positions, self.k)
        rows = np.arange(ev.n_pos)
        for il in range(self.n_layer):
            ids = ev.routes[:, il, :]
            # the seam's question before the layer: resident now = the model's set before it
            asked = feed.resident(il, ids)
            assert asked.tolist() == [[(il, int(e)) in self.model.od if e >= 0 else False
                                       for e in row] for row in ids]
            sel = ids[ids >= 0]
            want.append(self.model.load(il, sel))
            self.last_union = {(il, int(e)) for e in sel}
            feed.routed(il, rows, ids, ev.weights[:, il, :])
        rec = feed.close(ev)
        self._check_record(ev, rec.residency, want)

    @rule(raws=st.lists(slot_rows(), min_size=1, max_size=3))
    def apply_a_block(self, raws):
        events = [self._event(raw) for raw in raws]
        records = self.cache.apply_block(EventBlock.from_events(events, self.n_layer, self.k))
        for ev, rec in zip(events, records):
            self._check_record(ev, rec.residency, self._model_event(ev))

    @invariant()
    def agrees_with_the_model(self):
        if not hasattr(self, "cache"):
            return
        # the LRU order: the cache lists most recent first, the model's dict oldest first
        assert self.cache.resident_keys() == list(reversed(self.model.od))
        s = self.cache.stats
        assert (s.total("lookups"), s.total("hits"), s.total("read_bytes")) == \
            (self.model.lookups, self.model.hits, self.model.read)

    @invariant()
    def occupancy_is_the_resident_sizes_within_the_budget(self):
        if not hasattr(self, "cache"):
            return
        resident = self.cache.resident_keys()
        occupied = self.cache.stats.resident_bytes
        assert occupied == sum(self.sizes[il] for il, _ in resident)
        # rule 2: over budget only when every resident entry is the last batch's own
        assert occupied <= self.budget or set(resident) == self.last_union


ExpertCacheMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=12,
                                                deadline=None)
test_expert_cache_agrees_with_the_ordered_dict_model = ExpertCacheMachine.TestCase
