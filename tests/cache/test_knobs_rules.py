"""Hand-worked cases for --drop-cold-experts and --prefetch in the one LRU kernel
(bmoe-engine.md §3.5, §3.6; engine-docs/expert-dropping.md, prefetch.md, router_hook.cpp
apply_drop, expert_stream_source.cpp prefetch/quiesce_spec). Every expected number is derived in
the comments from the rule, not read back from the code."""

import numpy as np
import pytest

from refsim.cache import ExpertCache
from refsim.streaming.knobs import StreamKnobs, low_topk_warning
from refsim.errors import ConfigError
from refsim.events import DecodeEvent, DecodeKind

PRE, PLAIN, VERIFY = DecodeKind.PREFILL, DecodeKind.PLAIN, DecodeKind.VERIFY
NAN = float("nan")


def ev(kind, pos, rows, weights):
    """One event on a single layer: rows = per position the k ids; weights likewise."""
    r = np.array(rows, np.int16)[:, None, :]
    w = np.array(weights, np.float32)[:, None, :]
    n = r.shape[0]
    return DecodeEvent(kind, np.arange(pos, pos + n, dtype=np.int64), r, weights=w,
                       n_draft=n - 1 if kind is VERIFY else 0,
                       accepted=n - 1 if kind is VERIFY else None)


def cache(budget=100, knobs=None, n_expert=8, eb=(10,)):
    return ExpertCache(list(eb), n_expert, budget, knobs)


def totals(c, kinds=(PLAIN, VERIFY)):
    s = c.stats
    return (s.total("lookups", kinds), s.total("hits", kinds), s.total("read_bytes", kinds),
            s.total("experts_routed", kinds), s.total("experts_dropped", kinds))


STREAM = [ev(PRE, 0, [[0, 1]], [[0.6, 0.4]]),
          ev(PLAIN, 1, [[0, 2]], [[0.9, 0.1]]),
          ev(PLAIN, 2, [[2, 1]], [[0.7, 0.3]])]


def test_a_cold_light_slot_is_dropped_and_never_looked_up():
    # F = 1, k = 2: thr = 0.5. Prefill (not armed) reads 0 and 1. Decode 1: expert 2 misses,
    # is not the best, 0.1 < 0.5 -> dropped: one lookup (0, a hit), nothing read. Decode 2:
    # slot 0 (expert 2, the best) is kept and read (10 B); expert 1 is resident -> kept, hit.
    c = cache(knobs=StreamKnobs(drop_frac=1.0))
    recs = [c.apply(e) for e in STREAM]
    assert totals(c) == (3, 2, 10, 4, 1)
    assert recs[1].dropped.tolist() == [[[False, True]]]
    assert recs[1].residency.tolist() == [[[1, -1]]]        # the dropped slot: no lookup
    assert recs[1].charged_bytes.tolist() == [[[0, 0]]]
    assert recs[2].residency.tolist() == [[[0, 1]]] and recs[2].dropped is None
    # the raw counter includes prefill's 2 slots; the generation figure does not
    assert c.stats.total("experts_routed") == 6


def test_f_zero_is_the_bare_cache():
    a, b = cache(), cache(knobs=StreamKnobs(drop_frac=0.0))
    ra = [a.apply(e) for e in STREAM]
    rb = [b.apply(e) for e in STREAM]
    assert totals(a) == totals(b) == (4, 3, 10, 0, 0)   # experts_routed counts only while F > 0
    for x, y in zip(ra, rb):
        assert (x.residency == y.residency).all() and (x.charged_bytes == y.charged_bytes).all()


def test_first_decode_token_of_an_untraced_run_is_never_dropped():
    # Untraced and no --drop-in-prefill: prefill does not show its weight chain, so the first
    # decode only learns the terminal node and loads undropped (expert 2 read there, 10 B);
    # decode 2 then hits 2 and 1. Lookups 2 + 2, hits 1 + 2, read 10, nothing dropped.
    c = cache(knobs=StreamKnobs(drop_frac=1.0, traced=False))
    for e in STREAM:
        c.apply(e)
    assert totals(c) == (4, 3, 10, 4, 0)
    # with --drop-in-prefill the prefill graph asks for weights (armed), so decode 1 drops
    c = cache(knobs=StreamKnobs(drop_frac=1.0, traced=False, drop_in_prefill=True))
    for e in STREAM:
        c.apply(e)
    assert totals(c) == (3, 2, 10, 4, 1)


