"""``refsim replay --stream`` reads and replays turn by turn with the whole-file replay's output."""

import dataclasses
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.cache import ExpertCache
from refsim.cli import main
from refsim.studies.replay import replay_trace, replay_turns
from refsim.testing.shared import require_shared
from refsim.testing.traces import event_streams
from refsim.trace import iter_trace_turns, read_trace, write_trace


def record_rows(report):
    return [(r.kind, r.first_position, r.n_pos, r.lookups, r.hits, r.read_bytes,
             r.resident_bytes) for r in report.records]


def same_replay(path, budget, block):
    whole = replay_trace(read_trace(path), budget)
    stream, turns = iter_trace_turns(path, block=block)
    seen = []
    part = replay_turns(stream.header, turns, budget, on_record=seen.append)
    assert part.records == []
    part.records = seen
    assert part.summary.as_dict() == whole.summary.as_dict()
    assert record_rows(part) == record_rows(whole)
    assert (part.residency_rows, part.residency_agree) == (whole.residency_rows,
                                                           whole.residency_agree)
    assert part.disagreements == whole.disagreements
    tr = read_trace(path)
    assert (stream.n_rows, stream.n_events, stream.n_prompt) == (tr.n_rows, len(tr.events),
                                                                 tr.n_prompt)
    assert stream.unrouted_layers == tr.unrouted_layers
    assert stream.last_layer == tr.last_layer


@settings(max_examples=40, deadline=None)
@given(stream=event_streams(), n_turns=st.integers(1, 4), budget=st.integers(1, 60),
       block=st.integers(1, 400), record_budget=st.integers(1, 60), every=st.booleans())
def test_streamed_replay_equals_the_whole_replay(tmp_path_factory, stream, n_turns, budget,
                                                 block, record_budget, every):
    # the stream's events repeated as turns 0..n_turns-1, residency recorded at another budget
    # (so disagreements are compared too); blocks as small as one byte cut rows and turns.
    # every: the EVERY last-layer convention (a gemma4 trace; layer 0's ids at the last layer)
    h = stream.header
    src = stream.events
    if every:
        h = dataclasses.replace(h, arch="gemma4")
        src = []
        for e in stream.events:
            if e.kind.name == "PREFILL":
                r = e.routes.copy()
                r[:, h.n_layer - 1] = r[:, 0]
                e = dataclasses.replace(e, routes=r, weights=np.full(r.shape, np.float32(0.5)))
            src.append(e)
    events = [dataclasses.replace(e, turn=t) for t in range(n_turns) for e in src]
    cache = ExpertCache(h.expert_bytes, h.n_expert, record_budget)
    recs = [cache.apply(e) for e in events]
    path = tmp_path_factory.mktemp("st") / "t.route.csv"
    write_trace(path, h, events, [r.residency for r in recs], [r.charged_bytes for r in recs])
    same_replay(path, budget, block)


def cli_outputs(capsys, tmp_path, trace, *extra):
    out = tmp_path / ("s.csv" if extra else "w.csv")
    assert main(["replay", str(trace), "--cache-mb", "1500", "--csv", str(out), *extra]) == 0
    return capsys.readouterr().out, out.read_bytes()


@pytest.mark.parametrize("which", ["demo", "qwen"])
def test_replay_stream_cli_is_byte_identical(capsys, tmp_path, which):
    if which == "demo":
        from pathlib import Path
        trace = Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv"
    else:
        trace = require_shared("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")
    whole = cli_outputs(capsys, tmp_path, trace)
    streamed = cli_outputs(capsys, tmp_path, trace, "--stream")
    assert streamed == whole
    assert b"\n1,prefill," in whole[1] or b"\n1,plain," in whole[1]
    same_replay(trace, 1500 << 20, 1 << 16)


