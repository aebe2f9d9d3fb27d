"""The MTP head's compute follows what the run drafted (issue 29/30; refsim.timing.head).

- the loop's counters (StepRecord ``draft_passes``, ``catchup_positions``) against the run's own
  event stream and the loop's rules (drafting before the policy: ``min(draft_max, room)`` passes
  at ``--mtp-p-min 0``; a catch-up of ``1 + n_acc`` positions at every decode), with and without a
  policy, on the trained qwen35moe whose head drafts;
- a hand-worked head term for a run whose policy verified fewer than ``d``, through
  ``from_steps`` -> ``SpecConfig.measured`` -> ``price``;
- hypothesis: the head term is non-decreasing in the drafting passes and is today's formula
  (bit for bit) when every decode drafts ``d``.
"""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim import MIB
from refsim.errors import ConfigError
from refsim.events import DecodeKind
from refsim.spec.loop import StepRecord
from refsim.timing import DeviceModel, Param
from refsim.timing.head import head_ms_per_token, head_positions
from refsim.timing.measured import from_steps
from refsim.timing.terms import Term, exact
from refsim.timing.verdict import Device, Reads, SpecConfig, price
from refsim.timing.work import PositionWork

REPO = Path(__file__).resolve().parents[2]
TRAINED_MTP = REPO / "models" / "tiny-moe35-q8_0.gguf"
CODE = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return f(x) + f(x)\n\n\ndef h(x):\n    return "

WORK = PositionWork(k=2, n_expert=8, dense_mib=60.0, output_mib=20.0, expert_mib=20.0,
                    dense_elems=60.0, last_ffn_elems=6.0, expert_elems=20.0, last_expert_elems=2.0,
                    output_elems=20.0, attn_macs_per_key=0.01, head_dense_mib=5.0,
                    head_expert_mib=3.0, head_output_mib=20.0, head_dense_elems=5.0,
                    head_expert_elems=3.0, head_output_elems=20.0, head_attn_macs_per_key=0.0)
"""tests/timing/test_terms_positions.py's table: a drafting pass is 0.28 of a trunk position,
a catch-up pass 0.08 (both readings)."""

VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
          "h": 0.1, "tail": 1.0}
C100 = exact("C", 100.0, "ms", "fitted", "t")
EPS = exact("eps", 0.5, "f", "fitted", "t")


def _device() -> Device:
    dev = DeviceModel(params={k: Param(v) for k, v in VALUES.items()},
                      compute={"m": Param(100.0)}, serial_runs=2, overlap_runs=2)
    return Device(dev, "m", 4, False, Term("eps", 0.5, 0.5, 0.5, "", "assumed", "t"), work=WORK)


def _step(kind, n_draft, n_acc, passes, catchup):
    return StepRecord(kind, 0, n_draft, n_acc, 1 + n_acc, 1 + n_acc, False, 0.0, 0.0, 0.0,
                      read_bytes=MIB, lookups=10, hits=5, draft_passes=passes,
                      catchup_positions=catchup)


# --- the loop counts what the head ran ------------------------------------------------------------

def _passes_from_events(res):
    """The oracle: per target decode, the draft-context decodes between the previous decode's
    catch-up and this decode (drafting), and the positions of the one right after it (catch-up)."""
    out, drafting, seen_target = [], 0, False
    evs = [e for e in res.events if e.kind is not DecodeKind.PREFILL
           and e.kind is not DecodeKind.DRAFT_PREFILL]
    i = 0
    while i < len(evs):
        e = evs[i]
        if e.kind is DecodeKind.DRAFT:
            drafting += 1
            i += 1
            continue
        catch = evs[i + 1]                   # MTP: one catch-up event follows every target decode
        assert catch.kind is DecodeKind.DRAFT
        out.append((drafting, int(catch.positions.size)))
        drafting, seen_target = 0, True
        i += 2
    assert seen_target
    return out


@pytest.mark.skipif(not TRAINED_MTP.exists(), reason="trained tiny-moe35 not built")
@pytest.mark.parametrize("policy,p_min", [("fixed", 0.0), ("backoff:patience=1,cooldown=2", 0.0),
                                          ("cost", 0.0), ("fixed", 0.6)])
