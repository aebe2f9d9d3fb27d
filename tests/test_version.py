"""``refsim --version`` prints the installed distribution's version."""

from importlib.metadata import version

import pytest

from refsim.cli import main


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"refsim {version('refsim')}"
