"""Output files: a file refsim writes appears complete or not at all, and what is at the path is
never destroyed.

The rule, by what the output path names (resolved with :func:`resolve_output`, checked before any
work by :func:`check_writable`):

- a **regular file or a new path**: written to a temporary file in the folder of the *resolved*
  path (symlinks followed), then renamed over it (``os.replace``, atomic on POSIX). A symlink
  therefore keeps pointing at its target and the target is replaced; an existing file keeps its
  permission bits (a new file gets ``0666 & ~umask``). A run that fails midway leaves the earlier
  file untouched and no temporary behind. (A replaced file is a new inode: other hard links to
  the old one keep the old content.)
- **anything else writable** — a FIFO, a character device (``/dev/null``, a terminal), any path
  under ``/dev/`` or ``/proc/`` (``/dev/stdout``, ``/dev/fd/N``: these name open descriptors, and
  a rename there would replace the descriptor's target, not write to it): opened and written
  directly, streamed as it is produced.
- ``-``: standard output, for every **text** output. A binary output (a GGUF, a PNG plot) refuses
  ``-`` (binary bytes on a terminal are noise and mixed with the text report they are a corrupt
  file); name ``/dev/stdout`` to stream one on purpose.
- a **folder**, a path whose folder is missing or not writable, or an existing file or device
  without write permission: refused (:class:`refsim.errors.ConfigError`) before any work.

A write that fails (``ENOSPC`` on ``/dev/full`` or a full disk, ``EIO``) is a one-line
ConfigError naming the flag, the path and the system's reason, never a traceback.
"""

from __future__ import annotations

import enum
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

from refsim.errors import ConfigError

STDOUT = "-"
"""The output path that means standard output (text outputs only)."""

_DESCRIPTOR_ROOTS = ("/dev/", "/proc/")


class OutputKind(enum.Enum):
    """How :func:`open_output` / :func:`atomic_path` write a destination."""

    REPLACE = "replace"   # regular file or new path: temporary file + rename
    DIRECT = "direct"     # FIFO, device, /dev/... or /proc/...: opened and written in place
    STDOUT = "stdout"     # "-": sys.stdout


@dataclass(frozen=True)
class OutputTarget:
    """A checked output destination.

    Attributes
    ----------
    path : str
        As given (used in messages).
    kind : OutputKind
    real : str
        The file actually written: the resolved path for REPLACE (symlinks followed), ``path``
        for DIRECT, ``"-"`` for STDOUT.
    mode : int or None
        Permission bits to give the new file (REPLACE): the existing file's, or ``None`` for a
        new file (``0666 & ~umask``).
    """

    path: str
    kind: OutputKind
    real: str
    mode: int | None = None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _is_descriptor_path(path: str) -> bool:
    """``path`` is under /dev/ or /proc/, itself or through a symlink on the way (a link to
    ``/dev/stdout`` names the descriptor, even when standard output is a regular file)."""
    p = os.path.abspath(path)
    for _ in range(40):                                # the kernel's own symlink limit
        if p.startswith(_DESCRIPTOR_ROOTS):
            return True
        head, tail = os.path.split(p)
        p = os.path.join(os.path.realpath(head), tail)  # folders resolved, the last hop not yet
        if p.startswith(_DESCRIPTOR_ROOTS):
            return True
        if not os.path.islink(p):
            return False
        p = os.path.abspath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return False


def resolve_output(path: str | os.PathLike, what: str = "output", binary: bool = False) -> OutputTarget:
    """Classify and check an output path (no file is created or opened, so a FIFO is not
    blocked on).

    Parameters
    ----------
    path : str or path-like
        The output as given; ``"-"`` is standard output.
    what : str
        How to name the output in an error (a flag such as ``--csv``).
    binary : bool
        The output is binary (GGUF, PNG): ``"-"`` is refused.

    Returns
    -------
    OutputTarget

    Raises
    ------
    ConfigError
        ``"<what> '': expected a file name"`` (empty or ending in a separator), ``"<what> <path>:
        is a folder; expected a file name"``, ``"<what> -: ... binary ..."`` (``-`` for a binary
        output), ``"<what> <path>: cannot write here: <reason>"`` (folder missing or not
        writable, file or device without write permission).
    """
    path = os.fspath(path)
    if path == STDOUT:
        if binary:
            raise ConfigError(f"{what} -: this output is binary and is not written to standard "
                              f"output; give a file name (or /dev/stdout to stream it on purpose)")
        return OutputTarget(path, OutputKind.STDOUT, STDOUT)
    if path == "" or path.endswith(os.sep) or (os.altsep and path.endswith(os.altsep)):
        raise ConfigError(f"{what} {path!r}: expected a file name")
    try:
        st = os.stat(path)                      # follows symlinks
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot write here: {exc.strerror}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{what} {path}: is a folder; expected a file name")
    if st is not None and (not stat.S_ISREG(st.st_mode) or _is_descriptor_path(path)):
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{what} {path}: cannot write here: permission denied")
        return OutputTarget(path, OutputKind.DIRECT, path)
    if st is None and _is_descriptor_path(path):
        raise ConfigError(f"{what} {path}: cannot write here: no such file or device")
    real = os.path.realpath(path)               # a dangling symlink: its target is created
    if st is not None and not os.access(real, os.W_OK):
        raise ConfigError(f"{what} {path}: cannot write here: the file is not writable "
                          f"(permission denied)")
    made: list[str] = []
    try:                                         # the real test: can a temporary be made there?
        _new_temp(os.path.dirname(real), ".check", made, what, path)
    finally:
        _remove(made)
    return OutputTarget(path, OutputKind.REPLACE, real,
                        None if st is None else stat.S_IMODE(st.st_mode))


