"""``refsim run``: the built-in model, its counters, a route trace that replays to them, errors."""

import json

import pytest

from refsim.cli import main


@pytest.fixture(scope="module")
def builtin_cache(tmp_path_factory, monkeypatch_module):
    d = tmp_path_factory.mktemp("refsim-cache")
    monkeypatch_module.setenv("REFSIM_CACHE", str(d))
    return d


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_run_default_text_output_and_builtin_file(builtin_cache, capsys):
    assert main(["run", "-n", "6"]) == 0
    out = capsys.readouterr().out
    assert "(built-in)" in out and "generated 6" in out
    assert "moe-cache:" in out and "MiB/token" in out and "tok/s" in out and "logit margin" in out
    assert (builtin_cache / "builtin-qwen3moe-v1.gguf").exists()
    assert not [p for p in builtin_cache.iterdir() if p.name.startswith(".refsim-")]  # no temp left


def test_run_json_and_trace_replays_to_the_same_counters(builtin_cache, capsys, tmp_path):
    trace = tmp_path / "run.trace"
    csv = tmp_path / "run.csv"
    run = _json(capsys, ["run", "-n", "10", "--cache-mb", "2", "--json", "--route-trace", str(trace),
                         "--csv", str(csv)])
    for key in ("prompt_tokens", "tokens", "decodes", "hit_pct_cum", "mib_per_token", "sim_tok_per_s", "min_margin"):
        assert key in run
    assert len(run["tokens"]) == 10 and run["decodes"] == 10 and run["prompt_tokens"][0] == 1
    # the synthetic vocabulary: <unk> <s> </s>, 256 byte tokens <0xNN> (id 3 + byte), then
    # pieces '▁a'..'▁z', '▁ab', ...: "Hello" has no piece, so it falls back to its bytes, and
    # " world" starts with the piece '▁w' (id 259 + 22); the ids decode back to the text
    from refsim.model import open_model
    from refsim.model.tokenizer import Tokenizer
    ids = run["prompt_tokens"]
    assert ids[:7] == [1] + [3 + b for b in b"Hello"] + [259 + 22]
    tok = Tokenizer.from_model(open_model(builtin_cache / "builtin-qwen3moe-v1.gguf"))
    assert tok.decode(ids[1:]) == "Hello world, this is a streaming test."
    assert len(ids) < 1 + len("Hello world, this is a streaming test.")  # pieces merged
    assert trace.read_text().splitlines()[1].endswith(" cache_mb=2")   # the recording budget
    rep = _json(capsys, ["replay", str(trace), "--cache-mb", "2", "--json"])
    assert rep["hit_pct_cum"] == run["hit_pct_cum"]
    assert rep["hit_pct_decode"] == run["hit_pct_decode"]
    assert rep["read_mib"] == run["read_mib"]
    assert rep["mib_per_token"] == run["mib_per_token"]
    assert rep["residency_rows"] > 0 and rep["residency_agree"] == rep["residency_rows"]
    # run --json carries every cache counter under "cache", equal to the replay's, key for key
    assert {k: rep[k] for k in run["cache"]} == run["cache"]
    assert run["cache"]["lookups"] == run["cache"]["prefill_lookups"] + run["cache"]["decode_lookups"]
    assert csv.read_text().startswith("# bmoe_metrics")
    # the last-layer rule as the engine's traces show it: the prefill routes the last layer only
    # for the last prompt position; every decode routes every layer
    from refsim.events import NOT_ROUTED, DecodeKind
    from refsim.trace import read_trace
    events = read_trace(trace).events
    pre = events[0]
    assert pre.kind is DecodeKind.PREFILL and pre.n_pos == len(run["prompt_tokens"])
    assert (pre.routes[:-1, -1] == NOT_ROUTED).all() and (pre.routes[-1, -1] >= 0).all()
    assert (pre.routes[:, :-1] >= 0).all()
    assert all((e.routes >= 0).all() for e in events[1:])


def test_run_ngram_generates_the_plain_greedy_tokens(builtin_cache, capsys):
    # batch invariance makes speculative greedy decoding reproduce plain greedy exactly
    argv = ["run", "-n", "12", "--json", "--prompt-tokens", "1,70,71,72,70,71,72,70,71"]
    plain = _json(capsys, argv)
    spec = _json(capsys, argv + ["--ngram", "--draft", "3", "--ngram-min-match", "1"])
    assert spec["tokens"] == plain["tokens"] and spec["spec"] == "ngram"
    assert spec["decodes"] <= plain["decodes"]


def test_run_ggml_numerics(builtin_cache, capsys):
    exact = _json(capsys, ["run", "-n", "4", "--json", "--prompt", "abc"])
    ggml = _json(capsys, ["run", "-n", "4", "--json", "--prompt", "abc", "--numerics", "ggml"])
    assert ggml["numerics"] == "ggml" and len(ggml["tokens"]) == 4
    assert exact["prompt_tokens"] == [1, 100, 101, 102]


def test_run_errors(builtin_cache, capsys, tmp_path):
    assert main(["run", "--prompt-tokens", "1,9999", "-n", "1"]) == 1
    assert "--prompt-tokens: ids must be < n_vocab 512" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.gguf")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["run", "-n", "2", "--cache-mb", "0.5"]) == 0      # below T = 0.84 MiB: a warning
    assert "refsim run: warning: budget 0.5 MiB is below one token cycle T = 0.84 MiB" in capsys.readouterr().err
    assert main(["run", "-n", "1", "--draft", "2"]) == 2     # no source: would not speculate
    assert "--draft without a draft source: add --ngram or --mtp" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["run", "-n", "1", "--ngram", "--draft", "9"])
    assert exc.value.code == 2
    assert "argument --draft: expected an integer in 1..8, got '9'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--prompt", "a", "--prompt-tokens", "1"])
    with pytest.raises(SystemExit):
        main(["run", "--prompt-tokens", "x,y"])


