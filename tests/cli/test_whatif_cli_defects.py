"""``refsim whatif``: the CLI defects a new user found (issue 29 follow-up).

1. ``--spec`` numbers: ``d``/``m`` are plain decimal digits without a leading zero,
   ``acceptance``/``coverage`` decimal numbers (no nan, inf, ``_`` or spaces); one line, exit 2.
2. An item lacking ``acceptance=``/``coverage=`` on a trace without ``--tokens`` is a usage error
   (exit 2); every other usage mistake exits 2, runtime and data problems 1.
3. ``--csv`` holds every row the table shows, ``[fixed replay]`` rows included, in its order,
   values equal to ``--json``'s.
4. ``--plot`` naming standard output's file is refused (exit 2) and nothing is written to it.
"""

import csv
import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings, strategies as st

from refsim.cli import main
from refsim.cli.whatif import COLUMNS, TEXT_COLUMNS
from refsim.errors import UsageError
from refsim.spec.constants import DRAFT_MAX_LIMIT, NGRAM_MAX_MATCH
from refsim.timing import DeviceModel, Param
from refsim.timing.verdict import parse_spec_list
from tests.cli.test_whatif_fixes import whatif

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "traces" / "demo.route.csv")
VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
          "h": 0.1, "tail": 1.0}
NG = "ngram:d=3:m=3:acceptance=0.5:coverage=0.4"


@pytest.fixture(scope="module")
def device_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("dev") / "dev.json"
    path.write_text(DeviceModel(params={k: Param(v) for k, v in VALUES.items()},
                                compute={"m": Param(100.0)}, serial_runs=2,
                                overlap_runs=2).to_json())
    return str(path)



# 1. --spec numbers -------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, msg", [
    ("ngram:d=+3:m=3", "d=+3, expected plain decimal digits"),
    ("ngram:d=03:m=3", "d=03, expected plain decimal digits"),
    ("ngram:d= 3:m=3", "d= 3, expected plain decimal digits"),
    ("ngram:d=3 :m=3", "d=3 , expected plain decimal digits"),
    ("ngram:d=3:m=1_0", "m=1_0, expected plain decimal digits"),
    ("ngram:d=3:m=-3", "m=-3, expected plain decimal digits"),
    ("mtp:d=\u0663", "d=\u0663, expected plain decimal digits"),       # ARABIC-INDIC DIGIT THREE
    ("mtp:d=3:acceptance=nan", "acceptance nan, expected a number in 0..1"),
    ("mtp:d=3:acceptance=NaN", "acceptance NaN, expected a number in 0..1"),
    ("mtp:d=3:acceptance=inf", "acceptance inf, expected a number in 0..1"),
    ("mtp:d=3:acceptance=-inf", "acceptance -inf, expected a number in 0..1"),
    ("mtp:d=3:acceptance=0.4_4", "acceptance 0.4_4, expected a number in 0..1"),
    ("mtp:d=3:acceptance= .5", "acceptance  .5, expected a number in 0..1"),
    ("ngram:d=3:m=3:acceptance=0.5:coverage=1_0", "coverage 1_0, expected a number in 0..1"),
])
def test_odd_spec_numbers_are_usage_errors(device_file, capsys, spec, msg):
    """Each oddity int()/float() took is refused in one line naming the item and the value,
    exit 2, before the trace is read (a missing trace does not hide it)."""
    for source in (DEMO, "no-such-trace.csv"):
        code, out, err = whatif(capsys, source, "--device", device_file, "--cache-mb", "64",
                                "--spec", "off," + spec, "--head-ms", "1")
        assert code == 2 and out == ""
        last = err.splitlines()[-1]
        assert last.startswith(f"refsim whatif: error: --spec {spec!r}: {msg}"), last
        assert "Traceback" not in err


@pytest.mark.parametrize("text, value", [
    ("0.442", 0.442), (".5", 0.5), ("1.", 1.0), ("5e-1", 0.5), ("1", 1.0), ("0", 0.0),
    ("+0.25", 0.25), ("2.5E-1", 0.25)])
