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
from refsim.timing import DeviceModel, Param
from refsim.timing.verdict import SpecConfig
from tests.cli.test_whatif_fixes import DEMO, EXACT, VALUES, whatif

EOG_PROMPT = "31"
"""A prompt on which the built-in model emits its end-of-generation token (2) after 10 tokens,
whatever the cache and the n-gram draft (greedy decoding is lossless): found by running it."""


@pytest.fixture(scope="module")
def device_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("dev") / "dev.json"
    path.write_text(DeviceModel(params={k: Param(v) for k, v in VALUES.items()},
                                compute={"m": Param(100.0)}, serial_runs=2,
                                overlap_runs=2).to_json())
    return str(path)


def _run_json(capsys, *args):
    assert main(["run", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


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
