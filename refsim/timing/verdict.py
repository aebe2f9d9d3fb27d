"""The price of one speculation configuration on one device, and its verdict against ``off``
(issue 29: the one pricing path of ``refsim whatif``).

Named *verdict* because that is what it returns: every time term of a configuration, its effective
tok/s with a band, the change against ``off`` with a band, **gains / within noise / loses**, and the
acceptance at which it would break even. Its point sum, :func:`point_terms`, is what every
other ``--device`` output prices with (``timing breakeven``, ``union``, ``run``: whatif.py's
point what-ifs; issue 29 item 1); one decode's terms are :func:`refsim.timing.decode.decode_terms`.

A configuration (:class:`SpecConfig`) is ``off``, ``ngram:d=D:m=M`` or ``mtp:d=D``, with an
acceptance ``alpha`` (accepted / drafted) and, for n-gram, a coverage ``c`` (the fraction of
decodes that carry drafts; the engine's ``drafted_steps / decodes``). MTP drafts every decode
(``--mtp-p-min 0``, the published cells: bmoe-engine.md §2), so ``c = 1`` there unless a run or
replay measured it (:meth:`SpecConfig.measured`). Per decode:

- positions ``w = 1 + c d`` (the compute is paid per *position*, rejected drafts included);
- tokens ``tpd = 1 + c d alpha``;

with ``d`` the drafts per drafted decode (``--draft``, or the measured mean: an n-gram match may
propose fewer).

Reads come from a union replay (refsim.studies.union) at the cache budget: ``X_1`` and ``X_{d+1}``,
the mean MiB one decode of that width reads (:class:`Reads`). A drafted decode and a plain one are
priced each at its own read (the stall's hinge is applied to each width's mean decode, as
breakeven.py does) and mixed by the coverage. Per emitted token, ms (device rules: refsim.timing.model,
docs/timing.md; ``tail`` multiplies every in-decode term)::

    compute           tail C                           x (1 - c + c)      / tpd
    extra positions   tail C eps (w_j - 1)             per decode kind j  / tpd
    bookkeeping       tail cache (m0 + m1 X_j)
    contention        tail overlap kappa X_j
    flash             tail (i0 + X_j (a + b/L))        serial only
    stall             tail max(0, s0 + s1 X_j - h C)   --overlap only
    head              C (p s_draft + s_catch (1 + eps (tpd - 1))) / tpd     MTP only (refsim.timing.head)
    memory            memory_term(...)                  (see :func:`memory_term`)

with ``p`` the head's drafting passes per decode: ``d`` (every decode drafts ``d``) unless a live
run counted them (:attr:`SpecConfig.draft_passes`; they run before a policy picks the width).
The in-decode terms sum to ``c t(d+1) + (1 - c) t(1)`` with ``t`` = :func:`refsim.timing.breakeven.decode_ms`
(tested to the last bit); the head runs outside the verify decode's wall time, so it enters the
*effective* rate only (the engine's ``mtp_draft_s/tok``, docs/telemetry.md). effective tok/s =
``1000 / sum``.

The band (refsim.timing.band): the bootstrap replicates of the device, ``eps`` swept over its
interval, run-to-run noise; the memory term's interval is carried by taking the hull of the bands
at its ends and its value. **gains** when the change's band is above 0, **loses** when below,
otherwise **within noise**. Break-even: the acceptance where the point change is 0 (bisection; the
change is increasing in the acceptance: the reads do not depend on it and the head's catch-up
grows more slowly than the tokens).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

import numpy as np

from refsim.errors import ConfigError, UsageError
from refsim.spec.constants import DRAFT_MAX_LIMIT, NGRAM_MAX_MATCH
from refsim.timing.band import DEFAULT_LEVEL, Band, delta_band, tok_s_band
from refsim.timing.decode import TERMS, decode_terms_at, decode_terms_fixed, extra_positions_ms
from refsim.timing.head import head_ms_per_token
from refsim.timing.model import DeviceModel
from refsim.timing.terms import Term, exact

KINDS = ("off", "ngram", "mtp")
"""Configuration kinds (the engine's ``--ngram`` and ``--mtp``)."""

VERDICTS = ("gains", "within noise", "loses")

OFF_POLICY = "none"
"""The ``policy`` of an ``off`` row: it drafts nothing, so no draft policy acts (every row has a
policy field, docs/timing.md "The draft policy")."""

STORM_OFF_TOK_S = 4.43
STORM_SPEC_TOK_S = 3.14
"""The largest loss a major-fault storm is measured to cost: the phone's copy prompt, thermally
gated n-gram table (bmoe-engine.md §7), ``off`` 4.43 tok/s at 126 majflt/token against ``--ngram``
3.14 tok/s at 1427 majflt/token, 127.0 vs 145.1 MiB/token. Charging the whole loss to the faults
bounds the fault cost from above: ``4.43 / 3.14 - 1`` = 41.1 % of the plain s/token."""
STORM_SHARE = STORM_OFF_TOK_S / STORM_SPEC_TOK_S - 1.0


@dataclass(frozen=True)
class SpecConfig:
    """One configuration.

    Attributes
    ----------
    kind : str
        ``off``, ``ngram`` or ``mtp``.
    draft : int
        ``d`` (``--draft``); 0 for ``off``.
    min_match : int
        ``m`` (``--ngram-min-match``); 0 unless n-gram.
    acceptance : float or None
        Accepted / drafted, 0..1 (None: not known yet, required to price unless the coverage is
        0; a measured configuration that drafted nothing has none).
    coverage : float or None
        Drafted decodes / decodes, 0..1 (n-gram; MTP is 1, ``off`` 0).
    source : str
        Where acceptance and coverage came from: ``assumed`` (given by the user), or the token
        file / run that measured them.
    mean_drafts : float or None
        Drafts per drafted decode when measured (``drafted / drafted_steps``: an n-gram match
        may propose fewer than ``d``, and the last decodes are cut at ``-n``); None: ``d``. The
        reads stay those of a ``d + 1`` wide replay (an upper bound when it is below ``d``).
    policy : str
        The draft policy (``--spec-policy``, refsim.spec.policies) the figures were measured
        under; ``fixed`` (today's engine: every candidate verified) unless a live run or a policy
        replay measured another. Reported only: the policy acts through the measured coverage,
        drafts per decode and acceptance.
    draft_passes : float or None
        MTP only: the head's drafting passes per decode a live run counted (its
        :class:`refsim.spec.StepRecord` ``draft_passes`` / decodes, 0..``d``). The passes run
        before a policy picks the width, so they are not the verified drafts: fewer than ``d``
        only where the run had no room to draft or ``--mtp-p-min`` stopped the head
        (refsim.timing.head). None: ``d`` at every decode (an assumed configuration, a published
        cell, a policy replay).

    An MTP configuration drafts every decode (``c = 1``) unless a measurement gives its
    coverage (:meth:`measured`: a live run's last decode has no room to draft; a policy may
    verify none of the head's tokens).
    """

    kind: str
    draft: int = 0
    min_match: int = 0
    acceptance: float | None = None
    coverage: float | None = None
    source: str = "assumed"
    mean_drafts: float | None = None
    policy: str = "fixed"
    draft_passes: float | None = None

    @classmethod
    def measured(cls, kind: str, draft: int, min_match: int, decodes: int, drafted_steps: int,
                 drafted: int, accepted: int, source: str, policy: str = "fixed",
                 draft_passes: int | None = None) -> "SpecConfig":
        """A configuration from the counters of a run or replay of the engine's loop.

        acceptance ``accepted / drafted`` (None when nothing was drafted: a ratio over zero
        events is undefined, docs/cli.md "Numbers"), coverage ``drafted_steps
        / decodes`` (the engine's ``drafted_steps``: decodes that verified at least one draft),
        drafts per drafted decode ``drafted / drafted_steps`` (None when none drafted). ``off``
        keeps no counters. ``draft_passes`` (MTP, a live run): the head's drafting passes over
        the run, kept per decode (:attr:`draft_passes`); None: ``d`` at every decode.

        Raises
        ------
        ConfigError
            Counters that cannot come from one run (negative, more accepted than drafted, more
            drafted steps than decodes; fewer drafting passes than drafts verified, more than
            ``d`` per decode, or drafting passes for a kind without a head).
        """
        if kind == "off":
            return cls("off", source=source)
        if not (0 <= accepted <= drafted and 0 <= drafted_steps <= decodes
                and drafted_steps <= drafted and (drafted == 0) == (drafted_steps == 0)):
            raise ConfigError(f"{source}: counters decodes {decodes}, drafted steps "
                              f"{drafted_steps}, drafted {drafted}, accepted {accepted} are not "
                              f"one run's")
        if draft_passes is not None and kind != "mtp":
            raise ConfigError(f"{source}: drafting passes are the MTP head's; {kind} has none")
        if draft_passes is not None and not drafted <= draft_passes <= draft * decodes:
            raise ConfigError(f"{source}: {draft_passes} drafting passes over {decodes} decodes "
                              f"of {kind}:d={draft} ({drafted} drafts verified) are not one "
                              f"run's (expected {drafted}..{draft * decodes})")
        return cls(kind, draft, min_match if kind == "ngram" else 0,
                   acceptance=accepted / drafted if drafted else None,
                   coverage=drafted_steps / decodes if decodes else 0.0, source=source,
                   mean_drafts=drafted / drafted_steps if drafted_steps else None, policy=policy,
                   draft_passes=(None if draft_passes is None
                                 else draft_passes / decodes if decodes else 0.0))

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"--spec: kind {self.kind!r}, expected one of {', '.join(KINDS)}")
        if self.kind == "off" and (self.draft or self.min_match):
            raise ConfigError("--spec: off takes no d or m")
        if self.kind != "off" and self.draft < 1:
            raise ConfigError(f"--spec {self.kind}: d={self.draft}, expected >= 1")
        if self.kind == "mtp" and self.min_match:
            raise ConfigError("--spec mtp: m is an n-gram option")
        for what in ("acceptance", "coverage"):
            v = getattr(self, what)
            if v is not None and not (0.0 <= v <= 1.0):
                raise ConfigError(f"--spec {self.label}: {what} {v!r}, expected 0..1")
        if self.mean_drafts is not None and not 0.0 <= self.mean_drafts <= self.draft:
            raise ConfigError(f"--spec {self.label}: mean drafts {self.mean_drafts!r}, expected "
                              f"0..{self.draft}")
        if self.draft_passes is not None and (self.kind != "mtp"
                                              or not 0.0 <= self.draft_passes <= self.draft):
            raise ConfigError(f"--spec {self.label}: drafting passes per decode "
                              f"{self.draft_passes!r}, expected 0..{self.draft} (MTP only)")

    @property
    def drafts(self) -> float:
        """Drafts per drafted decode: :attr:`mean_drafts`, or ``d``."""
        return float(self.draft) if self.mean_drafts is None else self.mean_drafts

    @property
    def label(self) -> str:
        if self.kind == "off":
            return "off"
        if self.kind == "ngram":
            return f"ngram:d={self.draft}:m={self.min_match}"
        return f"mtp:d={self.draft}"

    @property
    def width(self) -> int:
        """Positions of a drafted decode, ``d + 1`` (1 for ``off``)."""
        return self.draft + 1

    @property
    def drafted_fraction(self) -> float:
        """``c``: 0 for off, 1 for MTP, the coverage for n-gram."""
        if self.kind == "off":
            return 0.0
        if self.kind == "mtp":
            return 1.0 if self.coverage is None else self.coverage
        if self.coverage is None:
            raise ConfigError(f"--spec {self.label}: no coverage (give coverage=, or --tokens)")
        return self.coverage

    def _alpha(self) -> float:
        if self.kind == "off":
            return 0.0
        if self.acceptance is None:
            raise ConfigError(f"--spec {self.label}: no acceptance (give acceptance=, or --tokens)")
        return self.acceptance

    @property
    def positions_per_decode(self) -> float:
        """``1 + c d`` (``d``: :attr:`drafts`)."""
        return 1.0 + self.drafted_fraction * self.drafts

    def missing(self) -> tuple:
        """The numbers :attr:`tokens_per_decode` needs that the item does not give, in ``--spec``'s
        order: ``acceptance`` (unless the coverage is 0: nothing drafted), ``coverage`` (an
        n-gram item's; MTP drafts every decode unless a run measured it)."""
        out = []
        if self.kind != "off" and self.acceptance is None and self.coverage != 0.0:
            out.append("acceptance")
        if self.kind == "ngram" and self.coverage is None:
            out.append("coverage")
        return tuple(out)

    @property
    def tokens_per_decode(self) -> float:
        """``1 + c d alpha`` (``d``: :attr:`drafts`); 1 when ``c`` is 0, whatever alpha (a
        configuration that drafted nothing has no acceptance).

        Raises
        ------
        ConfigError
            A number it needs is not given (:meth:`missing`), every one named in one line:
            ``--spec ngram:d=3:m=3: no acceptance, no coverage (give acceptance= and coverage=,
            or --tokens)``.
        """
        miss = self.missing()
        if miss:
            raise ConfigError(f"--spec {self.label}: {', '.join('no ' + m for m in miss)} (give "
                              f"{' and '.join(m + '=' for m in miss)}, or --tokens)")
        c = self.drafted_fraction
        if c == 0.0:
            return 1.0
        return 1.0 + c * self.drafts * self._alpha()


