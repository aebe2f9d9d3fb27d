"""The last-layer convention (issue 26 A; docs/trace-format.md, "The last-layer convention"): a
prefill routes the last MoE layer at the final prompt position only (FINAL, llama.cpp's qwen3moe
graph) or at every position (EVERY, e.g. the engine's gemma4-26B-A4B recording). Both read, on the
per-line, fast and streamed paths alike, and through every command that reads a trace, with
counters hand-worked below; a trace mixing them is refused naming the line.

The two tiny traces (2 layers, 4 experts, top-1, 1 MiB entries, a cache that holds everything):
three prompt positions then two plain decodes, routed (layer 0, layer 1)

    step 0: (0, 1)   step 1: (1, 2)   step 2: (0, 3)   | step 3: (2, 2)   step 4: (0, 1)

EVERY: the prefill batches are layer 0 {0, 1, 0} (2 lookups, both misses) and layer 1 {1, 2, 3}
(3 misses); decode step 3 misses expert 2 in layer 0 and hits it in layer 1 (the prefill loaded
it), step 4 hits both: 9 lookups, 3 hits, 6 MiB read, decode 4 lookups 3 hits (75 %), 1 MiB.
FINAL: layer 1 of the prefill routes step 2 only {3}: layer 0 as above, then decode step 3 misses
2 in both layers, step 4 hits 0 in layer 0 and misses 1 in layer 1: 7 lookups, 1 hit, 6 MiB read,
decode 4 lookups 1 hit (25 %), 3 MiB.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.cache import ExpertCache
from refsim.cli import main
from refsim.errors import TraceFormatError
from refsim.events import DecodeKind
from refsim.testing.routes import synthetic_run_events
from refsim.testing.traces import trace_difference
from refsim.trace import RouteTrace, TraceHeader, iter_trace_turns, read_trace, write_trace
from refsim.trace.convention import EVERY, FINAL, arch_graph, chunk_shape
from refsim.trace.reader import _read_fast, _read_slow

M = 1 << 20


def head(arch: str) -> str:
    return (f"# route_trace v1\n# model=m.gguf arch={arch} n_layer=2 n_expert=4 n_expert_used=1\n"
            f"# layer=0 expert_bytes={M} dense_bytes=0\n# layer=1 expert_bytes={M} dense_bytes=0\n"
            f"turn,phase,step,layer,slot,expert,weight,residency,expert_bytes,dropped\n")


ROWS = {
    EVERY: (f"0,0,0,0,0,0,1,0,{M},0\n0,0,1,0,0,1,1,0,{M},0\n0,0,2,0,0,0,1,0,0,0\n"
            f"0,0,0,1,0,1,1,0,{M},0\n0,0,1,1,0,2,1,0,{M},0\n0,0,2,1,0,3,1,0,{M},0\n"
            f"0,1,3,0,0,2,1,0,{M},0\n0,1,3,1,0,2,1,1,0,0\n0,1,4,0,0,0,1,1,0,0\n0,1,4,1,0,1,1,1,0,0\n"),
    FINAL: (f"0,0,0,0,0,0,1,0,{M},0\n0,0,1,0,0,1,1,0,{M},0\n0,0,2,0,0,0,1,0,0,0\n"
            f"0,0,2,1,0,3,1,0,{M},0\n"
            f"0,1,3,0,0,2,1,0,{M},0\n0,1,3,1,0,2,1,0,{M},0\n0,1,4,0,0,0,1,1,0,0\n"
            f"0,1,4,1,0,1,1,0,{M},0\n"),
}
"""The rows of each convention; the recorded residency is the hand-worked replay's."""

WANT = {   # replay at 16 MiB (module docstring)
    EVERY: dict(lookups=9, hits=3, decode_lookups=4, decode_hits=3, prefill_lookups=5,
                read_bytes=6 * M, prefill_read_bytes=5 * M, decode_read_bytes=M, evictions=0,
                residency_rows=10, residency_agree=10),
    FINAL: dict(lookups=7, hits=1, decode_lookups=4, decode_hits=1, prefill_lookups=3,
                read_bytes=6 * M, prefill_read_bytes=3 * M, decode_read_bytes=3 * M, evictions=0,
                residency_rows=8, residency_agree=8),
}

