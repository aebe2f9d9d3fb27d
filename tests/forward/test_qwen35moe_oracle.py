"""refsim's qwen35moe (trunk, MTP head, MTP draft loop, rollback) against llama.cpp goldens.

Goldens ``tests/data/oracle/qwen35moe-<name>.npz`` were written by
``python tools/oracle_qwen35moe.py --make-goldens tests/data/oracle`` with llama-cpp-python
0.3.36 (F32 KV cache, flash attention off, every row asking for logits; the command is in each
file's ``meta``). Each records its synthetic recipe and a digest of the model's tensors, so the
model is rebuilt here bit for bit.

Bounds (measured on these goldens, worst over the five models):

- trunk logits, batch and one token per decode: 6.1e-6 (F32, ``exact``), <= 7.2e-7 (Q8_0,
  Q4_0, K-quant mix, ``ggml``); asserted <= :data:`TOL` = 2e-5. Routes identical at every
  position and layer, router weights within 1e-5.
- MTP head over the prompt (row 0 with a zero hidden state, as llama.cpp's driver): <= 2.7e-6;
  routes identical.
- MTP loop (3 rounds of 3 greedy drafts, rollback of the rejected tail): identical drafts,
  acceptances and verify batches; draft-step logits and head routes as the head, verify logits
  and routes as the trunk.
- rollback (keep 1..3 of a 4-token batch with ``n_rs_seq = 3``): refsim <= 2.5e-6 from
  llama.cpp's rolled-back logits, which are <= 1.7e-6 from llama.cpp's fresh run; refsim's
  rollback equals its own fresh run bit for bit; a 4-position rollback is refused by both.
- rollback behind the last batch (the 4 tokens as two decodes of 2): llama.cpp accepts the
  ``seq_rm`` but is off by 1.3-4.1 when 2 or 3 positions are removed (stale snapshot slots);
  refsim gives the fresh run (:func:`check_rollback_behind_the_last_batch`).

Activation near-ties are listed. :data:`KNOWN_TIES`: in the mixed model's MTP head (and so its loop),
row 4's Q8_K quantisation meets ``37.499996``, one ulp below a half, which llama.cpp's sums put above
it (``act_tie='up'`` rounds values one ulp from a half as halves). In the Q4_0 rollback with 3 tokens kept, refsim's
Q8_0 activation quantisation meets an exact half (layer 3's FFN input at position 11, block 1,
element 7: ``x * 127 / amax = -85.5``) that llama.cpp's float32 sums put above the half; with
ties rounded up (``Numerics(act_tie='up')``) that case matches to 2.4e-7, and refsim's own
rollback equals its fresh run bit for bit under every tie rule. Rounding to even there gives
5.2e-3. :data:`KNOWN_NEAR_TIES`: a value 2 ulps below a half (the ``Q8_0-tie`` model, kept
for it), which no tie rule reaches. Any new near-tie fails the tests until it is listed.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from refsim.errors import ConfigError
from refsim.events import DecodeKind
from refsim.forward import Numerics
from refsim.forward import qwen35moe as Q
from refsim.model import open_model, write_synthetic
from refsim.spec.config import SpecConfig
from refsim.spec.loop import run_generation
from refsim.spec.mtp import mtp_source_for

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = REPO / "tests" / "data" / "oracle"
_spec = importlib.util.spec_from_file_location("oracle_qwen35moe", REPO / "tools" / "oracle_qwen35moe.py")
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

NAMES = list(oracle.GOLDEN_RECIPES)
TOL = 2e-5
P = len(oracle.PROMPT)
KNOWN_TIES = {("Q4_0", "rollback keep 3"): "up", ("mixed", "mtp head"): "up", ("mixed", "loop"): "up"}
"""(model, check) -> the activation tie rule under which that check matches llama.cpp; every
other check matches with ggml's own rule (round half to even)."""

KNOWN_NEAR_TIES = {("Q8_0-tie", "loop"): {(2, 0)}}
"""(model, check) -> {(round, row)} verify-logit rows that differ from llama.cpp by more than
:data:`TOL` under every tie rule: refsim's activation is a few ulps from a half, not on it (see
:func:`test_the_known_near_tie_is_two_ulps_from_a_half`). Such a row must still have the same
argmax and routes and be within :data:`NEAR_TIE_TOL`."""

NEAR_TIE_TOL = 0.05


def mode_for(name: str) -> str:
    """``exact`` for the F32 model, ``ggml`` (activation quantisation) for quantized ones."""
    return "exact" if name == "F32" else "ggml"