def test_run_metrics_csv_preamble_names_the_model_and_the_flags(builtin_cache, capsys, tmp_path):
    csv = tmp_path / "m.csv"
    assert main(["run", "-n", "4", "--ngram", "--draft", "2", "--ngram-min-match", "2",
                 "--cache-mb", "3", "--csv", str(csv)]) == 0
    capsys.readouterr()
    lines = csv.read_text().splitlines()
    assert lines[0] == "# bmoe_metrics v2"
    assert lines[2].startswith("# model=builtin-qwen3moe-v1.gguf arch=qwen3moe n_layer=4 n_expert=64 "
                               "n_expert_used=4 ")
    assert " cache_mb=3 " in lines[3]
    assert lines[4].endswith("spec=ngram spec_draft_max=2 mtp_p_min=0 ngram_min_match=2")


@pytest.mark.parametrize("argv, msg", [
    (["--cache-mb", "0"], "argument --cache-mb: expected a number of MiB from 2^-20 (one byte) to 2^40 "
                          "(1 EiB), got '0'"),
    (["--cache-mb", "lots"], "argument --cache-mb: expected a number of MiB from 2^-20 (one byte)"),
    (["--ngram", "--draft", "8", "--ubatch", "4"],
     "argument --ubatch: expected 0 (= n_batch) or an integer >= --draft + 1 = 9 (the verify batch), "
     "got '4'"),
    (["--ngram", "--ubatch", "3"], "argument --ubatch: expected 0 (= n_batch) or an integer >= --draft + 1 = 4"),
])
def test_run_flag_errors_are_usage_errors_like_replay(builtin_cache, capsys, argv, msg):
    # one convention (docs/cli.md "Conventions"): the command line alone is wrong -> exit 2, the
    # usage, then one error line, in run as in replay and sweep (tests/cli/test_conventions.py)
    try:
        code = main(["run", "-n", "1"] + argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: refsim run ")
    assert err.splitlines()[-1].startswith(f"refsim run: error: {msg}")


def test_run_rejects_a_negative_ubatch(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--ubatch", "-1"])
    assert exc.value.code == 2
    assert "--ubatch: expected an integer in 0..2147483647, got '-1'" in capsys.readouterr().err


def test_run_checks_output_paths_before_generating(builtin_cache, capsys, tmp_path, monkeypatch):
    import refsim.spec

    def must_not_run(*a, **kw):
        raise AssertionError("generation ran before the output paths were checked")

    monkeypatch.setattr(refsim.spec, "run_generation", must_not_run)
    ok = tmp_path / "ok.route.csv"
    bad = tmp_path / "missing" / "m.csv"
    assert main(["run", "-n", "2", "--route-trace", str(ok), "--csv", str(bad)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == f"refsim run: error: --csv {bad}: cannot write here: No such file or directory\n"
    assert not ok.exists()
    assert main(["run", "-n", "2", "--route-trace", str(tmp_path)]) == 1
    assert f"--route-trace {tmp_path}: is a folder" in capsys.readouterr().err


def test_run_refuses_to_generate_past_n_ctx_train(builtin_cache, capsys, monkeypatch):
    import refsim.spec

    def must_not_run(*a, **kw):
        raise AssertionError("generation ran past n_ctx_train")

    monkeypatch.setattr(refsim.spec, "run_generation", must_not_run)
    prompt = ",".join(["1"] + ["70"] * 1019)                  # 1020 tokens; n_ctx_train 1024
    assert main(["run", "-n", "50", "--prompt-tokens", prompt]) == 1
    assert capsys.readouterr().err == (
        "refsim run: error: -n 50: the prompt (1020 tokens) + 50 = 1070 tokens exceeds the model's "
        "n_ctx_train 1024 (positions past it are outside what the model was trained on); "
        "use -n <= 4\n")
    assert main(["run", "-n", "1", "--prompt-tokens", ",".join(["70"] * 1024)]) == 1
    assert capsys.readouterr().err.endswith("; shorten the prompt\n")


def test_run_ngram_says_what_its_tokens_per_verify_decode_is(capsys):
    """The engine's line divides by every decode; refsim's next line gives the drafted decodes'
    own figure (telemetry.lines.drafted_decodes_line), from the counters the engine's lines print
    (a drafted step's decode is the one that carried the draft)."""
    import re
    from refsim.cli import main
    assert main(["run", "--ngram", "--ngram-min-match", "1", "-n", "40"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, ln in enumerate(lines) if " tokens per verify decode (" in ln)
    accepted, tokens, decodes = (int(x) for x in re.fullmatch(
        r"ngram: (\d+)/\d+ drafts accepted \(.*\), [\d.]+ tokens per verify decode \((\d+) "
        r"decodes for (\d+) tokens\)", lines[at]).group(1, 3, 2))
    cov = next(ln for ln in lines if ln.startswith("ngram: drafted on "))
    verify = int(re.match(r"ngram: drafted on (\d+) of", cov).group(1))
    assert 0 < verify < decodes                    # some decodes drafted, not all
    assert lines[at + 1] == (
        f"ngram: {tokens / decodes:.2f} above is tokens / all {decodes} decodes (the engine's "
        f"figure); the {verify} decode{'s' if verify != 1 else ''} that carried a draft confirmed "
        f"{(verify + accepted) / verify:.2f} tokens per decode (1 + accepted drafts)")