#: archs whose convention the trace decides (the engine's registry ones and one it lacks)
FREE = ("gemma4", "qwen35moe", "bailingmoe3", "deepseek4", "some-new-arch")


def trace_file(tmp_path, conv: str, arch: str = "gemma4", name: str | None = None):
    path = tmp_path / (name or f"{arch}-{conv}.route.csv")
    path.write_text(head(arch) + ROWS[conv])
    return path


def all_paths(path) -> RouteTrace:
    """The trace by the per-line path, checked equal to the fast path's and to the stream's
    turns (blocks of 1 byte to 16 MiB)."""
    slow = _read_slow(str(path))
    fast = _read_fast(str(path))
    assert fast is not None
    assert trace_difference(fast, slow) is None
    assert read_trace(path).last_layer == slow.last_layer == fast.last_layer
    for block in (1, 64, 1 << 24):
        stream, turns = iter_trace_turns(path, block=block)
        parts = list(turns)
        assert [e.positions.tolist() for p in parts for e in p.events] == \
            [e.positions.tolist() for e in slow.events]
        for p, e in zip([e for p in parts for e in p.events], slow.events):
            assert np.array_equal(p.routes, e.routes)
        assert stream.last_layer == slow.last_layer
    return slow


def messages(path) -> list[str]:
    """The message of each read path (per-line, whole-file, streamed) for a refused file."""
    out = []
    for read in (_read_slow, read_trace, lambda p: list(iter_trace_turns(p, block=64)[1])):
        with pytest.raises(TraceFormatError) as exc:
            read(str(path))
        out.append(str(exc.value))
    assert _read_fast(str(path)) is None
    return out


# --- the convention, read ------------------------------------------------------------------------

@pytest.mark.parametrize("arch", FREE)
@pytest.mark.parametrize("conv", [EVERY, FINAL])
def test_both_conventions_read_on_every_path(tmp_path, conv, arch):
    tr = all_paths(trace_file(tmp_path, conv, arch))
    assert tr.last_layer == conv
    pre = tr.events[0]
    assert pre.kind is DecodeKind.PREFILL and pre.positions.tolist() == [0, 1, 2]
    # EVERY: layer 1 at every prompt position; FINAL: at step 2 only (NOT_ROUTED elsewhere)
    assert pre.routes[:, 1, 0].tolist() == ([1, 2, 3] if conv == EVERY else [-1, -1, 3])
    assert tr.n_rows == (10 if conv == EVERY else 8)


def test_qwen3moe_fixes_the_final_convention(tmp_path):
    """qwen3moe's graph cuts the last layer in every llama.cpp and the engine's Qwen3 trace shows
    it: an EVERY trace under that arch is refused (the swapped-columns damage check)."""
    assert arch_graph("qwen3moe").strict and arch_graph("qwen3moe").convention == FINAL
    assert all_paths(trace_file(tmp_path, FINAL, "qwen3moe")).last_layer == FINAL
    msgs = messages(trace_file(tmp_path, EVERY, "qwen3moe"))
    assert len(set(msgs)) == 1
    assert re.fullmatch(r".*:9: a prefill chunk routes the last layer 1 at step 0; expected the "
                        r"last-layer rule: it is routed for the chunk's final position 2 only .*",
                        msgs[0])


@pytest.mark.parametrize("arch", ["gpt-oss", "qwen2moe", "lfm2moe"])
def test_a_graph_rule_without_a_recording_warns_once(tmp_path, caplog, arch):
    """These archs' graphs cut the last layer in the llama.cpp sources read, but no recording
    confirms it: an EVERY trace is read as recorded, with one warning naming the file and line."""
    path = trace_file(tmp_path, EVERY, arch)
    with caplog.at_level(logging.WARNING, logger="refsim.trace"):
        assert all_paths(path).last_layer == EVERY
        read_trace(path)
    warned = [r.getMessage() for r in caplog.records if r.name == "refsim.trace"]
    assert len(warned) == 1
    assert warned[0].startswith(f"{path}:6: this prefill chunk routes the last layer 1 at every "
                                f"position, where llama.cpp's {arch} graph routes it at its final "
                                f"position only (llama.cpp src/models/")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="refsim.trace"):   # FINAL: no warning
        assert read_trace(trace_file(tmp_path, FINAL, arch)).last_layer == FINAL
    assert not caplog.records