@pytest.fixture(scope="module")
def goldens(golden_models):
    return {name: (model, Q.load_weights(model), g)
            for name, (model, g) in golden_models(oracle, "qwen35moe").items()}


def dmax(a, b) -> float:
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


def numerics(name: str, check: str = "") -> Numerics:
    """The numerics a check runs with: :func:`mode_for` and the tie rule of :data:`KNOWN_TIES`."""
    return Numerics(mode_for(name), KNOWN_TIES.get((name, check), "even"))


def test_golden_files_are_small_and_complete():
    keys = {"tokens", "logits", "routes", "weights", "seq_logits", "h_nextn", "mtp_logits", "mtp_routes", "mtp_h",
            "mtp_skip0_logits", "loop_id_last", "loop_n_past", "loop_drafts", "loop_draft_logits",
            "loop_draft_routes", "loop_verify_logits", "loop_verify_routes", "loop_n_acc", "rb_keep", "rb_ok",
            "rb_logits", "rb_fresh", "rb_fail_ok", "rb_split_ok", "rb_split_logits", "meta", "recipe", "digest"}
    for name in NAMES:
        f = GOLDEN_DIR / f"qwen35moe-{name}.npz"
        assert f.stat().st_size < 200_000
        with np.load(f) as z:
            assert keys <= set(z.files), keys - set(z.files)
            assert z["tokens"].tolist() == oracle.GOLDEN_TOKENS
            meta = json.loads(str(z["meta"]))
            assert (meta["type_kv"], meta["flash_attn"], meta["llama_cpp_python"]) == ("F32", "off", "0.3.36")
            assert meta["command"].startswith("python tools/oracle_qwen35moe.py --make-goldens")
            assert meta["prompt"] == oracle.PROMPT and meta["n_draft"] == oracle.N_DRAFT


# --- trunk -----------------------------------------------------------------------------------
def check_trunk_batch_matches_llama_cpp(name, model, w, g):
    n = len(g["tokens"])
    res = Q.decode(w, Q.new_state(model.spec), g["tokens"], np.arange(n), numerics(name))
    assert res.logits.shape == g["logits"].shape == (n, model.spec.n_vocab)
    assert dmax(res.logits, g["logits"]) <= TOL
    assert res.routes.shape == g["routes"].shape == (n, model.spec.n_layer, model.spec.n_expert_used)
    assert np.array_equal(res.routes, g["routes"]), f"{name}: routes differ from llama.cpp"
    np.testing.assert_allclose(res.weights, g["weights"], atol=1e-5)


def check_trunk_one_token_per_decode_matches_llama_cpp(name, model, w, g):
    state = Q.new_state(model.spec, n_rs_seq=0)
    rows = [Q.decode(w, state, [t], [i], numerics(name)).logits[0] for i, t in enumerate(g["tokens"])]
    assert dmax(np.stack(rows), g["seq_logits"]) <= TOL
    # llama.cpp itself: one token at a time == one batch
    assert dmax(g["seq_logits"], g["logits"]) <= TOL


def test_exact_mode_on_quantized_weights_is_not_the_oracle(goldens):
    """Without activation quantisation the Q8_0 model is off by far more than TOL: the gap
    ``ggml`` mode closes (measured 0.53, routes differing at 2 positions; 2.4e-7 and none in ``ggml``)."""
    model, w, g = goldens["Q8_0"]
    res = Q.decode(w, Q.new_state(model.spec), g["tokens"], np.arange(len(g["tokens"])), Numerics("exact"))
    assert dmax(res.logits, g["logits"]) > 100 * TOL


# --- MTP head --------------------------------------------------------------------------------
def check_mtp_head_over_the_prompt_matches_llama_cpp(name, model, w, g):
    num = numerics(name, "mtp head")
    tgt = Q.decode(w, Q.new_state(model.spec), oracle.PROMPT, np.arange(P), num)
    assert dmax(tgt.h_nextn, g["h_nextn"]) <= TOL
    h_prev = np.concatenate([np.zeros((1, model.spec.n_embd), np.float32), tgt.h_nextn[:-1]])  # row 0: zeros
    mtp = Q.mtp_decode(w, Q.new_mtp_state(model.spec), oracle.PROMPT, np.arange(P), h_prev, num)
    assert dmax(mtp.logits, g["mtp_logits"]) <= TOL
    assert dmax(mtp.h, g["mtp_h"]) <= TOL
    assert np.array_equal(mtp.routes, g["mtp_routes"]), f"{name}: the head's routes differ from llama.cpp"
    # the first-row convention matters: skipping position 0 (the oracle README's script) is another result
    assert dmax(mtp.logits[1:], g["mtp_skip0_logits"]) > 0.1


