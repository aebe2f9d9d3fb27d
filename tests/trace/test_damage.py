"""Issue 12 section B: every damage of a route trace is a ``file:line`` error, every preamble number
is bounded before it is used, and the writer writes only what the reader reads (dropped slots).

Each test holds the minimal input of one defect found on main (db02823); the comment says what
main did with it.
"""

import re
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim.cache import ExpertCache
from refsim.cli import main
from refsim.errors import TraceFormatError
from refsim.events import DecodeEvent, DecodeKind
from refsim.testing.mutate import refusal_in_child
from refsim.testing.traces import event_streams
from refsim.trace import TraceHeader, read_trace, write_trace

DEMO = Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv"

HEAD = ("# route_trace v1\n"
        "# model=m arch=qwen3moe n_layer=2 n_expert=4 n_expert_used=2\n"
        "# layer=0 expert_bytes=8 dense_bytes=1\n"
        "# layer=1 expert_bytes=4 dense_bytes=2\n"
        "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n")
# a prefill of steps 0..1 (layer 1, the last, routes step 1 only), then a decode at step 2
PRE = ("0,0,0,0,0,1,0.5,0,8\n"        # line 6
       "0,0,0,0,1,2,0.5,0,8\n"
       "0,0,1,0,0,1,0.5,0,0\n"        # expert 1 again in the batch: its first row paid
       "0,0,1,0,1,3,0.5,0,8\n"
       "0,0,1,1,0,3,0.5,0,4\n"        # line 10: the last layer, final position
       "0,0,1,1,1,0,0.5,0,4\n")
DEC = ("0,1,2,0,0,1,0.5,1,0\n"        # line 12
       "0,1,2,0,1,2,0.5,1,0\n"
       "0,1,2,1,0,3,0.5,1,0\n"
       "0,1,2,1,1,0,0.5,1,0\n")
GOOD = HEAD + PRE + DEC


def write(tmp_path, text, name="t.route.csv"):
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def refused(tmp_path, text, pattern):
    p = write(tmp_path, text)
    with pytest.raises(TraceFormatError, match=pattern) as exc:
        read_trace(p)
    assert str(exc.value).startswith(f"{p}:"), exc.value
    return str(exc.value)


def same_events(a, b):
    assert len(a.events) == len(b.events)
    for x, y in zip(a.events, b.events):
        assert x.kind == y.kind and (x.positions == y.positions).all()
        assert (x.routes == y.routes).all()
    for x, y in zip(a.residency, b.residency):
        assert (x == y).all()


def test_good_minimal_trace(tmp_path):
    tr = read_trace(write(tmp_path, GOOD))
    assert [e.kind for e in tr.events] == [DecodeKind.PREFILL, DecodeKind.PLAIN]
    assert tr.events[0].routes[:, 1].tolist() == [[-1, -1], [3, 0]]


# --- B1: blank lines (main: "ValueError: could not broadcast") ------------------------------------

@pytest.mark.parametrize("text", [
    GOOD + "\n",                                        # an editor's trailing newline
    GOOD + "\n  \n\t\r\n",                              # several, whitespace-only, CRLF
    HEAD + PRE[:40] + "\n" + PRE[40:] + DEC,            # mid-file
    HEAD.replace("# layer=0", "\n# layer=0") + PRE + DEC,   # inside the preamble
    GOOD + "   ",                                       # whitespace after the last end of line
])
def test_blank_lines_are_skipped(tmp_path, text):
    same_events(read_trace(write(tmp_path, text)), read_trace(write(tmp_path, GOOD, "good.csv")))


def test_blank_lines_keep_the_file_line_numbers(tmp_path):
    text = HEAD + PRE[:20] + "\n\n" + PRE[20:].replace("0,0,1,0,0,1,", "0,0,1,0,0,x,") + DEC
    refused(tmp_path, text, r":10: column 'expert' is 'x', expected an integer")


# --- B2: preamble numbers bounded before use -------------------------------------------------------

