"""The decode event: the one seam between whatever produces routes and whatever counts bytes.

A live run (``refsim.spec`` driving ``refsim.forward``) and a trace replay (``refsim.trace``)
both produce a sequence of :class:`DecodeEvent`; ``refsim.cache`` consumes it. Nothing else
crosses that seam, so every number a live run prints can be reproduced from its route trace.

One event is one graph the engine would evaluate: a prefill chunk, a plain one-token decode,
a verify decode of ``[tok, d1..dn]``, or a decode of the MTP draft context. Per layer, the
engine's expert source sees one ``load_layer`` call holding the ids of every position of
the event (docs/architecture.md, "Decode events").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

NOT_ROUTED = -1
"""Expert id used in ``routes`` for a (position, layer) the graph did not route.

Where a recording's llama.cpp graph routes the last MoE layer only for positions that produce
logits (the FINAL last-layer convention, :mod:`refsim.trace.convention`; e.g. qwen3moe), a
prefill event carries ``NOT_ROUTED`` at the last layer on every position but the last
(bmoe-engine.md §3.2, prefill quirk (a)); under the EVERY convention (e.g. the engine's gemma4
recording) every position is routed there. An ``--mtp`` trace's head layer is ``NOT_ROUTED``
everywhere."""


class DecodeKind(IntEnum):
    """What kind of graph an event is. Values are stable; they may be written to files.

    ``PREFILL`` and ``DRAFT_PREFILL`` are prefill (trace phase 0); the others are decodes
    (phase 1). ``DRAFT`` is a decode of the MTP draft context during generation (drafting or
    catch-up): its reads are the head's own routing in the flash split. ``DRAFT_PREFILL`` is
    the draft context's pass over the prompt: its lookups count in the cumulative hit rate and
    its reads, like all prefill reads, stay out of ``read_MiB`` (bmoe-engine.md §2 "Prefill",
    §3.7). The engine never writes draft-context rows to a route trace (§4.5).
    """

    PREFILL = 0
    PLAIN = 1
    VERIFY = 2
    DRAFT = 3
    DRAFT_PREFILL = 4

    @property
    def phase(self) -> int:
        """Route-trace ``phase`` column: 0 for prefill, 1 for every decode kind."""
        return 0 if self in (DecodeKind.PREFILL, DecodeKind.DRAFT_PREFILL) else 1

    @property
    def draft_context(self) -> bool:
        """True for the MTP draft context's graphs (never written to route traces)."""
        return self in (DecodeKind.DRAFT, DecodeKind.DRAFT_PREFILL)


@dataclass(frozen=True, eq=False)
class DecodeEvent:
    """One graph evaluation and the experts it routed.

    Parameters
    ----------
    kind : DecodeKind
        Prefill chunk, plain decode, verify decode or MTP draft-context decode.
    positions : (n_pos,) int64 ndarray
        Absolute context position of each fed token (the trace's ``step``).
    routes : (n_pos, n_layer, k) int16 ndarray
        Router-selected expert ids, slot 0 = top weight; ``NOT_ROUTED`` (-1) where the graph
        did not route that (position, layer). ``n_layer`` is the streamed layer span (with
        ``--mtp`` the head sits at index ``n_layer`` of the trunk).
    weights : (n_pos, n_layer, k) float32 ndarray, optional
        Final applied routing weights (NaN where unknown or not routed).
    tokens : (n_pos,) int32 ndarray, optional
        Token ids fed (unknown for events read from a route trace).
    dropped : (n_pos, n_layer, k) bool ndarray, optional
        Slots removed by ``--drop-cold-experts``; a dropped slot is never looked up
        (bmoe-engine.md §3.6).
    turn : int
        Session turn (0 for one-shot runs).
    n_draft : int
        Draft tokens carried (verify decodes: ``n_pos - 1``; 0 otherwise).
    accepted : int or None
        Draft tokens accepted by this verify decode; None when unknown (trace replay) or
        not a verify decode.
    pred_routes : (n_pos, n_layer, k) int16 ndarray, optional
        The stale-gate ranking of layer t's router on an earlier layer's gate input, where the
        graph made one (the batch's last position; ``--predict-prefetch``: from layer t-2,
        ``--route-ahead N``: from layer t-N, then equal to ``routes`` there); -1 elsewhere.
        None when no predictor ran (the trace's ``pred_expert`` column).
    pred_weights : (n_pos, n_layer, k) float32 ndarray, optional
        The softmax over that ranking's top-k (NaN where none): what the drop-aware filter
        compares with F/k (the trace's ``pred_weight`` column).

    Raises
    ------
    ValueError
        If the array shapes disagree with each other.
    """

    kind: DecodeKind
    positions: np.ndarray
    routes: np.ndarray
    weights: np.ndarray | None = None
    tokens: np.ndarray | None = None
    dropped: np.ndarray | None = None
    turn: int = 0
    n_draft: int = 0
    accepted: int | None = None
    pred_routes: np.ndarray | None = None
    pred_weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.routes.ndim != 3:
            raise ValueError(f"routes must be (n_pos, n_layer, k), got shape {self.routes.shape}")
        n_pos = self.routes.shape[0]
        if self.positions.shape != (n_pos,):
            raise ValueError(
                f"positions shape {self.positions.shape} does not match routes' n_pos={n_pos}"
            )
        if (self.pred_routes is None) != (self.pred_weights is None):
            raise ValueError("pred_routes and pred_weights go together")
        for name in ("weights", "dropped", "pred_routes", "pred_weights"):
            arr = getattr(self, name)
            if arr is not None and arr.shape != self.routes.shape:
                raise ValueError(f"{name} shape {arr.shape} != routes shape {self.routes.shape}")
        if self.tokens is not None and self.tokens.shape != (n_pos,):
            raise ValueError(f"tokens shape {self.tokens.shape} != ({n_pos},)")

    @property
    def n_pos(self) -> int:
        """Number of positions (tokens) in the graph."""
        return int(self.routes.shape[0])

    @property
    def n_layer(self) -> int:
        """Streamed layer span of ``routes``."""
        return int(self.routes.shape[1])

    @property
    def phase(self) -> int:
        """Route-trace phase: 0 prefill, 1 decode."""
        return self.kind.phase

    def layer_ids(self, layer: int) -> np.ndarray:
        """Token-major expert ids the engine's ``load_layer`` would receive for one layer.

        Returns
        -------
        (m,) int64 ndarray
            Ids over positions then slots, without ``NOT_ROUTED`` and dropped slots;
            duplicates kept (the cache dedups them).
        """
        ids = self.routes[:, layer, :]
        keep = ids >= 0
        if self.dropped is not None:
            keep &= ~self.dropped[:, layer, :]
        return ids[keep].astype(np.int64)


