"""The MTP draft source: engine rules (begin, drafting with p_min, accept-before-catch-up, the
draft context never rolling back), DRAFT decode events at layer n_layer, the mtp: flash split,
exact greedy output, and the load-time rejections."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refsim.cache import ExpertCache
from refsim.errors import ConfigError
from refsim.events import DecodeKind
from refsim.forward import qwen35moe as Q
from refsim.model import open_model, write_synthetic
from refsim.spec import SpecConfig, run_generation
from refsim.spec.forward_target import ForwardTarget
from refsim.spec.mtp import MtpDraft, MtpTarget, check_mtp_load, mtp_source_for, top_prob
from refsim.telemetry import RunStats
from refsim.telemetry.lines import spec_lines

PROMPT = [1, 5, 77, 123, 42, 299, 7]


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    return open_model(write_synthetic(tmp_path_factory.mktemp("mtp") / "h.gguf", "qwen35moe", "F32",
                                      nextn=True, seed=3))


def _cache(m, frac=0.3):
    eb = np.array([m.expert_bytes(il) for il in range(m.spec.n_layer_all)], np.int64)
    return ExpertCache(eb, m.spec.n_expert, int(eb.sum() * m.spec.n_expert * frac))


def test_top_prob_hand_worked():
    # logits (0, ln 3): top-1 = 1 with p = 3 / (1 + 3)
    tok, p = top_prob(np.array([0.0, np.log(3.0)], np.float32))
    assert tok == 1 and p == pytest.approx(0.75)
    # only the 10 best count: 12 equal logits -> p = 1/10
    assert top_prob(np.zeros(12, np.float32))[1] == pytest.approx(0.1)


@settings(max_examples=6)
@given(st.integers(1, 4), st.lists(st.integers(3, 299), min_size=1, max_size=6))
def test_output_equals_plain_greedy(hybrid, draft, prompt):
    tgt, src = mtp_source_for(hybrid, SpecConfig.from_flags(mtp=True, draft=draft))
    r = run_generation(tgt, src, prompt, 10, draft_max=draft)
    r0 = run_generation(ForwardTarget(hybrid), None, prompt, 10)
    np.testing.assert_array_equal(r.tokens, r0.tokens)


def test_events_and_engine_order(hybrid):
    tgt, src = mtp_source_for(hybrid, SpecConfig.from_flags(mtp=True, draft=3))
    r = run_generation(tgt, src, PROMPT, 8, cache=_cache(hybrid), draft_max=3)
    n_layer = hybrid.spec.n_layer
    kinds = [e.kind for e in r.events]
    # begin after prefill: the draft context's pass over the prompt is prefill (its reads stay
    # out of read_MiB, its lookups count in the cumulative hit rate)
    assert kinds[0] is DecodeKind.PREFILL and kinds[1] is DecodeKind.DRAFT_PREFILL
    np.testing.assert_array_equal(r.events[1].positions, np.arange(len(PROMPT)))
    for e in r.events:
        if e.kind.draft_context:               # the head's own experts, at index n_layer only
            assert (e.routes[:, :n_layer] == -1).all() and (e.routes[:, n_layer] >= 0).all()
        else:                                  # target decodes never route the head
            assert (e.routes[:, n_layer] == -1).all()
    # per step: n draft decodes (p_min 0 drafts the full width), the target decode, one catch-up
    i = 2
    for s in r.steps:
        n_draft_ev = s.n_draft
        assert all(r.events[i + j].kind is DecodeKind.DRAFT and r.events[i + j].n_pos == 1 for j in range(n_draft_ev))
        i += n_draft_ev
        assert r.events[i].kind in (DecodeKind.PLAIN, DecodeKind.VERIFY)
        catch = r.events[i + 1]
        assert catch.kind is DecodeKind.DRAFT
        np.testing.assert_array_equal(catch.positions, s.n_past + np.arange(1 + s.n_acc))  # accepted prefix only
        i += 2
    # the draft context never holds the rejected tail: its KV ends where the target's does
    assert src.kv.n == tgt.inner.state.n


def test_flash_split_is_the_cache_accounting(hybrid):
    tgt, src = mtp_source_for(hybrid, SpecConfig.from_flags(mtp=True, draft=2))
    r = run_generation(tgt, src, PROMPT, 8, cache=_cache(hybrid), draft_max=2)
    draft_bytes = sum(rec.read_bytes for e, rec in zip(r.events[2:], r.records[2:]) if e.kind is DecodeKind.DRAFT)
    all_bytes = sum(rec.read_bytes for rec in r.records[2:])
    s = RunStats.from_run(r)
    assert s.draft_read_bytes == draft_bytes > 0
    assert s.read_bytes == all_bytes
    line = spec_lines(s)[-1]
    assert line.startswith(f"mtp: of {all_bytes / 2**20:.1f} MiB streamed, {draft_bytes / 2**20:.1f} MiB (")
    assert f"({100 * draft_bytes / all_bytes:.1f}%) was the head's own routing" in line


def test_mtp_line_hand_worked():
    from dataclasses import replace
    base = RunStats(spec="mtp", draft_max=3, n_predict=4, n_prompt=2, tokens=4, decodes=2, verify_decodes=2,
                    drafted=6, accepted=2, drafted_steps=2, prefill_s=1.0, decode_s=1.0, draft_s=0.0,
                    loop_overhead_s=0.0, has_cache=True, lookups=10, hits=5, read_bytes=100 * 2**20,
                    prefill_read_bytes=0, resident_bytes=0, budget_bytes=0, evictions=0, rereads=0,
                    token_demand_bytes=0, layer_demand_bytes=0)
    s = replace(base, draft_read_bytes=3 * 2**20)
    assert spec_lines(s)[-1] == ("mtp: of 100.0 MiB streamed, 3.0 MiB (3.0%) was the head's own routing, "
                                 "97.0 MiB the widened verify batch")
    assert not spec_lines(replace(s, read_bytes=0))[-1].startswith("mtp: of")


def test_p_min_one_stops_drafting(hybrid):
    tgt, src = mtp_source_for(hybrid, SpecConfig.from_flags(mtp=True, draft=3, mtp_p_min=1.0))
    r = run_generation(tgt, src, PROMPT, 5, draft_max=3)
    assert sum(s.n_draft for s in r.steps) == 0          # p < 1 always on random weights
    n_draft_decodes = sum(1 for e in r.events[2:] if e.kind is DecodeKind.DRAFT)
    assert n_draft_decodes == 2 * (len(r.steps) - 1) + 1  # one probe + one catch-up per step (last: no room)


def test_catch_up_by_hand(hybrid):
    # after a verify decode of [tok, d1, d2] that accepted 1: catch-up = [tok, d1], pending_h = h row 1
    tgt = MtpTarget(hybrid, n_rs_seq=3)
    src = MtpDraft(tgt)
    tgt.prefill(np.array(PROMPT))
    (ev0,) = src.begin(PROMPT)
    np.testing.assert_array_equal(src.pending_h, tgt.last.h_nextn[-1])
    n_past = len(PROMPT)
    d = src.draft(np.array(PROMPT), 11, n_past, 2)
    assert src.kv.n == n_past                              # drafting's KV rows removed
    tgt.decode(np.array([11, 12, 13]), np.arange(n_past, n_past + 3))
    h_verify = tgt.last.h_nextn.copy()
    (ev,) = src.accept(1)
    np.testing.assert_array_equal(ev.positions, [n_past, n_past + 1])
    np.testing.assert_array_equal(ev.tokens, [11, 12])
    np.testing.assert_array_equal(src.pending_h, h_verify[1])
    assert src.kv.n == n_past + 2
    # the head's KV rows equal a fresh draft context fed the same confirmed rows
    kv = Q.new_mtp_state(hybrid.spec)
    toks = PROMPT + [11, 12]
    w = Q.load_weights(hybrid)
    h_fresh = Q.decode(w, Q.new_state(hybrid.spec), toks, np.arange(len(toks))).h_nextn
    h_all = np.concatenate([np.zeros((1, hybrid.spec.n_embd), np.float32), h_fresh[:-1]])
    Q.mtp_decode(w, kv, toks, np.arange(len(toks)), h_all)
    np.testing.assert_array_equal(kv.view(0, len(toks))[0], src.kv.view(0, len(toks))[0])
    assert len(d.events) == 2 and d.tokens.size == 2


def test_load_rejections(hybrid, tmp_path):
    plain = open_model(write_synthetic(tmp_path / "p.gguf", "qwen35moe", nextn=False))
    cfg = SpecConfig.from_flags(mtp=True, draft=3)
    with pytest.raises(ConfigError, match="no nextn"):
        mtp_source_for(plain, cfg)
    with pytest.raises(ConfigError, match="--ubatch 3: narrower than the verify batch"):
        check_mtp_load(hybrid.spec, cfg, n_ubatch=3)
    check_mtp_load(hybrid.spec, cfg, n_ubatch=4)
    with pytest.raises(ConfigError, match="two draft sources"):
        SpecConfig.from_flags(mtp=True, ngram=True)
    with pytest.raises(ConfigError, match="greedy"):
        SpecConfig.from_flags(mtp=True, temp=0.7)
    q3 = open_model(write_synthetic(tmp_path / "q3.gguf", "qwen3moe"))
    with pytest.raises(ConfigError, match="only for qwen35moe"):
        MtpTarget(q3)


def test_one_mib_per_token_figure(hybrid):
    """The cache summary and the engine-format telemetry count the same decode reads: the draft
    context's prompt pass is prefill for both (its lookups are in the cumulative hit rate)."""
    from refsim.cache import CacheSummary
    from refsim.telemetry import RunStats
    tgt, src = mtp_source_for(hybrid, SpecConfig.from_flags(mtp=True, draft=3))
    cache = _cache(hybrid)
    r = run_generation(tgt, src, PROMPT, 8, cache=cache, draft_max=3)
    stats = RunStats.from_run(r)
    s = CacheSummary.from_stats(cache.stats, cache.budget_bytes, r.n_gen, 1)
    assert s.decode_read_bytes == stats.read_bytes
    assert s.draft_read_bytes == stats.draft_read_bytes
    pre = [rec for e, rec in zip(r.events, r.records) if e.kind is DecodeKind.DRAFT_PREFILL]
    assert len(pre) == 1 and s.prefill_read_bytes == stats.prefill_read_bytes
    assert s.prefill_lookups == sum(rec.lookups for e, rec in zip(r.events, r.records) if e.phase == 0)


