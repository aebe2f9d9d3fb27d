"""Names and the header record of the engine's ``route_trace v1`` format (docs/trace-format.md).

Source: bmoe-engine.md §4.5 (core/src/metrics/route_trace_sink.cpp in the engine).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TRACE_MAGIC = "# route_trace v1"
"""First line of every route trace."""

REQUIRED_COLUMNS = ("turn", "phase", "step", "layer", "slot", "expert", "weight", "residency",
                    "expert_bytes")
"""Columns every v1 file has (the 9-column files committed by the engine)."""

OPTIONAL_COLUMNS = ("dropped",)
"""Columns added later (10-column files); absent means 0 for every row."""

PRED_COLUMNS = ("pred_expert", "pred_weight")
"""refsim's columns for the stale-gate ranking a run made (``--predict-prefetch``,
``--route-ahead N``): per row, the ranked id at that (position, layer, slot = rank) and the
softmax over the ranking's top-k; ``-1`` / ``nan`` where the graph ranked nothing
(docs/trace-format.md, "Prediction columns"). Not the engine's: its traces never have them."""

WRITE_COLUMNS = REQUIRED_COLUMNS + OPTIONAL_COLUMNS
"""Column order refsim writes (the engine's current writer); :data:`PRED_COLUMNS` follow when
the run ranked ahead."""

MAX_LAYERS = 4096
"""Largest ``n_layer`` a trace may declare: 8x llama.cpp's ``LLAMA_MAX_LAYERS`` (512,
src/llama-hparams.h); no model reaches it, and it bounds the reader's arrays before it allocates."""

MAX_EXPERTS = 32767
"""Largest ``n_expert``: expert ids are stored as int16 (:class:`refsim.events.DecodeEvent`
``routes``), so ids run 0..32766; llama.cpp caps ``n_expert`` far lower (``LLAMA_MAX_EXPERTS``)."""

MAX_EXPERT_USED = 1024
"""Largest ``n_expert_used`` (top-k); llama.cpp's models route at most a few dozen experts."""

MAX_ENTRY_BYTES = 1 << 40
"""Largest ``expert_bytes``/``dense_bytes`` of one layer: 2**40 bytes (1 TiB), so sums over layers
and slots stay far inside int64."""

F32_FINITE_LIMIT = 3.4028235677973366e38
"""float32's largest value plus half its last step (2**103): a weight's decimal value below it
rounds to a finite float32 (``3.4028235e38``, the shortest text of float32's largest value, which
the writer writes, included); at or above it, to infinity (round half to even). The weight rule
is ``0 <= w < F32_FINITE_LIMIT`` or ``nan``."""

MAX_POSITION = 2**31 - 1
"""Largest ``step`` and ``turn``: the engine's ``int`` fields; llama.cpp's ``llama_pos`` is int32."""

RESIDENCY_MISS, RESIDENCY_HIT, RESIDENCY_SPEC = 0, 1, 2
"""Residency codes, queried before the layer's batch is loaded: miss, hit on a demanded entry,
hit on a prefetched entry not yet used (bmoe-engine.md §3.5)."""


@dataclass(frozen=True)
class TraceHeader:
    """The preamble of a route trace: model identity and per-layer byte sizes.

    Parameters
    ----------
    model : str
        Model path as the recording run saw it.
    arch : str
        ``general.architecture`` of the model.
    n_layer : int
        Streamed layer span (trunk MoE layers, +1 with ``--mtp``).
    n_expert : int
        Routed experts per layer.
    n_expert_used : int
        Effective top-k (``k``).
    expert_bytes : (n_layer,) int64 ndarray
        Bytes of one expert entry per layer (the cost of one miss; bmoe-engine.md §3.1).
    dense_bytes : (n_layer,) int64 ndarray
        Bytes of each layer's non-expert tensors (kept resident; not cache-managed).
    extra : dict
        Other ``key=value`` pairs of the model line, kept verbatim (unknown keys are allowed).

    Raises
    ------
    ValueError
        If a size is not positive or the arrays do not have ``n_layer`` entries, or a number
        exceeds the format's bounds (:data:`MAX_LAYERS`, :data:`MAX_EXPERTS`,
        :data:`MAX_EXPERT_USED`, :data:`MAX_ENTRY_BYTES`), so refsim never writes a trace its
        reader refuses.
    """

    model: str
    arch: str
    n_layer: int
    n_expert: int
    n_expert_used: int
    expert_bytes: np.ndarray
    dense_bytes: np.ndarray
    extra: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.n_layer < 1 or self.n_expert < 1 or self.n_expert_used < 1:
            raise ValueError(
                f"n_layer, n_expert, n_expert_used must be >= 1, got "
                f"{self.n_layer}, {self.n_expert}, {self.n_expert_used}")
        if self.n_expert_used > self.n_expert:
            raise ValueError(f"n_expert_used={self.n_expert_used} > n_expert={self.n_expert}")
        for name, bound in (("n_layer", MAX_LAYERS), ("n_expert", MAX_EXPERTS),
                            ("n_expert_used", MAX_EXPERT_USED)):
            if getattr(self, name) > bound:
                raise ValueError(f"{name}={getattr(self, name)} exceeds the route trace bound {bound}")
        for name in ("expert_bytes", "dense_bytes"):
            arr = np.asarray(getattr(self, name), dtype=np.int64)
            if arr.shape != (self.n_layer,):
                raise ValueError(f"{name} must have n_layer={self.n_layer} entries, got {arr.shape}")
            object.__setattr__(self, name, arr)
        if (self.expert_bytes <= 0).any():
            raise ValueError("expert_bytes must be > 0 for every layer")
        if (self.dense_bytes < 0).any():
            raise ValueError("dense_bytes must be >= 0 for every layer")
        if (self.expert_bytes > MAX_ENTRY_BYTES).any() or (self.dense_bytes > MAX_ENTRY_BYTES).any():
            raise ValueError(f"expert_bytes and dense_bytes must be <= {MAX_ENTRY_BYTES} (2**40)")

    @property
    def token_cycle_bytes(self) -> int:
        """T in bytes: sum over layers of ``min(k, n_expert) * expert_bytes`` (one token's demand).

        Below T a global LRU evicts exactly what the next layers need (bmoe-engine.md §3.2,
        "the cliff")."""
        return int(min(self.n_expert_used, self.n_expert) * self.expert_bytes.sum())