_ITEM = re.compile(r"^(off|ngram|mtp)((?::[a-z_]+=[^:,]+)*)$")
_INTEGER = re.compile(r"0|[1-9][0-9]*")
"""``d=``/``m=``: plain decimal digits, no sign, space, ``_`` or leading zero (``int()`` takes
``+3``, ``03``, `` 3`` and ``1_0``; the engine's flags are written ``--draft 3``)."""
_REAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
"""``acceptance=``/``coverage=``: a decimal number (``0.442``, ``.5``, ``1``, ``5e-1``): what
``float()`` took before, less ``nan``, ``inf``, spaces, ``_`` and non-ASCII digits."""


def _spec_number(item: str, key: str, text: str):
    """The value ``text`` of key ``key`` of ``--spec`` item ``item``: an int for ``d``/``m``
    (:data:`_INTEGER`), a float for ``acceptance``/``coverage`` (:data:`_REAL`).

    Raises
    ------
    UsageError
        ``--spec 'ngram:d=+3:m=3': d=+3, expected plain decimal digits (d and m are integers: no
        sign, space, _ or leading zero)``; ``--spec 'mtp:d=3:acceptance=nan': acceptance nan,
        expected a number in 0..1 written in decimal (such as 0.442: no nan, inf, space or _)``
        (the range check's form).
    """
    if key in ("d", "m"):
        if not _INTEGER.fullmatch(text):
            raise UsageError(f"--spec {item!r}: {key}={text}, expected plain decimal digits (d and m "
                             f"are integers: no sign, space, _ or leading zero)")
        return int(text)
    if not _REAL.fullmatch(text):
        raise UsageError(f"--spec {item!r}: {key} {text}, expected a number in 0..1 written in "
                         f"decimal (such as 0.442: no nan, inf, space or _)")
    return float(text) + 0.0            # -0 is 0 (+ 0.0 turns IEEE -0.0 into 0.0)


