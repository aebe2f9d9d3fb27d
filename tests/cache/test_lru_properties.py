"""Properties of the LRU cache on random event streams, and a differential test vs a model."""

from hypothesis import given
from hypothesis import strategies as st

from refsim.cache import ExpertCache
from refsim.testing.traces import ModelLRU, event_streams


def run(stream, budget):
    h = stream.header
    c = ExpertCache(h.expert_bytes, h.n_expert, budget)
    recs = [c.apply(e) for e in stream.events]
    return c, recs


@given(event_streams(), st.integers(1, 60))
def test_counters_are_consistent(stream, budget):
    c, recs = run(stream, budget)
    st_ = c.stats
    assert st_.total("hits") <= st_.total("lookups")
    # bytes read = sum over misses of the layer's entry size
    misses_bytes = sum(int(r.charged_bytes.sum()) for r in recs)
    assert st_.total("read_bytes") == misses_bytes
    per_layer_miss = c.layer_lookups - c.layer_hits
    assert st_.total("read_bytes") == int((per_layer_miss * stream.header.expert_bytes).sum())
    for r in recs:
        # a slot charged bytes is a missed first occurrence
        assert ((r.charged_bytes > 0) <= (r.residency == 0)).all()


@given(event_streams())
def test_a_budget_holding_everything_gives_only_compulsory_misses(stream):
    h = stream.header
    budget = int(h.expert_bytes.sum() * h.n_expert)
    c, _ = run(stream, budget)
    distinct = set()
    for e in stream.events:
        for il in range(h.n_layer):
            distinct.update((il, int(x)) for x in e.layer_ids(il))
    assert c.stats.total("lookups") - c.stats.total("hits") == len(distinct)
    assert c.stats.evictions == 0


@given(event_streams(), st.integers(1, 40), st.integers(0, 40))
def test_hits_never_fall_when_the_budget_grows(stream, b, extra):
    small, _ = run(stream, b)
    big, _ = run(stream, b + extra)
    assert big.stats.total("hits") >= small.stats.total("hits")


@given(event_streams(), st.integers(1, 60))
def test_agrees_with_a_plain_python_model(stream, budget):
    h = stream.header
    c, recs = run(stream, budget)
    m = ModelLRU(budget, h.expert_bytes.tolist())
    for e, r in zip(stream.events, recs):
        for il in range(h.n_layer):
            sel = e.routes[:, il, :] >= 0
            res = m.load(il, e.routes[:, il, :][sel])
            assert r.residency[:, il, :][sel].tolist() == res
    assert (m.lookups, m.hits, m.read) == (c.stats.total("lookups"), c.stats.total("hits"),
                                           c.stats.total("read_bytes"))
    assert sorted(m.od) == sorted(c.resident_keys())
