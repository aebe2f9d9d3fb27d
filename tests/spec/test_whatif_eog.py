"""``ngram-whatif`` replays a live run that stopped at an end-of-generation token (issue 12 D5).

The live loop (refsim.spec.loop) drafts with ``room = n_predict - n_gen - 1`` and stops when its
fed token is EOG, or when an accepted draft is EOG (counted in ``accepted``, not emitted). A
replay that took the stream's length as ``n_predict`` drafted less near the end and disagreed
(issue 12: 23.1 % against the live 15.8 % on the same Gemma tokens); with the run's ``-n`` and
its end token it is the live loop.
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from refsim.cli import main
from refsim.errors import ConfigError
from refsim.spec import NgramDraft, run_generation
from refsim.spec.whatif import ngram_whatif, whatif_cell
from refsim.telemetry import RunStats
from refsim.testing import DocumentScript, ScriptedTarget
from refsim.testing.strategies import scripted_targets


def _counters(c):
    return c.tokens, c.decodes, c.drafted, c.accepted, c.drafted_steps


def _live(doc, n_prompt, n_predict, draft, min_match):
    t = ScriptedTarget(DocumentScript(tuple(doc), eos=0), eos_ids=(0,))
    r = run_generation(t, NgramDraft(min_match=min_match), doc[:n_prompt], n_predict, draft_max=draft)
    s = RunStats.from_run(r)
    return r, (s.tokens, s.decodes, s.drafted, s.accepted, s.drafted_steps)


def test_hand_worked_stop_at_the_end_token():
    # document 1 2 3 1 2 3, then the target predicts EOG 0. Prompt 1 2 3 1 2: the prefill
    # predicts 3. Step 1: tok 3, corpus 1 2 3 1 2 3, the suffix 1 2 3 recurs at 0 -> draft its
    # continuation 1 2 3 (room 8 - 0 - 1 = 7 >= 3); the target says 0 after the 3: n_acc 0,
    # emit 3. Next tok is 0 = EOG: stop. 1 token, 1 decode, 3 drafted, 0 accepted, 1 drafted step.
    r, live = _live([1, 2, 3, 1, 2, 3], 5, 8, 3, 2)
    assert r.tokens.tolist() == [3] and r.stop_reason == "eog" and r.eog_token == 0
    assert live == (1, 1, 3, 0, 1)
    assert _counters(whatif_cell([1, 2, 3, 1, 2, 3], 5, 3, 2, n_predict=8, eog=0)) == live
    # the stream's own length as -n (the old replay): room 0, nothing drafted, 0/0 accepted
    assert _counters(whatif_cell([1, 2, 3, 1, 2, 3], 5, 3, 2)) == (1, 1, 0, 0, 0)


def test_hand_worked_accepted_end_token():
    # document 4 5 0 4 5 (EOG 0 inside the prompt 4 5 0 4). The prefill predicts 5. Step 1:
    # tok 5, corpus 4 5 0 4 5: suffix 4 5 recurs at 0 -> draft 0 4 5; the target predicts 0
    # (past the document): d1 = 0 is accepted and is EOG: n_acc 1, nothing emitted after tok,
    # the generation ends. 1 token, 1 decode, 3 drafted, 1 accepted.
    r, live = _live([4, 5, 0, 4, 5], 4, 8, 3, 2)
    assert r.tokens.tolist() == [5] and r.eog and r.eog_token == 0
    assert live == (1, 1, 3, 1, 1)
    assert _counters(whatif_cell([4, 5, 0, 4, 5], 4, 3, 2, n_predict=8, eog=0)) == live


@given(target=scripted_targets(eos=True),
       prompt=st.lists(st.integers(0, 7), min_size=1, max_size=20),   # EOG 0 may be in the prompt
       n_predict=st.integers(1, 40), draft=st.integers(1, 8), min_match=st.integers(1, 6),
       model_rule=st.booleans())
def test_whatif_over_the_live_tokens_is_the_live_loop(target, prompt, n_predict, draft, min_match,
                                                      model_rule):
    r = run_generation(target.fresh(), NgramDraft(min_match=min_match), prompt, n_predict,
                       draft_max=draft)
    if r.n_gen == 0:       # the prefill predicted EOG: no stream to replay
        return
    s = RunStats.from_run(r)
    stream = np.concatenate([prompt, r.tokens])
    # the run's end token (refsim run --json: eog_token), or the model's id whatever the stop
    # (ngram-whatif --model): the same counters either way
    eog = 0 if (r.eog or model_rule) else None
    c = whatif_cell(stream, len(prompt), draft, min_match, n_predict=n_predict, eog=eog)
    assert _counters(c) == (s.tokens, s.decodes, s.drafted, s.accepted, s.drafted_steps)
    assert c.acceptance_pct == s.acceptance_pct and c.coverage_pct == s.coverage_pct


@given(target=scripted_targets(eos=False), prompt=st.lists(st.integers(1, 7), min_size=1, max_size=20),
       n_predict=st.integers(1, 40), draft=st.integers(1, 8), min_match=st.integers(1, 6))
def test_without_eog_the_default_stop_is_the_live_loop(target, prompt, n_predict, draft, min_match):
    r = run_generation(target.fresh(), NgramDraft(min_match=min_match), prompt, n_predict,
                       draft_max=draft)
    s = RunStats.from_run(r)
    assert r.stop_reason == "n_predict" and r.eog_token == -1 and r.n_gen == n_predict
    c = whatif_cell(np.concatenate([prompt, r.tokens]), len(prompt), draft, min_match)
    assert _counters(c) == (s.tokens, s.decodes, s.drafted, s.accepted, s.drafted_steps)


@pytest.mark.parametrize("kw, msg", [
    (dict(n_predict=3), "-n 3: the stream has 4 generated tokens, more than -n"),
    (dict(n_predict=9), "fewer than -n; a run stops early only at an end-of-generation token: give --eog"),
    (dict(n_predict=9, eog=2), "--eog 2: generated token 1 .stream index 5. is that end-of-generation token"),
])
def test_stop_rule_that_cannot_be_the_run_is_refused(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        ngram_whatif([1, 2, 3, 4, 1, 2, 3, 4], 4, [1], [1], **kw)


def test_cli_eog_and_model(tmp_path, capsys):
    toks = tmp_path / "t.txt"
    toks.write_text("1 2 3 1 2 3\n")
    assert main(["ngram-whatif", "--tokens", str(toks), "--prompt-len", "5", "--draft", "3",
                 "--min-match", "2", "-n", "8", "--eog", "0", "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "3,2,1,1,3,0,1,0.0,100.0,1.00"
    # the synthetic model's eos_token_id is 2 (refsim.model.synth): the same rule from --model
    from refsim.model import write_synthetic
    model = write_synthetic(tmp_path / "m.gguf", "qwen3moe", "F32", seed=1)
    toks.write_text("1 5 3 1 5 3\n")
    assert main(["ngram-whatif", "--tokens", str(toks), "--prompt-len", "5", "--draft", "3",
                 "--min-match", "2", "-n", "8", "--model", str(model)]) == 0
    out = capsys.readouterr().out
    assert "generated 1 (stopped at end-of-generation token 2 before -n 8)" in out
    assert main(["ngram-whatif", "--tokens", str(toks), "--prompt-len", "5", "-n", "8"]) == 1
    assert "give --eog ID" in capsys.readouterr().err


def test_run_json_stop_fields_feed_ngram_whatif(tmp_path, monkeypatch, capsys):
    # end to end on the built-in model: this prompt stops at its EOG 2 after 130 of -n 200 tokens;
    # ngram-whatif with the run's -n and eog_token prints the live counters (without them it
    # counted 94 drafts for the live 98: 31.9 % against the live 30.6 %)
    import json
    monkeypatch.setenv("REFSIM_CACHE", str(tmp_path))
    argv = ["run", "--prompt", "hello hello hello hello", "-n", "200", "--ngram", "--draft", "3",
            "--ngram-min-match", "1", "--json"]
    assert main(argv) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["stop"], r["eog_token"], r["n_predict"], len(r["tokens"])) == ("eog", 2, 200, 130)
    toks = tmp_path / "stream.txt"
    toks.write_text(" ".join(map(str, r["prompt_tokens"] + r["tokens"])))
    base = ["ngram-whatif", "--tokens", str(toks), "--prompt-len", str(len(r["prompt_tokens"])),
            "--draft", "3", "--min-match", "1", "--csv"]
    assert main(base + ["-n", str(r["n_predict"]), "--eog", str(r["eog_token"])]) == 0
    row = capsys.readouterr().out.splitlines()[1].split(",")
    assert [int(x) for x in row[2:6]] == [130, r["decodes"], r["drafted"], r["accepted"]] == [130, 100, 98, 30]
    assert main(base) == 0            # read as a run that stopped at -n 130: not this run
    row = capsys.readouterr().out.splitlines()[1].split(",")
    assert [int(x) for x in row[2:6]] == [130, 100, 94, 30]
