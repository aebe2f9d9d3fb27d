"""``refsim ngram``, ``refsim ngram-whatif`` and the speculation flags (add_spec_args)."""

import argparse

import pytest

from refsim.cli import main
from refsim.cli.common import add_spec_args
from refsim.errors import ConfigError
from refsim.spec import NgramDraft, SpecConfig, run_generation
from refsim.spec.whatif import ngram_whatif, read_token_file, whatif_cell
from refsim.telemetry import RunStats
from refsim.testing import DocumentScript, ScriptedTarget, copy_heavy_document


def test_ngram_prints_the_draft(capsys):
    assert main(["ngram", "--corpus", "1,2,3,4,5,6,0,1,2,3", "--draft", "2"]) == 0
    assert capsys.readouterr().out == "4,5\n"


def test_ngram_prints_an_empty_line_when_nothing_is_drafted(capsys):
    assert main(["ngram", "--corpus", "1,2,3,9,9,2,3"]) == 0
    assert capsys.readouterr().out == "\n"


def test_ngram_rules(capsys):
    c = "7,1,2,3,40,8,1,2,3,50,9,1,2,3"
    main(["ngram", "--corpus", c, "--draft", "1"])
    main(["ngram", "--corpus", c, "--draft", "1", "--rule", "earliest"])
    main(["ngram", "--corpus", c, "--draft", "1", "--rule", "llama-simple", "--min-match", "3"])
    assert capsys.readouterr().out == "50\n40\n\n"


def test_ngram_max_match(capsys):
    main(["ngram", "--corpus", "7,7,1,2,3,40,0,0,1,2,3,50,7,7,1,2,3", "--draft", "1",
          "--max-match", "3"])
    assert capsys.readouterr().out == "50\n"


@pytest.mark.parametrize("argv,msg", [
    (["--corpus", "1,x"], "expected token ids like 1,5,77"),
    (["--corpus", "1,2", "--draft", "-1"], "--draft: expected an integer in 1..8, got '-1'"),
    (["--corpus", "1,2", "--draft", "0"], "--draft: expected an integer in 1..8, got '0'"),
    (["--corpus", "1,2", "--draft", "99"], "--draft: expected an integer in 1..8, got '99'"),
    (["--corpus", "1,2", "--max-match", "65"], "expected an integer in 1..64"),
    (["--corpus", "1,2", "--rule", "vllm"], "invalid choice"),
])
def test_ngram_bad_flags(argv, msg, capsys):
    with pytest.raises(SystemExit) as e:
        main(["ngram"] + argv)
    assert e.value.code == 2
    assert msg in capsys.readouterr().err


