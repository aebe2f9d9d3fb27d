"""``refsim whatif``: five defects a new-user pass found (issue 29 polish), each test failing
before its fix:

1. the live header said ``16 tokens`` when every run stopped at an end-of-generation token after
   10: it states what the runs generated (and ``--json`` rows carry each run's count and stop);
2. an n-gram item on a trace with neither ``acceptance=`` nor ``coverage=`` named only the
   coverage: every missing number is named, every item's, in one line (exit 2);
3. the ``off`` row showed an extra-position cost priced with eps(2), though a plain decode has
   no extra position: ``-`` in ``--explain``, ``nan`` in ``--csv``, JSON ``null``;
4. long configuration labels and budgets broke the table's columns: widths come from the content;
5. ``--cache-mb START:STOP:STEP`` was refused: read by sweep's and breakeven's parser, with its
   bounds and messages (``auto`` unchanged).
"""

import csv
import io
import json

import pytest

from refsim.cli import main
from refsim.errors import ConfigError
from refsim.timing.verdict import SpecConfig
from tests.cli.test_whatif_cli_defects import device_file  # noqa: F401  (the toy device fixture)
from tests.cli.test_whatif_fixes import DEMO, EXACT, whatif

EOG_PROMPT = "31"
"""A prompt on which the built-in model emits its end-of-generation token (2) after 10 tokens,
whatever the cache and the n-gram draft (greedy decoding is lossless): found by running it."""




