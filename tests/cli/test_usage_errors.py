"""Usage errors name the command they belong to (issue 26 C7): an unknown flag after a
subcommand showed the top-level usage and ``refsim: error``; ``refsim timing fit`` errors name
``refsim timing fit``; a bare ``refsim`` says on stderr why it exits 2."""

import pytest

from refsim.cli import main

DEMO = "traces/demo.route.csv"


@pytest.mark.parametrize("argv, prog", [
    (["replay", DEMO, "--cache-mb", "4", "--bogus"], "refsim replay"),
    (["sweep", DEMO, "--cache-mb", "4", "--bogus", "x"], "refsim sweep"),
    (["timing", "fit", "r.csv", "--out", "d.json", "--bogus"], "refsim timing fit"),
    (["timing", "predict", "d.json", "r.csv", "--nope=3"], "refsim timing predict"),
    (["--bogus"], "refsim"),
])
def test_an_unknown_flag_is_named_by_its_command(argv, prog, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    extra = " ".join(a for a in argv if a.startswith("--bogus") or a.startswith("--nope")
                     or a == "x")
    assert lines[-1] == f"{prog}: error: unrecognized arguments: {extra}"
    assert lines[0].startswith(f"usage: {prog} ")
    assert out == ""


def test_a_bare_refsim_says_why_it_exits_2(capsys):
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("usage: refsim ") and "replay" in out      # the listing
    assert err == "refsim: error: the following arguments are required: COMMAND\n"
