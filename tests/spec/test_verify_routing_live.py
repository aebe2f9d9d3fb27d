"""Lossy verify routing live (refsim/streaming/verify_route.py through Routing.route_layer) on the
committed trained MoEs (models/tiny-moe*.gguf): the pass applies the one rule the trace study
uses, to verify decodes only; at its identity settings it changes no bit; a live lossy run's events
replay to the same counters (and, for consensus, its route trace)."""

from pathlib import Path

import numpy as np
import pytest

from refsim.cache import ExpertCache
from refsim.errors import ConfigError
from refsim.events import DecodeKind
from refsim.model import open_model
from refsim.spec import run_generation
from refsim.spec.draft import NgramDraft
from refsim.spec.forward_target import ForwardTarget
from refsim.streaming.hooks import LayerHooks
from refsim.streaming.knobs import StreamKnobs
from refsim.streaming.verify_route import VerifyRouter, cap_layer, consensus_layer
from refsim.studies.replay import replay_trace
from refsim.trace import TraceHeader, read_trace

REPO = Path(__file__).resolve().parents[2]
TRAINED = {"tiny-moe": REPO / "models" / "tiny-moe-q8_0.gguf",
           "tiny-moe35": REPO / "models" / "tiny-moe35-q8_0.gguf"}
PROMPT = np.array([1, 400, 17, 90, 33, 400, 17, 90, 33, 400, 17], np.int64)
BATCH = np.array([90, 33, 400, 17], np.int64)        # a verify decode of tok + 3 drafts


def _decode(name, rule=None, numerics="exact", batch=BATCH):
    t = ForwardTarget(str(TRAINED[name]), numerics,
                      hooks=LayerHooks(verify=None if rule is None else VerifyRouter(rule)))
    t.prefill(PROMPT)
    return t, t.decode(batch, PROMPT.size + np.arange(batch.size))


def _first_moe_layer(out):
    return next(il for il in range(out.routes.shape[1]) if (out.routes[:, il] >= 0).all())


@pytest.mark.parametrize("name", list(TRAINED))
def test_live_rule_is_the_trace_rule(name):
    """The first MoE layer's router sees the same input with and without the rule, so its live
    selection is the rule applied to the unmodified pass's routing there."""
    _, base = _decode(name)
    il = _first_moe_layer(base)
    r0, w0 = base.routes[:, il], base.weights[:, il]
    assert np.unique(r0).size > 4                        # the batch widens: a cap of 4 bites
    _, cap = _decode(name, "cap:4")
    assert cap.routes[:, il].tolist() == r0.tolist()     # cap records the router's routing
    assert cap.dropped[:, il].tolist() == cap_layer(r0, w0, 4).tolist()
    assert cap.dropped.any() and not np.array_equal(cap.logits, base.logits)
    _, con = _decode(name, "consensus:0.3")
    assert con.routes[:, il].tolist() == consensus_layer(r0, w0, 0.3).tolist()
    assert con.dropped is None


@pytest.mark.parametrize("name", list(TRAINED))
@pytest.mark.parametrize("numerics", ["exact", "ggml"])
def test_identity_settings_and_plain_decodes_change_no_bit(name, numerics):
    t, base = _decode(name, numerics=numerics)
    for rule in (f"cap:{t.n_expert}", "consensus:0"):
        _, got = _decode(name, rule, numerics)
        assert np.array_equal(got.logits, base.logits) and np.array_equal(got.routes, base.routes)
    _, one = _decode(name, numerics=numerics, batch=BATCH[:1])
    _, one_cap = _decode(name, "cap:1", numerics, batch=BATCH[:1])     # a plain decode: never touched
    assert np.array_equal(one.logits, one_cap.logits) and np.array_equal(one.routes, one_cap.routes)


def test_the_rule_and_the_drop_seam_are_refused_together():
    model = open_model(str(TRAINED["tiny-moe"]))
    t = ForwardTarget(model, hooks=LayerHooks(verify=VerifyRouter("cap:2")))
    eb = [model.expert_bytes(il) for il in range(model.spec.n_layer)]
    cache = ExpertCache(eb, model.spec.n_expert, 1 << 20, StreamKnobs(drop_frac=0.5))
    with pytest.raises(ConfigError, match="lossy verify routing with --drop-cold-experts"):
        run_generation(t, NgramDraft(1, 3), PROMPT, 24, cache=cache)


@pytest.mark.parametrize("name", list(TRAINED))
@pytest.mark.parametrize("rule", ["cap:5", "consensus:0.2"])
def test_lossy_run_acts_on_verify_decodes_only_and_replays(name, rule, tmp_path):
    model = open_model(str(TRAINED[name]))
    spec = model.spec
    router = VerifyRouter(rule)
    t = ForwardTarget(model, hooks=LayerHooks(verify=router))
    eb = [model.expert_bytes(il) for il in range(spec.n_layer)]
    budget = 1 << 20
    cache = ExpertCache(eb, spec.n_expert, budget)
    res = run_generation(t, NgramDraft(1, 3), PROMPT, 24, cache=cache)
    verifies = [e for e in res.events if e.kind is DecodeKind.VERIFY]
    assert verifies and router.layers > 0 and router.changed > 0
    assert all(e.dropped is None for e in res.events if e.kind is not DecodeKind.VERIFY)
    if rule.startswith("cap"):
        assert any(e.dropped is not None for e in verifies)
        assert all(np.unique(e.routes[:, il][~e.dropped[:, il]]).size <= 5
                   for e in verifies if e.dropped is not None for il in range(spec.n_layer)
                   if (e.routes[:, il] >= 0).any())
    st = cache.stats
    fresh = ExpertCache(eb, spec.n_expert, budget)              # the events alone, through a new cache
    for e in res.events:
        fresh.apply(e)
    assert [fresh.stats.total(c) for c in ("lookups", "hits", "read_bytes")] == [
        st.total(c) for c in ("lookups", "hits", "read_bytes")]
    if rule.startswith("cap"):
        # a capped row may lose every slot, which the trace reader refuses (its check is the drop
        # rule's guarantee, bmoe-engine.md §3.6): the route trace round trip is consensus's only
        return
    trace = tmp_path / "lossy.route.csv"
    res.write_trace(str(trace), TraceHeader(
        model=str(TRAINED[name]), arch=spec.arch, n_layer=spec.n_layer, n_expert=spec.n_expert,
        n_expert_used=spec.n_expert_used, expert_bytes=eb,
        dense_bytes=[model.dense_bytes(il) for il in range(spec.n_layer)]))
    rep = replay_trace(read_trace(trace), budget)
    assert (rep.summary.lookups, rep.summary.hits, rep.summary.read_bytes) == (
        st.total("lookups"), st.total("hits"), st.total("read_bytes"))
    assert rep.residency_agree == rep.residency_rows > 0
