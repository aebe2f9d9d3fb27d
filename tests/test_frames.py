"""Results as tables (refsim.frames): a trace's rows are the file's rows (against two outside
readers: pandas' and Python's csv module), the replay's are ``replay --csv``'s, the metrics
reader's the file's; to_arrow equals to_pandas; without pandas the one-line install hint."""

import csv
import dataclasses
import io
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import refsim.frames
from refsim.cache import ExpertCache
from refsim.streaming.knobs import StreamKnobs
from refsim.cli import main
from refsim.errors import ConfigError
from refsim.testing.traces import event_streams
from refsim.trace import read_trace, write_trace
from refsim.trace.format import PRED_COLUMNS, REQUIRED_COLUMNS
from refsim.trace.reader import _read_slow
from refsim.trace.table import file_order

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "traces" / "demo.route.csv"

TRACE_DTYPES = {"turn": np.int64, "phase": np.int8, "step": np.int64, "layer": np.int16,
                "slot": np.int16, "expert": np.int16, "weight": np.float32, "residency": np.int8,
                "expert_bytes": np.int64, "dropped": np.bool_, "pred_expert": np.int16,
                "pred_weight": np.float32}


def assert_rows_are_the_files(path, trace=None):
    """The trace's table equals pandas.read_csv of the file: same columns, same order, same rows,
    each value equal once cast to the table's dtype."""
    df = (trace or read_trace(path)).to_pandas()
    ref = pd.read_csv(path, comment="#")
    assert list(df.columns) == list(ref.columns)
    assert len(df) == len(ref)
    for name in df.columns:
        got = df[name].to_numpy()
        assert got.dtype == TRACE_DTYPES[name], name
        want = ref[name].to_numpy().astype(got.dtype)
        assert np.array_equal(got, want, equal_nan=got.dtype.kind == "f"), name
    return df


def test_the_demo_traces_rows_are_the_files():
    df = assert_rows_are_the_files(DEMO)
    assert len(df) == 2612 and list(df.columns) == list(REQUIRED_COLUMNS) + ["dropped"]
    # the first rows as the file has them (hand-checked against traces/demo.route.csv)
    assert df.iloc[4].tolist() == [0, 0, 1, 0, 0, 10, np.float32(0.432801), 0, 0, False]


