"""A FIFO's reader for tests of outputs written in place (refsim.fileio)."""

from __future__ import annotations

import threading


def read_fifo_in_background(path) -> tuple[threading.Thread, list[bytes]]:
    """Start a daemon thread that opens the FIFO ``path`` for reading (which unblocks the writer's
    open) and reads it to EOF; returns the thread and a list that receives the bytes read.
    ``thread.join(timeout)`` then ``got == [data]``; a daemon, so a writer that never comes does
    not keep the test process alive."""
    got: list[bytes] = []

    def reader():
        with open(path, "rb") as fh:
            got.append(fh.read())
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    return t, got
