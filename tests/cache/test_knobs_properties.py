"""Properties of --drop-cold-experts, --prefetch, --predict-prefetch and route-ahead's early
reads in the LRU kernel on random event streams,
against a plain-Python model written from the engine's rules (bmoe-engine.md §3.2, §3.5, §3.6;
router_hook.cpp apply_drop, build_spec_lists, predict_after_load; expert_stream_source.cpp
prefetch, quiesce_spec, touch_entry, retain)."""

import dataclasses
from collections import OrderedDict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.cache import ExpertCache
from refsim.streaming.knobs import StreamKnobs
from refsim.events import DecodeEvent, DecodeKind
from refsim.testing.cache_streams import cache_budgets, cache_streams
from refsim.testing.traces import EventStream


class ModelCache:
    """The engine's cache with both knobs, one dict and plain loops (no arrays, no kernel)."""

    def __init__(self, eb, n_expert, budget, knobs):
        self.eb, self.ne, self.budget, self.kn = list(eb), n_expert, budget, knobs
        self.od = OrderedDict()          # key -> None; last = most recent
        self.spec, self.evicted, self.learned, self.prev = set(), set(), set(), {}
        self.c = dict(lookups=0, hits=0, read=0, routed=0, dropped=0, spec_read=0, spec_exp=0,
                      useful=0, rereads=0)
        self.dropped_masks = []
        self.decodes = 0
        self.pend = {}

    def resident(self):
        return sum(self.eb[key // self.ne] for key in self.od)

    def issue(self, il, queue):
        for t in range(il + 1, min(il + self.kn.prefetch, len(self.eb) - 1) + 1):
            for e in self.prev.get(t, []):
                key = t * self.ne + e
                if e < 0 or key in self.od or key in [q for q, _ in queue]:
                    continue
                queue.append((key, False))
                self.c["read"] += self.eb[t]
                self.c["spec_read"] += self.eb[t]
                self.c["rereads"] += key in self.evicted

    def passes(self, s, w, thr):
        # the drop-aware filter: rank 0 always; with F > 0 a predicted weight >= F/k
        return s == 0 or self.kn.drop_frac == 0 or bool(w >= thr)

    def issue_committed(self, t, rows, wrows, thr, queue):
        for r, wr in zip(rows, wrows):
            for s, e in enumerate(r):
                key = t * self.ne + e
                if e < 0 or not self.passes(s, wr[s], thr):
                    continue
                if key in self.od:
                    self.od.move_to_end(key)                  # retained: promoted, no bytes
                elif key not in [q for q, _ in queue]:
                    queue.append((key, True))
                    self.c["read"] += self.eb[t]
                    self.c["spec_read"] += self.eb[t]
                    self.c["rereads"] += key in self.evicted

    def settle(self, queue):
        for key, hot in queue:
            if key not in self.od:
                self.od[key] = None
                self.od.move_to_end(key, last=hot)        # prefetch: cold end; route-ahead: hot
                self.spec.add(key)
                self.c["spec_exp"] += 1
        queue.clear()

    def apply(self, ev):
        kn, ne = self.kn, self.ne
        n_pos, n_layer, k = ev.routes.shape
        armed = kn.drop_frac > 0 and (ev.phase == 1 or kn.drop_in_prefill)
        target = ev.kind in (DecodeKind.PLAIN, DecodeKind.VERIFY)
        ahead = kn.route_ahead if target and self.decodes else 0
        thr = np.float32(np.float32(kn.drop_frac) / np.float32(k))
        mask = np.zeros(ev.routes.shape, bool)
        queue = []
        pr = ev.pred_routes if ev.pred_routes is not None else ev.routes
        pw = (ev.pred_weights if ev.pred_weights is not None
              else np.full(ev.routes.shape, np.nan, np.float32))
        for il in range(n_layer):
            t = il + 2
            if kn.predict_prefetch and t < n_layer:        # the snapshot at layer t-2's topk
                keep, spec = [], []
                ps = [p for p in range(n_pos) if pr[p, t, 0] >= 0]
                if ps:
                    p = ps[-1]
                    for s_ in range(k):
                        e = int(pr[p, t, s_])
                        if e < 0 or not self.passes(s_, pw[p, t, s_], thr):
                            continue
                        if t * ne + e in self.od:
                            keep.append(e)
                        elif len(spec) < kn.predict_spec_max:
                            spec.append(e)
                self.pend[t] = (keep, spec)
            rows = [[int(x) for x in ev.routes[p, il]] for p in range(n_pos)]
            ws = [[np.float32(x) for x in ev.weights[p, il]] for p in range(n_pos)]
            routed = any(e >= 0 for r in rows for e in r)
            deferred = armed and il in self.learned and routed
            if kn.drop_frac > 0:
                self.c["routed"] += sum(e >= 0 for r in rows for e in r)
            if deferred and kn.prefetch:
                self.issue(il, queue)
            self.settle(queue)
            bests = []
            for p, (r, w) in enumerate(zip(rows, ws)):
                cand = [s for s in range(k) if r[s] >= 0]
                best = min(cand, key=lambda s: (-w[s], s)) if cand else -1
                bests.append(best)
                for s in cand:
                    if deferred and s != best and il * ne + r[s] not in self.od and w[s] < thr:
                        mask[p, il, s] = True
                        self.c["dropped"] += 1
            ids = [r[bests[p]] if mask[p, il, s] else r[s]
                   for p, r in enumerate(rows) for s in range(k) if r[s] >= 0]
            seen = set()
            for e in ids:
                key = il * ne + e
                if key not in seen:
                    seen.add(key)
                    self.c["lookups"] += 1
                    if key in self.od:
                        self.c["hits"] += 1
                        if key in self.spec:
                            self.spec.discard(key)
                            self.c["useful"] += 1
                    else:
                        self.od[key] = None
                        self.c["read"] += self.eb[il]
                        self.c["rereads"] += key in self.evicted
                self.od.move_to_end(key)
            while self.resident() > self.budget:
                tail = next(iter(self.od))
                if tail in seen:
                    break
                del self.od[tail]
                self.spec.discard(tail)
                self.evicted.add(tail)
            if not deferred and kn.prefetch:
                self.issue(il, queue)
            if kn.predict_prefetch and il + 1 in self.pend:  # after layer t-1's load
                keep, spec = self.pend.pop(il + 1)
                for e in keep:
                    key = (il + 1) * ne + e
                    if key in self.od:
                        self.od.move_to_end(key)               # retained: hot end, no lookup
                for e in spec:
                    key = (il + 1) * ne + e
                    if key in self.od or key in [q for q, _ in queue]:
                        continue
                    queue.append((key, False))
                    self.c["read"] += self.eb[il + 1]
                    self.c["spec_read"] += self.eb[il + 1]
                    self.c["rereads"] += key in self.evicted
            if ahead and il + ahead < n_layer:
                self.issue_committed(il + ahead, [[int(x) for x in pr[p, il + ahead]]
                                                  for p in range(n_pos)],
                                     [list(pw[p, il + ahead]) for p in range(n_pos)], thr, queue)
            last = [r for r in rows if any(e >= 0 for e in r)]
            if last:
                self.prev[il] = last[-1]
        if kn.traced or armed:
            self.learned |= {il for il in range(n_layer) if (ev.routes[:, il] >= 0).any()}
        self.decodes += target
        self.dropped_masks.append(mask)


@st.composite
def weighted_streams(draw):
    """cache_streams with a final weight on every slot (positive, a row sums to 1, drawn from a
    few values so ties and exact thresholds occur) and no recorded drops."""
    s = draw(cache_streams())
    predict = draw(st.booleans())
    n_expert = s.header.n_expert
    out = []
    for e in s.events:
        raw = np.array(draw(st.lists(st.sampled_from([1, 2, 3, 5, 8]), min_size=e.routes.size,
                                     max_size=e.routes.size)), np.float32).reshape(e.routes.shape)
        w = (raw / raw.sum(axis=2, keepdims=True)).astype(np.float32)
        pred = {}
        if predict:         # a stale-gate ranking on the last position of some layers
            n_pos, n_layer, k = e.routes.shape
            pr = np.full(e.routes.shape, -1, np.int16)
            pw = np.full(e.routes.shape, np.nan, np.float32)
            if e.phase == 1:
                for t in range(n_layer):
                    if draw(st.booleans()):
                        ids = draw(st.permutations(range(n_expert)))[:k]
                        raw_p = np.sort(np.array(draw(st.lists(st.sampled_from([1, 2, 3, 5, 8]),
                                                               min_size=k, max_size=k)),
                                                 np.float32))[::-1]
                        pr[-1, t] = ids
                        pw[-1, t] = (raw_p / raw_p.sum()).astype(np.float32)
            pred = {"pred_routes": pr, "pred_weights": pw}
        out.append(DecodeEvent(e.kind, e.positions, e.routes, weights=w, turn=e.turn,
                               n_draft=e.n_draft, accepted=e.accepted, **pred))
    return EventStream(s.header, out)


knob_draws = st.one_of(
    st.builds(StreamKnobs, drop_frac=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]),
              drop_in_prefill=st.booleans(), traced=st.booleans(), prefetch=st.integers(0, 3)),
    st.builds(StreamKnobs, route_ahead=st.integers(1, 3),
              drop_frac=st.sampled_from([0.0, 0.5, 1.0]), traced=st.booleans()),
    st.builds(StreamKnobs, predict_prefetch=st.just(True), predict_spec_max=st.integers(0, 8),
              drop_frac=st.sampled_from([0.0, 0.5, 1.0]), traced=st.booleans()))
