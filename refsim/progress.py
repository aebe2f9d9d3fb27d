"""Progress bars on standard error for long work (tqdm), shown only when standard error is a
terminal: sweeps over budgets and policies, long ``refsim run`` generations (tokens), big trace
reads (bytes), ``timing fit`` (the jackknife's refits). docs/cli.md, "Progress".

A bar never touches standard output, so a command's output is byte for byte the same with or
without one; it is off when standard error is not a terminal (piped, redirected, under pytest),
with ``--quiet`` and with ``--json`` (the CLI calls :func:`configure`), and it appears only once
the work has run :data:`DELAY_S` seconds (tqdm's ``delay``), so quick work prints nothing. A bar
is erased when its work ends (``leave=False``). tqdm is imported only when a bar is shown.

Use::

    from refsim import progress

    for budget in progress.bar(budgets, desc="lru", unit="budget"):
        ...
    with progress.bar(total=n_bytes, desc="reading", unit="B") as bar:
        bar.update(len(block))
"""

from __future__ import annotations

import os
import sys

DELAY_S = float(os.environ.get("REFSIM_PROGRESS_DELAY", "0.5"))
"""Seconds of work before a bar appears (``REFSIM_PROGRESS_DELAY`` overrides it; 0 shows every
bar at once, which the tests use)."""

_enabled = True


def configure(enabled: bool) -> None:
    """Allow (True, the default) or forbid bars for this process (``--quiet``, ``--json``)."""
    global _enabled
    _enabled = bool(enabled)


def active() -> bool:
    """Whether a bar would be shown now: allowed and standard error is a terminal."""
    if not _enabled:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):      # no stderr, or a closed one
        return False


class suppressed:
    """``with progress.suppressed():`` no new bar is shown inside the block (a bar already open
    goes on): the outer bar of a grid of cells (:func:`refsim.scale.executor.run_cells`) is the
    one shown, not the bars of the work each cell does."""

    def __enter__(self):
        global _enabled
        self._was, _enabled = _enabled, False
        return self

    def __exit__(self, *exc) -> None:
        global _enabled
        _enabled = self._was


class _Silent:
    """What :func:`bar` returns when no bar is shown: the iterable itself, and no-op updates."""

    def __init__(self, iterable=None):
        self._iterable = iterable

    def __iter__(self):
        return iter(self._iterable)

    def update(self, n: float = 1) -> None:
        pass

    def set_description_str(self, desc: str) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def bar(iterable=None, *, total: float | None = None, desc: str = "", unit: str = "it"):
    """A tqdm bar over ``iterable`` (or, without one, a bar of ``total`` units moved by
    ``update(n)``) on standard error when :func:`active`, else an object with the same use that
    prints nothing. ``unit="B"`` counts bytes (shown with tqdm's k/M prefixes, here powers of
    1024: 77.6k = 77.6 KiB)."""
    if not active():
        return _Silent(iterable)
    from tqdm import tqdm
    scaled = unit == "B"
    return tqdm(iterable, total=total, desc=desc, unit=unit, unit_scale=scaled,
                unit_divisor=1024 if scaled else 1000, file=sys.stderr, leave=False,
                delay=DELAY_S, dynamic_ncols=True, mininterval=0.2)
