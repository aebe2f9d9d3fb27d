"""Resident demand: what a run asks the device to keep in RAM, by residency kind (issue 28 item 4).

The memory ledger (:mod:`refsim.cache.ledger`) lists what a run holds besides the expert cache.
This module adds the expert cache itself and says, per item, *where* the bytes live, because the
kernel treats them differently under pressure (bmoe-engine.md §3.4; engine-docs/benchmarks.md,
"Dense-weight policy"; engine-docs/telemetry.md, ``rss_anon_mib`` / ``dense_resident_frac``):

- **pinned**: ``--dense-weights ahwb``: the dense set in a reclaim-exempt dma-buf ("Pinned";
  Android only). The kernel cannot take it; it is not in the process RSS.
- **anon**: anonymous memory the kernel may reclaim to zram (swap) and fault back on the next
  touch: the expert cache (its entries are anonymous pages: telemetry.md, "the expert cache lives
  here"), the KV cache, the recurrent state and its rollback snapshots, the MTP draft context, and
  the dense set under ``--dense-weights anon`` ("O_DIRECT into anonymous buffers and rebind, so
  reclaim goes to zram").
- **page cache**: file pages of the model's mmap: the dense set under ``--dense-weights mmap``
  and ``warm`` (left mmap-resident; ``warm`` only pre-faults it with one sequential sweep at load,
  cache-sizing.md). Reclaim drops them; the next touch re-reads them from flash. Expert slices
  never enter the page cache: they are read with O_DIRECT into the cache's buffers
  (expert_stream_source.cpp ``read_slice``; moe-streaming.md).

``demand = pinned + anon + page cache``, all bytes (MiB = 2^20 bytes). The *evictable* pool is
``anon + page cache``. What one decode token touches of the evictable pool
(:meth:`ResidentDemand.touched_bytes`) is the expert-cache hits, every dense tensor unless pinned
(one row of ``token_embd``: a token reads its own embedding only), the KV of the positions
attended and one recurrent slot.

Not in the demand (refsim has no figure for them; the shared phone runs put them at about 260 MiB,
docs/memory-pressure.md): llama.cpp's compute buffers and graph, the tokenizer, the binary and its
libraries.
"""

from __future__ import annotations

from dataclasses import dataclass

from refsim import MIB
from refsim.errors import ConfigError

PINNED_MODES = ("ahwb",)
"""``--dense-weights`` modes whose dense set the kernel cannot reclaim (bmoe-engine.md §3.4)."""
ANON_MODES = ("anon",)
"""Modes whose dense set is anonymous memory (reclaimed to zram)."""
PAGE_CACHE_MODES = ("mmap", "warm")
"""Modes whose dense set stays in the model file's mmap (page cache; reclaim drops it)."""


