"""Where Numba keeps refsim's compiled kernels: a folder keyed by refsim's own source, so no kernel
ever runs machine code compiled from an older version of a file it calls.

Why. Numba (0.68) reuses a cached kernel when the kernel's *own* file has the size and modification
time recorded in its index (``numba/core/caching.py``, ``_CacheImpl`` and the index's source stamp);
the functions it calls, inlined from other files, and the module constants it froze at compile
time are not checked. refsim's fused kernels call across files (``forward/qwen3moe.py``'s one-call
decode compiles in ``forward/layers.py``, ``kernels/qdot.py`` and ``kernels/simd.py``), so after an
edit of a callee the caller kept the old code from ``__pycache__``: measured on 2026-12-03, a
Q4_K_M decode ran 87.7 tok/s from a stale cache and 103.8 after the cache was cleared, and a stale
``_decode_one_kernel`` once raised "unsupported ggml type id" for a type the new callee handles
(docs/forward.md, "Speed"). Tests could pass on code that is no longer on disk.

What. :func:`configure` (called where refsim first imports Numba: ``refsim/kernels/__init__.py``, which
every module with ``numba.njit`` kernels imports first, and :mod:`refsim.jit` before it compiles) sets ``NUMBA_CACHE_DIR`` to ``<cache>/numba/<digest>`` when the caller has not set it, where
``<cache>`` is ``$XDG_CACHE_HOME/refsim`` or ``~/.cache/refsim`` and the digest covers the relative
path and content of every ``*.py`` file of the package: any edit of any file gives a fresh folder,
and an unchanged text (a checkout back and forth included) reuses its compiled code across processes.
(A file whose time alone changed is recompiled by Numba's own check, in the same folder.)
Child processes inherit the variable, and so the same folder. ``$REFSIM_CACHE`` (models) is not
used, because tests point it at temporary folders. When the caller set ``NUMBA_CACHE_DIR``, or
the folder cannot be created, nothing is changed (Numba's own rule applies, stale callees included, and
the per-type int tables of ``refsim/kernels/registry.py`` that kernels in other files freeze).
The folders are shared by every refsim tree on the machine; only the :data:`KEEP` newest are kept:
making a new one removes older ones idle for :data:`IDLE_S` seconds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time

KEEP = 6
"""How many digest folders (source versions) stay under ``<cache>/numba``; a new one removes the
older ones beyond this (by modification time), so editing does not fill the disk."""

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def source_digest(root: str = _PACKAGE) -> str:
    """16 hex digits of SHA-256 over the relative path, byte length and bytes of every ``*.py`` file under
    ``root`` (``__pycache__`` skipped), in sorted walk order: the same text gives the same digest whatever the
    files' times. A file that cannot be read is skipped (its path still counts)."""
    h = hashlib.sha256()
    for d, dirs, files in os.walk(root):
        dirs.sort()
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(d, f)
                try:
                    with open(p, "rb") as fh:
                        data = fh.read()
                except OSError:
                    data = b""
                h.update(f"{os.path.relpath(p, root)}\0{len(data)}\0".encode())
                h.update(data)
    return h.hexdigest()[:16]


def base_dir() -> str:
    """``$XDG_CACHE_HOME/refsim/numba`` if that variable is set, else ``~/.cache/refsim/numba``."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return os.path.join(xdg or os.path.join(os.path.expanduser("~"), ".cache"), "refsim", "numba")


IDLE_S = 600
"""A folder beyond the :data:`KEEP` newest is removed only when nothing was written in it (or in its
sub-folders, where Numba puts each source folder's files) for this many seconds, so a process still
compiling into it is not raced. (A process that later saves into a removed folder is safe: Numba makes
the folder again before each save, ``numba/core/caching.py`` ``Cache._save_overload``.)"""


def _last_write(path: str) -> float:
    """Newest modification time of ``path`` and its direct sub-folders (seconds since the epoch)."""
    t = os.stat(path, follow_symlinks=False).st_mtime
    for e in os.scandir(path):
        if e.is_dir(follow_symlinks=False):
            t = max(t, e.stat(follow_symlinks=False).st_mtime)
    return t


def _prune(base: str, keep: str) -> None:
    """Remove digest folders of ``base`` beyond the :data:`KEEP` newest (``keep`` counted first),
    when idle for :data:`IDLE_S` seconds."""
    try:
        entries = [(_last_write(e.path), e.path) for e in os.scandir(base)
                   if e.is_dir(follow_symlinks=False) and e.name != keep]
    except OSError:
        return
    entries.sort(reverse=True)
    now = time.time()
    for t, path in entries[KEEP - 1:]:
        if t < now - IDLE_S:
            shutil.rmtree(path, ignore_errors=True)


SPINCOUNT = "30000"
"""``GOMP_SPINCOUNT`` :func:`configure_openmp` sets: how many times an idle OpenMP worker spins before it sleeps
(a few hundred microseconds on this project's 2-core VM; libgomp's own default is 300000)."""


def configure_openmp(environ=os.environ) -> None:
    """OpenMP defaults for Numba's parallel kernels, unless the caller chose: ``OMP_WAIT_POLICY=PASSIVE`` (idle
    workers sleep) and, when neither variable is set, ``GOMP_SPINCOUNT=`` :data:`SPINCOUNT` (they spin that long
    first). libgomp reads them when Numba first starts its thread pool, so this must run before that
    (``refsim/kernels/__init__.py`` calls it first). Why these values (a worker spinning for milliseconds takes
    the core the main thread needs on a shared 2-core machine; one that sleeps at once costs ~100 us to wake
    for the next of a decode's ~40 parallel regions): docs/forward.md, "OpenMP workers between parallel
    regions"."""
    if "OMP_WAIT_POLICY" not in environ and "GOMP_SPINCOUNT" not in environ:
        environ["GOMP_SPINCOUNT"] = SPINCOUNT
    environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def configure(root: str = _PACKAGE) -> str | None:
    """Set ``NUMBA_CACHE_DIR`` to the folder of the source tree ``root`` (default: refsim's package)
    unless the caller set it (see the module docstring); returns the folder in use by this rule, or None
    when the caller's setting or Numba's default applies. If Numba is already imported, its configuration is re-read so that kernels
    decorated from now on use the folder."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    try:
        digest = source_digest(root)
        base = base_dir()
        folder = os.path.join(base, digest)
        fresh = not os.path.isdir(folder)
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    if fresh:
        _prune(base, digest)
    os.environ["NUMBA_CACHE_DIR"] = folder
    config = sys.modules.get("numba.core.config")
    if config is not None:
        config.reload_config()
    return folder