def check_mtp_loop_drafts_and_verifies_as_llama_cpp(name, model, w, g):
    """refsim's loop with the MTP source (engine order: accept before catch-up) against
    llama.cpp driven as common/speculative.cpp does (process the whole verify batch, then
    seq_rm the rejected tail): same drafts, draft-step logits and head routes, acceptances,
    verify logits and routes."""
    target, draft = mtp_source_for(model, SpecConfig(spec="mtp", draft_max=oracle.N_DRAFT), numerics=numerics(name, "loop"))
    head_logits = []                 # logits of every draft-context decode, in DRAFT-event order
    real_decode = draft._decode

    def spy(tokens, positions, h_prev, kind=DecodeKind.DRAFT):
        res, ev = real_decode(tokens, positions, h_prev, kind)
        if kind == DecodeKind.DRAFT:             # the draft context's prompt pass is DRAFT_PREFILL
            head_logits.append(res.logits)
        return res, ev

    draft._decode = spy
    run = run_generation(target, draft, oracle.PROMPT, n_predict=4 * oracle.ROUNDS + 4, draft_max=oracle.N_DRAFT)
    verify = [i for i, e in enumerate(run.events) if e.kind == DecodeKind.VERIFY][:oracle.ROUNDS]
    assert len(verify) == oracle.ROUNDS
    results = target.inner.results[1:1 + oracle.ROUNDS]   # [0] is the prefill
    n_layer = model.spec.n_layer
    for r, i in enumerate(verify):
        ev = run.events[i]
        want = [int(g["loop_id_last"][r])] + g["loop_drafts"][r].tolist()
        assert ev.tokens.tolist() == want, f"{name} round {r}: verify batch {ev.tokens.tolist()} != {want}"
        assert ev.positions.tolist() == list(range(int(g["loop_n_past"][r]), int(g["loop_n_past"][r]) + len(want)))
        assert ev.accepted == int(g["loop_n_acc"][r])
        err = np.abs(results[r].logits - g["loop_verify_logits"][r]).max(1)
        near = sorted(row for (rr, row) in KNOWN_NEAR_TIES.get((name, "loop"), ()) if rr == r)
        assert (np.delete(err, near) <= TOL).all(), f"{name} round {r}: max |dlogit| per row {err}"
        for row in near:
            assert TOL < err[row] <= NEAR_TIE_TOL, f"{name} round {r} row {row}: listed near-tie, |dlogit| {err[row]}"
            assert results[r].logits[row].argmax() == g["loop_verify_logits"][r][row].argmax()
        assert np.array_equal(ev.routes[:, :n_layer], g["loop_verify_routes"][r])
        steps = [e for e in run.events[i - oracle.N_DRAFT:i]]
        assert all(e.kind == DecodeKind.DRAFT and e.positions.size == 1 for e in steps)
        assert np.array_equal(np.stack([e.routes[0, n_layer] for e in steps]), g["loop_draft_routes"][r])
        n_before = sum(e.kind == DecodeKind.DRAFT for e in run.events[:i - oracle.N_DRAFT])
        got = np.concatenate(head_logits[n_before:n_before + oracle.N_DRAFT])
        assert dmax(got, g["loop_draft_logits"][r]) <= TOL, f"{name} round {r}: draft-step logits"
    assert sum(g["loop_n_acc"]) == sum(run.events[i].accepted for i in verify)


def test_mtp_loop_golden_has_an_acceptance():
    """At least one golden round accepts a draft (Q4_0, round 3), so catch-up after a partial
    acceptance is covered, not only full rejection."""
    with np.load(GOLDEN_DIR / "qwen35moe-Q4_0.npz") as z:
        assert z["loop_n_acc"].tolist() == [0, 0, 1]


