"""Shared flag validators and helpers for the subcommands (argparse ``type=`` functions).

The CLI's one convention (docs/cli.md "Conventions", generated from tools/make_cli_doc.py): a value
the flag does not accept is a usage error, exit 2, ``argument FLAG: expected RANGE, got 'TEXT'``,
with one RANGE text per flag meaning, from these validators; a bound another flag sets is checked
after parsing by :func:`check_value` with the same text (:class:`refsim.errors.UsageError`).
"""

from __future__ import annotations

import argparse
import io
import math
import os
import re
import sys

from refsim import MIB
from refsim.cache.expert_cache import CACHE_MB_RANGE, MAX_CACHE_MIB, ExpertCache
from refsim.streaming.knobs import MAX_PREFETCH
from refsim.errors import ConfigError, UsageError
from refsim.fileio import STDOUT, OutputKind, check_writable, resolve_output
from refsim.fmt import budget_mib, num
from refsim.spec.constants import DRAFT_MAX_LIMIT, NGRAM_MAX_MATCH, TOKEN_ID_MAX


INT_MAX = 2**31 - 1
"""Largest value of every integer flag: the engine's and llama.cpp's counts and ids are
``int32_t`` (``n_predict``, ``n_ctx``, ``n_ubatch``, ``llama_token``; include/llama.h)."""

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|infinity|nan)",
                    re.IGNORECASE)
NUMBER_ARGUMENT = re.compile(r"^-(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|inf|infinity|nan)([,:]\S*)?$",
                             re.IGNORECASE)
"""A command-line word that is a negative number (``-1``, ``-1e5``, ``-.5``, ``-inf``, ``-nan``),
or a list or range that starts with one (``-5,100``, ``-5:100:5``): every parser reads it as a
flag's value, not as an unknown flag, so ``--cache-mb -inf``, ``--cache-mb -1`` and ``sweep
--cache-mb -5,100`` are refused by the flag's validator naming the bad item (argparse's own rule
knows only ``-1`` and ``-1.5``). Installed by :func:`refsim.cli.make_parser`."""


def _strict_int(text: str) -> int:
    """ASCII decimal digits with an optional sign (``int`` would also take ``1_0``, `` 3`` and
    non-ASCII digits)."""
    if not isinstance(text, str) or not _INT.fullmatch(text):
        raise ValueError(text)
    return int(text)


def _strict_float(text: str) -> float:
    """An ASCII decimal or exponent number, ``inf`` or ``nan`` (``float`` would also take ``1_0``)."""
    if not isinstance(text, str) or not _FLOAT.fullmatch(text):
        raise ValueError(text)
    return float(text)


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
    return _number(text, _strict_float, lambda v: 0 < v < math.inf, "a finite number > 0")


def nonneg_float(text: str) -> float:
    """``type=`` validator: a finite number >= 0 (not MiB; see :func:`mib`)."""
    return _number(text, _strict_float, lambda v: 0 <= v < math.inf, "a finite number >= 0")


MIB_RANGE = "a number of MiB from 0 to 2^40 (1 EiB)"
"""What the other MiB flags accept (``--cache-floor-mb``, ``--cache-ceil-mb``: 0 has a meaning)."""


def mib(text: str) -> float:
    """``type=`` validator: a finite number of MiB in ``0..2**40`` (:data:`MIB_RANGE`)."""
    return _number(text, _strict_float, lambda v: 0 <= v <= MAX_CACHE_MIB, MIB_RANGE)


def positive_mib(text: str) -> float:
    """``type=`` validator: a finite number of MiB in ``(0, 2**40]`` (``--ram-mb``)."""
    return _number(text, _strict_float, lambda v: 0 < v <= MAX_CACHE_MIB,
                   "a number of MiB > 0 and at most 2^40 (1 EiB)")


def cache_mib(text: str) -> float:
    """``type=`` validator of ``--cache-mb``: :data:`refsim.cache.expert_cache.CACHE_MB_RANGE`,
    the bounds :meth:`ExpertCache.mib_to_bytes` applies (one rule for every command)."""
    try:
        value = _strict_float(text)
        ExpertCache.mib_to_bytes(value)
    except (ValueError, ConfigError):
        raise argparse.ArgumentTypeError(f"expected {CACHE_MB_RANGE}, got {text!r}") from None
    return value


def probability(text: str) -> float:
    """``type=`` validator: a probability in [0, 1] (``--mtp-p-min``)."""
    return _number(text, _strict_float, lambda v: 0.0 <= v <= 1.0, "a probability in [0, 1]")


def token_ids(text: str) -> list[int]:
    """``type=`` validator: one or more token ids separated by commas and/or spaces, each
    0..2147483647 (``--prompt-tokens``, ``--corpus``)."""
    expected = f"token ids like 1,5,77, each an integer in 0..{TOKEN_ID_MAX}"
    try:
        ids = [_strict_int(t) for t in text.replace(",", " ").split()]
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


INT_RANGE_MAX = 10_000
"""Most values one :func:`int_range` list may hold (a typo such as ``1..10000000000`` would
otherwise build a list of that length before any range check runs)."""


def int_range(text: str, lo: int = -INT_MAX - 1, hi: int = INT_MAX) -> list[int]:
    """Parse ``"3"``, ``"1,2,5"`` or ``"1..8"`` into a list of ints (inclusive range), at most
    :data:`INT_RANGE_MAX` values, each in ``lo..hi``."""
    out: list[int] = []
    each = f", each an integer in {lo}..{hi}"
    form = f"expected N, N,M,... or A..B with A <= B{each}, got {text!r}"
    try:
        for part in text.split(","):
            part = part.strip()
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
    g.add_argument("--draft", type=draft_width, default=None, metavar="N",
                   help="draft tokens per step, 1..8 (default 3)")
    g.add_argument("--ngram-min-match", type=int_in(1, NGRAM_MAX_MATCH), default=None, metavar="N",
                   help=f"shortest suffix match that drafts, 1..{NGRAM_MAX_MATCH} (default 3)")
    g.add_argument("--mtp-p-min", type=probability, default=None, metavar="F",
                   help="MTP only: stop drafting below this top-1 probability, in [0, 1] (default 0)")


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


