"""Shared flag validators and helpers for the subcommands (argparse ``type=`` functions)."""

from __future__ import annotations

import argparse


def positive_float(text: str) -> float:
    """``type=`` validator: a finite number > 0, quoting the bad value."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """``type=`` validator: an integer >= 1, quoting the bad value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def int_range(text: str) -> list[int]:
    """Parse ``"3"``, ``"1,2,5"`` or ``"1..8"`` into a list of ints (inclusive range)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if ".." in part:
                lo, hi = part.split("..", 1)
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected N, N,M,... or A..B with A <= B, got {text!r}") from None
    return out