def test_the_loop_counts_the_heads_passes(policy, p_min):
    """Each step's ``draft_passes`` and ``catchup_positions`` are the head's decodes in the run's
    event stream; at ``--mtp-p-min 0`` the drafting passes are ``min(draft_max, room)`` whatever
    the policy verified (they run before it picks the width), 0 at a decode without room; the
    catch-up is ``1 + n_acc`` at every decode; the run's totals reach Measured."""
    from refsim.model import open_model
    from refsim.model.tokenizer import Tokenizer
    from refsim.spec import SpecConfig as RunSpec
    from refsim.spec import run_generation
    from refsim.spec.mtp import mtp_source_for
    model = open_model(str(TRAINED_MTP))
    prompt = Tokenizer.from_model(model).encode(CODE)
    cfg = RunSpec.from_flags(mtp=True, draft=3, spec_policy=policy, mtp_p_min=p_min)
    target, source = mtp_source_for(model, cfg)
    n_predict = 24
    res = run_generation(target, source, prompt, n_predict, draft_max=3, policy=cfg.make_policy())
    steps = res.steps
    assert [(s.draft_passes, s.catchup_positions) for s in steps] == _passes_from_events(res)
    n_gen = 0
    for s in steps:
        room = n_predict - n_gen - 1
        assert s.catchup_positions == 1 + s.n_acc
        assert s.n_draft <= s.draft_passes <= min(3, room)
        if p_min == 0.0:
            assert s.draft_passes == min(3, room)
        n_gen += s.n_emitted
    if policy.startswith("backoff"):             # the policy verified fewer than the head drafted
        assert sum(s.n_draft for s in steps) < sum(s.draft_passes for s in steps)
    m = from_steps(steps)
    assert m.draft_passes == sum(s.draft_passes for s in steps)
    assert m.catchup_positions == m.decodes + m.accepted
    c = m.config("mtp", 3, 0, "live")
    assert c.draft_passes == m.draft_passes / m.decodes
    assert c.tokens_per_decode == pytest.approx(m.catchup_positions / m.decodes, rel=1e-15)


DOC = (1, 2, 3, 4, 1, 2, 3, 9, 1, 2, 3, 4)


class _ScriptedHead:
    """A draft source that runs as the MTP head does (refsim.spec.mtp.MtpDraft at ``--mtp-p-min
    0``): ``n_max`` one-position DRAFT decodes per proposal (it proposes the document's next
    tokens), a catch-up DRAFT decode of ``1 + n_acc`` positions after every target decode."""

    name = "mtp"

    def __init__(self, n_layer, k):
        self.n_layer, self.k, self.pos = n_layer, k, 0

    def _event(self, positions):
        import numpy as np
        from refsim.events import NOT_ROUTED, DecodeEvent
        n = len(positions)
        return DecodeEvent(kind=DecodeKind.DRAFT, positions=np.asarray(positions, np.int64),
                           routes=np.full((n, self.n_layer, self.k), NOT_ROUTED, np.int16),
                           weights=np.full((n, self.n_layer, self.k), np.nan, np.float32),
                           tokens=np.zeros(n, np.int32))

    def begin(self, prompt):
        self.pos = len(prompt)
        return ()

    def draft(self, ctx, last, n_past, n_max):
        import numpy as np
        from refsim.spec.draft import Draft
        toks = np.asarray(DOC[n_past + 1:n_past + 1 + n_max], np.int32)
        return Draft(toks, tuple(self._event([n_past + i]) for i in range(n_max)))

    def accept(self, n_acc):
        ev = self._event(range(self.pos, self.pos + 1 + n_acc))
        self.pos += 1 + n_acc
        return (ev,)


