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
    """``t(w)`` without drafting cost, ms (see the module docstring)."""
    parts = device.token_ms([mib], model, lanes, overlap, cache)
    extra = device.compute_floor(model) * eps * (width - 1)
    return float(parts["wall"][0] + device.value("tail") * extra)


def breakeven(device: DeviceModel, union_rows, model: str, lanes: int, overlap: bool,
              cache: bool = True, eps: float = DEFAULT_EPS, draft_ms: float = 0.0) -> list[BreakevenRow]:
    """Break-even per draft width from ``union_rows`` (:class:`refsim.studies.union.UnionRow`
    with a budget; must include width 1, the plain decode).

    Raises
    ------
    ConfigError
        No width-1 row, rows without a replay budget, eps or draft_ms negative or not finite.
    """
    if not (eps >= 0 and eps < float("inf")) or not (draft_ms >= 0 and draft_ms < float("inf")):
        raise ConfigError(f"breakeven: --position-cost and --draft-ms must be finite and >= 0 "
                          f"(got {eps!r}, {draft_ms!r})")
    by_w = {r.window: r for r in union_rows}
    if 1 not in by_w:
        raise ConfigError("breakeven: width 1 (plain decoding) is needed as the baseline")
    if any(r.decodes is None for r in union_rows):
        raise ConfigError("breakeven: the union rows need a cache budget (--cache-mb)")

    def per_decode(r) -> float:
        return r.read_mib / r.decodes if r.decodes else 0.0

    plain = decode_ms(device, per_decode(by_w[1]), 1, model, lanes, overlap, cache, eps)
    rows = []
    for w in sorted(by_w):
        if w == 1:
            continue
        d = w - 1
        t = decode_ms(device, per_decode(by_w[w]), w, model, lanes, overlap, cache, eps) + draft_ms
        ratio = t / plain
        rows.append(BreakevenRow(draft=d, width=w, mib_per_decode=per_decode(by_w[w]),
                                 plain_ms=plain, verify_ms=t, tokens_needed=ratio,
                                 acceptance_needed_pct=(ratio - 1.0) / d * 100.0))
    return rows
