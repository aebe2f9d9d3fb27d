"""Hypothesis strategies that damage a valid text file the way files get damaged, for mutation tests
of refsim's readers (route traces, token files; tests/trace/test_fuzz_trace.py,
tests/spec/test_fuzz_token_file.py).

A mutation is one of: a byte overwritten (by a digit, a separator, NUL, 0xff, a random byte), the
file truncated, a line deleted, duplicated or swapped with another, a blank or whitespace line
inserted, one field (split on ``,`` and whitespace) or one ``key=value`` value replaced by a
troublesome value (0, -1, 2**31, 2**63, 2**64, ``1e9``, ``nan``, ``1_0``, non-ASCII digits, an
empty string, ...), a non-ASCII character inserted, two column names swapped. :func:`mutated`
applies one to three of them and says which, so a failing case reads as a recipe::

    from hypothesis import given
    from refsim.testing.mutate import mutated

    @given(mutated(seed_bytes))
    def test_reader(case):
        data, recipe = case
"""

from __future__ import annotations

import re
import signal
from contextlib import contextmanager

from hypothesis import strategies as st

TROUBLE = ("0", "1", "2", "-1", "3", "7", "255", "256", "32767", "32768", "65551", "2147483647",
           "2147483648", "4294967296", "9223372036854775807", "9223372036854775808",
           "18446744073709551616", "99999999999999999999999", "1000000000", "1e9", "1.0", "1e400",
           "nan", "inf", "-inf", "-0", "+1", "1_0", "0x10", "", " ", "x", "\u0661", "\uff11",
           "\u00b2", "1 2", "1,2", "0.5", "-256", "abc")
"""Values a damaged or hand-edited file holds where a number belongs."""

_BYTES = (b"0", b"1", b"9", b",", b"\n", b"\r", b" ", b"-", b".", b"e", b"#", b"=", b"\x00",
          b"\xff", b"\xc3")
_FIELD = re.compile(rb"[^,\s=]+")


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