def test_hand_counted_run_with_a_scripted_head_and_policy():
    """prompt 1 2 3 4 1 2, the target recites DOC, draft 3, n_predict 6; a scripted policy
    verifies 0, 2, 0 tokens of the head's candidates (the head proposes the document: every
    verified draft is accepted).

    step 1: room 5 -> the head drafts 3 passes; the policy verifies 0: plain [3] @6; catch-up
            [3] (1 position)
    step 2: room 4 -> 3 passes; verify [9 1 2] @7..9, 2 accepted; catch-up 3 positions
    step 3: room 1 -> 1 pass; the policy verifies 0: plain [3] @10; catch-up 1
    step 4: room 0 -> no drafting; plain [4] @11; catch-up 1.

    Drafting passes 3, 3, 1, 0 = 7 (the policy verified 2); catch-up 1, 3, 1, 1 = 6 = 4 decodes
    + 2 accepted."""
    from refsim.spec import run_generation
    from refsim.spec.policies.base import DraftPolicy
    from refsim.testing import DocumentScript, ScriptedTarget

    class Scripted(DraftPolicy):
        name = "scripted"

        def __init__(self, widths):
            super().__init__()
            self.widths = list(widths)

        @property
        def wants_view(self):
            return False

        def width(self, view):
            return min(self.widths.pop(0), view.candidate.size)

    target = ScriptedTarget(DocumentScript(DOC, eos=0), eos_ids=(0,))
    res = run_generation(target, _ScriptedHead(target.n_layer, target.n_expert_used), DOC[:6], 6,
                         draft_max=3, policy=Scripted([0, 2, 0]))
    assert res.tokens.tolist() == list(DOC[6:12])
    got = [(s.n_past, s.n_draft, s.n_acc, s.draft_passes, s.catchup_positions) for s in res.steps]
    assert got == [(6, 0, 0, 3, 1), (7, 2, 2, 3, 3), (10, 0, 0, 1, 1), (11, 0, 0, 0, 1)]
    assert [(s.draft_passes, s.catchup_positions) for s in res.steps] == _passes_from_events(res)
    m = from_steps(res.steps)
    assert (m.decodes, m.n_drafted, m.accepted, m.draft_passes, m.catchup_positions) == (4, 2, 2, 7, 6)
    assert m.config("mtp", 3, 0, "x").draft_passes == 7 / 4


def test_ngram_runs_count_no_head():
    """The n-gram source runs no draft-context decode: 0 passes and 0 catch-up positions at every
    step, and its measured configuration carries no drafting passes."""
    from refsim.spec import NgramDraft, run_generation
    from refsim.testing import DocumentScript, ScriptedTarget
    target = ScriptedTarget(DocumentScript(DOC, eos=0), eos_ids=(0,))
    res = run_generation(target, NgramDraft(min_match=2), DOC[:6], 6, draft_max=3)
    assert any(s.n_draft for s in res.steps)
    assert all((s.draft_passes, s.catchup_positions) == (0, 0) for s in res.steps)
    m = from_steps(res.steps)
    assert (m.draft_passes, m.catchup_positions) == (0, 0)
    assert m.config("ngram", 3, 2, "x").draft_passes is None


# --- hand-worked ------------------------------------------------------------------------------------

def test_head_hand_worked_where_the_policy_verified_fewer():
    """Four decodes at d = 3 under a policy: the head drafted 3, 3, 3 and 0 (the last decode had
    no room), the policy verified 0, 3, 2 and 0 drafts, of which 0, 2, 1, 0 were accepted.

    p = 9 / 4 = 2.25 passes per decode; catch-up 1 + n_acc = 1, 3, 2, 1 = 7 positions = decodes +
    accepted; tokens per decode 7 / 4 = 1.75 (coverage 1/2, 2.5 drafts per drafted decode,
    acceptance 3/5: 1 + 0.5 x 2.5 x 0.6). With C = 100 ms, eps = 0.5, a drafting pass 0.28 and a
    catch-up 0.08 of a position:

        per decode  100 (2.25 x 0.28 + 0.08 (1 + 0.5 x 0.75)) = 100 (0.63 + 0.11) = 74 ms
        per token   74 / 1.75 = 42.857142... ms

    where charging d = 3 passes at every decode gives 100 (0.84 + 0.11) / 1.75 = 54.285714... ms."""
    steps = [_step(DecodeKind.PLAIN, 0, 0, 3, 1), _step(DecodeKind.VERIFY, 3, 2, 3, 3),
             _step(DecodeKind.VERIFY, 2, 1, 3, 2), _step(DecodeKind.PLAIN, 0, 0, 0, 1)]
    m = from_steps(steps)
    assert (m.draft_passes, m.catchup_positions, m.decodes, m.accepted) == (9, 7, 4, 3)
    cfg = m.config("mtp", 3, 0, "measured: live run", "backoff")
    assert (cfg.coverage, cfg.mean_drafts, cfg.acceptance, cfg.draft_passes) == (0.5, 2.5, 0.6, 2.25)
    assert cfg.tokens_per_decode == pytest.approx(1.75, rel=1e-15)
    assert head_positions(3, 1.75, 2.25) == (3.25, 4.0)
    h = head_ms_per_token(WORK, C100, EPS, 3, 1.75, draft_passes=2.25)
    assert (h.lo, h.value, h.hi) == pytest.approx((74 / 1.75,) * 3, rel=1e-13)
    p = price(_device(), cfg, m.reads(4))
    assert p.term("head").value == pytest.approx(74 / 1.75, rel=1e-13)
    today = price(_device(), SpecConfig("mtp", 3, acceptance=0.6, coverage=0.5, mean_drafts=2.5,
                                        policy="backoff"), m.reads(4))
    assert today.term("head").value == pytest.approx(95 / 1.75, rel=1e-13)
    # only the head moved: every in-decode term is the same
    for a, b in zip(p.terms, today.terms):
        if a.name != "head":
            assert a.value == b.value, a.name
    assert p.ms_per_token == pytest.approx(today.ms_per_token - (95 - 74) / 1.75, rel=1e-13)