@pytest.mark.parametrize("old, new, pattern", [
    # main grew n_layer=1e9 to 22 GB; n_expert=50000000 took 6.4 GB; 2**40 was a MemoryError
    ("n_layer=2", "n_layer=1000000000", r":2: n_layer=1000000000 is out of range; expected 1..4096"),
    ("n_layer=2", "n_layer=1e9", r":2: n_layer='1e9' is not an integer"),
    ("n_expert=4", "n_expert=50000000", r":2: n_expert=50000000 is out of range; expected 1..32767"),
    ("n_expert=4", "n_expert=1099511627776", r":2: n_expert=1099511627776 is out of range"),
    ("n_expert_used=2", "n_expert_used=5", r":2: n_expert_used=5 is out of range; expected 1..4"),
    ("n_expert_used=2", "n_expert_used=0", r":2: n_expert_used=0 is out of range"),
    ("n_layer=2", "n_layer=1_0", r":2: n_layer='1_0' is not an integer"),
    ("n_layer=2", "n_layer=\u0662", r":2: n_layer='\u0662' is not an integer"),   # ARABIC-INDIC TWO
    # main read a leading zero as written (n_layer=048 was 48): the engine writes %d, and the
    # rows refuse it, so a flipped byte ("8" -> "0") is an error in the preamble too
    ("n_layer=2", "n_layer=02", r":2: n_layer=02 is not written as the engine writes integers; expected "
                                r"'0' or digits without a leading zero"),
    ("expert_bytes=8", "expert_bytes=008", r":3: expert_bytes=008 is not written as the engine writes"),
    ("# layer=1 ", "# layer=01 ", r":4: layer=01 is not written as the engine writes integers"),
    ("dense_bytes=1\n", "dense_bytes=-0\n", r":3: dense_bytes=-0 is not written as the engine writes"),
    ("n_expert_used=2", "n_expert_used=2 cache_mb=0256", r":2: cache_mb='0256' is not a budget"),
    # main: OverflowError
    ("expert_bytes=8", "expert_bytes=9223372036854775808",
     r":3: expert_bytes=9223372036854775808 is out of range; expected 1..1099511627776"),
    ("dense_bytes=2\n", "dense_bytes=18446744073709551616\n", r":4: dense_bytes=18446744073709551616 is out"),
    ("layer=1 ", "layer=99999999999999999999999 ", r":4: layer=99999999999999999999999 is out of range"),
    # main accepted these and quoted them later as the recorded budget
    ("n_expert_used=2", "n_expert_used=2 cache_mb=abc", r":2: cache_mb='abc' is not a budget"),
    ("n_expert_used=2", "n_expert_used=2 cache_mb=-256", r":2: cache_mb='-256' is not a budget"),
    ("n_expert_used=2", "n_expert_used=2 cache_mb=nan", r":2: cache_mb='nan' is not a budget"),
    ("n_expert_used=2", "n_expert_used=2 cache_mb=inf", r":2: cache_mb='inf' is not a budget"),
    ("n_expert_used=2", "n_expert_used=2 cache_mb=0", r":2: cache_mb='0' is not a budget"),
    ("n_expert_used=2", "n_expert_used=2 cache_mb=1e400", r":2: cache_mb='1e400' is not a budget"),
    # one line, two values: main took the last silently
    ("n_expert_used=2", "n_expert_used=2 n_layer=3", r":2: n_layer= given twice"),
    ("# layer=1 expert_bytes=4", "# layer=1 expert_bytes=4 expert_bytes=5", r":4: expert_bytes= given twice"),
    # a digit flipped to a space, a model key on a layer line (the engine's scripts merge all '#'
    # lines' keys, so they would read n_layer=9)
    ("dense_bytes=1\n", "dense_bytes=1 5\n", r":3: '5' on a layer line; expected"),
    ("dense_bytes=1\n", "dense_bytes=1 n_layer=9\n", r":3: 'n_layer=' on a layer line"),
    ("# layer=0 expert_bytes=8 dense_bytes=1\n",
     "# layer=0 expert_bytes=8 dense_bytes=1\n# model=x arch=a n_layer=2 n_expert=4 n_expert_used=1\n",
     r":4: a second model line \(the first is line 2\)"),
])
def test_preamble_numbers_are_bounded(tmp_path, old, new, pattern):
    assert old in GOOD
    refused(tmp_path, GOOD.replace(old, new, 1), pattern)


def test_a_stray_line_inside_the_preamble_is_named(tmp_path):
    # a line that is neither '#' nor the column header ends the preamble: the error names that line and what was
    # expected there (a fresh-user check found it pointing at the model line instead); a preamble that reaches
    # the column header with a layer line missing still names the model line
    got = refused(tmp_path, GOOD.replace("# layer=1 ", "hello\n# layer=1 ", 1),
                  r":4: expected '# layer=L expert_bytes=B dense_bytes=B' lines, then the column header "
                  r"\(turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\[,dropped\]\); got 'hello' "
                  r"\(1 of n_layer=2 layer lines missing, the first for layer 1\)")
    assert got.count("\n") == 0
    refused(tmp_path, GOOD.replace("# layer=1 expert_bytes=4 dense_bytes=2\n", "", 1),
            r":2: preamble has no '# layer=L expert_bytes=B dense_bytes=B' line for layer 1 \(1 of n_layer=2")


def test_one_hash_is_the_preamble_marker(tmp_path):
    # '##layer=1' has the key '#layer': not a layer line, so layer 1 is missing (found by the mutation
    # campaign: the reader stripped every leading '#' and read it as layer 1, its independent reading did not)
    refused(tmp_path, GOOD.replace("# layer=1 ", "##layer=1 ", 1),
            r":2: preamble has no '# layer=L expert_bytes=B dense_bytes=B' line for layer 1 \(1 of n_layer=2")


