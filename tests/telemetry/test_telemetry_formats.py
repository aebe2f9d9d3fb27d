"""Engine formats, byte for byte, on a hand-worked run with a fake clock (0.125 s per call).

The run is tests/spec/test_spec_loop.py's hand-worked one: 6 tokens, 5 decodes (2 verify),
5 drafted, 1 accepted, drafter called on 4 steps (room > 0).
Clock calls: prefill 2 (0.125 s); per step: drafter 2 (when room > 0), decode 2; so each
decode's wall is 0.125 s, each drafting 0.125 s.
"""

import pytest

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.events import DecodeKind
from refsim.spec import NgramDraft, SpecConfig, run_generation
from refsim.telemetry import (MetricsPreamble, RunStats, done_line, format_metrics_csv,
                              spec_lines, summary_lines, write_metrics_csv)
from refsim.telemetry.constants import METRICS_COLUMNS, SUMMARY_KEYS
from refsim.testing import DocumentScript, ScriptedRouter, ScriptedTarget

DOC = (1, 2, 3, 4, 1, 2, 3, 9, 1, 2, 3, 4)


class FakeClock:
    def __init__(self, step=0.125):
        self.t, self.step = 0.0, step

    def __call__(self):
        self.t += self.step
        return self.t


@pytest.fixture()
def run():
    router = ScriptedRouter(n_layer=3, n_expert=8, k=2, seed=1)
    target = ScriptedTarget(DocumentScript(DOC, eos=0), router, eos_ids=(0,))
    cache = ExpertCache([1000, 2000, 3000], 8, 10 * MIB)
    return run_generation(target, NgramDraft(min_match=2), DOC[:6], 6, cache=cache,
                          draft_max=3, clock=FakeClock())


def test_counters(run):
    s = RunStats.from_run(run)
    assert (s.tokens, s.decodes, s.verify_decodes, s.drafted, s.accepted, s.drafted_steps) == \
        (6, 5, 2, 5, 1, 2)
    # the engine times no n-gram lookup: drafting costs 0 (issue 26 C11; was 0.5, the fake clock's)
    assert (s.decode_s, s.draft_s, s.prefill_s) == (0.625, 0.0, 0.125)
    assert s.acceptance_pct == 20.0 and s.tokens_per_decode == 1.2 and s.coverage_pct == 40.0
    assert s.effective_tok_s == pytest.approx(1 / (0.625 / 6)) == s.tok_s
    assert s.n_past == 6 + 6


def test_ngram_lines_byte_for_byte(run):
    assert spec_lines(RunStats.from_run(run)) == [
        "ngram: 1/5 drafts accepted (20.0%), 1.20 tokens per verify decode "
        "(5 decodes for 6 tokens)",
        "ngram: drafting costs 0.0000 s/token on top of decode \u2192 9.60 tok/s effective "
        "(vs 9.60 reported)",
        "ngram: drafted on 2 of 5 steps (40.0%); the rest decoded plainly",
    ]


def test_engine_example_numbers_reproduce_the_engine_lines():
    # docs/ngram.md of the engine: 42/95 accepted, 256 tokens, 214 decodes, 32 drafted steps,
    # 5.24 tok/s, drafting 0 s
    s = RunStats(spec="ngram", draft_max=3, n_predict=256, n_prompt=224, tokens=256,
                 decodes=214, verify_decodes=32, drafted=95, accepted=42, drafted_steps=32,
                 prefill_s=1.0, decode_s=256 / 5.24, draft_s=0.0, loop_overhead_s=0.0,
                 has_cache=False, lookups=0, hits=0, read_bytes=0, prefill_read_bytes=0,
                 resident_bytes=0, budget_bytes=0, evictions=0, rereads=0,
                 token_demand_bytes=0, layer_demand_bytes=0)
    assert spec_lines(s) == [
        "ngram: 42/95 drafts accepted (44.2%), 1.20 tokens per verify decode "
        "(214 decodes for 256 tokens)",
        "ngram: drafting costs 0.0000 s/token on top of decode \u2192 5.24 tok/s effective "
        "(vs 5.24 reported)",
        "ngram: drafted on 32 of 214 steps (15.0%); the rest decoded plainly",
    ]


def test_no_spec_lines_without_speculation(run):
    s = RunStats.from_run(run)
    off = RunStats(**{**s.__dict__, "spec": "off"})
    assert spec_lines(off) == []
    lines = summary_lines(off)
    assert lines[0] == "generation: 6 tokens, 0.104 s/token (9.600 tok/s)"
    assert lines[1] == "prefill: 6 tokens, 0.125 s (48.0 tok/s) | model load 0.000 s | " \
                       "TTFT 0.125 s"


def test_summary_lines_cache_part(run):
    s = RunStats.from_run(run)
    lines = summary_lines(s)
    assert lines[4].startswith("prefill: ")
    read_mib = s.read_bytes / MIB
    assert lines[5] == (f"moe-stream: read {read_mib:.1f} MiB ({read_mib / 6:.2f} MiB/token), "
                        f"decode 0.104 s/token (compute 0.104 + cache mgmt n/a + flash I/O "
                        f"n/a s/token, n/a MiB/s)")      # not measured by a simulator: n/a
    assert lines[6] == f"moe-cache: {100 * s.hits / s.lookups:.1f}% hit, resident " \
                       f"{s.resident_bytes / MIB:.1f} MiB"