@dataclass(frozen=True)
class ResidentDemand:
    """A configuration's resident memory by kind; every field in bytes.

    Attributes
    ----------
    dense_weights : {'mmap', 'warm', 'anon', 'ahwb'}
    dense_bytes : int
        Every dense tensor loaded (the ledger's ``dense_bytes``).
    embd_bytes : int
        ``token_embd``'s bytes (part of ``dense_bytes``): a token touches one row of it.
    embd_row_bytes : int
        One row of ``token_embd`` (``n_embd`` values in its type).
    expert_cache_bytes : int
        The expert cache budget (``--cache-mb``, or the auto budget): its entries are anonymous
        pages once filled.
    kv_bytes, recurrent_bytes, snapshot_bytes, draft_bytes : int
        From the ledger: target KV, recurrent slots (live + snapshots; ``snapshot_bytes`` is the
        snapshots' part of it), MTP draft context (KV + buffers).
    kv_bytes_per_token : int
        KV per context position (what attention reads per past position).
    recurrent_slot_bytes : int
        One recurrent slot (read and written by every decode).
    """

    dense_weights: str
    dense_bytes: int
    embd_bytes: int
    embd_row_bytes: int
    expert_cache_bytes: int
    kv_bytes: int
    recurrent_bytes: int
    snapshot_bytes: int
    draft_bytes: int
    kv_bytes_per_token: int
    recurrent_slot_bytes: int

    @property
    def pinned_bytes(self) -> int:
        """Reclaim-exempt: the dense set under ``ahwb``, else 0."""
        return self.dense_bytes if self.dense_weights in PINNED_MODES else 0

    @property
    def page_cache_bytes(self) -> int:
        """The model file's pages the run needs resident: the dense set under mmap/warm, else 0."""
        return self.dense_bytes if self.dense_weights in PAGE_CACHE_MODES else 0

    @property
    def anon_bytes(self) -> int:
        """Anonymous (zram-reclaimable): expert cache + KV + recurrent + draft context, plus the
        dense set under ``anon``."""
        dense = self.dense_bytes if self.dense_weights in ANON_MODES else 0
        return self.expert_cache_bytes + self.kv_bytes + self.recurrent_bytes + self.draft_bytes + dense

    @property
    def total_bytes(self) -> int:
        """``pinned + anon + page cache``."""
        return self.pinned_bytes + self.anon_bytes + self.page_cache_bytes

    @property
    def evictable_bytes(self) -> int:
        """What the kernel can take: ``anon + page cache``."""
        return self.anon_bytes + self.page_cache_bytes

    def touched_bytes(self, hit_bytes_per_token: float, n_past: int) -> float:
        """Evictable bytes one decode token touches.

        Parameters
        ----------
        hit_bytes_per_token : float
            Expert-cache hits per token, bytes (the routed slices' bytes minus the flash read:
            ``token_demand - read``).
        n_past : int
            Context positions attended (the KV read is ``kv_bytes_per_token * n_past``).

        Returns
        -------
        float
            ``hits + dense touched (0 if pinned) + KV read + one recurrent slot``, bytes; the
            dense touched is ``dense - token_embd + one row``.

        Raises
        ------
        ConfigError
            A negative or non-finite input.
        """
        if not 0 <= hit_bytes_per_token < float("inf") or n_past < 0:
            raise ConfigError(f"touched bytes: expected hits >= 0 and n_past >= 0, got "
                              f"{hit_bytes_per_token!r}, {n_past!r}")
        dense = 0 if self.dense_weights in PINNED_MODES else (self.dense_bytes - self.embd_bytes
                                                             + self.embd_row_bytes)
        return float(hit_bytes_per_token + dense + self.kv_bytes_per_token * n_past
                     + self.recurrent_slot_bytes)

    def lines(self) -> list[str]:
        """The demand as ``refsim memory`` prints it (MiB)."""
        m = lambda b: f"{b / MIB:>10.1f} MiB"  # noqa: E731
        return [f"resident:  {m(self.total_bytes)}  (pinned {self.pinned_bytes / MIB:.1f} + anon "
                f"{self.anon_bytes / MIB:.1f} + page cache {self.page_cache_bytes / MIB:.1f}; "
                f"--dense-weights {self.dense_weights})",
                f"evictable: {m(self.evictable_bytes)}  (anon + page cache: what reclaim can take)"]


