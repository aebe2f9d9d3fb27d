"""Mutation tests of ``read_trace`` (issue 12 F): damaged copies of traces refsim itself wrote.

Every case ends one of two ways: a ``TraceFormatError`` whose one-line message starts with
``<file>:<line>:`` (a line of the file, or the one after its end), or a trace whose every row is
what a tiny independent parser (below, 40 lines, no numpy) reads from the same bytes: same
header, same rows in the same order with the same values, same weights as float32. A hang (10 s
alarm) or an allocation above 64 x the file size + 8 MiB (tracemalloc; numpy reports its buffers
to it) fails the case. 150 cases run in the default suite; ``pytest -m fuzz`` runs 20,000.
"""

from __future__ import annotations

import math
import re
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refsim.cache import ExpertCache
from refsim.errors import TraceFormatError
from refsim.events import NOT_ROUTED, DecodeEvent, DecodeKind
from refsim.testing.mutate import cpu_time_limit, mutated
from refsim.testing.traces import trace_difference
from refsim.trace import RouteTrace, TraceHeader, iter_trace_turns, read_trace, write_trace
from refsim.trace.reader import _read_fast, _read_slow

MAGIC = "# route_trace v1"


# --- seeds: traces written by refsim's own writer ----------------------------------------------------

def _event(rng, kind, positions, n_layer, n_expert, k, unrouted=(), prefill_last=True,
           every=False):
    routes = np.stack([np.stack([rng.permutation(n_expert)[:k] for _ in range(n_layer)])
                       for _ in positions]).astype(np.int16)
    for il in unrouted:
        routes[:, il] = NOT_ROUTED
    if kind is DecodeKind.PREFILL and not every:    # FINAL: the last layer at the final position
        last = max(il for il in range(n_layer) if il not in unrouted)
        routes[:-1, last] = NOT_ROUTED
        if not prefill_last:
            routes[-1, last] = NOT_ROUTED
    w = rng.choice(np.array([0.5, 0.25, 0.0904526, 0.125], np.float32), size=routes.shape)
    n = len(positions)
    return DecodeEvent(kind, np.asarray(positions, np.int64), routes, weights=w,
                       n_draft=n - 1 if kind is DecodeKind.VERIFY else 0)


def _seed(tmp, name, n_layer, n_expert, k, n_prompt, widths, seed, budget, unrouted=(),
          drop=False, chunks=1, cache_mb=None, every=False):
    rng = np.random.default_rng(seed)
    extra = (("cache_mb", cache_mb),) if cache_mb else ()
    h = TraceHeader("m.gguf", "gemma4" if every else "qwen3moe", n_layer, n_expert, k,
                    rng.choice(np.array([3, 4, 8, 1000]), n_layer), rng.integers(0, 50, n_layer),
                    extra=extra)
    events, pos = [], 0
    bounds = np.linspace(0, n_prompt, chunks + 1).astype(int)
    for c in range(chunks):
        span = list(range(bounds[c], bounds[c + 1]))
        events.append(_event(rng, DecodeKind.PREFILL, span, n_layer, n_expert, k, unrouted,
                             prefill_last=c == chunks - 1, every=every))
    pos = n_prompt
    for w in widths:
        kind = DecodeKind.PLAIN if w == 1 else DecodeKind.VERIFY
        ev = _event(rng, kind, range(pos, pos + w), n_layer, n_expert, k, unrouted)
        if drop and k > 1:
            mask = rng.random(ev.routes.shape) < 0.3
            mask[:, :, 0] = False
            mask &= ev.routes >= 0
            ev = DecodeEvent(ev.kind, ev.positions, ev.routes, weights=ev.weights, dropped=mask,
                             n_draft=ev.n_draft)
        events.append(ev)
        pos += 1 + (int(rng.integers(0, w)) if w > 1 else 0)
    cache = ExpertCache(h.expert_bytes, h.n_expert, budget)
    recs = [cache.apply(e) for e in events]
    path = tmp / name
    write_trace(path, h, events, [r.residency for r in recs], [r.charged_bytes for r in recs])
    return path.read_bytes()


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("seeds")
    out = [
        _seed(tmp, "plain", 3, 6, 2, 3, [1] * 4, 1, 20),
        _seed(tmp, "verify", 3, 5, 2, 2, [2, 3, 1, 2], 2, 12),
        _seed(tmp, "dropped", 2, 6, 3, 2, [1, 1, 1], 3, 10, drop=True),
        _seed(tmp, "mtp", 4, 5, 2, 2, [1, 1], 4, 1000, unrouted=(3,), cache_mb="0.5"),
        _seed(tmp, "one-layer", 1, 4, 2, 3, [1, 1, 1], 5, 8),
        _seed(tmp, "chunks", 3, 4, 1, 4, [1, 1], 6, 9, chunks=2),
        # the EVERY last-layer convention (a gemma4 recording): every prefill position routes
        # the last layer, in each chunk; a mutation can make it mixed or FINAL-looking
        _seed(tmp, "every", 3, 5, 2, 3, [1, 2, 1], 7, 12, every=True),
        _seed(tmp, "every-chunks", 3, 4, 1, 4, [1, 1], 8, 9, chunks=2, every=True),
    ]
    warm = tmp / "warm.route.csv"        # the kernels compiled (or loaded) outside the guards
    for s in out:
        warm.write_bytes(s)
        read_trace(warm)
        list(iter_trace_turns(warm)[1])
    for s in out:                        # every seed is itself valid and reads to what it says
        _check(s, "seed", tmp / "check.route.csv")
    return out