@pytest.mark.parametrize("argv, msg", [
    (["--min-match", "5", "--max-match", "2"],
     "argument --min-match: expected an integer in 1..2 (at most --max-match), got '5'"),
    (["--min-match", "13"], "argument --min-match: expected an integer in 1..12 (at most --max-match), got '13'"),
    (["--min-match", "0"], "argument --min-match: expected an integer in 1..12 (at most --max-match), got '0'"),
])
def test_ngram_min_match_above_max_match_is_refused(argv, msg, capsys):
    # the engine's rule (SpecConfig): 1 <= min-match <= max-match; it used to print an empty
    # draft, and 0 and 13 used to name different ranges
    assert main(["ngram", "--corpus", "1,2,3,1,2,3"] + argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines()[-1] == f"refsim ngram: error: {msg}"


# --- what-if ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [1, 4])
def test_whatif_equals_the_live_loop(seed):
    doc = copy_heavy_document(160, n_vocab=30, seed=seed)
    P = 25
    cells = ngram_whatif(doc, P, range(1, 9), range(1, 9))
    assert len(cells) == 64
    for c in cells:
        target = ScriptedTarget(DocumentScript(doc, eos=0), eos_ids=(0,))
        r = run_generation(target, NgramDraft(min_match=c.min_match), doc[:P],
                           len(doc) - P, draft_max=c.draft)
        s = RunStats.from_run(r)
        assert r.tokens.tolist() == list(doc[P:])
        assert (c.tokens, c.decodes, c.drafted, c.accepted, c.drafted_steps) == \
            (s.tokens, s.decodes, s.drafted, s.accepted, s.drafted_steps), (c.draft, c.min_match)
        assert c.acceptance_pct == s.acceptance_pct and c.coverage_pct == s.coverage_pct
        assert c.tokens_per_decode == s.tokens_per_decode


def test_whatif_hand_worked():
    # stream 1 2 3 4 1 2 3 4 1 2, P = 6 (prompt 1 2 3 4 1 2), generated 3 4 1 2 (4 tokens)
    # draft 3, min 2: step 1 tok 3, corpus 1 2 3 4 1 2 3 -> j=2 len 3, room 3 -> draft 4 1 2,
    # truth 4 1 2 -> n_acc 3; 4 tokens in 1 decode.
    c = whatif_cell([1, 2, 3, 4, 1, 2, 3, 4, 1, 2], 6, 3, 2)
    assert (c.tokens, c.decodes, c.drafted, c.accepted, c.drafted_steps) == (4, 1, 3, 3, 1)
    # draft 1: steps draft 1 each time (room > 0 for the first 3), all accepted: 4 tokens,
    # decodes 2 (1+1 accepted, twice)
    c = whatif_cell([1, 2, 3, 4, 1, 2, 3, 4, 1, 2], 6, 1, 2)
    assert (c.tokens, c.decodes, c.drafted, c.accepted, c.drafted_steps) == (4, 2, 2, 2, 2)


def test_whatif_cli(tmp_path, capsys):
    path = tmp_path / "toks.txt"
    path.write_text("1 2 3 4 1 2\n3,4,1,2\n")
    assert main(["ngram-whatif", "--tokens", str(path), "--prompt-len", "6", "--draft", "1,3",
                 "--min-match", "2", "--csv"]) == 0
    assert capsys.readouterr().out == (
        "draft,min_match,tokens,decodes,drafted,accepted,drafted_steps,acceptance_pct,"
        "coverage_pct,tokens_per_decode\n"
        "1,2,4,2,2,2,2,100.0,100.0,2.00\n"
        "3,2,4,1,3,3,1,100.0,100.0,4.00\n")


def test_whatif_bad_input(tmp_path, capsys):
    path = tmp_path / "toks.txt"
    path.write_text("1 2\n3 x\n")
    with pytest.raises(ConfigError, match=r"toks.txt:2: 'x' is not a token id"):
        read_token_file(path)
    assert main(["ngram-whatif", "--tokens", str(path), "--prompt-len", "1"]) == 1
    assert "toks.txt:2" in capsys.readouterr().err
    path.write_text("1 2 3\n")
    with pytest.raises(ConfigError, match=r"--prompt-len: expected 1\.\.2"):
        ngram_whatif(read_token_file(path), 3, [1], [1])
    with pytest.raises(ConfigError, match=r"--draft: expected values in 1\.\.8, got '9'"):
        ngram_whatif([1, 2, 3], 1, [9], [1])


@pytest.mark.parametrize("content, msg", [
    (b"1 2 99999999999999999999999\n", "toks.txt:1: '99999999999999999999999' is not a token id "
                                       "(expected an integer 0..2147483647)"),
    (b"1 2\n3 2147483648\n", "toks.txt:2: '2147483648' is not a token id"),
    ("1 2 \u00b2\n".encode(), "toks.txt:1: '\u00b2' is not a token id"),   # '²'.isdigit() is True
    (b"1 2 \xff 3\n", "toks.txt: not UTF-8 text (byte 0xff at offset 4); expected a text file "
                       "of token ids separated by commas or whitespace"),
    (b" , \n", "toks.txt: no token ids found; expected a text file"),
])
def test_whatif_token_file_errors_name_the_flag_and_file(tmp_path, capsys, content, msg):
    # the 23-digit id used to raise OverflowError (np.asarray to int64), the bad byte a raw
    # "'utf-8' codec can't decode" message
    path = tmp_path / "toks.txt"
    path.write_bytes(content)
    assert main(["ngram-whatif", "--tokens", str(path), "--prompt-len", "1"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("refsim ngram-whatif: error: --tokens ") and msg in err
    assert err.count("\n") == 1


def test_whatif_missing_token_file(tmp_path, capsys):
    missing = tmp_path / "nope.txt"
    assert main(["ngram-whatif", "--tokens", str(missing), "--prompt-len", "1"]) == 1
    assert capsys.readouterr().err == (
        f"refsim ngram-whatif: error: --tokens {missing}: no such file; expected a text file of "
        f"token ids separated by commas or whitespace\n")
    assert main(["ngram-whatif", "--tokens", str(tmp_path), "--prompt-len", "1"]) == 1
    assert f"--tokens {tmp_path}: is a folder" in capsys.readouterr().err


def test_whatif_huge_range_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "toks.txt"
    path.write_text("1 2 3\n")
    with pytest.raises(SystemExit) as exc:
        main(["ngram-whatif", "--tokens", str(path), "--prompt-len", "1",
              "--draft", "1..100000000000"])
    assert exc.value.code == 2
    assert "--draft: expected N, N,M,... or A..B with A <= B, each an integer in 1..8" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:          # within the bounds, too long a list
        main(["union", str(path), "--window", "1..2000000"])
    assert exc.value.code == 2
    assert "--window: expected at most 10000 values" in capsys.readouterr().err


# --- spec flags ---------------------------------------------------------------------------

def _parse(argv):
    p = argparse.ArgumentParser()
    add_spec_args(p)
    return SpecConfig.from_args(p.parse_args(argv))


def test_spec_flags():
    c = _parse(["--ngram", "--draft", "5", "--ngram-min-match", "4"])
    assert (c.spec, c.draft_max, c.ngram_min_match) == ("ngram", 5, 4)
    assert _parse([]).spec == "off"
    with pytest.raises(ConfigError, match="two draft sources"):
        _parse(["--ngram", "--mtp"])
    with pytest.raises(SystemExit):
        _parse(["--ngram", "--draft", "0"])            # the parser's validator: exit 2
    with pytest.raises(SystemExit):
        _parse(["--ngram", "--ngram-min-match", "13"])
    with pytest.raises(ConfigError, match=r"argument --draft: expected an integer in 1\.\.8, got '0'"):
        SpecConfig.from_flags(ngram=True, draft=0)      # the library's own check, the same text
    with pytest.raises(ConfigError, match="MTP-only"):
        _parse(["--ngram", "--mtp-p-min", "0.2"])
    for knob in (["--draft", "3"], ["--ngram-min-match", "5"], ["--mtp-p-min", "0.1"]):
        with pytest.raises(ConfigError, match=rf"{knob[0]} without a draft source: add --ngram or --mtp"):
            _parse(knob)                   # would decode without speculating, silently
    c = _parse(["--mtp"])
    assert (c.spec, c.draft_max, c.ngram_min_match, c.mtp_p_min) == ("mtp", 3, 3, 0.0)