def resident_demand(ledger, cache_bytes: int, embd_bytes: int = 0, embd_row_bytes: int = 0) -> ResidentDemand:
    """The resident demand of a run described by ``ledger`` with an expert cache of ``cache_bytes``.

    Parameters
    ----------
    ledger : refsim.cache.ledger.MemoryLedger
        The run's ledger (its ``dense_weights`` is the residency mode).
    cache_bytes : int
        Expert cache budget, bytes (``ledger.budget_bytes`` for ``--cache-mb auto``; 0: no cache).
    embd_bytes, embd_row_bytes : int, default 0
        ``token_embd``'s size and one row of it (:func:`model_demand` reads them from the model);
        0, 0 counts the whole dense set as touched per token.

    Returns
    -------
    ResidentDemand

    Raises
    ------
    ConfigError
        A negative size, ``embd_row_bytes > embd_bytes`` or ``embd_bytes > dense``, or an unknown
        ``dense_weights``.
    """
    mode = ledger.dense_weights
    if mode not in PINNED_MODES + ANON_MODES + PAGE_CACHE_MODES:
        raise ConfigError(f"--dense-weights: expected mmap, warm, anon or ahwb, got {mode!r}")
    for name, v in (("cache", cache_bytes), ("token_embd", embd_bytes), ("token_embd row", embd_row_bytes)):
        if not 0 <= v < float("inf"):
            raise ConfigError(f"resident demand: {name} bytes {v!r}, expected a finite number >= 0")
    if embd_row_bytes > embd_bytes or embd_bytes > ledger.dense_bytes:
        raise ConfigError(f"resident demand: expected 0 <= token_embd row ({embd_row_bytes}) <= "
                          f"token_embd ({embd_bytes}) <= dense ({ledger.dense_bytes}) bytes")
    return ResidentDemand(
        dense_weights=mode, dense_bytes=ledger.dense_bytes, embd_bytes=int(embd_bytes),
        embd_row_bytes=int(embd_row_bytes), expert_cache_bytes=int(cache_bytes),
        kv_bytes=ledger.kv_bytes, recurrent_bytes=ledger.recurrent_bytes,
        snapshot_bytes=ledger.snapshot_bytes,
        draft_bytes=ledger.draft_kv_bytes + ledger.draft_buffer_bytes,
        kv_bytes_per_token=ledger.kv_bytes // max(ledger.n_ctx, 1),
        recurrent_slot_bytes=ledger.recurrent_slot_bytes)


def model_demand(model, ledger, cache_bytes: int) -> ResidentDemand:
    """:func:`resident_demand` with ``token_embd``'s size and one row (``ne[0] = n_embd`` values
    in its type: :func:`refsim.model.bytes.row_size`) read from ``model``'s tensor table (a
    header-only file works; a model without ``token_embd`` counts 0, 0)."""
    ti = model.tensors.get("token_embd.weight")
    if ti is None:
        return resident_demand(ledger, cache_bytes)
    from refsim.model.bytes import row_size
    return resident_demand(ledger, cache_bytes, ti.n_bytes, row_size(ti.ggml_type, int(ti.shape_gguf[0])))


def added_demand(model, plain, spec, cache_bytes: int) -> tuple[int, int]:
    """``(resident, evictable)`` bytes a speculation configuration adds to a plain run at the same
    expert-cache budget: :func:`model_demand` of the ``spec`` ledger less the ``plain`` one's,
    total and evictable. Speculation's own memory (rollback snapshots, the MTP draft context) is
    anonymous; with ``--mtp`` the nextn block's dense tensors load too (ledger ``dense_bytes``),
    pinned under ``ahwb`` (resident, not evictable), anonymous under ``anon``, page cache under
    ``mmap``/``warm`` (both).

    Parameters
    ----------
    model : refsim.model.Model
    plain, spec : refsim.cache.ledger.MemoryLedger
        The plain run's and the speculation run's ledgers (same model, ``n_ctx`` and
        ``--dense-weights``).
    cache_bytes : int
        The expert cache budget both run at.

    Raises
    ------
    ConfigError
        The two ledgers differ in ``--dense-weights`` or ``n_ctx``; :func:`resident_demand`'s.
    """
    if plain.dense_weights != spec.dense_weights or plain.n_ctx != spec.n_ctx:
        raise ConfigError(f"added demand: the ledgers differ (dense {plain.dense_weights} vs "
                          f"{spec.dense_weights}, n_ctx {plain.n_ctx} vs {spec.n_ctx})")
    a, b = model_demand(model, plain, cache_bytes), model_demand(model, spec, cache_bytes)
    return b.total_bytes - a.total_bytes, b.evictable_bytes - a.evictable_bytes
