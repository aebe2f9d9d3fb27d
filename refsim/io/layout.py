"""Where each expert slice lies in the model file: the layout the windows are computed on.

For every streamed layer ``il`` and projection slot ``p`` (the engine's recipe order: ``gate,
up, down`` for the split layout, ``gate_up, down`` for the fused one; bmoe-engine.md §6,
router_hook.cpp ``match_expert``), the slice of expert ``e`` is ``nb2`` bytes at ``file_off +
e * nb2``, where ``file_off`` is the tensor's absolute data offset (the GGUF's data-section start
plus the tensor's offset in its table) and ``nb2`` its per-expert stride (bmoe-engine.md §3.1;
expert_stream_source.h ``ExpertTensorRef``; llama-cpp-notes.md §1.2). A :class:`SliceLayout`
holds those two numbers per (layer, slot), the file's size and the read rules' parameters (block,
O_DIRECT), and turns expert ids into windows (:mod:`refsim.io.window`).

:func:`layout_from_model` reads them from a GGUF's tensor table (:func:`refsim.model.open_model`).
A header-only twin reproduces every tensor's offset *relative to the data section*; the absolute
data start is a property of the real file's header (its vocabulary, its chat template), which a
twin does not have: ``data_start`` replaces the file's own. Only ``data_start`` modulo the block
changes a window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim.errors import ConfigError
from refsim.io.window import ENGINE_BLOCK_BYTES, check_block, window_bytes

SPLIT_SLOTS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")
"""The split layout's recipe slots, in the engine's slot order (bmoe-engine.md §6)."""
FUSED_SLOTS = ("ffn_gate_up_exps", "ffn_down_exps")
"""The fused layout's slots (gemma4: ``ffn_gate_up_exps`` of twice the stride, then down)."""
MAX_SLOTS = 3
"""``MoeRecipe::max_exps``: at most three expert tensors per layer."""


@dataclass(frozen=True)
class SliceLayout:
    """The file positions of every expert slice, and the rules' parameters.

    Attributes
    ----------
    source : str
        The GGUF the offsets were read from (a real model or a header-only twin).
    n_expert : int
    offsets : (n_layer, 3) int64 ndarray
        Absolute file offset of expert 0's slice per (layer, slot), bytes; -1 where the slot is
        absent (a fused layout's third slot).
    strides : (n_layer, 3) int64 ndarray
        ``nb2`` per (layer, slot), bytes; 0 where absent.
    slot_names : tuple of tuple of str
        Per layer, the tensor suffix of each present slot.
    file_size : int
        The file's size, bytes (an O_DIRECT window ends there at the latest).
    block : int
        O_DIRECT alignment, bytes (the engine's 4096).
    o_direct : bool
        False: buffered reads, windows equal slices.
    data_start : int
        The data section's start the offsets assume, bytes.
    slot_of : (n_layer, n_expert) int64 ndarray, optional
        A permuted file layout (the ``refsim layout`` what-if): expert ``e`` of layer ``il`` lies
        at slice position ``slot_of[il, e]`` of each of its tensors; None: at ``e`` (the file
        as written).
    """

    source: str
    n_expert: int
    offsets: np.ndarray
    strides: np.ndarray
    slot_names: tuple
    file_size: int
    block: int = ENGINE_BLOCK_BYTES
    o_direct: bool = True
    data_start: int = 0
    slot_of: np.ndarray | None = None

    def position(self, il: int, experts) -> np.ndarray:
        """int64 array: the slice position of ``experts`` in layer ``il``'s tensors."""
        e = np.asarray(experts, dtype=np.int64)
        return e if self.slot_of is None else self.slot_of[il][e]

    def permuted(self, slot_of) -> "SliceLayout":
        """This layout with each layer's expert slices reordered: expert ``e`` of layer ``il`` at
        position ``slot_of[il, e]`` (every row a permutation of ``0..n_expert-1``).

        Raises
        ------
        ConfigError
            The shape is not (n_layer, n_expert) or a row is not a permutation.
        """
        import dataclasses
        p = np.asarray(slot_of, dtype=np.int64)
        if p.shape != (self.n_layer, self.n_expert) or \
                not (np.sort(p, axis=1) == np.arange(self.n_expert)).all():
            raise ConfigError(f"a slice permutation must be {self.n_layer} rows, each a "
                              f"permutation of 0..{self.n_expert - 1}")
        return dataclasses.replace(self, slot_of=p)

    @property
    def n_layer(self) -> int:
        return int(self.offsets.shape[0])

    @property
    def expert_bytes(self) -> np.ndarray:
        """(n_layer,) int64: one expert entry, the sum of its slices (the trace's expert_bytes)."""
        return self.strides.sum(axis=1)

    def slice_offsets(self, il: int, experts) -> np.ndarray:
        """(n, 3) int64: file offset of each slice of ``experts`` in layer ``il`` (-1 absent)."""
        e = self.position(il, experts)[:, None]
        off = self.offsets[il][None, :] + e * self.strides[il][None, :]
        return np.where(self.strides[il][None, :] > 0, off, -1)

    def slice_windows(self, il: int, experts) -> np.ndarray:
        """(n, 3) int64: the window read for each slice of ``experts`` in layer ``il`` (0 absent)."""
        off = self.slice_offsets(il, experts)
        n = np.broadcast_to(self.strides[il][None, :], off.shape)
        return window_bytes(np.maximum(off, 0), n, self.block, self.file_size, self.o_direct)

    def expert_windows(self) -> np.ndarray:
        """(n_layer, n_expert) int64: the window bytes of one miss of each (layer, expert)."""
        return np.stack([self.slice_windows(il, np.arange(self.n_expert)).sum(axis=1)
                         for il in range(self.n_layer)])

    def check_trace(self, header, where: str) -> None:
        """Refuse a trace whose preamble disagrees with this layout (another model file).

        Raises
        ------
        ConfigError
            A different expert count, fewer layers than the trace streams, or a layer whose
            slices do not sum to the preamble's ``expert_bytes`` (names the first such layer).
        """
        if header.n_expert != self.n_expert:
            raise ConfigError(f"{where}: {self.source} has {self.n_expert} experts per layer, the "
                              f"trace {header.n_expert}: not the model the trace was recorded with")
        if header.n_layer > self.n_layer:
            raise ConfigError(f"{where}: the trace streams {header.n_layer} layers, {self.source} "
                              f"has expert tensors in {self.n_layer}")
        eb = self.expert_bytes[:header.n_layer]
        bad = np.flatnonzero(eb != np.asarray(header.expert_bytes, dtype=np.int64))
        if bad.size:
            il = int(bad[0])
            raise ConfigError(f"{where}: layer {il}: {self.source}'s expert slices sum to "
                              f"{int(eb[il])} bytes, the trace's preamble says "
                              f"{int(header.expert_bytes[il])}: not the model the trace was "
                              f"recorded with")