def test_a_speculative_trace_with_prediction_columns(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("REFSIM_CACHE", str(tmp_path / "cache"))
    ngram, pred = tmp_path / "n.route.csv", tmp_path / "p.route.csv"
    assert main(["run", "--prompt-tokens", "1,70,71,72,70,71,72,70,71", "-n", "12", "--ngram",
                 "--ngram-min-match", "1", "--route-trace", str(ngram)]) == 0
    assert main(["run", "-n", "6", "--predict-prefetch", "--route-trace", str(pred)]) == 0
    capsys.readouterr()
    t = read_trace(ngram)
    assert t.speculative                                    # verify decodes: multi-position events
    assert_rows_are_the_files(ngram, t)
    df = assert_rows_are_the_files(pred)
    assert list(df.columns)[-2:] == list(PRED_COLUMNS)
    assert (df.pred_expert >= -1).all() and (df.pred_expert >= 0).any()


def test_the_engines_qwen_trace():
    from refsim.testing.shared import require_shared
    path = require_shared("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")
    df = assert_rows_are_the_files(path)
    assert len(df) == 44766 and "dropped" not in df.columns       # a 9-column file


def _write(path, stream, n_turns, drop_frac, budget):
    """The stream's events as turns 0..n_turns-1, recorded by the engine's LRU (with F)."""
    h = stream.header
    events = [dataclasses.replace(e, turn=t) for t in range(n_turns) for e in stream.events]
    cache = ExpertCache(h.expert_bytes, h.n_expert, budget, StreamKnobs(drop_frac=drop_frac))
    recs = [cache.apply(e) for e in events]
    events = [dataclasses.replace(e, dropped=r.dropped) for e, r in zip(events, recs)]
    write_trace(path, h, events, [r.trace_residency() for r in recs],
                [r.charged_bytes for r in recs])


@settings(max_examples=40, deadline=None)
@given(stream=event_streams(), n_turns=st.integers(1, 3), drop=st.sampled_from([0.0, 0.5, 1.0]),
       budget=st.integers(1, 60))
def test_every_written_trace_reads_back_row_for_row(tmp_path_factory, stream, n_turns, drop, budget):
    path = tmp_path_factory.mktemp("rows") / "t.route.csv"
    _write(path, stream, n_turns, drop, budget)
    text = path.read_text()
    body = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    rows = list(csv.reader(io.StringIO("\n".join(body))))          # the csv module: an oracle
    header, rows = rows[0], rows[1:]
    for trace in (read_trace(path), _read_slow(str(path))):         # the fast and per-line paths
        cols = trace.to_columns()
        assert list(cols) == header
        assert all(len(v) == len(rows) for v in cols.values())
        for j, name in enumerate(header):
            want = [r[j] for r in rows]
            got = cols[name]
            if got.dtype.kind == "f":
                assert all((math.isnan(g) and w == "nan") or g == np.float32(float(w))
                           for g, w in zip(got.tolist(), want)), name
            else:
                assert got.astype(np.int64).tolist() == [int(w) for w in want], name
        # file order is the order of the reader's recorded line numbers
        lines = trace.recorded[2].ravel()[file_order(trace.block)]
        lines = lines[lines > 0]
        assert lines.size == len(rows) and (np.diff(lines) > 0).all()


def test_file_order_is_layer_major_within_an_event():
    from refsim.events import DecodeEvent, DecodeKind, EventBlock
    r = np.arange(2 * 3 * 2, dtype=np.int16).reshape(2, 3, 2)      # (positions, layers, slots)
    one = np.zeros((1, 3, 2), np.int16)
    block = EventBlock.from_events([DecodeEvent(DecodeKind.PREFILL, np.arange(2), r),
                                    DecodeEvent(DecodeKind.PLAIN, np.array([2]), one)])
    # event 0: layer 0 (pos 0 slots 0,1; pos 1 slots 0,1), layer 1, layer 2; then event 1 as is
    assert file_order(block).tolist() == [0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11,
                                          12, 13, 14, 15, 16, 17]


def test_to_arrow_is_to_pandas():
    t = read_trace(DEMO)
    df, table = t.to_pandas(), t.to_arrow()
    assert table.column_names == list(df.columns) and table.num_rows == len(df)
    assert str(table.schema.field("weight").type) == "float" and \
        str(table.schema.field("dropped").type) == "bool"
    for name in df.columns:
        assert table.column(name).to_pylist() == df[name].tolist(), name
    rep = refsim.replay(t, 256)
    assert rep.to_arrow().column("kind").type == pa.string()
    assert rep.to_arrow().column("kind").to_pylist() == rep.to_pandas().kind.tolist()


def test_the_replay_table_is_replay_csv(tmp_path, capsys):
    out = tmp_path / "r.csv"
    assert main(["replay", str(DEMO), "--cache-mb", "256", "--csv", str(out)]) == 0
    capsys.readouterr()
    ref = pd.read_csv(out)
    df = refsim.replay(DEMO, 256).to_pandas()
    assert list(df.columns) == list(ref.columns)
    for name in df.columns:
        assert df[name].tolist() == ref[name].tolist(), name
    # and with knobs on (the replay runs event by event: EventRecords, not the block's arrays)
    out2 = tmp_path / "k.csv"
    assert main(["replay", str(DEMO), "--cache-mb", "128", "--prefetch", "2", "--csv", str(out2)]) == 0
    capsys.readouterr()
    df2 = refsim.replay(DEMO, 128, knobs=StreamKnobs(prefetch=2)).to_pandas()
    assert df2.values.tolist() == pd.read_csv(out2).values.tolist()


def test_a_summary_is_one_row_of_its_fields():
    s = refsim.replay(DEMO, 40).summary
    df = s.to_pandas()
    assert len(df) == 1 and list(df.columns) == list(s.as_dict())
    row = df.iloc[0].to_dict()
    for k, v in s.as_dict().items():
        assert (math.isnan(row[k]) if v is None else row[k] == v), k


def test_the_metrics_table_is_the_files_rows():
    from refsim.testing.shared import require_shared
    path = require_shared("real-runs", "phone-2026-07-12-cache-lanes", "qwen_c2000_l2.csv")
    run = refsim.read_metrics(path)
    df = run.to_pandas()
    ref = pd.read_csv(path, comment="#")
    assert list(df.columns) == list(run.columns) == list(ref.columns)
    assert len(df) == run.n_rows == len(ref)
    for name in df.columns:
        assert np.array_equal(df[name].to_numpy(), ref[name].to_numpy().astype(df[name].dtype)), name


def test_without_pandas_or_pyarrow_one_line_says_how_to_install(monkeypatch):
    t = read_trace(DEMO)
    for module, method in (("pandas", t.to_pandas), ("pyarrow", t.to_arrow)):
        monkeypatch.setitem(sys.modules, module, None)       # import pandas -> ImportError
        with pytest.raises(ConfigError) as exc:
            method()
        msg = str(exc.value)
        assert "\n" not in msg and "pip install 'refsim[frames]'" in msg
        assert msg == (f"{method.__name__}() needs the optional frames extra (pandas and "
                       f"pyarrow); install it with: python3 -m pip install 'refsim[frames]' "
                       f"(no module named {module!r})")
        monkeypatch.delitem(sys.modules, module)
    assert t.to_columns()["expert"].size == 2612          # the NumPy columns need neither


def test_dataclass_columns_types_follow_the_annotations():
    @dataclasses.dataclass
    class R:
        a: int
        b: float | None
        c: int | None
        d: bool
        e: str

    cols = refsim.frames.dataclass_columns([R(1, None, None, True, "x"), R(2, 0.5, 3, False, "y")], R)
    assert [c.dtype.kind for c in cols.values()] == ["i", "f", "f", "b", "O"]
    assert cols["b"][0] != cols["b"][0] and cols["c"].tolist()[1] == 3.0
    assert cols["e"].tolist() == ["x", "y"]
    empty = refsim.frames.dataclass_columns([], R)
    assert all(len(v) == 0 for v in empty.values())


