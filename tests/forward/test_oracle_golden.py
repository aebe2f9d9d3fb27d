"""refsim against llama.cpp: committed golden outputs (always) and a live run (when llama_cpp imports).

Goldens (tests/data/oracle/qwen3moe-<quant>.npz) were written by ``tools/oracle_llamacpp.py
--make-goldens`` with llama-cpp-python 0.3.36 (F32 KV, flash attention off, every position asking
for logits). Each records the synthetic recipe and a digest of the model's tensors, so the model is
rebuilt here bit for bit.

Agreement required (issue 5): ``ggml`` numerics -> max |Δlogit| <= 1e-4 and identical routes on
every position and layer; ``exact`` numerics -> identical argmax on every position whose margin
exceeds 1e-2 (near-ties below that may flip). One more kind of near-tie exists in ``ggml`` mode:
an activation that refsim quantizes from an exact half (x * scale = n + 0.5) may round the other
way in llama.cpp, whose float32 sums differ in the last bit; such a position must then match with
that half rounded up or down (``Numerics(act_tie=...)``), and at most one per file may need it.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from refsim.forward import Numerics, qwen3moe

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = REPO / "tests" / "data" / "oracle"
_spec = importlib.util.spec_from_file_location("oracle_llamacpp", REPO / "tools" / "oracle_llamacpp.py")
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

NAMES = list(oracle.GOLDEN_RECIPES)
GGML_TOL = 1e-4
NEAR_TIE = 1e-2


@pytest.fixture(scope="module")
def goldens(golden_models):
    return golden_models(oracle, "qwen3moe")


def _refsim(model, tokens, mode, tie="even"):
    w = qwen3moe.load_weights(model)
    return qwen3moe.decode(w, qwen3moe.new_state(model.spec), tokens, np.arange(len(tokens)),
                           Numerics(mode, tie))


def _check_ggml(model, tokens, logits, routes, weights=None, label=""):
    """max |dlogit| <= 1e-4 and identical routes per position, where a position may match under
    any exact-half rounding of the activation quantisation (an activation near-tie: refsim computes
    an exact half that llama.cpp's float32 sums put on one side). Returns the near-tie positions."""
    runs = {t: _refsim(model, tokens, "ggml", t) for t in ("even", "up", "down")}
    err = {t: np.abs(r.logits - logits).max(1) for t, r in runs.items()}
    ok = {t: (err[t] <= GGML_TOL) & (runs[t].routes == routes).all((1, 2)) for t in runs}
    assert (ok["even"] | ok["up"] | ok["down"]).all(), (
        f"{label}: positions {np.nonzero(~(ok['even'] | ok['up'] | ok['down']))[0].tolist()} differ: "
        f"max |dlogit| {min(e.max() for e in err.values()):.3g}")
    ties = np.nonzero(~ok["even"])[0]
    assert ties.size <= 1, f"{label}: {ties.size} activation near-ties (expected rare)"
    if weights is not None:
        np.testing.assert_allclose(runs["even"].weights[ok["even"]], weights[ok["even"]], atol=1e-5)
    return ties


def test_golden_files_are_small_and_complete():
    for name in NAMES:
        f = GOLDEN_DIR / f"qwen3moe-{name}.npz"
        assert f.stat().st_size < 200_000
        with np.load(f) as z:
            assert {"tokens", "logits", "routes", "weights", "meta", "recipe", "digest"} <= set(z.files)
            assert z["tokens"].tolist() == oracle.GOLDEN_TOKENS
            assert json.loads(str(z["meta"]))["type_kv"] == "F32"


@pytest.mark.parametrize("name", NAMES)
def test_ggml_mode_matches_llama_cpp(goldens, name):
    model, g = goldens[name]
    ties = _check_ggml(model, g["tokens"], g["logits"], g["routes"], g["weights"], name)
    # measured with 0.3.36: the mixed K-quant model has one (position 11: an exact -45.5 in a Q8_K row)
    assert ties.tolist() == ([11] if name == "mixed" else [])


@pytest.mark.parametrize("name", NAMES)
def test_exact_mode_argmax_matches_llama_cpp_off_near_ties(goldens, name):
    model, g = goldens[name]
    res = _refsim(model, g["tokens"], "exact")
    clear = res.margin > NEAR_TIE
    assert clear.sum() >= len(clear) // 2, f"{name}: too few decisive positions to compare"
    assert np.array_equal(res.argmax[clear], g["logits"].argmax(1)[clear])


NEW_TYPES = ["Q4_1", "Q5_1", "IQ4_NL", "IQ4_XS", "Q3_K", "Q2_K", "TQ1_0", "TQ2_0"]
"""Goldens of the types added for issue 18 (one model each, every weight matrix in that type)."""


@pytest.mark.parametrize("name", NEW_TYPES)
def test_new_types_give_llama_cpps_greedy_tokens(goldens, name):
    # every weight matrix is in the type (routers and norms stay F32), and refsim's ggml-mode greedy
    # token equals llama.cpp's at every position
    model, g = goldens[name]
    types = {model.tensor(n).ggml_type.name for n in model.tensors if model.tensor(n).shape_gguf[-1] > 1
             and not n.endswith("ffn_gate_inp.weight") and not n.endswith("norm.weight")}
    assert types == {name}
    assert np.array_equal(_refsim(model, g["tokens"], "ggml").argmax, g["logits"].argmax(1))


@pytest.mark.skipif(not oracle.available(), reason="llama_cpp not importable (optional extra 'oracle')")
@pytest.mark.parametrize("name", ["F32", "Q4_0", "mixed"] + NEW_TYPES)
def test_live_llama_cpp_matches_refsim(goldens, name):
    model, g = goldens[name]
    tokens = [1, 9, 9, 200, 31, 77, 77, 77, 5, 250]
    live = oracle.run_oracle(model.path, tokens)
    _check_ggml(model, tokens, live["logits"], live["routes"], live["weights"], f"live {name}")
    # and llama.cpp still computes what the golden recorded
    again = oracle.run_oracle(model.path, oracle.GOLDEN_TOKENS)
    assert float(np.abs(again["logits"] - g["logits"]).max()) <= 1e-5
    assert np.array_equal(again["routes"], g["routes"])


@pytest.mark.skipif(not oracle.available(), reason="llama_cpp not importable (optional extra 'oracle')")
def test_live_oracle_reports_a_bad_file(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(oracle.OracleError, match="bad.gguf"):
        oracle.run_oracle(str(bad), [1, 2])