def test_drop_in_prefill_arms_prefill_but_not_the_first_graph():
    # Prefill 1 is the run's first graph (not learned yet): undropped. Prefill 2 (a second turn)
    # is armed and learned: expert 3 misses at weight 0.1 < 0.5 -> dropped, counted as a
    # prefill drop (not in the generation figure).
    evs = [ev(PRE, 0, [[0, 1]], [[0.9, 0.1]]), ev(PRE, 1, [[0, 3]], [[0.9, 0.1]])]
    c = cache(knobs=StreamKnobs(drop_frac=1.0, drop_in_prefill=True))
    for e in evs:
        c.apply(e)
    assert c.stats.total("experts_dropped", [PRE]) == 1
    assert c.stats.total("read_bytes", [PRE]) == 20                # 0 and 1 only
    c = cache(knobs=StreamKnobs(drop_frac=1.0))                    # not armed in prefill
    for e in evs:
        c.apply(e)
    assert c.stats.total("experts_dropped") == 0 and c.stats.total("read_bytes") == 30


def test_threshold_is_strict_and_float32():
    # F = 0.5, k = 2: thr = float32(0.5) / float32(2) = 0.25 exactly; 0.25 is kept, the next
    # float32 below it is dropped.
    below = float(np.nextafter(np.float32(0.25), np.float32(0)))
    for w, dropped in ((0.25, 0), (below, 1)):
        c = cache(knobs=StreamKnobs(drop_frac=0.5))
        c.apply(ev(PRE, 0, [[0, 1]], [[0.5, 0.5]]))
        c.apply(ev(PLAIN, 1, [[0, 5]], [[1 - w, w]]))
        assert c.stats.total("experts_dropped") == dropped
    assert StreamKnobs(drop_frac=0.75).drop_threshold(6) == np.float32(np.float32(0.75) / 6)


def test_best_is_the_largest_weight_ties_to_the_lowest_slot_and_never_dropped():
    # k = 3, F = 1: thr = 1/3. Row [4, 5, 6] all cold with weights 0.3 each: the best is slot 0
    # (tie -> lowest index), slots 1 and 2 drop. Row [4, 5, 6] with weights (0.1, 0.1, 0.8):
    # the best is slot 2, slots 0 and 1 drop.
    for w, mask in (((0.3, 0.3, 0.3), [False, True, True]),
                    ((0.1, 0.1, 0.8), [True, True, False])):
        c = cache(knobs=StreamKnobs(drop_frac=1.0))
        c.apply(ev(PRE, 0, [[0, 1, 2]], [[0.4, 0.3, 0.3]]))
        rec = c.apply(ev(PLAIN, 1, [[4, 5, 6]], [w]))
        assert rec.dropped[0, 0].tolist() == mask
        assert rec.lookups == 1 and rec.read_bytes == 10             # only the best is read


def test_a_resident_light_slot_is_kept():
    c = cache(knobs=StreamKnobs(drop_frac=1.0))
    c.apply(ev(PRE, 0, [[0, 1]], [[0.9, 0.1]]))
    rec = c.apply(ev(PLAIN, 1, [[0, 1]], [[0.99, 0.01]]))             # 1 is resident: a hit
    assert rec.dropped is None and rec.hits == 2


def test_residency_is_queried_before_the_batch_in_a_verify_decode():
    # Verify batch of 2 rows: row 0 keeps cold expert 3 (its best), row 1 has 3 at 0.1 < 0.5.
    # Residency is queried for every slot before load_layer, so row 1's slot is a miss there
    # and is dropped even though row 0 reads 3 in the same call: one lookup of 3, one read.
    c = cache(knobs=StreamKnobs(drop_frac=1.0))
    c.apply(ev(PRE, 0, [[0, 1]], [[0.5, 0.5]]))
    rec = c.apply(ev(VERIFY, 1, [[3, 0], [0, 3]], [[0.8, 0.2], [0.9, 0.1]]))
    assert rec.dropped[:, 0].tolist() == [[False, False], [False, True]]
    assert rec.lookups == 2 and rec.read_bytes == 10