@st.composite
def _one(draw, data: bytes) -> tuple[bytes, str]:
    """One mutation of ``data`` and its description."""
    kind = draw(st.sampled_from(["flip", "truncate", "delete", "duplicate", "swap", "blank",
                                 "field", "value", "insert", "columns"]))
    n = len(data)
    lines = _lines(data)
    if kind == "flip" and n:
        pos = draw(st.integers(0, n - 1))
        b = draw(st.sampled_from(_BYTES) | st.binary(min_size=1, max_size=1))
        return data[:pos] + b + data[pos + 1:], f"byte {pos} -> {b!r}"
    if kind == "truncate" and n:
        pos = draw(st.integers(0, n - 1))
        return data[:pos], f"truncated at byte {pos}"
    if kind == "insert":
        pos = draw(st.integers(0, n))
        t = draw(st.sampled_from(["\u0661", "\u00e9", "\u00a0", "\u2028", "\ufeff", "\x0c", "\t"]))
        return data[:pos] + t.encode() + data[pos:], f"{t!r} inserted at byte {pos}"
    i = draw(st.integers(0, len(lines) - 1))
    if kind == "delete":
        return b"\n".join(lines[:i] + lines[i + 1:]), f"line {i + 1} deleted"
    if kind == "duplicate":
        return b"\n".join(lines[:i + 1] + lines[i:]), f"line {i + 1} duplicated"
    if kind == "swap":
        j = draw(st.integers(0, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines), f"lines {i + 1} and {j + 1} swapped"
    if kind == "blank":
        t = draw(st.sampled_from([b"", b" ", b"\t", b"\r", b"  \r"]))
        return b"\n".join(lines[:i] + [t] + lines[i:]), f"blank {t!r} inserted as line {i + 1}"
    if kind == "columns":
        j = next((k for k, ln in enumerate(lines) if ln and not ln.startswith(b"#")), None)
        if j is not None:
            names = lines[j].split(b",")
            a, b = draw(st.integers(0, len(names) - 1)), draw(st.integers(0, len(names) - 1))
            names[a], names[b] = names[b], names[a]
            lines[j] = b",".join(names)
            return b"\n".join(lines), f"column names {a} and {b} swapped"
    spans = [m.span() for m in _FIELD.finditer(lines[i])]
    if kind == "value":       # the value of a key=value token, or a field when there is none
        spans = [(m.start(1), m.end(1)) for m in re.finditer(rb"=([^\s]*)", lines[i])] or spans
    if spans:
        a, b = draw(st.sampled_from(spans))
        v = draw(st.sampled_from(TROUBLE) | st.integers(-3, 10**6).map(str)).encode()
        lines[i] = lines[i][:a] + v + lines[i][b:]
        return b"\n".join(lines), f"line {i + 1} chars {a}..{b} -> {v!r}"
    return data, "unchanged"


@st.composite
def mutated(draw, seed: bytes, max_ops: int = 3) -> tuple[bytes, str]:
    """``seed`` damaged by 1..max_ops mutations: ``(bytes, recipe)``."""
    data, steps = seed, []
    for _ in range(draw(st.integers(1, max_ops))):
        data, what = draw(_one(data))
        steps.append(what)
    return data, "; ".join(steps)


def run_guarded(code: str, memory_bytes: int = 1 << 30, timeout: float = 60.0):
    """Run ``code`` in a child Python limited to ``memory_bytes`` of address space and ``timeout``
    seconds of CPU time, so a reader that spins or reads ``/dev/zero`` whole fails the test, not
    the machine.

    The limit is CPU time (``RLIMIT_CPU``: the kernel ends the child with ``SIGXCPU``), not wall
    time, so a loaded machine cannot fail a correct reader; a child that blocks without using the
    CPU is still ended after ten times ``timeout`` of wall time.

    Returns
    -------
    subprocess.CompletedProcess
        With text ``stdout``/``stderr`` (a child ended by its CPU limit has a negative or
        non-zero ``returncode`` and no output of its own).

    Raises
    ------
    subprocess.TimeoutExpired
        When the child blocks past ten times ``timeout`` of wall time.
    """
    import math
    import subprocess
    import sys
    cpu = max(1, math.ceil(timeout))
    guard = (f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({memory_bytes}, "
             f"{memory_bytes})); resource.setrlimit(resource.RLIMIT_CPU, ({cpu}, {cpu}))\n")
    return subprocess.run([sys.executable, "-c", guard + code], capture_output=True, text=True,
                          timeout=10.0 * timeout)


@contextmanager
def cpu_time_limit(seconds: float, what: str):
    """Raise ``TimeoutError`` in the block once this process has used ``seconds`` of CPU time
    (user + system, every thread: ``ITIMER_PROF``), so a reader that spins on a damaged file
    fails the test while a slow, loaded machine cannot (wall time would). Main thread only
    (signals); the previous ``SIGPROF`` handler is restored.

    Raises
    ------
    TimeoutError
        ``"{what} ran over {seconds} s of CPU time (a hang)"``.
    """
    def over(*_):
        raise TimeoutError(f"{what} ran over {seconds:g} s of CPU time (a hang)")
    old = signal.signal(signal.SIGPROF, over)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


def refusal_in_child(reader: str, path: str, **guard) -> str:
    """The one-line ``RefsimError`` message ``reader(path)`` raises, run in a guarded child
    (:func:`run_guarded`); ``reader`` is ``"module:function"``, e.g. ``"refsim.trace:read_trace"``.

    Raises
    ------
    AssertionError
        When the child does not end with a ``RefsimError`` (it returned, crashed, or ran out of
        its memory).
    """
    module, func = reader.split(":")
    out = run_guarded(f"from {module} import {func}\nfrom refsim.errors import RefsimError\n"
                      f"try:\n    {func}({path!r})\nexcept RefsimError as e:\n    print(e)\n"
                      f"else:\n    print('RETURNED')\n", **guard)
    assert out.returncode == 0 and out.stdout and out.stdout != "RETURNED\n", (out.stdout, out.stderr)
    return out.stdout.rstrip("\n")


def damaged_device(data, text: bytes, start: int, end: int, folder) -> tuple:
    """A device file ``text`` with ``text[start:end]`` (one key's lines) replaced by a drawn
    :func:`mutated` copy, written to ``folder/damaged.json`` and read by
    :func:`refsim.timing.load_device` under :func:`cpu_time_limit` (10 s of CPU).

    Returns ``(path, device or None, error or None, recipe)``, after checking the reader's
    promise for a refusal: one line starting with the file's path.
    """
    from pathlib import Path

    from refsim.errors import ConfigError
    from refsim.timing import load_device
    mid, recipe = data.draw(mutated(text[start:end]), label="mutation")
    p = Path(folder) / "damaged.json"
    p.write_bytes(text[:start] + mid + text[end:])
    with cpu_time_limit(10.0, "load_device"):
        try:
            dev, err = load_device(str(p)), None
        except ConfigError as exc:
            dev, err = None, str(exc)
    if err is not None:
        assert err.startswith(f"{p}: ") and "\n" not in err, f"{recipe}: {err!r}"
    return p, dev, err, recipe