# --- the independent reading ---------------------------------------------------------------------------

def _int(text: str) -> int:
    t = text.strip(" \t")
    assert re.fullmatch(r"-?[0-9]+", t) and t.isascii(), f"accepted a non-integer {text!r}"
    return int(t)


def _header_int(text: str) -> int:
    assert re.fullmatch(r"0|-?[1-9][0-9]*", text), f"accepted a preamble integer not written as %d: {text!r}"
    return int(text)


def independent_read(data: bytes):
    """(header dict, layer sizes, rows) as the file says, or an AssertionError saying why it
    should not have been accepted. Rows: (line, turn, phase, step, layer, slot, expert, weight,
    residency, expert_bytes, dropped)."""
    text = data.decode("utf-8")
    lines = text.split("\n")
    numbered = [(i + 1, ln.rstrip("\r")) for i, ln in enumerate(lines)]
    assert numbered[0][1] == MAGIC
    body = [(n, ln) for n, ln in numbered[1:] if ln.strip()]
    model, sizes, j = None, {}, 0
    while j < len(body) and body[j][1].startswith("#"):
        kv = dict(t.split("=", 1) for t in body[j][1][1:].split() if "=" in t)
        if "layer" in kv:
            sizes[_header_int(kv["layer"])] = (_header_int(kv["expert_bytes"]),
                                               _header_int(kv["dense_bytes"]))
        elif "arch" in kv or "n_layer" in kv:
            assert model is None
            model = kv
        j += 1
    names = [c.strip() for c in body[j][1].split(",")]
    rows = []
    for n, ln in body[j + 1:]:
        f = dict(zip(names, ln.split(",")))
        assert len(ln.split(",")) == len(names)
        w = f["weight"].strip(" \t")
        assert w.isascii() and "_" not in w
        assert math.isnan(float(w)) or float(w) >= 0, f"accepted a negative weight {w!r}"
        rows.append((n, *(_int(f[c]) for c in ("turn", "phase", "step", "layer", "slot", "expert")),
                     np.float32(float(w)), _int(f["residency"]), _int(f["expert_bytes"]),
                     _int(f["dropped"]) if "dropped" in f else 0))
    assert not (rows and lines[-1].strip()), "accepted a last row without its end of line"
    return model, sizes, rows


def _reader_rows(tr):
    out = []
    for ev, res, chg, ln in zip(tr.events, tr.residency, tr.charged_bytes, tr.line_numbers):
        drop = ev.dropped if ev.dropped is not None else np.zeros(ev.routes.shape, bool)
        for p, il, s in zip(*np.nonzero(ev.routes >= 0)):
            out.append((int(ln[p, il, s]), ev.turn, ev.phase, int(ev.positions[p]), int(il), int(s),
                        int(ev.routes[p, il, s]), ev.weights[p, il, s], int(res[p, il, s]),
                        int(chg[p, il, s]), int(drop[p, il, s])))
    return sorted(out, key=lambda r: r[0])


def _guard(seconds: float):
    return cpu_time_limit(seconds, "read_trace")


