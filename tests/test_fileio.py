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


# --- what is at the path is never destroyed (issue 12 A1) -----------------------------------

import errno  # noqa: E402
import os  # noqa: E402
import stat  # noqa: E402

from refsim.fileio import (OutputKind, check_writable, open_output,  # noqa: E402
                           resolve_output)
from refsim.testing.fifo import read_fifo_in_background  # noqa: E402


def test_a_symlink_keeps_pointing_at_its_target_and_the_target_is_replaced(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.csv"
    target.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    write_text_atomic(link, "new\n", what="--csv")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new\n"
    # the temporary went beside the target (its folder), and nothing is left in either folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "real"]
    assert [p.name for p in (tmp_path / "real").iterdir()] == ["out.csv"]


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "made.csv")
    write_text_atomic(link, "x\n")
    assert link.is_symlink() and (tmp_path / "made.csv").read_text() == "x\n"


def test_an_existing_files_permission_bits_are_kept(tmp_path):
    p = tmp_path / "out.csv"
    p.write_text("old")
    p.chmod(0o640)
    write_text_atomic(p, "new")
    assert stat.S_IMODE(p.stat().st_mode) == 0o640 and p.read_text() == "new"
    p.chmod(0o604)
    with atomic_path(p, "--out") as tmp:
        with open(tmp, "wb") as fh:
            fh.write(b"GGUF")
    assert stat.S_IMODE(p.stat().st_mode) == 0o604 and p.read_bytes() == b"GGUF"


def test_a_fifo_is_streamed_into_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert resolve_output(fifo, "--csv").kind is OutputKind.DIRECT
    check_writable(fifo, "--csv")              # must not open it (that would block: no reader yet)
    t, got = read_fifo_in_background(fifo)
    write_text_atomic(fifo, "a,b\n1,2\n", what="--csv")
    t.join(10)
    assert got == [b"a,b\n1,2\n"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]   # no temporary beside it


def test_a_symlink_to_a_fifo_streams_into_the_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(fifo)
    t, got = read_fifo_in_background(fifo)
    with atomic_path(link, "--out") as dest:       # binary, path-based writer
        with open(dest, "wb") as fh:
            fh.write(b"\x00\x01")
    t.join(10)
    assert got == [b"\x00\x01"] and link.is_symlink() and stat.S_ISFIFO(os.stat(link).st_mode)


def test_dev_null_is_written_in_place():
    before = os.lstat("/dev/null")
    write_text_atomic("/dev/null", "x" * 100_000)
    after = os.lstat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("binary", [False, True])
def test_dev_full_is_one_line_enospc_and_stays_a_device(binary):
    before = os.lstat("/dev/full")
    with pytest.raises(ConfigError) as info:
        if binary:
            with atomic_path("/dev/full", "--out") as dest:
                with open(dest, "wb") as fh:
                    fh.write(b"\x00" * 100_000)
        else:
            write_text_atomic("/dev/full", "x" * 100_000, what="--csv")
    flag = "--out" if binary else "--csv"
    assert str(info.value) == f"{flag} /dev/full: write failed: {os.strerror(errno.ENOSPC)}"
    after = os.lstat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


def test_dash_is_stdout_for_text_and_refused_for_binary(capsys):
    write_text_atomic("-", "a,b\n", what="--csv")
    with open_output("-", "--route-trace") as fh:
        fh.write("more\n")
    assert capsys.readouterr().out == "a,b\nmore\n"
    with pytest.raises(ConfigError, match=r"^--plot -: this output is binary .*/dev/stdout"):
        check_writable("-", "--plot", binary=True)
    with pytest.raises(ConfigError, match=r"^--out -: this output is binary"):
        with atomic_path("-", "--out"):
            pass
    assert not os.path.exists("-")


def test_a_folder_is_refused_and_so_is_a_missing_folder(tmp_path):
    with pytest.raises(ConfigError, match=r"^--csv .*: is a folder; expected a file name$"):
        check_writable(tmp_path, "--csv")
    link = tmp_path / "dirlink"
    link.symlink_to(tmp_path)
    with pytest.raises(ConfigError, match=r"is a folder"):
        check_writable(link, "--csv")
    with pytest.raises(ConfigError, match=r"cannot write here: no such file or device"):
        check_writable("/dev/no-such-device", "--csv")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any file")
def test_a_read_only_file_is_refused_before_any_work(tmp_path):
    p = tmp_path / "ro.csv"
    p.write_text("keep")
    p.chmod(0o444)
    with pytest.raises(ConfigError, match=r"cannot write here: the file is not writable"):
        check_writable(p, "--csv")
    assert p.read_text() == "keep"
