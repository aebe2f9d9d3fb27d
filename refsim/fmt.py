"""How refsim prints numbers: one helper for ratios over zero events, unmeasured counters and
small values, used by every report (CLI text, tables, CSVs, JSON).

Rules (docs/telemetry.md "Undefined and unmeasured values", docs/cli.md "Conventions"):

- A **ratio over zero events** (a decode-only hit rate of a trace with no decode, MiB per token
  with no token, the acceptance of a cell that never drafted) is undefined, not 0: the library
  returns ``None`` (:func:`ratio`, :func:`pct`), text prints :data:`NA` (``n/a``), JSON ``null``,
  and a numeric CSV column ``nan`` (:func:`csv_num`: still a float to every CSV reader, never a
  plausible 0.000).
- A **counter refsim does not measure** (flash I/O seconds, cache-management seconds, MiB/s of
  flash reads in a simulation) is ``n/a`` in text; files in the engine's formats keep the
  engine's numeric placeholder (documented per file in docs/telemetry.md).
- A **small value keeps its significant digits** (:func:`num`): ``decimals`` fraction digits, or
  more when fewer than ``sig`` significant digits would show (T = 0.021 MiB, not ``0.0``).
- A **budget** in MiB prints as the shortest decimal that converts back to the same whole bytes
  by the rule of ``--cache-mb`` (``int(MiB * 2**20)``; :func:`budget_mib`): ``--cache-mb 0.1`` is
  104,857 bytes and prints ``0.1``, not ``0.0999994``.
"""

from __future__ import annotations

import math
import re

from refsim import MIB

FLOAT_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)",
                        re.IGNORECASE)
"""The one form of a number read from text (a flag, a list item): ASCII decimal or exponent
notation, ``inf`` or ``nan`` -- the inverse of what this module prints. ``float()`` also takes
``1_0``, non-ASCII digits and surrounding spaces (docs/cli.md "Numbers")."""


def strict_float(text: str) -> float:
    """``float(text)`` when ``text`` is in the form :data:`FLOAT_TEXT`.

    Raises
    ------
    ValueError
        Any other text (``1_0``, ``\u0663``, `` 3``), or not a string.
    """
    if not isinstance(text, str) or not FLOAT_TEXT.fullmatch(text):
        raise ValueError(text)
    return float(text)


NA = "n/a"
"""Text of an undefined ratio or an unmeasured counter."""

CSV_NA = "nan"
"""What a numeric CSV column holds for an undefined ratio (``float("nan")`` reads it)."""


def ratio(num: float, den: float) -> float | None:
    """``num / den``, or ``None`` when ``den`` is 0 (the ratio over zero events is undefined)."""
    return num / den if den else None


def pct(num: float, den: float) -> float | None:
    """``100 * num / den``, or ``None`` when ``den`` is 0."""
    return 100.0 * num / den if den else None


def num(x: float | None, decimals: int = 1, sig: int | None = 2) -> str:
    """``x`` with ``decimals`` fraction digits, or more so that a nonzero value shows at least
    ``sig`` significant digits (``sig=None``: exactly ``decimals``, the fixed printf format of a
    line copied byte for byte from the engine); ``None`` prints :data:`NA`.

    Examples
    --------
    >>> num(250.25, 1), num(0.84375, 1), num(0.0206, 1), num(0.0, 2), num(None)
    ('250.2', '0.84', '0.021', '0.00', 'n/a')
    >>> num(0.99609375, 0), num(0.0996, 1)
    ('1.0', '0.10')
    >>> num(0.0206, 1, sig=None)
    '0.0'
    """
    if x is None:
        return NA
    x = float(x)
    if sig is None or x == 0 or not math.isfinite(x):
        return f"{x:.{decimals}f}"
    first = math.floor(math.log10(abs(x)))          # position of the first significant digit
    places = max(decimals, sig - 1 - first)
    text = f"{x:.{places}f}"
    if places > decimals and abs(float(text)) >= 10.0 ** (first + 1):
        text = f"{x:.{places - 1}f}"                # rounding carried (0.996 -> 1.0, not 1.00)
    return text


def pct_text(x: float | None, decimals: int = 1) -> str:
    """A percentage as ``44.2%`` (:func:`num`), or ``n/a`` (no percent sign) for ``None``."""
    return NA if x is None else f"{num(x, decimals)}%"


def csv_num(x: float | None, decimals: int) -> str:
    """A numeric CSV field with ``decimals`` fraction digits (the column's fixed format), or
    :data:`CSV_NA` for ``None``."""
    return CSV_NA if x is None else f"{float(x):.{decimals}f}"


def plural(n: int, noun: str) -> str:
    """``n`` and ``noun``, with an ``s`` unless ``n`` is 1.

    Examples
    --------
    >>> plural(1, "lane"), plural(4, "lane"), plural(0, "lane")
    ('1 lane', '4 lanes', '0 lanes')
    """
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def budget_mib(budget_bytes: int) -> str:
    """A byte budget as the shortest MiB text ``t`` with ``int(float(t) * 2**20) == budget_bytes``
    (the conversion of ``--cache-mb``, ``ExpertCache.mib_to_bytes``), so the text given back as
    ``--cache-mb`` is the same budget (for every ``budget_bytes <= 2**53``; above it a float
    cannot name every byte count, and the nearest float's text is printed).

    Examples
    --------
    >>> budget_mib(104857), budget_mib(4 << 20), budget_mib(262144000)
    ('0.1', '4', '250')
    """
    b = int(budget_bytes)
    for decimals in range(0, 21):                   # 20 fraction digits: exact for any b / 2**20
        text = f"{b / MIB:.{decimals}f}"
        if int(float(text) * MIB) == b:
            return text
    return repr(b / MIB)


__all__ = ["FLOAT_TEXT", "strict_float", "NA", "CSV_NA", "ratio", "pct", "num", "pct_text",
           "csv_num", "plural", "budget_mib"]
