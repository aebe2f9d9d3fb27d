"""Replay speed on the real qwen trace: refsim's LRU, its one-pass curve, a pure-Python
replay and libCacheSim's LRU, timed in one run; prints times and ratios.

    python benchmarks/replay_speed.py [TRACE] [--budget-mib 4000] [--repeat 20]

(a) refsim LRU at one budget: ``replay_policy(batches, "lru", B)`` (Numba, whole trace).
(a') the same through the event API, ``ExpertCache.apply`` per decode event.
(b) refsim's exact one-pass LRU curve at 32 budgets (250..8000 MiB step 250).
(c) a straightforward pure-Python replay of the same batches (OrderedDict), written here.
(d) libCacheSim's LRU (``pip install libcachesim``), skipped when not installed. Mapping: one
    request per lookup = unique (layer, expert) of a layer batch, in the order of its last
    occurrence in the batch; ``obj_id = layer * n_expert + expert + 1``, ``obj_size`` =
    the layer's entry bytes, ``cache_size`` = the budget in bytes. libCacheSim evicts on
    insert (no batch protection), so its hit count can differ slightly from the engine's;
    the count is printed. (d1) drives ``cache.get`` from Python per request; (d2) runs its C
    loop, ``process_trace``, over an oracleGeneral binary file written beforehand; both with
    ``hashpower=16`` (2**16 buckets for the 6144 keys).

(e) every registered policy at the same budget, ``replay_policy(batches, name, B)`` (its
    Numba fast path, or the pure-Python reference for the policies that have none), best of
    ``--policy-repeat``; ratio to (a). Timed twice: best wall time and best thread CPU time
    (``time.thread_time``), each ratio to (a) timed the same way (on a loaded machine the
    wall best of a run longer than a time slice includes preemption; CPU time does not).
(f) libCacheSim's C loop (``process_trace``, as (d2)) for every policy it shares with refsim
    (``refsim.testing.libcachesim_oracle.LIBCACHESIM``), default parameters; ratio to (a).

Parsing the trace file and flattening it into batches happen once, before any timing; each
timing is the best of ``--repeat`` runs after a warm-up run (Numba compiled and cached). The
1-minute load average is printed first: on a shared machine the ratios are provisional.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.cache.batches import BatchTrace
from refsim.cache.mrc import lru_curve
from refsim.cache.replay import replay_policy
from refsim.trace import read_trace

HASHPOWER = 16
"""libCacheSim hash table of 2**16 buckets for the 6144 keys (its default, 2**24, spends most of
a run allocating and clearing the table)."""

DEFAULT_TRACE = (Path(__file__).resolve().parents[2] / "shared" / "real-traces" /
                 "bmoe-qwen3-30b-a3b" / "qwen.route.csv")


def best_of(fn, repeat, clock=time.perf_counter):
    fn()                                      # warm-up (JIT, caches)
    best = float("inf")
    for _ in range(repeat):
        t = clock()
        out = fn()
        best = min(best, clock() - t)
    return best, out


def best_of_both(fn, repeat):
    """(best wall seconds, best thread-CPU seconds, result): on a loaded machine a run longer
    than a scheduler time slice is almost always preempted, so its best wall time includes
    other jobs' time; the thread's CPU time does not (both still see their cache traffic)."""
    wall, out = best_of(fn, repeat)
    cpu, _ = best_of(fn, repeat, time.thread_time)
    return wall, cpu, out


def python_batches(bt):
    """Per batch: (layer, token-major key list) as Python objects (prepared, untimed)."""
    keys = bt.keys.tolist()
    s = bt.batch_start.tolist()
    return [(int(bt.batch_layer[b]), keys[s[b]:s[b + 1]]) for b in range(bt.n_batch)]


def python_lru(batches, sizes, budget):
    """The engine's LRU rules in plain Python: the baseline (c)."""
    od: OrderedDict[int, int] = OrderedDict()
    resident = lookups = hits = 0
    for layer, keys in batches:
        seen = set()
        for key in keys:
            if key not in seen:
                seen.add(key)
                lookups += 1
                if key in od:
                    hits += 1
                else:
                    od[key] = sizes[layer]
                    resident += sizes[layer]
            od.move_to_end(key)
        while resident > budget:
            oldest = next(iter(od))
            if oldest in seen:
                break
            resident -= od.pop(oldest)
    return lookups, hits