def parse_spec_list(text: str) -> list[SpecConfig]:
    """``off,ngram:d=3:m=3:acceptance=0.442:coverage=0.150,mtp:d=3:acceptance=0.824``.

    ``off`` is always priced (it is the baseline) and is added first when not listed. Keys:
    ``d`` (draft; an integer in 1..8, ``refsim run --draft``'s range,
    :data:`refsim.spec.constants.DRAFT_MAX_LIMIT`), ``m`` (n-gram min match; 1..12, ``--ngram-min-
    match``'s, :data:`refsim.spec.constants.NGRAM_MAX_MATCH`), ``acceptance`` and ``coverage``
    (numbers in [0, 1]). ``d`` and ``m`` are plain decimal digits without a leading zero;
    ``acceptance`` and ``coverage`` decimal numbers, never ``nan``, ``inf`` or with ``_`` or
    spaces (:func:`_spec_number`).

    Raises
    ------
    UsageError
        One line naming the item and what was expected (the command line alone is wrong: the CLI
        exits 2, docs/cli.md "Conventions"): an item of another form (empty included), an
        unknown or repeated key, a missing ``d=`` or ``m=``, a value not written as its key's
        (:func:`_spec_number`), a value outside its range, an item listed twice.
    """
    out = []
    for item in (s.strip() for s in text.split(",")):
        mt = _ITEM.match(item)
        if not mt:
            raise UsageError(f"--spec {item!r}: expected off, ngram:d=D:m=M[:acceptance=A:"
                             f"coverage=C] or mtp:d=D[:acceptance=A]")
        kind, kv = mt.group(1), {}
        for pair in filter(None, mt.group(2).split(":")):
            k, v = pair.split("=", 1)
            if k in kv:
                raise UsageError(f"--spec {item!r}: {k} given twice")
            kv[k] = v
        allowed = {"off": set(), "ngram": {"d", "m", "acceptance", "coverage"},
                   "mtp": {"d", "acceptance"}}[kind]
        if set(kv) - allowed:
            raise UsageError(f"--spec {item!r}: unknown key(s) {', '.join(sorted(set(kv) - allowed))}"
                             f" (expected {', '.join(sorted(allowed)) or 'none'})")
        num = {k: _spec_number(item, k, v) for k, v in kv.items()}
        d, m = num.get("d", 0), num.get("m", 0)
        a, c = num.get("acceptance"), num.get("coverage")
        if kind != "off" and "d" not in kv:
            raise UsageError(f"--spec {item!r}: d= is required")
        if kind == "ngram" and "m" not in kv:
            raise UsageError(f"--spec {item!r}: m= is required")
        if kind != "off" and not 1 <= d <= DRAFT_MAX_LIMIT:
            raise UsageError(f"--spec {item!r}: d={kv['d']}, expected an integer >= 1 and at most "
                             f"{DRAFT_MAX_LIMIT} (refsim run --draft's 1..{DRAFT_MAX_LIMIT})")
        if kind == "ngram" and not 1 <= m <= NGRAM_MAX_MATCH:
            raise UsageError(f"--spec {item!r}: m={kv['m']}, expected an integer >= 1 and at most "
                             f"{NGRAM_MAX_MATCH} (refsim run --ngram-min-match's "
                             f"1..{NGRAM_MAX_MATCH})")
        for what, v in (("acceptance", a), ("coverage", c)):
            if v is not None and not 0.0 <= v <= 1.0:
                raise UsageError(f"--spec {item!r}: {what} {kv[what]}, expected a number in 0..1")
        out.append(SpecConfig(kind, d, m, a, c))
    labels = [c.label for c in out]
    if len(set(labels)) != len(labels):
        raise UsageError(f"--spec: a configuration is listed twice ({', '.join(labels)})")
    if "off" not in labels:
        out.insert(0, SpecConfig("off"))
    return out