def test_a_dropped_slot_promotes_the_best_entry_at_its_position():
    # Budget 25 B, entries of 10 B. Prefill [0, 1, -]: MRU order 1, 0. Decode 1: [0, 1, 2] with
    # weights (.5, .4, .1), F = 1, k = 3 (thr 1/3): 2 is cold and light -> dropped and its id
    # rewritten to 0, so load_layer sees 0, 1, 0: MRU order 0, 1. Decode 2: [3, -, -] reads 3;
    # 30 B > 25 B -> evict the LRU tail, 1. Decode 3: [1, -, -] misses. Without the rewrite
    # the tail would be 0 and decode 3 would hit.
    evs = [ev(PRE, 0, [[0, 1, -1]], [[0.6, 0.4, NAN]]),
           ev(PLAIN, 1, [[0, 1, 2]], [[0.5, 0.4, 0.1]]),
           ev(PLAIN, 2, [[3, -1, -1]], [[1.0, NAN, NAN]]),
           ev(PLAIN, 3, [[1, -1, -1]], [[1.0, NAN, NAN]])]
    c = cache(budget=25, knobs=StreamKnobs(drop_frac=1.0))
    recs = [c.apply(e) for e in evs]
    assert recs[3].hits == 0 and recs[3].read_bytes == 10
    assert c.resident_keys() == [(0, 1), (0, 3)]
    # the recorded column replays the same way (F = 0 honours dropped, with the same rewrite)
    rec_evs = [DecodeEvent(e.kind, e.positions, e.routes, weights=e.weights, dropped=r.dropped)
               for e, r in zip(evs, recs)]
    c2 = cache(budget=25)
    recs2 = [c2.apply(e) for e in rec_evs]
    assert [r.hits for r in recs2] == [r.hits for r in recs]
    assert c2.resident_keys() == c.resident_keys()


def test_drop_needs_weights():
    c = cache(knobs=StreamKnobs(drop_frac=0.5))
    c.apply(ev(PRE, 0, [[0, 1]], [[0.5, 0.5]]))
    with pytest.raises(ConfigError, match="weight"):
        c.apply(ev(PLAIN, 1, [[0, 2]], [[NAN, NAN]]))


@pytest.mark.parametrize("kw, flag", [(dict(drop_frac=1.5), "--drop-cold-experts"),
                                      (dict(drop_frac=-0.1), "--drop-cold-experts"),
                                      (dict(drop_frac=float("nan")), "--drop-cold-experts"),
                                      (dict(prefetch=9), "--prefetch"),
                                      (dict(prefetch=-1), "--prefetch")])
def test_engine_validation(kw, flag):
    with pytest.raises(ConfigError, match=flag):
        StreamKnobs(**kw)


def test_low_topk_warning():
    # expert-dropping.md's example: F = 0.75 at top-k 2 is 37.5 % of the routing, 9.4 % at k 8
    w = low_topk_warning(StreamKnobs(drop_frac=0.75), 2)
    assert "37.5% of the routing" in w and "9.4% at the top-k 8" in w
    assert low_topk_warning(StreamKnobs(drop_frac=0.75), 4) is not None
    assert low_topk_warning(StreamKnobs(drop_frac=0.75), 5) is None
    assert low_topk_warning(StreamKnobs(), 2) is None


# ---- prefetch ----------------------------------------------------------------------------

def ev2(kind, pos, rows):
    """Several layers; rows = per position, per layer, the k ids; weights 1/k."""
    r = np.array(rows, np.int16)
    w = np.full(r.shape, 1.0 / r.shape[2], np.float32)
    return DecodeEvent(kind, np.arange(pos, pos + r.shape[0], dtype=np.int64), r, weights=w)


