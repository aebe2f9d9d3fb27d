"""The memory ledger: what a run holds besides the expert cache, and the ``--cache-mb auto`` budget.

The engine sizes its expert cache once, at load, from the memory the system reports available
(bmoe-engine.md §3.3). Everything else the run holds — KV cache, recurrent state and its
rollback snapshots, the MTP draft context, dense weights — is memory the cache cannot have.
This module lists those items in bytes from the model's exact figures
(:class:`refsim.model.ModelBytes`) so that "speculation takes N MiB from the expert cache" is
a printed, derivable number.

Items (all bytes; MiB = 2**20 bytes):

- **KV** = ``kv_bytes_per_token * n_ctx`` over the trunk's attention layers (F16 K and V by
  default; llama-cpp-notes.md §4.1). Scales with the context.
- **Recurrent state** = ``recurrent_bytes_per_seq * (1 + n_rs_seq)``: one F32 conv + ssm state
  per gated-delta-net layer per sequence, times the live slot plus ``n_rs_seq`` rollback
  snapshots (``cache_r_l*``/``cache_s_l*`` have ``mem_size * (1 + n_rs_seq)`` rows;
  llama-cpp-notes.md §4.2-4.3). ``n_rs_seq = draft_max`` whenever speculation is on, MTP or
  n-gram, else 0 (bmoe-engine.md §2). **Independent of the context length.**
- **Draft context** (``--mtp`` only): the nextn block's own KV, ``kv_bytes_per_token_nextn *
  n_ctx``, plus its buffers, estimated as the logits of its ubatch,
  ``n_ubatch_draft * n_vocab * 4`` (the output buffer) twice (graph result and output copy),
  with ``n_ubatch_draft = min(max(draft_max + 1, 32), n_ubatch)`` (bmoe-engine.md §2, "MTP draft
  context"). The buffer figure is refsim's **estimate**, not llama.cpp's allocator.
- **Dense** = every non-expert tensor that is loaded: all ``blk.*`` dense bytes of the trunk
  (plus the nextn block's with ``--mtp``, which loads only under ``load_mtp``) and the global
  tensors (``token_embd``, ``output``, ``output_norm``).

Auto budget (bmoe-engine.md §3.3, the engine's ``ExpertStreamSource::init``)::

    cap        = min(ceil_mb MiB, total_expert_bytes) if ceil_mb > 0 else total_expert_bytes
    min_budget = min(1500 MiB, cap)
    avail      = MemAvailable;  if dense_weights in {anon, ahwb}: avail -= min(avail, dense)
    budget     = min_budget if avail == 0 else min(max(avail - floor_mb MiB, 0, min_budget), cap)

``total_expert_bytes`` is over the streamed span: the trunk, plus the nextn block with
``--mtp``. refsim's ``--ram-mb R`` is the memory available *before* the contexts are created;
the ledger's context items (KV, recurrent slots, draft context) are subtracted from it to get
the ``MemAvailable`` the engine reads at init. That ordering is refsim's assumption; it is
what makes the engine's measured drop (3219 -> 2697 MiB auto budget when the MTP draft context
was added, bmoe-engine.md §7) a context cost at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from refsim import MIB
from refsim.errors import ConfigError
from refsim.fmt import num

CACHE_MIN_MB = 1500
"""``cache_min_mb``: the smallest auto (or explicit) budget without ``--force-cache`` (§3.2)."""

CACHE_FLOOR_MB_DEFAULT = 1536
"""``--cache-floor-mb`` default: memory left to the system under ``auto`` (§3.3)."""

DRAFT_UBATCH_MIN = 32
"""The MTP draft context's ubatch is ``max(draft_max + 1, 32)`` clamped to the target's (§2)."""

DENSE_WEIGHTS = ("mmap", "warm", "anon", "ahwb")
"""``--dense-weights`` values; ``anon`` (default) and ``ahwb`` are subtracted under auto (§3.3-3.4)."""


def auto_budget(avail_bytes: int, total_expert_bytes: int, dense_bytes: int = 0,
                dense_weights: str = "anon", floor_mb: float = CACHE_FLOOR_MB_DEFAULT,
                ceil_mb: float = 0) -> int:
    """The engine's ``--cache-mb auto`` budget.

    Parameters
    ----------
    avail_bytes : int
        ``MemAvailable`` at the expert source's init, bytes (0 = unknown).
    total_expert_bytes : int
        Every streamed expert slice, bytes (the ceiling).
    dense_bytes : int, default 0
        Dense tensors still to be loaded, bytes (subtracted for ``anon``/``ahwb`` only).
    dense_weights : {'mmap', 'warm', 'anon', 'ahwb'}, default 'anon'
    floor_mb : float, default 1536
        ``--cache-floor-mb``, MiB.
    ceil_mb : float, default 0
        ``--cache-ceil-mb``, MiB; 0 = no cap.

    Returns
    -------
    int
        Budget in bytes.

    Raises
    ------
    ConfigError
        Negative, ``nan`` or infinite sizes, or an unknown ``dense_weights``.

    Notes
    -----
    Source: bmoe-engine.md §3.3 (the code, which subtracts the pending dense bytes for
    anon/ahwb; the engine's cache-sizing.md says it does not — flagged there as doc≠code).

    Examples
    --------
    >>> auto_budget(8000 * 2**20, 20000 * 2**20, dense_weights="mmap") // 2**20
    6464
    >>> auto_budget(2000 * 2**20, 20000 * 2**20, dense_weights="mmap") // 2**20  # floor wins
    1500
    """
    if dense_weights not in DENSE_WEIGHTS:
        raise ConfigError(f"--dense-weights: expected one of {', '.join(DENSE_WEIGHTS)}, got {dense_weights!r}")
    for name, v in (("avail", avail_bytes), ("total_expert_bytes", total_expert_bytes), ("dense", dense_bytes),
                    ("--cache-floor-mb", floor_mb), ("--cache-ceil-mb", ceil_mb)):
        if not v >= 0 or v == float("inf"):  # also refuses nan, which compares False
            raise ConfigError(f"{name}: expected a finite number >= 0, got {v}")
    cap = min(int(ceil_mb * MIB), total_expert_bytes) if ceil_mb > 0 else total_expert_bytes
    min_budget = min(CACHE_MIN_MB * MIB, cap)
    avail = int(avail_bytes)
    if dense_weights in ("anon", "ahwb"):
        avail -= min(avail, int(dense_bytes))
    if avail == 0:
        return int(min_budget)
    return int(min(max(avail - int(floor_mb * MIB), 0, min_budget), cap))


@dataclass(frozen=True)
class MemoryLedger:
    """Memory a run holds outside the expert cache, and the resulting auto budget.

    Attributes
    ----------
    n_ctx : int
        Context length, tokens.
    draft_max : int
        ``--draft`` in force; 0 when speculation is off.
    mtp : bool
        The MTP draft context exists.
    n_rs_seq : int
        Rollback snapshots per sequence (``draft_max`` with speculation, else 0).
    kv_bytes : int
        Target KV: ``kv_bytes_per_token * n_ctx``.
    recurrent_slot_bytes : int
        One recurrent-state slot (all gated-delta-net layers, one sequence).
    recurrent_bytes : int
        ``recurrent_slot_bytes * (1 + n_rs_seq)``.
    snapshot_bytes : int
        The rollback part: ``recurrent_slot_bytes * n_rs_seq``.
    draft_kv_bytes : int
        MTP draft context KV: ``kv_bytes_per_token_nextn * n_ctx`` (0 without MTP).
    draft_ubatch : int
        MTP draft context ubatch, tokens (0 without MTP).
    draft_buffer_bytes : int
        Estimated draft-context buffers: ``2 * draft_ubatch * n_vocab * 4`` (0 without MTP).
    dense_bytes : int
        Dense tensors loaded (trunk blocks, nextn block with MTP, globals).
    total_expert_bytes : int
        Streamed expert bytes (trunk, plus nextn with MTP): the auto cap.
    ram_bytes : int
        ``--ram-mb`` in bytes (0 = not given: no budget).
    dense_weights : str
    floor_mb, ceil_mb : float
    """

    n_ctx: int
    draft_max: int
    mtp: bool
    n_rs_seq: int
    kv_bytes: int
    recurrent_slot_bytes: int
    recurrent_bytes: int
    snapshot_bytes: int
    draft_kv_bytes: int
    draft_ubatch: int
    draft_buffer_bytes: int
    dense_bytes: int
    total_expert_bytes: int
    ram_bytes: int = 0
    dense_weights: str = "anon"
    floor_mb: float = CACHE_FLOOR_MB_DEFAULT
    ceil_mb: float = 0

    @property
    def context_bytes(self) -> int:
        """KV + recurrent slots + draft context: what the contexts take before the cache init."""
        return self.kv_bytes + self.recurrent_bytes + self.draft_kv_bytes + self.draft_buffer_bytes

    @property
    def speculation_bytes(self) -> int:
        """What speculation adds: the snapshots plus the whole draft context."""
        return self.snapshot_bytes + self.draft_kv_bytes + self.draft_buffer_bytes

    @property
    def avail_bytes(self) -> int:
        """``MemAvailable`` at cache init: ``ram - context_bytes`` clamped at 0 (0 without ``--ram-mb``)."""
        return max(self.ram_bytes - self.context_bytes, 0)

    @property
    def budget_bytes(self) -> int | None:
        """The ``--cache-mb auto`` budget, bytes; None without ``--ram-mb``."""
        if not self.ram_bytes:
            return None
        return auto_budget(self.avail_bytes, self.total_expert_bytes, self.dense_bytes,
                           self.dense_weights, self.floor_mb, self.ceil_mb)

    def lines(self) -> list[str]:
        """The ledger as ``refsim memory`` prints it (also the run preamble's ``# memory`` lines)."""
        m = lambda b: f"{num(b / MIB, 1):>10} MiB"  # noqa: E731
        out = [f"kv:        {m(self.kv_bytes)}  ({self.n_ctx} tokens x {self.kv_bytes // max(self.n_ctx, 1)} B/token)",
               f"recurrent: {m(self.recurrent_bytes)}  ((1 + n_rs_seq {self.n_rs_seq}) x "
               f"{self.recurrent_slot_bytes} B per sequence)",
               f"snapshots: {m(self.snapshot_bytes)}  (n_rs_seq {self.n_rs_seq} x {self.recurrent_slot_bytes} B; "
               f"independent of n_ctx)"]
        if self.mtp:
            out += [f"draft-kv:  {m(self.draft_kv_bytes)}  (nextn KV, {self.n_ctx} tokens)",
                    f"draft-buf: {m(self.draft_buffer_bytes)}  (estimate: 2 x ubatch {self.draft_ubatch} x "
                    f"n_vocab x 4 B)"]
        out += [f"dense:     {m(self.dense_bytes)}  (--dense-weights {self.dense_weights})",
                f"experts:   {m(self.total_expert_bytes)}  (streamed set, the auto cap)",
                f"spec:      {m(self.speculation_bytes)}  (snapshots + draft context)"]
        if self.ram_bytes:
            out += [f"ram:       {m(self.ram_bytes)}  -> MemAvailable at cache init {m(self.avail_bytes).strip()}",
                    f"cache-mb auto: {num(self.budget_bytes / MIB, 1)} MiB (the preamble's cache_mb="
                    f"{self.budget_bytes // MIB}; floor {self.floor_mb:g} MiB, ceil {self.ceil_mb:g} MiB)"]
        return out


def memory_ledger(model, n_ctx: int, draft_max: int = 0, mtp: bool = False, ram_mb: float = 0,
                  n_ubatch: int = 0, dense_weights: str = "anon", floor_mb: float = CACHE_FLOOR_MB_DEFAULT,
                  ceil_mb: float = 0) -> MemoryLedger:
    """Build the ledger of ``model`` for a run.

    Parameters
    ----------
    model : refsim.model.Model
        Only its spec and byte figures are read (a header-only file works).
    n_ctx : int
        Context length, tokens (>= 1).
    draft_max : int, default 0
        ``--draft``; 0 = speculation off (with ``mtp`` it must be >= 1).
    mtp : bool, default False
        ``--mtp``: the draft context exists and the nextn block is loaded and streamed.
    ram_mb : float, default 0
        Memory available before the contexts are created, MiB; 0 = do not compute a budget.
    n_ubatch : int, default 0
        Target ubatch, tokens; 0 = ``n_ctx`` (the engine's CLI default).
    dense_weights, floor_mb, ceil_mb
        As in :func:`auto_budget`.

    Returns
    -------
    MemoryLedger

    Raises
    ------
    ConfigError
        ``n_ctx < 1``, ``draft_max`` outside 0..8, ``mtp`` without ``draft_max`` or on a
        model without ``nextn_predict_layers``; ``ram_mb``, ``floor_mb`` or ``ceil_mb``
        negative, ``nan`` or infinite; negative ``n_ubatch``.
    """
    spec, mb = model.spec, model.bytes
    if n_ctx < 1:
        raise ConfigError(f"--ctx: expected >= 1, got {n_ctx}")
    if not 0 <= draft_max <= 8:
        raise ConfigError(f"--draft: expected 1..8, got {draft_max}")
    if mtp and draft_max < 1:
        raise ConfigError("--mtp needs --draft >= 1")
    if mtp and spec.nextn_predict_layers <= 0:
        raise ConfigError(f"--mtp: {model.path} has no nextn block (nextn_predict_layers = 0); use --ngram")
    for name, v in (("--ram-mb", ram_mb), ("--cache-floor-mb", floor_mb), ("--cache-ceil-mb", ceil_mb)):
        if not v >= 0 or v == float("inf"):  # also refuses nan, which compares False
            raise ConfigError(f"{name}: expected a finite number >= 0, got {v}")
    if n_ubatch < 0:
        raise ConfigError(f"--ubatch: expected >= 0 (0 = n_ctx), got {n_ubatch}")
    # llama.cpp forces n_rs_seq to 0 unless llm_arch_supports_rs_rollback (qwen35, qwen35moe)
    n_rs_seq = draft_max if spec.arch == "qwen35moe" else 0
    slot = mb.recurrent_bytes_per_seq
    ub = n_ubatch or n_ctx
    draft_ub = min(max(draft_max + 1, DRAFT_UBATCH_MIN), ub) if mtp else 0
    dense = mb.global_bytes + sum(lb.dense_bytes for lb in mb.layers if mtp or not lb.is_nextn)
    experts = mb.total_expert_bytes if mtp else mb.trunk_expert_bytes
    return MemoryLedger(
        n_ctx=n_ctx, draft_max=draft_max, mtp=mtp, n_rs_seq=n_rs_seq,
        kv_bytes=mb.kv_bytes_per_token * n_ctx, recurrent_slot_bytes=slot,
        recurrent_bytes=slot * (1 + n_rs_seq), snapshot_bytes=slot * n_rs_seq,
        draft_kv_bytes=mb.kv_bytes_per_token_nextn * n_ctx if mtp else 0,
        draft_ubatch=draft_ub, draft_buffer_bytes=2 * draft_ub * spec.n_vocab * 4,
        dense_bytes=dense, total_expert_bytes=experts, ram_bytes=int(ram_mb * MIB),
        dense_weights=dense_weights, floor_mb=floor_mb, ceil_mb=ceil_mb)
