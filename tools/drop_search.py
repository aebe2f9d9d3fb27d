"""Search for streams where --drop-cold-experts F reads more flash bytes than no drop at the same
budget (docs/streaming-knobs.md, "Can dynamic dropping read more ..."), through ExpertCache.

    PYTHONPATH=. python3 tools/drop_search.py random --mode verify --seconds 300
    PYTHONPATH=. python3 tools/drop_search.py exhaustive --decodes 4
    PYTHONPATH=. python3 tools/drop_search.py rich --seconds 300 --seed 11

random: streams of 2..--max-pos positions (plain decodes, or plain and 2-row verify decodes),
1 layer of 1-byte entries, 2-4 experts, k = 2, budgets of 1-3 entries, weights (.9,.1), (.1,.9)
or (.6,.4); prints every smaller counterexample found and the smallest at the end.
exhaustive: every stream of --decodes plain decodes over 3 experts, k = 2, the same weights,
budgets 1-3; prints how many read more.
rich: plain decodes only, richer shapes: 1-2 layers, entry sizes 1-3 B, 2-5 experts, k 2-3, an
optional prefill of 1-3 positions, 1-7 decodes, budgets 1-8 B, F in {0.5, 0.75, 1}, weights
drawn from a Dirichlet(1) and sorted (slot 0 = top); prints how many read more.
"""

from __future__ import annotations

import argparse
import itertools
import random
import time

import numpy as np

from refsim.cache import ExpertCache
from refsim.streaming.knobs import StreamKnobs
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


def rich_search(seconds, seed):
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    trials = worse = 0
    t0 = time.time()

    def rows(n, n_layer, ne, k):
        r = np.array([[rng.sample(range(ne), k) for _ in range(n_layer)] for _ in range(n)], np.int16)
        w = np.sort(nrng.dirichlet(np.ones(k), size=(n, n_layer)), axis=2)[..., ::-1]
        return r, np.ascontiguousarray(w, np.float32)

    while time.time() - t0 < seconds:
        trials += 1
        n_layer, ne = rng.randint(1, 2), rng.randint(2, 5)
        k = rng.randint(2, min(3, ne))
        eb = [rng.randint(1, 3) for _ in range(n_layer)]
        budget, frac = rng.randint(1, 8), rng.choice([0.5, 0.75, 1.0])
        evs, pos = [], 0
        if rng.random() < 0.5:
            n = rng.randint(1, 3)
            r, w = rows(n, n_layer, ne, k)
            evs.append(DecodeEvent(DecodeKind.PREFILL, np.arange(n), r, weights=w))
            pos = n
        for _ in range(rng.randint(1, 7)):
            r, w = rows(1, n_layer, ne, k)
            evs.append(DecodeEvent(DecodeKind.PLAIN, np.array([pos]), r, weights=w))
            pos += 1
        out = []
        for f in (0.0, frac):
            c = ExpertCache(eb, ne, budget, StreamKnobs(drop_frac=f))
            for e in evs:
                c.apply(e)
            out.append(c.stats.total("read_bytes"))
        worse += out[1] > out[0]
    print(f"{trials} plain-decode streams tried, {worse} where drop reads more")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("how", choices=("random", "exhaustive", "rich"))
    ap.add_argument("--mode", choices=("plain", "verify"), default="verify")
    ap.add_argument("--max-pos", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--decodes", type=int, default=4)
    a = ap.parse_args(argv)
    if a.how == "random":
        random_search(a.mode, a.max_pos, a.seconds, a.seed)
    elif a.how == "rich":
        rich_search(a.seconds, a.seed)
    else:
        exhaustive(a.decodes)
    return 0


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    raise SystemExit(run_interruptible(main))
