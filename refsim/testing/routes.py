"""A seeded synthetic router: route streams with the reuse a real MoE shows, for demos and tests.

Not a model of any real network. Each layer has a fixed popularity (Zipf over a per-layer
permutation of the experts), and each position keeps each of the previous position's experts
with probability ``reuse`` before filling the rest of its top-k by popularity. The real
Qwen3-30B-A3B trace shows about 38 % previous-token overlap (bmoe-engine.md §7, prefetch
predictor accuracy); ``reuse=0.4`` gives the same order.
"""

from __future__ import annotations

import numpy as np

from refsim.events import NOT_ROUTED, DecodeEvent, DecodeKind
from refsim.trace.convention import EVERY, FINAL


def synthetic_routes(n_pos: int, n_layer: int, n_expert: int, k: int, seed: int = 0,
                     reuse: float = 0.4, zipf_s: float = 1.1) -> np.ndarray:
    """Route ids for ``n_pos`` consecutive positions.

    Returns
    -------
    (n_pos, n_layer, k) int16 ndarray
        Distinct ids per (position, layer), slot 0 first.
    """
    rng = np.random.default_rng(seed)
    perms = np.stack([rng.permutation(n_expert) for _ in range(n_layer)])
    pop = 1.0 / np.arange(1, n_expert + 1) ** zipf_s
    pop /= pop.sum()
    out = np.empty((n_pos, n_layer, k), np.int16)
    for il in range(n_layer):
        prev: list[int] = []
        for p in range(n_pos):
            chosen = [e for e in prev if rng.random() < reuse]
            while len(chosen) < k:
                e = int(perms[il, rng.choice(n_expert, p=pop)])
                if e not in chosen:
                    chosen.append(e)
            rng.shuffle(chosen)
            out[p, il] = chosen
            prev = chosen
    return out


def synthetic_run_events(n_prompt: int, n_decode: int, n_layer: int, n_expert: int, k: int,
                         seed: int = 0, reuse: float = 0.4,
                         last_layer: str = FINAL) -> list[DecodeEvent]:
    """A prefill event followed by ``n_decode`` plain decodes, with routing weights that sum to 1.

    ``last_layer`` is the prefill's last-layer convention (:mod:`refsim.trace.convention`):
    :data:`~refsim.trace.convention.FINAL` (default) routes the last layer on the final prompt
    position only, as llama.cpp's qwen3moe graph does; :data:`~refsim.trace.convention.EVERY` on
    every position. The routes and weights are the same either way."""
    if last_layer not in (FINAL, EVERY):
        raise ValueError(f"last_layer={last_layer!r}; expected {FINAL!r} or {EVERY!r}")
    routes = synthetic_routes(n_prompt + n_decode, n_layer, n_expert, k, seed, reuse)
    rng = np.random.default_rng(seed + 1)
    w = rng.dirichlet(np.ones(k), size=routes.shape[:2]).astype(np.float32)
    w = -np.sort(-w, axis=-1)  # slot 0 has the top weight
    w = np.array([[[float(f"{x:.6g}") for x in cell] for cell in row] for row in w], np.float32)
    events = []
    if n_prompt:
        pre = routes[:n_prompt].copy()
        pw = w[:n_prompt].copy()
        if last_layer == FINAL:
            pre[:-1, n_layer - 1] = NOT_ROUTED
            pw[:-1, n_layer - 1] = np.nan
        events.append(DecodeEvent(DecodeKind.PREFILL, np.arange(n_prompt, dtype=np.int64), pre,
                                  weights=pw))
    for i in range(n_decode):
        p = n_prompt + i
        events.append(DecodeEvent(DecodeKind.PLAIN, np.array([p], np.int64), routes[p:p + 1],
                                  weights=w[p:p + 1]))
    return events
