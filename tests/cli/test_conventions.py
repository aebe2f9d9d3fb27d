"""The CLI's one convention for bad flag values (docs/cli.md "Conventions"; issue 12 D1).

Every command x every numeric flag x the same bad values: each is a usage error, exit 2, whose
last stderr line is ``refsim CMD: error: argument FLAG: expected RANGE, got 'VALUE'``, with one
RANGE text per flag meaning (the same ``--draft`` text in run, memory and ngram). Before: ``--draft
0`` was exit 1 in run and 2 in ngram, ``--cache-mb -inf`` an "expected one argument" error while
``-1`` was a ConfigError, and ``--min-match 13`` said 1..12 while ``0`` said 1..64.
"""

import argparse

import pytest

from refsim.cache.expert_cache import CACHE_MB_RANGE
from refsim.cli import COMMANDS, main, make_parser

BAD = ["0", "-1", "nan", "inf", "-inf", "1e400", "99999999999999999999", "abc"]
"""The bad values every flag gets: zero, negative, not-a-number, both infinities, a float that
overflows to inf, an integer past int32 (and past 2^40 MiB), and a word."""

INT1 = "an integer in 1..2147483647"
INT0 = "an integer in 0..2147483647"
DRAFT = "an integer in 1..8"
IDS = "token ids like 1,5,77, each an integer in 0..2147483647"
MIB0 = "a number of MiB from 0 to 2^40 (1 EiB)"

WHATIF = ["whatif", "t.csv", "--device", "d.json", "--spec", "off"]