@pytest.mark.parametrize("stream", [False, True])
def test_the_cli_shows_the_warning_once_on_stderr(tmp_path, stream):
    """As a user sees it: one stderr line through the CLI's logging set-up, exit 0."""
    import os
    import subprocess
    import sys
    path = trace_file(tmp_path, EVERY, "gpt-oss", "cli.route.csv")
    got = subprocess.run([sys.executable, "-m", "refsim", "replay", str(path), "--cache-mb", "16"]
                         + (["--stream"] if stream else []), capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, check=False)
    assert got.returncode == 0, got.stderr
    lines = got.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"refsim replay: warning: {path}:6: this prefill chunk routes the last layer 1 at every "
        f"position, where llama.cpp's gpt-oss graph"), got.stderr
    assert "hit: 33.3% cumulative (prefill included), 75.0% decode-only" in got.stdout


@pytest.mark.parametrize("n_pos,steps,final,more,want", [
    (3, [0, 1, 2], 2, False, EVERY), (3, [0, 1, 2], 2, True, EVERY), (1, [5], 5, True, EVERY),
    (3, [2], 2, False, FINAL), (3, [], 2, True, FINAL), (1, [], 5, True, FINAL),
    (1, [5], 5, False, None),             # one position ending the prefill: the same under both
    (3, [1, 2], 2, False, None), (3, [2], 2, True, None), (3, [], 2, False, None),
])
def test_chunk_shape_hand_worked(n_pos, steps, final, more, want):
    assert chunk_shape(n_pos, np.array(steps), final, more) == want


def test_a_trace_of_one_position_prefills_shows_no_convention(tmp_path):
    rows = (f"0,0,0,0,0,0,1,0,{M},0\n0,0,0,1,0,1,1,0,{M},0\n"
            f"0,1,1,0,0,0,1,1,0,0\n0,1,1,1,0,1,1,1,0,0\n")
    path = tmp_path / "one.route.csv"
    path.write_text(head("gemma4") + rows)
    assert all_paths(path).last_layer is None


# --- a trace mixing them ----------------------------------------------------------------------------

def test_turns_of_two_conventions_are_refused_naming_the_line(tmp_path):
    """Turn 0 routes the last layer at every prefill position, turn 1's two-token prefill at its
    final position only: one recording cannot do both. Each path gives the same message."""
    turn1 = (f"1,0,5,0,0,3,1,0,{M},0\n1,0,6,0,0,1,1,1,0,0\n1,0,6,1,0,0,1,0,{M},0\n"
             f"1,1,7,0,0,2,1,1,0,0\n1,1,7,1,0,2,1,1,0,0\n")
    path = tmp_path / "mixed.route.csv"
    path.write_text(head("gemma4") + ROWS[EVERY] + turn1)
    assert read_trace(trace_file(tmp_path, EVERY))        # each half alone is valid
    msgs = messages(path)
    assert len(set(msgs)) == 1, msgs
    assert msgs[0] == (f"{path}:18: a prefill chunk routes the last layer 1 at its final position "
                       f"only, where the prefill chunk on line 9 routes it at every position; "
                       f"expected one last-layer convention per trace (one llama.cpp graph made "
                       f"the recording; two recordings joined?)")


