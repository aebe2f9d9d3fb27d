"""Flag value validators: argparse ``type=`` functions and their one message form.

The CLI's one convention (docs/cli.md "Conventions", generated from tools/make_cli_doc.py): a value
the flag does not accept is a usage error, exit 2, ``argument FLAG: expected RANGE, got 'TEXT'``,
with one RANGE text per flag meaning, from these validators; a bound another flag sets is checked
after parsing by :func:`check_value` with the same text (:class:`refsim.errors.UsageError`).

They live below ``refsim/cli/`` so that library code can check a value with the CLI's own rule and
message (:class:`refsim.session.RunConfig`, ``refsim.scale.executor``'s ``--workers``) without
importing the command line; ``refsim.cli.common`` re-exports them for the subcommands.
"""

from __future__ import annotations

import argparse
import math
import re

from refsim.cache.expert_cache import CACHE_MB_RANGE, MAX_CACHE_MIB, ExpertCache
from refsim.errors import ConfigError, UsageError
from refsim.fmt import strict_float
from refsim.spec.constants import DRAFT_MAX_LIMIT, TOKEN_ID_MAX


INT_MAX = 2**31 - 1
"""Largest value of every integer flag: the engine's and llama.cpp's counts and ids are
``int32_t`` (``n_predict``, ``n_ctx``, ``n_ubatch``, ``llama_token``; include/llama.h)."""

_INT = re.compile(r"0|-?[1-9][0-9]*")
"""The one integer form of every flag and list item: ``0`` or ASCII digits without a leading zero,
``-`` for a negative (no ``+``, no space, no ``-0``): the form printf's ``%d`` writes and the trace
reader requires (docs/trace-format.md), so ``+3``, ``03`` and `` 3`` are refused, not read as 3."""


def _strict_int(text: str) -> int:
    """An integer in the form :data:`_INT` (``int`` would also take ``1_0``, `` 3``, ``+3``,
    ``03`` and non-ASCII digits)."""
    if not isinstance(text, str) or not _INT.fullmatch(text):
        raise ValueError(text)
    return int(text)


_SEPARATOR = re.compile(r"[, ]")
"""What separates two items of an integer list: one comma or one space (``1,5 77``)."""


def _items(text: str) -> list[str]:
    """The items of an integer list, split at each :data:`_SEPARATOR`: two separators in a row,
    or one at either end, leave an empty item, which the item's own rule refuses (``1,,2``,
    ``1, 2``, `` 3``)."""
    return _SEPARATOR.split(text)


