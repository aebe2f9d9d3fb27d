"""Read the engine's one-shot stdout summary (a run's ``.log``): the ``generation:`` and ``prefill:``
lines (bmoe-engine.md §4.2; cli/main.cpp)::

    generation: <n> tokens, <s/tok %.3f> s/token (<tok/s %.3f> tok/s)
    prefill: <n_prompt> tokens, <s %.3f> s (<tps %.1f> tok/s) | model load <%.3f> s | TTFT <%.3f> s

The legacy metrics CSVs (the 2026-07-12 phone set) carry no ``# summary`` trailer, so a run's
prompt length and prefill time are only in its ``.log``. A log holds the generated text before the
summary, so the **last** line starting with each prefix is the summary's; that line must have the
engine's form, or the reader names the file and line and what was expected. A leading UTF-8 byte
order mark (the phone logs have one) is skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from refsim.errors import MetricsFormatError

MAX_LOG_BYTES = 64 << 20
"""Largest log read (a one-shot run's stdout, answer text included, is kilobytes)."""

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_GENERATION = re.compile(rf"^generation: ([0-9]+) tokens, {_NUM} s/token \({_NUM} tok/s\)\s*$")
_PREFILL = re.compile(rf"^prefill: ([0-9]+) tokens, {_NUM} s \({_NUM} tok/s\) \| model load {_NUM} s "
                      rf"\| TTFT {_NUM} s\s*$")


@dataclass(frozen=True)
class EngineLog:
    """The summary figures of one engine stdout log (None: the line is absent).

    Attributes
    ----------
    path : str
    tokens : int or None
        Generated tokens (``generation:``).
    s_per_token : float or None
        Mean decode seconds per token (``generation:``).
    n_prompt : int or None
        Prompt tokens prefilled (``prefill:``).
    prefill_s : float or None
        Prefill seconds (``prefill:``).
    load_s : float or None
        Model load seconds (``prefill:``).
    prefill_line : int or None
        1-based line of the ``prefill:`` line (for messages).
    """

    path: str
    tokens: int | None = None
    s_per_token: float | None = None
    n_prompt: int | None = None
    prefill_s: float | None = None
    load_s: float | None = None
    prefill_line: int | None = None


def read_engine_log(path: str) -> EngineLog:
    """Read ``path`` (an engine stdout log).

    Raises
    ------
    MetricsFormatError
        The file cannot be read, is larger than :data:`MAX_LOG_BYTES`, is not UTF-8, or its last
        ``generation:``/``prefill:`` line does not have the engine's form (names file and line).
    """
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_LOG_BYTES + 1)
    except OSError as exc:
        raise MetricsFormatError(f"{path}: cannot read the engine log: {exc.strerror}") from None
    if len(raw) > MAX_LOG_BYTES:
        raise MetricsFormatError(f"{path}: larger than {MAX_LOG_BYTES >> 20} MiB; not an engine log")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise MetricsFormatError(f"{path}:{line}: not UTF-8 text") from None
    text = text.removeprefix("\ufeff")
    last = {}
    for i, line in enumerate(text.splitlines(), start=1):
        for prefix in ("generation: ", "prefill: "):
            if line.startswith(prefix):
                last[prefix] = (i, line)
    out = {}
    if "generation: " in last:
        i, line = last["generation: "]
        m = _GENERATION.match(line)
        if not m:
            raise MetricsFormatError(f"{path}:{i}: expected 'generation: N tokens, S s/token (R "
                                     f"tok/s)', got {line[:80]!r}")
        out.update(tokens=int(m.group(1)), s_per_token=float(m.group(2)))
    if "prefill: " in last:
        i, line = last["prefill: "]
        m = _PREFILL.match(line)
        if not m:
            raise MetricsFormatError(f"{path}:{i}: expected 'prefill: N tokens, S s (R tok/s) | model "
                                     f"load S s | TTFT S s', got {line[:80]!r}")
        out.update(n_prompt=int(m.group(1)), prefill_s=float(m.group(2)), load_s=float(m.group(4)),
                   prefill_line=i)
        if out["n_prompt"] < 1:
            raise MetricsFormatError(f"{path}:{i}: prefill of {out['n_prompt']} tokens, expected >= 1")
    return EngineLog(path=path, **out)
