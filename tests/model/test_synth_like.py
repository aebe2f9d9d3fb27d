"""``refsim synth --like NAME --header-only --out F`` writes the header-only twins that
docs/hybrid.md and docs/timing.md use (issue 26 C10); they existed only as a test helper."""

import pytest

from refsim import MIB
from refsim.cli import main
from refsim.model import open_model
from refsim.model.synth import qwen3_30b_a3b_q4_k_m_twin, qwen36_35b_a3b_twin
from refsim.testing.twins import qwen36_twin


def test_the_qwen36_twin_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "q36.gguf"
    assert main(["synth", "--like", "qwen3.6-35b-a3b", "--header-only", "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"{out}\n"
    same = qwen36_twin(tmp_path / "helper.gguf")           # the tests' helper: one implementation
    assert qwen36_twin is qwen36_35b_a3b_twin
    assert out.read_bytes() == open(same, "rb").read()
    m = open_model(out)
    assert (m.spec.arch, m.spec.n_expert, m.spec.n_expert_used) == ("qwen35moe", 256, 8)
    assert round(m.t_bytes() / MIB, 2) == 581.25            # the real file's token_demand_MiB 581.2


def test_memory_on_the_twin_prints_the_docs_ledger(tmp_path, capsys):
    """docs/hybrid.md's block: the twin made by the documented command gives its numbers."""
    out = tmp_path / "q36.gguf"
    assert main(["synth", "--like", "qwen3.6-35b-a3b", "--header-only", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["memory", str(out), "--mtp", "--draft", "3", "--ctx", "4096", "--ram-mb", "8000"]) == 0
    text = capsys.readouterr().out
    assert "cache-mb auto: 3999.9 MiB (the preamble's cache_mb=3999; floor 1536 MiB, ceil 0 MiB)" in text
    assert "recurrent:      251.2 MiB" in text


def test_the_qwen3_30b_twin(tmp_path):
    out = tmp_path / "q3.gguf"
    assert main(["synth", "--like", "qwen3-30b-a3b", "--header-only", "--out", str(out)]) == 0
    assert out.read_bytes() == open(qwen3_30b_a3b_q4_k_m_twin(tmp_path / "h.gguf"), "rb").read()


@pytest.mark.parametrize("argv, said", [
    (["--like", "qwen3.6-35b-a3b"], "argument --like: needs --header-only"),
    (["--like", "qwen3.6-35b-a3b", "--header-only", "--arch", "qwen3moe"],
     "argument --like: not allowed with --arch"),
    (["--header-only", "--arch", "qwen3moe"], "argument --header-only: only with --like"),
    ([], "the following arguments are required: --arch"),
])
def test_usage_errors(tmp_path, argv, said, capsys):
    assert main(["synth", *argv, "--out", str(tmp_path / "x.gguf")]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "x.gguf").exists()