def _run_json(capsys, *args):
    assert main(["run", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# 1. what the live runs generated ----------------------------------------------------------------

def test_live_header_says_every_run_stopped_at_eog(device_file, capsys):
    """Oracle: ``refsim run --json`` of the same configurations at the same budget says each
    stopped at the end-of-generation token 2 before -n 16, having emitted 10 tokens."""
    common = ["--prompt-tokens", EOG_PROMPT, "-n", "16", "--cache-mb", "4"]
    refs = [_run_json(capsys, *common), _run_json(capsys, *common, "--ngram", "--ngram-min-match",
                                                  "1")]
    assert [(r["stop"], r["eog_token"], r["n_predict"], r["decodes"]) for r in refs] == \
        [("eog", 2, 16, 10)] * 2
    code, out, err = whatif(capsys, "builtin", "--device", device_file, "--cache-mb", "4",
                            "--spec", "off,ngram:d=3:m=1", *common[:4])
    assert code == 0, err
    head = out.splitlines()[0]
    assert ("every configuration run live at every budget (up to 16 tokens (-n); every run "
            "stopped at the end-of-generation token 2 after 10 tokens; refsim run's path)") in head
    assert "(16 tokens" not in head
    code, out, err = whatif(capsys, "builtin", "--device", device_file, "--cache-mb", "4",
                            "--spec", "off,ngram:d=3:m=1", *common[:4], "--json")
    doc = json.loads(out)
    assert doc["n_predict"] == 16
    assert [(r["measured"]["generated"], r["measured"]["stop"], r["measured"]["eog_token"])
            for r in doc["rows"]] == [(10, "eog", 2)] * 2


def test_live_header_of_runs_that_reached_n(device_file, capsys):
    """The control: runs that stopped at -n keep the header's ``24 tokens``; JSON says n_predict."""
    code, out, err = whatif(capsys, "builtin", "--device", device_file, "--cache-mb", "4",
                            "--spec", "off,ngram:d=3:m=1", "--prompt-tokens",
                            "5,6,7,8,9,5,6,7,8,9,5,6,7,8,9", "-n", "24")
    assert code == 0, err
    assert "every budget (24 tokens; refsim run's path)" in out.splitlines()[0]


@pytest.mark.parametrize("stops, text", [
    ([(16, None), (16, None)], "16 tokens"),
    ([(10, 2), (10, 2), (10, 2)],
     "up to 16 tokens (-n); every run stopped at the end-of-generation token 2 after 10 tokens"),
    ([(10, 2), (16, None)], "up to 16 tokens (-n); 1 of 2 runs stopped at the end-of-generation "
                            "token 2 after 10 tokens, the other at -n"),
    ([(7, 2), (10, 2), (16, None), (16, None)],
     "up to 16 tokens (-n); 2 of 4 runs stopped at the end-of-generation token 2 after 7 to 10 "
     "tokens, the others at -n"),
    ([(3, 1), (5, 106)], "up to 16 tokens (-n); every run stopped at an end-of-generation token "
                         "(1, 106) after 3 to 5 tokens"),
])
def test_generated_text_hand_worked(stops, text):
    from refsim.cli.whatif_sources import generated_text
    assert generated_text(16, stops) == text


# 2. every missing number --------------------------------------------------------------------------

@pytest.mark.parametrize("spec, line", [
    ("off,ngram:d=3:m=3", "--spec ngram:d=3:m=3: no acceptance, no coverage (give acceptance= "
                          "and coverage=, or --tokens)"),
    ("off,ngram:d=3:m=3,mtp:d=2,ngram:d=2:m=2:acceptance=0.5",
     "--spec ngram:d=3:m=3: no acceptance, no coverage (give acceptance= and coverage=, or "
     "--tokens); --spec mtp:d=2: no acceptance (give acceptance=, or --tokens); --spec "
     "ngram:d=2:m=2: no coverage (give coverage=, or --tokens)"),
])
def test_every_missing_number_in_one_line(device_file, capsys, spec, line):
    code, out, err = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", "64", "--spec",
                            spec, "--head-ms", "1")
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == f"refsim whatif: error: {line}"


def test_tokens_per_decode_names_both_numbers():
    with pytest.raises(ConfigError) as exc:
        SpecConfig("ngram", 3, 3).tokens_per_decode
    assert str(exc.value) == ("--spec ngram:d=3:m=3: no acceptance, no coverage (give "
                              "acceptance= and coverage=, or --tokens)")
    # coverage 0 needs no acceptance (nothing drafted); MTP's coverage is 1 unless measured
    assert SpecConfig("ngram", 3, 3, None, 0.0).missing() == ()
    assert SpecConfig("ngram", 3, 3, 0.5, None).missing() == ("coverage",)
    assert SpecConfig("mtp", 2).missing() == ("acceptance",)
    assert SpecConfig("off").missing() == ()


# 3. off has no extra position ----------------------------------------------------------------

OFF_ARGS = ["--cache-mb", "64,256", "--spec", "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.4"]


def test_off_row_has_no_extra_position_cost(device_file, capsys):
    code, out, err = whatif(capsys, DEMO, "--device", device_file, *OFF_ARGS, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["eps_by_config"]["off"] is None
    assert doc["eps_by_config"]["ngram:d=3:m=3"]["value"] == 0.38
    for r in doc["rows"]:
        terms = {t["name"]: t for t in r["terms"]}
        if r["config"] == "off":
            assert r["extra_positions_ms"] is None
            assert [terms["extra_positions"][k] for k in ("value", "lo", "hi")] == [None] * 3
            assert "eps" not in terms["extra_positions"]["source"]
            # every other term is the sum: the extra positions priced nothing before either
            rest = sum(terms[k]["value"] for k in terms if k != "extra_positions")
            assert r["ms_per_token"] == pytest.approx(rest, rel=1e-12)
        else:
            assert r["extra_positions_ms"] == terms["extra_positions"]["value"] > 0
    code, out, err = whatif(capsys, DEMO, "--device", device_file, *OFF_ARGS, "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["extra_positions_ms"] for r in rows][0::2] == ["nan", "nan"]
    assert all(float(r["extra_positions_ms"]) > 0 for r in rows[1::2])
    code, out, err = whatif(capsys, DEMO, "--device", device_file, *OFF_ARGS, "--explain")
    lines = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("extra_positions =")]
    assert lines[0] == lines[2] == ("extra_positions = - (off: one position per decode, no extra "
                                    "position to price)")
    assert lines[1].startswith("extra_positions = 28.5 ms/token [0, 90] (assumed: eps 0.380")


# 4. columns sized from the content -------------------------------------------------------------

TITLES = (("budget", ">"), ("config", "<"), ("accept", ">"), ("cover", ">"), ("pos/dec", ">"),
          ("tok/dec", ">"), ("MiB/tok", ">"), ("hit%", ">"), ("eff_tok/s [band]", ">"),
          ("delta% [band]", ">"), ("verdict", "<"), ("break-even", ">"))


def _check_columns(table: str, n_rows: int) -> list[str]:
    """Every row's cells sit in the header's columns: a right-aligned column's cells end where its
    title ends and a left-aligned one's start where its title starts, a space on each side."""
    lines = table.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("budget "))
    head, rows = lines[at], [ln for ln in lines[at + 1:] if not ln.startswith(" " * 9)]
    assert len(rows) == n_rows
    assert {len(r) for r in rows} == {len(head)}
    for title, align in TITLES:
        start = head.index(title)
        end = start + len(title)
        for r in rows:
            if align == ">":
                assert r[end:end + 1] in ("", " "), (title, r)
            else:
                assert r[start - 1] == " " and r[start] != " ", (title, r)
    return rows


def test_columns_align_with_long_labels_and_budgets(device_file, capsys):
    spec = "off,ngram:d=8:m=12:acceptance=0.5:coverage=0.25,mtp:d=8:acceptance=0.5"
    code, out, err = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", "123456.25,64.125",
                            "--spec", spec, "--head-ms", "1", "--spec-policy", "backoff:patience=1")
    assert code == 0, err
    rows = _check_columns(out, 10)
    assert rows[2].split("  ")[1].strip() == "ngram:d=8:m=12 [backoff:patience=1]"
    assert rows[1].split("  ")[1].strip() == "ngram:d=8:m=12 [fixed replay]"
    assert rows[0].startswith("123456.25  off ") and rows[5].startswith("   64.125  off ")


