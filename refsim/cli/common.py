"""Shared flag validators and helpers for the subcommands (argparse ``type=`` functions)."""

from __future__ import annotations

import argparse
import math
import os
import sys

from refsim import MIB
from refsim.errors import ConfigError
from refsim.fileio import check_writable


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


def check_outputs(outputs: dict, inputs: dict | None = None) -> None:
    """Fail before any work if an output cannot be written or would overwrite an input or another
    output (the same file by real path).

    Parameters
    ----------
    outputs : dict of flag -> path or None
        Output flags as given (``None`` = not given; ``""`` is refused).
    inputs : dict of name -> path, optional
        Files the command reads (``TRACE``, ``MODEL``, ...).

    Raises
    ------
    ConfigError
        From :func:`check_output_path`, or ``"--csv x: is also the TRACE input; expected another
        file"`` / ``"--csv x and --route-trace x: the same file; expected two files"``.
    """
    given = {flag: path for flag, path in outputs.items() if path is not None}
    for flag, path in given.items():
        check_output_path(path, flag)
    seen: dict[str, str] = {}
    for name, path in (inputs or {}).items():
        if path:
            seen.setdefault(os.path.realpath(path), name)
    for flag, path in given.items():
        real = os.path.realpath(path)
        if real in seen:
            other = seen[real]
            if other.startswith("--"):
                raise ConfigError(f"{other} {path} and {flag} {path}: the same file; expected two files")
            raise ConfigError(f"{flag} {path}: is also the {other} input; expected another file")
        seen[real] = flag


def check_output_path(path: str | None, flag: str) -> None:
    """Fail before any work if output flag ``flag``'s ``path`` cannot be written
    (:func:`refsim.fileio.check_writable`: the checks :func:`refsim.fileio.atomic_path` makes when
    the file is finally written). ``None`` (flag not given) passes.

    Raises
    ------
    ConfigError
        ``"<flag> <path>: is a folder; expected a file name"`` or ``"<flag> <path>: cannot
        write here: <reason>"``.
    """
    check_writable(path, flag)


def warn_below_token_cycle(cmd: str, budgets_bytes, t_bytes: int) -> None:
    """Warn on stderr (once) when budgets are below one token cycle T (bytes).

    Below T a global LRU evicts, within one token, entries the next layers need, so the hit rate
    collapses toward 0 (docs/cache-studies.md): a number the user may not expect. ``cmd`` names
    the subcommand in the message.
    """
    low = sorted({b for b in budgets_bytes if b < t_bytes})
    if not low:
        return
    shown = ", ".join(f"{b / MIB:g}" for b in low[:5]) + (", ..." if len(low) > 5 else "")
    what = f"budget {shown} MiB is" if len(low) == 1 else f"budgets {shown} MiB are"
    print(f"refsim {cmd}: warning: {what} below one token cycle "
          f"T = {t_bytes / MIB:.1f} MiB: a global LRU evicts what the next layers need, and its "
          f"hit rate collapses toward 0 (exactly 0 once the budget is short of T by more than a "
          f"few entries; docs/cache-studies.md)", file=sys.stderr)


def add_knob_args(parser: argparse.ArgumentParser, prefetch: bool = True,
                  route_ahead: bool = False) -> None:
    """The engine's cache-side knobs: ``--drop-cold-experts F``, ``--drop-no-renorm``,
    ``--drop-in-prefill`` and (unless ``prefetch=False``) ``--prefetch K``.

    Turn them into :class:`refsim.cache.knobs.StreamKnobs` with :func:`knobs_from_args`, which
    applies the engine's validation (ConfigError).
    """
    g = parser.add_argument_group("streaming knobs (the engine's; docs/streaming-knobs.md)")
    g.add_argument("--drop-cold-experts", type=float, default=0.0, metavar="F",
                   help="drop a routed expert that misses the cache, is not the row's top expert and "
                        "weighs below F x 1/k; F in [0, 1], 0 = off (default 0)")
    g.add_argument("--drop-no-renorm", action="store_true",
                   help="do not rescale the surviving weights after a drop (forward pass only)")
    g.add_argument("--drop-in-prefill", action="store_true",
                   help="arm --drop-cold-experts in prefill graphs too")
    if prefetch:
        g.add_argument("--prefetch", type=int, default=0, metavar="K",
                       help="temporal prefetch: at layer l read ahead what the previous token routed "
                            "at layers l+1..l+K; 0..8, 0 = off (default 0)")
    if route_ahead:
        g.add_argument("--route-ahead", type=int, default=0, metavar="N",
                       help="lossy: layer L's experts are layer L's router ranking on layer L-N's "
                            "gate input, read early after layer L-N's load; 0..8, 0 = off "
                            "(default 0). A replay models the early reads of a route-ahead trace")


def knobs_from_args(args, k: int, traced: bool = True, cmd: str = "replay"):
    """:class:`~refsim.cache.knobs.StreamKnobs` from :func:`add_knob_args`'s flags; prints the
    engine's top-k <= 4 warning on stderr when dropping is armed on a narrow routing.

    Parameters
    ----------
    k : int
        The routing's effective top-k (the trace's or model's ``n_expert_used``).
    traced : bool
        Whether the run asks for weights in every graph (a replay models a traced run).

    Raises
    ------
    ConfigError
        For F outside [0, 1] or K outside 0..8 (flag named).
    """
    from refsim.cache.knobs import StreamKnobs, low_topk_warning
    knobs = StreamKnobs(drop_frac=args.drop_cold_experts, drop_renorm=not args.drop_no_renorm,
                        drop_in_prefill=args.drop_in_prefill, traced=traced,
                        prefetch=getattr(args, "prefetch", 0),
                        route_ahead=getattr(args, "route_ahead", 0))
    warning = low_topk_warning(knobs, k)
    if warning:
        print(warning, file=sys.stderr)
    return knobs
