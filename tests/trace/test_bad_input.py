"""Every malformed trace raises TraceFormatError naming the file, the line and the expectation."""

import pytest

from refsim.errors import TraceFormatError
from refsim.trace import read_trace

HEAD = ("# route_trace v1\n"
        "# model=m arch=qwen3moe n_layer=2 n_expert=4 n_expert_used=2\n"
        "# layer=0 expert_bytes=8 dense_bytes=1\n"
        "# layer=1 expert_bytes=4 dense_bytes=2\n"
        "turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n")
ROWS = ("0,1,5,0,0,1,0.5,0,8\n"
        "0,1,5,0,1,2,0.5,0,8\n"
        "0,1,5,1,0,3,0.5,0,4\n"
        "0,1,5,1,1,0,0.5,0,4\n")


def write(tmp_path, text):
    p = tmp_path / "bad.route.csv"
    p.write_text(text)
    return p


def test_good_file_reads(tmp_path):
    tr = read_trace(write(tmp_path, HEAD + ROWS))
    assert len(tr.events) == 1 and tr.events[0].routes[0].tolist() == [[1, 2], [3, 0]]


def test_ten_column_file_with_dropped(tmp_path):
    head = HEAD.replace("expert_bytes\n", "expert_bytes,dropped\n")
    rows = "".join((r[:-3] + ",0,1\n") if i == 1 else r[:-1] + ",0\n"   # a dropped slot charges 0
                   for i, r in enumerate(ROWS.splitlines(True)))
    tr = read_trace(write(tmp_path, head + rows))
    assert tr.has_dropped_column
    assert tr.events[0].dropped[0, 0].tolist() == [False, True]


PRED_HEAD = HEAD.replace("expert_bytes\n", "expert_bytes,dropped,pred_expert,pred_weight\n")
PRED_ROWS = ("0,1,5,0,0,1,0.5,0,8,0,-1,nan\n"
             "0,1,5,0,1,2,0.5,0,8,0,-1,nan\n"
             "0,1,5,1,0,3,0.5,0,4,0,3,0.75\n"
             "0,1,5,1,1,0,0.5,0,4,0,1,0.25\n")


def test_prediction_columns_read_into_the_event(tmp_path):
    # refsim's stale-gate columns (docs/trace-format.md, "Prediction columns"): layer 1 was
    # ranked [3, 1] with weights (.75, .25); layer 0 has none (-1, nan)
    tr = read_trace(write(tmp_path, PRED_HEAD + PRED_ROWS))
    ev = tr.events[0]
    assert tr.has_pred_columns
    assert ev.pred_routes[0].tolist() == [[-1, -1], [3, 1]]
    assert ev.pred_weights[0, 1].tolist() == [0.75, 0.25]
    assert all(map(lambda v: v != v, ev.pred_weights[0, 0].tolist()))          # nan
    # a file without them reads as before: no prediction on the events
    old = read_trace(write(tmp_path, HEAD + ROWS))
    assert not old.has_pred_columns and old.events[0].pred_routes is None


@pytest.mark.parametrize("text, where, what", [
    (PRED_HEAD.replace(",pred_weight", "") + "".join(r.rsplit(",", 1)[0] + "\n"
                                                     for r in PRED_ROWS.splitlines()),
     ":5:", "pred_expert, pred_weight without the other"),
    (PRED_HEAD + PRED_ROWS.replace(",3,0.75", ",4,0.75"), ":8:", "pred_expert"),
    (PRED_HEAD + PRED_ROWS.replace(",-1,nan\n0,1,5,0,1", ",-1,0.5\n0,1,5,0,1"), ":6:",
     "nan on a row without a prediction"),
    (PRED_HEAD + PRED_ROWS.replace(",1,0.25", ",-1,nan"), ":8:", "some slots only"),
    (PRED_HEAD + PRED_ROWS.replace(",3,0.75", ",3,x"), ":8:", "'pred_weight'"),
])
def test_damaged_prediction_columns(tmp_path, text, where, what):
    with pytest.raises(TraceFormatError, match=what) as exc:
        read_trace(write(tmp_path, text))
    assert where in str(exc.value) and "\n" not in str(exc.value)


def test_columns_are_read_by_name(tmp_path):
    head = HEAD.replace("turn,phase,step,layer,slot,expert,weight,residency,expert_bytes",
                        "expert,turn,phase,step,layer,slot,weight,residency,expert_bytes")
    rows = "".join(",".join([f[5]] + f[:5] + f[6:]) + "\n"
                   for f in (r.split(",") for r in ROWS.strip().split("\n")))
    tr = read_trace(write(tmp_path, head + rows))
    assert tr.events[0].routes[0].tolist() == [[1, 2], [3, 0]]


