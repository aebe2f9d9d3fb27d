"""Bytes past the last tensor are named by every command that reads the file (issue 26 C13):
``inspect`` warned, ``memory`` and ``run`` did not say it as theirs (the library printed
``refsim: warning:`` itself); now each command's line is ``refsim CMD: warning: FILE: N bytes
after byte B ...``, once."""

import shutil

import pytest

from refsim.cli import main


@pytest.fixture()
def tailed(tmp_path):
    from refsim.forward.builtin import builtin_model_path
    p = tmp_path / "tail.gguf"
    shutil.copyfile(builtin_model_path(), p)
    size = p.stat().st_size
    with open(p, "ab") as fh:
        fh.write(b"X" * 73)
    import refsim.model.gguf_io as gio
    gio._WARNED.clear()                 # once per process: each test is a fresh command
    return p, size


@pytest.mark.parametrize("argv", [["inspect"], ["memory"], ["run", "-n", "1"]])
def test_each_command_names_the_trailing_bytes(tailed, argv, capsys):
    p, size = tailed
    assert main([argv[0], str(p), *argv[1:]]) == 0
    err = capsys.readouterr().err.splitlines()
    said = [ln for ln in err if "bytes after byte" in ln]
    assert said == [f"refsim {argv[0]}: warning: {p}: 73 bytes after byte {size} (the end of the "
                    f"last tensor's padded data) are not described by the tensor table; a "
                    f"tensor's type or shape may have been changed"]