def test_default_widths_are_unchanged(device_file, capsys):
    """Short labels and budgets: the columns keep their former widths (a minimum)."""
    code, out, err = whatif(capsys, DEMO, "--device", device_file, *OFF_ARGS)
    rows = _check_columns(out, 4)
    head = out.splitlines()[3]
    assert head == (" budget  config            accept  cover pos/dec tok/dec  MiB/tok   hit%   "
                    "    eff_tok/s [band]            delta% [band]  verdict      break-even")
    assert rows[1].startswith("     64  ngram:d=3:m=3      50.0*  40.0*    2.20")


# 5. START:STOP:STEP ------------------------------------------------------------------------------

def test_cache_mb_range_is_the_list_it_expands_to(device_file, capsys):
    spec = ["--spec", "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.4", *EXACT]
    code, ranged, err = whatif(capsys, DEMO, "--device", device_file, "--cache-mb", "64:256:64,32",
                               *spec, "--json")
    assert code == 0, err
    code, listed, err = whatif(capsys, DEMO, "--device", device_file, "--cache-mb",
                               "64,128,192,256,32", *spec, "--json")
    assert code == 0, err
    assert json.loads(ranged) == json.loads(listed)
    assert [r["budget_mib"] for r in json.loads(ranged)["rows"]][0::2] == [64, 128, 192, 256, 32]


@pytest.mark.parametrize("text", ["256:64:64", "64:256:0", "64:256", "64:256:x", "0:64:8",
                                  "1:1000000000:1", "abc", "auto,64", "-5,100", "1e400"])
def test_cache_mb_errors_are_sweeps(device_file, capsys, tmp_path, text):
    """The same message as ``refsim sweep --cache-mb`` for the same text, exit 2, before any
    input is read (the trace and the device do not exist)."""
    code, out, err = whatif(capsys, str(tmp_path / "t.csv"), "--device", str(tmp_path / "d.json"),
                            "--spec", "off", "--cache-mb", text)
    assert code == 2 and out == ""
    try:
        sweep = main(["sweep", str(tmp_path / "t.csv"), "--cache-mb", text])
    except SystemExit as exc:
        sweep = exc.code
    sweep_err = capsys.readouterr().err.splitlines()[-1]
    assert sweep == 2 and sweep_err.startswith("refsim sweep: error: argument --cache-mb: expected")
    assert err.splitlines()[-1] == sweep_err.replace("refsim sweep:", "refsim whatif:")


@pytest.mark.parametrize("cmd", [["whatif", "t.csv", "--device", "d.json", "--spec", "off"],
                                 ["sweep", "t.csv"],
                                 ["timing", "breakeven", "t.csv", "--device", "d.json"]])