def layout_from_model(model, block: int = ENGINE_BLOCK_BYTES, o_direct: bool = True,
                      data_start: int | None = None) -> SliceLayout:
    """The layout of an opened model (:class:`refsim.model.Model`): every block's streamed
    expert tensors, in slot order, at their tensor-table offsets.

    Parameters
    ----------
    model : refsim.model.Model
    block : int
        O_DIRECT alignment, bytes (a power of two).
    o_direct : bool
    data_start : int, optional
        The data section's start to assume instead of the file's own (a twin's header is not
        the real file's); must be a multiple of the file's ``general.alignment``.

    Raises
    ------
    ConfigError
        No streamed expert tensor; ``data_start`` negative or not aligned; a bad block.
    """
    from refsim.model.bytes import expert_stride

    check_block(block, "--block-size")
    h = model.header
    if data_start is None:
        data_start = h.data_start
    if data_start < 0 or data_start % h.alignment:
        raise ConfigError(f"--data-start {data_start}: expected a multiple of {model.path}'s "
                          f"alignment ({h.alignment} bytes) >= 0")
    shift = data_start - h.data_start
    n_expert = model.spec.n_expert
    blocks = [lb.il for lb in model.layers if lb.n_expert]
    if not blocks:
        raise ConfigError(f"{model.path}: no streamed expert tensor (not a MoE model)")
    n_layer = max(blocks) + 1
    offsets = np.full((n_layer, MAX_SLOTS), -1, dtype=np.int64)
    strides = np.zeros((n_layer, MAX_SLOTS), dtype=np.int64)
    names = []
    end = 0
    for ti in h.tensors.values():
        end = max(end, ti.data_offset + ti.n_bytes)
    for il in range(n_layer):
        fused = f"blk.{il}.ffn_gate_up_exps.weight" in h.tensors
        slots = FUSED_SLOTS if fused else SPLIT_SLOTS
        present = []
        for p, suffix in enumerate(slots):
            ti = h.tensors.get(f"blk.{il}.{suffix}.weight")
            if ti is None:
                continue
            offsets[il, p] = ti.data_offset + shift
            strides[il, p] = expert_stride(ti, n_expert)
            present.append(suffix)
        names.append(tuple(present))
    if h.has_data:
        file_size = h.file_size + shift
    else:            # a header-only file: the data a writer would append, padded as gguf pads it
        a = h.alignment
        file_size = -(-(end + shift) // a) * a
    return SliceLayout(source=str(model.path), n_expert=n_expert, offsets=offsets,
                       strides=strides, slot_names=tuple(names), file_size=int(file_size),
                       block=block, o_direct=o_direct, data_start=int(data_start))