@pytest.mark.parametrize("text, where, what", [
    ("", ":1:", "route_trace v1"),
    ("# route_trace v2\n" + HEAD[17:] + ROWS, ":1:", "route_trace v1"),
    (HEAD.replace("# model=m arch=qwen3moe n_layer=2 n_expert=4 n_expert_used=2\n", "") + ROWS,
     "bad.route.csv:", "model preamble"),
    (HEAD.replace("# layer=1 expert_bytes=4 dense_bytes=2\n", "") + ROWS, "bad.route.csv:",
     "layer 1"),
    (HEAD.replace("expert_bytes=4 ", "") + ROWS, ":4:", "expert_bytes="),
    (HEAD.replace("n_expert=4", "n_expert=four") + ROWS, ":2:", "not an integer"),
    (HEAD + ROWS.replace("0,1,5,0,1,2,", "0,1,5,0,1,x2,"), ":7:", "expected an integer"),
    (HEAD + ROWS.replace("0.5,0,8\n0,1,5,0,1", "abc,0,8\n0,1,5,0,1", 1), ":6:", "a number"),
    (HEAD + ROWS + ROWS, ":10:", "duplicate"),
    (HEAD + ROWS[:-1], ":9:", "truncated"),
    (HEAD + ROWS + "0,1,6,0,0,1,0.5", ":10:", "truncated"),
    (HEAD + ROWS + "0,1,6,0,0,1,0.5,0\n", ":10:", "expected 9 fields"),
    (HEAD + ROWS.replace("0,1,5,1,0,3,", "0,1,5,1,0,4,"), ":8:", "expert id in 0..3"),
    (HEAD + ROWS.replace("0,1,5,1,0,3,", "0,1,5,2,0,3,"), ":8:", "layer in 0..1"),
    (HEAD + ROWS.replace("0,1,5,1,1,0,", "0,1,5,1,2,0,"), ":9:", "slot in 0..1"),
    (HEAD + ROWS.replace("0,1,5,1,1,0,0.5,0", "0,1,5,1,1,0,0.5,3"), ":9:", "residency"),
    (HEAD + ROWS.replace("0,1,5,0,0", "0,2,5,0,0"), ":6:", "0 (prefill) or 1"),
    (HEAD.replace(",expert_bytes\n", "\n") + ROWS, ":5:", "lacks expert_bytes"),
    (HEAD.replace("turn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n", ""),
     ":5:", "column header"),
])
def test_bad_input_names_file_line_and_expectation(tmp_path, text, where, what):
    p = write(tmp_path, text)
    with pytest.raises(TraceFormatError) as exc:
        read_trace(p)
    msg = str(exc.value)
    assert str(p) in msg and where in msg and what in msg, msg


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError, match="cannot read"):
        read_trace(tmp_path / "nope.csv")


def test_duplicates_are_allowed_in_speculative_traces(tmp_path):
    # a verify decode of positions 5,6 that rejected its draft, then 6 re-decoded
    rows = []
    for layer, ids in ((0, (1, 2)), (1, (3, 0))):
        for step in (5, 6):
            for slot in (0, 1):
                charged = (8, 4)[layer] if step == 5 else 0          # first miss row of the batch
                rows.append(f"0,1,{step},{layer},{slot},{ids[slot]},0.5,0,{charged}\n")
    for layer, ids in ((0, (1, 2)), (1, (3, 0))):
        for slot in (0, 1):
            rows.append(f"0,1,6,{layer},{slot},{ids[slot]},0.5,1,0\n")
    tr = read_trace(write(tmp_path, HEAD + "".join(rows)))
    assert [e.kind.name for e in tr.events] == ["VERIFY", "PLAIN"]
    assert tr.events[0].positions.tolist() == [5, 6] and tr.events[0].accepted == 0


# --- completeness and the expert_bytes column (a damaged file must not replay to numbers) -----

TWO = ROWS + ("0,1,6,0,0,1,0.5,1,0\n"          # a second decode, all hits
              "0,1,6,0,1,2,0.5,1,0\n"
              "0,1,6,1,0,3,0.5,1,0\n"
              "0,1,6,1,1,0,0.5,1,0\n")


def test_two_decodes_read(tmp_path):
    assert len(read_trace(write(tmp_path, HEAD + TWO)).events) == 2


def test_deleted_row_is_named(tmp_path):
    lines = TWO.splitlines(True)
    with pytest.raises(TraceFormatError, match=r"bad.route.csv:12: layer 1 at step 6 has rows for slots \[0\] "
                                               r"only; expected all 2 slots"):
        read_trace(write(tmp_path, HEAD + "".join(lines[:7])))          # cut inside a layer


