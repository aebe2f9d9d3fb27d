"""Scripted targets: fast, deterministic stand-ins for a model, for tests and demos.

A :class:`ScriptedTarget` predicts the next token with a plain function of the context (the
tokens at positions ``0..p``), so it is *batch-invariant*: row ``p`` of any decode depends only
on the prefix, never on what else shares the batch. With such a target, speculative greedy
decoding must produce exactly the plain greedy sequence for every draft width and min-match
(the engine's "draft 1 and draft 3 produce identical text" gate). A :class:`ScriptedRouter`
gives every position deterministic expert ids per layer (a function of the token at that
position and the one before), so the cache has something to count and re-decoded positions
route the same way.

Scripts:

- :class:`MarkovScript` — next token = a fixed table lookup of the last ``order`` tokens
  (hashed); deterministic Markov chains fall into cycles, so text is copy-heavy.
- :class:`DocumentScript` — next token = ``document[p + 1]`` (the target "knows" a fixed
  text and recites it; EOG after its end).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from refsim.errors import ConfigError
from refsim.events import NOT_ROUTED
from refsim.spec.target import TargetOutput
from refsim.streaming.hooks import LayerHooks

_MIX = np.uint64(0x9E3779B97F4A7C15)


def _hash_ints(values: np.ndarray, salt: int) -> int:
    """A deterministic 63-bit hash of a small int64 array (splitmix-style mixing)."""
    with np.errstate(over="ignore"):
        h = np.uint64(salt) * _MIX + np.uint64(0x632BE59BD9B4E019)
        for v in values.astype(np.uint64).tolist():
            h = (h ^ np.uint64(v)) * _MIX
            h ^= h >> np.uint64(31)
    return int(h & np.uint64(0x7FFFFFFFFFFFFFFF))


@dataclass(frozen=True)
class MarkovScript:
    """Next token from the last ``order`` tokens through a hashed table.

    Parameters
    ----------
    table : (size,) int64 ndarray
        Next-token table; entry ``hash(last order tokens) % size``.
    order : int
        Context tokens used (>= 1).
    """

    table: tuple[int, ...]
    order: int = 2

    def __call__(self, context: np.ndarray) -> int:
        ctx = context[-self.order:]
        return int(self.table[_hash_ints(ctx, len(ctx)) % len(self.table)])


@dataclass(frozen=True)
class DocumentScript:
    """Recite a fixed document: the prediction after position ``p`` is ``document[p + 1]``.

    Past the end it predicts ``eos``.
    """

    document: tuple[int, ...]
    eos: int = 0

    def __call__(self, context: np.ndarray) -> int:
        p = context.size
        return int(self.document[p]) if p < len(self.document) else self.eos


@dataclass(frozen=True)
class ScriptedRouter:
    """Deterministic top-k routes per (position, layer).

    Expert ids at layer ``l`` for a position holding token ``t`` after token ``t_prev``:
    ``perm_l[(h + j * stride) % n_expert]`` for slot ``j``, with
    ``h = (a_l * t + b_l * t_prev) % n_expert``, ``perm_l`` a fixed permutation and ``stride``
    coprime with ``n_expert`` — so the k ids are distinct. Weights are ``1/(j+1)`` normalised.
    """

    n_layer: int
    n_expert: int
    k: int
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.n_layer >= 1 and 1 <= self.k <= self.n_expert):
            raise ConfigError(f"router needs n_layer >= 1 and 1 <= k <= n_expert, got "
                              f"{self.n_layer}, {self.k}, {self.n_expert}")

    @cached_property
    def _tables(self):
        rng = np.random.default_rng(self.seed)
        perms = np.stack([rng.permutation(self.n_expert) for _ in range(self.n_layer)])
        a = rng.integers(1, 1 << 20, size=self.n_layer)
        b = rng.integers(0, 1 << 20, size=self.n_layer)
        stride = 1
        for s in range(self.n_expert // 2 + 1, 0, -1):
            if np.gcd(s, self.n_expert) == 1:
                stride = s
                break
        return perms, a, b, stride

    def route(self, tokens: np.ndarray, prev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Routes for positions holding ``tokens`` (n,) after ``prev`` (n,) (-1 at position 0).

        Returns
        -------
        routes : (n, n_layer, k) int16 ndarray
        weights : (n, n_layer, k) float32 ndarray
        """
        perms, a, b, stride = self._tables
        t = tokens.astype(np.int64)[:, None]
        tp = (prev.astype(np.int64) + 1)[:, None]
        h = (a[None, :] * t + b[None, :] * tp) % self.n_expert            # [n, n_layer]
        slots = (h[:, :, None] + stride * np.arange(self.k)) % self.n_expert  # [n, n_layer, k]
        routes = perms[np.arange(self.n_layer)[None, :, None], slots].astype(np.int16)
        w = 1.0 / np.arange(1, self.k + 1)
        weights = np.broadcast_to((w / w.sum()).astype(np.float32), routes.shape).copy()
        return routes, weights