def test_decimal_numbers_float_took_are_kept(text, value):
    """What float() took in decimal notation is still taken, to the same value."""
    cfg = parse_spec_list(f"mtp:d=2:acceptance={text}")[1]
    assert cfg.acceptance == value


def test_spec_integers_hand_worked():
    cfgs = parse_spec_list(f"ngram:d={DRAFT_MAX_LIMIT}:m={NGRAM_MAX_MATCH},mtp:d=1")
    assert [(c.draft, c.min_match) for c in cfgs] == [(0, 0), (8, 12), (1, 0)]
    with pytest.raises(UsageError, match=r"d=0, expected an integer >= 1"):
        parse_spec_list("mtp:d=0")      # 0 is plain digits: the range check names it


def _refused(spec: str) -> bool:
    try:
        parse_spec_list(spec)
    except UsageError:
        return True
    return False


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789+-_ .e\u0663", max_size=4))
@example("+3")
@example("03")
@example("1_0")
def test_d_is_taken_only_as_plain_digits(text):
    """Oracle: the texts refsim run --draft's range writes, str(k) for k in 1..8; anything else
    (a sign, a leading zero, a space, _, a non-ASCII digit, out of range) is refused."""
    ok = {str(k) for k in range(1, DRAFT_MAX_LIMIT + 1)}
    spec = f"mtp:d={text}:acceptance=0.5"
    if text in ok:
        assert parse_spec_list(spec)[1].draft == int(text)
    else:
        assert _refused(spec)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789.eE+-_ nafiNI", max_size=6))
@example("0_0")
@example("0.4_4")
@example(" 1")
@example("-0")
@example("1e0")
@example("0 ")
def test_acceptance_is_a_decimal_number(text):
    """Oracle: float() parses it to a value in [0, 1] and it is written with decimal digits,
    '.', an exponent and signs only (no nan, inf, _ or space)."""
    try:
        v = float(text)
    except ValueError:
        v = None
    plain = set(text) <= set("0123456789.eE+-")
    # not the item's last key: spaces at an item's ends are the list's, stripped
    spec = f"ngram:d=2:m=2:acceptance={text}:coverage=0.5"
    if v is not None and plain and 0.0 <= v <= 1.0:
        assert parse_spec_list(spec)[1].acceptance == v
    else:
        assert _refused(spec)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.0, max_value=1.0))
def test_every_acceptance_round_trips(x):
    """repr of any number in [0, 1] is taken, exactly."""
    assert parse_spec_list(f"mtp:d=2:acceptance={x!r}")[1].acceptance == x


# 2. usage mistakes exit 2, runtime and data problems 1 -----------------------------------------

USAGE = [
    # the command line lacks what an item needs (was exit 1)
    (["--spec", "off,ngram:d=3:m=3:coverage=0.2"], "ngram:d=3:m=3: no acceptance"),
    (["--spec", "off,ngram:d=3:m=3:acceptance=0.5"], "ngram:d=3:m=3: no coverage"),
    (["--spec", "off,ngram:d=3:m=3"], "ngram:d=3:m=3: no acceptance, no coverage"),  # both
    (["--spec", "off,mtp:d=2", "--head-ms", "1"], "mtp:d=2: no acceptance"),
    # --tokens measures only an n-gram item that gives neither number
    (["--spec", "off,ngram:d=3:m=3:acceptance=0.5", "--tokens", "t.txt", "--prompt-len", "4"],
     "no coverage"),
    (["--spec", "off,mtp:d=2", "--head-ms", "1", "--tokens", "t.txt", "--prompt-len", "4"],
     "mtp:d=2: no acceptance"),
    # the others
    (["--spec", "off", "--tokens", "t.txt"], "--tokens and --prompt-len go together"),
    (["--spec", "off,mtp:d=2:acceptance=0.5"], "--gguf MODEL.gguf"),
    (["--spec", "off", "--position-cost-interval", "x"], "--position-cost-interval"),
    (["--spec", "off", "--position-cost-interval", "0.5,0.1"], "--position-cost-interval"),
    (["--spec", "off", "--cache-mb", "auto"], "--cache-mb auto and --ram-mb need --gguf"),
    (["--spec", "off", "--ram-mb", "4000"], "--cache-mb auto and --ram-mb need --gguf"),
    (["--spec", "off", "--prompt", "hi"], "--prompt: for a live run"),
    (["--spec", "off", "-n", "4"], "-n: for a live run"),
    (["--spec", "off", "--spec-policy", "bogus"], "argument --spec-policy"),
    (["--spec", "off,ngram:d=3:m=3", "--cache-mb", "x"], "argument --cache-mb"),
    (["--spec", "off", "--noise-pct", "200"], "argument --noise-pct"),
    # with --spec-policy on a trace too (was exit 1)
    (["--spec", "off,ngram:d=3:m=3:coverage=0.4", "--spec-policy", "backoff"], "no acceptance"),
]