def check_writable(path: str | os.PathLike | None, what: str = "output", binary: bool = False) -> None:
    """Fail now, before any work, if ``path`` cannot be written (:func:`resolve_output`).

    A command calls it for every output flag before computing, so that a bad ``--csv`` costs
    nothing and no other output is written. ``None`` (flag not given) passes.

    Raises
    ------
    ConfigError
        The messages of :func:`resolve_output`.
    """
    if path is not None:
        resolve_output(path, what, binary)


def check_outputs(outputs: dict, inputs: dict | None = None, binary: tuple = ("--plot",)) -> None:
    """Fail before any work if an output cannot be written or would overwrite an input or another
    output (the same file by real path), by the rules of this module (the CLI and
    :func:`refsim.session.simulate` check their output flags with it).

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


def _write_failed(what: str, path: str, exc: OSError) -> ConfigError:
    reason = exc.strerror or str(exc)
    return ConfigError(f"{what} {path}: write failed: {reason}")


@contextmanager
def atomic_path(path: str | os.PathLike, what: str = "output", suffix: str = ".tmp") -> Iterator[str]:
    """Yield the name a path-based writer (gguf-py's writer, matplotlib's ``savefig``) writes to.

    For a regular file or a new path that is a temporary file beside the resolved destination,
    renamed onto it (with the old file's permission bits) when the block succeeds and removed
    when it fails; for a FIFO or device it is the path itself (written in place). ``-`` is
    refused: a path-based writer cannot write to ``sys.stdout`` (use :func:`open_output`).

    Parameters
    ----------
    path : str or path-like
        Destination.
    what : str
        How to name the destination in an error (a flag such as ``--out``).
    suffix : str
        Suffix of the temporary file (some writers choose the format from it).

    Raises
    ------
    ConfigError
        The messages of :func:`resolve_output` (with ``binary=True``), or ``"<what> <path>: write
        failed: <reason>"`` when the block raises an OSError (ENOSPC, EIO, ...).
    """
    target = resolve_output(path, what, binary=True)
    if target.kind is OutputKind.DIRECT:
        try:
            yield target.real
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _write_failed(what, target.path, exc) from None
        return
    made: list[str] = []
    try:
        tmp = _new_temp(os.path.dirname(target.real), suffix, made, what, target.path)
        yield tmp
        os.chmod(tmp, target.mode if target.mode is not None else 0o666 & ~_umask())
        os.replace(tmp, target.real)
        made.clear()
    except BaseException as exc:
        _remove(made)
        if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError):
            raise _write_failed(what, target.path, exc) from None
        raise


def _new_temp(folder: str, suffix: str, made: list[str], what: str, path: str) -> str:
    """Create an empty ``.refsim-<random><suffix>`` file (mode 0600) in ``folder``; its name.

    The name is put in ``made`` *before* the file is created, so a Ctrl-C at any moment (even
    between the creation and the return) leaves the caller a name to remove (``tempfile.mkstemp``
    returns the name only after creating the file, a window where a KeyboardInterrupt leaks it).

    Raises
    ------
    ConfigError
        ``"<what> <path>: cannot write here: <reason>"`` if the folder refuses the file.
    """
    import secrets                    # here: its hashlib costs start-up to every command
    while True:
        name = os.path.join(folder, f".refsim-{secrets.token_hex(8)}{suffix}")
        made[:] = [name]
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            return name
        except FileExistsError:
            made.clear()                        # someone else's file: never remove it
        except OSError as exc:
            made.clear()
            raise ConfigError(f"{what} {path}: cannot write here: {exc.strerror}") from None


def _remove(made: list[str]) -> None:
    """Remove the temporaries named in ``made`` (a missing one is fine)."""
    for name in made:
        try:
            os.unlink(name)
        except OSError:
            pass
    made.clear()


@contextmanager
def open_output(path: str | os.PathLike, what: str = "output", binary: bool = False) -> Iterator[IO]:
    """Yield an open file for ``path`` by the rules of this module: ``-`` is ``sys.stdout``
    (flushed, not closed, at the end), a FIFO or device is opened in place, a regular file or new
    path is a temporary file renamed over the resolved destination on success.

    Text files are UTF-8 with ``\\n`` line ends (``newline=""``: a ``csv.writer`` with
    ``lineterminator="\\n"`` and plain ``\\n`` both give ``\\n``).

    Raises
    ------
    ConfigError
        The messages of :func:`resolve_output` and :func:`atomic_path`.
    """
    target = resolve_output(path, what, binary)
    if target.kind is OutputKind.STDOUT:
        try:
            yield sys.stdout
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _write_failed(what, "-", exc) from None
        return
    with atomic_path(target.path, what) as dest:
        with (open(dest, "wb") if binary else open(dest, "w", encoding="utf-8", newline="")) as fh:
            yield fh


def write_text_atomic(path: str | os.PathLike, text: str, what: str = "output") -> None:
    """Write ``text`` (UTF-8, ``\\n`` line ends) to ``path`` by the rules of :func:`open_output`
    (``-`` = standard output)."""
    with open_output(path, what) as fh:
        fh.write(text)


__all__ = ["STDOUT", "OutputKind", "OutputTarget", "resolve_output", "check_writable",
           "atomic_path", "open_output", "write_text_atomic"]
