"""How far the uniform per-layer split (``layer``) is from the optimal one (``layer-opt``).

:func:`layer_alloc_report` gives, per budget, decode-only hit % of per-layer LRU with the uniform
split and with the optimal split fitted on the same trace (an oracle bound), and the same pair
on the second half of the trace's events with the split fitted on the first half only (an honest
estimate: the allocation is learnt on data it is not scored on). See docs/cache-studies.md,
"layer-opt".
"""

from __future__ import annotations

from dataclasses import dataclass

from refsim.cache.batches import BatchTrace
from refsim.cache.expert_cache import ExpertCache
from refsim.cache.policies.layer_opt import (FixedShares, layer_curves, optimal_shares,
                                             slice_events)
from refsim.cache.replay import replay_policy
from refsim.events import DecodeKind


def _decode_pct(r) -> float:
    dec = [int(k) for k in DecodeKind if k != DecodeKind.PREFILL]
    look = int(r.lookups[dec].sum())
    return 100.0 * int(r.hits[dec].sum()) / look if look else 0.0


def fit_then_replay(batches: BatchTrace, budget_bytes: int, split: float = 0.5):
    """Fit layer-opt's shares on the events before ``split`` (a fraction) and replay both
    uniform ``layer`` and those shares on the events after it.

    Returns
    -------
    (uniform, fitted) : tuple of PolicyResult
        Counters over the held-out part only (decode kinds as in the trace).
    """
    n_ev = batches.n_batch // batches.n_layer
    k = int(round(n_ev * split))
    head, tail = slice_events(batches, 0, k), slice_events(batches, k, n_ev)
    counts, _ = optimal_shares(layer_curves(head), batches.expert_bytes, budget_bytes)
    pol = FixedShares([c * int(e) for c, e in zip(counts, batches.expert_bytes)])
    return replay_policy(tail, "layer", budget_bytes), replay_policy(tail, pol, budget_bytes)


@dataclass(frozen=True)
class LayerAllocRow:
    """Decode-only hit % (hits / lookups of non-prefill batches, × 100) at one budget."""

    budget_mib: float
    uniform: float
    optimal: float
    uniform_second_half: float
    fitted_first_half: float


def layer_alloc_report(batches: BatchTrace, budgets_mib, split: float = 0.5) -> list[LayerAllocRow]:
    """One row per budget (MiB, converted as ``--cache-mb``); ``split`` = the fraction of events
    the held-out fit learns on."""
    rows = []
    for mib in budgets_mib:
        b = ExpertCache.mib_to_bytes(mib)
        uni, opt = replay_policy(batches, "layer", b), replay_policy(batches, "layer-opt", b)
        u2, f2 = fit_then_replay(batches, b, split)
        rows.append(LayerAllocRow(float(mib), _decode_pct(uni), _decode_pct(opt), _decode_pct(u2),
                                  _decode_pct(f2)))
    return rows


def format_layer_alloc(rows: list[LayerAllocRow]) -> list[str]:
    """Markdown table lines of :func:`layer_alloc_report`."""
    out = ["| budget MiB | layer (uniform) | layer-opt (fitted on the trace) | gain | "
           "second half: uniform | second half: fitted on first half | gain |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r.budget_mib:g} | {r.uniform:.2f} | {r.optimal:.2f} | "
                   f"{r.optimal - r.uniform:+.2f} | {r.uniform_second_half:.2f} | "
                   f"{r.fitted_first_half:.2f} | {r.fitted_first_half - r.uniform_second_half:+.2f} |")
    return out