@dataclass(frozen=True)
class Reads:
    """One decode width's replay at a budget: mean flash MiB per decode, decode-only hit %.

    ``lookups_per_decode`` (mean expert lookups of one such decode), when known, weights the hit
    % of a mix of widths by lookups, so a measured mix reports its own ``hits / lookups``
    (:mod:`refsim.timing.measured`); without it the mix is weighted by decodes.
    """

    width: int
    mib_per_decode: float
    hit_pct: float | None = None
    lookups_per_decode: float | None = None


def reads_from_union(rows, knobs: bool = False) -> dict:
    """``{width: Reads}`` from :func:`refsim.studies.union.union_study` rows replayed at a budget;
    ``knobs``: the knob columns (``--drop-cold-experts``/``--prefetch`` on).

    Raises
    ------
    ConfigError
        A row without a replay (no budget), or knob columns asked for and absent.
    """
    out = {}
    for r in rows:
        read = r.knob_read_mib if knobs else r.read_mib
        hit = r.knob_hit_pct_decode if knobs else r.hit_pct_decode
        if r.decodes is None or read is None:
            raise ConfigError(f"union width {r.window}: no replay (a budget"
                              f"{' and a knob' if knobs else ''} is needed)")
        out[r.window] = Reads(r.window, read / r.decodes if r.decodes else 0.0, hit)
    return out


def memory_term(spec_mib: float, headroom_mib: float | None, plain_ms_per_token: float) -> Term:
    """The memory-pressure cost per token, ms: the part computed here and the part not modelled.

    The speculative loop holds more memory than a plain one (the ledger's snapshots, draft
    context, a w-wide ubatch's compute buffers: ``spec_mib``, refsim.model's memory ledger). Where
    it fits in what the device has left beside the cache (``headroom_mib``), it costs nothing
    (exact 0, derived). Where it does not, the major faults it causes are **not modelled here**
    (the memory-pressure model, refsim.timing.pressure, replaces this function): the value is 0
    and the interval runs to the largest fault-storm loss measured, :data:`STORM_SHARE` of the
    plain s/token (the phone copy cells; not a fit). With the headroom unknown (no ``--ram-mb``)
    it is an exact 0 of kind ``not_modelled`` saying pressure was not assessed (the band is not
    widened by what was not asked).

    Parameters
    ----------
    spec_mib : float
        Speculative memory, MiB (>= 0; 0 for ``off``).
    headroom_mib : float or None
        RAM left beside the resident demand at the budget, MiB; None: unknown.
    plain_ms_per_token : float
        The plain configuration's ms/token (scales the storm bound).

    Raises
    ------
    ConfigError
        A negative or non-finite input.
    """
    for what, v in (("spec_mib", spec_mib), ("plain_ms_per_token", plain_ms_per_token)):
        if not (math.isfinite(v) and v >= 0):
            raise ConfigError(f"memory term: {what} {v!r}, expected a finite number >= 0")
    if headroom_mib is not None and not math.isfinite(headroom_mib):
        raise ConfigError(f"memory term: headroom {headroom_mib!r}, expected a finite number")
    if spec_mib == 0.0:
        return exact("memory", 0.0, "ms/token", "derived", "no speculative memory")
    if headroom_mib is not None and spec_mib <= headroom_mib:
        return exact("memory", 0.0, "ms/token", "derived",
                     f"speculative memory {spec_mib:.1f} MiB fits the {headroom_mib:.1f} MiB "
                     f"left beside the cache")
    if headroom_mib is None:
        return exact("memory", 0.0, "ms/token", "not_modelled",
                     "RAM not given (--ram-mb): memory pressure not assessed",
                     f"speculative memory {spec_mib:.1f} MiB; whether it faults is unknown")
    return Term("memory", 0.0, 0.0, STORM_SHARE * plain_ms_per_token, "ms/token", "not_modelled",
                f"speculative memory {spec_mib:.1f} MiB exceeds the {headroom_mib:.1f} MiB left "
                f"beside the cache; the major-fault cost is not modelled here",
                f"interval to the largest measured fault storm, {100 * STORM_SHARE:.1f} % of the "
                f"plain s/token (phone copy off 4.43 vs ngram 3.14 tok/s, 126 -> 1427 majflt/token, "
                f"bmoe-engine.md §7; an upper bound charging the whole loss to faults)")