@pytest.mark.parametrize("text", ["1_0", "\u0663", "64:1_28:64", "8,1_6"])
def test_budget_lists_take_only_ascii_numbers(tmp_path, monkeypatch, capsys, cmd, text):
    """The shared parser read items with float(), which takes ``1_0`` and non-ASCII digits that
    every single ``--cache-mb`` refuses (docs/cli.md "Numbers"): whatif would have begun to
    accept them with it, and sweep and breakeven did."""
    monkeypatch.chdir(tmp_path)
    try:
        code = main(cmd + ["--cache-mb", text])
    except SystemExit as exc:
        code = exc.code
    last = capsys.readouterr().err.splitlines()[-1]
    bad = next(i for i in text.split(",") if i not in ("8",))
    name = " ".join(cmd[:2]) if cmd[0] == "timing" else cmd[0]
    assert code == 2
    assert last.startswith(f"refsim {name}: error: argument --cache-mb: expected N[,N,...] or "
                           f"START:STOP:STEP, each ")
    assert last.endswith(f", got {bad!r}")


# second new-user pass ---------------------------------------------------------------------------

def test_position_cost_outside_the_default_interval_names_the_flag_given(device_file, capsys):
    """--position-cost 5 alone blamed --position-cost-interval 0,1.2, a flag never typed (50 is now
    argparse's: the flag's bound is 0..10, a device file's eps bound)."""
    code, out, err = whatif(capsys, DEMO, "--device", device_file, "--device-model", "m",
                            "--cache-mb", "256", "--spec", "off", "--position-cost", "5")
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        "refsim whatif: error: --position-cost 5: outside the default interval 0..1.2 (what the "
        "shared prefills allow); give --position-cost-interval LO,HI holding it")
    code, _, _ = whatif(capsys, DEMO, "--device", device_file, "--device-model", "m",
                        "--cache-mb", "256", "--spec", "off", "--position-cost", "5",
                        "--position-cost-interval", "0,6")
    assert code == 0


def test_minus_zero_acceptance_is_zero(device_file, capsys):
    """acceptance=-0 printed -0.0*: the number is 0 (IEEE -0.0 made +0.0)."""
    from refsim.timing.verdict import parse_spec_list
    c = parse_spec_list("ngram:d=3:m=3:acceptance=-0:coverage=-0.0")[1]      # after off
    assert str(c.acceptance) == "0.0" and str(c.coverage) == "0.0"
    code, out, err = whatif(capsys, DEMO, "--device", device_file, "--device-model", "m",
                            "--cache-mb", "256", "--spec", "off,ngram:d=3:m=3:acceptance=-0:coverage=0.5")
    assert code == 0, err
    assert "-0.0" not in out and "  0.0*" in out


@pytest.mark.parametrize("extra, line", [
    (["--head-ms", "5"], "refsim whatif: warning: --head-ms 5: no mtp: item in --spec; unused"),
    (["--tokens", "TOKENS", "--prompt-len", "4"],
     "refsim whatif: warning: --tokens TOKENS: no ngram: item in --spec leaves acceptance and "
     "coverage to it; unused"),
])
def test_an_unused_flag_is_a_warning(device_file, capsys, tmp_path, extra, line):
    toks = tmp_path / "t.txt"
    toks.write_text("1 2 3 4 1 2 3 4 1 2 3 4\n")
    extra = [str(toks) if a == "TOKENS" else a for a in extra]
    args = [DEMO, "--device", device_file, "--device-model", "m", "--cache-mb", "256", "--spec",
            "off,ngram:d=3:m=3:acceptance=0.5:coverage=0.5", "--json"]
    code, out, err = whatif(capsys, *args, *extra)
    assert code == 0 and err == line.replace("TOKENS", str(toks)) + "\n"
    assert json.loads(out)["rows"] == json.loads(whatif(capsys, *args)[1])["rows"]
    # used: no warning
    code, _, err = whatif(capsys, DEMO, "--device", device_file, "--device-model", "m",
                          "--cache-mb", "256", "--spec", "off,ngram:d=3:m=3", "--tokens",
                          str(toks), "--prompt-len", "4")
    assert code == 0 and err == ""


def test_an_auto_budget_prints_to_a_tenth_of_a_mib():
    """The ledger's auto budget (5320.658203125 MiB) printed whole pushed the table out of line;
    it prints as refsim memory does, the exact figure in --json's budget_mib."""
    from refsim.cli.whatif import _budget
    assert _budget(5320.658203125, auto=True) == "5320.7"
    assert _budget(5320.658203125) == "5320.658203125"       # a flag's budget: its own text
    assert _budget(4000.0, auto=True) == "4000.0" and _budget(4000.0) == "4000"