def lookup_requests(bt):
    """(obj_id, obj_size) per lookup, each batch's unique keys in last-occurrence order."""
    ids, sizes = [], []
    for b in range(bt.n_batch):
        ks = bt.keys[bt.batch_start[b]:bt.batch_start[b + 1]].tolist()
        order = list(dict.fromkeys(reversed(ks)))[::-1]       # unique, by last occurrence
        ids += [k + 1 for k in order]
        sizes += [int(bt.expert_bytes[k // bt.n_expert]) for k in order]
    return np.array(ids, np.uint64), np.array(sizes, np.uint32)


def oracle_file(bt):
    """Write the lookup requests as an oracleGeneral binary file; returns (path, n_requests)."""
    ids, sizes = lookup_requests(bt)
    rec = np.zeros(ids.size, dtype=np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"),
                                              ("next", "<i8")]))   # packed, 24 bytes
    rec["t"], rec["id"], rec["size"], rec["next"] = np.arange(ids.size), ids, sizes, -1
    fd, path = tempfile.mkstemp(suffix=".oracleGeneral.bin")
    os.close(fd)
    rec.tofile(path)
    return path, ids.size


def libcachesim_policy_runs(bt, budget, repeat):
    """(f): {refsim name: (seconds, hits)} of libCacheSim's process_trace per shared policy."""
    try:
        import libcachesim as lcs
    except ImportError:
        return {}
    from refsim.testing.libcachesim_oracle import LIBCACHESIM
    path, n = oracle_file(bt)
    out = {}
    try:
        for name, (cls, _) in LIBCACHESIM.items():
            def run(cls=cls):
                reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
                cache = getattr(lcs, cls)(cache_size=budget, hashpower=HASHPOWER)
                return cache.process_trace(reader)
            if name == "tinylfu":        # sketch sized by bytes: 2**31 counters (docs)
                continue
            t, (miss_ratio, _) = best_of(run, repeat)
            out[name] = (t, int(round((1 - miss_ratio) * n)))
    finally:
        os.unlink(path)
    return out


def libcachesim_runs(bt, budget, repeat):
    try:
        import libcachesim as lcs
    except ImportError:
        print("(d) libCacheSim: skipped (pip install libcachesim)")
        return None
    ids, sizes = lookup_requests(bt)
    reqs = []
    for i, (o, s) in enumerate(zip(ids.tolist(), sizes.tolist())):
        r = lcs.Request()
        r.obj_id, r.obj_size, r.clock_time = o, s, i
        reqs.append(r)

    def d1():
        cache = lcs.LRU(cache_size=budget, hashpower=HASHPOWER)
        return sum(1 for r in reqs if cache.get(r))

    t1, hits1 = best_of(d1, repeat)
    rec = np.zeros(ids.size, dtype=np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"),
                                              ("next", "<i8")]))   # packed, 24 bytes
    rec["t"], rec["id"], rec["size"], rec["next"] = np.arange(ids.size), ids, sizes, -1
    fd, path = tempfile.mkstemp(suffix=".oracleGeneral.bin")
    os.close(fd)
    try:
        rec.tofile(path)

        def d2():
            reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
            cache = lcs.LRU(cache_size=budget, hashpower=HASHPOWER)
            return cache.process_trace(reader)

        t2, (miss_ratio, _byte_miss) = best_of(d2, repeat)
    finally:
        os.unlink(path)
    hits2 = int(round((1 - miss_ratio) * ids.size))
    return t1, hits1, t2, hits2, ids.size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=str(DEFAULT_TRACE))
    ap.add_argument("--budget-mib", type=float, default=4000.0)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--policy-repeat", type=int, default=3,
                    help="best of N for (e) (the pure-Python policies take ~1 s each)")
    args = ap.parse_args(argv)
    if not Path(args.trace).exists():
        print(f"trace not found: {args.trace}", file=sys.stderr)
        return 1
    trace = read_trace(args.trace)                               # parse once, untimed
    h = trace.header
    t0 = time.perf_counter()
    bt = BatchTrace.from_events(trace.events, h.expert_bytes, h.n_expert)
    t_flat = time.perf_counter() - t0
    budget = int(args.budget_mib * MIB)
    budgets = [b * MIB for b in range(250, 8001, 250)]
    pyb = python_batches(bt)
    sizes = [int(x) for x in h.expert_bytes]
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"on {os.cpu_count()} cores")
    print(f"trace: {args.trace}: {bt.n_batch} layer batches, {bt.keys.size} routed slots; "
          f"budget {args.budget_mib:.0f} MiB; best of {args.repeat}")
    print(f"  (flattening events into batches, once: {t_flat * 1e3:.2f} ms, not timed below)")

    ta, ta_cpu, ra = best_of_both(lambda: replay_policy(bt, "lru", budget), args.repeat)

    def event_api():
        c = ExpertCache(h.expert_bytes, h.n_expert, budget)
        for ev in trace.events:
            c.apply(ev)
        return c.stats.total("hits")

    ta2, hits_a2 = best_of(event_api, args.repeat)
    tb, rb = best_of(lambda: lru_curve(bt, budgets), args.repeat)
    tc, (look_c, hits_c) = best_of(lambda: python_lru(pyb, sizes, budget),
                                   max(3, args.repeat // 4))
    hits_a = int(ra.hits.sum())
    at_b = rb[budgets.index(budget)] if budget in budgets else None
    assert hits_c == hits_a == hits_a2 and look_c == int(ra.lookups.sum())
    if at_b is not None:
        assert int(at_b.hits.sum()) == hits_a
    print(f"(a)  refsim LRU, one budget          {ta * 1e3:9.3f} ms   hits {hits_a}/{look_c}")
    print(f"(a') refsim ExpertCache.apply/event  {ta2 * 1e3:9.3f} ms   hits {hits_a2}")
    print(f"(b)  refsim one-pass curve, 32 budg. {tb * 1e3:9.3f} ms   "
          f"(equal at {args.budget_mib:.0f} MiB: {at_b is not None})")
    print(f"(c)  pure-Python replay              {tc * 1e3:9.3f} ms   hits {hits_c}")
    d = libcachesim_runs(bt, budget, args.repeat)
    if d:
        t1, hits1, t2, hits2, n_req = d
        print(f"(d1) libCacheSim LRU, get() loop     {t1 * 1e3:9.3f} ms   hits {hits1}/{n_req}")
        print(f"(d2) libCacheSim LRU, process_trace  {t2 * 1e3:9.3f} ms   hits {hits2}/{n_req}")
    print("ratios:")
    print(f"  (c)/(a)  pure Python vs refsim LRU:  {tc / ta:8.1f}x   (target >= 50)")
    print(f"  (b)/(a)  32-budget curve vs 1 replay: {tb / ta:8.2f}x   (target <= 2)")
    print(f"  (b)/(32 x a) curve vs 32 replays:    {tb / (32 * ta):8.3f}x")
    print(f"  (c)/(a') pure Python vs event API:   {tc / ta2:8.1f}x")
    if d:
        print(f"  (d1)/(a) libCacheSim get() vs refsim:   {t1 / ta:8.1f}x   (target >= 1)")
        print(f"  (d2)/(a) libCacheSim C loop vs refsim:  {t2 / ta:8.1f}x   (target >= 1)")
    from refsim.cache.policies import POLICIES
    lcs_t = libcachesim_policy_runs(bt, budget, args.repeat)
    print("(e) every policy, one budget; (f) libCacheSim's C loop, same policy "
          "(ratios to (a); target (e)/(a) <= 10):")
    print(f"  (a) best wall {ta * 1e3:.3f} ms, best thread CPU {ta_cpu * 1e3:.3f} ms; per policy: "
          f"wall, wall/(a), CPU, CPU/(a) CPU")
    for name, cls in POLICIES.items():
        te, te_cpu, re_ = best_of_both(lambda n=name: replay_policy(bt, n, budget),
                                       args.policy_repeat)
        path = "numba" if cls.fast_replay is not None else "python"
        line = (f"  {name:10s} {path:6s} {te * 1e3:10.2f} ms  {te / ta:8.1f}x  "
                f"cpu {te_cpu * 1e3:8.2f} ms {te_cpu / ta_cpu:6.1f}x  hits {int(re_.hits.sum())}")
        if name in lcs_t:
            tf, hf = lcs_t[name]
            line += f"   | libCacheSim {tf * 1e3:8.2f} ms {tf / ta:6.1f}x hits {hf}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
