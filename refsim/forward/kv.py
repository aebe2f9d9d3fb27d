"""The KV cache of the reference pass: float32 keys/values per attention layer, indexed by position.

One sequence; position ``p`` lives at row ``p``. Positions are appended contiguously from the
current length, and :meth:`KVCache.trim` drops everything from a position on — the rollback a
rejected draft needs (llama.cpp ``llama_memory_seq_rm(mem, seq, p0, -1)``; bmoe-engine.md §2
step 6). Storage is float32, the setting under which llama.cpp matches a float reference
(``type_k = type_v = F32``; shared/reference/oracle/README.md). Keys are stored after q/k norm
and RoPE, as llama.cpp stores them.
"""

from __future__ import annotations

import numpy as np

from refsim.errors import ConfigError


class KVCache:
    """Per-layer key/value rows for positions ``0..n-1``.

    Parameters
    ----------
    n_layer : int
        Attention layers.
    n_head_kv : int
    head_dim_k, head_dim_v : int
    capacity : int, default 256
        Initial rows; grows by doubling (never shrinks).

    Attributes
    ----------
    n : int
        Positions held (the next decode must start at position ``n``).
    """

    def __init__(self, n_layer: int, n_head_kv: int, head_dim_k: int, head_dim_v: int, capacity: int = 256):
        self.n_layer, self.n_head_kv = int(n_layer), int(n_head_kv)
        self.head_dim_k, self.head_dim_v = int(head_dim_k), int(head_dim_v)
        cap = max(1, int(capacity))
        self._k = [np.zeros((cap, n_head_kv, head_dim_k), np.float32) for _ in range(n_layer)]
        self._v = [np.zeros((cap, n_head_kv, head_dim_v), np.float32) for _ in range(n_layer)]
        self.n = 0

    @property
    def capacity(self) -> int:
        return self._k[0].shape[0] if self._k else 0

    def bytes_per_token(self) -> int:
        """KV bytes one position occupies over all layers (float32)."""
        return 4 * self.n_layer * self.n_head_kv * (self.head_dim_k + self.head_dim_v)

    def _grow(self, need: int) -> None:
        cap = self.capacity
        if need <= cap:
            return
        new = max(need, 2 * cap)
        for store in (self._k, self._v):
            for il, a in enumerate(store):
                b = np.zeros((new,) + a.shape[1:], np.float32)
                b[:cap] = a
                store[il] = b

    def write(self, il: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Store rows for positions ``start .. start+len(k)-1`` of layer ``il``.

        Parameters
        ----------
        k : (n_pos, n_head_kv, head_dim_k) float32 ndarray
        v : (n_pos, n_head_kv, head_dim_v) float32 ndarray
        """
        n_pos = k.shape[0]
        self._grow(start + n_pos)
        self._k[il][start:start + n_pos] = k
        self._v[il][start:start + n_pos] = v

    def storage(self, n: int) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        """Every layer's whole key and value arrays (``(capacity, n_head_kv, head_dim)`` float32, capacity
        grown to at least ``n`` rows first), for a kernel that writes rows in place (the one-call decode of
        :mod:`refsim.forward.qwen3moe`); what it writes is committed by :meth:`advance` as after :meth:`write`."""
        self._grow(n)
        return tuple(self._k), tuple(self._v)

    def view(self, il: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and values of positions ``0..n-1`` of layer ``il`` (views, no copy)."""
        return self._k[il][:n], self._v[il][:n]

    def advance(self, n_pos: int) -> None:
        """Commit ``n_pos`` positions written by the current decode."""
        self.n += int(n_pos)

    def trim(self, n_keep: int) -> None:
        """Keep positions ``< n_keep``; drop the rest.

        Raises
        ------
        ConfigError
            If ``n_keep`` is negative or beyond the positions held.
        """
        if not 0 <= n_keep <= self.n:
            raise ConfigError(f"trim: n_keep {n_keep} must be in 0..{self.n} (positions held)")
        self.n = int(n_keep)

    def snapshot(self) -> int:
        """State to restore later: for a pure KV cache, its length (rows past it are not read)."""
        return self.n

    def restore(self, snap: int) -> None:
        """Go back to a :meth:`snapshot` taken earlier (a trim)."""
        self.trim(snap)