@pytest.mark.parametrize("value", ["256", "0.5", "3000"])
def test_a_recorded_budget_is_kept(tmp_path, value):
    tr = read_trace(write(tmp_path, GOOD.replace("n_expert_used=2", f"n_expert_used=2 cache_mb={value}")))
    assert dict(tr.header.extra)["cache_mb"] == value


def test_the_largest_preamble_with_few_rows_allocates_little(tmp_path):
    # n_layer, n_expert and n_expert_used at their bounds, 8 rows: main allocated
    # n_pos x n_layer x k cells (3 x 4096 x 1024 x 20 B = 250 MB) before checking the rows
    layers = "".join(f"# layer={il} expert_bytes=8 dense_bytes=1\n" for il in range(4096))
    head = ("# route_trace v1\n# model=m arch=qwen3moe n_layer=4096 n_expert=32767 "
            "n_expert_used=1024\n" + layers + HEAD.splitlines(True)[-1])
    p = write(tmp_path, head + PRE + DEC)
    read_trace(write(tmp_path, GOOD, "warm.csv"))   # load and compile every Numba kernel both
    with pytest.raises(TraceFormatError):           # paths use first (a cold cache compiles):
        read_trace(p)                               # their one-time cost is not the file's
    tracemalloc.start()
    with pytest.raises(TraceFormatError, match=r":5: no row routes layer 2"):
        read_trace(p)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20               # the text, one 4 MiB read buffer, the parsed rows


def test_the_header_refuses_what_the_reader_refuses():
    with pytest.raises(ValueError, match="n_expert=40000 exceeds the route trace bound 32767"):
        TraceHeader("m", "a", 1, 40000, 1, np.array([1]), np.array([0]))
    with pytest.raises(ValueError, match=r"<= 1099511627776"):
        TraceHeader("m", "a", 1, 4, 1, np.array([1 << 41]), np.array([0]))


# --- B3: row integers read as written ----------------------------------------------------------------

def test_a_row_integer_past_int64_is_reported_as_its_text(tmp_path):
    # main: printed as -9223372036854775808 after a numpy RuntimeWarning on stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        refused(tmp_path, GOOD.replace("0,1,2,0,0,1,", "0,1,9223372036854775808,0,0,1,"),
                r":12: column 'step' is '9223372036854775808', expected an integer in 0..2147483647")


def test_a_position_past_int32_is_out_of_range(tmp_path):
    refused(tmp_path, GOOD.replace("0,1,2,0,0,1,", "0,1,2147483648,0,0,1,"),
            r":12: column 'step' is 2147483648, expected a position in 0..2147483647")


@pytest.mark.parametrize("field", ["1_0", "\u0661", "\uff11", "1.0", "1e0", "+1", "0x1", "", " "])
def test_integers_are_ascii_digits(tmp_path, field):
    # main read 1_0 as 10 (int()), 1.0 and 1e0 as 1 (the float fast path) and the digits as 1
    refused(tmp_path, GOOD.replace("0,1,2,0,0,1,", f"0,1,2,0,0,{field},"),
            r":12: column 'expert' is .*, expected an integer in 0..3 \(ASCII digits\)")


@pytest.mark.parametrize("weight", ["1_0", "\u0661.5", "0,5", "--1", "nanx"])
def test_weights_are_ascii_numbers(tmp_path, weight):
    refused(tmp_path, GOOD.replace("0,1,2,0,0,1,0.5,", f"0,1,2,0,0,1,{weight},"), r":12: ")


def test_a_weight_outside_float32_is_refused(tmp_path):
    refused(tmp_path, GOOD.replace("0,1,2,0,0,1,0.5,", "0,1,2,0,0,1,1e39,"),
            r":12: column 'weight' is 1e\+39, expected a finite float32 weight >= 0 or nan")


@pytest.mark.parametrize("weight, shown", [("-0.5", "-0.5"), ("-1e-05", "-1e-05"), ("inf", "inf"),
                                           ("-inf", "-inf")])
def test_a_negative_or_infinite_weight_is_refused(tmp_path, weight, shown):
    # main accepted these as written. The engine writes the router's final weight (softmax or
    # sigmoid, renormalised, times expert_weights_scale: build_moe_ffn, llama-cpp-notes.md 2.4),
    # never negative, never infinite (the renormalising sum is clamped to >= 6.1e-5)
    msg = refused(tmp_path, GOOD.replace("0,1,2,0,0,1,0.5,", f"0,1,2,0,0,1,{weight},"),
                  rf":12: column 'weight' is {shown}, expected a finite float32 weight >= 0 or nan")
    assert "never negative" in msg


@pytest.mark.parametrize("weight, value", [("2.5", 2.5), ("0", 0.0)])
def test_weights_above_one_and_zero_read_as_written(tmp_path, weight, value):
    # > 1 is valid: expert_weights_scale (DeepSeek-style routed_scaling_factor 2.5, e.g. Ling's
    # bailingmoe, in the engine's registry) multiplies the weights after renormalisation
    tr = read_trace(write(tmp_path, GOOD.replace("0,1,2,0,0,1,0.5,", f"0,1,2,0,0,1,{weight},")))
    assert tr.events[1].weights[0, 0, 0] == np.float32(value)