def confirmed_tokens(event: DecodeEvent) -> int:
    """Tokens a target decode confirmed (the unit of MiB/token and tok/s).

    A plain decode confirms 1; a verify decode ``accepted + 1`` (the target's own next token
    after the accepted prefix; bmoe-engine.md §2 step 5). When ``accepted`` is unknown (the
    last verify decode of a turn read from a trace) the minimum, 1, is counted. Prefill and
    draft-context decodes confirm none.
    """
    if event.kind is DecodeKind.PLAIN:
        return 1
    if event.kind is DecodeKind.VERIFY:
        return 1 + (event.accepted or 0)
    return 0


N_KINDS = len(DecodeKind)
"""Number of decode kinds: the length of every per-kind counter array."""


@dataclass(frozen=True, eq=False)
class EventBlock:
    """A run of decode events in columnar form: the events' per-position arrays laid end to end
    along the position axis, and one entry per event for the rest.

    The route-trace reader builds one per trace (or per turn when streaming) without a Python
    object per event, and :meth:`refsim.cache.ExpertCache.apply_block` replays it in one kernel
    call; :meth:`event` gives event ``i`` as a :class:`DecodeEvent` whose arrays are views of
    the block's, so every consumer of events reads the same values.

    Parameters
    ----------
    positions : (P,) int64 ndarray
        Every event's positions, event after event (P = total positions).
    routes : (P, n_layer, k) int16 ndarray
    weights : (P, n_layer, k) float32 ndarray
    dropped : (P, n_layer, k) bool ndarray or None
        None when no event carries drops.
    event_start : (n_events + 1,) int64 ndarray
        Event ``i`` is positions ``event_start[i]:event_start[i + 1]`` (non-decreasing, from 0
        to P).
    kind : (n_events,) int8 ndarray
        :class:`DecodeKind` values. ``n_draft`` is ``n_pos - 1`` for a verify decode, else 0.
    turn : (n_events,) int64 ndarray
    accepted : (n_events,) int64 ndarray
        Drafts a verify decode accepted; -1 where unknown or not a verify decode.
    has_dropped : (n_events,) bool ndarray or None
        Which events carry a ``dropped`` mask (the others' is None); None = none does.
    pred_routes, pred_weights : (P, n_layer, k) ndarray or None
        As :class:`DecodeEvent`'s, for every event or for none.

    Raises
    ------
    ValueError
        If the shapes disagree.
    """

    positions: np.ndarray
    routes: np.ndarray
    weights: np.ndarray
    dropped: np.ndarray | None
    event_start: np.ndarray
    kind: np.ndarray
    turn: np.ndarray
    accepted: np.ndarray
    has_dropped: np.ndarray | None = None
    pred_routes: np.ndarray | None = None
    pred_weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        p = self.positions.shape[0]
        if self.routes.ndim != 3 or self.routes.shape[0] != p:
            raise ValueError(f"routes must be (P={p}, n_layer, k), got {self.routes.shape}")
        for name in ("weights", "dropped", "pred_routes", "pred_weights"):
            arr = getattr(self, name)
            if arr is not None and arr.shape != self.routes.shape:
                raise ValueError(f"{name} shape {arr.shape} != routes shape {self.routes.shape}")
        n = self.kind.shape[0]
        st = self.event_start
        if st.shape != (n + 1,) or (n + 1 and (st[0] != 0 or st[-1] != p or (np.diff(st) < 0).any())):
            raise ValueError(f"event_start must run from 0 to P={p} over {n} events")
        for name in ("turn", "accepted", "has_dropped"):
            arr = getattr(self, name)
            if arr is not None and arr.shape != (n,):
                raise ValueError(f"{name} shape {arr.shape} != ({n},)")

    @property
    def n_events(self) -> int:
        """Number of events."""
        return int(self.kind.shape[0])

    def event(self, i: int) -> DecodeEvent:
        """Event ``i`` as a :class:`DecodeEvent` (its arrays are views of the block's)."""
        a, b = int(self.event_start[i]), int(self.event_start[i + 1])
        kind = DecodeKind(int(self.kind[i]))
        acc = int(self.accepted[i])
        drop = None
        if self.dropped is not None and (self.has_dropped is None or self.has_dropped[i]):
            drop = self.dropped[a:b]
        pred = {}
        if self.pred_routes is not None:
            pred = {"pred_routes": self.pred_routes[a:b], "pred_weights": self.pred_weights[a:b]}
        return DecodeEvent(kind=kind, positions=self.positions[a:b], routes=self.routes[a:b],
                           weights=self.weights[a:b], dropped=drop, turn=int(self.turn[i]),
                           n_draft=b - a - 1 if kind is DecodeKind.VERIFY else 0,
                           accepted=acc if acc >= 0 else None, **pred)

    def events(self) -> list[DecodeEvent]:
        """Every event, in order (:meth:`event` of each)."""
        return [self.event(i) for i in range(self.n_events)]

    def confirmed_tokens(self) -> int:
        """Σ :func:`confirmed_tokens` over the events: 1 per plain decode, 1 + accepted (0 when
        unknown) per verify decode."""
        plain = int(np.count_nonzero(self.kind == DecodeKind.PLAIN))
        verify = self.kind == DecodeKind.VERIFY
        return plain + int(np.count_nonzero(verify)) + int(np.maximum(self.accepted[verify], 0).sum())

    @classmethod
    def from_events(cls, events: list[DecodeEvent], n_layer: int | None = None,
                    k: int | None = None) -> "EventBlock":
        """The block of ``events`` (copies of their arrays; ``tokens`` are not kept).

        Parameters
        ----------
        n_layer, k : int, optional
            The shape of an empty block (``events`` = []); otherwise every event's.

        Raises
        ------
        ValueError
            If the events' (n_layer, k) differ, some but not all carry a ranking, or an event's
            ``n_draft`` is not ``n_pos - 1`` (verify) or 0 (otherwise).
        """
        if events:
            n_layer, k = events[0].routes.shape[1:]
        shape = (0, n_layer or 0, k or 0)
        for ev in events:
            if ev.routes.shape[1:] != shape[1:]:
                raise ValueError(f"events of shapes {shape[1:]} and {ev.routes.shape[1:]}")
            want = ev.n_pos - 1 if ev.kind is DecodeKind.VERIFY else 0
            if ev.n_draft != want:
                raise ValueError(f"a {ev.kind.name} event with n_draft={ev.n_draft}, expected {want}")
        with_pred = {ev.pred_routes is not None for ev in events}
        if len(with_pred) > 1:
            raise ValueError("some events carry a ranking (pred_routes) and some do not")

        def cat(get, dtype, fill):
            parts = [get(ev) for ev in events]
            parts = [np.full(ev.routes.shape, fill, dtype) if a is None else a
                     for a, ev in zip(parts, events)]
            return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(shape, dtype)

        has_drop = np.array([ev.dropped is not None for ev in events], dtype=bool)
        pred = with_pred == {True}
        start = np.zeros(len(events) + 1, np.int64)
        np.cumsum([ev.n_pos for ev in events], out=start[1:])
        return cls(
            positions=(np.concatenate([np.asarray(ev.positions, np.int64) for ev in events])
                       if events else np.zeros(0, np.int64)),
            routes=cat(lambda ev: ev.routes, np.int16, -1),
            weights=cat(lambda ev: ev.weights, np.float32, np.nan),
            dropped=cat(lambda ev: ev.dropped, np.bool_, False) if has_drop.any() else None,
            event_start=start, kind=np.array([int(ev.kind) for ev in events], np.int8),
            turn=np.array([ev.turn for ev in events], np.int64),
            accepted=np.array([-1 if ev.accepted is None else ev.accepted for ev in events],
                              np.int64),
            has_dropped=has_drop if has_drop.any() else None,
            pred_routes=cat(lambda ev: ev.pred_routes, np.int16, -1) if pred else None,
            pred_weights=cat(lambda ev: ev.pred_weights, np.float32, np.nan) if pred else None)