def _number(text: str, parse, ok, expected: str):
    """``parse(text)`` if it parses and ``ok`` holds, else ArgumentTypeError quoting ``text``."""
    try:
        value = parse(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def int_in(lo: int, hi: int = INT_MAX, note: str = ""):
    """``type=`` validator factory: an integer ``lo..hi`` (default ``hi`` :data:`INT_MAX`; a
    ``uint32`` such as ``--seed`` passes its own); the message reads ``expected an integer in
    lo..hi<note>, got 'TEXT'``."""
    expected = f"an integer in {lo}..{hi}{note}"

    def check(text: str) -> int:
        return _number(text, _strict_int, lambda v: lo <= v <= hi, expected)
    return check


positive_int = int_in(1)
"""``type=`` validator: an integer in 1..2147483647 (counts: ``-n``, ``--ctx``, ``-k``, ...)."""

nonneg_int = int_in(0)
"""``type=`` validator: an integer in 0..2147483647 (``--ubatch``: 0 = default)."""

draft_width = int_in(1, DRAFT_MAX_LIMIT)
"""``type=`` validator of ``--draft``: 1..8 (``draft_max_limit``, bmoe-engine.md §1)."""

seed = int_in(0, 2**32 - 1)
"""``type=`` validator of ``--seed``: 0..4294967295 (NumPy's seed range, ``uint32``)."""

token_id = int_in(0, TOKEN_ID_MAX)
"""``type=`` validator of one token id: 0..2147483647 (``llama_token`` is ``int32_t``)."""

def positive_float(text: str) -> float:
    """``type=`` validator: a finite number > 0 (for a flag that is not MiB; MiB flags take
    :func:`positive_mib`, :func:`mib` or :func:`cache_mib`)."""
    return _number(text, strict_float, lambda v: 0 < v < math.inf, "a finite number > 0")


def nonneg_float(text: str) -> float:
    """``type=`` validator: a finite number >= 0 (not MiB; see :func:`mib`)."""
    return _number(text, strict_float, lambda v: 0 <= v < math.inf, "a finite number >= 0")


MAX_MS = 1e7
"""Largest ms (per token) a flag takes: the bound a device file's parameters have
(:data:`refsim.timing.model.MAX_ABS_PARAM`; a real device is orders of magnitude below)."""


def milliseconds(text: str) -> float:
    """``type=`` validator: a number of ms in ``0..1e7`` (:data:`MAX_MS`; ``--head-ms``,
    ``--draft-ms``): beyond it every rate prints 0.000 and says nothing."""
    return _number(text, strict_float, lambda v: 0 <= v <= MAX_MS, "a number of ms from 0 to 1e7")


MAX_POSITION_COST = 10.0
"""Largest ``--position-cost`` (eps, a fraction of one position's compute): the bound a device
file's eps has (:data:`refsim.timing.model.MAX_EPS`; the shared prefills allow 0..1.2, an
overlap prefill bounds it at 4.7)."""


def position_cost(text: str) -> float:
    """``type=`` validator of ``--position-cost``: a number in ``0..10`` (:data:`MAX_POSITION_COST`):
    beyond it every verify decode's rate prints 0.000 and says nothing."""
    return _number(text, strict_float, lambda v: 0 <= v <= MAX_POSITION_COST,
                   "a number from 0 to 10 (a fraction of one position's compute)")


MIB_RANGE = "a number of MiB from 0 to 2^40 (1 EiB)"
"""What the other MiB flags accept (``--cache-floor-mb``, ``--cache-ceil-mb``: 0 has a meaning)."""


def mib(text: str) -> float:
    """``type=`` validator: a finite number of MiB in ``0..2**40`` (:data:`MIB_RANGE`)."""
    return _number(text, strict_float, lambda v: 0 <= v <= MAX_CACHE_MIB, MIB_RANGE)


def positive_mib(text: str) -> float:
    """``type=`` validator: a finite number of MiB in ``(0, 2**40]`` (``--ram-mb``)."""
    return _number(text, strict_float, lambda v: 0 < v <= MAX_CACHE_MIB,
                   "a number of MiB > 0 and at most 2^40 (1 EiB)")


def cache_mib(text: str) -> float:
    """``type=`` validator of ``--cache-mb``: :data:`refsim.cache.expert_cache.CACHE_MB_RANGE`,
    the bounds :meth:`ExpertCache.mib_to_bytes` applies (one rule for every command)."""
    try:
        value = strict_float(text)
        ExpertCache.mib_to_bytes(value)
    except (ValueError, ConfigError):
        raise argparse.ArgumentTypeError(f"expected {CACHE_MB_RANGE}, got {text!r}") from None
    return value


def probability(text: str) -> float:
    """``type=`` validator: a probability in [0, 1] (``--mtp-p-min``)."""
    return _number(text, strict_float, lambda v: 0.0 <= v <= 1.0, "a probability in [0, 1]")


def token_ids(text: str) -> list[int]:
    """``type=`` validator: one or more token ids, each 0..2147483647 (``--prompt-tokens``,
    ``--corpus``); the list rule of every integer list (:func:`int_range`): items separated by
    one comma or one space (:func:`_items`), no empty item, each in the form :data:`_INT`."""
    expected = f"token ids like 1,5,77, each an integer in 0..{TOKEN_ID_MAX}"
    try:
        ids = [_strict_int(t) for t in _items(text)]
    except ValueError:
        ids = []
    if not ids or not all(0 <= t <= TOKEN_ID_MAX for t in ids):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return ids


def check_value(flag: str, text: str, validator):
    """Run ``validator`` (a ``type=`` function) after parsing, for a bound another flag sets
    (``--min-match`` at most ``--max-match``); its refusal is the same usage error as at parse time.

    Raises
    ------
    UsageError
        ``"argument FLAG: expected ..., got 'TEXT'"``.
    """
    try:
        return validator(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"argument {flag}: {exc}") from None


def list_text(values) -> str:
    """The command-line text of a list argument given from Python (the library face's windows,
    budgets, policies; :mod:`refsim.api`), so the CLI's own parser checks it and a refusal reads
    as the CLI's: a ``str`` is the command's text as is; a single number is ``str(value)``; any
    other iterable is its items' ``str()`` joined by commas (``[]`` -> ``''``, refused as
    ``--window ''`` is; ``2.0`` -> ``'2.0'`` and ``True`` -> ``'True'``, refused by the integer
    rule just as on the command line).

    Raises
    ------
    UsageError
        ``values`` is neither a str, a number nor an iterable (``None``): ``"expected a list
        ..., got ..."`` (no command line can give it).
    """
    if isinstance(values, str):
        return values
    if isinstance(values, (int, float)):
        return str(values)
    try:
        items = list(values)
    except TypeError:
        raise UsageError(f"expected a list (a sequence of values or the command's text), "
                         f"got {values!r}") from None
    return ",".join(str(v) for v in items)


def check_list(flag: str, values, validator):
    """:func:`check_value` of a list argument given from Python (:func:`list_text`): the same
    usage error, the same text, as ``FLAG TEXT`` on the command line.

    Raises
    ------
    UsageError
        ``"argument FLAG: expected ..., got 'TEXT'"``.
    """
    return check_value(flag, list_text(values), validator)


INT_RANGE_MAX = 10_000
"""Most values one :func:`int_range` list may hold (a typo such as ``1..10000000000`` would
otherwise build a list of that length before any range check runs)."""


def int_range(text: str, lo: int = -INT_MAX - 1, hi: int = INT_MAX) -> list[int]:
    """Parse ``"3"``, ``"1,2,5"`` or ``"1..8"`` into a list of ints (inclusive range), at most
    :data:`INT_RANGE_MAX` values, each in ``lo..hi``. Items are separated by one comma or one
    space (:func:`_items`), no empty item, each integer in the form :data:`_INT` (the rule of
    :func:`token_ids` too)."""
    out: list[int] = []
    each = f", each an integer in {lo}..{hi}"
    form = f"expected N, N,M,... or A..B with A <= B{each}, got {text!r}"
    try:
        for part in _items(text):
            if ".." in part:
                a_text, b_text = part.split("..", 1)
                a, b = _strict_int(a_text), _strict_int(b_text)
                if b < a or a < lo or b > hi:
                    raise ValueError
                if len(out) + b - a + 1 > INT_RANGE_MAX:
                    raise argparse.ArgumentTypeError(
                        f"expected at most {INT_RANGE_MAX} values, got {text!r}")
                out.extend(range(a, b + 1))
            else:
                v = _strict_int(part)
                if not lo <= v <= hi:
                    raise ValueError
                out.append(v)
    except ValueError:
        raise argparse.ArgumentTypeError(form) from None
    return out


def int_list(lo: int, hi: int = INT_MAX):
    """``type=`` validator factory: :func:`int_range` with every value in ``lo..hi``."""
    def check(text: str) -> list[int]:
        return int_range(text, lo, hi)
    return check


def fraction(text: str) -> float:
    """``type=`` validator: a number in [0, 1] (``--drop-cold-experts F``; the engine refuses F
    outside it, bmoe-engine.md §3.6)."""
    return _number(text, strict_float, lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]")


def percent(text: str) -> float:
    """``type=`` validator: a percentage in [0, 100] (``refsim memory --hit-pct``)."""
    return _number(text, strict_float, lambda v: 0.0 <= v <= 100.0, "a percentage in [0, 100]")


def check_choice(flag: str, value, choices) -> None:
    """Refuse ``value`` not among ``choices`` for ``flag`` with argparse's own message for a
    ``choices=`` flag (``argument --numerics: invalid choice: ...``), the text of this Python's
    argparse (its wording differs between versions), so a library check reads as the CLI's.

    Raises
    ------
    UsageError
    """
    if value in choices:
        return
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    parser.add_argument(flag, choices=choices)
    try:
        parser.parse_args([flag, str(value)])
    except argparse.ArgumentError as exc:
        raise UsageError(str(exc)) from None
    raise UsageError(f"argument {flag}: invalid choice: {value!r}")   # pragma: no cover