def fraction(text: str) -> float:
    """``type=`` validator: a number in [0, 1] (``--drop-cold-experts F``; the engine refuses F
    outside it, bmoe-engine.md §3.6)."""
    return _number(text, _strict_float, lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]")


def percent(text: str) -> float:
    """``type=`` validator: a percentage in [0, 100] (``refsim memory --hit-pct``)."""
    return _number(text, _strict_float, lambda v: 0.0 <= v <= 100.0, "a percentage in [0, 100]")


knob_depth = int_in(0, MAX_PREFETCH)
"""``type=`` validator: ``--prefetch K`` and ``--route-ahead N``, 0..8 (the engine's range,
bmoe-engine.md §3.5)."""


def add_knob_args(parser: argparse.ArgumentParser, prefetch: bool = True,
                  route_ahead: bool = False, predict: bool = False) -> None:
    """The engine's cache-side knobs: ``--drop-cold-experts F``, ``--drop-no-renorm``,
    ``--drop-in-prefill``, (unless ``prefetch=False``) ``--prefetch K``, (``route_ahead``)
    ``--route-ahead N`` and (``predict``) ``--predict-prefetch`` / ``--predict-spec-max M``.

    Turn them into :class:`refsim.streaming.knobs.StreamKnobs` with :func:`knobs_from_args`, which
    applies the engine's validation (ConfigError).
    """
    g = parser.add_argument_group("streaming knobs (the engine's; docs/streaming-knobs.md)")
    g.add_argument("--drop-cold-experts", type=fraction, default=0.0, metavar="F",
                   help="drop a routed expert that misses the cache, is not the row's top expert and "
                        "weighs below F x 1/k; F in [0, 1], 0 = off (default 0)")
    g.add_argument("--drop-no-renorm", action="store_true",
                   help="do not rescale the surviving weights after a drop (forward pass only)")
    g.add_argument("--drop-in-prefill", action="store_true",
                   help="arm --drop-cold-experts in prefill graphs too")
    if prefetch:
        g.add_argument("--prefetch", type=knob_depth, default=0, metavar="K",
                       help="temporal prefetch: at layer l read ahead what the previous token routed "
                            "at layers l+1..l+K; 0..8, 0 = off (default 0)")
    if route_ahead:
        g.add_argument("--route-ahead", type=knob_depth, default=0, metavar="N",
                       help="lossy: layer L's experts are layer L's router ranking on layer L-N's "
                            "gate input, read early after layer L-N's load; 0..8, 0 = off "
                            "(default 0). A replay models the early reads of a route-ahead trace")
    if predict:
        from refsim.streaming.knobs import PREDICT_SPEC_MAX_DEFAULT
        g.add_argument("--predict-prefetch", action="store_true",
                       help="act on the stale-gate prediction (layer L's router on layer L-2's gate "
                            "input): retain its resident experts, read up to --predict-spec-max of "
                            "its misses ahead. run: live; replay: from the trace's pred_expert/"
                            "pred_weight columns (written by run --predict-prefetch --route-trace)")
        g.add_argument("--predict-spec-max", type=knob_depth, default=None, metavar="M",
                       help=f"with --predict-prefetch: predicted misses read ahead per layer, 0..8 "
                            f"(0 = retention only; default {PREDICT_SPEC_MAX_DEFAULT})")


def knobs_from_args(args, k: int, traced: bool = True, cmd: str = "replay"):
    """:class:`~refsim.streaming.knobs.StreamKnobs` from :func:`add_knob_args`'s flags; prints the
    engine's top-k <= 4 warning on stderr when dropping is armed on a narrow routing.

    Parameters
    ----------
    k : int
        The routing's effective top-k (the trace's or model's ``n_expert_used``).
    traced : bool
        Whether the run asks for weights in every graph (a replay models a traced run).

    Raises
    ------
    UsageError
        The engine's validation of the knobs (flag named): F outside [0, 1], K or N outside 0..8,
        ``--prefetch`` with ``--route-ahead``, ``--predict-prefetch`` with either,
        ``--predict-spec-max`` without ``--predict-prefetch``.
    """
    from refsim.streaming.knobs import PREDICT_SPEC_MAX_DEFAULT, StreamKnobs, low_topk_warning
    predict = getattr(args, "predict_prefetch", False)
    spec_max = getattr(args, "predict_spec_max", None)
    if spec_max is not None and not predict:
        raise UsageError("--predict-spec-max: only with --predict-prefetch (it caps the "
                         "predicted misses read ahead)")
    try:
        knobs = StreamKnobs(drop_frac=args.drop_cold_experts, drop_renorm=not args.drop_no_renorm,
                            drop_in_prefill=args.drop_in_prefill, traced=traced,
                            prefetch=getattr(args, "prefetch", 0),
                            route_ahead=getattr(args, "route_ahead", 0),
                            predict_prefetch=predict,
                            predict_spec_max=PREDICT_SPEC_MAX_DEFAULT if spec_max is None else spec_max)
    except ConfigError as exc:        # the engine's validation sees the flags alone: a usage error
        raise UsageError(str(exc)) from None
    warning = low_topk_warning(knobs, k)
    if warning:
        print(warning, file=sys.stderr)
    return knobs