class ScriptedTarget:
    """A :class:`refsim.spec.target.Target` whose prediction is a function of the context.

    Parameters
    ----------
    script : callable
        ``script(context (p + 1,) int64 ndarray) -> int``: the token after position ``p``.
    router : ScriptedRouter, optional
        Routes per position; None = no routed experts (``n_layer = 0``).
    eos_ids : collection of int
        End-of-generation ids.
    n_vocab : int, optional
        When given, outputs are one-hot logits ``(n, n_vocab)`` float32 instead of ids
        (exercises the logits path).

    Notes
    -----
    The KV is the list of fed tokens; ``decode`` requires positions that continue it
    (``positions[0] == len(kv)``, contiguous), as the engine's KV does after ``trim``.
    Prefill routes the last layer only at the last prompt position (bmoe-engine.md §3.2 (a)).
    """

    def __init__(self, script: Callable[[np.ndarray], int], router: ScriptedRouter | None = None,
                 eos_ids: Collection[int] = (), n_vocab: int | None = None):
        self.script = script
        self.router = router
        self.eos_ids = frozenset(int(t) for t in eos_ids)
        self.n_vocab = n_vocab
        self.n_layer = router.n_layer if router else 0
        self.n_expert = router.n_expert if router else 0
        self.n_expert_used = router.k if router else 0
        self._kv: list[int] = []
        self.n_decodes = 0
        """Target decodes so far (prefill excluded)."""
        self.hooks = LayerHooks()
        """The streaming hooks (:class:`refsim.spec.target.Target`). ``hooks.gate``, the drop seam
        for the next prefill/decode (set by the loop): each layer's scripted routing goes through
        :func:`refsim.streaming.drop.gate_layer` (there is no computation to change, so only the
        cache sees the drops). ``hooks.predictor``, a
        :class:`refsim.streaming.stale_gate.PredictPrefetch` (``--predict-prefetch``): every decode
        graph after the first ranks layer il+2 ahead with a scripted stale gate (:meth:`_stale`),
        reported to the drop seam and recorded in the output. The probe and route-ahead are not
        scripted (``hooks.probe`` / ``hooks.ahead`` are not read)."""

    @staticmethod
    def _stale(routes: np.ndarray, weights: np.ndarray, row: int, t: int, n_expert: int):
        """A scripted stale gate for layer t at position ``row``: scores that favour layer t's
        own routing (by weight) and add layer t-1's, so the ranking is right on part of its
        slots. Returns ``(ids (1, k) int16, scores (1, n_expert) float32)``."""
        k = routes.shape[2]
        sc = np.zeros(n_expert, np.float32)
        sc[routes[row, t]] += 2.0 * weights[row, t]
        sc[routes[row, t - 1]] += 1.5 * np.nan_to_num(weights[row, t - 1])
        order = np.argsort(-sc, kind="stable")[:k]
        return order[None, :].astype(np.int16), sc[None, :]

    def __repr__(self) -> str:
        return (f"ScriptedTarget({self.script!r}, router={self.router!r}, "
                f"eos_ids={sorted(self.eos_ids)}, n_vocab={self.n_vocab})")

    def fresh(self) -> "ScriptedTarget":
        """A new target with the same script and router and an empty KV."""
        return ScriptedTarget(self.script, self.router, self.eos_ids, self.n_vocab)

    @property
    def n_past(self) -> int:
        """Positions in the KV."""
        return len(self._kv)

    def _rows(self, start: int, n: int) -> np.ndarray:
        kv = np.asarray(self._kv, dtype=np.int64)
        return np.array([self.script(kv[: start + i + 1]) for i in range(n)], dtype=np.int64)

    def _output(self, ids: np.ndarray, routes, weights, phase: int = 1) -> TargetOutput:
        dropped = pr = pw = None
        gate = self.hooks.gate
        pred = self.hooks.predictor if routes is not None else None
        if pred is not None:
            from refsim.streaming.stale_gate import predict_layer
            pred.begin_graph(phase)
            pr = np.full(routes.shape, -1, np.int16)
            pw = np.full(routes.shape, np.nan, np.float32)
            last = routes.shape[0] - 1

            def stale(t, x):
                return self._stale(routes, weights, last, t, self.n_expert)
        if (gate is not None or pred is not None) and routes is not None:
            from refsim.streaming.drop import gate_layer
            dropped = np.zeros(routes.shape, bool)
            for il in range(routes.shape[1]):
                if pred is not None:
                    predict_layer(pred, il, None, stale, last, pr, pw, gate)
                rows = np.flatnonzero((routes[:, il] >= 0).any(axis=1))
                if rows.size and gate is not None:
                    _, _, dropped[rows, il] = gate_layer(gate, il, rows, routes[rows, il],
                                                         weights[rows, il])
        extra = dict(routes=routes, weights=weights, dropped=dropped, pred_routes=pr,
                     pred_weights=pw)
        if self.n_vocab is None:
            return TargetOutput(ids=ids.astype(np.int32), **extra)
        logits = np.zeros((ids.size, self.n_vocab), dtype=np.float32)
        logits[np.arange(ids.size), ids] = 1.0
        return TargetOutput(logits=logits, **extra)

    def _routes(self, start: int, n: int):
        if self.router is None:
            return None, None
        kv = np.asarray(self._kv, dtype=np.int64)
        toks = kv[start:start + n]
        prev = np.concatenate(([-1], kv))[start:start + n]
        return self.router.route(toks, prev)

    def prefill(self, tokens) -> TargetOutput:
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if self._kv:
            raise ConfigError("ScriptedTarget.prefill: the KV is not empty (one-shot only)")
        self._kv.extend(tokens.tolist())
        n = tokens.size
        routes, weights = self._routes(0, n)
        if routes is not None:
            routes[:-1, -1, :] = NOT_ROUTED
            weights[:-1, -1, :] = np.nan
        return self._output(self._rows(n - 1, 1), routes, weights, phase=0)

    def decode(self, tokens, positions) -> TargetOutput:
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        positions = np.asarray(positions, dtype=np.int64).reshape(-1)
        start = len(self._kv)
        if positions.shape != tokens.shape or not np.array_equal(
                positions, start + np.arange(tokens.size)):
            raise ConfigError(f"ScriptedTarget.decode: positions {positions.tolist()} do not "
                              f"continue the KV (length {start})")
        self._kv.extend(tokens.tolist())
        self.n_decodes += 1
        routes, weights = self._routes(start, tokens.size)
        return self._output(self._rows(start, tokens.size), routes, weights)

    def trim(self, n_keep: int) -> None:
        if not 0 <= n_keep <= len(self._kv):
            raise ConfigError(f"ScriptedTarget.trim({n_keep}): KV has {len(self._kv)} positions")
        del self._kv[n_keep:]