def test_prefetch_round_trip_with_a_cold_hint():
    # The previous token's next-layer row is cold when it was evicted within one token. Two layers
    # of 10 B, k = 1, budget 10 B (one entry: every batch evicts the rest), --prefetch 1.
    # Prefill [0, 0]: layer 0 reads (0,0); layer 1 reads (1,0), 20 > 10: evict (0,0).
    # Decode 1 [1, 0]: settle (nothing queued). Layer 0 reads (0,1): 20 > 10, evict (1,0).
    #   Hint layer 1 with prefill's (1,0): cold -> queued, read 10 B speculatively.
    #   Layer 1: settle integrates (1,0) at the cold end (spec); resident 20 B. Lookup (1,0):
    #   a hit with residency 2 -> spec_useful 1. Eviction: 20 > 10: tail (0,1) untouched -> out.
    # Decode 2 [1, 1]: layer 0 reads (0,1) (evicted) 10 B: 20 > 10: evict (1,0). Hint (1,0):
    #   cold -> queued 10 B. Layer 1: integrate (1,0) at the cold end; lookup (1,1) misses 10 B;
    #   30 > 10: evict the tail = (1,0) (spec, never hit: wasted), then (0,1).
    c = cache(budget=10, knobs=StreamKnobs(prefetch=1), n_expert=4, eb=(10, 10))
    c.apply(ev2(PRE, 0, [[[0], [0]]]))
    r1 = c.apply(ev2(PLAIN, 1, [[[1], [0]]]))
    assert r1.residency[0].tolist() == [[0], [2]]
    assert (r1.read_bytes, r1.spec_read_bytes, r1.hits) == (20, 10, 1)
    r2 = c.apply(ev2(PLAIN, 2, [[[1], [1]]]))
    assert (r2.read_bytes, r2.spec_read_bytes, r2.hits) == (30, 10, 0)
    assert c.resident_keys() == [(1, 1)]
    s = c.stats
    assert (s.total("spec_experts"), s.total("spec_useful"), s.total("spec_read_bytes")) == (2, 1, 20)
    # --prefetch 0 on the same stream: decode 1 reads (0,1) and (1,0), decode 2 (0,1) and (1,1)
    c0 = cache(budget=10, n_expert=4, eb=(10, 10))
    for e in (ev2(PRE, 0, [[[0], [0]]]), ev2(PLAIN, 1, [[[1], [0]]]), ev2(PLAIN, 2, [[[1], [1]]])):
        c0.apply(e)
    assert c0.stats.total("read_bytes", [PLAIN]) == 40 and c0.stats.total("spec_experts") == 0


def test_prefetch_skips_queued_and_depth_two_hints_two_layers():
    # 3 layers of 10 B, k = 1, budget 10 B, --prefetch 2. Prefill [0, 0, 0]: each layer reads
    # and the previous layer's entry is evicted; resident (2,0). Decode 1 [1, 1, 1]:
    #  layer 0: reads (0,1), evicts (2,0); hints layers 1, 2 with (1,0), (2,0): both cold ->
    #    queued, 20 B speculative.
    #  layer 1: integrates (1,0), (2,0) at the cold end (spec); (1,1) misses (10 B); 40 > 10:
    #    evict tail: (2,0) [integrated last = coldest], (1,0), (0,1). Hint layer 2 with (2,0):
    #    cold again -> queued, 10 B (a re-read: it was evicted).
    #  layer 2: integrates (2,0); (2,1) misses; evict (2,0), (1,1).
    c = cache(budget=10, knobs=StreamKnobs(prefetch=2), n_expert=4, eb=(10, 10, 10))
    rows = lambda a, b, d: [[[a], [b], [d]]]
    c.apply(DecodeEvent(PRE, np.array([0]), np.array(rows(0, 0, 0), np.int16),
                        weights=np.ones((1, 3, 1), np.float32)))
    r = c.apply(DecodeEvent(PLAIN, np.array([1]), np.array(rows(1, 1, 1), np.int16),
                            weights=np.ones((1, 3, 1), np.float32)))
    assert (r.spec_read_bytes, r.read_bytes) == (30, 60)
    s = c.stats
    assert (s.total("spec_experts"), s.total("spec_useful")) == (3, 0)
    assert c.resident_keys() == [(2, 1)]


def test_dynamic_drop_can_read_more_than_no_drop():
    # docs/streaming-knobs.md's counterexample: 1 layer, 4 experts, k = 2, 1-byte entries,
    # budget 3 B, F = 1. Row 1 of the verify batch drops expert 0, which row 0 reads anyway;
    # the rewrite to 3 changes the eviction order, so the last decode misses 0.
    evs = [ev(PLAIN, 0, [[1, 3]], [[0.9, 0.1]]),
           ev(VERIFY, 1, [[0, 1], [3, 0]], [[0.6, 0.4], [0.9, 0.1]]),
           ev(PLAIN, 3, [[1, 2]], [[0.1, 0.9]]),
           ev(PLAIN, 4, [[0, 2]], [[0.9, 0.1]])]
    reads = []
    for f in (0.0, 1.0):
        c = cache(budget=3, knobs=StreamKnobs(drop_frac=f), n_expert=4, eb=(1,))
        recs = [c.apply(e) for e in evs]
        reads.append([r.read_bytes for r in recs])
    assert reads == [[2, 1, 1, 0], [2, 1, 1, 1]]


