from pathlib import Path

import pytest

from refsim.cli import main

DEMO = str(Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv")


def _code(argv):
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


@pytest.mark.parametrize("budget", ["0", "-4", "lots"])
def test_replay_rejects_a_bad_budget(tmp_path, capsys, budget):
    assert _code(["replay", str(tmp_path / "x.csv"), "--cache-mb", budget]) == 2
    err = capsys.readouterr().err
    assert "--cache-mb" in err and repr(budget) in err


def test_replay_names_a_missing_trace(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "missing.csv"), "--cache-mb", "10"]) == 1
    assert "missing.csv" in capsys.readouterr().err


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "replay" in capsys.readouterr().out


@pytest.mark.parametrize("argv, flag", [
    (["replay", DEMO, "--cache-mb", "1e30"], "--cache-mb: expected a number of MiB from 2^-20"),
    (["sweep", DEMO, "--cache-mb", "1e30"], "--cache-mb: expected N[,N,...] or START:STOP:STEP"),
    (["sweep", DEMO, "--cache-mb", "1:1000000000:1"], "at most 10000"),
    (["sweep", DEMO, "--cache-mb", "1e-9"], "from 2^-20 (one byte)"),
    (["sweep", DEMO, "--cache-mb", "256", "--policy", ","], "--policy: expected comma-separated names"),
])
def test_out_of_range_budgets_and_empty_lists_are_usage_errors(capsys, argv, flag):
    assert _code(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("usage: ") and flag in err[-1], err


def test_an_output_path_that_is_a_folder_is_a_one_line_error(tmp_path, capsys):
    assert main(["replay", DEMO, "--cache-mb", "256", "--csv", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "--csv" in err and "is a folder" in err


def test_synth_rejects_a_negative_seed(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["synth", "--arch", "qwen3moe", "--seed", "-1", "--out", str(tmp_path / "x.gguf")])
    assert exc.value.code == 2
    assert "0..4294967295" in capsys.readouterr().err


def test_inspect_rejects_k_above_n_expert(tmp_path, capsys):
    path = tmp_path / "m.gguf"
    assert main(["synth", "--arch", "qwen3moe", "--out", str(path)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(path), "-k", "999"]) == 1
    assert "n_expert=" in capsys.readouterr().err
