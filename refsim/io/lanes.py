"""Which I/O lane serves which request of a layer's batch.

The engine's lanes pull requests from one shared queue (expert_stream_source.cpp ``io_drain``:
``j = jobs_[next_idx_++]`` under ``io_mtx_``), so a request goes to whichever lane asks first:

- serially, the calling thread drains as lane 0 beside worker lanes ``1..N-1``; a batch of one
  request, or ``--io-threads 1``, is read inline on lane 0 (``load_layer``: ``io_threads_ <= 1 ||
  njobs <= 1``);
- under ``--overlap`` every lane ``0..N-1`` is a worker and the eval thread reads nothing
  (``init``: ``first_worker_lane = overlap_ ? 0 : 1``);
- a layer's batch starts on idle lanes: the serial load waits for its batch to drain, the overlap
  load drains the previous batch before publishing (``load_layer_async`` step 1).

Which lane asks first is a matter of thread timing, not of the code. :func:`assign_lanes`
therefore models it: in queue order, each request goes to the lane that becomes idle first (ties
to the lowest lane: the caller, lane 0, drains right after publishing), a request occupying its
lane for a time proportional to its ``cost`` (by default its window bytes: lanes of equal
bandwidth). The order, the set and the lane count are the engine's; the assignment is this greedy
list schedule, exact when every request costs the same.
"""

from __future__ import annotations

import heapq

import numpy as np

from refsim.errors import ConfigError

ENGINE_MAX_LANES = 8
"""``MoeStreamConfig::io_threads_max``: the engine clamps ``--io-threads`` to 1..8
(expert_stream_source.cpp ``init``; bmoe-engine.md §3.4)."""


def engine_lanes(io_threads: int) -> int:
    """The lanes the engine runs for ``--io-threads io_threads``: clamped to 1..8 as ``init`` does.

    Raises
    ------
    ConfigError
        ``io_threads`` < 1.
    """
    if io_threads < 1:
        raise ConfigError(f"--io-threads {io_threads}: expected >= 1")
    return min(int(io_threads), ENGINE_MAX_LANES)


def assign_lanes(cost, lanes: int, overlap: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Lanes of one layer's batch, in queue order.

    Parameters
    ----------
    cost : (n,) array-like of int or float
        Each request's occupancy of its lane (window bytes, or a time), in queue order; >= 0.
    lanes : int
        Lanes the engine runs (:func:`engine_lanes`).
    overlap : bool
        ``--overlap``: every lane is a worker. Serially a batch of one request, or one lane,
        is read inline on lane 0.

    Returns
    -------
    lane : (n,) int64 ndarray
        The lane of each request.
    load : (lanes,) float64 ndarray
        Each lane's summed cost (the batch takes ``load.max()`` on lanes of equal speed).

    Raises
    ------
    ConfigError
        ``lanes`` < 1 or a negative cost.
    """
    c = np.asarray(cost, dtype=np.float64)
    if lanes < 1:
        raise ConfigError(f"lanes: expected >= 1, got {lanes}")
    if (c < 0).any():
        raise ConfigError("request costs: expected >= 0")
    n = c.size
    lane = np.zeros(n, dtype=np.int64)
    load = np.zeros(lanes, dtype=np.float64)
    if n == 0:
        return lane, load
    if lanes == 1 or (not overlap and n <= 1):
        load[0] = c.sum()
        return lane, load
    free = [(0.0, k) for k in range(lanes)]            # (time the lane is idle, lane)
    for i in range(n):
        t, k = heapq.heappop(free)
        lane[i] = k
        load[k] += c[i]
        heapq.heappush(free, (t + c[i], k))
    return lane, load
