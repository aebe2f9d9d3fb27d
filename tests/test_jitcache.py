"""refsim.jitcache: Numba's cache folder keyed by the source tree, so a kernel never runs code
compiled from an older version of a callee in another file."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim import jitcache

REPO = Path(__file__).resolve().parent.parent


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_the_digest_changes_with_any_py_file_and_only_with_py_text(tmp_path):
    _tree(tmp_path, {"a.py": "x = 1\n", "sub/b.py": "y = 2\n", "notes.txt": "n\n"})
    d0 = jitcache.source_digest(str(tmp_path))
    assert len(d0) == 16 and int(d0, 16) >= 0
    assert jitcache.source_digest(str(tmp_path)) == d0              # same tree, same folder
    (tmp_path / "notes.txt").write_text("changed, and longer\n")
    (tmp_path / "sub" / "__pycache__").mkdir()
    (tmp_path / "sub" / "__pycache__" / "c.py").write_text("z = 3\n")
    b = tmp_path / "sub" / "b.py"
    os.utime(b, ns=(1, 1))                                          # a checkout, a touch: same text
    assert jitcache.source_digest(str(tmp_path)) == d0              # not source, or not changed: ignored
    b.write_text("y = 3\n")                                         # a callee edited, same length
    d1 = jitcache.source_digest(str(tmp_path))
    assert d1 != d0
    b.write_text("y = 2\n")                                         # and back: the old folder again
    assert jitcache.source_digest(str(tmp_path)) == d0
    (tmp_path / "new.py").write_text("")
    assert jitcache.source_digest(str(tmp_path)) not in (d0, d1)
    (tmp_path / "new.py").unlink()
    (tmp_path / "sub" / "new.py").write_text("")                    # where a file is counts too
    assert jitcache.source_digest(str(tmp_path)) not in (d0, d1)


@settings(max_examples=25)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=6, unique=True))
def test_every_distinct_text_gives_its_own_digest(texts):
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "k.py"
        seen = set()
        for t in texts:
            p.write_bytes(t)
            seen.add(jitcache.source_digest(tmp))
        assert len(seen) == len(texts)


def test_the_callers_setting_is_kept(monkeypatch, tmp_path):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jitcache.configure() is None
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "mine")
    assert not (tmp_path / "xdg").exists()


def _folders(base: Path, names, busy: bool):
    for i, name in enumerate(names):
        (base / name / "sub").mkdir(parents=True)
        if not busy:        # idle since long ago (the sub-folder is where Numba writes)
            os.utime(base / name / "sub", (1000 + i, 1000 + i))
        os.utime(base / name, (1000 + i, 1000 + i))


@pytest.mark.parametrize("busy", [False, True])
def test_configure_picks_the_trees_folder_and_keeps_the_newest(monkeypatch, tmp_path, busy):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    base = tmp_path / "xdg" / "refsim" / "numba"
    assert jitcache.base_dir() == str(base)
    src = tmp_path / "src"
    _tree(src, {"k.py": "pass\n"})
    k = jitcache.KEEP
    olds = [f"old{i}" for i in range(k + 1)]                        # other source versions, oldest first
    _folders(base, olds, busy=False)
    busies = [f"busy{i}" for i in range(k)] if busy else []         # written in just now by other trees
    _folders(base, busies, busy=True)
    folder = jitcache.configure(str(src))
    assert folder == str(base / jitcache.source_digest(str(src)))
    assert os.environ["NUMBA_CACHE_DIR"] == folder and os.path.isdir(folder)
    # the new folder and the k - 1 newest others stay; of the rest only the idle ones go
    kept = busies if busy else olds[-(k - 1):]
    assert sorted(os.listdir(base)) == sorted([os.path.basename(folder), *kept])
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    assert jitcache.configure(str(src)) == folder                   # same tree: same folder, nothing pruned
    assert sorted(os.listdir(base)) == sorted([os.path.basename(folder), *kept])


def test_an_unwritable_cache_leaves_numbas_default(monkeypatch, tmp_path):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    (tmp_path / "file").write_text("not a folder\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
    assert jitcache.configure() is None
    assert "NUMBA_CACHE_DIR" not in os.environ


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "xdg"), PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    env.update(extra)
    return env


@pytest.mark.parametrize("code", [
    "import refsim.kernels, numba",
    "import numba, refsim.kernels",                 # Numba imported first: its configuration is re-read
    "import refsim.forward.delta_net, numba",       # a module that imports numba itself
    "import numba, lazykernel; assert lazykernel.f(1) == 2",   # a refsim.jit kernel compiled on first call
])
def test_the_first_refsim_kernel_points_numba_at_the_folder(tmp_path, code):
    (tmp_path / "lazykernel.py").write_text(
        "from refsim.jit import njit\n@njit(cache=True)\ndef f(x):\n    return x + 1\n")
    probe = code + "\nimport os\nprint(os.environ['NUMBA_CACHE_DIR'])\nprint(numba.config.CACHE_DIR)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_env(tmp_path),
                         timeout=300)
    assert out.returncode == 0, out.stderr
    env_dir, numba_dir = out.stdout.split()
    assert env_dir == numba_dir == str(tmp_path / "xdg" / "refsim" / "numba" / jitcache.source_digest())


def test_importing_refsim_alone_sets_nothing(tmp_path):
    out = subprocess.run([sys.executable, "-c", "import os, refsim.cli, refsim.jit; "
                          "print(os.environ.get('NUMBA_CACHE_DIR'))"],
                         capture_output=True, text=True, env=_env(tmp_path), timeout=60)
    assert out.stdout.split() == ["None"] and not (tmp_path / "xdg").exists()


def test_an_edited_callee_is_recompiled_not_reused(tmp_path):
    """The hazard itself, on a two-file package: ``caller.g`` (cached) calls ``callee.f`` from
    another file. After ``callee.py`` changes, a run keyed by the tree compiles anew and sees the
    new ``f``; an unchanged tree loads the cached code (Numba's index file is written once)."""
    pkg = tmp_path / "pkg"
    _tree(pkg, {"__init__.py": "",
                "callee.py": "import numba\n@numba.njit(cache=True)\ndef f():\n    return 1\n",
                "caller.py": "import numba\nfrom pkg.callee import f\n"
                             "@numba.njit(cache=True)\ndef g():\n    return f() * 10\n"})
    run = textwrap.dedent(f"""
        import os, sys
        from refsim import jitcache
        print(jitcache.configure({str(pkg)!r}))
        from pkg.caller import g
        print(g())
    """)

    def go():
        out = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, env=_env(tmp_path),
                             timeout=120)
        assert out.returncode == 0, out.stderr
        folder, value = out.stdout.split()
        return folder, int(value)

    f1, v1 = go()
    assert v1 == 10
    index = [p for p in Path(f1).rglob("*.nbi") if "caller" in p.name]
    assert len(index) == 1
    stamp = index[0].stat().st_mtime_ns
    assert go() == (f1, 10)
    assert index[0].stat().st_mtime_ns == stamp                       # reused, not rewritten
    (pkg / "callee.py").write_text("import numba\n@numba.njit(cache=True)\ndef f():\n    return 2\n")
    f2, v2 = go()
    assert f2 != f1 and v2 == 20
