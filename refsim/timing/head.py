"""The MTP head's compute per draft token, from the nextn block's size on a fitted device.

How the engine runs the head (bmoe-engine.md §2, engine-docs/mtp.md "How it is wired"): per verify
decode of ``d`` drafts of which ``n_acc`` are accepted,

- **drafting**: ``d`` passes of the draft context, one position each, each with logits (the head
  proposes a token from its own row), run before the verify decode;
- **catch-up**: one pass over ``[tok, d1..d_nacc]``, ``1 + n_acc`` positions, without logits (the
  accepted prefix only: the rejected tail is never submitted).

**Which passes a run pays** (issue 29/30: the head follows what the run drafted). In refsim's loop,
as in the engine's (bmoe-engine.md §2 "Per step", steps 2 and 6; engine-docs/mtp.md "How it is
wired": "draft ``--draft`` tokens from the head, decode ..., let the draft context catch up on
that prefix"):

- the drafting passes run **before** a draft policy decides how many drafts to verify:
  refsim/spec/loop.py:419-422 asks the source for ``min(draft_max, room)`` tokens, and only then
  (loop.py:426-427) does ``--spec-policy`` (refsim/spec/policies/driver.py:43, ``choose``) cut
  the candidate to its width. :meth:`refsim.spec.mtp.MtpDraft.draft` (refsim/spec/mtp.py:257-264)
  runs one pass per proposed token, and one more that proposes nothing when ``--mtp-p-min`` stops
  it. So a policy that verifies fewer than ``d``, or none (a plain decode, coverage < 1), still
  pays every drafting pass; what makes them fewer than ``d`` is the room: a decode with
  ``room = n_predict - n_gen - 1`` below ``d`` drafts ``room`` (loop.py:422), the last decode
  (room 0) drafts nothing (loop.py:419), and ``--mtp-p-min`` > 0 stops early (the published
  cells ran at 0, full width). The engine has no draft policy (refsim's ``fixed`` is its
  behaviour: every candidate verified); its step 2 drafts and step 3 builds the batch from
  what was drafted, the order refsim's policy seam keeps.
- the catch-up runs at **every** decode, drafted or not: refsim/spec/loop.py:454 calls
  ``accept(n_acc)`` unconditionally and :meth:`refsim.spec.mtp.MtpDraft.accept`
  (refsim/spec/mtp.py:268-273) decodes ``1 + n_acc`` positions (one at a plain decode): the
  engine's step 6 is conditioned on ``mtp_on`` only, not on ``n_draft`` (bmoe-engine.md §2).
  Over a run its positions are ``decodes + accepted``, i.e. ``tokens_per_decode`` per decode.

A live run counts both (:class:`refsim.spec.StepRecord` ``draft_passes`` and
``catchup_positions``; :mod:`refsim.timing.measured` carries the drafting passes to
:class:`refsim.timing.verdict.SpecConfig` ``draft_passes``, their mean per decode ``p``). An
assumed configuration (``--spec mtp:d=D``, a published cell, a policy replay on a trace, which does
not run the head) drafts ``d`` at every decode: ``p = d``, today's formula.

So a decode costs the head ``p + 1`` passes over ``p + tokens_per_decode`` positions (``p = d``:
``d + 1`` passes over ``d + tpd`` positions). Both passes run outside
the verify decode's wall time: they are ``mtp_draft_ms``, not ``wall_ms`` (telemetry.md).

Their compute relative to one trunk position (``C``, the device's floor) comes from the tensor
table (refsim.timing.work), read two ways:

- bytes (memory-bound): a drafting pass reads the nextn block's dense tensors, ``k`` of its experts
  and the logits matrix, ``s_draft = (D_h + T_h + O_h) / (D + O + T)``; a catch-up pass reads the
  same without the logits, ``s_catch = (D_h + T_h) / (D + O + T)``;
- multiplies (compute-bound): the same ratios in weight elements (``verify_elems``).

and the catch-up's extra positions cost ``eps`` of its own share each (the per-position term,
refsim.timing.positions)::

    head_ms per decode  = C (p s_draft + s_catch (1 + eps (tpd - 1)))
    head_ms per token   = head_ms per decode / tpd

with ``p`` the drafting passes per decode (``d`` unless a run counted them).

The value uses the bytes reading, the interval spans both readings, ``eps``'s interval and ``C``'s.
The head's own flash reads (its expert misses) are already in the run's MiB/token (the engine's
``mtp:`` flash-split line); they are not a compute term.
"""

from __future__ import annotations

from refsim.errors import ConfigError
from refsim.timing.terms import Term