def test_chunks_of_one_prefill_in_two_conventions_are_refused(tmp_path):
    """Three layers; chunk [0, 1] routes the last layer nowhere (FINAL: more chunks follow), chunk
    [2, 3] routes it at both positions (EVERY)."""
    h = (f"# route_trace v1\n# model=m arch=gemma4 n_layer=3 n_expert=4 n_expert_used=1\n"
         + "".join(f"# layer={il} expert_bytes={M} dense_bytes=0\n" for il in range(3))
         + "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n")
    a = f"0,0,0,0,0,0,1,0,{M}\n0,0,1,0,0,1,1,0,{M}\n0,0,0,1,0,0,1,0,{M}\n0,0,1,1,0,1,1,0,{M}\n"
    b = (f"0,0,2,0,0,2,1,0,{M}\n0,0,3,0,0,3,1,0,{M}\n0,0,2,1,0,2,1,0,{M}\n0,0,3,1,0,3,1,0,{M}\n"
         f"0,0,2,2,0,0,1,0,{M}\n0,0,3,2,0,1,1,0,{M}\n")
    path = tmp_path / "chunks.route.csv"
    path.write_text(h + a + b)
    msgs = messages(path)
    assert len(set(msgs)) == 1, msgs
    assert msgs[0].startswith(f"{path}:15: a prefill chunk routes the last layer 2 at every "
                              f"position, where the prefill chunk on line 7 routes it nowhere (a "
                              f"chunk before the end of its turn's prefill); expected one "
                              f"last-layer convention per trace")
    # each convention alone reads: FINAL (chunk b at step 3 only) and EVERY (chunk a routes it)
    final = h + a + b.replace(f"0,0,2,2,0,0,1,0,{M}\n", "")
    path.write_text(final)
    assert all_paths(path).last_layer == FINAL
    every = h + a + f"0,0,0,2,0,2,1,0,{M}\n0,0,1,2,0,3,1,0,{M}\n" + b
    path.write_text(every)
    assert all_paths(path).last_layer == EVERY


# --- every command that reads a trace, both conventions --------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("conv", [EVERY, FINAL])
def test_replay_hand_worked(tmp_path, capsys, conv, stream):
    path = trace_file(tmp_path, conv)
    assert main(["replay", str(path), "--cache-mb", "16", "--json"]
                + (["--stream"] if stream else [])) == 0
    got = json.loads(capsys.readouterr().out)
    assert {k: got[k] for k in WANT[conv]} == WANT[conv]


@pytest.mark.parametrize("conv", [EVERY, FINAL])
def test_sweep_hand_worked(tmp_path, capsys, conv):
    assert main(["sweep", str(trace_file(tmp_path, conv)), "--cache-mb", "16",
                 "--policy", "lru,belady"]) == 0
    out = capsys.readouterr().out
    # hit_cum%, hit_dec%, read_MiB, MiB/token: nothing is evicted, so every policy agrees
    want = ("33.333    75.000         6.0       0.50" if conv == EVERY else
            "14.286    25.000         6.0       1.50")
    assert re.search(rf"16  lru\s+{re.escape(want)}", out), out
    assert re.search(rf"16  belady\s+{re.escape(want)}", out), out


@pytest.mark.parametrize("conv", [EVERY, FINAL])
def test_union_hand_worked(tmp_path, capsys, conv):
    """Decode windows: w=1 unions one position's 2 entries, w=2 both decodes' 4 (layer 0 {2, 0},
    layer 1 {2, 1}); the replay reads 1 MiB (EVERY) or 3 MiB (FINAL) over the 2 decodes."""
    assert main(["union", str(trace_file(tmp_path, conv)), "--window", "1,2",
                 "--cache-mb", "16"]) == 0
    out = capsys.readouterr().out
    read, per, hit = ("1.0", "0.50", "75.000") if conv == EVERY else ("3.0", "1.50", "25.000")
    assert re.search(rf" 1 +2 +1\.00 +1\.0 +1\.0 +2\.0 +2 +{read} +{per} +1\.00 +{hit}", out), out
    assert re.search(rf" 2 +1 +2\.00 +2\.0 +2\.0 +4\.0 +1 +{read} +{per} +1\.00 +{hit}", out), out


