"""``RUN.csv@key=value``: only what the file lacks (issue 26 C3).

A v1 file states ``model``, ``io_threads``, ``overlap`` and ``cache_mb`` in its preamble; a value
after ``@`` that says otherwise split one model's runs into two compute floors. It is refused with
one line; the same value (``2`` and ``2.0``, a path and its base name) is accepted, and a legacy
file (no preamble) takes them all.
"""

import pytest

from refsim.cli import main
from refsim.errors import ConfigError
from refsim.telemetry.metrics_reader import read_metrics
from refsim.timing.runs import run_data
from tests.timing.test_timing import KNOWN, design, write_legacy

PREAMBLE = ("# bmoe_metrics v1\n"
            "# model=Qwen3-30B-A3B-Q4_K_M.gguf arch=qwen3moe n_layer=48 n_expert=128 "
            "n_expert_used=8 threads=4 n_ctx=2048\n"
            "# moe_stream=1 cache_mb=2000 io_threads=4 o_direct=1 overlap=0 prefetch=0\n")


@pytest.fixture()
def stated(tmp_path):
    """A v1 file: a legacy body (the test design's run) under a preamble stating the four keys."""
    r = design(dict(KNOWN, tail=1.0), {"q": 150.0}, 3)[0]
    legacy = tmp_path / "legacy.csv"
    write_legacy(legacy, r)
    body = legacy.read_text()
    cols = ("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms,majflt,"
            "cpu_ms,dense_resident_frac,turn,majflt_mib,cache_budget_mib,rss_mib,rss_anon_mib,"
            "rss_file_mib,swap_mib,mem_available_mib,mem_free_mib,swap_free_mib")
    lines = body.splitlines()
    n_have = len(lines[0].split(","))
    pad = ",0.0" * (len(cols.split(",")) - n_have)
    f = tmp_path / "run.csv"
    f.write_text(PREAMBLE + cols + "\n" + "".join(ln + pad + "\n" for ln in lines[1:]))
    return f


@pytest.mark.parametrize("given, said", [
    ({"model": "qwen"}, "model=qwen after '@' contradicts the file's preamble "
                        "(model=Qwen3-30B-A3B-Q4_K_M.gguf)"),
    ({"io_threads": "2"}, "io_threads=2 after '@' contradicts the file's preamble (io_threads=4)"),
    ({"overlap": "1"}, "overlap=1 after '@' contradicts the file's preamble (overlap=0)"),
    ({"cache_mb": "0"}, "cache_mb=0 after '@' contradicts the file's preamble (cache_mb=2000)"),
])
def test_a_contradiction_is_refused(stated, given, said):
    with pytest.raises(ConfigError, match="contradicts") as e:
        run_data(read_metrics(stated), given, trim=0)
    assert str(e.value) == f"{stated}: {said}; give after '@' only what the file does not say"


def test_the_same_value_is_accepted(stated):
    run = read_metrics(stated)
    d = run_data(run, {"model": "/models/Qwen3-30B-A3B-Q4_K_M.gguf", "io_threads": "4",
                       "overlap": "0", "cache_mb": "2000.0"}, trim=0)
    assert (d.model, d.lanes, d.overlap, d.cache) == ("Qwen3-30B-A3B-Q4_K_M.gguf", 4, False, True)
    bare = run_data(run, {}, trim=0)
    assert (bare.model, bare.lanes, bare.overlap, bare.cache) == (d.model, d.lanes, d.overlap, d.cache)


def test_a_legacy_file_takes_every_key(tmp_path):
    r = design(dict(KNOWN, tail=1.0), {"q": 150.0}, 3)[0]
    f = tmp_path / "legacy.csv"
    write_legacy(f, r)
    d = run_data(read_metrics(f), {"model": "q", "io_threads": "2", "overlap": "1"}, trim=0)
    assert (d.model, d.lanes, d.overlap) == ("q", 2, True)


def test_timing_fit_says_it_in_one_line(stated, tmp_path, capsys):
    out = tmp_path / "dev.json"
    assert main(["timing", "fit", f"{stated}@model=qwen,io_threads=4", str(stated),
                 "--out", str(out), "--trim", "0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model=qwen after '@' contradicts" in err
    assert not out.exists()
