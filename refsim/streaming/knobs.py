"""The engine's streaming knobs that act inside the expert cache: ``--drop-cold-experts``,
``--prefetch``, ``--predict-prefetch`` and route-ahead's early reads (bmoe-engine.md §3.5, §3.6;
engine-docs/expert-dropping.md, prefetch.md, expert-prediction.md, route-ahead.md).

:class:`StreamKnobs` holds the flags and the engine's validation; :class:`~refsim.cache.ExpertCache`
applies them in its one LRU kernel (:mod:`refsim.cache.lru`), for live runs and replays alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from refsim.errors import ConfigError

MAX_PREFETCH = 8
"""Largest ``--prefetch K`` the engine accepts (config.cpp: 0..8)."""

PREDICT_SPEC_MAX_DEFAULT = 2
"""``--predict-spec-max`` default: speculated predicted misses per layer (router_hook.h
``set_predict_prefetch(bool on, int spec_max = 2)``; bmoe-engine.md §3.5: range 0..8)."""

DROP_LOW_TOPK_WARN = 4
"""``MoeStreamConfig::drop_low_topk_warn``: at top-k <= this the engine warns once at load."""


@dataclass(frozen=True)
class StreamKnobs:
    """Cache-side knobs of one run or replay.

    Attributes
    ----------
    drop_frac : float
        ``--drop-cold-experts F``, in [0, 1]; 0 = off.
    drop_renorm : bool
        False with ``--drop-no-renorm``. Changes the forward pass only (survivor weights are
        scaled by total / kept); no byte count depends on it.
    drop_in_prefill : bool
        ``--drop-in-prefill``: arm the policy for prefill graphs (phase 0) too.
    traced : bool
        The run asks for every layer's weight nodes in every graph (``--route-trace``). The drop
        decision point (the terminal weight node) is learned from the first graph that asks for
        weights; until a layer has learned it, the layer loads undropped (router_hook.cpp,
        ``want_weights = trace_on_ || drop_armed()``). A replay models a traced run (a trace
        exists), so its first decode token can drop; an untraced run without
        ``--drop-in-prefill`` never drops its first decode token.
    prefetch : int
        ``--prefetch K``, 0..8; 0 = off.
    route_ahead : int
        ``--route-ahead N``, 0..8; 0 = off. The cache side: in decode graphs after the first,
        layer L+N's committed experts are read early after layer L's load and adopted at the
        hot end (engine-docs/route-ahead.md); the routing itself is the forward pass's. With
        F > 0 only the committed ids that pass the drop-aware filter are read early (rank 0, or
        a stale-ranking weight >= F/k).
    predict_prefetch : bool
        ``--predict-prefetch``: act on the stale-gate prediction (layer t's router on layer
        t-2's gate input, recorded in the event): retain its resident ids, speculate up to
        ``predict_spec_max`` of its misses (expert-prediction.md; :mod:`refsim.cache.lru`).
    predict_spec_max : int
        ``--predict-spec-max``, 0..8 (0 = retention only); read only with ``predict_prefetch``.

    Raises
    ------
    ConfigError
        Naming the flag, if F is not in [0, 1], K, N or the spec max not in 0..8, or two of
        ``--prefetch``, ``--predict-prefetch``, ``--route-ahead`` are set (the engine rejects
        each pair).
    """

    drop_frac: float = 0.0
    drop_renorm: bool = True
    drop_in_prefill: bool = False
    traced: bool = True
    prefetch: int = 0
    route_ahead: int = 0
    predict_prefetch: bool = False
    predict_spec_max: int = PREDICT_SPEC_MAX_DEFAULT

    def __post_init__(self) -> None:
        f = self.drop_frac
        if not (isinstance(f, (int, float)) and math.isfinite(f) and 0.0 <= f <= 1.0):
            raise ConfigError(f"--drop-cold-experts: expected a fraction in [0, 1] of the uniform "
                              f"share 1/k (0 = off), got {f!r}")
        for flag, k in (("--prefetch", self.prefetch), ("--route-ahead", self.route_ahead),
                        ("--predict-spec-max", self.predict_spec_max)):
            if not (isinstance(k, int) and 0 <= k <= MAX_PREFETCH):
                raise ConfigError(f"{flag}: expected an integer in 0..{MAX_PREFETCH}, got {k!r}")
        if self.prefetch and self.route_ahead:
            raise ConfigError("--route-ahead and --prefetch: mutually exclusive (the engine rejects "
                              "speculating on a routing the policy has already fixed)")
        if self.predict_prefetch and self.prefetch:
            raise ConfigError("--predict-prefetch and --prefetch: mutually exclusive (the engine "
                              "feeds one predictor to the speculative read path)")
        if self.predict_prefetch and self.route_ahead:
            raise ConfigError("--route-ahead and --predict-prefetch: mutually exclusive (the "
                              "engine rejects speculating on a routing the policy has already fixed)")

    @property
    def drop_on(self) -> bool:
        """True when ``--drop-cold-experts`` is armed (F > 0)."""
        return self.drop_frac > 0.0

    @property
    def any_on(self) -> bool:
        """True when a knob changes what the cache does."""
        return (self.drop_on or self.prefetch > 0 or self.route_ahead > 0
                or self.predict_prefetch)

    @property
    def spec_max(self) -> int:
        """The kernel's ``spec_max``: ``predict_spec_max`` with ``--predict-prefetch``, else -1."""
        return self.predict_spec_max if self.predict_prefetch else -1

    def drop_threshold(self, k: int) -> np.float32:
        """``F / k`` in float32, as router_hook.cpp computes it (``drop_frac_ / (float) nu``)."""
        return np.float32(np.float32(self.drop_frac) / np.float32(k))

    def armed(self, phase: int) -> bool:
        """Whether the drop policy is armed for a graph of trace ``phase`` (0 prefill, 1 decode)."""
        return self.drop_on and (phase == 1 or self.drop_in_prefill)


def low_topk_warning(knobs: StreamKnobs, k: int) -> str | None:
    """The engine's load-time warning when dropping is armed on a routing of k <= 4 experts
    (expert-dropping.md, "Narrow routings"), or None; the text alone (the caller adds ``refsim
    CMD: warning:``, :func:`refsim.errors.warning_line`)."""
    if not knobs.drop_on or k > DROP_LOW_TOPK_WARN:
        return None
    return (f"drop-cold-experts={knobs.drop_frac:g} with top-k {k} — the threshold "
            f"is {100 * knobs.drop_frac / k:.1f}% of the routing here, against "
            f"{100 * knobs.drop_frac / 8:.1f}% at the top-k 8 this was measured on. Expect it to "
            f"discard much more, and check output quality on your own task.")
