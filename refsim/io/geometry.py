"""How a token's read bytes break into misses, requests, lane rounds and layer batches, when only
the per-token total is known (a recorded run's ``read_bytes``).

A recorded metrics CSV gives each token's bytes, not its requests. Two facts recover them:

- **Misses from bytes.** Every miss of layer ``il`` reads the windows of its expert's slices
  (:mod:`refsim.io.window`). When a model's layers come in a few entry classes whose windows are
  fixed (every slice a whole number of blocks, at a non-zero phase: one block more than the
  slice), a token's bytes are ``sum_c n_c * window_c``; the counts ``n_c`` are found by
  enumeration and are exact when the solution is unique within the bounds (``n_c <= k *
  layers_c``). :func:`misses_from_bytes` says per token whether it was.
- **How misses spread over layers.** The engine issues a layer's misses as one batch drained by
  the lanes (:mod:`refsim.io.requests`): with ``R_l`` requests in layer ``l``, the batch takes
  ``ceil(R_l / L)`` rounds on ``L`` lanes. Given a token's ``m`` misses, take them spread over the
  ``n_layer * k`` routed slots uniformly at random (a multivariate hypergeometric): the expected
  rounds are ``n_layer * sum_j P(m_l = j) * ceil(s j / L)`` and the expected batches with a read
  ``n_layer * (1 - P(m_l = 0))``, ``P(m_l = j) = C(k, j) C(N - k, m - j) / C(N, m)``, ``N =
  n_layer * k``, ``s`` requests per miss (:func:`expected_rounds`, :func:`expected_batches`).
  On the shared Qwen3-30B trace the exact per-decode rounds are within 1.5-4.4 % of this
  expectation on average at 2000-8000 MiB and 2-8 lanes (docs/io.md).

:data:`KNOWN_GEOMETRIES` holds the shared runs' models, with the source of each number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from refsim.errors import ConfigError


@dataclass(frozen=True)
class ReadGeometry:
    """One model file's reads per miss.

    Attributes
    ----------
    name : str
    n_layer : int
        Streamed layers.
    k : int
        Experts routed per layer and token (``n_expert_used`` of the runs).
    slices : int
        Requests per miss (3 split, 2 fused).
    windows : tuple of int
        Window bytes of one miss, per entry class (e.g. Q6_K / Q4_K ``ffn_down``).
    layers : tuple of int
        Layers of each class (same length as ``windows``; they sum to ``n_layer``).
    exact : bool
        True when every miss of a class reads exactly ``windows[c]`` (the decomposition can be
        exact); False when the windows vary with the expert's phase and ``windows`` are means.
    eof_short : int
        Bytes the file's last slice reads short of a full window (the EOF rule), tried as a
        correction when a token's bytes do not decompose.
    source : str
    """

    name: str
    n_layer: int
    k: int
    slices: int
    windows: tuple
    layers: tuple
    exact: bool
    eof_short: int = 0
    source: str = ""

    @property
    def mean_window(self) -> float:
        """Layer-weighted mean window bytes of one miss."""
        return float(np.dot(self.windows, self.layers) / sum(self.layers))


QWEN3_30B = ReadGeometry(
    "Qwen3-30B-A3B-Q4_K_M", 48, 8, 3, (1290240 + 2 * 884736 + 3 * 4096, 3 * 884736 + 3 * 4096),
    (24, 24), True, 512,
    "slices from the trace preamble (3059712 / 2654208 B: gate and up 884736 B, down Q6_K 1290240 "
    "or Q4_K 884736 B on 24 + 24 layers, synth.use_more_bits); one block more per slice and the "
    "file's last slice 512 B short: the shared trace's qwen.metrics, byte for byte (docs/io.md)")
QWEN36_35B = ReadGeometry(
    "Qwen3.6-35B-A3B-Q4_K_M", 40, 8, 3, (860160 + 2 * 589824 + 3 * 4096, 3 * 589824 + 3 * 4096),
    (20, 20), True, 0,
    "slices of [2048, 512] Q4_K gate/up (589824 B) and a [512, 2048] Q6_K or Q4_K down (860160 / "
    "589824 B, use_more_bits on 40 layers: 20 + 20); one block more per slice: every row of the "
    "desktop and drop-cold runs decomposes uniquely this way, while windows equal to the slices "
    "leave 5603 of 8080 rows without a solution (docs/io.md)")
GEMMA4_26B = ReadGeometry(
    "gemma-4-26B-A4B-Q4_K_M", 30, 8, 2, (4336640 + 2 * 4096, 3593216 + 2 * 4096), (15, 15), False, 0,
    "entry bytes from bmoe-engine.md §3.1 (4336640 / 3593216 B: a fused gate_up [2816, 1408] Q4_K "
    "of 2230272 B and a [704, 2816] down of Q8_0 2106368 or Q5_0 1362944 B); the slices are not "
    "whole blocks, so a window depends on the expert's phase: taken as slice + one block, and the "
    "split of the 30 layers between the two classes is not known (taken 15 + 15)")

KNOWN_GEOMETRIES = {g.name.lower(): g for g in (QWEN3_30B, QWEN36_35B, GEMMA4_26B)}
ALIASES = {"qwen": QWEN3_30B, "gemma": GEMMA4_26B}
"""The phone cache-lanes set names its models only by file name (``qwen_*``, ``gemma_*``; its
summary.md: Qwen3-30B-A3B-Q4_K_M and Gemma-4-26B-A4B-it-Q4_K_M), so ``@model=qwen|gemma`` stand
for them."""


def geometry_for(model: str, where: str = "") -> ReadGeometry:
    """The known geometry of a run's ``model=`` value: an alias, or a known name contained in it
    (case-insensitive; ``Qwen_Qwen3.6-35B-A3B-Q4_K_M.gguf`` is Qwen3.6-35B-A3B-Q4_K_M).

    Raises
    ------
    ConfigError
        An unknown model (names the known ones).
    """
    if model in ALIASES:
        return ALIASES[model]
    low = model.lower()
    for key, g in KNOWN_GEOMETRIES.items():
        if key in low:
            return g
    raise ConfigError(f"{where or 'run'}: model {model!r}: its requests per miss are not known "
                      f"(known: {', '.join(g.name for g in KNOWN_GEOMETRIES.values())}, or "
                      f"{', '.join(ALIASES)})")


def misses_from_bytes(read_bytes, geom: ReadGeometry) -> tuple[np.ndarray, np.ndarray]:
    """Misses per token from its bytes.

    Returns
    -------
    misses : (n,) float64 ndarray
        The unique decomposition's count where there is one, else ``bytes / mean_window``.
    exact : (n,) bool ndarray
        Where the decomposition was unique (always False for an inexact geometry; True for 0 B).

    Raises
    ------
    ConfigError
        Negative bytes.
    """
    rb = np.asarray(read_bytes, dtype=np.int64)
    if (rb < 0).any():
        raise ConfigError("read_bytes: expected >= 0")
    misses = rb / geom.mean_window
    exact = rb == 0
    if not geom.exact or len(geom.windows) > 2:
        misses[rb == 0] = 0.0
        return misses.astype(np.float64), exact
    w = list(geom.windows) + [geom.windows[0]] * (2 - len(geom.windows))
    cap = [geom.k * n for n in geom.layers] + [0] * (2 - len(geom.layers))
    for i, r in enumerate(rb.tolist()):
        if r == 0:
            misses[i] = 0.0
            continue
        found = set()
        for total in ((r, r + geom.eof_short) if geom.eof_short else (r,)):
            for a in range(min(cap[0], total // w[0]) + 1):
                rest = total - a * w[0]
                if rest % w[1] == 0 and rest // w[1] <= cap[1]:
                    found.add(a + rest // w[1])
        if len(found) == 1:
            misses[i] = float(found.pop())
            exact[i] = True
    return misses.astype(np.float64), exact


def _layer_pmf(m: int, n_layer: int, k: int) -> np.ndarray:
    """P(a layer has j of the token's m misses), j = 0..k (hypergeometric)."""
    n = n_layer * k
    m = min(max(int(m), 0), n)
    total = math.comb(n, m)
    return np.array([math.comb(k, j) * math.comb(n - k, m - j) / total if m - j >= 0 else 0.0
                     for j in range(k + 1)])


def expected_rounds(misses, slices: int, lanes: int, n_layer: int, k: int) -> np.ndarray:
    """Expected ``sum_l ceil(slices * m_l / lanes)`` per token (see the module docstring);
    a fractional miss count interpolates between its neighbours. (n,) float64."""
    m = np.asarray(misses, dtype=np.float64)
    j = np.arange(k + 1)
    per_j = np.ceil(slices * j / lanes)
    cache: dict[int, float] = {}

    def at(mm: int) -> float:
        if mm not in cache:
            cache[mm] = float(n_layer * (_layer_pmf(mm, n_layer, k) @ per_j))
        return cache[mm]

    lo = np.floor(m).astype(np.int64)
    frac = m - lo
    return np.array([at(int(a)) * (1 - f) + at(int(a) + 1) * f if f else at(int(a))
                     for a, f in zip(lo, frac)], dtype=np.float64)


def expected_batches(misses, n_layer: int, k: int) -> np.ndarray:
    """Expected layers with at least one miss per token, ``n_layer * (1 - P(m_l = 0))``. (n,)."""
    m = np.asarray(misses, dtype=np.float64)
    cache: dict[int, float] = {}

    def at(mm: int) -> float:
        if mm not in cache:
            cache[mm] = float(n_layer * (1.0 - _layer_pmf(mm, n_layer, k)[0]))
        return cache[mm]

    lo = np.floor(m).astype(np.int64)
    frac = m - lo
    return np.array([at(int(a)) * (1 - f) + at(int(a) + 1) * f if f else at(int(a))
                     for a, f in zip(lo, frac)], dtype=np.float64)
