"""refsim view --metrics: the metrics CSV must be the trace's run (issue 26 C2).

The hand-made trace (tests/analysis/conftest.py): model ``hand</b><script>x</script>``, arch
qwen3moe, 10 experts, k = 2, 4 decodes (plain, verify, verify, plain) confirming 6 tokens, a 2-position prompt.
"""

import pytest

from refsim.analysis.viewer import metrics_of_trace, same_run_mismatches
from refsim.cli import main
from refsim.errors import ConfigError
from refsim.telemetry.metrics_reader import read_metrics
from refsim.trace import read_trace

COLUMNS = ("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms,majflt,"
           "cpu_ms,dense_resident_frac,turn,majflt_mib,cache_budget_mib,rss_mib,rss_anon_mib,"
           "rss_file_mib,swap_mib,mem_available_mib,mem_free_mib,swap_free_mib\n")
ROW = ",2.5,1.0,1.5,100,50.00,0.000,0.1,0,0.000,-1.000,0,0.00,64.0,0.0,0.0,0.0,0.0,1.0,1.0,1.0\n"


def metrics_file(tmp_path, model="hand</b><script>x</script>", arch="qwen3moe", n_expert=10,
                 k=2, rows=6, n_prompt=2, preamble=True, name="run.csv"):
    """A bmoe_metrics v1 file stating these (the engine's layout of real-runs/desktop-*), or
    with ``preamble=False`` a legacy file (rows only)."""
    text = ""
    if preamble:
        text += (f"# bmoe_metrics v1\n# model={model} arch={arch} n_layer=2 n_expert={n_expert} "
                 f"n_expert_used={k}\n")
    text += COLUMNS + "".join(f"{i},{rows}{ROW}" for i in range(1, rows + 1))
    if preamble:
        text += f"# summary tokens={rows} n_prompt={n_prompt}\n"
    p = tmp_path / name
    p.write_text(text)
    return p


def test_the_same_run_agrees(spec_trace_path, tmp_path):
    trace = read_trace(spec_trace_path)
    assert same_run_mismatches(trace, read_metrics(metrics_file(tmp_path))) == []
    # the engine writes the model's path in the trace and its file name in the metrics
    assert same_run_mismatches(trace, read_metrics(metrics_file(
        tmp_path, model="/data/x/hand</b><script>x</script>"))) == []
    cols = metrics_of_trace(str(metrics_file(tmp_path)), trace)
    assert cols["wall_ms"] == [2.5] * 6


@pytest.mark.parametrize("kw, said", [
    ({"model": "other.gguf"}, "model: trace hand</b><script>x</script>, metrics other.gguf"),
    ({"arch": "qwen35moe"}, "arch: trace qwen3moe, metrics qwen35moe"),
    ({"n_expert": 128}, "n_expert: trace 10, metrics 128"),
    ({"k": 8}, "n_expert_used: trace 2, metrics 8"),
    ({"rows": 5}, "tokens: trace 6, metrics 5 rows"),
    ({"n_prompt": 31}, "prompt tokens: trace 2, metrics 31"),
])
def test_each_disagreement_is_named(spec_trace_path, tmp_path, kw, said):
    trace = read_trace(spec_trace_path)
    assert same_run_mismatches(trace, read_metrics(metrics_file(tmp_path, **kw))) == [said]


def test_a_legacy_file_is_checked_by_its_rows_only(spec_trace_path, tmp_path):
    trace = read_trace(spec_trace_path)
    assert same_run_mismatches(trace, read_metrics(metrics_file(tmp_path, preamble=False))) == []
    assert same_run_mismatches(trace, read_metrics(
        metrics_file(tmp_path, preamble=False, rows=3))) == ["tokens: trace 6, metrics 3 rows"]


def test_view_refuses_another_models_run(spec_trace_path, tmp_path, capsys):
    m = metrics_file(tmp_path, model="Qwen3-30B.gguf", arch="qwen35moe", rows=7)
    out = tmp_path / "page.html"
    code = main(["view", str(spec_trace_path), "--metrics", str(m), "--html", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and not out.exists()
    assert err.count("\n") == 1
    assert (f"{m}: not the run of {spec_trace_path} (model: trace hand</b><script>x</script>, "
            "metrics Qwen3-30B.gguf; arch: trace qwen3moe, metrics qwen35moe; "
            "tokens: trace 6, metrics 7 rows)") in err
    with pytest.raises(ConfigError):
        metrics_of_trace(str(m), read_trace(spec_trace_path))
    assert main(["view", str(spec_trace_path), "--metrics", str(metrics_file(tmp_path)),
                 "--html", str(out)]) == 0
