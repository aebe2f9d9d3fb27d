"""Atomic output: a failure midway leaves the earlier file untouched and no temporary behind."""

import pytest

from refsim.errors import ConfigError
from refsim.fileio import atomic_path, write_text_atomic


def test_success_replaces_the_file(tmp_path):
    p = tmp_path / "out.txt"
    p.write_text("old")
    write_text_atomic(p, "new\n")
    assert p.read_text() == "new\n"
    assert [x.name for x in tmp_path.iterdir()] == ["out.txt"]


def test_failure_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    p = tmp_path / "out.txt"
    p.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(p) as tmp:
            with open(tmp, "w") as fh:
                fh.write("half")
            raise RuntimeError("interrupted")
    assert p.read_text() == "old"
    assert [x.name for x in tmp_path.iterdir()] == ["out.txt"]


def test_unwritable_folder_names_the_flag_and_path(tmp_path):
    target = tmp_path / "no" / "such" / "dir" / "x.csv"
    with pytest.raises(ConfigError, match=r"--csv .*x\.csv: cannot write here"):
        write_text_atomic(target, "x", what="--csv")


def test_written_files_get_the_usual_mode(tmp_path):
    import os
    p = tmp_path / "m.txt"
    write_text_atomic(p, "x")
    mask = os.umask(0)
    os.umask(mask)
    assert (p.stat().st_mode & 0o777) == (0o666 & ~mask)
