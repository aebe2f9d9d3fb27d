"""The engine's stdout log reader (refsim.telemetry.log_reader): the last ``generation:`` and
``prefill:`` lines in the engine's form (bmoe-engine.md §4.2), one-line errors naming file and line,
and a mutation campaign: any byte edit of a valid log reads consistently or fails in one line."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refsim.errors import MetricsFormatError
from refsim.telemetry.log_reader import read_engine_log
from refsim.testing.shared import require_shared


def test_engine_log_reads_the_last_summary_lines(tmp_path):
    p = tmp_path / "run.log"
    p.write_bytes("\ufeffprefill: this line is answer text, not the summary\n"
                  "generation: 256 tokens, 0.481 s/token (2.077 tok/s)\n"
                  "prefill: 42 tokens, 9.248 s (4.5 tok/s) | model load 24.787 s | TTFT 34.035 s\n"
                  "peak_rss_kb=6340060\n".encode("utf-8"))
    log = read_engine_log(str(p))
    assert (log.tokens, log.s_per_token, log.n_prompt, log.prefill_s, log.load_s, log.prefill_line) \
        == (256, 0.481, 42, 9.248, 24.787, 3)


@pytest.mark.parametrize("text, message", [
    ("prefill: 42 tokens, 9.2 s\n", r"run.log:1: expected 'prefill: N tokens"),
    ("x\ngeneration: many tokens\n", r"run.log:2: expected 'generation: N tokens"),
    ("prefill: 0 tokens, 1.000 s (0.0 tok/s) | model load 1.000 s | TTFT 2.000 s\n", "expected >= 1"),
])
def test_engine_log_errors_name_file_and_line(tmp_path, text, message):
    p = tmp_path / "run.log"
    p.write_text(text)
    with pytest.raises(MetricsFormatError, match=message):
        read_engine_log(str(p))


def test_engine_log_refuses_non_utf8_and_missing(tmp_path):
    p = tmp_path / "run.log"
    p.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(MetricsFormatError, match=r"run.log:2: not UTF-8"):
        read_engine_log(str(p))
    with pytest.raises(MetricsFormatError, match="cannot read"):
        read_engine_log(str(tmp_path / "none.log"))


def test_engine_log_of_a_real_run():
    folder = require_shared("real-runs", "phone-2026-07-12-cache-lanes")
    log = read_engine_log(str(folder / "qwen_stream.log"))
    assert (log.tokens, log.n_prompt, log.prefill_s, log.load_s) == (256, 34, 5.351, 14.941)


@st.composite
def logs(draw):
    """A valid engine log: answer text, then the summary lines with drawn figures; returns the
    bytes and the figures a reader must find."""
    tokens, n_prompt = draw(st.integers(1, 4096)), draw(st.integers(1, 4096))
    s_tok, pre, load = (draw(st.integers(0, 10 ** 6)) / 1000 for _ in range(3))
    answer = draw(st.text(st.characters(blacklist_categories=("Cs",)), max_size=80))
    text = (f"{answer}\ngeneration: {tokens} tokens, {s_tok:.3f} s/token (1.000 tok/s)\n"
            f"prefill: {n_prompt} tokens, {pre:.3f} s (1.0 tok/s) | model load {load:.3f} s | "
            f"TTFT {pre + load:.3f} s\npeak_rss_kb=1\n")
    return text.encode("utf-8"), (tokens, n_prompt, round(pre, 3), round(load, 3))


def _campaign(tmp_path, log, data):
    raw, (tokens, n_prompt, pre, load) = log
    p = tmp_path / "m.log"
    p.write_bytes(raw)
    got = read_engine_log(str(p))
    # the summary lines come after the answer: the last of each prefix is theirs
    assert (got.tokens, got.n_prompt, got.prefill_s, got.load_s) == (tokens, n_prompt, pre, load)
    b = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, max(0, len(b) - 1)))
        op = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        if op == "flip" and b:
            b[i] = data.draw(st.integers(0, 255))
        elif op == "insert":
            b[i:i] = data.draw(st.binary(min_size=1, max_size=4))
        elif b:
            del b[i]
    p.write_bytes(bytes(b))
    try:
        got = read_engine_log(str(p))
    except MetricsFormatError as exc:
        msg = str(exc)
        assert msg.startswith(str(p) + ":") and "\n" not in msg, msg
        return
    assert got.n_prompt is None or got.n_prompt >= 1
    assert got.prefill_s is None or got.prefill_s >= 0


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(log=logs(), data=st.data())
def test_mutated_logs_read_or_fail_in_one_line(tmp_path, log, data):
    _campaign(tmp_path, log, data)


@pytest.mark.fuzz
@settings(max_examples=3000, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(log=logs(), data=st.data())
def test_log_mutation_campaign_fuzz(tmp_path, log, data):
    _campaign(tmp_path, log, data)
