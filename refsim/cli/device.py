"""The ``--device`` flags every what-if command shares (docs/timing.md): a fitted device model
turns the command's counters into predicted s/token and tok/s. Not a subcommand."""

from __future__ import annotations

from refsim.cli.common import nonneg_float, positive_int
from refsim.timing.defaults import DEFAULT_EPS, DEFAULT_IO_THREADS


def add_device_args(p, positions: bool = True):
    """Add ``--device``, ``--device-model``, ``--io-threads``, ``--overlap`` and (``positions``:
    for a command whose decodes may carry several positions) ``--position-cost``; returns the
    argument group, for a command's own device flags."""
    g = p.add_argument_group("time on a device (predicted; docs/timing.md)")
    g.add_argument("--device", metavar="DEVICE.json",
                   help="a device model from refsim timing fit: also print predicted s/token and "
                        "tok/s (predictions, never measurements)")
    g.add_argument("--device-model", metavar="KEY",
                   help="which of the device's compute floors stands for this model (default: its "
                        "only one)")
    g.add_argument("--io-threads", type=positive_int, default=DEFAULT_IO_THREADS, metavar="L",
                   help="with --device: I/O lanes (default 4, the engine's)")
    g.add_argument("--overlap", action="store_true",
                   help="with --device: the engine's --overlap (reads overlapped with compute)")
    if positions:
        g.add_argument("--position-cost", type=nonneg_float, default=DEFAULT_EPS, metavar="EPS",
                       help=f"with --device: compute of each extra verify position as a fraction "
                            f"of one position's (default {DEFAULT_EPS}; docs/timing.md)")
    return g


def load_device_args(args):
    """``(device, name, model)`` from the parsed flags, or None without ``--device``: loaded and
    checked before the command's work (a bad device file costs nothing). ``--io-threads`` and
    ``--overlap`` without ``--device`` are refused unless ``--model`` (replay: the requests'
    lanes, docs/io.md) uses them."""
    if getattr(args, "device", None) is None:
        from refsim.errors import UsageError
        lanes_used = getattr(args, "io_model", None) is not None   # replay --model: requests, lanes
        for flag, given in (("--device-model", args.device_model is not None),
                            ("--io-threads", args.io_threads != DEFAULT_IO_THREADS and not lanes_used),
                            ("--overlap", args.overlap and not lanes_used),
                            ("--position-cost",
                             getattr(args, "position_cost", DEFAULT_EPS) != DEFAULT_EPS)):
            if given:
                raise UsageError(f"{flag} without --device: it sets the device model's what-if")
        return None
    from refsim.timing import load_device
    from refsim.timing.whatif import resolve_model
    dev = load_device(args.device)
    return dev, args.device, resolve_model(dev, args.device_model)


def device_figures(args, loaded, mib_per_token: float, tokens_per_decode: float = 1.0,
                   draft_s_per_token: float = 0.0, cache: bool = True):
    """The :class:`refsim.timing.whatif.DeviceWhatIf` of a what-if, or None without ``--device``."""
    if loaded is None:
        return None
    from refsim.timing.whatif import device_whatif
    dev, name, model = loaded
    return device_whatif(dev, name, mib_per_token, tokens_per_decode, model, args.io_threads,
                         args.overlap, cache, args.position_cost, draft_s_per_token)


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


def run_times(args, loaded, result):
    """``refsim run --device``: the run's per-decode predicted times for its metrics CSV
    (:func:`refsim.timing.whatif.predicted_run_times`; the device named by its file's base name),
    or None without ``--device``."""
    if loaded is None:
        return None
    import os
    from refsim.timing.whatif import predicted_run_times
    dev, name, model = loaded
    return predicted_run_times(dev, os.path.basename(name), result, model, args.io_threads,
                               args.overlap, args.position_cost)