def test_one_nan_among_a_positions_weights_is_refused(tmp_path):
    # main: accepted, the weight lost as "unknown". The engine writes nan for a whole layer record
    # (no weight node) or the node's values (router_hook.cpp flush_pending)
    for nan in ("nan", "-nan"):
        refused(tmp_path, GOOD.replace("0,1,2,0,1,2,0.5,", f"0,1,2,0,1,2,{nan},"),
                r":13: weight nan at step 2 layer 0 where the other slots have weights; expected all of "
                r"a position's weights in a layer nan \(no weight node\) or none")
    both = GOOD.replace("0,1,2,0,0,1,0.5,", "0,1,2,0,0,1,nan,").replace("0,1,2,0,1,2,0.5,", "0,1,2,0,1,2,-nan,")
    w = read_trace(write(tmp_path, both)).events[1].weights
    assert np.isnan(w[0, 0]).all() and not np.isnan(w[0, 1]).any()   # a layer without a weight node


def test_crlf_reads_as_lf(tmp_path):
    same_events(read_trace(write(tmp_path, GOOD.replace("\n", "\r\n"))),
                read_trace(write(tmp_path, GOOD, "good.csv")))


@pytest.mark.parametrize("field", [" 1", "1 ", "01", "-0", "00"])
def test_fields_are_written_as_the_engine_writes_them(tmp_path, field):
    # a flipped byte ("29" -> "2 ", "0.5" -> "070") must not read as another number
    refused(tmp_path, GOOD.replace("0,1,2,0,0,1,", f"0,1,2,0,0,{field},"), r":12: column 'expert' is ")


@pytest.mark.parametrize("weight", ["070171731", ".5", "+0.5", " 0.5", "0.5 "])
def test_weights_are_written_as_the_engine_writes_them(tmp_path, weight):
    refused(tmp_path, GOOD.replace("0,1,2,0,0,1,0.5,", f"0,1,2,0,0,1,{weight},"),
            r":12: column 'weight' is .*, expected a number")


@pytest.mark.parametrize("weight, value", [("1e-05", 1e-5), ("1.0", 1.0), ("-nan", None), ("0", 0.0),
                                           ("2.5E+01", 25.0), ("1.", 1.0)])
def test_weights_as_printf_and_numpy_write_them(tmp_path, weight, value):
    w2 = "nan" if value is None else "0.5"             # a position's weights are all nan or none
    tr = read_trace(write(tmp_path, GOOD.replace("0,1,2,0,0,1,0.5,", f"0,1,2,0,0,1,{weight},")
                          .replace("0,1,2,0,1,2,0.5,", f"0,1,2,0,1,2,{w2},")))
    w = tr.events[1].weights[0, 0, 0]
    assert np.isnan(w) if value is None else w == np.float32(value)


# --- B4: expert ids fit int16 ------------------------------------------------------------------------

def test_more_than_int16_experts_is_refused(tmp_path):
    # main: id 65551 stored as 15 (int16), the counters of another trace
    text = GOOD.replace("n_expert=4", "n_expert=65552").replace("0,1,2,0,0,1,", "0,1,2,0,0,65551,")
    refused(tmp_path, text, r":2: n_expert=65552 is out of range; expected 1..32767 \(expert ids are "
                            r"stored as int16\)")


def test_the_largest_expert_id_reads_exactly(tmp_path):
    text = GOOD.replace("n_expert=4", "n_expert=32767").replace("0,1,2,0,0,1,0.5,1,0",
                                                                "0,1,2,0,0,32766,0.5,0,8")
    tr = read_trace(write(tmp_path, text))
    assert tr.events[1].routes[0, 0].tolist() == [32766, 2]


# --- B5: the last-layer rule, both ways ---------------------------------------------------------------

def test_deleting_the_prefills_last_layer_rows_is_refused(tmp_path):
    # main: accepted (and replayed 2 lookups short)
    pre = "".join(PRE.splitlines(True)[:4])
    refused(tmp_path, HEAD + pre + DEC, r":6: the prefill chunk starting here ends its turn's prefill but "
                                        r"has no rows for the last layer 1 at its final step 1")


def test_a_prefill_routing_the_last_layer_at_every_position_is_refused(tmp_path):
    extra = "0,0,0,1,0,3,0.5,0,4\n0,0,0,1,1,0,0.5,0,0\n"
    pre = PRE.replace("0,0,1,1,0,3,0.5,0,4\n0,0,1,1,1,0,0.5,0,4\n",
                      extra + "0,0,1,1,0,3,0.5,0,0\n0,0,1,1,1,0,0.5,0,4\n")
    refused(tmp_path, HEAD + pre + DEC, r":10: a prefill chunk routes the last layer 1 at step 0; expected "
                                        r"the last-layer rule: it is routed for the chunk's final position 1")


