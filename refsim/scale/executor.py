"""The grid executor: run one function over a list of cells in this process, on local processes
(``--workers N``) or on a Dask distributed cluster (``--dask-scheduler ADDRESS``), and return the
results **in the cells' order** whatever ran them, so a command's output is byte-identical for
every executor (docs/scale.md).

What goes to a worker is the cell (a small frozen dataclass: paths, budgets, policy, knobs) and
the function, pickled by reference (``refsim.scale.grid.sweep_cell``): a worker needs refsim
installed and the trace paths readable at the same names (a shared filesystem), and it sends back
the cell's rows (a few hundred bytes each).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from refsim.errors import ConfigError

DASK_INSTALL_HINT = ("--dask-scheduler needs the optional dask extra; install it with: "
                     "python3 -m pip install 'refsim[dask]' (or 'dask[distributed]>=2024.1')")
"""The one line ``--dask-scheduler`` stops with when ``distributed`` is not installed."""

LOCAL = "local"
"""``--dask-scheduler local``: start a ``distributed.LocalCluster`` on this machine."""

START_METHOD = "spawn"
"""How ``--workers N`` starts its processes: ``spawn`` (a fresh interpreter; no forked copy of
the parent's Numba/threads state, the same on Linux and macOS)."""


@dataclass(frozen=True)
class ExecutorSpec:
    """Which executor a command runs its grid on: ``workers`` local processes (1 = this process)
    or, with ``dask``, the Dask scheduler at that address (``local`` = a LocalCluster of
    ``workers`` processes, or ``os.cpu_count()`` when ``workers`` is 1)."""

    workers: int = 1
    dask: str | None = None

    @property
    def label(self) -> str:
        if self.dask is not None:
            return f"dask {self.dask}"
        return "serial" if self.workers <= 1 else f"{self.workers} local processes"

    @classmethod
    def from_args(cls, args) -> "ExecutorSpec":
        """From ``--workers`` and ``--dask-scheduler`` (:func:`add_executor_args`)."""
        return cls(int(getattr(args, "workers", 1) or 1), getattr(args, "dask_scheduler", None))


def add_executor_args(parser) -> None:
    """``--workers N`` and ``--dask-scheduler ADDRESS`` (docs/scale.md)."""
    from refsim.validators import positive_int
    g = parser.add_argument_group("executor (docs/scale.md; the output is the same for every one)")
    g.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="run the grid's cells on N local processes (default 1: in this process); "
                        "with --dask-scheduler local, the LocalCluster's worker count")
    g.add_argument("--dask-scheduler", metavar="ADDRESS",
                   help="run the cells on a Dask distributed cluster: 'local' starts a LocalCluster, "
                        "an address (tcp://host:8786) uses a running scheduler; needs refsim[dask] "
                        "and the input paths readable by every worker (a shared filesystem)")


def require_dask():
    """Import ``distributed`` (before any work).

    Raises
    ------
    ConfigError
        :data:`DASK_INSTALL_HINT`.
    """
    try:
        with _sigint_blocked():         # distributed starts a thread at import: see there
            import distributed
    except ImportError:
        raise ConfigError(DASK_INSTALL_HINT) from None
    return distributed


def run_cells(fn: Callable, cells: Sequence, spec: ExecutorSpec, desc: str = "") -> list:
    """``[fn(c) for c in cells]`` on the executor ``spec`` names, in the cells' order.

    With ``desc``, one progress bar over the cells (:mod:`refsim.progress`: on a terminal only;
    the cells' own bars are suppressed) as they complete in this process or come back from
    local workers; a Dask run shows none (its dashboard shows the tasks).

    Parameters
    ----------
    fn : callable
        A module-level function (pickled by reference).
    cells : sequence
        Picklable arguments, one task each.
    spec : ExecutorSpec

    Returns
    -------
    list
        ``fn(cell)`` for each cell, in order.

    Raises
    ------
    RefsimError
        Whatever a cell raised (the first failing cell in order for local processes, the first
        to fail for Dask): the same one-line error as in this process.
    ConfigError
        :data:`DASK_INSTALL_HINT`; ``"--dask-scheduler ADDRESS: cannot connect: REASON"``.
    """
    from refsim import progress
    cells = list(cells)
    if spec.dask is not None:
        return _run_dask(fn, cells, spec)
    n = min(spec.workers, len(cells))
    bar = progress.bar(total=len(cells), desc=desc, unit="cell") if desc else progress.bar()
    with bar, progress.suppressed():
        if n <= 1:
            out = []
            for c in cells:
                out.append(fn(c))
                bar.update()
            return out
        from concurrent.futures import ProcessPoolExecutor
        ctx = multiprocessing.get_context(START_METHOD)
        with ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_ignore_sigint) as pool:
            try:
                out = []
                for r in pool.map(fn, cells):
                    out.append(r)
                    bar.update()
                return out
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise


