"""Break-even of a draft width: what acceptance a verify batch needs to beat plain decoding.

A verify decode of width ``w = d + 1`` (one token + ``d`` drafts) costs, on a device
(refsim.timing.model, with ``X_w`` the flash MiB one decode of width ``w`` reads, from
:func:`refsim.studies.union.union_study` at the cache budget)::

    t(w) = tail * (C * (1 + eps * (w - 1)) + cache * (m0 + m1 X_w) + overlap * kappa X_w
                   + flash(X_w)) + draft_ms

with ``flash`` the serial ``io`` or the overlap ``stall`` of the device model, ``eps`` the compute
cost of each extra position as a fraction of one position's (no shared run varies it:
docs/timing.md gives 0.2-0.4 from the engine's host MTP figure) and ``draft_ms`` the drafting
cost per drafted decode (the MTP head's; about 0 for n-gram lookup). A plain decode costs
``t(1)`` with ``draft_ms = 0``.

If a fraction ``c`` of decodes carry ``d`` drafts (coverage) and a fraction ``alpha`` of drafts is
accepted (acceptance), a run emits ``1 + c d alpha`` tokens per decode at ``c t(w) + (1 - c) t(1)``
per decode. It beats plain decoding iff that per-token time is below ``t(1)``, i.e.::

    alpha > alpha* = (t(w) / t(1) - 1) / d        (independent of the coverage c)

and a drafted decode must confirm ``t(w) / t(1)`` tokens on average. Both are per-decode means:
``X_w`` is the mean read of a decode, and the stall's hinge is applied to the mean, not per decode.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from refsim.errors import ConfigError
from refsim.timing.decode import decode_ms as _decode_ms
from refsim.timing.model import DeviceModel

from refsim.timing.defaults import DEFAULT_EPS, EPS_RANGE  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class BreakevenRow:
    """One draft width. Times are ms per decode; MiB = 2^20 bytes."""

    draft: int
    width: int
    mib_per_decode: float
    plain_ms: float
    verify_ms: float
    tokens_needed: float
    acceptance_needed_pct: float

    def as_dict(self) -> dict:
        return asdict(self)


def decode_ms(device: DeviceModel, mib: float, width: int, model: str, lanes: int,
              overlap: bool, cache: bool, eps: float) -> float:
    """``t(w)`` without drafting cost, ms (see the module docstring): the sum of the one decode
    rule's terms (:func:`refsim.timing.decode.decode_terms`, which ``verdict.price`` mixes)."""
    return _decode_ms(device, mib, width, model, lanes, overlap, cache, eps)


def breakeven(device: DeviceModel, union_rows, model: str, lanes: int, overlap: bool,
              cache: bool = True, eps: float = DEFAULT_EPS, draft_ms: float = 0.0,
              knobs: bool = False) -> list[BreakevenRow]:
    """Break-even per draft width from ``union_rows`` (:class:`refsim.studies.union.UnionRow`
    with a budget; must include width 1, the plain decode).

    ``t(1)`` and ``t(w)`` are :func:`refsim.timing.verdict.point_terms`' ms per token of ``off``
    and of an n-gram configuration drafting ``d`` on every decode with nothing accepted (one
    token per decode, so ms per token = ms per decode): the price ``refsim whatif`` gives the same
    width (issue 29 item 1). ``knobs``: read the union replay's knob columns
    (``--drop-cold-experts``/``--prefetch`` on), as whatif does.

    Raises
    ------
    ConfigError
        No width-1 row, rows without a replay budget (or without the knob columns when
        ``knobs``), eps or draft_ms negative or not finite.
    """
    from refsim.timing.terms import exact
    from refsim.timing.verdict import Device, SpecConfig, point_terms, reads_from_union
    if not (eps >= 0 and eps < float("inf")) or not (draft_ms >= 0 and draft_ms < float("inf")):
        raise ConfigError(f"breakeven: --position-cost and --draft-ms must be finite and >= 0 "
                          f"(got {eps!r}, {draft_ms!r})")
    by_w = {r.window: r for r in union_rows}
    if 1 not in by_w:
        raise ConfigError("breakeven: width 1 (plain decoding) is needed as the baseline")
    if any(r.decodes is None for r in union_rows):
        raise ConfigError("breakeven: the union rows need a cache budget (--cache-mb)")
    reads = reads_from_union(union_rows, knobs)
    dv = Device(device, model, lanes, overlap, exact("eps", eps, "", "assumed", "--position-cost"),
                cache=cache)

    def ms(cfg) -> float:
        return sum(point_terms(dv, cfg, reads).values())

    plain = ms(SpecConfig("off"))
    rows = []
    for w in sorted(by_w):
        if w == 1:
            continue
        d = w - 1
        t = ms(SpecConfig("ngram", d, acceptance=0.0, coverage=1.0)) + draft_ms
        ratio = t / plain
        rows.append(BreakevenRow(draft=d, width=w, mib_per_decode=reads[w].mib_per_decode,
                                 plain_ms=plain, verify_ms=t, tokens_needed=ratio,
                                 acceptance_needed_pct=(ratio - 1.0) / d * 100.0))
    return rows
