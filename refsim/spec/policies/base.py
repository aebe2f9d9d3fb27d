"""The draft-policy seam: what a policy sees each step and how it is found by name.

A policy is asked once per step, after the draft source proposed its candidate and before the
target decode, how many of the candidate's tokens to verify (0 = a plain one-token decode). It
never changes a token, only the width, so every policy here is lossless: the emitted tokens are
greedy's whatever the width (bmoe-engine.md §2 "Per step": greedy acceptance emits the target's
argmax at every position it decodes). After the decode the loop reports the outcome
(:meth:`DraftPolicy.observe`) so a policy can keep running statistics.

The registry is explicit (:data:`POLICIES`, filled by :mod:`refsim.spec.policies`' imports in
order), as :mod:`refsim.cache.policies` does for cache policies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from refsim.errors import UsageError

POLICIES: dict[str, type["DraftPolicy"]] = {}
"""Policy name -> class, in registration order (``--spec-policy NAME``)."""


@dataclass
class AcceptStats:
    """Running acceptance statistics of one generation.

    Attributes
    ----------
    steps : int
        Verify decodes observed (steps that carried at least one draft token).
    drafted, accepted : int
        Draft tokens verified and accepted over those steps.
    tried : (8,) int64 ndarray
        ``tried[i]``: verify decodes that checked position ``i + 1`` with ``1..i`` accepted
        (width > i and ``n_acc >= i``).
    passed : (8,) int64 ndarray
        ``passed[i]``: of those, how many accepted position ``i + 1``.
    """

    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    tried: np.ndarray = field(default_factory=lambda: np.zeros(8, np.int64))
    passed: np.ndarray = field(default_factory=lambda: np.zeros(8, np.int64))

    def observe(self, n: int, n_acc: int) -> None:
        """Record one decode that verified ``n`` draft tokens and accepted ``n_acc`` of them
        (plain decodes, ``n == 0``, change nothing)."""
        if n <= 0:
            return
        self.steps += 1
        self.drafted += n
        self.accepted += n_acc
        self.tried[:min(n, n_acc + 1)] += 1
        self.passed[:n_acc] += 1

    def p_accept(self, i: int, prior: float = 1.0) -> float:
        """Conditional acceptance of position ``i + 1`` given positions ``1..i`` were accepted,
        a Beta(prior, prior) posterior mean: ``(passed[i] + prior) / (tried[i] + 2 prior)``."""
        return float((self.passed[i] + prior) / (self.tried[i] + 2.0 * prior))


@dataclass(frozen=True)
class StepView:
    """What a draft policy sees at one step (read-only).

    Attributes
    ----------
    candidate : (n,) int64 ndarray
        The draft source's tokens ``d1..dn`` (already cut to ``min(draft_max, room)``).
    probs : (n,) float ndarray or None
        The MTP head's top-1 probability of each candidate token; None for n-gram.
    draft_max : int
        ``--draft N``.
    resident : (n_layer, n_expert) bool ndarray or None
        Cache residency now (None without a cache).
    expert_bytes : (n_layer,) int64 ndarray or None
        Bytes of one expert per layer (the cost of a miss).
    pred_routes : (n + 1, n_layer, k) int16 ndarray or None
        Predicted routes of positions ``tok, d1..dn`` (-1 = unknown), where a predictor exists
        (:class:`refsim.spec.policies.predict.RouteMemory`); None otherwise.
    stats : AcceptStats
        Running acceptance statistics.
    device : object or None
        The device model (:class:`refsim.timing.model.DeviceModel`) when one is loaded.
    """

    candidate: np.ndarray
    probs: np.ndarray | None
    draft_max: int
    resident: np.ndarray | None
    expert_bytes: np.ndarray | None
    pred_routes: np.ndarray | None
    stats: AcceptStats
    device: object | None = None


class DraftPolicy:
    """Base of every draft policy: ``width(view) -> int`` in ``0..len(view.candidate)``.

    Subclasses set ``name`` and ``PARAMS`` (key -> (type, default, check text)), are registered
    by :func:`register`, and read their parameters from ``self.params``.

    Parameters
    ----------
    **params
        ``--spec-policy NAME:key=value,...`` values (already typed).

    Raises
    ------
    UsageError
        For an unknown key.
    """

    name = ""
    lossy = False
    PARAMS: dict = {}

    def __init__(self, **params):
        unknown = sorted(set(params) - set(self.PARAMS))
        if unknown:
            raise UsageError(f"--spec-policy {self.name}: unknown key {unknown[0]!r} (expected "
                             f"{', '.join(self.PARAMS) or 'no keys'})")
        self.params = {k: params.get(k, d) for k, (_, d, _) in self.PARAMS.items()}
        self.stats = AcceptStats()

    def width(self, view: StepView) -> int:
        raise NotImplementedError

    def observe(self, n: int, n_acc: int) -> None:
        """The decode verified ``n`` draft tokens and accepted ``n_acc``."""
        self.stats.observe(n, n_acc)

    @property
    def wants_view(self) -> bool:
        """The policy reads residency or predicted routes (the loop builds them only then)."""
        return True

    def label(self) -> str:
        """``name`` or ``name:key=value,...`` for the non-default parameters."""
        kv = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
              for k, v in self.params.items() if v != self.PARAMS[k][1]]
        return self.name + (":" + ",".join(kv) if kv else "")


def register(cls: type[DraftPolicy]) -> type[DraftPolicy]:
    """Class decorator: add ``cls`` to :data:`POLICIES` under ``cls.name``."""
    POLICIES[cls.name] = cls
    return cls


def parse_spec_policy(text: str) -> DraftPolicy:
    """Build the policy ``--spec-policy NAME[:key=value,...]`` names.

    Raises
    ------
    UsageError
        An unknown name or key, a value of the wrong type, or one its check refuses, e.g.
        ``argument --spec-policy: backoff key 'patience' expects an integer >= 1, got 'x'``.
    """
    name, _, rest = str(text).partition(":")
    cls = POLICIES.get(name)
    if cls is None:
        raise UsageError(f"argument --spec-policy: expected one of {', '.join(POLICIES)} "
                         f"[:key=value,...], got {name!r}")
    params = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or key not in cls.PARAMS:
            raise UsageError(f"argument --spec-policy: {name} expects key=value with key one of "
                             f"{', '.join(cls.PARAMS) or '(none)'}, got {item!r}")
        typ, _, check = cls.PARAMS[key]
        try:
            val = typ(value)
        except ValueError:
            val = None
        if val is None or not _CHECKS[check](val):
            raise UsageError(f"argument --spec-policy: {name} key {key!r} expects {check}, "
                             f"got {value!r}")
        params[key] = val
    return cls(**params)


_CHECKS = {
    "an integer >= 0": lambda v: v >= 0,
    "an integer >= 1": lambda v: v >= 1,
    "a number >= 0": lambda v: np.isfinite(v) and v >= 0,
    "a number > 0": lambda v: np.isfinite(v) and v > 0,
}