def test_a_damaged_stream_gives_the_whole_reader_message(tmp_path):
    text = (require_shared("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")
            .read_text().replace("\n0,1,40,3,2,", "\n0,1,40,3,7,", 1))
    p = tmp_path / "bad.route.csv"
    p.write_text(text)
    from refsim.errors import TraceFormatError
    with pytest.raises(TraceFormatError) as whole:
        read_trace(p)
    stream, turns = iter_trace_turns(p, block=4096)
    with pytest.raises(TraceFormatError) as part:
        list(turns)
    assert str(part.value) == str(whole.value) and "column 'slot' is 7" in str(whole.value)


def test_stream_with_the_knobs_is_the_whole_replay(capsys):
    """--stream feeds the same ExpertCache, knobs included (--drop-cold-experts, --prefetch)."""
    from pathlib import Path
    from refsim.cli import main
    demo = str(Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv")
    outs = []
    for extra in ([], ["--stream"]):
        assert main(["replay", demo, "--cache-mb", "64", "--json", "--drop-cold-experts", "0.75",
                     "--prefetch", "1", *extra]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and '"knobs"' in outs[0]


def test_many_blank_lines_before_the_header_stream_as_read(tmp_path):
    """100,000 blank lines before the column header (an outside campaign found the preamble loop
    quadratic in them: minutes for a 1 MB file): the stream yields read_trace's events."""
    from pathlib import Path
    from refsim.trace import iter_trace_turns, read_trace
    src = (Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv").read_bytes()
    i = src.index(b"\nturn,") + 1
    p = tmp_path / "blank.route.csv"
    p.write_bytes(src[:i] + b"\n" * 100_000 + src[i:])
    _, turns = iter_trace_turns(p)
    streamed = [e for t in turns for e in t.events]
    whole = read_trace(p).events
    assert len(streamed) == len(whole) > 0
    assert all((a.routes == b.routes).all() for a, b in zip(streamed, whole))


def test_a_streamed_replay_without_records_keeps_none(tmp_path):
    # what `refsim replay --stream` without --csv does: the counters, no record held
    path = tmp_path / "t.route.csv"
    h, events = _two_turns()
    cache = ExpertCache(h.expert_bytes, h.n_expert, 8)
    recs = [cache.apply(e) for e in events]
    write_trace(path, h, events, [r.residency for r in recs], [r.charged_bytes for r in recs])
    whole = replay_trace(read_trace(path), 8)
    stream, turns = iter_trace_turns(path, block=64)
    part = replay_turns(stream.header, turns, 8, keep_records=False)
    assert part.parts == [] and part.records == []
    assert part.summary.as_dict() == whole.summary.as_dict()
    assert (part.residency_rows, part.residency_agree) == (whole.residency_rows,
                                                           whole.residency_agree)


def _two_turns():
    from refsim.events import DecodeEvent, DecodeKind
    from refsim.trace import TraceHeader
    import numpy as np
    h = TraceHeader("m", "qwen3moe", 2, 4, 1, np.array([4, 4]), np.array([0, 0]))
    events = []
    for t in range(2):
        for p, e in enumerate([0, 1, 2, 0, 3]):
            r = np.array([[[e], [(e + 1) % 4]]], np.int16)
            events.append(DecodeEvent(DecodeKind.PLAIN, np.array([p]), r,
                                      weights=np.full(r.shape, 0.5, np.float32), turn=t))
    return h, events


def _demo_bytes():
    from pathlib import Path
    return (Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv").read_bytes()


def _cut_line(src: bytes, n: int) -> int:
    """Byte offset of the start of line ``n`` (1-based)."""
    at = 0
    for _ in range(n - 1):
        at = src.index(b"\n", at) + 1
    return at


# (name, damage): each applied to the demo trace late in the file (line 2000 of ~2,700 rows)
_BYTE_DAMAGE = {
    "killed mid-row": lambda s, at: s[:at + 7],
    "killed mid-row, then blank": lambda s, at: s[:at + 7] + b"\n   ",
    "a bad field": lambda s, at: s[:at] + b"0,1,x" + s[at + 5:],
    "one field short": lambda s, at: s[:at] + s[at:].replace(b",", b"", 1),
    "a NUL byte": lambda s, at: s[:at + 3] + b"\0" + s[at + 4:],
    "not UTF-8": lambda s, at: s[:at + 3] + b"\xff" + s[at + 4:],
    "a cut UTF-8 sequence at the end": lambda s, at: s + b"\xe2\x82",
    "a non-ASCII blank line (read, not an error)": lambda s, at: s[:at] + "\u3000\n".encode() + s[at:],
    "a weight with 30 digits (read, not an error)": lambda s, at: s[:at] + s[at:].replace(
        b",0.", b",0.123456789012345678901234567890", 1),
}


@pytest.mark.parametrize("damage", sorted(_BYTE_DAMAGE))
@pytest.mark.parametrize("block", [64, 4096, 1 << 24])
def test_damaged_bytes_are_diagnosed_in_bounded_memory(tmp_path, monkeypatch, damage, block):
    """A file damaged in its bytes or its rows (a run killed mid-write, a NUL, a bad field) gives
    read_trace's message without the whole file being read again (the per-line read of the whole
    file is what holds ~6x the file); the rows the fast parser leaves but the rules accept are
    read and the stream goes on."""
    from refsim.errors import TraceFormatError
    from refsim.trace import stream as stream_mod
    src = _demo_bytes()
    p = tmp_path / "d.route.csv"
    p.write_bytes(_BYTE_DAMAGE[damage](src, _cut_line(src, 2000)))
    try:
        want = read_trace(p)
    except TraceFormatError as exc:
        want = exc

    def whole(path):
        raise AssertionError("the stream read the whole file for its message")

    monkeypatch.setattr(stream_mod, "_stream_failed", whole)
    monkeypatch.setattr(stream_mod, "read_trace", whole)
    if isinstance(want, TraceFormatError):
        with pytest.raises(TraceFormatError) as got:
            list(iter_trace_turns(p, block=block)[1])
        assert str(got.value) == str(want)
    else:
        parts = list(iter_trace_turns(p, block=block)[1])
        got = [e for t in parts for e in t.events]
        assert len(got) == len(want.events)
        assert all((a.routes == b.routes).all() and np.array_equal(a.weights, b.weights, equal_nan=True)
                   for a, b in zip(got, want.events))
        assert [ln for t in parts for ln in t.line_numbers][-1].max() == want.line_numbers[-1].max()


def test_the_utf8_check_piece_by_piece_is_the_whole_decode(tmp_path, monkeypatch):
    """_check_bytes (the stream's) finds the byte _read_text (the whole decode) names, for a
    sequence cut by a piece boundary anywhere."""
    from refsim.errors import TraceFormatError
    from refsim.trace import reader
    src = _demo_bytes()
    monkeypatch.setattr(reader, "READ_CHUNK", 7)
    for bad in (b"\xe2\x82A", b"\xf0\x9f\x98", b"\xc3", b"\xed\xa0\x80", b"\x80", b"\xe2\x82\xac\xff"):
        for at in range(len(src) - 40, len(src) - 30):
            p = tmp_path / "u.route.csv"
            p.write_bytes(src[:at] + bad + src[at:])
            with pytest.raises(TraceFormatError) as whole:
                reader._read_text(str(p))
            with pytest.raises(TraceFormatError) as piece:
                reader._check_bytes(str(p))
            assert str(piece.value) == str(whole.value)


def _through_fifo(tmp_path, data: bytes, block: int = 4096):
    """iter_trace_turns of ``data`` written into a FIFO by a thread: (turns or the error, the FIFO path)."""
    import os
    import threading
    fifo = tmp_path / "pipe.route.csv"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as out:
            out.write(data)
    t = threading.Thread(target=feed)
    t.start()
    try:
        stream, turns = iter_trace_turns(fifo, block=block)
        got = (stream, list(turns))
    except Exception as exc:          # noqa: BLE001 - compared by the caller
        got = exc
    t.join()
    return got, fifo


@pytest.mark.parametrize("damage", [None, "a bad field", "one field short", "a NUL byte"])
def test_a_fifo_streams_as_the_regular_file_does(tmp_path, damage):
    """A FIFO (``zcat trace.gz | refsim replay /dev/stdin --stream``) is streamed from a temporary
    copy: the same turns as the regular file, or the same message naming the FIFO; the copy is
    removed."""
    import glob
    import tempfile
    from refsim.errors import TraceFormatError
    src = _demo_bytes()
    data = src if damage is None else _BYTE_DAMAGE[damage](src, _cut_line(src, 2000))
    regular = tmp_path / "r.route.csv"
    regular.write_bytes(data)
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "refsim-stream-*")))
    got, fifo = _through_fifo(tmp_path, data)
    if damage is None:
        stream, parts = got
        want = read_trace(regular)
        assert stream.path == str(fifo) and all(p.path == str(fifo) for p in parts)
        events = [e for p in parts for e in p.events]
        assert len(events) == len(want.events)
        assert all((a.routes == b.routes).all() for a, b in zip(events, want.events))
    else:
        with pytest.raises(TraceFormatError) as exc:
            list(iter_trace_turns(regular)[1])
        assert isinstance(got, TraceFormatError)
        assert str(got) == str(exc.value).replace(str(regular), str(fifo))
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "refsim-stream-*"))) == before
    assert not [f for f in os.listdir("/proc/self/fd") if "refsim-stream-" in os.path.realpath(
        os.path.join("/proc/self/fd", f))]     # the copy's descriptor is closed too