# ---- route-ahead's early reads ---------------------------------------------------------------

def test_route_ahead_reads_the_committed_layer_early_and_adopts_it_hot():
    # 2 layers of 10 B, k = 1, budget 20 B, --route-ahead 1 (cache side). Prefill [0, 0] reads
    # (0,0), (1,0). Decode 1 [1, 1] (the run's first decode: no early reads): reads (0,1): 30 >
    # 20, evict the tail (0,0); reads (1,1): evict (1,0). Cache: (1,1), (0,1).
    # Decode 2 [1, 2]: layer 0 hits (0,1); after its load, layer 1's committed expert (1,2) is
    # cold -> read early (10 B speculative). Layer 1: the settle adopts (1,2) at the HOT end
    # (30 > 20 is only checked after the batch); the lookup hits it with residency 2 (useful);
    # eviction takes the tail, (1,1).
    c = cache(budget=20, knobs=StreamKnobs(route_ahead=1), n_expert=4, eb=(10, 10))
    c.apply(ev2(PRE, 0, [[[0], [0]]]))
    r1 = c.apply(ev2(PLAIN, 1, [[[1], [1]]]))
    assert (r1.read_bytes, r1.spec_read_bytes) == (20, 0)
    r2 = c.apply(ev2(PLAIN, 2, [[[1], [2]]]))
    assert r2.residency[0].tolist() == [[1], [2]]
    assert (r2.read_bytes, r2.spec_read_bytes, r2.hits) == (10, 10, 2)
    assert c.resident_keys() == [(1, 2), (0, 1)]
    s = c.stats
    assert (s.total("spec_experts"), s.total("spec_useful")) == (1, 1)
    # a committed expert already resident is retained (promoted), costing nothing: decode 3
    # [2, 2]: layer 0 reads (0,2) (evicts the tail (0,1)); layer 1's (1,2) is resident -> promoted
    r3 = c.apply(ev2(PLAIN, 3, [[[2], [2]]]))
    assert (r3.read_bytes, r3.spec_read_bytes) == (10, 0)


def test_route_ahead_validation():
    with pytest.raises(ConfigError, match="--route-ahead: expected an integer in 0..8"):
        StreamKnobs(route_ahead=9)
    with pytest.raises(ConfigError, match="mutually exclusive"):
        StreamKnobs(route_ahead=1, prefetch=1)
    StreamKnobs(route_ahead=1, drop_frac=0.5)          # composes (the drop-aware filter)
    with pytest.raises(ConfigError, match="mutually exclusive"):
        StreamKnobs(route_ahead=1, predict_prefetch=True)


# ---- --predict-prefetch (the stale-gate prediction acted on) ----------------------------------

def evp(kind, pos, rows, weights=None, pred=None):
    """Several layers, one position: rows = per layer the k ids (weights default 1/k); pred =
    {layer: (ids, predicted weights)} for that position (the stale gate's ranking)."""
    r = np.array([rows], np.int16)
    w = (np.full(r.shape, 1.0 / r.shape[2], np.float32) if weights is None
         else np.array([weights], np.float32))
    pr = np.full(r.shape, -1, np.int16)
    pw = np.full(r.shape, np.nan, np.float32)
    for t, (ids, ws) in (pred or {}).items():
        pr[0, t], pw[0, t] = ids, ws
    return DecodeEvent(kind, np.array([pos], np.int64), r, weights=w, pred_routes=pr,
                       pred_weights=pw)


PP_PRE = [evp(PRE, 0, [[0, 1], [0, 1], [0, 1]]), evp(PLAIN, 1, [[0, 1], [0, 1], [0, 1]])]


