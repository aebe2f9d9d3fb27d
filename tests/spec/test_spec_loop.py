"""The speculative loop (bmoe-engine.md §2): a hand-worked run, EOG cases, and invariants as
properties over scripted batch-invariant targets."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.cache import ExpertCache
from refsim.errors import ConfigError
from refsim.events import DecodeKind
from refsim.spec import NgramDraft, NoDraft, SpeculativeLoop, run_generation
from refsim.testing import DocumentScript, ScriptedRouter, ScriptedTarget, greedy_reference
from refsim.testing.strategies import prompts, scripted_targets

DOC = (1, 2, 3, 4, 1, 2, 3, 9, 1, 2, 3, 4)


def _doc_target(router=None):
    return ScriptedTarget(DocumentScript(DOC, eos=0), router, eos_ids=(0,))


def test_hand_worked_run():
    """prompt 1 2 3 4 1 2, the target recites DOC; draft 3, min-match 2, n_predict 6.

    step 1: tok 3 (prefill row); corpus 1 2 3 4 1 2 3 -> match j=2 (len 3), draft 4 1 2;
            verify [3 4 1 2] @6..9; row 0 predicts DOC[7]=9 != 4 -> n_acc 0, emit 3, trim to 7
    step 2: tok 9, never seen -> plain [9] @7, emit 9, next 1
    step 3: tok 1; the only earlier 1 with a 2-token match is at j=0 < min_match-1 -> plain
    step 4: tok 2; best j=5 (len 2, most recent), room 6-3-1 = 2 -> draft 3 9; verify
            [2 3 9] @9..11: row0 = 3 ok, row1 = DOC[11]=4 != 9 -> n_acc 1, emit 2 3, next 4
    step 5: room 0 -> plain [4] @11, emit 4 -> 6 tokens.
    """
    r = run_generation(_doc_target(), NgramDraft(min_match=2), DOC[:6], 6, draft_max=3)
    assert r.tokens.tolist() == [3, 9, 1, 2, 3, 4] == list(DOC[6:12])
    got = [(s.kind, s.n_past, s.n_draft, s.n_acc, s.batch, s.n_emitted) for s in r.steps]
    assert got == [(DecodeKind.VERIFY, 6, 3, 0, 1, 1), (DecodeKind.PLAIN, 7, 0, 0, 1, 1),
                   (DecodeKind.PLAIN, 8, 0, 0, 1, 1), (DecodeKind.VERIFY, 9, 2, 1, 2, 2),
                   (DecodeKind.PLAIN, 11, 0, 0, 1, 1)]
    kinds = [e.kind for e in r.events]
    assert kinds == [DecodeKind.PREFILL, DecodeKind.VERIFY, DecodeKind.PLAIN, DecodeKind.PLAIN,
                     DecodeKind.VERIFY, DecodeKind.PLAIN]
    assert r.events[1].tokens.tolist() == [3, 4, 1, 2]
    assert r.events[1].positions.tolist() == [6, 7, 8, 9]
    assert r.events[1].accepted == 0 and r.events[4].accepted == 1
    assert r.events[2].accepted is None
    assert not r.eog


def test_eog_bonus_token_stops_before_emitting():
    r = run_generation(_doc_target(), NgramDraft(min_match=2), DOC[:6], 10)
    assert r.tokens.tolist() == list(DOC[6:]) and r.eog
    assert len(r.steps) == 5   # the decode that predicted EOG was the 5th; no 6th decode


def test_accepted_eog_inside_a_draft_ends_generation():
    # prompt 5 6 0 7 5, script recites 5 6 0 7 5 6 0: tok 6; corpus 5 6 0 7 5 6 -> draft 0 7 5
    # (match len 2 at j=1); row 0 predicts 0 == d1 (EOG) -> n_acc 1, nothing after counts
    doc = (5, 6, 0, 7, 5, 6, 0, 7)
    t = ScriptedTarget(DocumentScript(doc, eos=0), eos_ids=(0,))
    r = run_generation(t, NgramDraft(min_match=2), doc[:5], 10)
    assert r.tokens.tolist() == [6] and r.eog
    (s,) = r.steps
    assert (s.n_draft, s.n_acc, s.batch, s.eog) == (3, 1, 1, True)


def test_plain_run_is_one_decode_per_token():
    r = run_generation(_doc_target(), None, DOC[:6], 5)
    assert r.tokens.tolist() == list(DOC[6:11])
    assert all(s.kind is DecodeKind.PLAIN and s.n_draft == 0 for s in r.steps)
    assert len(r.steps) == 5 and r.spec == "off" and r.draft_max == 0


def test_bad_arguments():
    t = _doc_target()
    with pytest.raises(ConfigError, match=r"--draft: expected 1\.\.8, got 9"):
        SpeculativeLoop(t, NgramDraft(), draft_max=9)
    with pytest.raises(ConfigError, match="n_predict"):
        SpeculativeLoop(t, NgramDraft(), n_predict=0)
    with pytest.raises(ConfigError, match="prompt"):
        SpeculativeLoop(t, NgramDraft(), n_predict=3).run([])
    with pytest.raises(ConfigError, match="cache has n_layer=2"):
        SpeculativeLoop(_doc_target(ScriptedRouter(3, 8, 2)), None,
                        cache=ExpertCache([1, 1], 8, 100))


def test_unknown_rule():
    with pytest.raises(ConfigError, match="--rule: expected one of engine, earliest, "
                                          "llama-simple, got 'x'"):
        NgramDraft(rule="x")


# --- invariants -------------------------------------------------------------------------

def _check_invariants(r, draft_max):
    steps = r.steps
    decodes = len(steps)
    accepted = sum(s.n_acc for s in steps)
    eog_in_draft = sum(1 for s in steps if s.eog)
    # tokens = decodes + accepted (an accepted EOG counts in accepted but is not emitted)
    assert r.n_gen == decodes + accepted - eog_in_draft
    for s in steps:
        assert 0 <= s.n_draft <= draft_max
        assert 0 <= s.n_acc <= s.n_draft
        assert 1 <= s.batch <= draft_max + 1 and s.n_emitted == s.batch
        assert (s.kind is DecodeKind.VERIFY) == (s.n_draft > 0)
    # the next decode starts right after the accepted prefix (KV trimmed to it)
    for a, b in zip(steps, steps[1:]):
        assert b.n_past == a.n_past + 1 + a.n_acc
    # events: prefill first, then per decode one event whose positions are contiguous
    dec = [e for e in r.events if e.kind in (DecodeKind.PLAIN, DecodeKind.VERIFY)]
    assert len(dec) == decodes
    for e, s in zip(dec, steps):
        assert e.positions.tolist() == list(range(s.n_past, s.n_past + s.n_draft + 1))
        assert e.n_draft == s.n_draft
    # coverage = drafted steps / decodes, as the stats define it
    drafted_steps = sum(1 for s in steps if s.n_draft > 0)
    assert drafted_steps <= decodes


@settings(max_examples=80, deadline=None)
@given(scripted_targets(), prompts(), st.integers(1, 8), st.integers(1, 4),
       st.integers(1, 40))
def test_speculative_equals_plain_greedy_for_every_width(target, prompt, draft_max, min_match,
                                                         n_predict):
    ref = greedy_reference(target.script, prompt, n_predict, target.eos_ids)
    plain = run_generation(target.fresh(), NoDraft(), prompt, n_predict)
    spec = run_generation(target.fresh(), NgramDraft(min_match=min_match), prompt, n_predict,
                          draft_max=draft_max)
    assert plain.tokens.tolist() == ref.tolist()
    assert spec.tokens.tolist() == ref.tolist()
    _check_invariants(spec, draft_max)
    _check_invariants(plain, draft_max)


@settings(max_examples=40, deadline=None)
@given(scripted_targets(routed=True), prompts(), st.integers(1, 8), st.integers(1, 40))
def test_every_event_reaches_the_cache(target, prompt, draft_max, n_predict):
    n_layer = target.n_layer
    cache = ExpertCache(np.arange(1, n_layer + 1) * 1000, target.n_expert, 4000)
    r = run_generation(target, NgramDraft(min_match=1), prompt, n_predict, cache=cache,
                       draft_max=draft_max)
    assert int(cache.stats.events.sum()) == len(r.events) == len(r.steps) + 1
    assert sum(s.read_bytes for s in r.steps) == cache.stats.total(
        "read_bytes", (DecodeKind.PLAIN, DecodeKind.VERIFY))
    if not r.steps:   # the first token was EOG
        return
    last = r.steps[-1]
    assert (last.cum_lookups, last.cum_hits) == (cache.stats.total("lookups"),
                                                 cache.stats.total("hits"))
