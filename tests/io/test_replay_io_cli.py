"""``refsim replay --model``: a trace of a synthetic model whose file layout is known, the flags'
refusals, and the outputs unchanged without the flag."""

import csv
import json

import numpy as np
import pytest

from refsim.cache import ExpertCache
from refsim.cli import main
from refsim.events import DecodeEvent, DecodeKind
from refsim.io.layout import layout_from_model
from refsim.model import open_model, write_synthetic
from refsim.trace.format import TraceHeader
from refsim.trace.writer import write_trace


@pytest.fixture(scope="module")
def model_and_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay_io")
    model = open_model(write_synthetic(d / "m.gguf", "qwen3moe", quant="mixed", seed=5))
    lay = layout_from_model(model)
    n, E = model.spec.n_layer, model.spec.n_expert
    rng = np.random.default_rng(0)
    pre = np.stack([[rng.choice(E, 2, replace=False) for _ in range(n)]
                    for _ in range(3)]).astype(np.int16)
    pre[:-1, n - 1] = -1              # prefill: the last layer routes the final position only
    events = [DecodeEvent(DecodeKind.PREFILL, np.arange(3), pre)]
    for pos in range(3, 12):
        events.append(DecodeEvent(DecodeKind.PLAIN, np.array([pos]),
                                  np.array([[rng.choice(E, 2, replace=False) for _ in range(n)]],
                                           dtype=np.int16)))
    header = TraceHeader(str(d / "m.gguf"), "qwen3moe", n, E, 2, lay.expert_bytes[:n],
                         np.ones(n, dtype=np.int64))
    budget = int(lay.expert_bytes[0]) * 3
    cache = ExpertCache(header.expert_bytes, E, budget)
    recs = [cache.apply(ev) for ev in events]
    write_trace(d / "t.csv", header, events, [r.residency for r in recs],
                [r.charged_bytes for r in recs])
    return d, model, lay, budget, recs


def run_json(capsys, argv):
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_windows_of_a_known_layout(model_and_trace, capsys):
    d, model, lay, budget, recs = model_and_trace
    mib = budget / 2**20
    base = ["replay", str(d / "t.csv"), "--cache-mb", repr(mib)]
    plain = run_json(capsys, base)
    out = run_json(capsys, base + ["--model", str(d / "m.gguf"), "--requests", str(d / "r.csv")])
    for key, value in plain.items():                       # the cache summary is untouched
        assert out[key] == value
    rows = list(csv.DictReader((d / "r.csv").open()))
    # every request's window recomputed from its row: offset rounded down, end rounded up, but
    # not past the end of the file (the last expert of the last tensor)
    size = (d / "m.gguf").stat().st_size
    assert lay.file_size == size and size % 4096
    for r in rows:
        off, n = int(r["offset"]), int(r["bytes"])
        assert int(r["window"]) == min(-(-(off + n) // 4096) * 4096, size) - off // 4096 * 4096
    assert sum(int(r["bytes"]) for r in rows) == plain["read_bytes"]
    assert sum(int(r["window"]) for r in rows) == out["window_read_bytes"]
    assert out["requests"] == len(rows) == 3 * sum(r.lookups - r.hits for r in recs)
    buffered = run_json(capsys, base + ["--model", str(d / "m.gguf"), "--o-direct", "0"])
    assert buffered["window_read_bytes"] == plain["read_bytes"]
    big = run_json(capsys, base + ["--model", str(d / "m.gguf"), "--block-size", "65536"])
    assert big["window_read_bytes"] >= out["window_read_bytes"]


def test_csv_columns_only_with_the_flag(model_and_trace, capsys):
    d, *_ , budget, _ = model_and_trace
    base = ["replay", str(d / "t.csv"), "--cache-mb", repr(budget / 2**20), "--csv"]
    assert main(base + [str(d / "a.csv")]) == 0
    assert main(base + [str(d / "b.csv"), "--model", str(d / "m.gguf")]) == 0
    capsys.readouterr()
    a, b = (d / "a.csv").read_text().splitlines(), (d / "b.csv").read_text().splitlines()
    assert a[0] == "event,kind,step,n_pos,lookups,hits,read_bytes,resident_bytes"
    assert b[0] == a[0] + ",window_read_bytes,requests"
    assert [x.rsplit(",", 2)[0] for x in b] == [a[0]] + a[1:]


@pytest.mark.parametrize("extra, code, text", [
    (["--block-size", "512"], 2, "--block-size without --model"),
    (["--requests", "x.csv"], 2, "--requests without --model"),
    (["--model", "MODEL", "--prefetch", "1"], 2, "--model with --prefetch: the windows cover demand"),
    (["--model", "MODEL", "--policy", "lfu"], 2, "--policy lfu: the streaming knobs, --predict-log, "
                                                "--device and --model"),
    (["--model", "MODEL", "--data-start", "7"], 1, "--data-start 7: expected a multiple of"),
    (["--overlap"], 2, "--overlap without --device"),
])
def test_refusals(model_and_trace, capsys, extra, code, text):
    d, *_ = model_and_trace
    extra = [str(d / "m.gguf") if x == "MODEL" else x for x in extra]
    assert main(["replay", str(d / "t.csv"), "--cache-mb", "100"] + extra) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert text in err[-1]


def test_another_models_file_is_named(model_and_trace, tmp_path, capsys):
    d, *_ = model_and_trace
    other = write_synthetic(tmp_path / "o.gguf", "qwen3moe", quant="Q4_K", seed=5)
    assert main(["replay", str(d / "t.csv"), "--cache-mb", "100", "--model", other]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "layer 1:" in err[0] and "not the model the trace was recorded with" in err[0]