def _check(data: bytes, recipe: str, path) -> None:
    path.write_bytes(data)
    tracemalloc.start()
    try:
        with _guard(10.0):
            tr = read_trace(path)
    except TraceFormatError as exc:
        msg = str(exc)
        m = re.match(rf"{re.escape(str(path))}:(\d+): \S", msg)
        assert m and "\n" not in msg, f"{recipe}: message without file:line: {msg!r}"
        assert 1 <= int(m.group(1)) <= data.count(b"\n") + 2, f"{recipe}: line out of the file: {msg}"
        return
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak <= 64 * len(data) + (8 << 20), f"{recipe}: {peak} bytes for a {len(data)}-byte file"
    model, sizes, rows = independent_read(data)
    h = tr.header
    assert (h.n_layer, h.n_expert, h.n_expert_used) == (
        _header_int(model["n_layer"]), _header_int(model["n_expert"]),
        _header_int(model["n_expert_used"])), recipe
    assert sorted(sizes) == list(range(h.n_layer)), recipe
    assert [sizes[il] for il in range(h.n_layer)] == list(zip(h.expert_bytes.tolist(),
                                                             h.dense_bytes.tolist())), recipe
    if "cache_mb" in model:
        v = float(model["cache_mb"])
        assert math.isfinite(v) and v > 0, f"{recipe}: accepted cache_mb={model['cache_mb']}"
        assert not re.match(r"0[0-9]", model["cache_mb"]), f"{recipe}: accepted cache_mb={model['cache_mb']}"
    got = _reader_rows(tr)
    assert tr.n_rows == len(rows) == len(got), recipe
    for a, b in zip(got, rows):
        assert a[:7] == b[:7] and a[8:] == b[8:], f"{recipe}: reader {a} != file {b}"
        assert (np.isnan(a[7]) and np.isnan(b[7])) or a[7] == b[7], f"{recipe}: weight {a} != {b}"
    for r in rows:                        # and what was accepted is in range
        assert r[2] in (0, 1) and 0 <= r[4] < h.n_layer and 0 <= r[5] < h.n_expert_used
        assert 0 <= r[6] < h.n_expert and r[8] in (0, 1, 2) and r[10] in (0, 1), recipe
    cells: dict[int, list] = {}           # a (position, layer)'s adjacent rows: weights all nan or none
    for j, r in enumerate(rows):
        start = j if j == 0 or rows[j - 1][1:5] != r[1:5] else start
        cells.setdefault(start, []).append(bool(np.isnan(r[7])))
    assert all(len(set(v)) == 1 for v in cells.values()), f"{recipe}: a cell with some weights nan"


@pytest.fixture(scope="module")
def case_path(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz") / "t.route.csv"


def _run(seeds, case_path, data):
    seed = data.draw(st.sampled_from(seeds), label="seed")
    case, recipe = data.draw(mutated(seed), label="mutation")
    _check(case, recipe, case_path)


_SETTINGS = dict(deadline=None, derandomize=False,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                        HealthCheck.function_scoped_fixture])


@settings(max_examples=150, **_SETTINGS)
@given(data=st.data())
def test_mutated_traces_are_refused_or_read_as_written(seeds, case_path, data):
    _run(seeds, case_path, data)


@pytest.mark.fuzz
@settings(max_examples=20_000, **_SETTINGS)
@given(data=st.data())
def test_mutated_traces_fuzz(seeds, case_path, data):
    _run(seeds, case_path, data)


def _fast_against_slow(seeds, case_path, data):
    """The fast path (threaded parse, one-pass frame and pack) never reads a file the per-line
    path refuses, and reads what it accepts to the per-line path's trace; the streamed read
    (blocks of 1 byte to 16 MiB) gives the same events turn by turn, or the same message."""
    seed = data.draw(st.sampled_from(seeds), label="seed")
    case, recipe = data.draw(mutated(seed), label="mutation")
    block = data.draw(st.sampled_from([1, 64, 1 << 24]), label="stream block")
    case_path.write_bytes(case)
    with _guard(10.0):
        fast = _read_fast(str(case_path))
        try:
            slow = _read_slow(str(case_path))
        except TraceFormatError as exc:
            assert fast is None, f"{recipe}: the fast path read a file the per-line path refuses: {exc}"
            try:   # the stream's diagnosis: the per-line rules on the fast parser's columns
                assert _read_fast(str(case_path), rule_messages=True) is None
            except TraceFormatError as by_rules:
                assert str(by_rules) == str(exc), f"{recipe}: the rules on parsed columns said otherwise"
            with pytest.raises(TraceFormatError) as streamed:
                list(iter_trace_turns(case_path, block=block)[1])
            assert str(streamed.value) == str(exc), f"{recipe}: the stream said otherwise"
            return
        stream, turns = iter_trace_turns(case_path, block=block)
        parts = list(turns)
    if fast is not None:
        diff = trace_difference(fast, slow)
        assert diff is None, f"{recipe}: {diff}"
    whole = RouteTrace(slow.header, [e for p in parts for e in p.events],
                       *([a for p in parts for a in getattr(p, n)]
                         for n in ("residency", "charged_bytes", "line_numbers")),
                       path=slow.path, has_dropped_column=slow.has_dropped_column,
                       n_rows=sum(p.n_rows for p in parts),
                       speculative=any(p.speculative for p in parts),
                       column_line=slow.column_line, has_pred_columns=slow.has_pred_columns)
    diff = trace_difference(whole, slow)
    assert diff is None, f"{recipe}: streamed: {diff}"
    assert (stream.n_rows, stream.n_events, stream.n_prompt) == (slow.n_rows, len(slow.events),
                                                                 slow.n_prompt), recipe


@settings(max_examples=150, **_SETTINGS)
@given(data=st.data())
def test_fast_path_agrees_with_the_per_line_path_on_mutated_traces(seeds, case_path, data):
    _fast_against_slow(seeds, case_path, data)


@pytest.mark.fuzz
@settings(max_examples=5_000, **_SETTINGS)
@given(data=st.data())
def test_fast_path_agrees_with_the_per_line_path_fuzz(seeds, case_path, data):
    _fast_against_slow(seeds, case_path, data)
