"""The window the engine reads for one expert slice (the bytes its ``read_bytes`` counts).

Rules, with their sources:

- **One read per projection slice.** Each (layer, expert, projection) slice is one read of
  ``nb2`` bytes at ``file_off + e * nb2`` (expert_stream_source.cpp, ``load_layer`` /
  ``load_layer_async`` build one ``IoJob`` per present projection; bmoe-engine.md §3.1).
- **O_DIRECT widens it to aligned blocks.** ``read_slice`` counts the *window* the reader
  returns, not the request (expert_stream_source.cpp ``read_slice``: ``window =
  readers_[..]->read(...)``; ``IoTraceRow.read_bytes`` "the aligned window pulled"). With
  O_DIRECT the read starts at the offset rounded down to the block and ends at the slice's end
  rounded up (bmoe-engine.md §3.1: "widened to 4096-aligned boundaries ... file_reader.cpp"). The
  block is the source's ``align_`` = 4096 bytes (expert_stream_source.h), which no flag or
  preamble key changes; :data:`ENGINE_BLOCK_BYTES`.
- **Not past the end of the file.** A window whose rounded-up end lies past the file's end reads
  (and counts) only up to the end: ``pread`` returns the bytes the file has. The engine's reader
  (file_reader.cpp) is not among the shared sources; the rule is established from the engine's own
  counts: the one decode of the shared Qwen3-30B run that read the file's last slice (layer 47,
  expert 127) recorded 512 bytes fewer than a full window, and every other decode recorded exactly
  full windows (docs/io.md, "The shared trace, byte for byte").
- **Buffered reads count the exact bytes** (``o_direct=0``, or O_DIRECT refused by the file
  system: bmoe-engine.md §3.1 "Buffered fallback counts the exact bytes").
- A slice of 0 bytes (an absent projection of a fused layout) is no read at all (``read_slice``
  returns before reading).

Offsets and sizes are bytes (int64). MiB = 2^20 bytes.
"""

from __future__ import annotations

import numpy as np

from refsim.errors import ConfigError

ENGINE_BLOCK_BYTES = 4096
"""The engine's O_DIRECT alignment, bytes: ``ExpertStreamSource::align_`` (expert_stream_source.h),
handed to every ``FileReader`` as its alignment and bounce-buffer unit."""

MAX_BLOCK_BYTES = 1 << 20
"""Largest block accepted (a power of two; a device's logical block is 512 B to 64 KiB)."""


def check_block(block: int, where: str = "block size") -> int:
    """``block`` if it is a power of two in 1..:data:`MAX_BLOCK_BYTES`.

    Raises
    ------
    ConfigError
        Otherwise (names ``where``).
    """
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or not \
            1 <= block <= MAX_BLOCK_BYTES or block & (block - 1):
        raise ConfigError(f"{where}: expected a power of two in 1..{MAX_BLOCK_BYTES}, got {block!r}")
    return int(block)


def window_span(offset: int, nbytes: int, block: int = ENGINE_BLOCK_BYTES,
                file_size: int | None = None, o_direct: bool = True) -> tuple[int, int]:
    """``(start, end)`` file offsets of the window read for ``nbytes`` at ``offset`` (end
    exclusive; ``end - start`` is what ``read_bytes`` counts).

    Parameters
    ----------
    offset, nbytes : int
        The slice: first byte's file offset and its length, bytes (>= 0).
    block : int
        Alignment, bytes (a power of two; the engine's 4096).
    file_size : int, optional
        The file's size, bytes: an O_DIRECT window ends there at the latest.
    o_direct : bool
        False: buffered, the window is the slice itself.

    Raises
    ------
    ConfigError
        A negative offset or length, a slice past ``file_size``, a bad block.
    """
    check_block(block)
    if offset < 0 or nbytes < 0:
        raise ConfigError(f"slice at {offset} of {nbytes} bytes: expected offset and length >= 0")
    if file_size is not None and offset + nbytes > file_size:
        raise ConfigError(f"slice at {offset} of {nbytes} bytes ends past the file's "
                          f"{file_size} bytes")
    if nbytes == 0:
        return offset, offset
    if not o_direct:
        return offset, offset + nbytes
    start = offset - offset % block
    end = -(-(offset + nbytes) // block) * block
    if file_size is not None:
        end = min(end, file_size)
    return start, end


def window_bytes(offsets, nbytes, block: int = ENGINE_BLOCK_BYTES, file_size: int | None = None,
                 o_direct: bool = True) -> np.ndarray:
    """:func:`window_span`'s ``end - start`` for arrays of slices (int64, same shape; the inputs
    broadcast). Same rules and errors."""
    check_block(block)
    off = np.asarray(offsets, dtype=np.int64)
    n = np.asarray(nbytes, dtype=np.int64)
    off, n = np.broadcast_arrays(off, n)
    if (off < 0).any() or (n < 0).any():
        raise ConfigError("slices: expected offsets and lengths >= 0")
    if file_size is not None and (off + n > file_size).any():
        raise ConfigError(f"slices: a slice ends past the file's {file_size} bytes")
    if not o_direct:
        return n.copy()
    b = np.int64(block)
    start = off - off % b
    end = -(-(off + n) // b) * b
    if file_size is not None:
        end = np.minimum(end, np.int64(file_size))
    return np.where(n > 0, end - start, 0).astype(np.int64)
