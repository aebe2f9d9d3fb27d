"""The flags that add the engine's reads to a replay (docs/io.md): the model file whose tensor
table places every expert slice, the O_DIRECT block, and the requests table. Not a subcommand."""

from __future__ import annotations

import argparse
import csv

from refsim.cli.common import int_in, nonneg_int
from refsim.io.window import ENGINE_BLOCK_BYTES, MAX_BLOCK_BYTES


def block_size(text: str) -> int:
    """``type=`` validator of ``--block-size``: a power of two in 1..2^20 bytes."""
    value = int_in(1, MAX_BLOCK_BYTES, " and a power of two")(text)
    if value & (value - 1):
        raise argparse.ArgumentTypeError(f"expected an integer in 1..{MAX_BLOCK_BYTES} and a power "
                                         f"of two, got {text!r}")
    return value


def add_io_args(p) -> None:
    """Add ``--model``, ``--data-start``, ``--block-size``, ``--o-direct``, ``--merge-gap`` and
    ``--requests``."""
    g = p.add_argument_group("reads as the engine issues them (aligned windows, requests, lanes; "
                             "docs/io.md)")
    g.add_argument("--model", dest="io_model", metavar="GGUF",
                   help="the GGUF the trace was recorded with, or its header-only twin: its "
                        "tensor table places every expert slice, so the replay also counts the "
                        "O_DIRECT windows the engine reads, its requests and their lanes "
                        "(--io-threads, --overlap)")
    g.add_argument("--data-start", type=nonneg_int, metavar="BYTES",
                   help="with --model: the real file's data-section offset, when GGUF is a twin "
                        "whose header differs (only its value modulo the block matters)")
    g.add_argument("--block-size", type=block_size, default=ENGINE_BLOCK_BYTES, metavar="BYTES",
                   help=f"with --model: O_DIRECT alignment (default {ENGINE_BLOCK_BYTES}, the "
                        f"engine's)")
    g.add_argument("--o-direct", type=int_in(0, 1), default=1, metavar="0|1",
                   help="with --model: 1 = O_DIRECT windows (default, the engine's), 0 = buffered "
                        "reads (windows = slices)")
    g.add_argument("--merge-gap", type=nonneg_int, metavar="BYTES",
                   help="with --model: read adjacent slices of one decode and layer whose file "
                        "gap is <= BYTES as one request (one contiguous pread, the gap's bytes "
                        "read too); 0 merges touching slices. Default: off, one request per "
                        "slice, as the engine reads")
    g.add_argument("--requests", metavar="OUT",
                   help="with --model: write every request (CSV: event, layer, order, expert, "
                        "projection, offset, bytes, window, lane) to OUT (- = stdout)")


def check_io_args(args) -> None:
    """Refuse the io flags without ``--model``.

    Raises
    ------
    UsageError
    """
    from refsim.errors import UsageError
    if args.io_model is not None:
        return
    for flag, given in (("--data-start", args.data_start is not None),
                        ("--block-size", args.block_size != ENGINE_BLOCK_BYTES),
                        ("--o-direct", args.o_direct != 1), ("--requests", args.requests is not None),
                        ("--merge-gap", args.merge_gap is not None)):
        if given:
            raise UsageError(f"{flag} without --model: the windows need the model file's tensor "
                             f"offsets")


def io_tally(args, header, where: str, on_requests=None):
    """The :class:`refsim.io.requests.IoTally` the flags ask for, checked against the trace's
    preamble ``header``, or None without ``--model``.

    Raises
    ------
    ModelFormatError
        The GGUF is malformed.
    ConfigError
        The layout's refusals (:func:`refsim.io.layout.layout_from_model`,
        :meth:`~refsim.io.layout.SliceLayout.check_trace`).
    """
    if args.io_model is None:
        return None
    from refsim.io.layout import layout_from_model
    from refsim.io.requests import IoConfig, IoTally
    from refsim.model import open_model
    layout = layout_from_model(open_model(args.io_model), args.block_size, args.o_direct == 1,
                               args.data_start)
    layout.check_trace(header, where)
    return IoTally(layout, IoConfig(args.io_threads, args.overlap, args.merge_gap),
                   on_requests=on_requests)


REQUEST_COLUMNS = ("event", "kind", "layer", "order", "expert", "projection", "offset", "bytes",
                   "window", "lane")


def request_writer(fh, layout):
    """Write the requests table's header to ``fh``; returns ``on_requests(event, kind, req)``
    for :class:`refsim.io.requests.IoTally` (one row per request, in issue order)."""
    w = csv.writer(fh, lineterminator="\n")
    w.writerow(REQUEST_COLUMNS)

    def on_requests(event: int, kind, req) -> None:
        name = kind.name.lower()
        for i in range(req.n):
            il = int(req.layer[i])
            w.writerow([event, name, il, i, int(req.expert[i]),
                        layout.slot_names[il][int(req.slot[i])], int(req.offset[i]),
                        int(req.nbytes[i]), int(req.window[i]), int(req.lane[i])])
    return on_requests
