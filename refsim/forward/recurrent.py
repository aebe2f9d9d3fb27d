"""Recurrent state of the gated-delta-net layers, with ``n_rs_seq`` rollback snapshots.

One sequence. Per recurrent layer: a conv state ``(K-1, C)`` and an SSM state ``(Hv, Dk, Dv)``,
float32 (llama.cpp keeps them in F32: ``cache_r_l*``/``cache_s_l*``; llama-cpp-notes.md §4.2).

Rollback (llama-cpp-notes.md §4.3; llama.cpp ``llama_memory_recurrent::seq_rm`` with
``n_rs_seq``, PR #22673): besides the live state, up to ``n_rs_seq`` earlier states are kept —
the states after each of the last ``n_rs_seq`` positions before the current one — so
``1 + n_rs_seq`` slots in all, as llama.cpp allocates. Removing the last ``r`` positions with
``1 <= r <= n_rs_seq`` restores the state exactly; ``r > n_rs_seq`` raises
:class:`refsim.errors.ConfigError` (llama.cpp's ``seq_rm`` returns false and the next decode
fails). ``r = 0`` is a no-op.

Difference from llama.cpp, stated: llama.cpp writes snapshot slot ``s`` only when ``s`` is
less than the last ubatch's token count (``TAG_RECURRENT_ROLLBACK_SPLITS``), so a rollback
reaching behind the last batch would read a stale SSM slot. refsim keeps the states across
batches, so every ``r <= n_rs_seq`` is exact. The speculative loop only ever removes part of
the verify batch it just decoded (``r <= n_draft < n_draft + 1`` tokens), where both agree.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from refsim.errors import ConfigError
from refsim.forward.kv import KVCache


class RecurrentState:
    """Conv and SSM states of every recurrent layer, with rollback snapshots.

    Parameters
    ----------
    layers : sequence of int
        Trunk layer ids that are recurrent.
    conv_shape : (int, int)
        ``(d_conv - 1, C)`` with ``C = 2 * n_group * d_state + d_inner``.
    ssm_shape : (int, int, int)
        ``(Hv, Dk, Dv)``.
    n_rs_seq : int, default 0
        Rollback snapshots kept (0 = no rollback).

    Attributes
    ----------
    n : int
        Positions absorbed into the live state.
    conv, ssm : dict of int -> ndarray
        Live states per layer.
    """

    def __init__(self, layers, conv_shape, ssm_shape, n_rs_seq: int = 0):
        if n_rs_seq < 0:
            raise ConfigError(f"n_rs_seq: expected >= 0, got {n_rs_seq}")
        self.layers = tuple(int(il) for il in layers)
        self.conv_shape, self.ssm_shape = tuple(conv_shape), tuple(ssm_shape)
        self.n_rs_seq = int(n_rs_seq)
        self.conv = {il: np.zeros(self.conv_shape, np.float32) for il in self.layers}
        self.ssm = {il: np.zeros(self.ssm_shape, np.float32) for il in self.layers}
        self.n = 0
        # (n_held, {il: conv}, {il: ssm}) for earlier positions, newest last; at most n_rs_seq
        self._snaps: deque = deque(maxlen=self.n_rs_seq or 1)
        self._pending: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._pre: tuple | None = None

    @property
    def slot_bytes(self) -> int:
        """One slot (all layers) in bytes: ``4 * (prod(conv_shape) + prod(ssm_shape)) * n_layers``."""
        return 4 * len(self.layers) * (int(np.prod(self.conv_shape)) + int(np.prod(self.ssm_shape)))

    @property
    def snapshot_positions(self) -> list[int]:
        """``n`` values the state can be rolled back to (oldest first, the live one last)."""
        return [s[0] for s in self._snaps] + [self.n]

    def begin(self, n_pos: int) -> None:
        """Start a decode of ``n_pos`` positions: remember the pre-batch state as a snapshot."""
        self._pending = {}
        if self.n_rs_seq:
            self._pre = (self.n, {il: a.copy() for il, a in self.conv.items()},
                         {il: a.copy() for il, a in self.ssm.items()})

    def n_snap(self) -> int:
        """How many in-batch states each layer must record: ``n_rs_seq + 1`` (the last of them
        is the live state), 0 without rollback."""
        return self.n_rs_seq + 1 if self.n_rs_seq else 0

    def record(self, il: int, snap_conv: np.ndarray, snap_ssm: np.ndarray) -> None:
        """Layer ``il``'s states after each of the batch's last tokens (oldest first; the last
        one equals the live state and is not kept)."""
        self._pending[il] = (snap_conv, snap_ssm)

    def commit(self, n_pos: int) -> None:
        """Finish the decode: ``n += n_pos`` and keep the last ``n_rs_seq`` earlier states."""
        if self.n_rs_seq:
            self._snaps.append(self._pre)
            n_rec = min(self.n_rs_seq + 1, n_pos)
            for s in range(n_rec - 1):   # states after tokens n_pos - n_rec + s, s < n_rec - 1
                n_held = self.n + n_pos - n_rec + s + 1
                self._snaps.append((n_held, {il: p[0][s].copy() for il, p in self._pending.items()},
                                    {il: p[1][s].copy() for il, p in self._pending.items()}))
        self.n += int(n_pos)
        self._pending, self._pre = {}, None

    def trim(self, n_keep: int) -> None:
        """Remove positions ``>= n_keep`` (llama.cpp ``seq_rm(seq, n_keep, -1)``).

        Raises
        ------
        ConfigError
            If ``n_keep`` is beyond the positions held, or the rollback ``r = n - n_keep``
            exceeds ``n_rs_seq`` or the snapshots still held.
        """
        if not 0 <= n_keep <= self.n:
            raise ConfigError(f"seq_rm: n_keep {n_keep} must be in 0..{self.n} (positions held)")
        r = self.n - n_keep
        if r == 0:
            return
        if r > self.n_rs_seq:
            raise ConfigError(f"seq_rm: cannot remove the last {r} positions of a recurrent state with "
                              f"n_rs_seq = {self.n_rs_seq} (at most {self.n_rs_seq}; llama.cpp's seq_rm "
                              f"returns false here)")
        while self._snaps and self._snaps[-1][0] > n_keep:
            self._snaps.pop()
        if not self._snaps or self._snaps[-1][0] != n_keep:
            raise ConfigError(f"seq_rm: no snapshot for position {n_keep} (held: {self.snapshot_positions})")
        n_held, conv, ssm = self._snaps.pop()
        for il in self.layers:
            self.conv[il][...] = conv[il]
            self.ssm[il][...] = ssm[il]
        self.n = n_held


class HybridState:
    """KV cache of the attention layers plus the recurrent state (llama.cpp's hybrid memory).

    Parameters
    ----------
    kv : KVCache
        One entry per trunk attention layer (index = position in ``attn_layers``).
    attn_layers : sequence of int
        Trunk layer ids with attention.
    rec : RecurrentState

    Notes
    -----
    ``trim`` tries the recurrent part first, then the KV (llama-memory-hybrid.cpp ``seq_rm``),
    so a rollback the recurrent state cannot do leaves the KV untouched.
    """

    def __init__(self, kv: KVCache, attn_layers, rec: RecurrentState):
        self.kv, self.rec = kv, rec
        self.attn_index = {int(il): i for i, il in enumerate(attn_layers)}

    @property
    def n(self) -> int:
        return self.kv.n

    def trim(self, n_keep: int) -> None:
        """Remove positions ``>= n_keep`` from both parts (see :meth:`RecurrentState.trim`)."""
        self.rec.trim(n_keep)
        self.kv.trim(n_keep)