@pytest.mark.parametrize("extra, msg", USAGE)
def test_usage_mistakes_exit_2(device_file, capsys, extra, msg):
    code, out, err = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", "64", *extra)
    assert code == 2 and out == "", err
    assert msg in err.splitlines()[-1]
    assert "Traceback" not in err


def test_device_missing_is_a_usage_error(capsys):
    code, out, err = whatif(capsys, DEMO, "--cache-mb", "64", "--spec", "off")
    assert code == 2 and "--device is required" in err.splitlines()[-1]


def test_missing_acceptance_shows_before_any_input(device_file, capsys):
    """The command line alone shows it: a missing trace does not hide it."""
    code, _, err = whatif(capsys, "no-such-trace.csv", "--device", device_file, "--cache-mb",
                          "64", "--spec", "off,ngram:d=3:m=3:coverage=0.2")
    assert code == 2 and "no acceptance (give acceptance=, or --tokens)" in err.splitlines()[-1]


def test_runtime_and_data_problems_exit_1(device_file, tmp_path, capsys):
    """What only the inputs show exits 1 with one line (no usage above it)."""
    toks = tmp_path / "t.txt"
    toks.write_text("1 2 3 x 5")
    gif = str(tmp_path / "w.gif")
    cases = [
        (["no-such-trace.csv", "--device", device_file, "--spec", "off," + NG], "no-such-trace.csv"),
        ([DEMO, "--device", str(tmp_path / "none.json"), "--spec", "off," + NG], "none.json"),
        ([DEMO, "--device", device_file, "--spec", "off,ngram:d=2:m=2", "--tokens",
          str(tmp_path / "none.txt"), "--prompt-len", "2"], "none.txt"),
        ([DEMO, "--device", device_file, "--spec", "off,ngram:d=2:m=2", "--tokens", str(toks),
          "--prompt-len", "2"], "t.txt"),
        ([DEMO, "--device", device_file, "--spec", "off,mtp:d=2:acceptance=0.5", "--gguf",
          str(tmp_path / "none.gguf")], "none.gguf"),
        ([DEMO, "--device", device_file, "--spec", "off", "--plot", gif], "'.gif'"),
    ]
    for args, named in cases:
        code, out, err = whatif(capsys, *args, "--cache-mb", "64")
        lines = err.splitlines()
        assert code == 1 and out == "", (args, err)
        assert len(lines) == 1 and named in lines[0] and "Traceback" not in err, (args, err)


# 3. --csv holds the table's rows ------------------------------------------------------------------

POLICY_ARGS = ["--cache-mb", "64,256", "--spec", f"off,{NG},mtp:d=2:acceptance=0.8",
               "--head-ms", "10", "--spec-policy", "backoff"]