def test_predict_prefetch_speculates_misses_cold_and_retains_residents():
    # 3 layers of 10 B, k = 2, budget 70 B. Prefill and decode 1 read/hit (l, 0), (l, 1) of
    # every layer; MRU order after them: (2,1) (2,0) (1,1) (1,0) (0,1) (0,0), 60 B.
    # Decode 2 routes [0,1] [0,1] [2,3]; the stale gate predicted layer 2 as [2, 0] (made at
    # layer 0). Snapshot at layer 0 (before its load): (2,2) cold -> speculated, (2,0) resident
    # -> kept. Layers 0, 1 hit (order: (1,1) (1,0) (0,1) (0,0) (2,1) (2,0)). After layer 1's
    # load: retain (2,0) -> hot end; queue (2,2): 10 B, speculative. Layer 2: the settle puts
    # (2,2) at the COLD end (70 B); 2 hits it (residency 2, useful), 3 misses (10 B): 80 > 70,
    # evict the tail not touched by the batch: (2,1) — (2,0) was retained away from it.
    c = cache(budget=70, knobs=StreamKnobs(predict_prefetch=True), n_expert=4, eb=(10,) * 3)
    for e in PP_PRE:
        c.apply(e)
    r = c.apply(evp(PLAIN, 2, [[0, 1], [0, 1], [2, 3]], pred={2: ([2, 0], [0.7, 0.3])}))
    assert r.residency[0, 2].tolist() == [2, 0]
    assert (r.lookups, r.hits, r.read_bytes, r.spec_read_bytes) == (6, 5, 20, 10)
    assert c.resident_keys() == [(2, 3), (2, 2), (2, 0), (1, 1), (1, 0), (0, 1), (0, 0)]
    s = c.stats
    assert (s.total("spec_experts"), s.total("spec_useful")) == (1, 1)
    # --predict-spec-max 0: retention only, no byte speculated; 2 and 3 are both read on demand
    # (20 B) and the retained (2,0) still outlives (2,1)
    c0 = cache(budget=70, knobs=StreamKnobs(predict_prefetch=True, predict_spec_max=0),
               n_expert=4, eb=(10,) * 3)
    for e in PP_PRE:
        c0.apply(e)
    r0 = c0.apply(evp(PLAIN, 2, [[0, 1], [0, 1], [2, 3]], pred={2: ([2, 0], [0.7, 0.3])}))
    assert r0.residency[0, 2].tolist() == [0, 0]
    assert (r0.read_bytes, r0.spec_read_bytes) == (20, 0)
    assert c0.resident_keys()[:3] == [(2, 3), (2, 2), (2, 0)] and (2, 1) not in c0.resident_keys()
    # without --predict-prefetch the same events evict (2,0), the LRU tail
    cb = cache(budget=70, n_expert=4, eb=(10,) * 3)
    for e in PP_PRE:
        cb.apply(e)
    cb.apply(evp(PLAIN, 2, [[0, 1], [0, 1], [2, 3]], pred={2: ([2, 0], [0.7, 0.3])}))
    assert (2, 1) in cb.resident_keys() and (2, 0) not in cb.resident_keys()


def test_predict_spec_max_caps_the_speculated_misses_in_rank_order():
    # The same prefix, budget 1000 B. Prediction for layer 2: [3, 2], both cold. spec_max 1:
    # only rank 0, (2,3), is read ahead (10 B); (2,2) is read on demand.
    c = cache(budget=1000, knobs=StreamKnobs(predict_prefetch=True, predict_spec_max=1),
              n_expert=4, eb=(10,) * 3)
    for e in PP_PRE:
        c.apply(e)
    r = c.apply(evp(PLAIN, 2, [[0, 1], [0, 1], [2, 3]], pred={2: ([3, 2], [0.6, 0.4])}))
    assert r.residency[0, 2].tolist() == [0, 2]
    assert (r.read_bytes, r.spec_read_bytes) == (20, 10)


def test_predict_prefetch_is_drop_aware():
    # F = 1, k = 2: thr = 0.5. Prediction for layer 2: [2, 3] weighted (.7, .3): rank 1 is
    # below thr -> not speculated (if it misses, the drop rule discards it unread). Only (2,2)
    # is read ahead. Layer 2 routes [2, 3] weighted (.6, .4): 2 hits the prefetched entry, 3
    # misses, is not the best and .4 < .5 -> dropped, never read.
    c = cache(budget=1000, knobs=StreamKnobs(predict_prefetch=True, drop_frac=1.0), n_expert=4,
              eb=(10,) * 3)
    for e in PP_PRE:
        c.apply(e)
    r = c.apply(evp(PLAIN, 2, [[0, 1], [0, 1], [2, 3]], weights=[[.5, .5], [.5, .5], [.6, .4]],
                    pred={2: ([2, 3], [0.7, 0.3])}))
    assert r.residency[0, 2].tolist() == [2, -1]
    assert r.dropped[0, 2].tolist() == [False, True]
    assert (r.read_bytes, r.spec_read_bytes) == (10, 10)


