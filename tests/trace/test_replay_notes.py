"""``refsim replay`` says what its numbers can and cannot mean: another budget than the recorded
one, an --mtp trace without the head's draft routings, a trace without rows."""

from pathlib import Path

from refsim.cli import main

DEMO = Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv"


def with_unrouted_layer(tmp_path) -> Path:
    """The demo trace with a 9th preamble layer that no row routes: what an --mtp run writes."""
    text = DEMO.read_text().split("\n")
    text[1] = text[1].replace("n_layer=8", "n_layer=9")
    last = max(i for i, line in enumerate(text) if line.startswith("# layer="))
    text.insert(last + 1, "# layer=8 expert_bytes=1000 dense_bytes=0")
    p = tmp_path / "mtp.route.csv"
    p.write_text("\n".join(text))
    return p


def test_recorded_budget_is_named_when_residency_differs(capsys):
    assert main(["replay", str(DEMO), "--cache-mb", "256"]) == 0      # the recorded budget
    out = capsys.readouterr().out
    assert "2612 of 2612 rows agree" in out and "recorded at" not in out
    assert main(["replay", str(DEMO), "--cache-mb", "100"]) == 0
    out = capsys.readouterr().out
    assert "2156 of 2612 rows agree with the engine's record; the first 10 of the 456 that differ:" in out
    assert "the preamble says the trace was recorded at cache_mb=256" in out


def test_a_layer_without_rows_is_named_as_the_mtp_head(tmp_path, capsys):
    p = with_unrouted_layer(tmp_path)
    assert main(["replay", str(p), "--cache-mb", "256"]) == 0
    assert "note: layer(s) 8 of the preamble route no row in the whole trace: an --mtp run's trace" \
        in capsys.readouterr().out


def test_preamble_only_trace_is_an_error(tmp_path, capsys):
    lines = DEMO.read_text().split("\n")
    head = lines[:next(i for i, line in enumerate(lines) if line.startswith("turn,")) + 1]
    p = tmp_path / "empty.route.csv"
    p.write_text("\n".join(head) + "\n")
    assert main(["replay", str(p), "--cache-mb", "256"]) == 1
    assert "the trace has a preamble but no rows (nothing to replay)" in capsys.readouterr().err



def test_every_budget_command_warns_below_one_token_cycle(capsys, tmp_path):
    # T of the demo trace = 85.6 MiB (8 layers x 4 slots x the layer's entry bytes)
    assert main(["sweep", str(DEMO), "--cache-mb", "50,60,300", "--policy", "lru"]) == 0
    err = capsys.readouterr().err
    assert "refsim sweep: warning: budgets 50, 60 MiB are below one token cycle T = 85.6 MiB" in err
    assert main(["replay", str(DEMO), "--cache-mb", "300"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["replay", str(DEMO), "--cache-mb", "80"]) == 0
    assert "refsim replay: warning: budget 80 MiB is below one token cycle" in capsys.readouterr().err


def test_union_leaves_out_a_layer_without_rows(tmp_path):
    # the demo trace (top-4) plus an unrouted 9th preamble layer, as an --mtp trace has: the
    # w = 1 union is still exactly k = 4 per layer (it was 4 x 8/9 averaged over the empty layer)
    from refsim.studies.union import union_study
    from refsim.trace import read_trace
    p = with_unrouted_layer(tmp_path)
    trace = read_trace(p)
    assert trace.unrouted_layers == [8] and read_trace(DEMO).unrouted_layers == []
    (row,) = union_study(trace, [1])
    assert row.union_mean == 4.0 and row.union_p50 == 4.0
    assert row.union_mib_mean == union_study(read_trace(DEMO), [1])[0].union_mib_mean