cases = weighted_streams().flatmap(lambda s: st.tuples(st.just(s), cache_budgets(s.header)))


def run(stream, budget, knobs):
    h = stream.header
    if knobs is not None and stream.events and stream.events[0].pred_routes is None:
        # a stream drawn without predictions: predict-prefetch and route-ahead+drop need them
        knobs = dataclasses.replace(knobs, predict_prefetch=False,
                                    drop_frac=0.0 if knobs.route_ahead else knobs.drop_frac)
    c = ExpertCache(h.expert_bytes, h.n_expert, budget, knobs)
    return c, [c.apply(e) for e in stream.events]


@settings(max_examples=150, deadline=None)
@given(cases, knob_draws)
def test_kernel_equals_the_plain_model(case, knobs):
    stream, budget = case
    h = stream.header
    c, recs = run(stream, budget, knobs)
    knobs = c.knobs
    m = ModelCache(h.expert_bytes, h.n_expert, budget, knobs)
    for e in stream.events:
        m.apply(e)
    s = c.stats
    got = dict(lookups=s.total("lookups"), hits=s.total("hits"), read=s.total("read_bytes"),
               routed=s.total("experts_routed"), dropped=s.total("experts_dropped"),
               spec_read=s.total("spec_read_bytes"), spec_exp=s.total("spec_experts"),
               useful=s.total("spec_useful"), rereads=s.rereads)
    assert got == m.c
    assert c.resident_keys() == [(key // h.n_expert, key % h.n_expert) for key in reversed(m.od)]
    for r, mask in zip(recs, m.dropped_masks):
        assert ((r.dropped if r.dropped is not None else False) == mask).all()


@settings(max_examples=100, deadline=None)
@given(cases, knob_draws)
def test_dropped_slots_are_never_looked_up_nor_read(case, knobs):
    stream, budget = case
    c, recs = run(stream, budget, knobs)
    for e, r in zip(stream.events, recs):
        if r.dropped is None:
            continue
        assert (r.residency[r.dropped] == -1).all() and (r.charged_bytes[r.dropped] == 0).all()
        # the rule: never the row's best, never a resident entry (residency is -1 here because
        # no lookup happened; the weight is below F/k)
        thr = knobs.drop_threshold(e.routes.shape[2])
        assert (e.weights[r.dropped] < thr).all()
    # lookups = distinct (layer, id) per batch after the rewrite; no dropped id counted
    assert c.stats.total("read_bytes") == (
        sum(int(r.charged_bytes.sum()) for r in recs) + c.stats.total("spec_read_bytes"))


@settings(max_examples=100, deadline=None)
@given(cases, knob_draws)
def test_speculative_counters_are_bounded(case, knobs):
    stream, budget = case
    c, recs = run(stream, budget, knobs)
    s = c.stats
    assert (s.spec_read_bytes <= s.read_bytes).all()          # per decode kind
    assert s.total("spec_useful") <= s.total("spec_experts")
    for r in recs:
        assert r.spec_read_bytes <= r.read_bytes
        assert ((r.residency == 2).sum() == 0) or knobs.prefetch > 0 or knobs.route_ahead > 0 \
            or knobs.predict_prefetch
    if knobs.prefetch == knobs.route_ahead == 0 and not (knobs.predict_prefetch
                                                         and knobs.predict_spec_max):
        assert s.total("spec_read_bytes") == s.total("spec_experts") == 0


@settings(max_examples=150, deadline=None)
@given(cases)
def test_knobs_off_is_the_bare_cache(case):
    stream, budget = case
    a, ra = run(stream, budget, None)
    b, rb = run(stream, budget, StreamKnobs(drop_frac=0.0, prefetch=0))
    for x, y in zip(ra, rb):
        assert (x.residency == y.residency).all() and (x.charged_bytes == y.charged_bytes).all()
        assert (x.lookups, x.hits, x.read_bytes, x.resident_bytes) == \
               (y.lookups, y.hits, y.read_bytes, y.resident_bytes)
    assert a.resident_keys() == b.resident_keys()


@settings(max_examples=100, deadline=None)
@given(cases, knob_draws)
def test_recorded_drops_replay_to_the_same_cache(case, knobs):
    # a run's decisions written back as the `dropped` column and replayed with F = 0 (the
    # recorded column honoured) give the same counters and state: what `refsim replay` of a
    # dropped trace does. Without prefetch: a deferred layer hints before its load, an
    # undropped one after it, so a drop run with --prefetch replays only with the same F
    # (route-ahead's early reads need --route-ahead in the replay too).
    stream, budget = case
    knobs = dataclasses.replace(knobs, prefetch=0, route_ahead=0, predict_prefetch=False)
    c, recs = run(stream, budget, knobs)
    replay = [DecodeEvent(e.kind, e.positions, e.routes, weights=e.weights, dropped=r.dropped,
                          n_draft=e.n_draft, accepted=e.accepted)
              for e, r in zip(stream.events, recs)]
    c2, recs2 = run(EventStream(stream.header, replay), budget, None)
    for x, y in zip(recs, recs2):
        assert (x.residency == y.residency).all() and (x.charged_bytes == y.charged_bytes).all()
    assert c.resident_keys() == c2.resident_keys()
    assert c.stats.total("read_bytes") == c2.stats.total("read_bytes")