# --- rollback --------------------------------------------------------------------------------
def check_rollback_matches_llama_cpp(name, model, w, g):
    assert g["rb_ok"].all() and not bool(g["rb_fail_ok"])
    for j, keep in enumerate(g["rb_keep"].tolist()):
        assert dmax(g["rb_logits"][j], g["rb_fresh"][j]) <= TOL   # llama.cpp: rollback == fresh run
        num = numerics(name, f"rollback keep {keep}")
        state = Q.new_state(model.spec, n_rs_seq=oracle.RB_N_RS_SEQ)
        Q.decode(w, state, oracle.PROMPT, np.arange(P), num)
        Q.decode(w, state, oracle.RB_BATCH, np.arange(P, P + len(oracle.RB_BATCH)), num)
        state.trim(P + keep)
        got = Q.decode(w, state, [oracle.RB_CORRECTION], [P + keep], num).logits[0]
        assert dmax(got, g["rb_logits"][j]) <= TOL, f"{name}: keep {keep}"
        toks = oracle.PROMPT + oracle.RB_BATCH[:keep] + [oracle.RB_CORRECTION]
        fresh = Q.decode(w, Q.new_state(model.spec), toks, np.arange(len(toks)), num).logits[-1]
        assert np.array_equal(got, fresh), f"{name}: refsim's rollback is not its fresh run (keep {keep})"
    # a rollback past n_rs_seq: llama.cpp's seq_rm says false, refsim raises
    num = numerics(name)
    state = Q.new_state(model.spec, n_rs_seq=oracle.RB_N_RS_SEQ)
    Q.decode(w, state, oracle.PROMPT, np.arange(P), num)
    Q.decode(w, state, oracle.RB_BATCH, np.arange(P, P + len(oracle.RB_BATCH)), num)
    with pytest.raises(ConfigError, match="n_rs_seq = 3"):
        state.trim(P)



def test_the_known_near_tie_is_two_ulps_from_a_half(goldens, monkeypatch):
    """The listed near-tie: in round 3's verify batch, row 0 of the last layer's gated attention
    output (input of the Q8_0 ``attn_output``) has ``x * 127 / amax = 59.49999237`` in refsim,
    2 float32 ulps below the half; llama.cpp's float32 sums land on the other side, the
    product row changes by one quantum and the row's logits by 0.021 (the last layer's
    ``attn_output`` feeds no other row, so rows 1..3 still match to 2e-7)."""
    import refsim.forward.layers as LY
    model, w, g = goldens["Q8_0-tie"]
    seen, names = [], []
    real = LY.quantize_acts            # every Q8_0/Q8_K activation quantisation goes through it

    def spy(x, block, tie=0):
        seen.append(np.array(x, dtype=np.float32))
        return real(x, block, tie)

    state = Q.new_state(model.spec, n_rs_seq=oracle.N_DRAFT)
    Q.decode(w, state, oracle.PROMPT, np.arange(P), Numerics("ggml"))
    for r in range(3):
        n_past = int(g["loop_n_past"][r])
        state.trim(n_past)
        batch = [int(g["loop_id_last"][r])] + g["loop_drafts"][r].tolist()
        if r == 2:
            monkeypatch.setattr(LY, "quantize_acts", spy)
            res = Q.decode(w, state, batch, np.arange(n_past, n_past + len(batch)), Numerics("ggml"),
                           tap=lambda n, il, a: names.append((n, il, len(seen))))
        else:
            Q.decode(w, state, batch, np.arange(n_past, n_past + len(batch)), Numerics("ggml"))
    i = next(k for n, il, k in names if (n, il) == ("attn_gated", 3))   # the next quantisation: attn_output's input
    x = seen[i][0, :32]
    v = np.float32(x[13] * (np.float32(127.0) / np.abs(x).max()))
    assert v == np.float32(59.49999237060547) and np.nextafter(np.nextafter(v, np.float32(60)), np.float32(60)) == 59.5
    assert np.abs(res.logits[1:] - g["loop_verify_logits"][2][1:]).max() <= TOL
    assert 0.02 < np.abs(res.logits[0] - g["loop_verify_logits"][2][0]).max() <= NEAR_TIE_TOL


def test_the_known_tie_is_a_tie(goldens):
    """The listed near-tie is real: rounding that half to even misses llama.cpp by > 1e-3, and
    the default (even) rule matches everywhere else in the file (the other tests)."""
    assert KNOWN_TIES == {("Q4_0", "rollback keep 3"): "up", ("mixed", "mtp head"): "up", ("mixed", "loop"): "up"}
    # mixed: the MTP head's Q8_K quantisation of row 4 meets x * iscale = 37.499996, one ulp below
    # the half (since the integer block products, refsim/kernels/qdot.py); llama.cpp is above it
    model, w, g = goldens["mixed"]
    tgt = Q.decode(w, Q.new_state(model.spec), oracle.PROMPT, np.arange(P), Numerics("ggml"))
    h_prev = np.concatenate([np.zeros((1, model.spec.n_embd), np.float32), tgt.h_nextn[:-1]])
    head = {t: Q.mtp_decode(w, Q.new_mtp_state(model.spec), oracle.PROMPT, np.arange(P), h_prev,
                            Numerics("ggml", t)).logits for t in ("even", "up")}
    assert dmax(head["even"][:4], g["mtp_logits"][:4]) <= TOL < 1e-3 < dmax(head["even"][4], g["mtp_logits"][4])
    assert dmax(head["up"], g["mtp_logits"]) <= TOL
    model, w, g = goldens["Q4_0"]
    toks = oracle.PROMPT + oracle.RB_BATCH[:3] + [oracle.RB_CORRECTION]
    want = g["rb_logits"][list(oracle.RB_KEEP).index(3)]
    even = Q.decode(w, Q.new_state(model.spec), toks, np.arange(len(toks)), Numerics("ggml")).logits[-1]
    up = Q.decode(w, Q.new_state(model.spec), toks, np.arange(len(toks)), Numerics("ggml", "up")).logits[-1]
    assert dmax(even, want) > 1e-3
    assert dmax(up, want) <= TOL


