"""refsim's line after the engine's ``tokens per verify decode`` (whose figure is tokens / every
target decode, the engine's definition kept byte for byte): what the decodes that carried a draft
confirmed each. Hand-worked on the run of test_telemetry_formats.py and on the user's report."""

import dataclasses

from hypothesis import given, strategies as st

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.spec import NgramDraft, run_generation
from refsim.telemetry import RunStats
from refsim.telemetry.lines import drafted_decodes_line
from refsim.testing import DocumentScript, ScriptedRouter, ScriptedTarget

DOC = (1, 2, 3, 4, 1, 2, 3, 9, 1, 2, 3, 4)


def _stats():
    """test_telemetry_formats.py's run: 6 tokens, 5 decodes (2 verify), 5 drafted, 1 accepted."""
    router = ScriptedRouter(n_layer=3, n_expert=8, k=2, seed=1)
    target = ScriptedTarget(DocumentScript(DOC, eos=0), router, eos_ids=(0,))
    cache = ExpertCache([1000, 2000, 3000], 8, 10 * MIB)
    run = run_generation(target, NgramDraft(min_match=2), DOC[:6], 6, cache=cache, draft_max=3)
    return RunStats.from_run(run)


def test_hand_worked_run():
    s = _stats()
    assert (s.tokens, s.decodes, s.verify_decodes, s.accepted) == (6, 5, 2, 1)
    # 2 drafted decodes confirmed 2 own tokens + 1 accepted draft = 3 tokens: 1.50 per decode;
    # the engine's figure is 6 / 5 = 1.20 over every decode
    assert s.tokens_per_drafted_decode == 1.5 and s.tokens_per_decode == 1.2
    assert drafted_decodes_line(s) == (
        "ngram: 1.20 above is tokens / all 5 decodes (the engine's figure); the 2 decodes that "
        "carried a draft confirmed 1.50 tokens per decode (1 + accepted drafts)")


def test_the_reported_run():
    """The user's run: 40 tokens over 34 decodes, 5 verify decodes confirming 2.2 each."""
    s = dataclasses.replace(_stats(), tokens=40, decodes=34, verify_decodes=5, accepted=6,
                            drafted=15)
    assert drafted_decodes_line(s) == (
        "ngram: 1.18 above is tokens / all 34 decodes (the engine's figure); the 5 decodes that "
        "carried a draft confirmed 2.20 tokens per decode (1 + accepted drafts)")
    one = dataclasses.replace(s, verify_decodes=1, accepted=2)
    assert "the 1 decode that carried a draft confirmed 3.00 tokens per decode" in \
        drafted_decodes_line(one)


def test_no_line_where_the_engine_s_figure_is_already_per_drafted_decode():
    s = _stats()
    assert drafted_decodes_line(dataclasses.replace(s, verify_decodes=0, accepted=0)) is None
    assert drafted_decodes_line(dataclasses.replace(s, verify_decodes=5)) is None   # every decode
    assert drafted_decodes_line(dataclasses.replace(s, spec="off")) is None


@given(v=st.integers(1, 1000), extra=st.integers(1, 1000), acc_per=st.integers(0, 8))
def test_drafted_decodes_confirm_at_least_one_and_at_most_draft_max_plus_one(v, extra, acc_per):
    """1 <= tokens per drafted decode <= draft_max + 1 (docs/speculation.md's invariant, per
    drafted decode), whatever the plain decodes around them."""
    s = dataclasses.replace(_stats(), verify_decodes=v, decodes=v + extra, accepted=v * acc_per // 2,
                            draft_max=8)
    x = s.tokens_per_drafted_decode
    assert 1.0 <= x <= s.draft_max + 1 and x == (v + v * acc_per // 2) / v
