"""Speculation settings and the engine's load-time rejections, in one frozen dataclass.

Sources: bmoe-engine.md §1 (Parameters) and §2 ("Open-time setup and load-time rejections";
the engine's core/src/config.cpp validate and cli/main.cpp). Every rejection raises
:class:`refsim.errors.UsageError` (a ConfigError) naming the flag and the accepted values: the
command line alone decides them, so the CLI exits 2, as the engine's CLI does for ``--ngram``
together with ``--mtp`` (docs/cli.md, "Conventions"). Value messages have the CLI's one form,
``argument --draft: expected an integer in 1..8, got '0'``.
"""

from __future__ import annotations

from dataclasses import dataclass

from refsim.errors import UsageError, value_message
from refsim.spec.constants import (DRAFT_MAX_DEFAULT, DRAFT_MAX_LIMIT, NGRAM_MATCH_LIMIT,
                                   NGRAM_MAX_MATCH, NGRAM_MIN_MATCH_DEFAULT, SPEC_MTP,
                                   SPEC_NGRAM, SPEC_OFF)


@dataclass(frozen=True)
class SpecConfig:
    """Which draft source runs and with what width (validated on construction).

    Parameters
    ----------
    spec : {'off', 'ngram', 'mtp'}
        Draft source (the metrics preamble's ``spec=``).
    draft_max : int, default 3
        ``--draft N``: draft tokens asked per step, 1..8.
    ngram_min_match : int, default 3
        ``--ngram-min-match N``: 1..``ngram_max_match``.
    ngram_max_match : int, default 12
        ``ngram_max_match`` (no engine flag): 1..64.
    mtp_p_min : float, default 0.0
        ``--mtp-p-min F``: in [0, 1] with mtp; must be 0 with ngram.
    temp : float, default 0.0
        Sampling temperature; speculation requires greedy (0).
    policy : str, default 'fixed'
        ``--spec-policy NAME[:key=value,...]``: the draft policy
        (:mod:`refsim.spec.policies`); checked by :func:`refsim.spec.policies.parse_spec_policy`.

    Raises
    ------
    UsageError
        For any value or combination the engine rejects at load (a ConfigError).
    """

    spec: str = SPEC_OFF
    draft_max: int = DRAFT_MAX_DEFAULT
    ngram_min_match: int = NGRAM_MIN_MATCH_DEFAULT
    ngram_max_match: int = NGRAM_MAX_MATCH
    mtp_p_min: float = 0.0
    temp: float = 0.0
    policy: str = "fixed"

    def __post_init__(self) -> None:
        if self.spec not in (SPEC_OFF, SPEC_NGRAM, SPEC_MTP):
            raise UsageError(f"spec: expected one of off, ngram, mtp, got {self.spec!r}")
        if not 1 <= self.draft_max <= DRAFT_MAX_LIMIT:
            raise UsageError(value_message("--draft", f"an integer in 1..{DRAFT_MAX_LIMIT}",
                                           self.draft_max))
        if not 1 <= self.ngram_max_match <= NGRAM_MATCH_LIMIT:
            raise UsageError(value_message("--max-match", f"an integer in 1..{NGRAM_MATCH_LIMIT}",
                                           self.ngram_max_match))
        if not 1 <= self.ngram_min_match <= self.ngram_max_match:
            raise UsageError(value_message("--ngram-min-match",
                                           f"an integer in 1..{self.ngram_max_match}",
                                           self.ngram_min_match))
        if self.spec == SPEC_MTP and not 0.0 <= self.mtp_p_min <= 1.0:
            raise UsageError(value_message("--mtp-p-min", "a probability in [0, 1]",
                                           self.mtp_p_min))
        if self.spec == SPEC_NGRAM and self.mtp_p_min != 0.0:
            raise UsageError(f"--mtp-p-min {self.mtp_p_min}: an MTP-only knob; with --ngram "
                              f"it must be 0")
        self.make_policy()                     # refuses an unknown name, key or value
        if self.spec != SPEC_OFF and self.temp > 0.0:
            raise UsageError(f"--temp {self.temp}: speculation requires greedy sampling "
                              f"(temp 0)")

    @property
    def enabled(self) -> bool:
        """True when a draft source is configured (the engine's ``spec_on``)."""
        return self.spec != SPEC_OFF

    def make_policy(self):
        """A fresh :class:`refsim.spec.policies.DraftPolicy` for one generation, or None for the
        default ``fixed`` (the loop then runs today's path unchanged, which ``fixed`` equals).

        Raises
        ------
        UsageError
            The messages of :func:`refsim.spec.policies.parse_spec_policy`.
        """
        from refsim.spec.policies import parse_spec_policy
        pol = parse_spec_policy(self.policy)
        return None if pol.name == "fixed" else pol

    @property
    def preamble_draft_max(self) -> int:
        """``spec_draft_max=`` of the metrics preamble: 0 when speculation is off."""
        return self.draft_max if self.enabled else 0

    @classmethod
    def from_flags(cls, *, ngram: bool = False, mtp: bool = False,
                   draft: int | None = None, ngram_min_match: int | None = None,
                   mtp_p_min: float | None = None, temp: float = 0.0,
                   spec_policy: str | None = None) -> "SpecConfig":
        """Build from the engine's flags (``--ngram``, ``--mtp``, ``--draft``, ...).

        ``None`` means the flag was not given (its default applies: ``--draft 3``,
        ``--ngram-min-match 3``, ``--mtp-p-min 0``).

        Raises
        ------
        UsageError
            ``--ngram`` with ``--mtp`` ("two draft sources for the same verify loop"); a
            speculation knob given without a draft source (``--draft`` or
            ``--ngram-min-match`` or ``--spec-policy`` without ``--ngram``/``--mtp``, ``--mtp-p-min`` without
            ``--mtp``: the run would silently decode without speculating, a number the user
            did not ask for); and every rejection of the constructor.
        """
        if ngram and mtp:
            raise UsageError("--ngram with --mtp: two draft sources for the same verify "
                              "loop; choose one")
        if not (ngram or mtp):
            given = [f for f, v in (("--draft", draft), ("--ngram-min-match", ngram_min_match),
                                    ("--mtp-p-min", mtp_p_min), ("--spec-policy", spec_policy))
                     if v is not None]
            if given:
                raise UsageError(f"{', '.join(given)} without a draft source: add --ngram or "
                                  f"--mtp (without one the run does not speculate)")
        spec = SPEC_NGRAM if ngram else SPEC_MTP if mtp else SPEC_OFF
        return cls(spec=spec,
                   draft_max=DRAFT_MAX_DEFAULT if draft is None else draft,
                   ngram_min_match=(NGRAM_MIN_MATCH_DEFAULT if ngram_min_match is None
                                    else ngram_min_match),
                   mtp_p_min=0.0 if mtp_p_min is None else mtp_p_min, temp=temp,
                   policy="fixed" if spec_policy is None else spec_policy)

    @classmethod
    def from_args(cls, args) -> "SpecConfig":
        """Build from an ``argparse.Namespace`` filled by ``refsim.cli.common.add_spec_args``."""
        return cls.from_flags(ngram=args.ngram, mtp=args.mtp, draft=args.draft,
                              ngram_min_match=args.ngram_min_match, mtp_p_min=args.mtp_p_min,
                              temp=getattr(args, "temp", 0.0) or 0.0,
                              spec_policy=getattr(args, "spec_policy", None))