def check_rollback_behind_the_last_batch(name, model, w, g):
    """The 4 tokens fed as two decodes of 2 (:data:`oracle.RB_SPLIT`), then a rollback.

    llama.cpp writes snapshot slot ``s`` only when ``s <`` the last ubatch's tokens
    (``TAG_RECURRENT_ROLLBACK_SPLITS``): removing 1 position (< 2) equals the fresh run, but
    removing 2 or 3 — still within ``n_rs_seq = 3``, and ``seq_rm`` says true — reads stale SSM
    slots and is off by 1.3-4.1. refsim keeps states across batches, so its rollback is the
    fresh run every time: the difference stated in :mod:`refsim.forward.recurrent`, which the
    speculative loop never meets (it removes only part of the verify batch it just decoded)."""
    assert g["rb_split_ok"].all()
    for j, keep in enumerate(g["rb_keep"].tolist()):
        num = numerics(name, f"rollback keep {keep}")
        state = Q.new_state(model.spec, n_rs_seq=oracle.RB_N_RS_SEQ)
        Q.decode(w, state, oracle.PROMPT, np.arange(P), num)
        n = P
        for chunk in oracle.RB_SPLIT:
            Q.decode(w, state, chunk, np.arange(n, n + len(chunk)), num)
            n += len(chunk)
        state.trim(P + keep)
        got = Q.decode(w, state, [oracle.RB_CORRECTION], [P + keep], num).logits[0]
        assert dmax(got, g["rb_logits"][j]) <= TOL, f"{name}: keep {keep}: refsim's rollback is not the fresh run"
        if n - (P + keep) < len(oracle.RB_SPLIT[-1]):
            assert dmax(g["rb_split_logits"][j], g["rb_fresh"][j]) <= TOL
            assert dmax(got, g["rb_split_logits"][j]) <= TOL
        else:
            assert dmax(g["rb_split_logits"][j], g["rb_fresh"][j]) > 1.0, f"{name}: keep {keep}: llama.cpp changed"


CHECKS = [check_trunk_batch_matches_llama_cpp, check_trunk_one_token_per_decode_matches_llama_cpp,
          check_mtp_head_over_the_prompt_matches_llama_cpp, check_mtp_loop_drafts_and_verifies_as_llama_cpp,
          check_rollback_matches_llama_cpp, check_rollback_behind_the_last_batch]
"""Every comparison of refsim with one oracle output dict (a golden or a live run)."""


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__[6:])
@pytest.mark.parametrize("name", NAMES)
def test_refsim_matches_llama_cpp_golden(goldens, name, check):
    check(name, *goldens[name])


@pytest.mark.skipif(not oracle.available(), reason="llama_cpp not importable (optional extra 'oracle')")
def test_live_llama_cpp_matches_refsim(tmp_path):
    """llama.cpp now, on a model no golden was made from (Q8_0, seed 78): every check holds."""
    path = write_synthetic(tmp_path / "live.gguf", "qwen35moe", "Q8_0", nextn=True, seed=78)
    live = oracle.run_oracle(path)
    assert live["meta"]["type_kv"] == "F32" and live["tokens"].tolist() == oracle.GOLDEN_TOKENS
    model = open_model(path)
    w = Q.load_weights(model)
    for check in CHECKS:
        check("live-Q8_0", model, w, live)


@pytest.mark.skipif(not oracle.available(), reason="llama_cpp not importable (optional extra 'oracle')")
def test_live_oracle_reports_a_model_without_the_mtp_block(tmp_path):
    """A qwen35moe file without nextn: llama.cpp cannot make the MTP context; the error names the file."""
    path = write_synthetic(tmp_path / "no-nextn.gguf", "qwen35moe", "F32", nextn=False, seed=1)
    with pytest.raises(oracle.OracleError, match="no-nextn.gguf"):
        oracle.run_oracle(path)
