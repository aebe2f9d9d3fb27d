"""A ratio over zero events is n/a (JSON null, CSV nan), never 0.0%; counters refsim does not
measure are n/a; the engine-format files keep the engine's numeric 0 (issue 12 D2)."""

import csv
import dataclasses
import json

import numpy as np
import pytest

from refsim import MIB
from refsim.cli import main
from refsim.spec.whatif import WhatIfCell
from refsim.telemetry import RunStats, done_line, spec_lines, summary_lines
from refsim.telemetry.metrics_csv import summary_trailer


@pytest.fixture
def prefill_only_trace(tmp_path):
    """A trace of one prefill chunk (4 positions, 2 layers, 8 experts, top-2) and no decode."""
    from refsim.cache import ExpertCache
    from refsim.testing.routes import synthetic_run_events
    from refsim.trace import TraceHeader, write_trace
    h = TraceHeader("p.gguf", "qwen3moe", 2, 8, 2, np.array([MIB, MIB]), np.zeros(2))
    ev = synthetic_run_events(4, 0, 2, 8, 2, seed=1)
    assert len(ev) == 1
    rec = ExpertCache([MIB, MIB], 8, 64 * MIB).apply(ev[0])     # the residency it records
    path = tmp_path / "prefill.route.csv"
    write_trace(path, h, ev, [rec.residency], [rec.charged_bytes])
    return path


def test_replay_of_a_prefill_only_trace_prints_na_and_json_null(prefill_only_trace, capsys):
    assert main(["replay", str(prefill_only_trace), "--cache-mb", "64", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["decode_lookups"] == 0 and d["tokens"] == 0 and d["lookups"] > 0
    assert d["hit_pct_decode"] is None and d["mib_per_token"] is None
    assert d["hit_pct_cum"] == 100.0 * d["hits"] / d["lookups"]
    assert main(["replay", str(prefill_only_trace), "--cache-mb", "64"]) == 0
    out = capsys.readouterr().out
    assert f"{100.0 * d['hits'] / d['lookups']:.1f}% cumulative (prefill included), n/a decode-only" in out
    assert "MiB in decode, n/a MiB/token" in out and "0.0% decode" not in out


def test_sweep_of_a_prefill_only_trace_writes_nan_in_the_csv_and_na_in_the_table(
        prefill_only_trace, capsys, tmp_path):
    out = tmp_path / "c.csv"
    assert main(["sweep", str(prefill_only_trace), "--cache-mb", "64", "--policy", "lru,lfu",
                 "--csv", str(out)]) == 0
    rows = list(csv.DictReader(open(out)))
    assert [r["hit_pct_decode"] for r in rows] == ["nan", "nan"]
    # defined (5 lookups, every one a first-time miss): a real 0, next to the undefined nan
    assert [(r["hit_pct_cum"], r["read_mib"]) for r in rows] == [("0.000", "5.0")] * 2
    table = capsys.readouterr().out.splitlines()[-2:]
    assert [ln.split()[2:] for ln in table] == [["0.000", "n/a", "5.0", "n/a"]] * 2


def test_a_cell_that_never_drafted_has_no_acceptance(tmp_path, capsys):
    cell = WhatIfCell(draft=3, min_match=4, tokens=5, decodes=5, drafted=0, accepted=0, drafted_steps=0)
    assert cell.acceptance_pct is None and cell.coverage_pct == 0.0 and cell.tokens_per_decode == 1.0
    toks = tmp_path / "t.txt"
    toks.write_text(" ".join(str(i) for i in range(1, 13)))    # no repeat: nothing ever drafts
    assert main(["ngram-whatif", "--tokens", str(toks), "--prompt-len", "4", "--draft", "2",
                 "--min-match", "1"]) == 0
    line = capsys.readouterr().out.splitlines()[-1].split()
    assert line == ["2", "1", "n/a", "0.0%", "1.00", "8"]
    assert main(["ngram-whatif", "--tokens", str(toks), "--prompt-len", "4", "--draft", "2",
                 "--min-match", "1", "--csv"]) == 0
    row = list(csv.DictReader(capsys.readouterr().out.splitlines()))[0]
    assert (row["drafted"], row["acceptance_pct"], row["coverage_pct"]) == ("0", "nan", "0.0")


def _stats(**kw):
    base = dict(spec="ngram", draft_max=3, n_predict=4, n_prompt=3, tokens=4, decodes=4,
                verify_decodes=0, drafted=0, accepted=0, drafted_steps=0, prefill_s=0.5,
                decode_s=2.0, draft_s=0.0, loop_overhead_s=0.0, has_cache=True, lookups=0,
                hits=0, read_bytes=0, prefill_read_bytes=0, resident_bytes=0,
                budget_bytes=MIB, evictions=0, rereads=0, token_demand_bytes=0,
                layer_demand_bytes=0)
    base.update(kw)
    return RunStats(**base)


def test_run_stats_with_no_draft_and_no_lookup_print_na():
    s = _stats()
    assert s.acceptance_pct is None and s.cache_hit_pct is None and s.tok_s == 2.0
    assert spec_lines(s)[0] == ("ngram: 0/0 drafts accepted (n/a), 1.00 tokens per verify decode "
                                "(4 decodes for 4 tokens)")
    lines = summary_lines(s)
    assert lines[-1] == "moe-cache: n/a hit, resident 0.0 MiB"
    assert "cache mgmt n/a + flash I/O n/a s/token, n/a MiB/s" in lines[-2]
    # no measured second: tok/s is undefined in text, the engine's 0 in its own formats
    z = _stats(decode_s=0.0, prefill_s=0.0)
    assert summary_lines(z)[0] == "generation: 4 tokens, 0.000 s/token (n/a tok/s)"
    assert "tok/s=0.000" in summary_trailer(z).split() and "cache_hit_pct=0.0" in summary_trailer(z).split()
    assert '"tok_s":0.000' in done_line(z) and '"prefill_tps":0.000' in done_line(z)
    assert dataclasses.asdict(z)["tokens"] == 4


def test_analyze_and_view_of_a_prefill_only_trace_have_no_mib_per_token(prefill_only_trace, capsys):
    assert main(["analyze", str(prefill_only_trace), "--view", "bytes", "--phase", "all",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    found = [v for v in _walk(rep) if isinstance(v, dict) and "mib_per_token" in v]
    assert found and all(v["tokens"] == 0 and v["mib_per_token"] is None for v in found)
    from refsim.analysis.viewer import page_data
    from refsim.trace import read_trace
    totals = page_data(read_trace(prefill_only_trace))["totals"]
    assert totals["tokens"] == 0 and totals["mib_per_token"] is None
    assert totals["hit_pct_decode"] is None


def _walk(x):
    yield x
    if isinstance(x, dict):
        for v in x.values():
            yield from _walk(v)
    elif isinstance(x, list):
        for v in x:
            yield from _walk(v)
