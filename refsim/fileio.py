"""Atomic file output: every file refsim writes appears complete or not at all.

A run interrupted or failing midway never leaves a half-written trace, CSV, plot or model
behind, and never clobbers an earlier good file (write to a temporary file in the destination's
folder, then rename it over the destination; ``os.replace`` is atomic on POSIX and Windows).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from refsim.errors import ConfigError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | os.PathLike, what: str = "output", suffix: str = ".tmp") -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` when the block succeeds.

    Parameters
    ----------
    path : str or path-like
        Destination file.
    what : str
        How to name the destination in an error (a flag such as ``--csv``).
    suffix : str
        Suffix of the temporary file (some writers choose the format from it, e.g. ``.png``).

    Raises
    ------
    ConfigError
        If the destination's folder cannot be written (names ``what`` and the path).
    """
    tmp = _temp_beside(os.fspath(path), what, suffix)
    path = os.fspath(path)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _temp_beside(path: str, what: str, suffix: str) -> str:
    """Create an empty temporary file in ``path``'s folder and return its name; ConfigError naming
    ``what`` and ``path`` if ``path`` is a folder or its folder cannot be written."""
    if path == "" or path.endswith(os.sep) or (os.altsep and path.endswith(os.altsep)):
        raise ConfigError(f"{what} {path!r}: expected a file name")
    if os.path.isdir(path):
        raise ConfigError(f"{what} {path}: is a folder; expected a file name")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".refsim-", suffix=suffix, dir=folder)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write here: {exc.strerror}") from None
    os.close(fd)
    return tmp


def check_writable(path: str | os.PathLike | None, what: str = "output") -> None:
    """Fail now, before any work, if :func:`atomic_path` would later refuse ``path``.

    A command calls it for every output flag before computing, so that a bad ``--csv`` costs
    nothing and no other output is written. ``None`` (flag not given) passes.

    Raises
    ------
    ConfigError
        The messages of :func:`atomic_path`: ``"<what> <path>: is a folder; expected a file name"``
        or ``"<what> <path>: cannot write here: <reason>"``.
    """
    if path is None:
        return
    os.unlink(_temp_beside(os.fspath(path), what, ".check"))


def write_text_atomic(path: str | os.PathLike, text: str, what: str = "output") -> None:
    """Write ``text`` (UTF-8, ``\\n`` line ends) to ``path`` atomically; see :func:`atomic_path`."""
    with atomic_path(path, what) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