# (argv before the flag, flag as argparse names it, the option to pass, expected text, values
# the flag accepts among BAD)
TABLE = [
    (["run"], "-n/--n-predict", "-n", INT1, ()),
    (["run"], "--cache-mb", "--cache-mb", CACHE_MB_RANGE, ()),
    (["run"], "--ubatch", "--ubatch", INT0, ("0",)),
    (["run"], "--draft", "--draft", DRAFT, ()),
    (["run"], "--ngram-min-match", "--ngram-min-match", "an integer in 1..12", ()),
    (["run"], "--mtp-p-min", "--mtp-p-min", "a probability in [0, 1]", ("0",)),
    (["run"], "--prompt-tokens", "--prompt-tokens", IDS, ("0",)),
    (["replay", "t.csv"], "--cache-mb", "--cache-mb", CACHE_MB_RANGE, ()),
    (["union", "t.csv"], "--cache-mb", "--cache-mb", CACHE_MB_RANGE, ()),
    (["union", "t.csv"], "--window", "--window",
     "N, N,M,... or A..B with A <= B, each an integer in 1..2147483647", ()),
    (["union", "t.csv"], "--draft", "--draft", DRAFT, ()),
    (["union", "t.csv"], "--accept", "--accept", "a number in [0, 1]", ("0",)),
    (["union", "t.csv"], "--coverage", "--coverage", "a number in [0, 1]", ("0",)),
    (["union", "t.csv"], "--seed", "--seed", "an integer in 0..4294967295", ("0",)),
    (["sweep", "t.csv"], "--cache-mb", "--cache-mb", f"N[,N,...] or START:STOP:STEP, each {CACHE_MB_RANGE}", ()),
    (["inspect", "m.gguf"], "-k/--n-expert-used", "-k", INT1, ()),
    (["synth", "--arch", "qwen3moe", "--out", "x.gguf"], "--seed", "--seed", "an integer in 0..4294967295", ("0",)),
    (["ngram", "--corpus", "1,2"], "--draft", "--draft", DRAFT, ()),
    (["ngram", "--corpus", "1,2"], "--min-match", "--min-match", "an integer in 1..12 (at most --max-match)", ()),
    (["ngram", "--corpus", "1,2"], "--max-match", "--max-match", "an integer in 1..64", ()),
    (["ngram"], "--corpus", "--corpus", IDS, ("0",)),
    (["ngram-whatif", "--tokens", "t.txt"], "--prompt-len", "--prompt-len", INT1, ()),
    (["ngram-whatif", "--tokens", "t.txt", "--prompt-len", "1"], "-n/--n-predict", "-n", INT1, ()),
    (["ngram-whatif", "--tokens", "t.txt", "--prompt-len", "1"], "--eog", "--eog", INT0, ("0",)),
    (["ngram-whatif", "--tokens", "t.txt", "--prompt-len", "1"], "--draft", "--draft",
     "N, N,M,... or A..B with A <= B, each an integer in 1..8", ()),
    (["ngram-whatif", "--tokens", "t.txt", "--prompt-len", "1"], "--min-match", "--min-match",
     "N, N,M,... or A..B with A <= B, each an integer in 1..12", ()),
    (["memory", "m.gguf"], "--ctx", "--ctx", INT1, ()),
    (["memory", "m.gguf"], "--draft", "--draft", DRAFT, ()),
    (["memory", "m.gguf"], "--ram-mb", "--ram-mb", "a number of MiB > 0 and at most 2^40 (1 EiB)", ()),
    (["memory", "m.gguf"], "--ubatch", "--ubatch", INT0, ("0",)),
    (["memory", "m.gguf"], "--cache-floor-mb", "--cache-floor-mb", MIB0, ("0",)),
    (["memory", "m.gguf"], "--cache-ceil-mb", "--cache-ceil-mb", MIB0, ("0",)),
    (["analyze", "t.csv", "--view", "cache"], "--turn", "--turn", INT0, ("0",)),
    (["analyze", "t.csv", "--view", "cache"], "--top", "--top", INT1, ()),
    (["analyze", "t.csv", "--view", "cache"], "--max-steps", "--max-steps", INT0, ("0",)),
    (["analyze", "t.csv", "--view", "cache"], "--cache-mb", "--cache-mb", CACHE_MB_RANGE, ()),
    (["bench", "r.csv"], "--trim", "--trim", INT0, ("0",)),
    (["bench", "r.csv"], "--resamples", "--resamples", "an integer in 1..100000", ()),
    (["bench", "r.csv"], "--seed", "--seed", "an integer in 0..4294967295", ("0",)),
    (["timing", "fit", "r.csv", "--out", "d.json"], "--trim", "--trim", INT0, ("0",)),
    (["timing", "fit", "r.csv", "--out", "d.json"], "--boot", "--boot", "an integer in 0..1000", ("0",)),
    (["timing", "fit", "r.csv", "--out", "d.json"], "--seed", "--seed", "an integer in 0..4294967295", ("0",)),
    (["timing", "predict", "d.json", "r.csv"], "--trim", "--trim", INT0, ("0",)),
    (["timing", "validate", "r.csv"], "--trim", "--trim", INT0, ("0",)),
    (["timing", "breakeven", "t.csv", "--device", "d.json"], "--cache-mb", "--cache-mb",
     f"N[,N,...] or START:STOP:STEP, each {CACHE_MB_RANGE}", ()),
    (["timing", "breakeven", "t.csv", "--device", "d.json", "--cache-mb", "8"], "--draft", "--draft",
     "N, N,M,... or A..B with A <= B, each an integer in 1..8", ()),
    (["timing", "breakeven", "t.csv", "--device", "d.json", "--cache-mb", "8"], "--io-threads",
     "--io-threads", INT1, ()),
    (["timing", "breakeven", "t.csv", "--device", "d.json", "--cache-mb", "8"], "--position-cost",
     "--position-cost", "a number from 0 to 10 (a fraction of one position's compute)", ("0", "10")),
    (["timing", "breakeven", "t.csv", "--device", "d.json", "--cache-mb", "8"], "--draft-ms",
     "--draft-ms", "a number of ms from 0 to 1e7", ("0", "10000000")),   # bounded as a device file
    (["replay", "t.csv"], "--drop-cold-experts", "--drop-cold-experts", "a number in [0, 1]", ("0",)),
    (["replay", "t.csv"], "--prefetch", "--prefetch", "an integer in 0..8", ("0",)),
    (["replay", "t.csv"], "--route-ahead", "--route-ahead", "an integer in 0..8", ("0",)),
    (["replay", "t.csv"], "--predict-spec-max", "--predict-spec-max", "an integer in 0..8", ("0",)),
    (["sweep", "t.csv"], "--drop-cold-experts", "--drop-cold-experts", "a number in [0, 1]", ("0",)),
    (["sweep", "t.csv"], "--prefetch", "--prefetch", "an integer in 0..8", ("0",)),
    (["sweep", "t.csv"], "--route-ahead", "--route-ahead", "an integer in 0..8", ("0",)),
    (["union", "t.csv"], "--drop-cold-experts", "--drop-cold-experts", "a number in [0, 1]", ("0",)),
    (["union", "t.csv"], "--prefetch", "--prefetch", "an integer in 0..8", ("0",)),
    (["run"], "--drop-cold-experts", "--drop-cold-experts", "a number in [0, 1]", ("0",)),
    (["run"], "--prefetch", "--prefetch", "an integer in 0..8", ("0",)),
    (["run"], "--route-ahead", "--route-ahead", "an integer in 0..8", ("0",)),
    (["run"], "--predict-spec-max", "--predict-spec-max", "an integer in 0..8", ("0",)),
    (["drop-replay", "t.csv"], "--frac", "--frac", "fractions like 0.5,0.75,1.0, each a number in [0, 1]",
     ("0",)),
    (["drop-replay", "t.csv"], "--n-expert-used", "--n-expert-used",
     "N, N,M,... or A..B with A <= B, each an integer in 1..2147483647", ()),
    (["drop-replay", "t.csv"], "--cache-mb", "--cache-mb", CACHE_MB_RANGE, ()),
    (["replay", "t.csv"], "--io-threads", "--io-threads", INT1, ()),
    (["replay", "t.csv"], "--data-start", "--data-start", INT0, ("0",)),
    (["replay", "t.csv"], "--block-size", "--block-size",
     "an integer in 1..1048576 and a power of two", ()),
    (["replay", "t.csv"], "--o-direct", "--o-direct", "an integer in 0..1", ("0",)),
    (["replay", "t.csv"], "--merge-gap", "--merge-gap", INT0, ("0",)),
    (["layout", "m.gguf", "t.csv"], "--cache-mb", "--cache-mb", CACHE_MB_RANGE, ()),
    (["layout", "m.gguf", "t.csv"], "--fit-fraction", "--fit-fraction", "a number in (0, 1)", ()),
    (["layout", "m.gguf", "t.csv"], "--fit-turns", "--fit-turns",
     "turn numbers like 0,2, each an integer in 0..2147483647", ("0",)),
    (["layout", "m.gguf", "t.csv"], "--eval-turns", "--eval-turns",
     "turn numbers like 0,2, each an integer in 0..2147483647", ("0",)),
    (["layout", "m.gguf", "t.csv"], "--merge-gap", "--merge-gap", INT0, ("0",)),
    (["layout", "m.gguf", "t.csv"], "--data-start", "--data-start", INT0, ("0",)),
    (["layout", "m.gguf", "t.csv"], "--block-size", "--block-size",
     "an integer in 1..1048576 and a power of two", ()),
    (["layout", "m.gguf", "t.csv"], "--io-threads", "--io-threads", INT1, ()),
    (["layout", "m.gguf", "t.csv"], "--position-cost", "--position-cost",
     "a number from 0 to 10 (a fraction of one position's compute)", ("0", "10")),
    (["replay", "t.csv"], "--position-cost", "--position-cost",
     "a number from 0 to 10 (a fraction of one position's compute)", ("0", "10")),
    (["sweep", "t.csv"], "--io-threads", "--io-threads", INT1, ()),
    (["sweep", "t.csv"], "--position-cost", "--position-cost",
     "a number from 0 to 10 (a fraction of one position's compute)", ("0", "10")),
    (["sweep", "t.csv"], "--workers", "--workers", INT1, ()),
    (["union", "t.csv"], "--workers", "--workers", INT1, ()),
    (["run"], "--workers", "--workers", INT1, ()),
    (["union", "t.csv"], "--io-threads", "--io-threads", INT1, ()),
    (["union", "t.csv"], "--position-cost", "--position-cost",
     "a number from 0 to 10 (a fraction of one position's compute)", ("0", "10")),
    (["run"], "--io-threads", "--io-threads", INT1, ()),
    (["run"], "--position-cost", "--position-cost",
     "a number from 0 to 10 (a fraction of one position's compute)", ("0", "10")),
    (["memory", "m.gguf"], "--io-threads", "--io-threads", INT1, ()),
    (["memory", "m.gguf"], "--hit-pct", "--hit-pct", "a percentage in [0, 100]", ("0",)),
    (["memory", "m.gguf"], "--mib-per-token", "--mib-per-token", "a finite number >= 0",
     ("0", "99999999999999999999")),
    (["timing", "breakeven", "t.csv", "--device", "d.json", "--cache-mb", "8"], "--drop-cold-experts",
     "--drop-cold-experts", "a number in [0, 1]", ("0",)),
    (["timing", "breakeven", "t.csv", "--device", "d.json", "--cache-mb", "8"], "--prefetch",
     "--prefetch", "an integer in 0..8", ("0",)),
    (WHATIF, "--cache-mb", "--cache-mb", f"N[,N,...] or START:STOP:STEP, each {CACHE_MB_RANGE}", ()),
    (WHATIF + ["--cache-mb", "8"], "--ram-mb", "--ram-mb", "a number of MiB > 0 and at most 2^40 (1 EiB)", ()),
    (WHATIF + ["--cache-mb", "8"], "--ctx", "--ctx", INT1, ()),
    (WHATIF + ["--cache-mb", "8"], "--prompt-len", "--prompt-len", INT1, ()),
    (WHATIF + ["--cache-mb", "8"], "-n/--n-predict", "-n", INT1, ()),
    (WHATIF + ["--cache-mb", "8"], "--prompt-tokens", "--prompt-tokens", IDS, ("0",)),
    (WHATIF + ["--cache-mb", "8"], "--head-ms", "--head-ms", "a number of ms from 0 to 1e7", ("0", "10000000")),
    (WHATIF + ["--cache-mb", "8"], "--noise-pct", "--noise-pct", "a percentage in [0, 100]", ("0",)),   # D7: bounded
    (WHATIF + ["--cache-mb", "8"], "--drop-cold-experts", "--drop-cold-experts", "a number in [0, 1]", ("0",)),
    (WHATIF + ["--cache-mb", "8"], "--prefetch", "--prefetch", "an integer in 0..8", ("0",)),
    (WHATIF + ["--cache-mb", "8"], "--io-threads", "--io-threads", INT1, ()),
    (WHATIF + ["--cache-mb", "8"], "--position-cost", "--position-cost",
     "a number from 0 to 10 (a fraction of one position's compute)", ("0", "10")),
]