def test_swapped_turn_and_phase_columns_are_refused(tmp_path):
    # main: every decode became a one-position prefill chunk of turn 1, exit 0
    text = DEMO.read_text().replace("turn,phase,step", "phase,turn,step", 1)
    msg = refused(tmp_path, text, r"a prefill chunk routes the last layer 7 at step 20; expected the "
                                  r"last-layer rule: an earlier chunk of a turn's prefill routes it nowhere")
    assert "swapped or damaged turn/phase" in msg


def test_a_prefill_in_two_chunks_reads(tmp_path):
    # chunk [0] asks no logits (no last-layer rows), chunk [1] ends the prompt, then a decode
    h = TraceHeader("m", "qwen3moe", 3, 4, 2, np.array([8, 4, 2]), np.array([1, 2, 3]))
    r = np.array([[[1, 2], [3, 0], [-1, -1]]], np.int16)
    evs = [DecodeEvent(DecodeKind.PREFILL, np.array([0]), r),
           DecodeEvent(DecodeKind.PREFILL, np.array([1]), np.array([[[1, 3], [0, 2], [2, 1]]], np.int16)),
           DecodeEvent(DecodeKind.PLAIN, np.array([2]), np.array([[[1, 0], [0, 1], [3, 2]]], np.int16))]
    cache = ExpertCache(h.expert_bytes, h.n_expert, 1 << 20)
    recs = [cache.apply(e) for e in evs]
    write_trace(tmp_path / "c.csv", h, evs, [x.residency for x in recs], [x.charged_bytes for x in recs])
    tr = read_trace(tmp_path / "c.csv")
    assert [(e.kind, e.positions.tolist()) for e in tr.events] == [
        (DecodeKind.PREFILL, [0]), (DecodeKind.PREFILL, [1]), (DecodeKind.PLAIN, [2])]
    # the same file with the first chunk routing the last layer too: it asked no logits
    text = (tmp_path / "c.csv").read_text().splitlines(True)
    text.insert(10, "0,0,0,2,0,2,nan,0,2,0\n0,0,0,2,1,1,nan,0,2,0\n")
    refused(tmp_path, "".join(text), r":11: a prefill chunk routes the last layer 2 at step 0; expected "
                                     r"the last-layer rule: an earlier chunk of a turn's prefill routes it")


@pytest.mark.parametrize("i", range(10))
def test_a_duplicated_row_is_reported_as_a_duplicate_at_its_line(tmp_path, i):
    # main: "layer 0 at step 0 has rows for slots [0] only; expected all 2 slots" (the repeat
    # starts a new decode), which sends the user looking for a deleted row
    rows = (PRE + DEC).splitlines(True)
    key = tuple(int(x) for x in rows[i].split(",")[:5])
    text = HEAD + "".join(rows[:i + 1] + [rows[i]] + rows[i + 1:])
    refused(tmp_path, text, rf":{i + 7}: a duplicate row: \(turn, phase, step, layer, slot\) = "
                            rf"{re.escape(str(key))} as on line {i + 6}; expected each routed slot once")


def test_a_layer_no_row_routes_other_than_the_last_is_refused(tmp_path):
    # rows of layer 0 deleted everywhere (grep -v): main replayed the layer-1 half of the trace
    rows = "".join(r for r in (PRE + DEC).splitlines(True) if r.split(",")[3] != "0")
    refused(tmp_path, HEAD + rows, r":3: no row routes layer 0 \(1 layer\(s\) below the last route no row\)")


# --- B6: duplicate columns, binary files --------------------------------------------------------------

def test_a_duplicate_column_is_refused(tmp_path):
    text = GOOD.replace("expert_bytes\n", "expert_bytes,expert\n", 1)
    text = "".join(r[:-1] + ",3\n" if i >= 5 else r for i, r in enumerate(text.splitlines(True)))
    refused(tmp_path, text, r":5: column 'expert' appears twice in the column header")


def test_dev_zero_is_refused_from_its_first_bytes():
    # main: read /dev/zero whole (forever, then out of memory); the child has a 60 s, 1 GiB guard
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    msg = refusal_in_child("refsim.trace:read_trace", "/dev/zero")
    assert msg.startswith("/dev/zero:1: expected '# route_trace v1', got '\\x00\\x00")
    assert msg.endswith("(not a route trace)")


def test_a_trace_through_a_fifo_reads_as_the_file(tmp_path):
    # open() waits for the writer (as cat does; docs/trace-format.md "FIFOs and devices"), then the
    # per-line path reads it; --stream's reader takes it whole
    import os
    import threading
    from refsim.trace import iter_trace_turns
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    want = read_trace(write(tmp_path, GOOD, "good.csv"))
    for read in (read_trace, lambda p: iter_trace_turns(p)[1].__next__()):
        t = threading.Thread(target=lambda: fifo.write_text(GOOD), daemon=True)
        t.start()
        got = read(fifo)
        t.join(10)
        same_events(got, want)


