"""Output flags are checked before any work: a file name (not "" or "dir/"), writable, and not
the same file as an input or another output (which would silently destroy it)."""

import shutil
from pathlib import Path

import pytest

from refsim.cli import main

DEMO = Path(__file__).resolve().parents[1] / "traces" / "demo.route.csv"


@pytest.mark.parametrize("argv, msg", [
    (["replay", str(DEMO), "--cache-mb", "256", "--csv", ""], "--csv '': expected a file name"),
    (["replay", str(DEMO), "--cache-mb", "256", "--csv", "sub/"], "--csv 'sub/': expected a file name"),
    (["sweep", str(DEMO), "--cache-mb", "256", "--plot", "p/"], "--plot 'p/': expected a file name"),
    (["synth", "--arch", "qwen3moe", "--out", ""], "--out '': expected a file name"),
])
def test_not_a_file_name(argv, msg, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert msg in err and out == "" and list(tmp_path.iterdir()) == []


def test_an_output_may_not_overwrite_an_input_or_another_output(capsys, tmp_path):
    trace = tmp_path / "t.route.csv"
    shutil.copy(DEMO, trace)
    before = trace.read_bytes()
    assert main(["replay", str(trace), "--cache-mb", "256", "--csv", str(tmp_path / "." / "t.route.csv")]) == 1
    assert "is also the TRACE input; expected another file" in capsys.readouterr().err
    assert trace.read_bytes() == before
    assert main(["sweep", str(trace), "--cache-mb", "256", "--csv", str(tmp_path / "a.png"),
                 "--plot", str(tmp_path / "a.png")]) == 1
    assert "--csv " in capsys.readouterr().err and not (tmp_path / "a.png").exists()
