"""The library face refuses what the command refuses, with the same message text (docs/notebook.md,
"A value the command line refuses is refused here with the same message"): ``refsim.union(t, [])``
returned an empty result while ``refsim union --window ''`` is a usage error, and
``refsim.union(t, [0])`` said ``--window: 0 is outside 1..64`` where the command says
``argument --window: expected ...``. Each case runs the command and the call and compares the
texts; a usage error is exit 2 and a :class:`refsim.UsageError`, a bad-data error exit 1."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refsim
from refsim.cli import main
from refsim.errors import UsageError

DEMO = "traces/demo.route.csv"
WINDOW_RULE = ("argument --window: expected N, N,M,... or A..B with A <= B, each an integer in "
               "1..2147483647, got ")
BUDGETS_RULE = ("argument --cache-mb: expected N[,N,...] or START:STOP:STEP, each a number of MiB "
                "from 2^-20 (one byte) to 2^40 (1 EiB), got ")


def cli_error(argv, capsys) -> tuple[int, str]:
    """(exit status, the message after ``refsim CMD: error: ``) of a refused command."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    last = err.splitlines()[-1]
    prog = "refsim " + " ".join(argv[:2] if argv[0] == "timing" else argv[:1]) + ": error: "
    assert last.startswith(prog), err
    return code, last[len(prog):]


def lib_error(call) -> tuple[int, str]:
    """(the exit status the command gives this error, its text) of a refused library call."""
    with pytest.raises(refsim.ConfigError) as e:
        call()
    return (2 if isinstance(e.value, UsageError) else 1), str(e.value)


@pytest.fixture(scope="module")
def demo():
    return refsim.read_trace(DEMO)


@pytest.mark.parametrize("windows, text, message", [
    ([], "", WINDOW_RULE + "''"),
    ([0], "0", WINDOW_RULE + "'0'"),
    ([1, -3], "1,-3", WINDOW_RULE + "'1,-3'"),
    ([2.0], "2.0", WINDOW_RULE + "'2.0'"),
    ([100], "100", "--window: 100 is outside 1..64 (the trace's decode positions)"),
])
def test_a_refused_window_list_reads_the_same(demo, capsys, windows, text, message):
    cli = cli_error(["union", DEMO, "--window", text], capsys)
    lib = lib_error(lambda: refsim.union(demo, windows))
    assert cli == lib
    assert lib[1] == message
    assert lib[0] == (1 if windows == [100] else 2)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])   # capsys is read out each time
@given(st.lists(st.integers(-5, 10), max_size=4).filter(lambda ws: not ws or min(ws) < 1))
def test_any_list_with_a_width_below_1_reads_the_same(demo, capsys, ws):
    text = ",".join(map(str, ws))
    assert cli_error(["union", DEMO, "--window", text], capsys) == \
        lib_error(lambda: refsim.union(demo, ws)) == (2, WINDOW_RULE + repr(text))


def test_accepted_windows_are_the_commands(demo, capsys):
    """A str is the command's text; a single width is a list of one; the rows are the same."""
    assert [r.window for r in refsim.union(demo, "1..3").rows] == [1, 2, 3]
    assert [r.window for r in refsim.union(demo, 3).rows] == [3]
    assert refsim.union(demo, range(2, 4)).rows == refsim.union(demo, "2,3").rows


@pytest.mark.parametrize("budgets, text", [
    ([], ""), ([0], "0"), ([64, -5], "64,-5"), ([2.0**41], "2199023255552.0"),
    ([float("nan")], "nan"), ([True], "True"), (0, "0"),
])
def test_a_refused_sweep_budget_list_reads_the_same(demo, capsys, budgets, text):
    cli = cli_error(["sweep", DEMO, "--cache-mb", text, "--policy", "lru"], capsys)
    lib = lib_error(lambda: refsim.sweep(demo, budgets, ["lru"]))
    assert cli == lib == (2, BUDGETS_RULE + repr(text.split(",")[-1]))


def test_accepted_sweep_budgets_are_unchanged(demo):
    """Numbers pass through their text (str() round-trips a float exactly): the same rows."""
    a = refsim.sweep(demo, [64, 100.5, 1e-3], ["lru"])
    assert a.budgets_mib == [64.0, 100.5, 1e-3]
    assert a.rows == refsim.sweep(demo, "64,100.5,0.001", "lru").rows


@pytest.mark.parametrize("policies, text", [
    ([], ""), ([""], ""), (["bogus"], "bogus"), (["lru", "lfu:nope=1"], "lru,lfu:nope=1"),
])
def test_a_refused_policy_list_reads_the_same(demo, capsys, policies, text):
    cli = cli_error(["sweep", DEMO, "--cache-mb", "64", "--policy", text], capsys)
    lib = lib_error(lambda: refsim.sweep(demo, [64], policies))
    assert cli == lib
    assert lib[0] == 2 and lib[1].startswith("argument --policy: expected ")


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), 1e20, True])
def test_a_refused_single_budget_reads_the_same(demo, capsys, value):
    cli = cli_error(["replay", DEMO, "--cache-mb", str(value)], capsys)    # '1e+20', 'True'
    assert cli[1].endswith(f"got {str(value)!r}")
    assert cli == lib_error(lambda: refsim.replay(demo, value))
    assert cli == lib_error(lambda: refsim.union(demo, [1], value)) != (0, "")
    assert cli[0] == 2 and cli[1].startswith("argument --cache-mb: expected a number of MiB")


@pytest.mark.parametrize("argv, call", [
    (["timing", "fit", "--out", "-"], lambda: refsim.fit_device([])),
    (["timing", "predict", "d.json"], lambda: refsim.predict_time(None, [])),
])
def test_no_run_reads_the_same(capsys, argv, call):
    cli = cli_error(argv, capsys)
    assert cli == lib_error(call) == (2, "the following arguments are required: RUN.csv")