def test_a_valid_but_edited_trace_is_read_as_written(tmp_path):
    """docs/trace-format.md "What a valid but edited trace can do": the reader cannot see these
    edits; a replay at the recorded budget (cache_mb=256) sees the id edit, not the 1 -> 2 one."""
    from refsim.studies.replay import replay_trace
    lines = DEMO.read_text().splitlines(True)
    assert lines[583] == "0,1,20,2,0,30,0.476394,1,0,0\n"           # line 584: a hit on expert 30
    budget = ExpertCache.mib_to_bytes(256)
    for edit, agree, listed in (("0,1,20,2,0,30,0.476394,2,0,0\n", 2612, []),
                                ("0,1,20,2,0,31,0.476394,1,0,0\n", 2611, [(618, 30, 1, 0)])):
        tr = read_trace(write(tmp_path, "".join(lines[:583] + [edit] + lines[584:])))
        rep = replay_trace(tr, budget)
        assert (rep.residency_agree, rep.residency_rows) == (agree, 2612)
        assert [(x.line, x.expert, x.recorded, x.replayed) for x in rep.disagreements] == listed


def test_a_multi_gib_binary_file_is_refused_without_reading_it(tmp_path):
    p = tmp_path / "big.bin"
    with open(p, "wb") as fh:           # sparse: 3 GiB of zeros on no disk
        fh.truncate(3 << 30)
    tracemalloc.start()
    with pytest.raises(TraceFormatError, match=r"big.bin:1: expected '# route_trace v1'"):
        read_trace(p)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1 << 20


def test_binary_after_the_magic_is_refused_at_its_line(tmp_path):
    p = write(tmp_path, GOOD.encode() + b"\x00" * 100)
    with pytest.raises(TraceFormatError, match=rf":16: NUL byte at byte offset {len(GOOD)}; expected text"):
        read_trace(p)


def test_non_utf8_names_line_and_offset(tmp_path):
    p = write(tmp_path, GOOD.encode().replace(b"model=m", b"model=\xff"))
    with pytest.raises(TraceFormatError, match=r":2: not UTF-8 text \(byte 0xff at byte offset 25\)"):
        read_trace(p)


# --- B7: sweep refuses a trace without rows ----------------------------------------------------------

def test_sweep_refuses_a_preamble_only_trace(tmp_path, capsys):
    # main: a table of zeros, the CSV and the PNG written, exit 0
    p = write(tmp_path, HEAD)
    out_csv, out_png = tmp_path / "s.csv", tmp_path / "s.png"
    assert main(["sweep", str(p), "--cache-mb", "1", "--policy", "lru", "--csv", str(out_csv)]) == 1
    err = capsys.readouterr().err
    assert f"{p}:6: the trace has a preamble but no rows (nothing to sweep)" in err
    assert err.count("\n") == 1 and not out_csv.exists() and not out_png.exists()


# --- B8: dropped slots, written as the engine writes them and read back -----------------------------

def _dropped_event():
    h = TraceHeader("m", "qwen3moe", 2, 4, 2, np.array([8, 4]), np.array([1, 2]))
    routes = np.array([[[1, 2], [3, 0]]], np.int16)
    w = np.array([[[0.9, 0.1], [0.75, 0.25]]], np.float32)
    drop = np.array([[[False, True], [False, False]]])
    return h, DecodeEvent(DecodeKind.PLAIN, np.array([5]), routes, weights=w, dropped=drop)


def test_a_dropped_slot_round_trips(tmp_path):
    # main: write_trace wrote residency -1 for the dropped slot, which read_trace refused
    h, ev = _dropped_event()
    rec = ExpertCache(h.expert_bytes, h.n_expert, 1 << 20).apply(ev)
    assert rec.residency[0, 0, 1] == -1                      # the cache never looked it up
    write_trace(tmp_path / "d.csv", h, [ev], [rec.residency], [rec.charged_bytes])
    rows = (tmp_path / "d.csv").read_text().splitlines()[5:]
    assert rows == ["0,1,5,0,0,1,0.9,0,8,0",
                    "0,1,5,0,1,2,0.1,0,0,1",                # router's id and weight, miss, 0 bytes
                    "0,1,5,1,0,3,0.75,0,4,0",
                    "0,1,5,1,1,0,0.25,0,4,0"]
    tr = read_trace(tmp_path / "d.csv")
    assert tr.events[0].dropped.tolist() == ev.dropped.tolist()
    assert tr.residency[0][0, 0].tolist() == [0, 0]
    again = ExpertCache(h.expert_bytes, h.n_expert, 1 << 20)
    again.apply(tr.events[0])
    assert again.stats.lookups.sum() == 3 and again.stats.read_bytes.sum() == 8 + 4 + 4