# ---- --drop-cold-experts in the head's pass (the same seam as the trunk's) ------------------

def _drop_run(hybrid, frac, draft=3, n=10, budget_frac=0.3, prefill=False):
    from refsim.streaming.knobs import StreamKnobs
    eb = np.array([hybrid.expert_bytes(il) for il in range(hybrid.spec.n_layer_all)], np.int64)
    knobs = StreamKnobs(drop_frac=frac, drop_in_prefill=prefill, traced=False)
    cache = ExpertCache(eb, hybrid.spec.n_expert, int(eb.sum() * hybrid.spec.n_expert * budget_frac),
                        knobs)
    tgt, src = mtp_source_for(hybrid, SpecConfig.from_flags(mtp=True, draft=draft))
    return run_generation(tgt, src, PROMPT, n, cache=cache, draft_max=draft), cache, eb, knobs


@pytest.mark.parametrize("prefill", [False, True])
def test_mtp_run_with_drop_replays_its_events_to_the_same_cache(hybrid, prefill):
    # every event the live run produced (the head's draft decodes and catch-ups included),
    # applied in order to a fresh cache with the same knobs, re-decides every drop from the
    # replayed state and gives the run's counters, drops and final LRU: the head's pass asked
    # residency at the right time (after the earlier graphs' reads, before its own load)
    r, cache, eb, knobs = _drop_run(hybrid, 1.0, prefill=prefill)
    n_layer = hybrid.spec.n_layer
    head = [rec for e, rec in zip(r.events, r.records) if e.kind.draft_context]
    assert sum(rec.experts_dropped for rec in head) > 0          # the head drops too
    assert all(rec.dropped is None or not rec.dropped[:, :n_layer].any() for rec in head)
    again = ExpertCache(eb, hybrid.spec.n_expert, cache.budget_bytes, knobs)
    recs = [again.apply(e) for e in r.events]
    for name in ("lookups", "hits", "read_bytes", "experts_routed", "experts_dropped"):
        assert (getattr(again.stats, name) == getattr(cache.stats, name)).all(), name
    assert again.resident_keys() == cache.resident_keys()
    for a, b in zip(recs, r.records):
        assert (a.dropped is None) == (b.dropped is None)
        if a.dropped is not None:
            assert (a.dropped == b.dropped).all()
        assert (a.residency == b.residency).all()