def test_a_kept_id_evicted_before_the_issue_is_neither_retained_nor_read():
    # 3 layers of 10 B, k = 1, budget 20 B. Prefill [0,0,0]: reads (0,0) (1,0) (2,0), evicting
    # (0,0). Decode 1 [1,0,0]: (0,1) evicts (1,0); (1,0) evicts (2,0); (2,0) evicts (0,1):
    # [(2,0), (1,0)]. Decode 2 [1,1,0], layer 2 predicted [0]: at layer 0's snapshot (2,0) is
    # resident -> kept (not speculated). Layer 0 reads (0,1), evicting (1,0); layer 1 reads
    # (1,1), evicting (2,0). The retention finds it gone, and a kept id is not prefetched: layer
    # 2 reads (2,0) on demand (residency 0, no speculative byte).
    c = cache(budget=20, knobs=StreamKnobs(predict_prefetch=True), n_expert=4, eb=(10,) * 3)
    c.apply(evp(PRE, 0, [[0], [0], [0]]))
    c.apply(evp(PLAIN, 1, [[1], [0], [0]]))
    r = c.apply(evp(PLAIN, 2, [[1], [1], [0]], pred={2: ([0], [1.0])}))
    assert r.residency[0].tolist() == [[0], [0], [0]]
    assert (r.read_bytes, r.spec_read_bytes) == (30, 0)


def test_predict_prefetch_needs_the_prediction():
    c = cache(knobs=StreamKnobs(predict_prefetch=True))
    with pytest.raises(ConfigError, match="pred_expert/pred_weight"):
        c.apply(ev(PLAIN, 0, [[0, 1]], [[0.5, 0.5]]))
    with pytest.raises(ConfigError, match="--predict-spec-max: expected an integer in 0..8"):
        StreamKnobs(predict_prefetch=True, predict_spec_max=9)
    with pytest.raises(ConfigError, match="mutually exclusive"):
        StreamKnobs(predict_prefetch=True, prefetch=1)


def test_route_ahead_early_reads_are_drop_aware():
    # 2 layers of 10 B, k = 2, budget 1000 B, --route-ahead 1 with F = 1 (thr = 0.5). Prefill and
    # decode 1 route [0,1] [0,1]. Decode 2 commits layer 1 to [2, 3], ranked at layer 0 with
    # stale weights (.8, .2): after layer 0's load only rank 0, (1,2), is read early (hot end,
    # 10 B speculative); (1,3) is below thr and left cold. Layer 1 (true weights .7, .3): 2 hits
    # the adopted entry (residency 2); 3 misses and .3 < .5 -> dropped unread.
    def run(f):
        c = cache(budget=1000, knobs=StreamKnobs(route_ahead=1, drop_frac=f), n_expert=4,
                  eb=(10, 10))
        c.apply(evp(PRE, 0, [[0, 1], [0, 1]]))
        c.apply(evp(PLAIN, 1, [[0, 1], [0, 1]]))
        return c.apply(evp(PLAIN, 2, [[0, 1], [2, 3]], weights=[[.5, .5], [.7, .3]],
                           pred={1: ([2, 3], [0.8, 0.2])}))
    r = run(1.0)
    assert r.residency[0, 1].tolist() == [2, -1] and r.dropped[0, 1].tolist() == [False, True]
    assert (r.read_bytes, r.spec_read_bytes) == (10, 10)
    # F = 0: the filter is inert, both committed experts are read early (20 B speculative)
    r0 = run(0.0)
    assert r0.residency[0, 1].tolist() == [2, 2]
    assert (r0.read_bytes, r0.spec_read_bytes) == (20, 20)
    # a trace without the stale ranking's weights cannot drive the filter
    c = cache(budget=1000, knobs=StreamKnobs(route_ahead=1, drop_frac=1.0), n_expert=4, eb=(10, 10))
    c.apply(ev2(PRE, 0, [[[0, 1], [0, 1]]]))
    c.apply(ev2(PLAIN, 1, [[[0, 1], [0, 1]]]))
    with pytest.raises(ConfigError, match="pred_weight column"):
        c.apply(ev2(PLAIN, 2, [[[0, 1], [2, 3]]]))