def test_a_dropped_slot_charging_bytes_is_not_written(tmp_path):
    h, ev = _dropped_event()
    rec = ExpertCache(h.expert_bytes, h.n_expert, 1 << 20).apply(ev)
    chg = rec.charged_bytes.copy()
    chg[0, 0, 1] = 8
    with pytest.raises(ValueError, match="dropped slot .* has 8 bytes charged"):
        write_trace(tmp_path / "d.csv", h, [ev], [rec.residency], [chg])


@pytest.mark.parametrize("w", [-0.25, np.inf])
def test_a_weight_the_reader_refuses_is_not_written(tmp_path, w):
    h, ev = _dropped_event()
    rec = ExpertCache(h.expert_bytes, h.n_expert, 1 << 20).apply(ev)
    ev.weights[0, 1, 0] = w
    with pytest.raises(ValueError, match="routing weight .*; expected a finite weight >= 0 or nan"):
        write_trace(tmp_path / "d.csv", h, [ev], [rec.residency], [rec.charged_bytes])


def test_every_slot_dropped_is_refused(tmp_path):
    head = HEAD.replace("expert_bytes\n", "expert_bytes,dropped\n")
    rows = "".join(r[:-1] + ",0\n" for r in (PRE + DEC).splitlines(True))
    # both slots of the decode's layer 0 dropped (as misses: only a miss is dropped)
    rows = rows.replace("0,1,2,0,0,1,0.5,1,0,0", "0,1,2,0,0,1,0.5,0,0,1").replace(
        "0,1,2,0,1,2,0.5,1,0,0", "0,1,2,0,1,2,0.5,0,0,1")
    refused(tmp_path, head + rows, r":12: every slot of layer 0 at step 2 is dropped; expected the "
                                   r"top-weighted slot kept")


@settings(max_examples=30)
@given(stream=event_streams(speculative=False), data=st.data(), budget=st.integers(1, 60))
def test_dropped_slots_round_trip(tmp_path_factory, stream, data, budget):
    """Any drop mask that keeps slot 0 (the top weight): written, read back, replayed the same."""
    events = []
    for ev in stream.events:
        if ev.phase == 1 and ev.routes.shape[2] > 1:
            mask = np.array(data.draw(st.lists(st.booleans(), min_size=ev.routes.size,
                                               max_size=ev.routes.size)), bool).reshape(ev.routes.shape)
            mask[:, :, 0] = False
            ev = DecodeEvent(ev.kind, ev.positions, ev.routes, weights=ev.weights, dropped=mask)
        events.append(ev)
    h = stream.header
    cache = ExpertCache(h.expert_bytes, h.n_expert, budget)
    recs = [cache.apply(e) for e in events]
    path = tmp_path_factory.mktemp("drop") / "t.route.csv"
    write_trace(path, h, events, [r.residency for r in recs], [r.charged_bytes for r in recs])
    tr = read_trace(path)
    for a, b, r, res, chg in zip(events, tr.events, recs, tr.residency, tr.charged_bytes):
        assert (a.routes == b.routes).all()
        da = a.dropped if a.dropped is not None else np.zeros(a.routes.shape, bool)
        db = b.dropped if b.dropped is not None else np.zeros(b.routes.shape, bool)
        assert (da == db).all()
        assert (res == np.where(da, 0, r.residency)).all() and (chg == r.charged_bytes).all()
    again = ExpertCache(h.expert_bytes, h.n_expert, budget)
    for e in tr.events:
        again.apply(e)
    assert (again.stats.lookups == cache.stats.lookups).all()
    assert (again.stats.read_bytes == cache.stats.read_bytes).all()


def _decode(turn, phase, step):
    return "".join(f"{turn},{phase},{step},{r}" for r in ("0,0,1,0.5,1,0\n", "0,1,2,0.5,1,0\n",
                                                          "1,0,3,0.5,1,0\n", "1,1,0,0.5,1,0\n"))


def test_a_decode_flipped_to_prefill_is_refused(tmp_path):
    assert _decode(0, 1, 2) == DEC
    # the second decode's phase column damaged: main read it as a prefill chunk
    refused(tmp_path, HEAD + PRE + DEC + _decode(0, 0, 3),
            r":16: a prefill chunk after a decode of the same turn 0")


def test_turns_do_not_decrease(tmp_path):
    refused(tmp_path, HEAD + PRE + _decode(1, 1, 2) + _decode(0, 1, 3),
            r":16: turn 0 after turn 1; expected turns in increasing order")


def test_one_residency_per_expert_per_batch(tmp_path):
    # expert 1 is routed twice in the prefill's layer-0 batch; its repeat damaged from 0 to 1:
    # main accepted it (a plausible hit that never was)
    refused(tmp_path, GOOD.replace("0,0,1,0,0,1,0.5,0,0", "0,0,1,0,0,1,0.5,1,0"),
            r":8: expert 1 of layer 0 has residency 1 here and 0 on line 6 of the same layer batch")


