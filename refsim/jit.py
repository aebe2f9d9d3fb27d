"""``njit`` for refsim's cache and route-trace kernels: Numba imported and the kernels compiled
(or loaded from the on-disk cache) only when one is first called, and the same functions run as
plain Python inside :func:`reference`.

Why (issue 17, "Start-up"): ``import numba`` alone costs 0.3-0.5 s and loading the cached
machine code of the LRU kernels as much again, more than a small replay's whole work. A kernel
is a plain Python function over NumPy arrays (Numba compiles exactly that code; its
``NUMBA_DISABLE_JIT=1`` runs it as Python), so for a small input running the Python function is
the readable reference path with the same results (tests/test_startup.py checks the demo trace
byte for byte), and it never imports Numba.

Use::

    from refsim.jit import njit

    @njit(cache=True)                 # any numba.njit options
    def kernel(a, b): ...

``kernel(...)`` compiles on its first call outside :func:`reference` (``numba.njit(**options)``
of a copy of the function whose global names resolve to the compiled twins of the other kernels
it calls, so nopython calls and ``inline="always"`` work as between Numba dispatchers; the cache
files are the same as with ``@numba.njit``), and inside ``with reference():`` runs the same
function as Python (its calls to other kernels go straight to their Python functions). A kernel may call only such kernels, NumPy and its module's constants (as any
Numba kernel); a raw ``@numba.njit`` function must not call one (use this decorator in its module
too).
"""

from __future__ import annotations

import contextlib
import functools
import types

_reference_depth = 0


@contextlib.contextmanager
def reference():
    """Run every :func:`njit` kernel as plain Python inside the block (nested blocks are fine;
    the switch is the process's, not a thread's). Kernels of modules that use ``numba.njit``
    directly are not affected."""
    global _reference_depth
    _reference_depth += 1
    try:
        yield
    finally:
        _reference_depth -= 1


REFERENCE_MAX_BYTES = 1 << 20
"""Largest route trace (bytes of file: 1 MiB = 2**20, about 34,000 rows) that ``refsim replay``
replays on the reference path (:func:`reference_if_small`). Why this size, measured on the demo
trace written 1, 4 and 16 times (2612 to 41,792 rows; best of 3, CPU seconds, load average ~14):
the reference path costs 0.45 s plus 29 us per row (the per-line reader and the LRU as Python),
the compiled path 2.3-2.7 s whatever the size (Numba's import and the cached kernels' loading), so
they meet near 70,000 rows (~2 MiB); 1 MiB keeps the reference path the faster one with margin,
and above it the compiled path's fixed cost is small against the work."""


def reference_if_small(path, max_bytes: int | None = None):
    """:func:`reference` when ``path`` is a regular file of at most ``max_bytes`` bytes (default
    :data:`REFERENCE_MAX_BYTES`), else a context that changes nothing."""
    import os
    limit = REFERENCE_MAX_BYTES if max_bytes is None else max_bytes
    try:
        small = os.path.isfile(path) and os.path.getsize(path) <= limit
    except (OSError, TypeError, ValueError):
        small = False
    return reference() if small else contextlib.nullcontext()


def in_reference() -> bool:
    """Whether the caller is inside :func:`reference` (e.g. a reader choosing its
    pure-Python path)."""
    return _reference_depth > 0


class Kernel:
    """A function compiled by Numba on its first call (see the module docstring).

    Attributes
    ----------
    py_func : function
        The Python function (Numba's ``Dispatcher.py_func``).
    options : dict
        The ``numba.njit`` options.
    """

    def __init__(self, py_func, options: dict):
        self.py_func = py_func
        self.options = options
        self._twins = {}                 # "numba" / "python" -> the callable built for that mode
        functools.update_wrapper(self, py_func)

    def __call__(self, *args, **kwargs):
        mode = "python" if _reference_depth else "numba"
        fn = self._twins.get(mode) or _twin(self, mode, {})
        return fn(*args, **kwargs)

    def compiled(self):
        """The ``numba`` dispatcher (built once; imports Numba)."""
        return self._twins.get("numba") or _twin(self, "numba", {})

    def __repr__(self) -> str:
        return f"<refsim.jit kernel {self.py_func.__module__}.{self.py_func.__qualname__}>"

    def __reduce__(self):
        # pickled by name, as a function is (a process pool or a Dask worker imports the module)
        return _by_name, (self.py_func.__module__, self.py_func.__qualname__)


def _by_name(module: str, qualname: str):
    import importlib
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _twin(kernel: Kernel, mode: str, namespaces: dict):
    """Build (once) ``kernel``'s callable for ``mode``: a copy of its function whose globals are a
    copy of its module's in which every kernel is replaced by its own twin of the same mode
    (``namespaces``: module name -> that dict, shared by the module's kernels), so that kernels
    call each other directly -- as Numba dispatchers in ``"numba"`` mode (nopython calls, and
    ``inline="always"`` works), as plain functions in ``"python"`` mode (no per-call dispatch)."""
    f = kernel.py_func
    ns = namespaces.get(f.__module__)
    if ns is None:
        ns = namespaces[f.__module__] = dict(f.__globals__)
        for key, value in f.__globals__.items():
            if isinstance(value, Kernel):
                ns[key] = value._twins.get(mode) or _twin(value, mode, namespaces)
    if mode not in kernel._twins:
        twin = types.FunctionType(f.__code__, ns, f.__name__, f.__defaults__, f.__closure__)
        twin.__kwdefaults__ = f.__kwdefaults__
        twin.__qualname__ = f.__qualname__
        twin.__doc__ = f.__doc__
        if mode == "numba":
            from refsim import jitcache
            jitcache.configure()        # before the decoration picks Numba's cache folder
            import numba
            twin = numba.njit(**kernel.options)(twin)
        kernel._twins[mode] = twin
    return kernel._twins[mode]


def njit(*args, **options):
    """``numba.njit``'s signature without importing Numba: ``@njit`` or ``@njit(**options)``
    returns a :class:`Kernel`."""
    if args and callable(args[0]) and len(args) == 1 and not options:
        return Kernel(args[0], {})
    if args:
        raise TypeError("refsim.jit.njit takes the function or keyword options only")
    return lambda f: Kernel(f, options)
