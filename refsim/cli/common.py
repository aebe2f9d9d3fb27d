"""Shared flag validators and helpers for the subcommands (argparse ``type=`` functions)."""

from __future__ import annotations

import argparse
import io
import math
import os
import sys

from refsim import MIB
from refsim.errors import ConfigError
from refsim.fmt import budget_mib, num
from refsim.fileio import STDOUT, OutputKind, check_writable, resolve_output


def _number(text: str, parse, ok, expected: str):
    """``parse(text)`` if it parses and ``ok`` holds, else ArgumentTypeError quoting ``text``."""
    try:
        value = parse(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """``type=`` validator: a finite number > 0, quoting the bad value."""
    return _number(text, float, lambda v: 0 < v < math.inf, "a positive number")


def positive_int(text: str) -> int:
    """``type=`` validator: an integer >= 1, quoting the bad value."""
    return _number(text, int, lambda v: v >= 1, "a positive integer")


def nonneg_float(text: str) -> float:
    """``type=`` validator: a finite number >= 0 (``nan`` and ``inf`` are refused), quoting the
    bad value. For MiB flags where 0 has a meaning (``--cache-floor-mb``, ``--cache-ceil-mb``)."""
    return _number(text, float, lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0")


def nonneg_int(text: str) -> int:
    """``type=`` validator: an integer >= 0, quoting the bad value (``--ubatch``: 0 = default)."""
    return _number(text, int, lambda v: v >= 0, "an integer >= 0")


INT_RANGE_MAX = 10_000
"""Most values one :func:`int_range` list may hold (a typo such as ``1..10000000000`` would
otherwise build a list of that length before any range check runs)."""


def int_range(text: str) -> list[int]:
    """Parse ``"3"``, ``"1,2,5"`` or ``"1..8"`` into a list of ints (inclusive range), at most
    :data:`INT_RANGE_MAX` values."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if ".." in part:
                lo, hi = part.split("..", 1)
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                if len(out) + b - a + 1 > INT_RANGE_MAX:
                    raise argparse.ArgumentTypeError(
                        f"expected at most {INT_RANGE_MAX} values, got {text!r}")
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected N, N,M,... or A..B with A <= B, got {text!r}") from None
    return out


def add_spec_args(parser: argparse.ArgumentParser) -> None:
    """The engine's speculation flags: ``--ngram``, ``--mtp``, ``--draft N``,
    ``--ngram-min-match N``, ``--mtp-p-min F``.

    Validate them with ``refsim.spec.SpecConfig.from_args(args)``, which raises ConfigError
    for the engine's rejections (``--draft`` outside 1..8, ``--ngram`` with ``--mtp``,
    min-match outside 1..12, nonzero ``--mtp-p-min`` with ``--ngram``, a knob without a draft
    source). The knobs default to ``None`` (= not given) so that check can tell.
    """
    g = parser.add_argument_group("speculation (greedy only)")
    g.add_argument("--ngram", action="store_true",
                   help="draft by n-gram prompt lookup (no model needed)")
    g.add_argument("--mtp", action="store_true", help="draft with the model's MTP head")
    g.add_argument("--draft", type=int, default=None, metavar="N",
                   help="draft tokens per step, 1..8 (default 3)")
    g.add_argument("--ngram-min-match", type=int, default=None, metavar="N",
                   help="shortest suffix match that drafts, 1..12 (default 3)")
    g.add_argument("--mtp-p-min", type=float, default=None, metavar="F",
                   help="MTP only: stop drafting below this top-1 probability (default 0)")


def check_outputs(outputs: dict, inputs: dict | None = None, binary: tuple = ("--plot",)) -> None:
    """Fail before any work if an output cannot be written or would overwrite an input or another
    output (the same file by real path), by the rules of :mod:`refsim.fileio`.

    Parameters
    ----------
    outputs : dict of flag -> path or None
        Output flags as given (``None`` = not given; ``""`` is refused; ``-`` = standard output).
    inputs : dict of name -> path, optional
        Files the command reads (``TRACE``, ``MODEL``, ...).
    binary : tuple of str
        The flags whose output is binary (``-`` refused for them; default ``--plot``).

    Raises
    ------
    ConfigError
        From :func:`refsim.fileio.resolve_output`, or ``"--csv x: is also the TRACE input;
        expected another file"`` / ``"--csv x and --route-trace x: the same file; expected two files"`` /
        ``"--csv - and --route-trace -: both standard output; expected at most one -"``.
    """
    given = {flag: path for flag, path in outputs.items() if path is not None}
    kinds = {flag: resolve_output(path, flag, flag in binary).kind for flag, path in given.items()}
    to_stdout = [flag for flag, path in given.items() if path == STDOUT]
    if len(to_stdout) > 1:
        raise ConfigError(f"{' and '.join(f'{f} -' for f in to_stdout)}: both standard output; "
                          f"expected at most one -")
    seen: dict[str, str] = {}
    for name, path in (inputs or {}).items():
        if path:
            seen.setdefault(os.path.realpath(path), name)
    for flag, path in given.items():
        if kinds[flag] is not OutputKind.REPLACE:
            continue                    # stdout, a FIFO or a device: written in place, not replaced
        real = os.path.realpath(path)
        if real in seen:
            other = seen[real]
            if other.startswith("--"):
                raise ConfigError(f"{other} {path} and {flag} {path}: the same file; expected two files")
            raise ConfigError(f"{flag} {path}: is also the {other} input; expected another file")
        seen[real] = flag


def check_output_path(path: str | None, flag: str, binary: bool = False) -> None:
    """Fail before any work if output flag ``flag``'s ``path`` cannot be written
    (:func:`refsim.fileio.check_writable`). ``None`` (flag not given) passes.

    Raises
    ------
    ConfigError
        The messages of :func:`refsim.fileio.resolve_output`.
    """
    check_writable(path, flag, binary)


def report_stream(outputs: dict):
    """Where a command prints its report: ``sys.stderr`` when one of ``outputs`` (flag -> path or
    None) is standard output (``-``, or a path naming the same file as standard output, such as
    ``/dev/stdout``), so the stream holds only that file; else ``sys.stdout``."""
    return sys.stderr if any(_is_stdout(p) for p in outputs.values() if p is not None) else sys.stdout


def _is_stdout(path) -> bool:
    if path == STDOUT:
        return True
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False


def warn_below_token_cycle(cmd: str, budgets_bytes, t_bytes: int) -> None:
    """Warn on stderr (once) when budgets are below one token cycle T (bytes).

    Below T a global LRU evicts, within one token, entries the next layers need, so the hit rate
    collapses toward 0 (docs/cache-studies.md): a number the user may not expect. ``cmd`` names
    the subcommand in the message.
    """
    low = sorted({b for b in budgets_bytes if b < t_bytes})
    if not low:
        return
    shown = ", ".join(budget_mib(b) for b in low[:5]) + (", ..." if len(low) > 5 else "")
    what = f"budget {shown} MiB is" if len(low) == 1 else f"budgets {shown} MiB are"
    print(f"refsim {cmd}: warning: {what} below one token cycle "
          f"T = {num(t_bytes / MIB, 1)} MiB: a global LRU evicts what the next layers need, and its "
          f"hit rate collapses toward 0 (exactly 0 once the budget is short of T by more than a "
          f"few entries; docs/cache-studies.md)", file=sys.stderr)
