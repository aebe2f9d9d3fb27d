"""Draft policies and lossy verify routing on a route trace, with an acceptance stream.

A route trace holds the routes of every decoded position but not the draft a policy would have
seen; the *acceptance stream* supplies it: per step, whether the source has a candidate
(probability ``coverage``) and how long a prefix of it greedy acceptance would take (each
position accepted with probability ``q`` given the previous one was, ``q`` solved so that a width
``draft`` verify accepts ``accept`` of its drafts on average, the engine's acceptance). The stream
is drawn once per seed, so every policy sees the same candidates and outcomes; a policy changes
only the width ``w``, and the step accepts ``min(a, w)`` (greedy: the target decides).

Each step is one event built from the trace's decode positions (``refsim.studies.union``'s
convention: a verify decode of ``[tok, d1..dw]`` at positions ``p..p+w`` routes as the trace's
positions do), fed to one
:class:`~refsim.cache.ExpertCache` with the given knobs. Predicted routes of the draft positions
are the trace's own (``predictor='oracle'``: an upper bound on what a predictor gives) or the
previous position's (``'previous'``).

A rejected draft token is not the token the trace decoded at its position, so its routes are not
the trace's there: with ``rejected='foreign'`` (the default) each rejected position takes the
routes of the position half the trace away (``(p + j + n_dec // 2) mod n_dec``), a token of the
same text that is not this one; ``'same'`` keeps the trace's (what ``refsim union`` assumes, a
lower bound on the widening).

Lossy verify routing (applied to verify decodes only; labelled lossy): ``cap:U`` and
``consensus:T``, the rules of :mod:`refsim.streaming.verify_route` (the live forward pass calls
the same functions).

Times: :func:`refsim.timing.whatif.device_whatif` at the replay's MiB/token and tokens per decode
(predicted, never measured).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim.cache import CacheSummary, ExpertCache
from refsim.errors import ConfigError
from refsim.events import DecodeEvent, DecodeKind
from refsim.spec.policies import StepView, parse_spec_policy
from refsim.streaming.verify_route import cap_union, consensus, parse_verify_routing  # noqa: F401  (cap_union, consensus: re-exported, the one rule)
from refsim.studies.union import decode_positions


def per_position_accept(accept: float, draft: int) -> float:
    """``q`` with ``(q + q^2 + ... + q^draft) / draft == accept`` (bisection; 0 <= accept < 1)."""
    if not 0.0 <= accept < 1.0:
        raise ConfigError(f"accept: expected a fraction in [0, 1), got {accept}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        q = (lo + hi) / 2
        if sum(q ** i for i in range(1, draft + 1)) / draft < accept:
            lo = q
        else:
            hi = q
    return (lo + hi) / 2


def acceptance_stream(n: int, coverage: float, accept: float, draft: int, seed: int = 0):
    """``(has, run)``: (n,) bool candidate present, (n,) int64 accepted-prefix length (0..draft)
    of each step's candidate."""
    rng = np.random.default_rng(seed)
    q = per_position_accept(accept, draft)
    has = rng.random(n) < coverage
    ok = rng.random((n, draft)) < q
    run = np.where(ok.all(axis=1), draft, np.argmin(ok, axis=1)).astype(np.int64)
    return has, run


@dataclass(frozen=True)
class PolicyRow:
    """One policy (or lossy variant) on one configuration."""

    policy: str
    lossy: bool
    tokens: int
    decodes: int
    positions: int
    mib_per_token: float
    hit_pct_decode: float
    weight_discarded_pct: float
    verify_decodes: int = 0
    drafted: int = 0
    accepted: int = 0
    plain_read_bytes: int = 0
    verify_read_bytes: int = 0
    plain_lookups: int = 0
    plain_hits: int = 0
    verify_lookups: int = 0
    verify_hits: int = 0
    """Per kind (plain decodes, verify decodes: ``verify_decodes`` of the ``decodes``), the
    draft tokens verified and accepted and the cache's counters (read bytes, lookups, hits):
    what refsim.timing.measured prices."""

    @property
    def tokens_per_decode(self) -> float:
        return self.tokens / self.decodes

    @property
    def positions_per_decode(self) -> float:
        return self.positions / self.decodes


