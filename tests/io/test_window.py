"""The window rule (refsim.io.window): hand-worked values and its invariants."""

import pytest
from hypothesis import given, strategies as st

import numpy as np

from refsim.errors import ConfigError
from refsim.io.window import ENGINE_BLOCK_BYTES, window_bytes, window_span


def test_engine_block_is_the_sources_align():
    assert ENGINE_BLOCK_BYTES == 4096        # expert_stream_source.h: size_t align_ = 4096


@pytest.mark.parametrize("offset, n, kw, span", [
    (4096, 4096, {}, (4096, 8192)),                      # aligned both ends: the slice itself
    (5000, 3000, {}, (4096, 8192)),                      # inside one block
    (4000, 200, {}, (0, 8192)),                          # 200 bytes straddling a boundary: 2 blocks
    (0, 1, {}, (0, 4096)),
    # the shared Qwen3-30B file: a gate slice of 884736 B (216 blocks) at a phase of 1536
    (443167232, 884736, {}, (443166720, 444055552)),     # 884736 + 4096 = 888832 bytes
    (100, 8192, {"file_size": 8500}, (0, 8500)),         # the window stops at the file's end
    (8192 + 512, 8192 - 512, {"file_size": 16384}, (8192, 16384)),
    (5000, 3000, {"o_direct": False}, (5000, 8000)),     # buffered: the exact bytes
    (5000, 0, {}, (5000, 5000)),                         # no slice, no read
    (5000, 3000, {"block": 512}, (4608, 8192)),
])
def test_window_span_hand_worked(offset, n, kw, span):
    assert window_span(offset, n, **kw) == span
    assert int(window_bytes([offset], [n], **kw)[0]) == span[1] - span[0]


def test_the_qwen_eof_slice_is_512_bytes_short():
    # the real file ends at phase 3584: its last slice (layer 47's down, expert 127, 1290240 B at
    # phase 3584) reads 1290240 + 4096 - 512 bytes, the one short window of the shared run
    end = 18550754816                    # data start 38400 + 18550716416 tensor bytes
    off = end - 1290240
    assert off % 4096 == 3584
    assert window_span(off, 1290240, file_size=end) == (off - 3584, end)
    assert end - (off - 3584) == 1290240 + 4096 - 512


@pytest.mark.parametrize("args", [(-1, 10), (10, -1), (0, 10, 3), (0, 10, 0), (90, 20, 4096, 100)])
def test_window_span_refusals(args):
    with pytest.raises(ConfigError):
        window_span(*args)


blocks = st.sampled_from([1, 2, 512, 4096, 65536])


@given(off=st.integers(0, 1 << 40), n=st.integers(1, 1 << 24), block=blocks)
def test_window_properties(off, n, block):
    start, end = window_span(off, n, block)
    assert start <= off and end >= off + n               # covers the slice
    assert start % block == 0 and end % block == 0      # aligned
    assert end - start >= n                              # window >= slice
    assert end - start - n < 2 * block                   # less than two blocks more
    assert end - start == window_bytes([off], [n], block)[0]
    assert window_span(off, n, block, o_direct=False) == (off, off + n)


@given(off=st.integers(0, 1 << 30), n=st.integers(1, 1 << 22), tail=st.integers(0, 1 << 13),
       block=blocks)
def test_window_stops_at_the_end_of_file(off, n, tail, block):
    size = off + n + tail
    start, end = window_span(off, n, block, file_size=size)
    full = window_span(off, n, block)
    assert start == full[0] and end == min(full[1], size)
    assert end >= off + n


@given(st.lists(st.tuples(st.integers(0, 1 << 36), st.integers(0, 1 << 22)), min_size=1,
                max_size=50), blocks)
def test_vector_form_equals_the_scalar_rule(slices, block):
    off, n = np.array(slices, dtype=np.int64).T
    want = [window_span(int(a), int(b), block)[1] - window_span(int(a), int(b), block)[0]
            for a, b in slices]
    assert window_bytes(off, n, block).tolist() == want
