"""Search for streams where --drop-cold-experts F reads more flash bytes than no drop at the same
budget (docs/streaming-knobs.md, "Can dynamic dropping read more ..."), through ExpertCache.

    PYTHONPATH=. python3 tools/drop_search.py random --mode verify --seconds 300
    PYTHONPATH=. python3 tools/drop_search.py exhaustive --decodes 4

random: streams of 2..--max-pos positions (plain decodes, or plain and 2-row verify decodes),
1 layer of 1-byte entries, 2-4 experts, k = 2, budgets of 1-3 entries, weights (.9,.1), (.1,.9)
or (.6,.4); prints every smaller counterexample found and the smallest at the end.
exhaustive: every stream of --decodes plain decodes over 3 experts, k = 2, the same weights,
budgets 1-3; prints how many read more.
"""

from __future__ import annotations

import argparse
import itertools
import random
import time

import numpy as np

from refsim.cache import ExpertCache
from refsim.cache.knobs import StreamKnobs
from refsim.events import DecodeEvent, DecodeKind

WEIGHTS = [(0.9, 0.1), (0.1, 0.9), (0.6, 0.4)]


def event(rows, ws, pos):
    r = np.array(rows, np.int16)[:, None, :]
    n = r.shape[0]
    kind = DecodeKind.PLAIN if n == 1 else DecodeKind.VERIFY
    return DecodeEvent(kind, np.arange(pos, pos + n), r,
                       weights=np.array(ws, np.float32)[:, None, :],
                       n_draft=n - 1, accepted=n - 1 if n > 1 else None)


def reads(evs, n_expert, budget, frac):
    c = ExpertCache([1], n_expert, budget, StreamKnobs(drop_frac=frac))
    for e in evs:
        c.apply(e)
    return c.stats.total("read_bytes")


def random_search(mode, max_pos, seconds, seed):
    rng = random.Random(seed)
    best, trials, t0 = None, 0, time.time()
    while time.time() - t0 < seconds:
        trials += 1
        ne, budget, npos = rng.randint(2, 4), rng.randint(1, 3), rng.randint(2, max_pos)
        evs, left, pos = [], npos, 0
        while left:
            n = 1 if mode == "plain" else rng.randint(1, min(2, left))
            evs.append(event([rng.sample(range(ne), 2) for _ in range(n)],
                             [rng.choice(WEIGHTS) for _ in range(n)], pos))
            pos, left = pos + n, left - n
        r0, r1 = reads(evs, ne, budget, 0.0), reads(evs, ne, budget, 1.0)
        if r1 > r0 and (best is None or (npos, len(evs)) < best[0]):
            best, max_pos = ((npos, len(evs)), evs, ne, budget, r0, r1), npos
            print(f"found: {npos} positions, {len(evs)} events, reads {r0} -> {r1}", flush=True)
    print(f"{trials} streams tried")
    if best:
        _, evs, ne, budget, r0, r1 = best
        for e in evs:
            print(e.kind.name, e.routes[:, 0].tolist(), np.round(e.weights[:, 0], 2).tolist())
        print(f"n_expert {ne}, budget {budget} B: no drop reads {r0} B, F = 1 reads {r1} B")


def exhaustive(n):
    rows = [(a, b, w) for a in range(3) for b in range(3) if a != b for w in WEIGHTS]
    checked = worse = 0
    for combo in itertools.product(rows, repeat=n):
        evs = [event([[a, b]], [w], i) for i, (a, b, w) in enumerate(combo)]
        for budget in (1, 2, 3):
            checked += 1
            worse += reads(evs, 3, budget, 1.0) > reads(evs, 3, budget, 0.0)
    print(f"{n} plain decodes: {checked} (stream, budget) cases, {worse} where drop reads more")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("how", choices=("random", "exhaustive"))
    ap.add_argument("--mode", choices=("plain", "verify"), default="verify")
    ap.add_argument("--max-pos", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--decodes", type=int, default=4)
    a = ap.parse_args(argv)
    if a.how == "random":
        random_search(a.mode, a.max_pos, a.seconds, a.seed)
    else:
        exhaustive(a.decodes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