def _cmd(argv):
    """The command a row runs: ``run``, or ``timing breakeven`` for a nested action."""
    return " ".join(argv[:2]) if argv[0] == "timing" else argv[0]

POST_PARSE = {("ngram", "--min-match"), ("sweep", "--cache-mb"),
             ("timing breakeven", "--cache-mb"), ("whatif", "--cache-mb")}
"""Flags read as text and checked once the other flags are known (the bound ``--max-match``
sets; a budget list); the same message, raised as UsageError."""


def _exit_code(argv):
    try:
        return main(argv)
    except SystemExit as exc:         # argparse's own usage errors
        return exc.code


CELLS = [(argv, name, opt, expected, value) for argv, name, opt, expected, ok in TABLE
         for value in BAD if value not in ok]


@pytest.mark.parametrize("argv, name, opt, expected, value", CELLS,
                         ids=[f"{a[0]} {o} {v}" for a, _, o, _, v in CELLS])
def test_every_bad_value_is_a_usage_error_with_the_flags_range(tmp_path, monkeypatch, capsys,
                                                                argv, name, opt, expected, value):
    monkeypatch.chdir(tmp_path)                        # no file is read or written: all before
    assert _exit_code(argv + [opt, value]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert lines[0].startswith(f"usage: refsim {_cmd(argv)} ")
    assert lines[-1] == f"refsim {_cmd(argv)}: error: argument {name}: expected {expected}, got {value!r}"
    assert list(tmp_path.iterdir()) == []


def test_the_table_covers_every_validated_flag():
    # every flag with a type= validator, in every command, is a row of TABLE (a new numeric flag
    # must join the convention), and so are the text flags checked after parsing
    have = {(_cmd(argv), opt) for argv, _, opt, _, _ in TABLE}
    want = set(POST_PARSE)
    commands = set()
    todo = [("", make_parser())]
    while todo:                                   # every parser, nested actions included
        prefix, p = todo.pop()
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                todo += [(f"{prefix} {name}".strip(), c) for name, c in a.choices.items()]
            elif a.option_strings and a.type is not None:
                want.add((prefix, a.option_strings[0]))
                commands.add(prefix.split()[0])
    assert want == have
    # every command with a value flag is in the table (view has none: paths and switches only)
    commands |= {cmd.split()[0] for cmd, _ in POST_PARSE}
    assert commands == {argv[0] for argv, *_ in TABLE}
    assert commands | {"view"} == {c.replace("_", "-") for c in COMMANDS}


def test_one_range_text_per_flag_meaning():
    # a flag spelled the same way takes the same values everywhere it is a single number
    seen = {}
    for argv, name, opt, expected, ok in TABLE:
        if expected.startswith("N") or "(at most" in expected:
            continue          # lists (whatif/union/sweep) and the --max-match-bound form
        seen.setdefault(opt, set()).add(expected)
    assert all(len(texts) == 1 for texts in seen.values()), seen
    assert seen["--cache-mb"] == {CACHE_MB_RANGE} and seen["--draft"] == {DRAFT}


@pytest.mark.parametrize("argv, line", [
    (["run", "--ngram", "--mtp"], "refsim run: error: --ngram with --mtp: two draft sources"),
    (["run", "--draft", "2"], "refsim run: error: --draft without a draft source: add --ngram or --mtp"),
    (["run", "--ngram", "--mtp-p-min", "0.5"], "refsim run: error: --mtp-p-min 0.5: an MTP-only knob"),
    (["run", "--ngram", "--draft", "8", "--ubatch", "4"],
     "refsim run: error: argument --ubatch: expected 0 (= n_batch) or an integer >= --draft + 1 = 9 "
     "(the verify batch), got '4'"),
    (["memory", "m.gguf", "--draft", "2"], "refsim memory: error: --draft without a draft source"),
    (["ngram", "--corpus", "1,2", "--min-match", "5", "--max-match", "2"],
     "refsim ngram: error: argument --min-match: expected an integer in 1..2 (at most --max-match), got '5'"),
    (["sweep", "t.csv", "--policy", "lru,nope"],
     "refsim sweep: error: argument --policy: expected comma-separated names from "),
    (["sweep", "t.csv", "--cache-mb", "1:1000000000:1"],
     "refsim sweep: error: argument --cache-mb: expected at most 10000 budgets in one sweep"),
    # a fresh user's slips: the empty item was skipped, seed -1 ran as seed 1, and a list starting
    # with a negative number was argparse's "expected one argument"
    (["sweep", "t.csv", "--policy", "lru,,arc"],
     "refsim sweep: error: argument --policy: expected comma-separated names from lru,"),
    (["sweep", "t.csv", "--policy", "random:seed=-1"],
     "refsim sweep: error: argument --policy: expected random:seed= an integer >= 0"),
    (["replay", "t.csv", "--cache-mb", "8", "--policy", "random:seed=-1"],
     "refsim replay: error: argument --policy: expected random:seed= an integer >= 0"),
    (["sweep", "t.csv", "--cache-mb", "-5,100"],
     f"refsim sweep: error: argument --cache-mb: expected N[,N,...] or START:STOP:STEP, each "
     f"{CACHE_MB_RANGE}, got '-5'"),
    (["sweep", "t.csv", "--cache-mb", "100,-5:10:1"],
     f"refsim sweep: error: argument --cache-mb: expected N[,N,...] or START:STOP:STEP, each "
     f"{CACHE_MB_RANGE}, got '-5:10:1'"),
])
def test_flag_combinations_are_usage_errors_too(tmp_path, monkeypatch, capsys, argv, line):
    # decided by the command line alone, so exit 2 before any file is opened (t.csv, m.gguf
    # do not exist)
    monkeypatch.chdir(tmp_path)
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"usage: refsim {_cmd(argv)} ") and err[-1].startswith(line), err