def test_a_qwen35moe_prefill_routes_every_layer_at_every_position(tmp_path):
    """qwen35moe has no last-layer cut (refsim/forward/qwen35moe.py): its live trace, whose
    prefill routes the last layer at every prompt position, reads back; the same rows under a
    qwen3moe preamble are refused by the last-layer rule."""
    from refsim.cli import main
    from refsim.errors import TraceFormatError
    from refsim.model import write_synthetic
    from refsim.trace import read_trace
    model = write_synthetic(tmp_path / "h.gguf", "qwen35moe", "F32", seed=3)
    trace = tmp_path / "h.route.csv"
    assert main(["run", str(model), "--prompt-tokens", "1,5,9,4", "-n", "3", "--cache-mb", "1",
                 "--route-trace", str(trace)]) == 0
    tr = read_trace(trace)
    pre = [e for e in tr.events if e.kind.name == "PREFILL"]
    assert pre and (pre[0].routes[:, -1, :] >= 0).all()        # every position, last layer too
    other = tmp_path / "as-qwen3moe.route.csv"
    other.write_text(trace.read_text().replace("arch=qwen35moe", "arch=qwen3moe", 1))
    with pytest.raises(TraceFormatError, match="last-layer rule"):
        read_trace(other)


@pytest.mark.parametrize("line", ["# model=m n_layer=2 n_expert=4 n_expert_used=2",
                                  "# model=m arch= n_layer=2 n_expert=4 n_expert_used=2",
                                  "# model=m arsh=qwen3moe n_layer=2 n_expert=4 n_expert_used=2"])
def test_a_model_line_without_arch_is_refused(tmp_path, line):
    """Found by an independent mutation campaign (one bit flip arch -> arsh): the model line was
    read with arch '' (the last-layer rule then unknown); the engine always writes arch=."""
    text = GOOD.replace("# model=m arch=qwen3moe n_layer=2 n_expert=4 n_expert_used=2", line)
    msg = refused(tmp_path, text, r":2: the model line has no arch= value")
    assert "expected arch=" in msg


@pytest.mark.parametrize("residency", ["1", "2"])
def test_a_dropped_slot_must_be_a_miss(tmp_path, residency):
    """Found by the same campaign: dropped=1 on a hit row was accepted and the replay compared
    one row fewer. Only a miss is dropped (§3.6): the engine writes residency 0 there."""
    head = HEAD.replace("expert_bytes\n", "expert_bytes,dropped\n")
    rows = [r + ",0" for r in (PRE + DEC).splitlines()]
    ok = head + "\n".join(rows) + "\n"
    assert read_trace(write(tmp_path, ok, "ok.route.csv")).events
    # line 13: the decode's layer-0 slot 1 (a hit, residency 1) flagged dropped
    rows[7] = f"0,1,2,0,1,2,0.5,{residency},0,1"
    msg = refused(tmp_path, head + "\n".join(rows) + "\n", r":13: column 'residency' is ")
    assert "expected 0 on a dropped slot" in msg


@settings(max_examples=200)
@given(st.lists(st.integers(-5, 40), max_size=60))
def test_sorted_unique_is_numpys_unique(values):
    from refsim.trace.reader import _sorted_unique
    x = np.array(values, dtype=np.int32)
    got = _sorted_unique(x)
    assert got.dtype == x.dtype and got.tolist() == np.unique(x).tolist()


def test_the_largest_float32_weight_is_read_and_the_next_is_refused(tmp_path):
    """A weight rounds to float32: float32's largest value as numpy prints it (3.4028235e38, above
    it as a float64) is read, on the per-line and the fast path; the float64 at float32's largest
    plus half a step rounds to infinity (half to even) and is refused."""
    import numpy as np
    from refsim.trace.format import F32_FINITE_LIMIT
    from refsim.trace.reader import _read_fast, _read_slow
    top = np.finfo(np.float32).max
    assert float(np.float32(3.4028235e38)) == float(top) < 3.4028235e38 < F32_FINITE_LIMIT
    with np.errstate(over="ignore"):
        assert np.isinf(np.float32(F32_FINITE_LIMIT)) and np.float32(np.nextafter(F32_FINITE_LIMIT, 0)) == top
    p = tmp_path / "top.route.csv"
    p.write_text(GOOD.replace("0,1,2,0,0,1,0.5,", "0,1,2,0,0,1,3.4028235e38,"))
    for read in (_read_slow, _read_fast):
        tr = read(str(p))
        assert tr is not None and max(float(np.nanmax(e.weights)) for e in tr.events) == float(top)
    import re
    refused(tmp_path, GOOD.replace("0,1,2,0,0,1,0.5,", "0,1,2,0,0,1,3.4028235677973366e38,"),
            re.escape("column 'weight' is 3.4028235677973366e+38"))
