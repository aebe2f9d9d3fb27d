"""Shared flags and helpers for the subcommands.

The CLI's one convention (docs/cli.md "Conventions", generated from tools/make_cli_doc.py): a value
the flag does not accept is a usage error, exit 2, ``argument FLAG: expected RANGE, got 'TEXT'``,
with one RANGE text per flag meaning, from the ``type=`` validators of :mod:`refsim.validators`
(re-exported here); a bound another flag sets is checked after parsing by :func:`check_value` with
the same text (:class:`refsim.errors.UsageError`).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys

from refsim.errors import ConfigError, UsageError
from refsim.fileio import STDOUT, check_outputs, check_writable  # noqa: F401  (check_outputs: re-exported)
from refsim.spec.constants import NGRAM_MAX_MATCH
from refsim.streaming.knobs import MAX_PREFETCH
from refsim.validators import (INT_MAX, INT_RANGE_MAX, MIB_RANGE, cache_mib,  # noqa: F401  (re-exported
                               check_value, draft_width, fraction, int_in, int_list,  # for the
                               int_range, mib, nonneg_float, nonneg_int, percent,  # subcommands)
                               positive_float, positive_int, positive_mib, probability, seed,
                               token_id, token_ids)


NUMBER_ARGUMENT = re.compile(r"^-(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|inf|infinity|nan)([,:]\S*)?$",
                             re.IGNORECASE)
"""A command-line word that is a negative number (``-1``, ``-1e5``, ``-.5``, ``-inf``, ``-nan``),
or a list or range that starts with one (``-5,100``, ``-5:100:5``): every parser reads it as a
flag's value, not as an unknown flag, so ``--cache-mb -inf``, ``--cache-mb -1`` and ``sweep
--cache-mb -5,100`` are refused by the flag's validator naming the bad item (argparse's own rule
knows only ``-1`` and ``-1.5``). Installed by :func:`refsim.cli.make_parser`."""


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
    g.add_argument("--spec-policy", default=None, metavar="NAME[:K=V,...]",
                   help="draft policy: how many draft tokens each step verifies (fixed, backoff, "
                        "cost, union; docs/spec-policies.md; default fixed)")


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
    """Warn on stderr (once) when budgets are below one token cycle T (bytes): the line of
    :func:`refsim.cache.summary.below_token_cycle_warning`, if any."""
    from refsim.cache.summary import below_token_cycle_warning
    line = below_token_cycle_warning(cmd, budgets_bytes, t_bytes)
    if line is not None:
        print(line, file=sys.stderr)


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
    k : int or None
        The routing's effective top-k (the trace's or model's ``n_expert_used``); None: no
        warning here (``refsim run`` knows k only once :func:`refsim.session.simulate` has opened
        the model, and it gives the warning then).
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
    warning = low_topk_warning(knobs, k) if k is not None else None
    if warning:
        from refsim.errors import warning_line
        print(warning_line(getattr(args, "command", None) or cmd, warning), file=sys.stderr)
    return knobs
