"""Requests of a decode in the engine's order (refsim.io.requests), on a hand-made layout and
through the replay."""

import numpy as np
from hypothesis import given, settings, strategies as st

from refsim.cache import ExpertCache
from refsim.events import DecodeEvent, DecodeKind
from refsim.io.layout import SliceLayout
from refsim.io.requests import IoConfig, IoTally, batch_order, event_requests, missed_in_order
from refsim.io.window import window_span


def small_layout(o_direct=True, block=4096):
    # 2 layers x 8 experts; layer 0 split (gate 4096 B, up 4096 B, down 6144 B) at phase 1000,
    # layer 1 fused (gate_up 8192 B, down 5000 B)
    offsets = np.array([[1000, 1000 + 8 * 4096, 1000 + 16 * 4096], [300000, 300000 + 8 * 8192, -1]],
                       dtype=np.int64)
    strides = np.array([[4096, 4096, 6144], [8192, 5000, 0]], dtype=np.int64)
    end = int(offsets[1, 1] + 8 * 5000)
    return SliceLayout("hand.gguf", 8, offsets, strides,
                       (("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"),
                        ("ffn_gate_up_exps", "ffn_down_exps")), end, block, o_direct, 0)


def test_batch_order_serial_is_expert_major_first_seen_overlap_slot_major_ascending():
    e, s = batch_order([7, 2, 5], [True, True, True], overlap=False)
    assert list(zip(e.tolist(), s.tolist())) == [(7, 0), (7, 1), (7, 2), (2, 0), (2, 1), (2, 2),
                                                (5, 0), (5, 1), (5, 2)]
    e, s = batch_order([7, 2, 5], [True, True, True], overlap=True)
    assert list(zip(e.tolist(), s.tolist())) == [(2, 0), (5, 0), (7, 0), (2, 1), (5, 1), (7, 1),
                                                (2, 2), (5, 2), (7, 2)]
    e, s = batch_order([3], [True, True, False], overlap=True)     # fused: two slots
    assert list(zip(e.tolist(), s.tolist())) == [(3, 0), (3, 1)]


def test_missed_in_order_is_token_major_per_layer():
    routes = np.array([[[4, 1], [6, 2]], [[1, 5], [2, 3]]], dtype=np.int16)   # (pos, layer, k)
    charged = np.array([[[9, 9], [0, 9]], [[0, 9], [0, 9]]], dtype=np.int64)
    il, e = missed_in_order(routes, charged)
    assert il.tolist() == [0, 0, 0, 1, 1]
    assert e.tolist() == [4, 1, 5, 2, 3]


def test_event_requests_hand_worked():
    lay = small_layout()
    routes = np.array([[[5, 0, 3], [1, 6, 2]]], dtype=np.int16)      # one position, 2 layers, k=3
    charged = np.array([[[9, 0, 9], [0, 9, 0]]], dtype=np.int64)     # misses: L0 {5, 3}, L1 {6}
    req = event_requests(routes, charged, lay, IoConfig(io_threads=2, overlap=False))
    # serial: L0 expert 5 (gate, up, down), expert 3 (gate, up, down); then L1 expert 6 (2 slots)
    assert req.layer.tolist() == [0] * 6 + [1] * 2
    assert req.expert.tolist() == [5, 5, 5, 3, 3, 3, 6, 6]
    assert req.slot.tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    assert req.offset.tolist() == [1000 + 5 * 4096, 1000 + 13 * 4096, 1000 + 16 * 4096 + 5 * 6144,
                                   1000 + 3 * 4096, 1000 + 11 * 4096, 1000 + 16 * 4096 + 3 * 6144,
                                   300000 + 6 * 8192, 300000 + 8 * 8192 + 6 * 5000]
    # windows: a 4096 B gate/up slice at phase 1000 spans 2 blocks (8192); the down slices at
    # 97256 and 84968 (phase 3048): 3048 + 6144 = 9192 -> 3 blocks; L1's gate_up at 349152
    # (phase 992): 992 + 8192 -> 3 blocks; its down at 395536 (phase 2320): 2320 + 5000 -> 2
    assert req.window.tolist() == [8192, 8192, 12288, 8192, 8192, 12288, 12288, 8192]
    assert window_span(395536, 5000) == (393216, 401408)
    # lanes of L0's windows 8192, 8192, 12288, 8192, 8192, 12288 on 2 lanes: 0 (idle at 8192),
    # 1 (8192), 0 (tie: lowest; 20480), 1 (16384), 1 (24576), 0 (32768)
    assert req.lane.tolist() == [0, 1, 0, 1, 1, 0, 0, 1]
    assert req.lane_bytes == 32768 + 12288       # L0's busiest lane, then L1's (12288 vs 8192)
    assert req.batches == 2
    over = event_requests(routes, charged, lay, IoConfig(io_threads=2, overlap=True))
    assert over.expert.tolist() == [3, 5, 3, 5, 3, 5, 6, 6]
    assert over.slot.tolist() == [0, 0, 1, 1, 2, 2, 0, 1]
    assert sorted(over.window.tolist()) == sorted(req.window.tolist())