@dataclass(frozen=True)
class Device:
    """Everything about the device a price needs.

    Attributes
    ----------
    model : DeviceModel
        The fit (calibrated on the session's plain run if there is one).
    floor_model : str
        Which compute floor ``C`` (a model the device was fitted on).
    lanes : int
        I/O lanes (``--io-threads``).
    overlap : bool
    cache : bool
        Expert cache on.
    eps : Term
        Per-position cost at the verify width (refsim.timing.positions / identify).
    sigma : float
        Run-to-run noise, sd of ln tok/s of one run (refsim.timing.noise).
    replicates : tuple of DeviceModel
        Bootstrap refits (refsim.timing.band); empty: not estimated (the band says so).
    work : PositionWork or None
        The model's tensor table (refsim.timing.work), for the MTP head.
    head : Term or None
        An MTP head cost per token given instead of ``work`` (kind ``assumed``).
    level : float
        The band's coverage.
    """

    model: DeviceModel
    floor_model: str
    lanes: int
    overlap: bool
    eps: Term
    cache: bool = True
    sigma: float = 0.0
    replicates: tuple = ()
    work: object = None
    head: Term | None = None
    level: float = DEFAULT_LEVEL


@dataclass(frozen=True)
class Price:
    """One configuration at one budget (ms per emitted token for every term).

    ``delta`` is None for ``off``; ``breakeven_acceptance`` is None for ``off`` and for a
    measured configuration that drafted nothing (n/a), nan when even every draft accepted loses,
    0 when no acceptance is needed.
    """

    config: SpecConfig
    budget_mib: float | None
    positions_per_decode: float
    tokens_per_decode: float
    mib_per_token: float
    hit_pct: float | None
    terms: tuple
    ms_per_token: float
    eff_tok_s: Band
    delta: Band | None
    verdict: str | None
    breakeven_acceptance: float | None
    notes: tuple = field(default=())

    def not_applicable(self, t: Term) -> bool:
        """Term ``t`` does not apply to this configuration: ``off``'s extra positions."""
        return self.config.kind == "off" and t.name == "extra_positions"

    def term(self, name: str) -> Term:
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(name)

    def row(self) -> dict:
        """The interface row (``--json``/``--csv``): the issue's names first; ``policy`` is
        :data:`OFF_POLICY` for ``off``, and ``off``'s ``extra_positions_ms`` None (it has no
        extra position: n/a, :data:`OFF_NO_EXTRA`)."""
        d = self.delta
        out = {"config": self.config.label, "budget_mib": self.budget_mib,
                "eff_tok_s": self.eff_tok_s.point, "eff_tok_s_lo": self.eff_tok_s.lo,
                "eff_tok_s_hi": self.eff_tok_s.hi,
                "delta_pct": 0.0 if d is None else d.point,
                "delta_lo_pct": 0.0 if d is None else d.lo,
                "delta_hi_pct": 0.0 if d is None else d.hi,
                "verdict": self.verdict or "baseline",
                "policy": self.config.policy if self.config.kind != "off" else OFF_POLICY,
                "acceptance": self.config.acceptance, "coverage": self.config.coverage,
                "acceptance_source": self.config.source if self.config.kind != "off" else "",
                "positions_per_decode": self.positions_per_decode,
                "tokens_per_decode": self.tokens_per_decode,
                "mib_per_token": self.mib_per_token, "hit_pct": self.hit_pct,
                "ms_per_token": self.ms_per_token,
                "breakeven_acceptance": self.breakeven_acceptance,
                **{f"{t.name}_ms": None if self.not_applicable(t) else t.value
                   for t in self.terms}}
        return {k: float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
                for k, v in out.items()}


OFF_NO_EXTRA = "off: one position per decode, no extra position to price"
"""The source of ``off``'s extra-positions term: not applicable (``-`` in ``whatif --explain``,
``nan`` in its CSV, JSON ``null``), whatever eps is."""

TERM_NAMES = ("compute", "extra_positions", "bookkeeping", "contention", "flash", "stall", "head",
              "memory")


def _reads(reads: dict, width: int) -> Reads:
    if width not in reads:
        raise ConfigError(f"no replay at width {width} (have {sorted(reads)})")
    return reads[width]


def _head_ms(dv: Device, dev: DeviceModel, cfg: SpecConfig, eps: float, tpd: float) -> float:
    if cfg.kind != "mtp":
        return 0.0
    if dv.work is not None:
        c = dev.compute_floor(dv.floor_model)
        return head_ms_per_token(dv.work, exact("C", c, "ms", "fitted", ""),
                                 exact("eps", eps, "", "fitted", ""), cfg.draft, tpd,
                                 draft_passes=cfg.draft_passes).value
    if dv.head is not None:
        return dv.head.value
    raise ConfigError(f"--spec {cfg.label}: the MTP head's compute needs the model's tensor table "
                      f"(a GGUF) or a given head cost")