def _ignore_sigint() -> None:
    """A worker process ignores Ctrl-C (the terminal sends it to the whole process group): the
    command handles it, prints its one line and shuts the pool down (docs/cli.md, Ctrl-C)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def _sigint_blocked():
    """SIGINT blocked in this thread while ``distributed`` is imported (it starts a thread then)
    and while a LocalCluster starts: the threads started meanwhile, the threads they start and
    the worker processes those spawn inherit the mask (kept across ``exec``), so a terminal's
    Ctrl-C, which goes to the whole process group, reaches refsim's main thread alone -- workers
    that saw it printed KeyboardInterrupt tracebacks and died under a client waiting on them. A
    Ctrl-C meanwhile is delivered when the mask is restored (after the cluster is bound to its
    name, so the caller closes it).

    multiprocessing's resource tracker is started first, outside the mask: the first process a
    thread starts launches it, and its launch *unblocks* SIGINT in that thread after (CPython's
    ``multiprocessing/resource_tracker.py``, bpo-33613) -- started by the cluster's loop thread,
    it left that thread, and every worker it spawned, open to the terminal's Ctrl-C."""
    import signal
    from multiprocessing import resource_tracker
    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


WORKER_LOG_ENV = {"DASK_LOGGING__DISTRIBUTED": "critical", "DASK_LOGGING__TORNADO": "critical"}
"""Set while a LocalCluster spawns its workers (dask reads it at import in each worker): a worker
logs on the terminal's stderr, e.g. "Scheduler was unaware of this worker" or a connection reset
when the command ends it at Ctrl-C; a cell's error reaches the command through its future."""


@contextmanager
def _quiet_worker_logs():
    """:data:`WORKER_LOG_ENV` in ``os.environ`` while the block runs (the workers spawned then
    inherit it); the previous values restored after."""
    previous = {k: os.environ.get(k) for k in WORKER_LOG_ENV}
    os.environ.update(WORKER_LOG_ENV)
    try:
        yield
    finally:
        for k, v in previous.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


CONNECT_TIMEOUT_S = 30.0
"""Seconds ``--dask-scheduler ADDRESS`` waits for a scheduler's handshake before giving up."""


def _quiet_dask_logs() -> None:
    """distributed logs its INFO lines (cluster start, worker join) and, on Ctrl-C, asyncio's
    "Task exception was never retrieved" tracebacks on stderr; refsim's stderr holds warnings and
    one-line errors only (docs/cli.md), so both loggers are raised to ERROR / CRITICAL."""
    import logging
    for name in ("distributed", "tornado"):
        logging.getLogger(name).setLevel(logging.ERROR)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)


def _connect(distributed, address: str):
    """A ``distributed.Client`` of the scheduler at ``address``, or a one-line ConfigError.

    The connection runs in a daemon thread waited on for :data:`CONNECT_TIMEOUT_S` + 5 s: a peer
    that accepts the TCP connection and never answers the handshake would otherwise block with no
    end (distributed's own ``timeout`` covers the connect, not every handshake), and something
    that answers but is not a scheduler can fail with any exception (e.g. an allocation of a
    garbage message length), which is reported as "not a Dask scheduler?" with its first line.
    """
    import threading
    box: dict = {}

    def connect():
        try:
            box["client"] = distributed.Client(address, timeout=f"{CONNECT_TIMEOUT_S:g}s")
        except BaseException as exc:          # reported below, in the command's thread
            box["error"] = exc

    t = threading.Thread(target=connect, name="refsim-dask-connect", daemon=True)
    t.start()
    t.join(CONNECT_TIMEOUT_S + 5.0)
    if t.is_alive():
        raise ConfigError(f"--dask-scheduler {address}: cannot connect: no scheduler handshake "
                          f"within {CONNECT_TIMEOUT_S + 5.0:g} s")
    exc = box.get("error")
    if exc is None:
        return box["client"]
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, (OSError, TimeoutError, ValueError)):
        raise ConfigError(f"--dask-scheduler {address}: cannot connect: {text}") from None
    raise ConfigError(f"--dask-scheduler {address}: cannot connect (not a Dask scheduler?): "
                      f"{type(exc).__name__}: {text}") from None


def _run_dask(fn: Callable, cells: list, spec: ExecutorSpec) -> list:
    distributed = require_dask()
    _quiet_dask_logs()
    cluster = None
    try:
        if spec.dask == LOCAL:
            n = spec.workers if spec.workers > 1 else (os.cpu_count() or 1)
            with _sigint_blocked(), _quiet_worker_logs():
                cluster = distributed.LocalCluster(
                    n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                    # the scheduler's HTTP server (which it starts even without a dashboard) on a
                    # free local port: on 8787 taken it warned "Port 8787 is already in use"
                    scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
            client = distributed.Client(cluster)
        else:
            client = _connect(distributed, spec.dask)
        try:
            futures = client.map(fn, cells, pure=False)
            return client.gather(futures)
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()