def test_buffered_windows_are_the_slices():
    lay = small_layout(o_direct=False)
    routes = np.array([[[5, 0, 3], [1, 6, 2]]], dtype=np.int16)
    charged = np.array([[[9, 0, 9], [0, 9, 0]]], dtype=np.int64)
    req = event_requests(routes, charged, lay, IoConfig())
    assert (req.window == req.nbytes).all()


events_st = st.lists(st.lists(st.lists(st.integers(0, 7), min_size=3, max_size=3,
                                       unique=True), min_size=2, max_size=2),
                     min_size=1, max_size=12)


@settings(max_examples=40)
@given(events_st, st.integers(1, 40), st.integers(1, 9), st.booleans())
def test_requests_partition_the_missed_slices(routing, budget_entries, threads, overlap):
    lay = small_layout()
    cache = ExpertCache(lay.expert_bytes, 8, budget_entries * 20000)
    tally = IoTally(lay, IoConfig(threads, overlap))
    for pos, rts in enumerate(routing):
        ev = DecodeEvent(DecodeKind.PLAIN, np.array([pos]), np.array([rts], dtype=np.int16))
        rec = cache.apply(ev)
        req = tally.add_event(rec.kind, ev.routes, rec.charged_bytes)
        # the requests are exactly the missed entries' slices, each once
        missed = {(il, int(ev.routes[p, il, s])) for p, il, s in np.argwhere(rec.charged_bytes > 0)}
        got = list(zip(req.layer.tolist(), req.expert.tolist(), req.slot.tolist()))
        assert len(got) == len(set(got))
        want = {(il, e, p) for il, e in missed for p in range(3) if lay.strides[il, p] > 0}
        assert set(got) == want
        assert int(req.nbytes.sum()) == rec.read_bytes       # slices sum to the cache's read bytes
        assert (req.window >= req.nbytes).all() and (req.window - req.nbytes < 2 * 4096).all()
        assert ((req.lane >= 0) & (req.lane < min(threads, 8))).all()
        # layer by layer, in the engine's order: serial expert-major in first-seen order,
        # overlap slot-major with the experts ascending
        assert (np.diff(req.layer) >= 0).all()
        for il in set(req.layer.tolist()):
            sel = req.layer == il
            e, s = req.expert[sel].tolist(), req.slot[sel].tolist()
            n_slot = int((lay.strides[il] > 0).sum())
            seen = [int(ev.routes[0, il, k]) for k in range(3) if rec.charged_bytes[0, il, k] > 0]
            if overlap:
                assert e == sorted(seen) * n_slot
                assert s == [p for p in range(n_slot) for _ in seen]
            else:
                assert e == [x for x in seen for _ in range(n_slot)]
                assert s == list(range(n_slot)) * len(seen)
    assert int(tally.slice_bytes.sum()) == cache.stats.total("read_bytes")
    assert list(tally.pending) and all(w >= 0 and n >= 0 for w, n in tally.pending)
