"""The ``--device`` flags every what-if command shares (docs/timing.md): a fitted device model
turns the command's counters into predicted s/token and tok/s. Not a subcommand."""

from __future__ import annotations

from refsim.cli.common import positive_int
from refsim.timing.defaults import DEFAULT_EPS, DEFAULT_IO_THREADS
from refsim.timing.device_options import DeviceOptions, gguf_names, trace_names  # noqa: F401  (re-exported)
from refsim.validators import position_cost


def add_device_args(p, positions: bool = True):
    """Add ``--device``, ``--device-model``, ``--io-threads``, ``--overlap`` and (``positions``:
    for a command whose decodes may carry several positions) ``--position-cost``; returns the
    argument group, for a command's own device flags."""
    g = p.add_argument_group("time on a device (predicted; docs/timing.md)")
    g.add_argument("--device", metavar="DEVICE.json",
                   help="a device model from refsim timing fit: also print predicted s/token and "
                        "tok/s (predictions, never measurements)")
    g.add_argument("--device-model", metavar="KEY",
                   help="which of the device's compute floors stands for this model (default: "
                        "the input's own model's, by file name; else the device's only one, with a "
                        "warning when the input names another model)")
    g.add_argument("--io-threads", type=positive_int, default=DEFAULT_IO_THREADS, metavar="L",
                   help="with --device: I/O lanes (default 4, the engine's)")
    g.add_argument("--overlap", action="store_true",
                   help="with --device: the engine's --overlap (reads overlapped with compute)")
    if positions:
        g.add_argument("--position-cost", type=position_cost, default=None, metavar="EPS",
                       help=f"with --device: compute of each extra verify position as a fraction "
                            f"of one position's (default: the device file's own, identified from "
                            f"its runs' prefills by timing fit --gguf; else {DEFAULT_EPS}, "
                            f"assumed: docs/timing.md)")
    return g


def load_device_args(args, defer: bool = False):
    """``(device, name, model)`` from the parsed flags, or None without ``--device``: loaded and
    checked before the command's work (:meth:`refsim.timing.device_options.DeviceOptions.load`;
    ``defer``: the command calls :func:`for_input` once its input is read). ``--io-threads`` and
    ``--overlap`` without ``--device`` are refused unless ``--model`` (replay: the requests'
    lanes, docs/io.md) uses them."""
    lanes_used = getattr(args, "io_model", None) is not None   # replay --model: requests, lanes
    return DeviceOptions.from_args(args).load(lanes_used, defer)


def for_input(args, loaded, input_models):
    """:meth:`refsim.timing.device_options.DeviceOptions.for_input` of the parsed flags: the
    compute floor of the input's model when the device knows it (:func:`warn_input_model` says,
    after the work, when the device knows only another)."""
    return DeviceOptions.from_args(args).for_input(loaded, input_models)


def warn_input_model(args, loaded, input_models) -> None:
    """Print ``refsim CMD: warning: the input's model is ...`` (the CLI's handler of the
    ``refsim.timing`` logger) when the device prices another model's compute floor
    (:meth:`~refsim.timing.device_options.DeviceOptions.input_warning`); nothing otherwise.
    Called after the command's work, as the below-T warning: a refused input's error stays the
    only stderr line."""
    text = DeviceOptions.from_args(args).input_warning(loaded, input_models)
    if text is not None:
        import logging
        logging.getLogger("refsim.timing").warning(text)



def device_figures(args, loaded, mib_per_token: float, tokens_per_decode: float = 1.0,
                   draft_s_per_token: float = 0.0, cache: bool = True,
                   positions_per_decode: float | None = None, width: int | None = None):
    """The :class:`refsim.timing.whatif.DeviceWhatIf` of a what-if, or None without ``--device``
    (:meth:`~refsim.timing.device_options.DeviceOptions.figures`; ``width``: a drafted decode's
    positions, for its eps)."""
    return DeviceOptions.from_args(args).figures(loaded, mib_per_token, tokens_per_decode,
                                                 draft_s_per_token, cache, positions_per_decode,
                                                 width)


def verify_width(events) -> int:
    """Positions of a trace's widest target decode (``1 + --draft`` when it drafted; 1 without
    speculation): the width a drafted decode's extra positions are priced at."""
    from refsim.events import DecodeKind
    return max((e.n_pos for e in events if e.kind in (DecodeKind.PLAIN, DecodeKind.VERIFY)),
               default=1)


def eps_line(args, loaded, widths) -> str:
    """What the extra positions are priced at, for a header line: ``--position-cost``'s value,
    the device file's eps at each of ``widths``, or the labelled default. ``args``: the parsed
    flags, or a :class:`DeviceOptions`."""
    opts = args if isinstance(args, DeviceOptions) else DeviceOptions.from_args(args)
    terms = {w: opts.eps_term(loaded, w) for w in widths if w > 1}
    if not terms:
        return "no extra positions"
    kinds = {t.kind for t in terms.values()}
    if kinds == {"fitted"}:
        return "extra position eps(w) x C from the device file (" + ", ".join(
            f"w={w} {t.value:.3f}" for w, t in terms.items()) + ")"
    v = next(iter(terms.values())).value
    why = "--position-cost" if opts.position_cost is not None else "assumed: the device file does not identify it"
    return f"extra position {v:g} x C ({why})"


def n_target_decodes(trace) -> int:
    """Target decodes (plain and verify) among a route trace's events."""
    from refsim.events import DecodeKind
    return sum(e.kind in (DecodeKind.PLAIN, DecodeKind.VERIFY) for e in trace.events)


def tokens_per_decode(trace, tokens: int) -> float:
    """Confirmed tokens per target decode of a route trace, or of a streamed one (its counted
    ``n_decodes``): 1 without speculation; >= 1."""
    decodes = getattr(trace, "n_decodes", None)
    if decodes is None:
        decodes = n_target_decodes(trace)
    return max(1.0, tokens / decodes) if decodes else 1.0


def n_target_positions(trace) -> int:
    """Positions of a route trace's target decodes (plain: 1; verify: 1 + its drafts, rejected
    ones included: the verify batch the engine computes)."""
    from refsim.events import DecodeKind
    return sum(e.n_pos for e in trace.events if e.kind in (DecodeKind.PLAIN, DecodeKind.VERIFY))


def positions_per_decode(trace) -> float:
    """Positions per target decode of a route trace, or of a streamed one (its counted
    ``n_positions`` and ``n_decodes``): 1 without speculation; the compute a verify decode pays
    (issue 29 item 1: per position, not per confirmed token)."""
    decodes = getattr(trace, "n_decodes", None)
    positions = getattr(trace, "n_positions", None)
    if decodes is None:
        decodes, positions = n_target_decodes(trace), n_target_positions(trace)
    return max(1.0, positions / decodes) if decodes else 1.0