def test_file_cut_at_a_layer_boundary_is_named(tmp_path):
    lines = TWO.splitlines(True)
    with pytest.raises(TraceFormatError, match=r"bad.route.csv:10: the decode starting here has no rows for "
                                               r"layer 1 at step 6; expected every position in every layer "
                                               r"the trace routes \(layers 0..1\)"):
        read_trace(write(tmp_path, HEAD + "".join(lines[:6])))


def test_prefill_last_layer_routes_the_final_position_only(tmp_path):
    # llama.cpp's last-layer rule: layer 1 (the last) routes step 1 only; a decode follows
    pre = ("0,0,0,0,0,1,0.5,0,8\n0,0,0,0,1,2,0.5,0,8\n0,0,1,0,0,1,0.5,0,0\n0,0,1,0,1,3,0.5,0,8\n"
           "0,0,1,1,0,3,0.5,0,4\n0,0,1,1,1,0,0.5,0,4\n")
    tr = read_trace(write(tmp_path, HEAD + pre + TWO.replace("0,1,5,", "0,1,2,").replace("0,1,6,", "0,1,3,")))
    assert tr.events[0].routes[0, 1].tolist() == [-1, -1] and len(tr.events) == 3


@pytest.mark.parametrize("row, value, want", [
    (6, "12345", r"bad.route.csv:6: column 'expert_bytes' is 12345, expected 8 \(layer 0's expert_bytes"),
    (10, "4", r"bad.route.csv:10: column 'expert_bytes' is 4, expected 0 \(a hit, a repeat"),
])
def test_expert_bytes_column_is_checked_against_the_preamble(tmp_path, row, value, want):
    lines = (HEAD + TWO).splitlines(True)
    f = lines[row - 1].rstrip("\n").split(",")
    f[-1] = value
    lines[row - 1] = ",".join(f) + "\n"
    with pytest.raises(TraceFormatError, match=want):
        read_trace(write(tmp_path, "".join(lines)))


def test_a_missing_decode_is_named(tmp_path):
    # decodes at steps 5 and 7: step 6's decode was deleted
    with pytest.raises(TraceFormatError, match=r"bad.route.csv:10: a decode starts at step 7 after the decode "
                                               r"of steps 5..5; expected step 6 \(a missing decode or chunk\?\)"):
        read_trace(write(tmp_path, HEAD + TWO.replace("0,1,6,", "0,1,7,")))


def test_a_verify_decode_may_be_followed_anywhere_in_its_width(tmp_path):
    # verify of 5,6 accepted its draft: the next decode starts at 7 (= 5 + 1 + 1)
    rows = []
    for layer, ids, eb in ((0, (1, 2), 8), (1, (3, 0), 4)):
        for step in (5, 6):
            for slot in (0, 1):
                rows.append(f"0,1,{step},{layer},{slot},{ids[slot]},0.5,0,{eb if step == 5 else 0}\n")
    rows += [r.replace("0,1,6,", "0,1,7,") for r in TWO.splitlines(True)[4:]]
    tr = read_trace(write(tmp_path, HEAD + "".join(rows)))
    assert [e.positions.tolist() for e in tr.events] == [[5, 6], [7]] and tr.events[0].accepted == 1
    with pytest.raises(TraceFormatError, match=r"a decode starts at step 8 after the decode of steps 5..6; "
                                               r"expected a step in 6..7"):
        read_trace(write(tmp_path, HEAD + "".join(rows).replace("0,1,7,", "0,1,8,")))


def test_an_expert_twice_in_one_positions_top_k_is_named(tmp_path):
    with pytest.raises(TraceFormatError, match=r"bad.route.csv:7: expert 1 routed twice at step 5 layer 0; "
                                               r"expected the top-k experts of a position to be distinct"):
        read_trace(write(tmp_path, HEAD + ROWS.replace("0,1,5,0,1,2,0.5,0,8", "0,1,5,0,1,1,0.5,0,0")))


def test_a_trace_with_prediction_columns_streams_whole(tmp_path):
    # the bounded-memory reader leaves the prediction columns to the per-line path: it reads
    # such a file whole and yields exactly read_trace's events
    from refsim.trace import iter_trace_turns
    p = write(tmp_path, PRED_HEAD + PRED_ROWS)
    _, turns = iter_trace_turns(p)
    parts = list(turns)
    assert len(parts) == 1 and parts[0].has_pred_columns
    assert parts[0].events[0].pred_routes.tolist() == read_trace(p).events[0].pred_routes.tolist()