def test_mtp_drop_below_every_weight_is_the_plain_mtp_run(hybrid):
    # G8a with the head: a threshold under every weight drops nothing, in the trunk or the head
    r0, c0, _, _ = _drop_run(hybrid, 0.0)
    r1, c1, _, _ = _drop_run(hybrid, 1e-9)
    np.testing.assert_array_equal(r0.tokens, r1.tokens)
    assert c1.stats.total("experts_dropped") == 0 and c1.stats.total("experts_routed") > 0
    assert c1.stats.total("read_bytes") == c0.stats.total("read_bytes")


def test_mtp_head_drop_changes_the_heads_computation(hybrid, monkeypatch):
    # the head's expert FFN runs on the edited routing (weight 0, id repointed): with every
    # non-best slot cold and light, the head's logits differ from the undropped pass
    seen = []

    class Gate:
        drop_renorm = True

        def drop_threshold(self, il):
            return np.float32(1.0)                               # every non-best slot is light

        def resident(self, il, ids):
            return np.zeros(np.shape(ids), bool)

        def routed(self, il, rows, ids, weights, dropped):
            seen.append((il, dropped.copy()))

    w = Q.load_weights(hybrid)
    h = np.zeros((1, hybrid.spec.n_embd), np.float32)
    a = Q.mtp_decode(w, Q.new_mtp_state(hybrid.spec), [5], [0], h)
    b = Q.mtp_decode(w, Q.new_mtp_state(hybrid.spec), [5], [0], h, gate=Gate())
    assert seen and seen[0][0] == hybrid.spec.n_layer
    assert seen[0][1][0].sum() == hybrid.spec.n_expert_used - 1   # all but the best dropped
    assert b.dropped is not None and (b.routes == a.routes).all()  # routes stay the router's
    assert not np.array_equal(a.logits, b.logits)


def test_run_cli_takes_drop_with_mtp(hybrid, capsys):
    import json
    from refsim.cli import main
    assert main(["run", hybrid.path, "--mtp", "--draft", "2", "--prompt-tokens", "1,5,77,123",
                 "-n", "8", "--cache-mb", "0.05", "--json", "--drop-cold-experts", "1.0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["knobs"]["experts_dropped"] > 0
    for flag in ("--predict-prefetch", "--predict-log"):     # still refused with --mtp
        code = main(["run", hybrid.path, "--mtp", "-n", "2", flag])
        assert code in (1, 2) and "--mtp" in capsys.readouterr().err
