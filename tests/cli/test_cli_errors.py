import pytest

from refsim.cli import main


@pytest.mark.parametrize("budget", ["0", "-4", "lots"])
def test_replay_rejects_a_bad_budget(tmp_path, capsys, budget):
    assert main(["replay", str(tmp_path / "x.csv"), "--cache-mb", budget]) == 1
    err = capsys.readouterr().err
    assert "--cache-mb" in err and repr(budget) in err


def test_replay_names_a_missing_trace(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "missing.csv"), "--cache-mb", "10"]) == 1
    assert "missing.csv" in capsys.readouterr().err


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "replay" in capsys.readouterr().out