def test_refusals():
    with pytest.raises(ConfigError, match="drafting passes per decode 3.5"):
        head_positions(3, 2.0, 3.5)
    with pytest.raises(ConfigError, match="drafting passes per decode"):
        SpecConfig("mtp", 3, acceptance=0.5, draft_passes=-0.5)
    with pytest.raises(ConfigError, match="MTP only"):
        SpecConfig("ngram", 3, 3, acceptance=0.5, coverage=1.0, draft_passes=1.0)
    with pytest.raises(ConfigError, match="13 drafting passes over 4 decodes"):
        SpecConfig.measured("mtp", 3, 0, 4, 2, 5, 3, "run", draft_passes=13)
    with pytest.raises(ConfigError, match="4 drafting passes"):     # 5 drafts verified
        SpecConfig.measured("mtp", 3, 0, 4, 2, 5, 3, "run", draft_passes=4)
    assert SpecConfig.measured("mtp", 3, 0, 4, 2, 5, 3, "run", draft_passes=5).draft_passes == 1.25
    with pytest.raises(ConfigError, match="the MTP head's; ngram has none"):
        SpecConfig.measured("ngram", 3, 3, 4, 2, 5, 3, "run", draft_passes=5)


# --- properties -------------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0),
       st.floats(0.0, 2.0), st.floats(1.0, 500.0))
def test_head_is_non_decreasing_in_the_drafting_passes(d, u, v, t, e, c):
    """For passes p1 <= p2 in [0, d] the head term (value and both ends) does not fall; at
    p = d it is today's formula, bit for bit."""
    tpd = 1.0 + t * d
    p1, p2 = sorted((u * d, v * d))
    floor = Term("C", c, 0.8 * c, 1.2 * c, "ms", "fitted", "t")
    eps = Term("eps", e, 0.0, e + 0.5, "f", "fitted", "t")
    a = head_ms_per_token(WORK, floor, eps, d, tpd, draft_passes=p1)
    b = head_ms_per_token(WORK, floor, eps, d, tpd, draft_passes=p2)
    assert a.value <= b.value and a.lo <= b.lo and a.hi <= b.hi
    full = head_ms_per_token(WORK, floor, eps, d, tpd, draft_passes=float(d))
    old = head_ms_per_token(WORK, floor, eps, d, tpd)
    assert (full.value, full.lo, full.hi) == (old.value, old.lo, old.hi)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 8), st.integers(1, 40), st.data())
def test_a_run_that_drafts_d_everywhere_prices_as_today(d, decodes, data):
    """Counters of a run whose head drafted d at every decode (d x decodes passes) price exactly
    as the configuration without counted passes (the assumed formula); fewer passes never cost
    more."""
    drafted_steps = data.draw(st.integers(0, decodes))
    drafted = data.draw(st.integers(drafted_steps, drafted_steps * d))
    accepted = data.draw(st.integers(0, drafted))
    args = ("mtp", d, 0, decodes, drafted_steps, drafted, accepted, "x")
    reads = {1: Reads(1, 2.0), d + 1: Reads(d + 1, 5.0)}
    dv = _device()
    assume_cfg = SpecConfig.measured(*args)
    full = SpecConfig.measured(*args, draft_passes=d * decodes)
    assert full.draft_passes == d
    if drafted == 0:
        assume_cfg = SpecConfig("mtp", d, acceptance=0.0, coverage=0.0)
        full = SpecConfig("mtp", d, acceptance=0.0, coverage=0.0, draft_passes=float(d))
    a, b = price(dv, assume_cfg, reads), price(dv, full, reads)
    assert a.row() == b.row()
    fewer = SpecConfig.measured(*args, draft_passes=data.draw(st.integers(drafted, d * decodes)))
    if drafted:
        assert price(dv, fewer, reads).term("head").value <= a.term("head").value