PUBLISHED_HEAD_S_PER_TOKEN = (0.020, 0.023)
"""The host's published head cost, s per emitted token (bmoe-engine.md §7: "The head costs
0.020-0.023 s/tok"; the prose and copy cells' effective vs reported rates, MTP draft 3)."""


def head_positions(draft: int, tokens_per_decode: float,
                   draft_passes: float | None = None) -> tuple[float, float]:
    """``(passes, positions)`` of the head per verify decode: ``p`` one-position drafting passes
    (``draft_passes``; default ``d``, every decode drafts ``d``) and one catch-up over
    ``tokens_per_decode`` (= 1 + accepted) positions: ``(p + 1, p + tokens_per_decode)``
    (module docstring).

    Raises
    ------
    ConfigError
        ``draft`` < 1, ``tokens_per_decode`` outside ``[1, draft + 1]``, or ``draft_passes``
        outside ``[0, draft]``.
    """
    if draft < 1:
        raise ConfigError(f"head: draft {draft}, expected >= 1")
    if not 1.0 <= tokens_per_decode <= draft + 1:
        raise ConfigError(f"head: tokens per decode {tokens_per_decode!r}, expected 1..{draft + 1}")
    p = draft if draft_passes is None else draft_passes
    if not 0.0 <= p <= draft:
        raise ConfigError(f"head: drafting passes per decode {draft_passes!r}, expected 0..{draft}")
    return p + 1, p + tokens_per_decode


def head_shares(work, ctx: int = 0) -> dict:
    """The drafting and catch-up passes' compute relative to one trunk position, both readings:
    ``{'draft': (bytes, elems), 'catch': (bytes, elems)}`` (module docstring).

    Raises
    ------
    ConfigError
        The model has no nextn block.
    """
    if not work.has_head:
        raise ConfigError("head: the model has no nextn (MTP) block")
    b1 = work.token_mib
    e1 = work.verify_elems(ctx)
    attn = work.head_attn_macs_per_key * ctx
    return {
        "draft": ((work.head_dense_mib + work.head_expert_mib + work.head_output_mib) / b1,
                  (work.head_dense_elems + work.head_expert_elems + work.head_output_elems + attn) / e1),
        "catch": ((work.head_dense_mib + work.head_expert_mib) / b1,
                  (work.head_dense_elems + work.head_expert_elems + attn) / e1),
    }


def head_ms_per_token(work, floor: Term, eps: Term, draft: int, tokens_per_decode: float,
                      ctx: int = 0, source: str = "", draft_passes: float | None = None) -> Term:
    """The head's compute per emitted token, ms (module docstring).

    Parameters
    ----------
    work : PositionWork
        The model's per-position figures (:func:`refsim.timing.work.position_work`).
    floor : Term
        ``C``, ms per trunk position (fitted, or calibrated on the session's off cell).
    eps : Term
        The per-position cost (refsim.timing.positions).
    draft : int
        ``d`` (``--draft``).
    tokens_per_decode : float
        ``1 + accepted`` on average.
    ctx : int, default 0
        Context length for attention's share (0: weights only).
    source : str, optional
        The term's source text (default: the shares and ``C``).
    draft_passes : float, optional
        ``p``, the mean drafting passes per decode a run counted (0..``d``; fewer than ``d`` where
        the run had no room to draft or ``--mtp-p-min`` stopped the head); default ``d``.

    Raises
    ------
    ConfigError
        No nextn block; a bad draft, tokens per decode or drafting passes.
    """
    passes, positions = head_positions(draft, tokens_per_decode, draft_passes)
    sh = head_shares(work, ctx)
    tpd = tokens_per_decode
    p = draft if draft_passes is None else draft_passes

    def per_token(c: float, s_draft: float, s_catch: float, e: float) -> float:
        return c * (p * s_draft + s_catch * (1.0 + e * (tpd - 1.0))) / tpd

    value = per_token(floor.value, sh["draft"][0], sh["catch"][0], eps.value)
    lo = per_token(floor.lo, min(sh["draft"]), min(sh["catch"]), eps.lo)
    hi = per_token(floor.hi, max(sh["draft"]), max(sh["catch"]), eps.hi)
    return Term("head_ms", value, min(lo, value), max(hi, value), "ms/token", "derived",
                source or f"nextn block vs trunk: draft pass {sh['draft'][0]:.4f} of a position "
                f"(bytes; {sh['draft'][1]:.4f} multiplies), catch-up {sh['catch'][0]:.4f}; "
                f"C {floor.value:.1f} ms",
                f"{p:g} drafting passes + 1 catch-up over {tpd:g} positions = {positions:g} head "
                f"positions per decode; interval: bytes vs multiplies, eps and C at their ends")