_RULE_DAMAGE = {"a deleted row": None, "a layer out of range": (3, b"99", "column 'layer' is 99"),
                "a negative weight": (6, b"-0.1", "column 'weight' is -0.1,"),
                "a negative weight of 25 digits": (6, b"-0.1234567890123456789012345",
                                                   "column 'weight' is -0.12345678901234568,"),
                "an infinite weight": (6, b"inf", "column 'weight' is inf,"),
                "a weight above float32": (6, b"1e39", "column 'weight' is 1e+39,")}


@pytest.mark.parametrize("damage", sorted(_RULE_DAMAGE))
def test_a_rule_broken_gets_the_per_line_message_from_the_parsed_columns(tmp_path, monkeypatch, damage):
    """Rows that parse but break a rule (a deleted row; a value out of range, read by the wide
    parse) are diagnosed by the per-line rules on the fast parser's columns, not by the per-line
    parse of the whole file (~14x the file in memory)."""
    from refsim.errors import TraceFormatError
    src = _demo_bytes()
    at = _cut_line(src, 1500)
    if damage == "a deleted row":
        data = src[:at] + src[src.index(b"\n", at) + 1:]
    else:                             # turn,phase,step,layer,slot,expert,weight,...
        col, text, _ = _RULE_DAMAGE[damage]
        row = src[at:src.index(b"\n", at)].split(b",")
        data = src[:at] + b",".join(row[:col] + [text] + row[col + 1:]) + src[src.index(b"\n", at):]
    p = tmp_path / "s.route.csv"
    p.write_bytes(data)
    from refsim.trace import reader
    with pytest.raises(TraceFormatError) as whole:
        reader._read_slow(str(p))

    def no_slow(path):
        raise AssertionError("the per-line parse of the whole file")
    monkeypatch.setattr(reader, "_read_slow", no_slow)
    with pytest.raises(TraceFormatError) as streamed:
        list(iter_trace_turns(p, block=4096)[1])
    with pytest.raises(TraceFormatError) as read:
        read_trace(p)
    assert str(streamed.value) == str(read.value) == str(whole.value)
    assert ("only; expected all 4 slots" if damage == "a deleted row" else _RULE_DAMAGE[damage][2]) in str(whole.value)
