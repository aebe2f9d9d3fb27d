"""An atomic counter for Numba's parallel kernels: work handed out as it is asked for.

Numba's ``prange`` splits its iterations into equal contiguous parts, one per thread, decided before the
loop starts. On a shared 2-core VM one thread is often paused by the hypervisor for a millisecond or
more, and then the whole parallel region waits for its part. With :func:`fetch_add` a kernel instead
runs one ``prange`` iteration per thread, each of which takes the next job from a shared counter until
none is left (OpenMP's ``schedule(dynamic, 1)``): a paused thread takes fewer jobs and the other does
the rest.

Which thread computes a job never changes what the job computes (every job writes its own outputs with
the same instructions in the same order), so the results are the same bits however the jobs fall.
"""

from __future__ import annotations

from numba import types
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload


@intrinsic
def _fetch_add(typingctx, arr, i, v):
    if not (isinstance(arr, types.Array) and arr.dtype == types.int64 and arr.ndim == 1 and arr.mutable):
        raise TypingError(f"fetch_add: expected a writable 1-D int64 array, got {arr}")
    sig = types.int64(arr, types.intp, types.int64)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        return builder.atomic_rmw("add", ptr, args[2], "monotonic")
    return sig, codegen


def fetch_add(arr, i, v):
    """``old = arr[i]; arr[i] += v; return old`` as one atomic operation in compiled code (LLVM
    ``atomicrmw add``, monotonic ordering: each job number is handed out once; the jobs' own writes are
    ordered by the end of the parallel region). ``arr``: writable 1-D int64 array; ``i`` is not
    bounds-checked in compiled code. As plain Python (``NUMBA_DISABLE_JIT=1``) it is not atomic, and
    need not be: there is one thread."""
    old = int(arr[i])
    arr[i] = old + v
    return old


@overload(fetch_add, inline="always")
def _ov_fetch_add(arr, i, v):
    return lambda arr, i, v: _fetch_add(arr, i, v)


__all__ = ["fetch_add"]