def test_what_an_input_refuses_is_exit_1(tmp_path, capsys):
    # a well-formed command line that the file refuses: one line, exit 1
    from refsim.model import write_synthetic
    path = str(write_synthetic(tmp_path / "m.gguf", "qwen3moe", "F32", seed=1))
    assert main(["inspect", path, "-k", "999"]) == 1
    assert main(["memory", path, "--ctx", "2147483647"]) == 1
    assert main(["replay", str(tmp_path / "missing.csv"), "--cache-mb", "8"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(" error: " in e and not e.startswith("usage") for e in err), err


def test_the_documented_ranges_are_the_validators():
    # docs/cli.md "Conventions" (generated from tools/make_cli_doc.py) states each range text
    import importlib.util
    from pathlib import Path
    tool = Path(__file__).resolve().parents[2] / "tools" / "make_cli_doc.py"
    spec = importlib.util.spec_from_file_location("make_cli_doc", tool)
    doc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(doc)
    for _, _, _, expected, _ in TABLE:
        if not expected.startswith("N") and "(at most" not in expected:
            assert expected in doc.CONVENTIONS, expected
    assert doc.CONVENTIONS in doc.render()


def test_the_ms_flags_share_the_device_files_bound():
    from refsim.timing.model import MAX_ABS_PARAM
    from refsim.validators import MAX_MS, milliseconds
    assert MAX_MS == MAX_ABS_PARAM == 1e7
    assert milliseconds("1e7") == 1e7 and milliseconds("0") == 0.0
    for bad in ("1.0000001e7", "1e300", "-1", "nan", "inf"):
        with pytest.raises(argparse.ArgumentTypeError, match="a number of ms from 0 to 1e7"):
            milliseconds(bad)
