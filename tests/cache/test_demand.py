"""Resident demand by residency kind (refsim.cache.demand; bmoe-engine.md §3.4)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from refsim import MIB
from refsim.cache.demand import model_demand, resident_demand
from refsim.cache.ledger import MemoryLedger, memory_ledger
from refsim.errors import ConfigError
from refsim.model import open_model
from refsim.testing.twins import qwen36_twin


def _ledger(mode="anon", dense=1000 * MIB, n_ctx=100, kv_per_token=1024, slot=10 * MIB, n_rs=0,
            draft_kv=0, draft_buf=0):
    return MemoryLedger(n_ctx=n_ctx, draft_max=n_rs, mtp=draft_kv > 0, n_rs_seq=n_rs,
                        kv_bytes=kv_per_token * n_ctx, recurrent_slot_bytes=slot,
                        recurrent_bytes=slot * (1 + n_rs), snapshot_bytes=slot * n_rs,
                        draft_kv_bytes=draft_kv, draft_ubatch=32 if draft_kv else 0,
                        draft_buffer_bytes=draft_buf, dense_bytes=dense,
                        total_expert_bytes=20000 * MIB, dense_weights=mode)


# --- hand-worked ---------------------------------------------------------------------------
def test_kinds_hand_worked():
    # dense 1000 MiB, KV 100 x 1024 B, recurrent 10 MiB x (1 + 3 snapshots), draft 5 + 1 MiB,
    # cache 2000 MiB
    led = lambda mode: _ledger(mode, n_rs=3, draft_kv=5 * MIB, draft_buf=1 * MIB)  # noqa: E731
    ctx = 100 * 1024 + 40 * MIB + 6 * MIB
    ahwb = resident_demand(led("ahwb"), 2000 * MIB)
    assert ahwb.pinned_bytes == 1000 * MIB
    assert ahwb.anon_bytes == 2000 * MIB + ctx
    assert ahwb.page_cache_bytes == 0
    assert ahwb.total_bytes == 3000 * MIB + ctx
    assert ahwb.evictable_bytes == 2000 * MIB + ctx
    anon = resident_demand(led("anon"), 2000 * MIB)
    assert (anon.pinned_bytes, anon.anon_bytes, anon.page_cache_bytes) == (0, 3000 * MIB + ctx, 0)
    assert anon.evictable_bytes == anon.total_bytes == 3000 * MIB + ctx
    for mode in ("mmap", "warm"):
        d = resident_demand(led(mode), 2000 * MIB)
        assert (d.pinned_bytes, d.anon_bytes, d.page_cache_bytes) == (0, 2000 * MIB + ctx, 1000 * MIB)
    assert anon.snapshot_bytes == 30 * MIB and anon.draft_bytes == 6 * MIB


def test_touched_hand_worked():
    # token_embd 200 MiB of the 1000 MiB dense, one row 4 KiB: a token touches 800 MiB + 4 KiB of
    # dense, 50 positions x 1024 B of KV, one 10 MiB slot, and the hits
    d = resident_demand(_ledger("anon"), 2000 * MIB, 200 * MIB, 4096)
    assert d.touched_bytes(300 * MIB, 50) == 300 * MIB + 800 * MIB + 4096 + 50 * 1024 + 10 * MIB
    pinned = resident_demand(_ledger("ahwb"), 2000 * MIB, 200 * MIB, 4096)
    assert pinned.touched_bytes(300 * MIB, 50) == 300 * MIB + 50 * 1024 + 10 * MIB


def test_twin_qwen36_ahwb_figures(tmp_path):
    """The Qwen3.6 twin at the phone drop-cold runs' configuration (n_ctx 4096, cache 3000 MiB,
    ahwb): dense 2138925568 B (token_embd 286064640 B, Q4_K row of 2048 values = 8 x 144 B),
    KV 4096 x 20480 B, one recurrent slot 65863680 B."""
    model = open_model(qwen36_twin(tmp_path / "q36.gguf"))
    led = memory_ledger(model, 4096, 0, False, dense_weights="ahwb")
    d = model_demand(model, led, 3000 * MIB)
    assert (d.dense_bytes, d.embd_bytes, d.embd_row_bytes) == (2138925568, 286064640, 1152)
    assert d.pinned_bytes == 2138925568
    assert d.anon_bytes == 3000 * MIB + 4096 * 20480 + 65863680
    assert d.total_bytes == 5434403328
    assert d.touched_bytes(0, 0) == 65863680
    anon = model_demand(model, memory_ledger(model, 4096, 0, False, dense_weights="anon"), 3000 * MIB)
    assert anon.touched_bytes(0, 0) == 2138925568 - 286064640 + 1152 + 65863680


# --- properties ----------------------------------------------------------------------------
@given(st.sampled_from(["mmap", "warm", "anon", "ahwb"]), st.integers(0, 10**10),
       st.integers(0, 10**10), st.integers(1, 10**5), st.integers(0, 8),
       st.floats(0, 1e10), st.integers(0, 10**5))
def test_partition_and_monotone(mode, dense, cache, n_ctx, n_rs, hits, n_past):
    led = _ledger(mode, dense=dense, n_ctx=n_ctx, n_rs=n_rs)
    d = resident_demand(led, cache)
    assert d.total_bytes == d.pinned_bytes + d.anon_bytes + d.page_cache_bytes
    assert d.evictable_bytes == d.total_bytes - d.pinned_bytes
    assert d.total_bytes == dense + cache + led.kv_bytes + led.recurrent_bytes
    t = d.touched_bytes(hits, n_past)
    assert hits + led.recurrent_slot_bytes <= t <= hits + dense + 1024 * n_past + led.recurrent_slot_bytes
    assert d.touched_bytes(hits + 1, n_past) > t
    assert d.touched_bytes(hits, n_past + 1) >= t
    # pinning only removes the dense set from what a token touches and what reclaim can take
    p = resident_demand(_ledger("ahwb", dense=dense, n_ctx=n_ctx, n_rs=n_rs), cache)
    assert p.total_bytes == d.total_bytes and p.evictable_bytes <= d.evictable_bytes
    assert p.touched_bytes(hits, n_past) <= t


def test_errors():
    with pytest.raises(ConfigError, match="--dense-weights"):
        resident_demand(_ledger("zram"), 0)
    with pytest.raises(ConfigError, match="expected a finite number >= 0"):
        resident_demand(_ledger(), -1)
    with pytest.raises(ConfigError, match="token_embd"):
        resident_demand(_ledger(), 0, 10, 20)
    with pytest.raises(ConfigError, match="token_embd"):
        resident_demand(_ledger(dense=5), 0, 10, 1)
    with pytest.raises(ConfigError, match="n_past"):
        resident_demand(_ledger(), 0).touched_bytes(-1.0, 0)
    with pytest.raises(ConfigError, match="n_past"):
        resident_demand(_ledger(), 0).touched_bytes(float("nan"), 0)


@pytest.mark.parametrize("mode", ["mmap", "warm", "anon", "ahwb"])
def test_added_demand_by_residency(tmp_path, mode):
    """What MTP d3 and n-gram d3 add at 3000 MiB (Qwen3.6 twin, n_ctx 4096): speculation's memory
    (snapshots 188.4 MiB; MTP also the draft context, 257.1 in all) is anonymous, evictable; with
    --mtp the nextn block's dense tensors (24.4 MiB) load too: pinned under ahwb (resident, not
    evictable), evictable otherwise."""
    from refsim.cache.demand import added_demand
    m = open_model(qwen36_twin(str(tmp_path / "q36.gguf")))
    plain = memory_ledger(m, 4096, 0, False, dense_weights=mode)
    mtp = memory_ledger(m, 4096, 3, True, dense_weights=mode)
    ngram = memory_ledger(m, 4096, 3, False, dense_weights=mode)
    nextn_dense = mtp.dense_bytes - plain.dense_bytes
    assert nextn_dense / MIB == pytest.approx(24.38, abs=0.005)
    total, evict = added_demand(m, plain, mtp, 3000 * MIB)
    assert total == mtp.speculation_bytes + nextn_dense
    assert evict == mtp.speculation_bytes + (0 if mode == "ahwb" else nextn_dense)
    assert added_demand(m, plain, ngram, 3000 * MIB) == (ngram.snapshot_bytes,) * 2
    assert ngram.snapshot_bytes / MIB == pytest.approx(188.44, abs=0.005)
    with pytest.raises(ConfigError, match="ledgers differ"):
        added_demand(m, plain, memory_ledger(m, 2048, 3, True, dense_weights=mode), 3000 * MIB)
