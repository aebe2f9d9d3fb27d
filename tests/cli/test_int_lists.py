"""One integer rule for every flag and every integer list (issue 26 C5): ``0`` or digits without a
leading zero, ``-`` for a negative; items separated by one comma or one space, no empty item.
``--corpus`` / ``--prompt-tokens`` took `` 3``, ``+3``, ``03`` and ``1,,2`` (the docs said `` 3``
was refused); ``union --window`` took `` 3``."""

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refsim.cli import main
from refsim.validators import int_in, int_range, token_ids

BAD = [" 3", "3 ", "+3", "03", "00", "-0", "1,,2", "1, 2", "1  2", ",1", "1,", "", "1_0", "٣"]


@pytest.mark.parametrize("text", BAD)
def test_token_ids_refuse(text):
    with pytest.raises(argparse.ArgumentTypeError) as e:
        token_ids(text)
    assert str(e.value) == ("expected token ids like 1,5,77, each an integer in 0..2147483647, "
                            f"got {text!r}")


@pytest.mark.parametrize("text", BAD + ["01..3", "1..03", "1.. 3"])
def test_int_lists_refuse(text):
    with pytest.raises(argparse.ArgumentTypeError) as e:
        int_range(text, 0, 100)
    assert str(e.value) == ("expected N, N,M,... or A..B with A <= B, each an integer in 0..100, "
                            f"got {text!r}")


@pytest.mark.parametrize("text", ["+3", "03", " 3", "-0"])
def test_single_integers_follow_the_same_rule(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected an integer in -5..5"):
        int_in(-5, 5)(text)


def test_hand_worked_values():
    assert token_ids("0,10,7") == [0, 10, 7] == token_ids("0 10,7")
    assert int_range("1 3", 0, 5) == [1, 3]
    assert int_range("-2..1,10", -5, 10) == [-2, -1, 0, 1, 10]
    assert int_in(-5, 5)("-5") == -5 and int_in(-5, 5)("0") == 0


@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=20))
def test_printed_lists_read_back(ids):
    """What ``','.join(map(str, ids))`` prints (the form refsim writes) reads back exactly."""
    text = ",".join(map(str, ids))
    assert token_ids(text) == ids
    assert int_range(text, 0, 2**31 - 1) == ids


@given(st.integers(0, 10**6), st.sampled_from(["+{}", "0{}", " {}", "{} ", "{},", ",{}"]))
def test_any_integer_in_a_bad_form_is_refused(n, form):
    with pytest.raises(argparse.ArgumentTypeError):
        token_ids(form.format(n))


@pytest.mark.parametrize("argv", [
    ["ngram", "--corpus", " 3", "--draft", "1"],
    ["ngram", "--corpus", "1,,2", "--draft", "1"],
    ["run", "--prompt-tokens", "+3", "-n", "1"],
    ["run", "--prompt-tokens", "03", "-n", "1"],
    ["union", "--window", " 3", "traces/demo.route.csv"],
])
def test_the_commands_refuse_with_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith(f"refsim {argv[0]}: error: argument {argv[1]}: expected ")
    assert err.endswith(f", got {argv[2]!r}")