def test_csv_has_the_tables_rows_in_order_with_jsons_values(device_file, capsys):
    code, table, err = whatif(capsys, DEMO, "--device", device_file, *POLICY_ARGS)
    assert code == 0, err
    code, out, err = whatif(capsys, DEMO, "--device", device_file, *POLICY_ARGS, "--csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    code, out, err = whatif(capsys, DEMO, "--device", device_file, *POLICY_ARGS, "--json")
    assert code == 0, err
    doc = json.loads(out)

    # the table's rows: a line starting with a budget, then the label (a bracket after it)
    shown = [m.group(1) for m in (re.match(r" *(?:64|256)  (\S+(?: \[[^\]]+\])?)", ln)
                                  for ln in table.splitlines()) if m]
    labels = [r["config"] + (" [fixed replay]" if r["row"] == "fixed replay" else
                             "" if r["config"] == "off" else " [backoff]") for r in rows]
    assert labels == shown
    assert shown == ["off", "ngram:d=3:m=3 [fixed replay]", "ngram:d=3:m=3 [backoff]",
                     "mtp:d=2 [fixed replay]", "mtp:d=2 [backoff]"] * 2

    # the JSON's rows, each fixed replay just before the row it names by policy_row
    replays = {r["policy_row"]: r for r in doc["fixed_replay_rows"]}
    expected = []
    for i, r in enumerate(doc["rows"]):
        if i in replays:
            expected.append((replays[i], "fixed replay"))
        expected.append((r, "policy"))
    assert len(rows) == len(expected) == 10
    assert [r["row"] for r in rows] == [k for _, k in expected]
    for got, (want, _) in zip(rows, expected):
        for k in COLUMNS[:-1]:
            if k in TEXT_COLUMNS:
                assert got[k] == want[k], k
            elif want[k] is None:           # JSON null: n/a (or a break-even that never comes)
                assert math.isnan(float(got[k])), k
            else:
                assert float(got[k]) == want[k], k
    # the fixed replays are priced with fixed; the others with the command's policy
    assert {r["policy"] for r in rows if r["row"] == "fixed replay"} == {"fixed"}
    assert [r["policy"] for r in rows if r["row"] == "policy"] == ["none", "backoff",
                                                                   "backoff"] * 2


def test_csv_without_a_policy_is_every_row_a_policy_row(device_file, capsys):
    code, out, err = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
                            f"off,{NG}", "--csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["config"], r["row"]) for r in rows] == [("off", "policy"),
                                                       ("ngram:d=3:m=3", "policy")]
    assert list(rows[0]) == list(COLUMNS) and COLUMNS[-1] == "row"


# 4. --plot on standard output -------------------------------------------------------------------

def _run_cli(args, stdout_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(stdout_path, "wb") as fh:
        return subprocess.run([sys.executable, "-m", "refsim", "whatif", *args], stdout=fh,
                              stderr=subprocess.PIPE, env=env, cwd=str(ROOT), text=True)


@pytest.mark.parametrize("fmt", [[], ["--json"], ["--csv"]])
def test_plot_to_the_stdout_file_is_refused(device_file, tmp_path, monkeypatch, capsys, fmt):
    """In process: standard output is a real file, --plot names the same file."""
    out = tmp_path / "out.png"
    with open(out, "w") as fh:
        monkeypatch.setattr(sys, "stdout", fh)
        code = main(["whatif", DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
                     f"off,{NG}", "--plot", str(out), *fmt])
        monkeypatch.undo()
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    what = {"--json": "--json", "--csv": "--csv"}.get(fmt[0] if fmt else "", "the table")
    assert err[-1] == (f"refsim whatif: error: --plot {out}: the same file as standard output, "
                       f"where {what} goes; expected another file")
    assert out.read_bytes() == b""


def test_plot_to_stdout_through_a_redirect(device_file, tmp_path):
    """As a shell runs it: `refsim whatif ... --plot F > F` and `--plot /dev/stdout > F`."""
    base = [DEMO, "--device", device_file, "--cache-mb", "64", "--spec", f"off,{NG}"]
    out = tmp_path / "out.png"
    for plot in (str(out), "/dev/stdout"):
        p = _run_cli(base + ["--plot", plot], out)
        assert p.returncode == 2, p.stderr
        assert p.stderr.splitlines()[-1] == (f"refsim whatif: error: --plot {plot}: the same file "
                                             f"as standard output, where the table goes; "
                                             f"expected another file")
        assert out.read_bytes() == b""


def test_plot_beside_a_redirected_stdout_is_written(device_file, tmp_path):
    """The control: another file than standard output's gets the PNG, the table its own."""
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "out.txt", tmp_path / "w.png"
    p = _run_cli([DEMO, "--device", device_file, "--cache-mb", "64", "--spec", f"off,{NG}",
                  "--plot", str(png)], out)
    assert p.returncode == 0, p.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.read_bytes().startswith(b"trace: ") and b"\x89PNG" not in out.read_bytes()
