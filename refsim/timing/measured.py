"""A measured run of the engine's loop as :func:`refsim.timing.verdict.price`'s inputs (issue 29,
``refsim whatif``'s live source; issue 30, its policy replays).

A live run (:func:`refsim.session.simulate`) or a policy replay on a trace
(:func:`refsim.studies.spec_policy.policy_replay`) decodes a mix of plain decodes and drafted
ones (a verify decode carrying at least one draft token). :class:`Measured` keeps, per kind, the
decodes, their flash bytes, expert lookups and hits, and the draft tokens verified and accepted;
from them :meth:`Measured.config` gives the configuration (acceptance, coverage, drafts per
drafted decode: :meth:`refsim.timing.verdict.SpecConfig.measured`) and :meth:`Measured.reads`
the mean read of each kind, so that ``price`` mixes them back to the run's own totals:

- MiB per decode ``(1 - c) X_1 + c X_{d+1}`` = the run's decode bytes / decodes (MiB = 2^20
  bytes), and MiB/token = decode bytes / (decodes + accepted), the tokens the decodes confirmed
  (a live run's first token comes from the prefill and is not a decode's);
- hit % = decode hits / decode lookups (the reads carry lookups per decode, refsim.timing.verdict
  :class:`~refsim.timing.verdict.Reads`).

A live run's counters are its :class:`refsim.spec.StepRecord` steps (``read_bytes``,
``lookups`` and ``hits`` include the draft source's own events: the MTP head's routing); a policy
replay's are the cache's per kind (:class:`refsim.studies.spec_policy.PolicyRow`).

The MTP head's compute (refsim.timing.head) follows what a live run ran: its drafting passes
(``StepRecord.draft_passes``, summed over every decode, plain ones included: the head drafts
before a policy picks the width) reach ``price`` as :attr:`SpecConfig.draft_passes`; its
catch-up positions (``StepRecord.catchup_positions``) are ``decodes + accepted``, the run's
tokens per decode times its decodes, which ``price`` already has (:attr:`Measured.catchup_positions`
keeps the count, checked equal by the tests). A policy replay does not run the head: None, ``d``
at every decode.
"""

from __future__ import annotations

from dataclasses import dataclass

from refsim import MIB
from refsim.timing.verdict import Reads, SpecConfig


@dataclass(frozen=True)
class DecodeCounts:
    """Counters of one decode kind of a run.

    Attributes
    ----------
    decodes : int
        Target decodes of the kind.
    read_bytes : int
        Their flash bytes (misses), bytes.
    lookups, hits : int
        Their expert lookups and cache hits.
    """

    decodes: int = 0
    read_bytes: int = 0
    lookups: int = 0
    hits: int = 0

    def reads(self, width: int) -> Reads | None:
        """The mean decode of the kind as :class:`Reads` (None without a decode): MiB per decode,
        hit % (None without a lookup), lookups per decode."""
        if not self.decodes:
            return None
        return Reads(width, self.read_bytes / self.decodes / MIB,
                     100.0 * self.hits / self.lookups if self.lookups else None,
                     self.lookups / self.decodes)


@dataclass(frozen=True)
class Measured:
    """One run's decodes split into plain ones and drafted ones.

    Attributes
    ----------
    plain : DecodeCounts
        Decodes that verified no draft token (``n_draft == 0``).
    drafted : DecodeCounts
        Decodes that verified at least one (the engine's ``drafted_steps``).
    n_drafted, accepted : int
        Draft tokens verified and accepted over the drafted decodes.
    draft_passes : int or None
        The draft source's drafting passes over every decode (the MTP head's; 0 for n-gram);
        None when not counted (a policy replay).
    catchup_positions : int or None
        Positions of the draft source's catch-up decodes over the run (MTP: ``decodes +
        accepted``); None when not counted.
    """

    plain: DecodeCounts
    drafted: DecodeCounts
    n_drafted: int = 0
    accepted: int = 0
    draft_passes: int | None = None
    catchup_positions: int | None = None

    @property
    def decodes(self) -> int:
        return self.plain.decodes + self.drafted.decodes

    @property
    def read_bytes(self) -> int:
        return self.plain.read_bytes + self.drafted.read_bytes

    def config(self, kind: str, draft: int, min_match: int, source: str,
               policy: str = "fixed") -> SpecConfig:
        """The configuration with this run's acceptance, coverage and drafts per drafted decode
        (:meth:`refsim.timing.verdict.SpecConfig.measured`) and, for MTP, the head's drafting
        passes when counted."""
        return SpecConfig.measured(kind, draft, min_match, self.decodes, self.drafted.decodes,
                                   self.n_drafted, self.accepted, source, policy,
                                   draft_passes=self.draft_passes if kind == "mtp" else None)

    def reads(self, width: int, plain: Reads | None = None) -> dict:
        """``{1: Reads, width: Reads}`` of this run's plain and drafted decodes.

        A kind the run did not decode is weighted 0 by ``price`` but must be present: a run
        without plain decodes takes ``plain`` (the plain run's reads at the budget), one without
        drafted decodes its own plain reads at ``width``.

        Raises
        ------
        ValueError
            A run without any decode, or without plain decodes and no ``plain`` given.
        """
        one = self.plain.reads(1) or plain
        if one is None:
            raise ValueError("a measured run without plain decodes needs the plain run's reads")
        if width == 1:
            return {1: one}
        wide = self.drafted.reads(width) or Reads(width, one.mib_per_decode, one.hit_pct,
                                                  one.lookups_per_decode)
        return {1: one, width: wide}


def from_steps(steps) -> Measured:
    """:class:`Measured` of a live run's :class:`refsim.spec.StepRecord` steps (one per target
    decode; ``read_bytes``, ``lookups``, ``hits`` with the draft source's events included; the
    draft source's drafting passes and catch-up positions summed over every decode, None when a
    step does not carry them: a scripted record without the head's counters)."""
    plain, drafted = [0, 0, 0, 0], [0, 0, 0, 0]
    n_drafted = accepted = 0
    passes: int | None = 0
    catchup: int | None = 0
    for s in steps:
        acc = drafted if s.n_draft > 0 else plain
        acc[0] += 1
        acc[1] += int(s.read_bytes)
        acc[2] += int(s.lookups)
        acc[3] += int(s.hits)
        n_drafted += int(s.n_draft)
        accepted += int(s.n_acc)
        p, c = getattr(s, "draft_passes", None), getattr(s, "catchup_positions", None)
        passes = None if passes is None or p is None else passes + int(p)
        catchup = None if catchup is None or c is None else catchup + int(c)
    return Measured(DecodeCounts(*plain), DecodeCounts(*drafted), n_drafted, accepted, passes,
                    catchup)


def from_policy_row(row) -> Measured:
    """:class:`Measured` of a :class:`refsim.studies.spec_policy.PolicyRow` (its per-kind cache
    counters)."""
    return Measured(DecodeCounts(row.decodes - row.verify_decodes, row.plain_read_bytes,
                                 row.plain_lookups, row.plain_hits),
                    DecodeCounts(row.verify_decodes, row.verify_read_bytes, row.verify_lookups,
                                 row.verify_hits),
                    row.drafted, row.accepted)
