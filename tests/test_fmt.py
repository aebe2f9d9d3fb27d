"""One number formatter: undefined rates, significant digits, budgets (issue 12 D2, D3)."""

import math

from hypothesis import given, strategies as st

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.cli import main
from refsim.fmt import budget_mib, csv_num, num, pct, pct_text, ratio


def test_hand_worked_values():
    assert ratio(3, 0) is None and pct(1, 0) is None and ratio(3, 4) == 0.75 and pct(1, 4) == 25.0
    assert [num(v, 1) for v in (250.25, 0.84375, 0.0206, 0.0, -0.004, None)] == \
        ["250.2", "0.84", "0.021", "0.0", "-0.0040", "n/a"]
    assert num(0.0206, 1, sig=None) == "0.0" and num(12.345, 2) == "12.35"   # 12.345 is 12.3449...
    assert num(0.99609375, 0) == "1.0" and num(0.0996, 1) == "0.10"   # a carry adds no digit
    assert pct_text(None) == "n/a" and pct_text(44.25) == "44.2%" and pct_text(0.004) == "0.0040%"
    assert csv_num(None, 3) == "nan" and csv_num(1.5, 3) == "1.500"
    # --cache-mb 0.1 is int(0.1 * 2**20) = 104857 bytes = 0.0999994... MiB; printed as 0.1
    assert [budget_mib(b) for b in (104857, 4 * MIB, 250 * MIB, 1, 3 * MIB // 2)] == \
        ["0.1", "4", "250", "0.000001", "1.5"]


@given(st.integers(1, 2**53))           # above 2**53 no float --cache-mb names every byte count
def test_a_printed_budget_is_the_same_budget_given_back(b):
    text = budget_mib(b)
    assert ExpertCache.mib_to_bytes(text) == b
    assert len(text) <= len(repr(b / MIB)) + 2


@given(st.floats(1e-9, 1e9), st.integers(0, 4))
def test_num_rounds_to_its_last_digit_and_shows_two_significant_digits(x, decimals):
    text = num(x, decimals)
    shown = len(text.split(".")[1]) if "." in text else 0
    assert shown >= decimals
    assert abs(float(text) - x) <= 0.5 * 10.0 ** -shown * (1 + 1e-9)   # rounded, not truncated
    assert len(text.replace(".", "").lstrip("0")) >= 2                   # >= 2 significant digits
    assert shown == decimals or text.replace(".", "").lstrip("0")[:1] != "" and \
        len(text.replace(".", "").lstrip("0")) == 2                       # no more digits than needed


def test_small_model_reports_keep_t_and_the_budget(capsys, tmp_path):
    from refsim.model import write_synthetic
    # a tiny qwen3moe: T is a few hundredths of a MiB, which .1f printed as "0.0"
    model = write_synthetic(tmp_path / "tiny.gguf", arch="qwen3moe", quant="F32", seed=1,
                            dims=dict(n_layer=2, n_embd=32, n_head=2, n_head_kv=1, head_dim=16,
                                      n_expert=8, n_expert_used=2, n_ff_exp=16, n_vocab=300))
    trace = tmp_path / "t.route.csv"
    assert main(["run", model, "--prompt-tokens", "1,2,3", "-n", "3", "--cache-mb", "0.1",
                 "--route-trace", str(trace)]) == 0
    out, err = capsys.readouterr()
    cache_line = next(ln for ln in out.splitlines() if ln.startswith("cache: budget"))
    assert cache_line.startswith("cache: budget 0.1 MiB, T (one token cycle) 0.023 MiB;")
    assert "--cache-mb 0.1)" in err
    assert "cache_mb=0.1" in trace.read_text().splitlines()[1]
    assert main(["sweep", str(trace), "--cache-mb", "0.1", "--policy", "lru"]) == 0
    assert "T = 0.023 MiB" in capsys.readouterr().out
    assert math.isclose(0.0234375, 2 * 2 * 3 * 32 * 16 * 4 / MIB)   # T = layers x k x entry