@pytest.mark.parametrize("conv", [EVERY, FINAL])
def test_analyze_hand_worked(tmp_path, capsys, conv):
    path = str(trace_file(tmp_path, conv))
    assert main(["analyze", path, "--view", "hot", "--phase", "prefill", "--json"]) == 0
    layers = json.loads(capsys.readouterr().out)["result"]["layers"]
    assert layers[0]["unique"] == 2 and layers[0]["routings"] == 3
    assert (layers[1]["unique"], layers[1]["routings"]) == ((3, 3) if conv == EVERY else (1, 1))
    assert main(["analyze", path, "--view", "bytes", "--phase", "all", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)["result"]
    # per decode event: the prefill, decode step 3, decode step 4 (module docstring)
    assert res["per_unit_bytes"] == ([5 * M, M, 0] if conv == EVERY else [3 * M, 2 * M, M])
    assert main(["analyze", path, "--view", "cache", "--phase", "all", "--cache-mb", "16",
                 "--json"]) == 0
    l1 = json.loads(capsys.readouterr().out)["result"]["layers"][1]
    # layer 1's lookups: EVERY {1, 2, 3} then 2 (hit), 1 (hit); FINAL {3} then 2, 1 (misses)
    assert (l1["n"], l1["miss"], l1["hit"], l1["replay_agree"]) == (
        (5, 3, 2, 5) if conv == EVERY else (3, 3, 0, 3))


@pytest.mark.parametrize("conv", [EVERY, FINAL])
def test_view_reads_both(tmp_path, capsys, conv):
    out = tmp_path / "v.html"
    assert main(["view", str(trace_file(tmp_path, conv)), "--html", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert out.read_text().lstrip().lower().startswith("<!doctype html")


@pytest.mark.parametrize("conv", [EVERY, FINAL])
def test_drop_replay_hand_worked(tmp_path, capsys, conv):
    """Top-1 routing: the top slot is never dropped, so every frac keeps every expert; the
    recorded decode misses are 1 of 4 (EVERY) or 3 of 4 (FINAL), and the dynamic replay's
    decode hit rate is the replay's."""
    assert main(["drop-replay", str(trace_file(tmp_path, conv)), "--cache-mb", "16",
                 "--frac", "0,0.5"]) == 0
    out = capsys.readouterr().out
    miss, hit, per = ("25.0", "75.00", "0.50") if conv == EVERY else ("75.0", "25.00", "1.50")
    assert f"[DECODE] 4 routing cells, 4 routed experts, {miss}% misses" in out
    assert re.search(rf"frac 0\.50 +0\.0% +0\.00% +0/4 +{hit} +{per}", out), out


@pytest.mark.parametrize("conv", [EVERY, FINAL])
def test_timing_breakeven_reads_both(tmp_path, capsys, conv):
    """The break-even table is the device model's on the trace's union study (read through
    read_trace either way; the union's decode reads are hand-worked in test_union_hand_worked)."""
    from refsim.studies.union import union_study
    from refsim.timing import DeviceModel, Param
    from refsim.timing.breakeven import breakeven
    values = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0,
              "s1": 0.8, "h": 0.1, "tail": 1.0}
    dev = DeviceModel(params={k: Param(v) for k, v in values.items()},
                      compute={"m": Param(100.0)}, serial_runs=2, overlap_runs=2)
    dev_file = tmp_path / "dev.json"
    dev_file.write_text(dev.to_json())
    path = trace_file(tmp_path, conv)
    assert main(["timing", "breakeven", str(path), "--device", str(dev_file), "--model", "m",
                 "--cache-mb", "16", "--draft", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    union = union_study(read_trace(path), [1, 2], 16 * M)
    assert union[0].read_mib == (1.0 if conv == EVERY else 3.0)      # the plain decodes' reads
    want = [r for r in breakeven(dev, union, "m", 4, False, True, 0.38) if r.draft == 1]
    assert [r["acceptance_needed_pct"] for r in rows] == pytest.approx(
        [r.acceptance_needed_pct for r in want], nan_ok=True)


# --- the writer ------------------------------------------------------------------------------------

def _record(events, h, budget=400):
    cache = ExpertCache(h.expert_bytes, h.n_expert, budget)
    recs = [cache.apply(e) for e in events]
    return [r.trace_residency() for r in recs], [r.charged_bytes for r in recs]


@pytest.mark.parametrize("conv", [EVERY, FINAL])
def test_the_writer_writes_both_and_refuses_the_other(tmp_path, conv):
    h = TraceHeader("m", "gemma4", 3, 8, 2, [100, 100, 100], [0, 0, 0])
    events = synthetic_run_events(5, 4, 3, 8, 2, seed=1, last_layer=conv)
    res, chg = _record(events, h)
    path = tmp_path / "w.route.csv"
    write_trace(path, h, events, res, chg, last_layer=conv)
    tr = all_paths(path)
    assert tr.last_layer == conv
    # rows: 5 prompt positions x 3 layers (FINAL: 2 layers + the final position) + 4 x 3, k = 2
    assert tr.n_rows == 2 * ((15 if conv == EVERY else 11) + 12)
    other = FINAL if conv == EVERY else EVERY
    with pytest.raises(ValueError, match=f"as the '{conv}' convention, where the trace is '{other}'"):
        write_trace(tmp_path / "x.route.csv", h, events, res, chg, last_layer=other)
    assert not (tmp_path / "x.route.csv").exists()
    with pytest.raises(ValueError, match="last_layer='both'"):
        write_trace(tmp_path / "y.route.csv", h, events, res, chg, last_layer="both")


def test_the_writer_refuses_events_that_mix_them(tmp_path):
    h = TraceHeader("m", "gemma4", 3, 8, 2, [100, 100, 100], [0, 0, 0])
    a = synthetic_run_events(3, 1, 3, 8, 2, seed=1, last_layer=EVERY)
    b = [dataclasses.replace(e, turn=1, positions=e.positions + 4)
         for e in synthetic_run_events(3, 1, 3, 8, 2, seed=2, last_layer=FINAL)]
    res, chg = _record(a + b, h)
    path = tmp_path / "m.route.csv"
    path.write_text("kept")
    with pytest.raises(ValueError, match="steps 4..6 routes the last layer 2 as the 'final' "
                                         "convention, where the trace is 'every'"):
        write_trace(path, h, a + b, res, chg)
    assert path.read_text() == "kept"           # what the path pointed at is not destroyed


# --- properties: both conventions, every path --------------------------------------------------------

@settings(max_examples=30, deadline=None)
@given(conv=st.sampled_from([EVERY, FINAL]), n_prompt=st.integers(1, 6),
       n_decode=st.integers(1, 4), n_layer=st.integers(2, 4), k=st.integers(1, 3),
       budget=st.integers(1, 30), seed=st.integers(0, 50))
def test_written_traces_of_either_convention_read_back_on_every_path(tmp_path_factory, conv,
                                                                     n_prompt, n_decode,
                                                                     n_layer, k, budget, seed):
    h = TraceHeader("m", "gemma4", n_layer, 6, k, [7] * n_layer, [0] * n_layer)
    events = synthetic_run_events(n_prompt, n_decode, n_layer, 6, k, seed=seed, last_layer=conv)
    res, chg = _record(events, h, budget * 7)
    path = tmp_path_factory.mktemp("ll") / "t.route.csv"
    write_trace(path, h, events, res, chg)
    tr = all_paths(path)
    decisive = n_prompt > 1
    assert tr.last_layer == (conv if decisive else None)
    pre = tr.events[0]
    assert np.array_equal(pre.routes, events[0].routes)
    routed = int((pre.routes[:, -1, 0] >= 0).sum())
    assert routed == (n_prompt if conv == EVERY else 1)
    # the replay looks the last layer's prefill experts up once each: the recorded residency
    # (the cache that wrote the file) agrees row for row
    cache = ExpertCache(h.expert_bytes, h.n_expert, budget * 7)
    for ev, r in zip(tr.events, tr.residency):
        got = cache.apply(ev).trace_residency()
        assert np.array_equal(got[ev.routes >= 0], r[ev.routes >= 0])
