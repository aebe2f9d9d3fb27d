"""Memory ledger and the engine's --cache-mb auto formula (bmoe-engine.md §3.3; llama-cpp-notes.md §4)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from refsim import MIB
from refsim.cache.ledger import auto_budget, memory_ledger
from refsim.cli import main
from refsim.errors import ConfigError
from refsim.model import open_model, write_synthetic
from refsim.testing.twins import qwen36_twin


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    return open_model(qwen36_twin(tmp_path_factory.mktemp("twin") / "q36.gguf"))


# --- the formula, hand-worked -------------------------------------------------------------
def test_auto_budget_cases():
    E = 20000 * MIB
    # avail - floor, within [min_budget, cap]
    assert auto_budget(8000 * MIB, E, dense_weights="mmap") == (8000 - 1536) * MIB
    # floor pushes below 1500 MiB -> min_budget
    assert auto_budget(2000 * MIB, E, dense_weights="mmap") == 1500 * MIB
    # unknown MemAvailable (0) -> min_budget
    assert auto_budget(0, E) == 1500 * MIB
    # cap = total experts
    assert auto_budget(30000 * MIB, 5000 * MIB, dense_weights="mmap") == 5000 * MIB
    # min_budget = min(1500 MiB, cap)
    assert auto_budget(100 * MIB, 1000 * MIB, dense_weights="mmap") == 1000 * MIB
    # ceil
    assert auto_budget(30000 * MIB, E, dense_weights="mmap", ceil_mb=3000) == 3000 * MIB
    # dense subtracted only for anon/ahwb
    assert auto_budget(8000 * MIB, E, 2000 * MIB, "anon") == (8000 - 2000 - 1536) * MIB
    assert auto_budget(8000 * MIB, E, 2000 * MIB, "ahwb") == (8000 - 2000 - 1536) * MIB
    assert auto_budget(8000 * MIB, E, 2000 * MIB, "warm") == (8000 - 1536) * MIB
    # dense larger than avail: avail becomes 0 -> min_budget
    assert auto_budget(1000 * MIB, E, 2000 * MIB, "anon") == 1500 * MIB
    # custom floor
    assert auto_budget(8000 * MIB, E, dense_weights="mmap", floor_mb=0) == 8000 * MIB


def test_auto_budget_rejects():
    with pytest.raises(ConfigError, match="--dense-weights"):
        auto_budget(1, 1, dense_weights="pinned")
    with pytest.raises(ConfigError, match="--cache-floor-mb"):
        auto_budget(1, 1, floor_mb=-1)


@given(st.integers(0, 10**11), st.integers(1, 10**11), st.integers(0, 10**10),
       st.sampled_from(["mmap", "warm", "anon", "ahwb"]), st.integers(0, 4000), st.integers(0, 40000))
def test_auto_budget_bounds(avail, experts, dense, mode, floor, ceil):
    b = auto_budget(avail, experts, dense, mode, floor, ceil)
    cap = min(ceil * MIB, experts) if ceil > 0 else experts
    assert min(1500 * MIB, cap) <= b <= cap
    # monotone in available memory
    assert auto_budget(avail + MIB, experts, dense, mode, floor, ceil) >= b


# --- the ledger on the real-width twin ------------------------------------------------------
def test_twin_recurrent_and_kv_match_llama_cpp_notes(twin):
    # llama-cpp-notes.md §4.2: 98,304 B conv + 2,097,152 B ssm per layer, x30 = 65,863,680 B
    assert twin.bytes.recurrent_bytes_per_seq == 30 * (98304 + 2097152) == 65863680
    # §4.1: 2048 B/token/layer F16, 10 attention layers -> 20,480 B/token; MTP layer 2048 B/token
    assert twin.bytes.kv_bytes_per_token == 20480
    assert twin.bytes.kv_bytes_per_token_nextn == 2048


def test_twin_ledger_values(twin):
    led = memory_ledger(twin, 2048, draft_max=3, mtp=True, ram_mb=8000)
    assert led.n_rs_seq == 3
    assert led.kv_bytes == 20480 * 2048
    assert led.recurrent_bytes == 4 * 65863680
    assert led.snapshot_bytes == 3 * 65863680  # 188.4 MiB
    assert led.draft_kv_bytes == 2048 * 2048
    assert led.draft_ubatch == 32
    assert led.draft_buffer_bytes == 2 * 32 * 248320 * 4
    assert led.speculation_bytes == 3 * 65863680 + 2048 * 2048 + 2 * 32 * 248320 * 4
    assert led.avail_bytes == 8000 * MIB - led.context_bytes
    assert led.budget_bytes == auto_budget(led.avail_bytes, led.total_expert_bytes, led.dense_bytes)
    # the streamed set with --mtp includes the head's experts
    assert led.total_expert_bytes == twin.bytes.total_expert_bytes > twin.bytes.trunk_expert_bytes


def test_snapshots_do_not_scale_with_context(twin):
    a = memory_ledger(twin, 512, draft_max=4)
    b = memory_ledger(twin, 65536, draft_max=4)
    assert a.snapshot_bytes == b.snapshot_bytes == 4 * 65863680
    assert b.kv_bytes == 128 * a.kv_bytes


def test_ngram_speculation_costs_exactly_the_snapshots(twin):
    off = memory_ledger(twin, 4096, 0, ram_mb=9000)
    ng = memory_ledger(twin, 4096, 3, ram_mb=9000)
    assert ng.speculation_bytes == 3 * 65863680
    assert off.budget_bytes - ng.budget_bytes == 3 * 65863680


def test_draft_ubatch_clamped_to_target_ubatch(twin):
    assert memory_ledger(twin, 2048, 8, mtp=True).draft_ubatch == 32
    assert memory_ledger(twin, 2048, 8, mtp=True, n_ubatch=16).draft_ubatch == 16


def test_rejections(tmp_path, twin):
    plain = open_model(write_synthetic(tmp_path / "m.gguf", arch="qwen35moe", nextn=False))
    with pytest.raises(ConfigError, match="no nextn block"):
        memory_ledger(plain, 64, 3, mtp=True)
    with pytest.raises(ConfigError, match="--ctx"):
        memory_ledger(twin, 0)
    with pytest.raises(ConfigError, match="--draft"):
        memory_ledger(twin, 64, 9)


def test_qwen3moe_has_no_snapshots(tmp_path):
    m = open_model(write_synthetic(tmp_path / "q3.gguf", arch="qwen3moe"))
    led = memory_ledger(m, 256, 3)
    assert led.n_rs_seq == 0 and led.recurrent_bytes == 0 and led.snapshot_bytes == 0


def test_cli_memory(tmp_path, twin, capsys):
    assert main(["memory", twin.path, "--mtp", "--draft", "3", "--ctx", "2048", "--ram-mb", "8000"]) == 0
    out = capsys.readouterr().out
    assert "snapshots:      188.4 MiB" in out
    assert "cache-mb auto: " in out and "speculation takes" in out


def test_cli_memory_errors(tmp_path, capsys):
    p = write_synthetic(tmp_path / "m.gguf", arch="qwen35moe")
    assert main(["memory", p, "--mtp"]) == 1
    assert "no nextn block" in capsys.readouterr().err


@pytest.mark.parametrize("kw, flag", [
    (dict(ram_mb=float("nan")), "--ram-mb"), (dict(ram_mb=float("inf")), "--ram-mb"),
    (dict(ram_mb=100, floor_mb=float("nan")), "--cache-floor-mb"),
    (dict(ram_mb=100, ceil_mb=float("inf")), "--cache-ceil-mb"),
    (dict(n_ubatch=-3), "--ubatch"),
])
def test_ledger_refuses_nan_inf_and_negative_inputs(twin, kw, flag):
    # nan used to reach int(nan * MIB) (ValueError) and inf int(inf) (OverflowError)
    with pytest.raises(ConfigError, match=flag):
        memory_ledger(twin, 64, **kw)
    with pytest.raises(ConfigError, match="--cache-floor-mb: expected a finite number >= 0"):
        auto_budget(1, 1, floor_mb=float("nan"))


@pytest.mark.parametrize("argv, msg", [
    (["--ram-mb", "nan"], "--ram-mb: expected a number of MiB > 0 and at most 2^40 (1 EiB), got 'nan'"),
    (["--ram-mb", "inf"], "--ram-mb: expected a number of MiB > 0 and at most 2^40 (1 EiB), got 'inf'"),
    (["--ram-mb", "0"], "--ram-mb: expected a number of MiB > 0 and at most 2^40 (1 EiB), got '0'"),
    (["--ram-mb", "100", "--cache-ceil-mb", "inf"], "--cache-ceil-mb: expected a number of MiB from 0 to 2^40"),
    (["--ram-mb", "100", "--cache-floor-mb", "nan"], "--cache-floor-mb: expected a number of MiB from 0 to 2^40"),
    (["--ram-mb", "100", "--cache-floor-mb", "-5"], "--cache-floor-mb: expected a number of MiB from 0 to 2^40"),
    (["--ubatch", "-3"], "--ubatch: expected an integer in 0..2147483647, got '-3'"),
])
def test_cli_memory_bad_numbers_are_usage_errors(twin, capsys, argv, msg):
    with pytest.raises(SystemExit) as exc:
        main(["memory", twin.path] + argv)
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and msg in err and "Traceback" not in err


@pytest.mark.parametrize("argv, code, msg", [
    (["--draft", "2"], 2, "--draft without a draft source: add --ngram or --mtp"),
    (["--ngram", "--draft", "8", "--ubatch", "4"], 2,
     "argument --ubatch: expected 0 (= --ctx) or an integer >= --draft + 1 = 9"),
    (["--ctx", "300000"], 1, "--ctx: expected 1..262144 (the model's n_ctx_train), got 300000"),
])
def test_cli_memory_refuses_what_run_refuses(twin, capsys, argv, code, msg):
    # the command line alone: a usage error (exit 2, usage then the line); the model's bound: exit 1
    assert main(["memory", twin.path] + argv) == code
    out, err = capsys.readouterr()
    last = err.splitlines()[-1]
    assert out == "" and last.startswith(f"refsim memory: error: {msg}")
    assert err.count("\n") == (1 if code == 1 else len(err.splitlines()))


def test_cli_memory_ngram_default_draft_and_ctx_at_the_limit(twin, tmp_path, capsys):
    assert main(["memory", twin.path, "--ngram", "--ctx", "262144", "--ubatch", "4"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith("n_ctx=262144 spec=ngram draft_max=3 n_rs_seq=3")
    small = write_synthetic(tmp_path / "m.gguf", arch="qwen35moe")   # n_ctx_train 256
    assert main(["memory", small]) == 0                               # default 2048 clamps
    assert " n_ctx=256 spec=off draft_max=0 " in capsys.readouterr().out
