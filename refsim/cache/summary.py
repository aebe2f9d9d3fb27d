"""The cache summary: hit rates and flash MiB derived from :class:`CacheStats` (one place).

Definitions (docs/cache-studies.md):

- ``hit_pct_cum`` = 100 × hits / lookups over prefill and target decodes: the engine's
  ``cache_hit_pct`` (bmoe-engine.md §3.7; it includes prefill). Draft-context lookups are
  included too, as the engine's expert source serves both contexts.
- ``hit_pct_decode`` = the same over target decodes only (trace phase 1).
- ``read_bytes`` = flash bytes of every miss, prefill included (route-replay.py's ``read_mib``);
  ``decode_read_bytes`` excludes prefill, as the engine's summary ``read_MiB`` does.
- ``mib_per_token`` = decode_read_bytes / 2**20 / tokens, tokens = confirmed tokens.
- ``t_mib`` = one token cycle, Σ_layers min(k, n_expert) × expert_bytes / 2**20.

A rate over zero events is ``None`` (printed ``n/a``, JSON ``null``; :mod:`refsim.fmt`): the
decode-only hit rate of a trace with no decode, MiB/token with no token.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from refsim import MIB
from refsim.cache.expert_cache import TARGET_DECODE_KINDS, CacheStats
from refsim.errors import warning_line
from refsim.events import DecodeKind
from refsim.fmt import budget_mib, num, pct, ratio
from refsim.frames import Table


@dataclass(frozen=True)
class CacheSummary(Table):
    """Headline counters of a run or replay (units in the names; MiB = 2**20 bytes).

    ``hit_pct_cum``, ``hit_pct_decode`` and ``mib_per_token`` are ``None`` when their
    denominator (lookups, decode lookups, tokens) is 0. As a table (:meth:`to_pandas`): one row,
    a column per field (docs/notebook.md)."""

    budget_bytes: int
    lookups: int
    hits: int
    hit_pct_cum: float | None
    decode_lookups: int
    decode_hits: int
    hit_pct_decode: float | None
    prefill_lookups: int
    prefill_hits: int
    read_bytes: int
    read_mib: float
    prefill_read_bytes: int
    decode_read_bytes: int
    decode_read_mib: float
    draft_read_bytes: int
    tokens: int
    mib_per_token: float | None
    resident_bytes: int
    evictions: int
    rereads: int
    t_bytes: int
    t_mib: float

    @classmethod
    def from_stats(cls, stats: CacheStats, budget_bytes: int, tokens: int,
                   t_bytes: int) -> "CacheSummary":
        """Derive the summary; ``tokens`` = confirmed tokens, ``t_bytes`` = one token cycle."""
        dec = TARGET_DECODE_KINDS
        pre = (DecodeKind.PREFILL, DecodeKind.DRAFT_PREFILL)
        drf = (DecodeKind.DRAFT,)
        lookups, hits = stats.total("lookups"), stats.total("hits")
        d_look, d_hits = stats.total("lookups", dec), stats.total("hits", dec)
        # decode read = target decodes + draft-context decodes (the engine's read_MiB)
        d_read = stats.total("read_bytes", dec + drf)
        return cls(
            budget_bytes=int(budget_bytes), lookups=lookups, hits=hits,
            hit_pct_cum=pct(hits, lookups), decode_lookups=d_look, decode_hits=d_hits,
            hit_pct_decode=pct(d_hits, d_look), prefill_lookups=stats.total("lookups", pre),
            prefill_hits=stats.total("hits", pre), read_bytes=stats.total("read_bytes"),
            read_mib=stats.total("read_bytes") / MIB,
            prefill_read_bytes=stats.total("read_bytes", pre), decode_read_bytes=d_read,
            decode_read_mib=d_read / MIB, draft_read_bytes=stats.total("read_bytes", drf),
            tokens=int(tokens), mib_per_token=ratio(d_read / MIB, tokens),
            resident_bytes=stats.resident_bytes, evictions=stats.evictions,
            rereads=stats.rereads, t_bytes=int(t_bytes), t_mib=t_bytes / MIB)

    def as_dict(self) -> dict:
        """Plain dict (full precision) for JSON output (an undefined rate is ``None``: ``null``)."""
        return asdict(self)

    def to_columns(self) -> dict:
        """One row: a column per field, in order (an undefined rate is NaN)."""
        from refsim.frames import dataclass_columns
        return dataclass_columns([self], CacheSummary)


def below_token_cycle_warning(cmd: str, budgets_bytes, t_bytes: int) -> str | None:
    """The one warning line for budgets below one token cycle T (bytes), or None when none is.

    Below T a global LRU evicts, within one token, entries the next layers need, so the hit rate
    collapses toward 0 (docs/cache-studies.md): a number the user may not expect. ``cmd`` names
    the subcommand in the message (``refsim CMD: warning: ...``); the CLI prints it on stderr,
    :func:`refsim.session.simulate` hands it to its ``warn`` callback.
    """
    low = sorted({b for b in budgets_bytes if b < t_bytes})
    if not low:
        return None
    shown = ", ".join(budget_mib(b) for b in low[:5]) + (", ..." if len(low) > 5 else "")
    what = f"budget {shown} MiB is" if len(low) == 1 else f"budgets {shown} MiB are"
    return warning_line(cmd, f"{what} below one token cycle "
            f"T = {num(t_bytes / MIB, 1)} MiB: a global LRU evicts what the next layers need, and its "
            f"hit rate collapses toward 0 (exactly 0 once the budget is short of T by more than a "
            f"few entries; docs/cache-studies.md)")


GENERATION_KINDS = TARGET_DECODE_KINDS + (DecodeKind.DRAFT,)
"""The kinds a generation's summary counts (phase 1: target and draft-context decodes), as
the engine reports ``read_MiB`` and the knob counters as the generation delta (§3.6, §3.7)."""


@dataclass(frozen=True)
class KnobSummary:
    """What ``--drop-cold-experts`` and ``--prefetch`` did over a generation (decode kinds,
    :data:`GENERATION_KINDS`; prefill excluded, as the engine's generation delta).

    Attributes
    ----------
    drop_frac : float
        F (0 = off).
    experts_routed, experts_dropped : int
        Router-selected slots (counted only while F > 0) and dropped slots.
    dropped_pct : float
        100 × dropped / routed (0 when nothing was routed).
    prefetch, route_ahead : int
        K and N (0 = off); with N the speculative counters are route-ahead's early reads.
    predict_prefetch : bool
        ``--predict-prefetch`` on: the speculative counters are the stale-gate prefetch's.
    predict_spec_max : int or None
        ``--predict-spec-max`` with ``--predict-prefetch``, else None.
    spec_read_bytes : int
        Bytes prefetch read (a subset of ``CacheSummary.decode_read_bytes``).
    spec_experts, spec_useful : int
        Prefetched entries integrated into the cache, and those a later real lookup hit.
    useful_pct : float
        100 × useful / prefetched (0 when nothing was prefetched).
    """

    drop_frac: float
    experts_routed: int
    experts_dropped: int
    dropped_pct: float | None
    prefetch: int
    route_ahead: int
    spec_read_bytes: int
    spec_read_mib: float
    spec_experts: int
    spec_useful: int
    useful_pct: float | None
    predict_prefetch: bool = False
    predict_spec_max: int | None = None

    @classmethod
    def from_stats(cls, stats: CacheStats, knobs) -> "KnobSummary":
        """Derive from a cache's lifetime stats and its :class:`~refsim.streaming.knobs.StreamKnobs`."""
        g = GENERATION_KINDS
        routed, dropped = stats.total("experts_routed", g), stats.total("experts_dropped", g)
        sb = stats.total("spec_read_bytes", g)
        se, su = stats.total("spec_experts", g), stats.total("spec_useful", g)
        return cls(drop_frac=float(knobs.drop_frac), experts_routed=routed,
                   experts_dropped=dropped, dropped_pct=pct(dropped, routed),
                   prefetch=int(knobs.prefetch), route_ahead=int(knobs.route_ahead),
                   spec_read_bytes=sb, spec_read_mib=sb / MIB,
                   spec_experts=se, spec_useful=su, useful_pct=pct(su, se),
                   predict_prefetch=bool(knobs.predict_prefetch),
                   predict_spec_max=int(knobs.predict_spec_max) if knobs.predict_prefetch else None)

    def as_dict(self) -> dict:
        """Plain dict (full precision) for JSON output."""
        return asdict(self)