def _ms_terms_at(dv: Device, dev: DeviceModel, cfg: SpecConfig, reads: dict, memory_ms: float):
    """:func:`_ms_terms` staged for a band: the device's reads part of each decode kind evaluated
    once (:func:`refsim.timing.decode.decode_terms_at`), then ``eps -> terms`` (the same floats
    as :func:`_ms_terms`, which is this evaluated once)."""
    c, tpd = cfg.drafted_fraction, cfg.tokens_per_decode
    mixes = [(1.0 - c, 1, 1.0)] + ([(c, cfg.width, 1.0 + cfg.drafts)] if c > 0 else [])
    staged = [(share, positions, decode_terms_at(dev, dv.floor_model, dv.lanes, dv.overlap,
                                                 dv.cache, _reads(reads, w).mib_per_decode))
              for share, w, positions in mixes if share != 0.0]

    def at(eps: float) -> dict:
        out = dict.fromkeys(TERM_NAMES, 0.0)
        for share, positions, parts_at in staged:
            for k, v in parts_at(positions, eps).items():
                out[k] += share * v / tpd
        out["head"] = _head_ms(dv, dev, cfg, eps, tpd)
        out["memory"] = memory_ms
        return out
    return at


def _ms_terms(dv: Device, dev: DeviceModel, cfg: SpecConfig, reads: dict, eps: float,
              memory_ms: float) -> dict:
    """Per emitted token, ms, every term (module docstring); one decode's terms are
    :func:`refsim.timing.decode.decode_terms`, mixed over the undrafted and drafted decodes."""
    return _ms_terms_at(dv, dev, cfg, reads, memory_ms)(eps)


def point_terms(dv: Device, cfg: SpecConfig, reads: dict, memory_ms: float = 0.0) -> dict:
    """Per emitted token, ms, every term of :data:`TERM_NAMES` at ``eps``'s value: what
    :func:`price` sums to its ``ms_per_token`` (the module docstring's table). The one pricing
    rule of every ``--device`` output (``whatif``, ``timing breakeven``, ``union``, ``run``:
    issue 29 item 1), without the band.

    Parameters
    ----------
    dv : Device
    cfg : SpecConfig
        With its acceptance (and coverage for n-gram).
    reads : dict of int -> Reads
        Width 1 unless ``cfg`` drafts every decode; ``cfg.width`` for a speculation config.
    memory_ms : float
        The memory term's value, ms/token (:func:`memory_term`; 0 where not assessed).

    Raises
    ------
    ConfigError
        A missing width, acceptance or coverage; the device's refusals; an MTP config without the
        head's inputs (:attr:`Device.work` or :attr:`Device.head`).
    """
    return _ms_terms(dv, dv.model, cfg, reads, dv.eps.value, memory_ms)


def accepted_width_config(width: int) -> SpecConfig:
    """The configuration of a verify batch of ``width`` positions with every draft accepted
    (``refsim union``'s predicted column): ``off`` at width 1, else ``ngram:d=width-1`` drafting on
    every decode (coverage 1) at acceptance 1, so ``width`` positions and tokens per decode."""
    if width == 1:
        return SpecConfig("off")
    return SpecConfig("ngram", width - 1, acceptance=1.0, coverage=1.0,
                      source="every draft accepted (refsim union)")


def _tok_s_stager(dv: Device, cfg: SpecConfig, reads: dict):
    """The band's tok/s of ``cfg``, fused: ``stage(dev) -> (eps, memory_ms) -> tok/s``, equal to
    the last bit to ``1000 / sum(_ms_terms_at(dv, dev, cfg, reads, memory_ms)(eps).values())``
    (the readable rule; tests/timing/test_band_fused.py proves them equal).

    What depends on the device alone (each decode kind's reads part and its width- and
    eps-free terms, :func:`refsim.timing.decode.decode_terms_fixed`) is evaluated once per device
    and kept for the calls that follow (a band stages every replicate for its tok/s and again for
    its change, once per memory value); a call then adds the eps-dependent terms (extra
    positions, the MTP head) in :data:`TERM_NAMES` order. Python's ``sum`` of the same floats in
    the same order keeps the result the reference's on every Python version.
    """
    c, tpd = cfg.drafted_fraction, cfg.tokens_per_decode
    mixes = [(share, _reads(reads, w).mib_per_decode, positions)
             for share, w, positions in [(1.0 - c, 1, 1.0)]
             + ([(c, cfg.width, 1.0 + cfg.drafts)] if c > 0 else []) if share != 0.0]
    fixed_keys = [k for k in TERMS if k != "extra_positions"]
    const_head = (0.0 if cfg.kind != "mtp" else
                  dv.head.value if dv.work is None and dv.head is not None else None)
    staged: dict = {}

    def stage(dev: DeviceModel):
        hit = staged.get(id(dev))
        if hit is not None and hit[0] is dev:
            return hit[1]
        fixed = dict.fromkeys(fixed_keys, 0.0)
        coef = []
        for share, x, positions in mixes:
            parts, tail_c = decode_terms_fixed(dev, dv.floor_model, dv.lanes, dv.overlap,
                                               dv.cache, x)
            for k in fixed_keys:
                fixed[k] += share * parts[k] / tpd
            coef.append((share, tail_c, positions))
        compute, rest = fixed["compute"], [fixed[k] for k in fixed_keys[1:]]

        def at(eps: float, memory_ms: float) -> float:
            extra = 0.0
            for share, tail_c, positions in coef:
                extra += share * extra_positions_ms(tail_c, eps, positions) / tpd
            head = const_head if const_head is not None else _head_ms(dv, dev, cfg, eps, tpd)
            return 1000.0 / sum((compute, extra, *rest, head, memory_ms))
        at.fixed = fixed        # the eps-free terms per emitted token (_ms_terms_at's, bit for bit)
        staged[id(dev)] = (dev, at)
        return at
    return stage


def _tok_s_fn(stage, eps0: float, memory_ms: float):
    """``DeviceModel -> (eps -> tok/s)`` (the band's staged prediction) at ``memory_ms`` from
    :func:`_tok_s_stager`'s ``stage``; eps None is ``eps0``."""
    def staged(dev):
        at = stage(dev)
        return lambda e: at(eps0 if e is None else e, memory_ms)
    return staged


