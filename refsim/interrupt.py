"""Ctrl-C that never lands inside an import (docs/cli.md, "Outputs, -, numbers, Ctrl-C"): the
CLI's, kept outside ``refsim.cli`` so that ``refsim --version`` imports no ``refsim.cli.*`` module
(tests/test_startup.py).

Python turns SIGINT into a KeyboardInterrupt at the next bytecode, wherever that is. Inside an
import that does harm a command cannot repair afterwards:

- a C extension whose initialisation imports a module replaces the KeyboardInterrupt with an
  ImportError: numpy's ``_multiarray_umath`` imports ``datetime`` through ``PyCapsule_Import``
  and numpy then raises its 50-line "bad install" ImportError; numba's extensions report
  ``numba._devicearray failed to import``;
- importlib's module-lock callback reports it as "Exception ignored in ..." and the command runs
  on as if no Ctrl-C had come.

:class:`DeferredInterrupt`, which :func:`refsim.cli.main` holds for the whole command, therefore
defers a Ctrl-C that arrives inside an import: the SIGINT handler notes it and arms a 5 ms
``SIGALRM`` timer, and the timer's handler raises the KeyboardInterrupt at its first tick outside
every import (the import has finished; the command unwinds as for any Ctrl-C, its temporary files
removed). A Ctrl-C outside imports raises at once, as Python's own handler does.

When SIGINT is ignored on entry (a shell's background job, ``nohup``), nothing is installed: the
command ignores Ctrl-C as its parent asked. The window before :func:`refsim.cli.main` runs --
Python's own start-up (``site``, ``.pth`` files, ``runpy`` finding the module) and the import of
the small ``refsim.cli`` package -- is the interpreter's, outside any program's reach.

:func:`run_interruptible` gives a script (``tools/*.py``) the CLI's behaviour: its ``main`` under
:class:`DeferredInterrupt`, and a Ctrl-C ends it with the CLI's one line
(:func:`report_interrupted`) and exit 130, never a traceback.
"""

from __future__ import annotations

import signal
import sys

INTERRUPTED_EXIT = 130
"""Exit code after a Ctrl-C (128 + SIGINT, the shell's convention)."""

RETRY_S = 0.005
"""Seconds between two checks of a deferred Ctrl-C (the ``SIGALRM`` timer's period)."""

_IMPORT_FILES = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")
"""``co_filename`` of importlib's frames: a frame chain holding one is inside an import."""


class DeferredInterrupt:
    """Context manager: while it is held, a SIGINT raises KeyboardInterrupt outside imports only.

    Parameters
    ----------
    top : frame, optional
        The frame holding the context (``sys._getframe()`` in :func:`refsim.cli.main`); the
        search for importlib frames stops there, because a command started by ``python -m
        refsim`` runs entirely inside the import of ``refsim.cli.__main__``.

    Notes
    -----
    Installed only in the main thread (where Python runs signal handlers) and only when SIGINT
    has Python's default handler; the previous handlers of SIGINT and SIGALRM are restored on
    exit. A Ctrl-C still deferred when the block ends (its import was the block's last work)
    raises KeyboardInterrupt at the exit.
    """

    def __init__(self, top=None):
        self._top = top
        self._pending = False
        self._installed = False
        self._alarm_previous = None

    def __enter__(self) -> "DeferredInterrupt":
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return self                 # ignored (a background job) or someone else's handler
        try:
            signal.signal(signal.SIGINT, self._on_sigint)
        except ValueError:              # not the main thread: Python delivers nothing here
            return self
        self._installed = True
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self._installed:
            return False
        signal.setitimer(signal.ITIMER_REAL, 0)
        if self._alarm_previous is not None:
            signal.signal(signal.SIGALRM, self._alarm_previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self._installed = False
        if self._pending and exc_type is None:
            self._pending = False
            raise KeyboardInterrupt
        return False

    def _inside_import(self, frame) -> bool:
        while frame is not None and frame is not self._top:
            if frame.f_code.co_filename in _IMPORT_FILES:
                return True
            frame = frame.f_back
        return False

    def _arm(self) -> None:
        if self._alarm_previous is None:
            self._alarm_previous = signal.signal(signal.SIGALRM, self._on_alarm)
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)

    def _on_sigint(self, signum, frame) -> None:
        if self._inside_import(frame):
            self._pending = True
            self._arm()
            return
        self._pending = False
        raise KeyboardInterrupt

    def _on_alarm(self, signum, frame) -> None:
        if not self._pending:
            return
        if self._inside_import(frame):
            self._arm()
            return
        self._pending = False
        raise KeyboardInterrupt


def report_interrupted(name: str) -> int:
    """Print the one Ctrl-C line, ``NAME: interrupted (outputs not completed were not written)``,
    on stderr (a closed stderr is ignored) and return :data:`INTERRUPTED_EXIT`. ``name`` is
    ``refsim CMD`` for the CLI, a script's file name for a tool."""
    try:
        print(f"{name}: interrupted (outputs not completed were not written)", file=sys.stderr)
    except OSError:
        pass
    return INTERRUPTED_EXIT


def run_interruptible(main, *args, name: str | None = None) -> int:
    """``main(*args)`` as the CLI runs a command: under :class:`DeferredInterrupt` (a Ctrl-C
    inside an import lands after it), and a Ctrl-C prints :func:`report_interrupted`'s line and
    returns :data:`INTERRUPTED_EXIT`; a :class:`refsim.errors.RefsimError` prints the CLI's one
    line ``NAME: error: MESSAGE`` and returns 1 (2 for a :class:`~refsim.errors.UsageError`). For a script's ``if __name__ == "__main__":
    sys.exit(run_interruptible(main))``.

    Parameters
    ----------
    main : callable
        The script's entry point; its return value (an exit code or None) is returned.
    name : str, optional
        How the line names the script (default: ``sys.argv[0]``'s base name, as argparse's
        ``prog``).
    """
    import os
    from refsim.errors import RefsimError, UsageError
    name = name or os.path.basename(sys.argv[0])
    try:
        with DeferredInterrupt(sys._getframe()):
            return main(*args)
    except KeyboardInterrupt:
        return report_interrupted(name)
    except RefsimError as exc:      # the CLI's form and codes (refsim.cli._run)
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