def policy_replay(trace, budget_bytes: int, policy: str = "fixed", draft: int = 3,
                  coverage: float = 1.0, accept: float = 0.5, seed: int = 0, knobs=None,
                  verify: str | None = None, predictor: str = "oracle",
                  rejected: str = "foreign", on_event=None) -> PolicyRow:
    """Replay the trace's decode positions as the loop with ``policy`` would decode them.

    Parameters
    ----------
    trace : refsim.trace.RouteTrace
    budget_bytes : int
        Cache budget, bytes.
    policy : str
        ``--spec-policy`` text (:func:`refsim.spec.policies.parse_spec_policy`).
    draft : int
        ``--draft N``.
    coverage, accept : float
        The acceptance stream's drafted-step fraction and acceptance (:func:`acceptance_stream`).
    seed : int
    knobs : refsim.cache.StreamKnobs-like, optional
        ``--drop-cold-experts`` etc. for the cache.
    verify : {'cap:U', 'consensus:T'} or None
        A lossy verify-routing variant (needs the trace's weights).
    predictor : {'oracle', 'previous'}
    rejected : {'foreign', 'same'}
        Routes of rejected draft positions (module docstring).
    on_event : callable, optional
        Called with each target decode's :class:`~refsim.events.DecodeEvent` once the cache has
        applied it (``accepted`` set on a verify: its first ``1 + accepted`` positions are confirmed).

    Returns
    -------
    PolicyRow

    Raises
    ------
    ConfigError
        An unknown predictor or verify variant; a lossy variant on a trace without weights.
    """
    if predictor not in ("oracle", "previous"):
        raise ConfigError(f"predictor: expected oracle or previous, got {predictor!r}")
    if rejected not in ("foreign", "same"):
        raise ConfigError(f"rejected: expected foreign or same, got {rejected!r}")
    h = trace.header
    pos, routes, dropped, weights = decode_positions(trace.events, with_weights=True)
    rule = None if verify is None else parse_verify_routing(verify)
    if rule is not None:
        if weights is None:
            raise ConfigError("verify routing variants need the trace's weights")
    pol = parse_spec_policy(policy)
    n_dec = pos.size
    has, run = acceptance_stream(n_dec, coverage, accept, draft, seed)
    cache = ExpertCache(h.expert_bytes, h.n_expert, budget_bytes, knobs)
    for ev in trace.events:
        if ev.kind is DecodeKind.PREFILL:
            cache.apply(ev)
    p = step = decodes = positions = verifies = drafted = accepted = 0
    discarded = total_w = 0.0
    while p < n_dec:
        room = n_dec - p - 1
        c = min(draft, room) if has[step] else 0
        w = 0
        if c:
            pred = routes[p:p + c + 1] if predictor == "oracle" else np.repeat(
                routes[max(p - 1, 0)][None], c + 1, axis=0)
            view = StepView(candidate=np.zeros(c, np.int64), probs=None, draft_max=draft,
                            resident=cache.resident_mask(), expert_bytes=h.expert_bytes,
                            pred_routes=pred, stats=pol.stats)
            w = int(pol.width(view))
        n_acc = int(min(run[step], w))
        sl = slice(p, p + w + 1)
        r, wt = routes[sl].copy(), None if weights is None else weights[sl].copy()
        dr = None if dropped is None else dropped[sl].copy()
        if rejected == "foreign" and n_acc < w:
            far = (p + np.arange(n_acc + 1, w + 1) + n_dec // 2) % n_dec
            r[n_acc + 1:] = routes[far]
            if wt is not None:
                wt[n_acc + 1:] = weights[far]
            if dr is not None:
                dr[n_acc + 1:] = dropped[far]
        if wt is not None:
            total_w += float(np.nansum(wt[r >= 0]))
        if w and rule is not None:
            r, d2, lost = rule.event(r, wt)
            if d2 is not None:
                dr = d2 if dr is None else (dr | d2)
            discarded += lost
        if w:
            ev = DecodeEvent(DecodeKind.VERIFY, pos[sl], r, weights=wt, dropped=dr, n_draft=w,
                             accepted=n_acc)
        else:
            ev = DecodeEvent(DecodeKind.PLAIN, pos[sl], r, weights=wt, dropped=dr)
        cache.apply(ev)
        if on_event is not None:
            on_event(ev)
        if w:
            pol.observe(w, n_acc)
            verifies += 1
            drafted += w
            accepted += n_acc
        decodes += 1
        positions += w + 1
        p += 1 + n_acc
        step += 1
    s = CacheSummary.from_stats(cache.stats, budget_bytes, n_dec, h.token_cycle_bytes)
    label = pol.label() + ("" if verify is None else f" + {verify} (lossy)")
    return PolicyRow(policy=label, lossy=verify is not None, tokens=n_dec, decodes=decodes,
                     positions=positions, mib_per_token=s.mib_per_token,
                     hit_pct_decode=s.hit_pct_decode,
                     weight_discarded_pct=100.0 * discarded / total_w if total_w else 0.0,
                     verify_decodes=verifies, drafted=drafted, accepted=accepted,
                     **{f"{name}_{what}": cache.stats.total(what, (kind,))
                        for name, kind in (("plain", DecodeKind.PLAIN), ("verify", DecodeKind.VERIFY))
                        for what in ("read_bytes", "lookups", "hits")})


def policy_rows(trace, budget_bytes: int, policies, draft: int = 3, coverage: float = 1.0,
                accept: float = 0.5, seed: int = 0, knobs=None) -> list[PolicyRow]:
    """The rows a trace what-if prints for ``--spec-policy``: no drafts (``off``), ``fixed``
    (today's engine), then each of ``policies`` not already listed, all on one acceptance stream
    (:func:`policy_replay` with the same ``draft``, ``coverage``, ``accept``, ``seed``, ``knobs``).

    Parameters
    ----------
    trace : refsim.trace.RouteTrace
    budget_bytes : int
    policies : iterable of str
        ``--spec-policy`` texts.
    draft, coverage, accept, seed, knobs
        As :func:`policy_replay`.

    Returns
    -------
    list of PolicyRow
        ``off (no drafts)`` first, ``fixed`` second.

    Raises
    ------
    ConfigError
        A policy text :func:`refsim.spec.policies.parse_spec_policy` refuses (checked before any
        replay), or the stream's ``accept`` outside [0, 1).
    """
    from dataclasses import replace
    texts = ["fixed"] + [p for p in policies if p != "fixed"]
    for p in texts:
        parse_spec_policy(p)
    per_position_accept(accept, draft)
    off = replace(policy_replay(trace, budget_bytes, "fixed", draft, 0.0, accept, seed, knobs),
                  policy="off (no drafts)")
    return [off] + [policy_replay(trace, budget_bytes, p, draft, coverage, accept, seed, knobs) for p in texts]