def band_hull(bands: list, at: int = 0) -> Band:
    """The hull of ``bands``, its point (and parts, notes) that of ``bands[at]``: the band at the
    memory term's value, not at an end of its interval."""
    b0 = bands[at]
    return replace(b0, lo=min(b.lo for b in bands), hi=max(b.hi for b in bands))


def verdict_of(delta: Band) -> str:
    """``gains`` (band above 0), ``loses`` (below), else ``within noise``."""
    if delta.lo > 0.0:
        return "gains"
    if delta.hi < 0.0:
        return "loses"
    return "within noise"


def breakeven_acceptance(dv: Device, cfg: SpecConfig, reads: dict, memory_ms: float = 0.0,
                         tol: float = 1e-9, off_reads: dict | None = None) -> float | None:
    """The acceptance at which the point change against ``off`` is 0 (None for ``off``; 0.0 when
    no acceptance is needed; nan when every draft accepted still loses). Bisection on ``alpha`` in
    [0, 1]. An n-gram configuration of coverage 0 (nothing drafted) has the break-even of its
    drafted decodes where it does not depend on the coverage (the baseline at the same reads, no
    memory term: ``c (t_w - t_1 (1 + d alpha))`` changes sign at one alpha whatever ``c > 0``),
    else the sign of its change (0.0 or nan). None too for a measured configuration that drafted
    nothing (no acceptance: its drafted decodes were never seen). ``off_reads``: the baseline's own replay when it runs at another budget (``--cache-mb
    auto``: speculation's memory leaves the cache); default ``reads``."""
    if cfg.kind == "off":
        return None
    if cfg.drafted_fraction == 0.0 and cfg.acceptance is None:
        return None                     # measured, nothing drafted: no drafted decode to price
    off = SpecConfig("off")
    e = dv.eps.value
    t_off = sum(_ms_terms(dv, dv.model, off, reads if off_reads is None else off_reads, e,
                          0.0).values())

    def gap(a):
        s = replace(cfg, acceptance=a)
        return t_off - sum(_ms_terms(dv, dv.model, s, reads, e, memory_ms).values())
    if cfg.kind == "ngram" and cfg.drafted_fraction == 0.0:
        if off_reads is None and memory_ms == 0.0:
            # the change is 0 at coverage 0 whatever alpha; at any coverage c > 0 its sign is
            # that of c (t_w - t_1 (1 + d alpha)): the break-even does not depend on c, so it is
            # the one of every draft decode (coverage 1), the limit of a coverage going to 0
            return breakeven_acceptance(dv, replace(cfg, coverage=1.0), reads, tol=tol)
        return 0.0 if gap(0.0) >= 0 else math.nan
    if gap(0.0) >= 0.0:
        return 0.0
    if gap(1.0) < 0.0:
        return math.nan
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if gap(mid) >= 0.0:
            hi = mid
        else:
            lo = mid
    return hi


def price(dv: Device, cfg: SpecConfig, reads: dict, budget_mib: float | None = None,
          spec_mib: float = 0.0, headroom_mib: float | None = None,
          off_reads: dict | None = None, memory: Term | None = None) -> Price:
    """Price one configuration (module docstring).

    Parameters
    ----------
    dv : Device
    cfg : SpecConfig
        With its acceptance (and coverage for n-gram).
    reads : dict of int -> Reads
        The union replay at the budget; width 1 always, ``d + 1`` for a speculation config.
    budget_mib : float, optional
        Reported only.
    spec_mib, headroom_mib : float
        For :func:`memory_term` (speculative memory, MiB; RAM left beside the cache, MiB or None).
    off_reads : dict of int -> Reads, optional
        The baseline's replay when ``off`` runs at another budget than ``cfg`` (``--cache-mb
        auto``: the speculative memory leaves the cache); default ``reads``.
    memory : Term, optional
        The memory term (ms/token, with its interval) computed by the caller, used in place of
        :func:`memory_term` for a speculation config (e.g. from the memory-pressure model,
        refsim.timing.pressure, as ``refsim.timing.validate`` does); ``spec_mib`` and
        ``headroom_mib`` are then not read. Ignored for ``off``.

    Raises
    ------
    ConfigError
        A missing width, acceptance or coverage; the device's refusals (unknown model, a mode it
        was not fitted on); an MTP config without the head's inputs.
    """
    off = SpecConfig("off")
    base = reads if off_reads is None else off_reads
    e0 = dv.eps.value
    plain = _ms_terms(dv, dv.model, off, base, e0, 0.0)
    plain_ms = sum(plain.values())
    mem = (memory if memory is not None and cfg.kind != "off" else
           memory_term(spec_mib if cfg.kind != "off" else 0.0, headroom_mib, plain_ms))
    ms = point_terms(dv, cfg, reads, mem.value)
    spec_at, off_at = _tok_s_stager(dv, cfg, reads), _tok_s_stager(dv, off, base)
    terms = _terms(dv, cfg, reads, ms, mem, spec_at)
    notes = (("acceptance and coverage assumed (given by the user)",)
             if cfg.kind != "off" and cfg.source == "assumed" else ())
    mems = sorted({mem.lo, mem.value, mem.hi})
    at = mems.index(mem.value)
    tok = band_hull([tok_s_band(_tok_s_fn(spec_at, e0, m), dv.model, dv.replicates, dv.eps,
                                 dv.sigma, dv.level) for m in mems], at)
    delta = verdict = None
    if cfg.kind != "off":
        delta = band_hull([delta_band(_tok_s_fn(spec_at, e0, m), _tok_s_fn(off_at, e0, 0.0),
                                       dv.model, dv.replicates, dv.eps, dv.sigma, dv.level)
                            for m in mems], at)
        verdict = verdict_of(delta)
    mib_decode, hit = reads_mix(cfg, reads)
    return Price(config=cfg, budget_mib=budget_mib, positions_per_decode=cfg.positions_per_decode,
                 tokens_per_decode=cfg.tokens_per_decode,
                 mib_per_token=mib_decode / cfg.tokens_per_decode, hit_pct=hit, terms=terms,
                 ms_per_token=sum(ms.values()), eff_tok_s=tok, delta=delta, verdict=verdict,
                 breakeven_acceptance=breakeven_acceptance(dv, cfg, reads, mem.value,
                                                           off_reads=off_reads),
                 notes=notes + tok.notes)