def test_metrics_csv(run, tmp_path):
    cfg = SpecConfig.from_flags(ngram=True, draft=3, ngram_min_match=2)
    pre = MetricsPreamble.for_run(run, cfg, model="/data/m/tiny.gguf", arch="qwen3moe")
    text = format_metrics_csv(run, preamble=pre)
    lines = text.splitlines()
    assert lines[0] == "# bmoe_metrics v2"
    assert lines[1] == "# engine=refsim-0.1.0"
    assert lines[2] == ("# model=tiny.gguf arch=qwen3moe n_layer=3 n_expert=8 n_expert_used=2 "
                        "threads=1 n_ctx=0 n_ubatch=0 chatml=0")
    assert lines[3].startswith("# moe_stream=1 cache_mb=10 cache_auto=0 cache_floor_mb=1536 ")
    assert lines[3].endswith("dense_weights=mmap drop_cold_frac=0 drop_renorm=1 drop_prefill=0")
    assert lines[4] == ("# temp=0 top_k=0 top_p=1 seed=0 compute_trace_layers=0 spec=ngram "
                        "spec_draft_max=3 mtp_p_min=0 ngram_min_match=2")
    assert lines[5].split(",") == list(METRICS_COLUMNS) and len(METRICS_COLUMNS) == 29
    rows = [ln.split(",") for ln in lines[6:-1]]
    assert len(rows) == 6 and all(len(r) == 29 for r in rows)
    col = {name: i for i, name in enumerate(METRICS_COLUMNS)}
    assert [r[col["step"]] for r in rows] == ["1", "2", "3", "4", "5", "6"]
    assert {r[col["steps"]] for r in rows} == {"6"}
    assert [r[col["mtp_batch"]] for r in rows] == ["1", "1", "1", "2", "2", "1"]
    # group of decode 4 (verify, 2 tokens): cost on row 4, zeros on row 5
    assert rows[3][col["wall_ms"]] == "125.000" and rows[4][col["wall_ms"]] == "0.000"
    assert rows[3][col["mtp_draft_ms"]] == "0.000" and rows[4][col["mtp_draft_ms"]] == "0.000"
    assert rows[3][col["loop_overhead_ms"]] == "375.000"
    assert rows[4][col["read_bytes"]] == "0"
    # the last decode had no room to draft: no drafting time, overhead = one clock step
    assert rows[5][col["mtp_draft_ms"]] == "0.000" and rows[5][col["loop_overhead_ms"]] == \
        "125.000"
    # read bytes sum to the cache's decode reads; hit % is the lifetime value after the decode
    st = run.cache.stats
    assert sum(int(r[col["read_bytes"]]) for r in rows) == st.total(
        "read_bytes", (DecodeKind.PLAIN, DecodeKind.VERIFY))
    assert rows[-1][col["cache_hit_pct"]] == f"{100 * st.total('hits') / st.total('lookups'):.2f}"
    assert {r[col["majflt"]] for r in rows} == {"0"}
    assert {r[col["dense_resident_frac"]] for r in rows} == {"-1.000"}
    trailer = lines[-1]
    assert trailer.startswith("# summary tokens=6 s/tok=0.104 tok/s=9.600 read_MiB=")
    keys = [kv.split("=")[0] for kv in trailer[len("# summary "):].split(" ")]
    assert keys == [k for k, _ in SUMMARY_KEYS]
    kv = dict(x.split("=") for x in trailer[len("# summary "):].split(" "))
    assert (kv["mtp_drafted"], kv["mtp_accepted"], kv["mtp_decodes"], kv["drafted_steps"]) == \
        ("5", "1", "5", "2")
    assert kv["mtp_draft_s/tok"] == "0.0000" and kv["n_prompt"] == "6"
    assert kv["evictions"] == str(st.evictions)
    path = tmp_path / "m.csv"
    write_metrics_csv(path, run, preamble=pre)
    assert path.read_text() == text


def test_trailer_counts_decodes_without_speculation():
    # bmoe-engine.md §8: mtp_decodes counts every generation decode, also with spec off
    target = ScriptedTarget(DocumentScript(DOC, eos=0), eos_ids=(0,))
    r = run_generation(target, None, DOC[:6], 4, clock=FakeClock())
    text = format_metrics_csv(r)
    kv = dict(x.split("=") for x in text.splitlines()[-1][len("# summary "):].split(" "))
    assert (kv["mtp_drafted"], kv["mtp_accepted"], kv["mtp_decodes"], kv["drafted_steps"]) == \
        ("0", "0", "4", "0")
    assert kv["cache_hit_pct"] == "-1.0"
    assert "spec=off spec_draft_max=0" in text.splitlines()[4]
    rows = text.splitlines()[6:-1]
    assert all(r.split(",")[6] == "-1.00" for r in rows)


def test_done_line(run):
    line = done_line(RunStats.from_run(run), id="t1", text="a\"b")
    assert line.startswith('BMOE_DONE {"id":"t1","cancelled":false,"tokens":6,"tok_s":9.600,'
                           '"prefill_s":0.125,"prefill_tps":48.000,"load_s":0.000,')
    assert '"n_prompt":6,"n_past":12,' in line
    assert '"mtp_drafted":5,"mtp_accepted":1,"mtp_decodes":5,"mtp_draft_s_tok":0.0000,' \
           '"drafted_steps":2,' in line
    assert line.endswith('"reasoning":"","text":"a\\"b"}')
    import json
    obj = json.loads(line[len("BMOE_DONE "):])
    assert list(obj)[:3] == ["id", "cancelled", "tokens"] and obj["text"] == 'a"b'