def greedy_reference(script: Callable[[np.ndarray], int], prompt, n_predict: int,
                     eos_ids: Collection[int] = ()) -> np.ndarray:
    """Plain greedy generation straight from a script (no loop, no KV): the oracle.

    Returns
    -------
    (n,) int32 ndarray
        Up to ``n_predict`` tokens, stopping before the first EOG.
    """
    ctx = [int(t) for t in np.asarray(prompt).reshape(-1)]
    out: list[int] = []
    eos = frozenset(int(t) for t in eos_ids)
    tok = script(np.asarray(ctx, dtype=np.int64))
    while len(out) < n_predict and tok not in eos:
        out.append(tok)
        ctx.append(tok)
        tok = script(np.asarray(ctx, dtype=np.int64))
    return np.asarray(out, dtype=np.int32)


def copy_heavy_document(n_tokens: int, n_vocab: int = 64, seed: int = 0,
                        copy_frac: float = 0.6) -> tuple[int, ...]:
    """A seeded token document where about ``copy_frac`` of the text copies earlier spans.

    Built segment by segment: with probability ``copy_frac`` a span of 4-16 tokens copied from
    anywhere earlier, otherwise 2-8 fresh tokens in ``1..n_vocab-1`` (0 is left for EOG).
    Recited by :class:`DocumentScript`, it is the scripted stand-in for the engine's
    copy-heavy prompt (bmoe-engine.md §7, n-gram vs MTP).

    Returns
    -------
    tuple of int
        Exactly ``n_tokens`` ids.
    """
    rng = np.random.default_rng(seed)
    doc: list[int] = rng.integers(1, n_vocab, size=8).tolist()
    while len(doc) < n_tokens:
        if rng.random() < copy_frac:
            n = int(rng.integers(4, 17))
            a = int(rng.integers(0, max(1, len(doc) - n)))
            doc.extend(doc[a:a + n])
        else:
            doc.extend(rng.integers(1, n_vocab, size=int(rng.integers(2, 9))).tolist())
    return tuple(int(t) for t in doc[:n_tokens])