def reads_mix(cfg: SpecConfig, reads: dict) -> tuple:
    """``(MiB per decode, hit %)`` of ``cfg``'s decodes: the plain (width 1) replay's and the
    verify width's, mixed by the share of decodes that carry a draft
    (:attr:`SpecConfig.drafted_fraction`); the hit rate weighted by each mix's lookups when both
    know them, else by the decode share; None when a replay has no hit rate. MiB/token is the
    first divided by :attr:`SpecConfig.tokens_per_decode` (as :func:`price` reports).

    Raises
    ------
    ConfigError
        A width missing from ``reads``.
    """
    w1 = _reads(reads, 1)
    mixes = [(1.0 - cfg.drafted_fraction, w1)]
    if cfg.kind != "off":
        mixes.append((cfg.drafted_fraction, _reads(reads, cfg.width)))
    mib_decode = sum(s * r.mib_per_decode for s, r in mixes)
    hits = [(s, r.hit_pct, r.lookups_per_decode) for s, r in mixes if s > 0]
    if any(h is None for _, h, _ in hits):
        hit = None
    elif all(n is not None for _, _, n in hits) and sum(s * n for s, _, n in hits) > 0:
        hit = sum(s * n * h for s, h, n in hits) / sum(s * n for s, _, n in hits)
    else:
        hit = sum(s * h for s, h, _ in hits)
    return mib_decode, hit


def _terms(dv: Device, cfg: SpecConfig, reads: dict, ms: dict, mem: Term, stage=None) -> tuple:
    """Each term as a :class:`Term` (ms per emitted token); the extra positions and the head carry
    ``eps``'s interval (the term evaluated at eps's ends), the memory term its own, the fitted
    terms the bootstrap refits' spread (:func:`_refit_spread`; ``stage``, the band's
    :func:`_tok_s_stager` of ``cfg``, shares its staging of each refit)."""
    e = dv.eps
    at = {x: _ms_terms(dv, dv.model, cfg, reads, x, mem.value) for x in (e.lo, e.hi)}
    src = f"device {dv.model.name or '?'} fitted on {len(dv.model.fitted_on)} plain run(s)"
    spread = _refit_spread(dv, cfg, reads, stage)
    out = []
    for name in TERM_NAMES:
        v = ms[name]
        if name == "memory":
            out.append(mem)
        elif name == "extra_positions" and cfg.kind == "off":
            # a plain decode is one position: nothing for eps to price (0, not eps(2)'s figure)
            out.append(exact(name, v, "ms/token", "derived", OFF_NO_EXTRA))
        elif name == "extra_positions":
            lo, hi = at[e.lo][name], at[e.hi][name]
            out.append(Term(name, v, min(lo, v), max(hi, v), "ms/token", e.kind,
                            f"eps {e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}] ({e.source})",
                            "interval: eps at its ends"))
        elif name == "head" and cfg.kind == "mtp":
            lo, hi = at[e.lo][name], at[e.hi][name]
            if dv.work is not None:
                kind, s = "derived", "nextn block vs trunk by bytes (refsim.timing.head)"
                note = "interval: eps at its ends"          # the catch-up's extra positions
            else:                                           # a given cost: eps does not move it
                kind, s = dv.head.kind, dv.head.source
                note = dv.head.note or f"interval: {dv.head.source}'s own (given, not swept)"
            out.append(Term(name, v, min(lo, v, dv.head.lo if dv.work is None else v),
                            max(hi, v, dv.head.hi if dv.work is None else v), "ms/token", kind, s,
                            note))
        elif name == "head":
            out.append(exact(name, v, "ms/token", "derived",
                             f"no MTP head: {cfg.kind} drafts without one"))
        elif name in spread and spread[name] != (v, v):     # a term the refits move
            lo, hi = spread[name]
            out.append(Term(name, v, min(lo, v), max(hi, v), "ms/token", "fitted", src,
                            f"interval: the {len(dv.replicates)} bootstrap refits' central "
                            f"{100 * dv.level:g} % at eps's value"))
        else:
            out.append(exact(name, v, "ms/token", "fitted", src))
    return tuple(out)


FITTED_TERMS = ("compute", "bookkeeping", "contention", "flash", "stall")
"""The terms that are the device fit's alone (no eps, no head, no memory)."""


def _refit_spread(dv: Device, cfg: SpecConfig, reads: dict, stage=None) -> dict:
    """``{term: (lo, hi)}``, ms/token: each of :data:`FITTED_TERMS` over the device's bootstrap
    refits (:attr:`Device.replicates`), its central ``dv.level`` quantiles (the parameters' part
    of the band, term by term; none of them depends on eps or the memory term); empty without
    refits. The values are :func:`_tok_s_stager`'s staged eps-free terms (``stage``, or a new
    one), equal to :func:`_ms_terms`' to the last bit."""
    if not dv.replicates:
        return {}
    stage = stage or _tok_s_stager(dv, cfg, reads)
    vals = [stage(d).fixed for d in dv.replicates]
    q = ((1.0 - dv.level) / 2.0, (1.0 + dv.level) / 2.0)
    out = {}
    for name in FITTED_TERMS:
        lo, hi = np.quantile(np.array([v[name] for v in vals], dtype=np.float64), q)
        out[name] = (float(lo), float(hi))
    return out
