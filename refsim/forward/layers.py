"""The readable blocks of the reference forward passes: ``linear``, ``rms_norm``, ``rope_neox``, ``attention``,
``swiglu``/``geglu``, ``moe_ffn``, ``logit_margin`` (every arch's pass is built from them).

The router (``route_topk``) and the per-layer hook sequence are in :mod:`refsim.forward.routing`; the fused
one-position kernels that compute several of these blocks in one Numba call (same bits) are in
:mod:`refsim.forward.fused`, chosen by the target (:mod:`refsim.forward.passes`), never from here.

Every block works on float32 rows and is **batch-invariant by construction**: row ``p`` of
the output is computed by the same instructions in the same order whatever other rows share
the call, so decoding N positions at once is bit-identical to N one-position calls (the
property llama.cpp only approximates). The arithmetic, fixed for every block:

- matrix products (:func:`linear`): each weight row is decoded to float32 by
  :mod:`refsim.kernels` (bit-exact with gguf-py), then dotted with the input in float64 using
  8 interleaved partial sums (element ``c`` goes to sum ``c % 8``), combined as
  ``((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7))`` and rounded once to float32. Products of two
  float32 numbers are exact in float64, so the only roundings are the sums.
- element-wise steps follow ggml's float32 formulas (ggml/src/ggml-cpu/ops.cpp, vec.h):
  RMSNorm ``sum(x*x)`` in float64 then ``scale = 1/sqrt(mean + eps)`` in float32;
  softmax ``exp(x - max)`` in float32 with a float64 sum; SiLU ``x / (1 + exp(-x))``.

Numerics modes (:class:`Numerics`):

- ``exact``: the above, no activation quantisation; RoPE angles in float64.
- ``ggml``: products with Q4_0/Q5_0/Q8_0/MXFP4/IQ4_NL (Q8_0 activations), Q4_1/Q5_1 (Q8_1) and
  Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS/TQ1_0/TQ2_0 (Q8_K activations) weights quantize the activation
  row to int8 blocks and sum each block's ``q_w * q_x`` exactly in integers, then scale in
  float64 (:mod:`refsim.kernels.qdot` and :mod:`refsim.kernels.qdot_ext`, as
  llama.cpp's ``vec_dot`` functions; the value is the float64 product of the dequantized weight
  and the round-tripped activation up to float64 rounding); F16/BF16 weights take the
  activation's F16/BF16 round trip (:mod:`refsim.forward.actq`) and the float product above.
  RoPE angles as ggml computes them (float32, by repeated multiplication). This is what makes refsim agree with llama.cpp to ~1e-6 instead of ~1e-2
  (shared/reference/oracle/README.md, "Numbers for test design").

Dimension names: ``n_pos, n_embd, n_head, n_head_kv, head_dim, n_ff_exp, n_expert, k
(n_expert_used), n_vocab``. Arrays are in NumPy order.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from numba import njit, prange

from refsim.errors import ConfigError
from refsim.forward.actq import ACT_NONE, act_kind, quantize_activations
from refsim.kernels import KERNELS, row_bytes
from refsim.kernels.loops import decode_row
from refsim.kernels.mxfp4 import KVALUES
from refsim.kernels.ggml_matmul import QDOT_ALL, QDOT_TYPES, act_block, qdot_matmul, qdot_pairs
from refsim.kernels.qdot import QActs, quantize_acts
from refsim.kernels.registry import EXACT4_BLOCK, EXACT4_TYPES, F16_TO_F32, F32, Q4_0, Q8_0
from refsim.kernels.simd import acc8_f32, acc8_q4_0, acc8_q8_0
from refsim.kernels.simd_exact import exact_rows4

NUMERICS = ("exact", "ggml")
"""Values of ``--numerics``."""


@dataclass(frozen=True)
class Numerics:
    """Which arithmetic a forward pass uses.

    Parameters
    ----------
    mode : {'exact', 'ggml'}
    act_tie : {'even', 'up', 'down'}, default 'even'
        ``ggml`` mode: how an exact half in activation quantisation rounds ('even' is ggml's
        rule; 'up'/'down' let a test see both sides of a tie llama.cpp's float32 sums may land
        on either side of).

    Raises
    ------
    ConfigError
        For any other mode or tie rule.
    """

    mode: str = "exact"
    act_tie: str = "even"

    def __post_init__(self) -> None:
        if self.mode not in NUMERICS:
            raise ConfigError(f"--numerics: expected one of {', '.join(NUMERICS)}, got {self.mode!r}")
        if self.act_tie not in ("even", "up", "down"):
            raise ConfigError(f"act_tie: expected even, up or down, got {self.act_tie!r}")

    @property
    def quantize_activations(self) -> bool:
        """True in ``ggml`` mode: activations take the weight's ``vec_dot_type`` round trip."""
        return self.mode == "ggml"

    @property
    def tie_code(self) -> int:
        """``act_tie`` as the kernels' code: 0 even, 1 up, 2 down."""
        return ("even", "up", "down").index(self.act_tie)

    @property
    def rope_f32(self) -> bool:
        """True in ``ggml`` mode: RoPE angles ``pos * base^(-2i/n_rot)`` by float32 repeated products."""
        return self.mode == "ggml"


@dataclass(frozen=True)
class QWeight:
    """A 2-D weight as raw quantized rows (a memory-mapped view; nothing is dequantized whole).

    Parameters
    ----------
    raw : (n_out, row_bytes) uint8 ndarray
        Rows of GGUF ``ne = {n_in, n_out}``; ``y = W @ x``.
    qtype : int
        ggml type id.
    n_in : int
        Elements per row (GGUF ne0).
    """

    raw: np.ndarray
    qtype: int
    n_in: int

    def __post_init__(self) -> None:
        if self.raw.ndim != 2 or self.raw.shape[1] != row_bytes(self.qtype, self.n_in):
            raise ConfigError(f"weight rows of shape {self.raw.shape} do not hold {self.n_in} "
                              f"elements of ggml type {self.qtype}")
        # plain-ndarray views for the fused kernels (Numba types a numpy.memmap argument ~6x slower than an ndarray)
        object.__setattr__(self, "_u8", np.asarray(self.raw))
        object.__setattr__(self, "_i8", self._u8.view(np.int8))   # the int8 view the integer products read

    @property
    def n_out(self) -> int:
        return int(self.raw.shape[0])

    def rows(self, idx: np.ndarray) -> np.ndarray:
        """Dequantize selected rows (e.g. token embeddings): ``(len(idx), n_in)`` float32."""
        sel = np.ascontiguousarray(self.raw[np.asarray(idx, dtype=np.int64)])
        out = np.empty((sel.shape[0], self.n_in), dtype=np.float32)
        _dequant_rows(self.qtype, sel, self.n_in, F16_TO_F32, KVALUES, out)
        return out


@njit(cache=True)
def _dequant_rows(kind, raw, n_cols, table, kvalues, out):
    for r in range(raw.shape[0]):
        decode_row(kind, raw[r], n_cols, table, kvalues, out[r])


@njit(cache=True)
def _dot8(w, x):
    """float64 dot of float32 vectors with 8 interleaved partial sums (len a multiple of 8)."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    for c in range(0, w.shape[0], 8):
        s0 += np.float64(w[c]) * np.float64(x[c])
        s1 += np.float64(w[c + 1]) * np.float64(x[c + 1])
        s2 += np.float64(w[c + 2]) * np.float64(x[c + 2])
        s3 += np.float64(w[c + 3]) * np.float64(x[c + 3])
        s4 += np.float64(w[c + 4]) * np.float64(x[c + 4])
        s5 += np.float64(w[c + 5]) * np.float64(x[c + 5])
        s6 += np.float64(w[c + 6]) * np.float64(x[c + 6])
        s7 += np.float64(w[c + 7]) * np.float64(x[c + 7])
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


_CHUNK = 16
PARALLEL_MIN_ELEMENTS = 1 << 23
"""Weights with at least this many elements (``n_out * n_in``, 8 Mi) are split over threads; smaller
products run on one thread (a thread launch costs more than they do). Results are identical."""


@njit(cache=True, inline="always")
def _sum8(acc):
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))


@njit(cache=True)
def _linear_rows(kind, raw, n_cols, table, kvalues, x64, out, r0, r1, w):
    """Rows ``r0..r1-1`` of :func:`linear_kernel` with ``x64 = float64(x)``: the :func:`_dot8`
    accumulation done 8 lanes at a time by :mod:`refsim.kernels.simd` (``acc8_*``; bit-identical).
    Contiguous rows of F32, Q4_0, Q5_0, Q8_0, MXFP4, Q4_K, Q5_K and Q6_K go four at a time
    (:func:`refsim.kernels.simd_exact.exact_rows4`, the same lanes bit for bit); the rest one at a time,
    Q4_0 and Q8_0 blocks decoded in registers, other types row by row into ``w``."""
    n_vec = x64.shape[0]
    z = 0.0
    if raw.strides[1] == 1 and kind in EXACT4_TYPES:
        # four contiguous rows at a time (simd_exact.exact_rows4: the same lanes, bit for bit); the rows left
        # over go one at a time below
        nb = n_cols // EXACT4_BLOCK[kind]
        r = r0
        while r + 4 <= r1:
            for v in range(n_vec):
                s4 = exact_rows4(kind, raw, r, nb, x64[v], table)
                for i in range(4):
                    out[v, r + i] = np.float32(s4[i])
            r += 4
        r0 = r
    if kind == Q4_0:   # d * (q - 8)
        for r in range(r0, r1):
            row = raw[r]
            for v in range(n_vec):
                xv = x64[v]
                acc = (z, z, z, z, z, z, z, z)
                for b in range(n_cols // 32):
                    o = b * 18
                    d = table[np.int64(row[o]) | (np.int64(row[o + 1]) << 8)]
                    acc = acc8_q4_0(acc, row, o + 2, d, xv, b * 32)
                out[v, r] = np.float32(_sum8(acc))
    elif kind == Q8_0:  # d * q
        rawi = raw.view(np.int8)
        for r in range(r0, r1):
            row = raw[r]
            rowi = rawi[r]
            for v in range(n_vec):
                xv = x64[v]
                acc = (z, z, z, z, z, z, z, z)
                for b in range(n_cols // 32):
                    o = b * 34
                    d = table[np.int64(row[o]) | (np.int64(row[o + 1]) << 8)]
                    acc = acc8_q8_0(acc, rowi, o + 2, d, xv, b * 32)
                out[v, r] = np.float32(_sum8(acc))
    elif kind == F32:   # the row's bytes are the weights
        for r in range(r0, r1):
            wr = raw[r].view(np.float32)
            for v in range(n_vec):
                xv = x64[v]
                acc = (z, z, z, z, z, z, z, z)
                for c in range(0, n_cols, 8):
                    acc = acc8_f32(acc, wr, c, xv, c)
                out[v, r] = np.float32(_sum8(acc))
    else:
        for r in range(r0, r1):
            decode_row(kind, raw[r], n_cols, table, kvalues, w)
            for v in range(n_vec):
                xv = x64[v]
                acc = (z, z, z, z, z, z, z, z)
                for c in range(0, n_cols, 8):
                    acc = acc8_f32(acc, w, c, xv, c)
                out[v, r] = np.float32(_sum8(acc))


@njit(cache=True)
def linear_kernel(kind, raw, n_cols, table, kvalues, x, out):
    """``out[v, r] = dot8(decode(raw[r]), x[v])`` rounded to float32 (one thread).

    Parameters
    ----------
    kind : int
        ggml type id of the rows.
    raw : (n_rows, row_bytes) uint8 ndarray
    n_cols : int
        A multiple of 8 (every ggml block size is).
    x : (n_vec, n_cols) float32 ndarray
    out : (n_vec, n_rows) float32 ndarray
        Written in place.
    """
    w = np.empty(n_cols, dtype=np.float32)
    _linear_rows(kind, raw, n_cols, table, kvalues, x.astype(np.float64), out, 0, raw.shape[0], w)


@njit(cache=True, parallel=True)
def linear_kernel_parallel(kind, raw, n_cols, table, kvalues, x, out):
    """:func:`linear_kernel` with rows split over threads in chunks of 16; each ``out[v, r]`` is
    still computed by one thread in the same order, so results are bit-identical."""
    n_rows = raw.shape[0]
    n_chunks = (n_rows + _CHUNK - 1) // _CHUNK
    x64 = x.astype(np.float64)
    for ch in prange(n_chunks):
        w = np.empty(n_cols, dtype=np.float32)
        _linear_rows(kind, raw, n_cols, table, kvalues, x64, out, ch * _CHUNK, min(n_rows, (ch + 1) * _CHUNK), w)


@njit(cache=True, parallel=True)
def expert_pairs_kernel(kind, raw3, n_cols, table, kvalues, ids, x, out):
    """``out[i, r] = dot8(decode(raw3[ids[i], r]), x[i])``: one vector per (expert, vector) pair,
    rows of all pairs split over threads in chunks of 16. Each element is computed exactly as
    :func:`linear_kernel` computes a one-vector product (same bits), in one parallel launch.

    Parameters
    ----------
    raw3 : (n_expert, n_rows, row_bytes) uint8 ndarray
    ids : (m,) int64 ndarray
        Expert of each pair.
    x : (m, n_cols) float32 ndarray
    out : (m, n_rows) float32 ndarray
    """
    m = ids.shape[0]
    n_rows = raw3.shape[1]
    per = (n_rows + _CHUNK - 1) // _CHUNK
    x64 = x.astype(np.float64)
    for job in prange(m * per):
        i = job // per
        ch = job - i * per
        w = np.empty(n_cols, dtype=np.float32)
        _linear_rows(kind, raw3[ids[i]], n_cols, table, kvalues, x64[i:i + 1], out[i:i + 1],
                     ch * _CHUNK, min(n_rows, (ch + 1) * _CHUNK), w)


@njit(cache=True)
def expert_pairs_kernel_serial(kind, raw3, n_cols, table, kvalues, ids, x, out):
    """:func:`expert_pairs_kernel` on one thread (for small products)."""
    w = np.empty(n_cols, dtype=np.float32)
    x64 = x.astype(np.float64)
    for i in range(ids.shape[0]):
        _linear_rows(kind, raw3[ids[i]], n_cols, table, kvalues, x64[i:i + 1], out[i:i + 1], 0, raw3.shape[1], w)


def expert_linear(raw3: np.ndarray, qtype: int, n_in: int, ids: np.ndarray, x: np.ndarray,
                  numerics: Numerics, acts: QActs | None = None) -> np.ndarray:
    """Per pair ``i``: ``W_{ids[i]} @ x[i]`` for a 3-D expert tensor, in one (threaded) call.

    Parameters
    ----------
    raw3 : (n_expert, n_out, row_bytes) uint8 ndarray
        Memory-mapped expert slices (only the slices in ``ids`` are read).
    qtype : int
    n_in : int
    ids : (m,) int array
    x : (m, n_in) float32 ndarray
    numerics : Numerics
    acts : QActs, optional
        ``ggml`` mode with a quantized ``qtype``: ``x`` already quantized to ``act_block(qtype)``
        (``quantize_acts(x, ...)``, e.g. shared by ``gate`` and ``up``); ``x`` is then not read.

    Returns
    -------
    (m, n_out) float32 ndarray
        Bit-identical to ``linear(QWeight(raw3[ids[i]], qtype, n_in), x[i:i+1], numerics)``.
    """
    if numerics.quantize_activations and int(qtype) in QDOT_ALL:
        if acts is None:
            acts = quantize_acts(x, act_block(int(qtype)), numerics.tie_code)
        return qdot_pairs(raw3, int(qtype), n_in, ids, acts)
    if numerics.quantize_activations:
        x = quantize_activations(x, act_kind(qtype), numerics.tie_code)
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty((x.shape[0], raw3.shape[1]), dtype=np.float32)
    if x.shape[0]:
        big = x.shape[0] * raw3.shape[1] * n_in >= PARALLEL_MIN_ELEMENTS
        kernel = expert_pairs_kernel if big else expert_pairs_kernel_serial
        kernel(int(qtype), raw3, n_in, F16_TO_F32, KVALUES, np.asarray(ids, dtype=np.int64), x, out)
    return out


def linear(w: QWeight, x: np.ndarray, numerics: Numerics) -> np.ndarray:
    """``y = W x`` for every row of ``x``.

    Parameters
    ----------
    w : QWeight
        ``n_out`` rows of ``n_in`` elements.
    x : (n_pos, n_in) float32 ndarray
    numerics : Numerics
        ``ggml`` mode: quantized weights multiply int8-quantized ``x`` by exact integer block
        dots (:func:`refsim.kernels.qdot.qdot_matmul`); F16/BF16 weights multiply ``x``
        round-tripped through F16/BF16 (:func:`refsim.forward.actq.act_kind`).

    Returns
    -------
    (n_pos, n_out) float32 ndarray
    """
    n_pos, n_in = x.shape
    assert n_in == w.n_in, (n_in, w.n_in)
    if numerics.quantize_activations and w.qtype in QDOT_ALL:
        return qdot_matmul(w.raw, w.qtype, w.n_in, quantize_acts(x, act_block(w.qtype), numerics.tie_code))
    if numerics.quantize_activations:
        x = quantize_activations(x, act_kind(w.qtype), numerics.tie_code)
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty((n_pos, w.n_out), dtype=np.float32)
    if n_pos:
        kernel = linear_kernel_parallel if w.n_out * w.n_in >= PARALLEL_MIN_ELEMENTS else linear_kernel
        kernel(int(w.qtype), w.raw, w.n_in, F16_TO_F32, KVALUES, x, out)
    return out


def decode_inputs(tokens, positions, n_vocab: int, n_past: int,
                  out_rows=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate a decode's inputs (every architecture's ``decode`` starts here).

    Parameters
    ----------
    tokens, positions : (n_pos,) int array-like
        Token ids and their absolute positions.
    n_vocab : int
    n_past : int
        Positions already in the state: ``positions`` must be ``n_past, n_past + 1, ...``.
    out_rows : (m,) int array-like, optional
        Rows that produce logits (default: all).

    Returns
    -------
    tokens, positions : (n_pos,) int64 ndarray
    rows : (m,) int64 ndarray
        Sorted unique output rows.

    Raises
    ------
    ConfigError
        No tokens, a length mismatch, an id outside ``0..n_vocab-1``, positions that do not
        continue the state contiguously (trim first to re-decode), or bad ``out_rows``.
    """
    tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
    positions = np.asarray(positions, dtype=np.int64).reshape(-1)
    n_pos = tokens.size
    if positions.size != n_pos or n_pos == 0:
        raise ConfigError(f"decode: need as many positions ({positions.size}) as tokens ({n_pos}), at least one")
    if tokens.min() < 0 or tokens.max() >= n_vocab:
        raise ConfigError(f"decode: token ids must be in 0..{n_vocab - 1}, got {tokens.min()}..{tokens.max()}")
    if not np.array_equal(positions, np.arange(n_past, n_past + n_pos)):
        raise ConfigError(f"decode positions {positions.tolist()[:8]} must continue the KV cache contiguously from "
                          f"{n_past} (trim first to re-decode)")
    rows = np.arange(n_pos, dtype=np.int64) if out_rows is None else np.unique(np.asarray(out_rows, dtype=np.int64))
    if rows.size == 0 or rows.min() < 0 or rows.max() >= n_pos:
        raise ConfigError(f"decode: out_rows must be a non-empty subset of 0..{n_pos - 1}")
    return tokens, positions, rows


@njit(cache=True)
def _rms_norm_kernel(x, w, eps, out):
    n = x.shape[1]
    for p in range(x.shape[0]):
        s = 0.0
        for c in range(n):
            s += np.float64(np.float32(x[p, c] * x[p, c]))
        mean = np.float32(s / n)
        scale = np.float32(1.0 / np.sqrt(np.float64(np.float32(mean + eps))))
        for c in range(n):
            out[p, c] = np.float32(x[p, c] * scale) * w[c]


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm with a weight: ``x / sqrt(mean(x^2) + eps) * w`` over the last axis.

    Parameters
    ----------
    x : (..., n) float32 ndarray
        Rows (e.g. ``[n_pos, n_embd]`` or per head ``[n_pos, n_head, head_dim]``).
    w : (n,) float32 ndarray
    eps : float
        ``attention.layer_norm_rms_epsilon`` (rounded to float32, as ggml stores it).

    Returns
    -------
    (..., n) float32 ndarray

    Notes
    -----
    ggml ``ggml_compute_forward_rms_norm_f32``: ``sum += (double)(x*x)`` with the square in
    float32, ``mean = sum / n`` and ``scale = 1.0f / sqrtf(mean + eps)`` in float32, then
    ``x * scale``; the weight is a separate float32 multiply (``ggml_mul``).
    """
    shape = x.shape
    n = shape[-1]
    assert w.shape == (n,), (w.shape, n)
    x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, n)
    out = np.empty_like(x2)
    _rms_norm_kernel(x2, np.ascontiguousarray(w, dtype=np.float32), np.float32(eps), out)
    return out.reshape(shape)


@njit(cache=True)
def _rope_neox_kernel(x, pos, n_rot, theta_scale32, inv_freq64, f32, out):
    half = n_rot // 2
    hd = x.shape[2]
    cos = np.empty(half, dtype=np.float32)
    sin = np.empty(half, dtype=np.float32)
    for p in range(x.shape[0]):
        if f32:
            theta = np.float32(pos[p])
            for i in range(half):
                cos[i] = np.float32(np.cos(theta))
                sin[i] = np.float32(np.sin(theta))
                theta = np.float32(theta * theta_scale32)
        else:
            for i in range(half):
                th = np.float64(pos[p]) * inv_freq64[i]
                cos[i] = np.float32(np.cos(th))
                sin[i] = np.float32(np.sin(th))
        for h in range(x.shape[1]):
            for i in range(half):
                x0 = x[p, h, i]
                x1 = x[p, h, i + half]
                out[p, h, i] = np.float32(x0 * cos[i]) - np.float32(x1 * sin[i])
                out[p, h, i + half] = np.float32(x0 * sin[i]) + np.float32(x1 * cos[i])
            for i in range(n_rot, hd):
                out[p, h, i] = x[p, h, i]


@njit(cache=True)
def _powf(a, b):
    """The C library's ``powf(a, b)`` (Numba lowers a float32 power to it), as ggml calls it."""
    return np.float32(a) ** np.float32(b)


@functools.lru_cache(maxsize=64)
def _rope_tables(n_rot: int, freq_base: float) -> tuple[np.float32, np.ndarray]:
    """``(theta_scale32, inv_freq64)``: ggml's ``theta_scale = powf(freq_base, -2.0f/n_dims)`` (ggml-cpu
    ``ggml_compute_forward_rope``) by the C library's ``powf``, and ``base**(-2i/n_rot)`` for i < n_rot/2 by its
    ``pow`` (``math.pow``), float64. Not NumPy's array ``power``: on AVX-512 hosts NumPy computes it with
    vector routines that differ from the C library in the last bit (measured on 2026-12-03: ``powf(10000,
    -2/64)`` 0.7498942, NumPy 0.74989426; 4 of 32 float64 values differ), which moved a near-tie of the trained
    tiny model's 17th greedy step by 6.4e-3. Cached per (n_rot, freq_base), read only."""
    half = n_rot // 2
    theta_scale32 = np.float32(_powf(np.float32(freq_base), np.float32(-2.0) / np.float32(n_rot)))
    inv_freq64 = np.array([math.pow(float(freq_base), e) for e in -2.0 * np.arange(half, dtype=np.float64) / n_rot],
                          dtype=np.float64)
    return theta_scale32, inv_freq64


def rope_neox(x: np.ndarray, positions: np.ndarray, n_rot: int, freq_base: float,
              numerics: Numerics) -> np.ndarray:
    """NEOX rotary embedding: rotate the pairs ``(x[i], x[i + n_rot/2])`` by ``pos * base^(-2i/n_rot)``.

    Parameters
    ----------
    x : (n_pos, n_heads, head_dim) float32 ndarray
    positions : (n_pos,) int64 ndarray
        Absolute positions (tokens).
    n_rot : int
        Rotated dims (``rope.dimension_count``, even, <= head_dim); the rest pass through.
    freq_base : float
        ``rope.freq_base``.
    numerics : Numerics
        ``exact``: angle ``pos * base**(-2i/n_rot)`` in float64, then cos/sin rounded to float32.
        ``ggml``: ``theta_0 = (float)pos``, ``theta_{i+1} = theta_i * powf(base, -2/n_rot)``
        in float32 (ggml ``rope_cache_init``).

    Returns
    -------
    (n_pos, n_heads, head_dim) float32 ndarray

    Notes
    -----
    Source: ggml/src/ggml-cpu/ops.cpp ``rope_yarn`` / ``rotate_pairs`` (NEOX: pairs half a
    rotation apart; no YaRN with ``ext_factor = 0``); llama-cpp-notes.md §2.3.
    """
    n_pos, n_heads, head_dim = x.shape
    if n_rot % 2 or not 0 < n_rot <= head_dim:
        raise ConfigError(f"rope: n_rot {n_rot} must be even and in 1..head_dim {head_dim}")
    theta_scale32, inv_freq64 = _rope_tables(n_rot, freq_base)
    out = np.empty_like(x, dtype=np.float32)
    _rope_neox_kernel(np.ascontiguousarray(x, dtype=np.float32), np.asarray(positions, dtype=np.int64),
                      n_rot, theta_scale32, inv_freq64, numerics.rope_f32, out)
    return out


@njit(cache=True)
def _attention_head(q, kc, vc, p, h, n_kv, j0, scale, s, acc, out):
    """Head ``h`` of query ``p`` over keys ``j0..n_kv-1`` (``s``: float32 scratch of ``n_kv``,
    ``acc``: float64 scratch of ``head_dim``)."""
    hd = q.shape[2]
    group = q.shape[1] // kc.shape[1]
    g = h // group
    mx = np.float32(-np.inf)
    j = j0
    while j + 4 <= n_kv:
        # four keys at once: four independent sums, each in element order (same bits, 4x the ILP)
        d0 = d1 = d2 = d3 = 0.0
        for c in range(hd):
            qc = np.float64(q[p, h, c])
            d0 += np.float64(kc[j, g, c]) * qc
            d1 += np.float64(kc[j + 1, g, c]) * qc
            d2 += np.float64(kc[j + 2, g, c]) * qc
            d3 += np.float64(kc[j + 3, g, c]) * qc
        s[j] = np.float32(np.float32(d0) * scale)
        s[j + 1] = np.float32(np.float32(d1) * scale)
        s[j + 2] = np.float32(np.float32(d2) * scale)
        s[j + 3] = np.float32(np.float32(d3) * scale)
        j += 4
    while j < n_kv:
        d = 0.0
        for c in range(hd):
            d += np.float64(kc[j, g, c]) * np.float64(q[p, h, c])
        s[j] = np.float32(np.float32(d) * scale)
        j += 1
    for j in range(j0, n_kv):
        if s[j] > mx:
            mx = s[j]
    tot = 0.0
    for j in range(j0, n_kv):
        e = np.float32(np.exp(np.float32(s[j] - mx)))
        s[j] = e
        tot += np.float64(e)
    inv = np.float32(1.0 / tot)
    for c in range(hd):
        acc[c] = 0.0
    for j in range(j0, n_kv):
        s[j] = np.float32(s[j] * inv)
    j = j0
    while j + 4 <= n_kv:
        # four keys per pass over the row: acc[c] still takes p_j v_j in key order (same bits)
        p0, p1, p2, p3 = np.float64(s[j]), np.float64(s[j + 1]), np.float64(s[j + 2]), np.float64(s[j + 3])
        for c in range(hd):
            a = acc[c] + p0 * np.float64(vc[j, g, c])
            a = a + p1 * np.float64(vc[j + 1, g, c])
            a = a + p2 * np.float64(vc[j + 2, g, c])
            acc[c] = a + p3 * np.float64(vc[j + 3, g, c])
        j += 4
    while j < n_kv:
        pj = np.float64(s[j])
        for c in range(hd):
            acc[c] += pj * np.float64(vc[j, g, c])
        j += 1
    for c in range(hd):
        out[p, h, c] = np.float32(acc[c])


@njit(cache=True)
def _attention_kernel(q, kc, vc, pos, scale, window, out):
    n_pos, n_head, hd = q.shape
    s = np.empty(kc.shape[0], dtype=np.float32)
    acc = np.empty(hd, dtype=np.float64)
    for p in range(n_pos):
        n_kv = pos[p] + 1
        j0 = max(0, n_kv - window) if window > 0 else 0
        for h in range(n_head):
            _attention_head(q, kc, vc, p, h, n_kv, j0, scale, s, acc, out)


@njit(cache=True, parallel=True)
def _attention_one_parallel(q, kc, vc, pos, scale, window, out):
    """:func:`_attention_kernel` for one position with the heads split over threads (same bits)."""
    n_kv = pos[0] + 1
    j0 = max(0, n_kv - window) if window > 0 else 0
    for h in prange(q.shape[1]):
        s = np.empty(n_kv, dtype=np.float32)
        acc = np.empty(q.shape[2], dtype=np.float64)
        _attention_head(q, kc, vc, 0, h, n_kv, j0, scale, s, acc, out)


def attention(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, positions: np.ndarray,
              window: int = 0) -> np.ndarray:
    """Causal softmax attention with GQA over a KV cache indexed by position.

    Parameters
    ----------
    q : (n_pos, n_head, head_dim) float32 ndarray
        Queries (after norm and RoPE).
    k_cache, v_cache : (n_kv, n_head_kv, head_dim) float32 ndarray
        Keys/values of positions ``0..n_kv-1`` (this call's positions already appended).
    positions : (n_pos,) int64 ndarray
        Query ``p`` attends keys ``0..positions[p]``.
    window : int, default 0
        Sliding window (tokens): when > 0, query ``p`` attends only keys ``j`` with
        ``positions[p] - j < window`` (llama.cpp ``LLAMA_SWA_TYPE_STANDARD``: masked iff
        ``p1 - p0 >= n_swa``; gemma3's local layers). 0 = full causal attention.

    Returns
    -------
    (n_pos, n_head, head_dim) float32 ndarray

    Notes
    -----
    Head ``h`` reads KV head ``h // (n_head / n_head_kv)`` (ggml ``mul_mat`` broadcast). Scores
    ``float32(q.k) * (1/sqrt(head_dim))``; softmax as ggml ``soft_max_ext`` (float32 ``exp``,
    float64 sum, ``p = e * (float)(1/sum)``); output ``sum_j p_j v_j`` in float64 rounded to
    float32. Source: llama-graph.cpp ``build_attn_mha`` (flash attention off).
    """
    n_pos, n_head, head_dim = q.shape
    n_kv, n_head_kv, hd2 = k_cache.shape
    assert hd2 == head_dim and v_cache.shape == k_cache.shape and n_head % n_head_kv == 0
    positions = np.asarray(positions, dtype=np.int64)
    if n_pos and positions.max() >= n_kv:
        raise ConfigError(f"attention: position {int(positions.max())} is not in the KV cache (length {n_kv})")
    out = np.empty((n_pos, n_head, head_dim), dtype=np.float32)
    scale = np.float32(1.0 / np.sqrt(head_dim))
    _attention_kernel(np.ascontiguousarray(q, dtype=np.float32), k_cache, v_cache, positions, scale, int(window), out)
    return out


@njit(cache=True)
def _swiglu_kernel(g, u, out):
    for p in range(g.shape[0]):
        for c in range(g.shape[1]):
            x = g[p, c]
            out[p, c] = np.float32(x / np.float32(np.float32(1.0) + np.float32(np.exp(-x)))) * u[p, c]


def swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """``silu(gate) * up`` with ``silu(x) = x / (1 + exp(-x))`` in float32 (ggml ``ggml_vec_swiglu_f32``).

    Parameters
    ----------
    gate, up : (n_pos, n_ff) float32 ndarray

    Returns
    -------
    (n_pos, n_ff) float32 ndarray
    """
    assert gate.shape == up.shape
    out = np.empty_like(gate, dtype=np.float32)
    _swiglu_kernel(np.ascontiguousarray(gate, dtype=np.float32), np.ascontiguousarray(up, dtype=np.float32), out)
    return out


GELU_COEF_A = np.float32(0.044715)
SQRT_2_OVER_PI = np.float32(0.79788456080286535587989211986876)


def _gelu_f32(x: np.ndarray) -> np.ndarray:
    """ggml ``ggml_gelu_f32`` in float32: ``0.5f*x*(1.0f + tanhf(SQRT_2_OVER_PI*x*(1.0f + GELU_COEF_A*x*x)))``."""
    x = np.asarray(x, dtype=np.float32)
    one = np.float32(1.0)
    inner = (SQRT_2_OVER_PI * x) * (one + (GELU_COEF_A * x) * x)
    return ((np.float32(0.5) * x) * (one + np.tanh(inner))).astype(np.float32)


def _gelu_f16_table() -> np.ndarray:
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return _gelu_f32(halves).astype(np.float16).astype(np.float32)


GELU_F16_TABLE = _gelu_f16_table()
"""(65536,) float32: ``ggml_table_gelu_f16`` — GELU of every half, rounded to half (ggml-cpu.c init)."""


def geglu(gate: np.ndarray, up: np.ndarray, numerics: Numerics) -> np.ndarray:
    """``gelu(gate) * up`` with GELU's tanh approximation (ggml ``ggml_geglu_split``).

    Parameters
    ----------
    gate, up : (n_pos, n_ff) float32 ndarray
    numerics : Numerics
        ``exact``: ``gelu`` by ggml's float32 formula. ``ggml``: as ggml's CPU path with
        ``GGML_GELU_FP16``: ``x <= -10`` gives 0, ``x >= 10`` gives ``x``, otherwise ``x`` is
        rounded to half and looked up in :data:`GELU_F16_TABLE`.

    Returns
    -------
    (n_pos, n_ff) float32 ndarray

    Notes
    -----
    Source: ggml/src/ggml-cpu/vec.h ``ggml_vec_geglu_f32`` / ``ggml_gelu_f32``
    (``GELU_COEF_A = 0.044715f``, ``SQRT_2_OVER_PI = 0.7978845608...f``); gemma3 uses it via
    ``build_ffn(..., LLM_FFN_GELU, LLM_FFN_PAR)`` (llama.cpp src/models/gemma3.cpp).
    """
    assert gate.shape == up.shape
    x = np.asarray(gate, dtype=np.float32)
    u = np.asarray(up, dtype=np.float32)
    if numerics.mode == "ggml":
        g = GELU_F16_TABLE[x.astype(np.float16).view(np.uint16).astype(np.int64)]
        g = np.where(x <= np.float32(-10.0), np.float32(0.0), np.where(x >= np.float32(10.0), x, g))
    else:
        g = _gelu_f32(x)
    return (g.astype(np.float32) * u).astype(np.float32)


@dataclass(frozen=True)
class ExpertWeights:
    """One layer's routed experts as raw slices (``ffn_{gate,up,down}_exps``), never dequantized whole.

    Parameters
    ----------
    gate, up : (n_expert, n_ff_exp, row_bytes) uint8 ndarray
        Memory-mapped; expert ``e``'s slice is ``[e]`` (GGUF ``ne = {n_embd, n_ff_exp, n_expert}``).
    down : (n_expert, n_embd, row_bytes) uint8 ndarray
        GGUF ``ne = {n_ff_exp, n_embd, n_expert}``.
    gate_type, up_type, down_type : int
        ggml type ids (may differ, e.g. Q6_K ``down`` in a Q4_K_M mix).
    n_embd, n_ff_exp : int
    """

    gate: np.ndarray
    up: np.ndarray
    down: np.ndarray
    gate_type: int
    up_type: int
    down_type: int
    n_embd: int
    n_ff_exp: int

    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    """Derived arguments of the fused kernels (:func:`refsim.forward.fused.moe_static`), by numerics."""

    def expert(self, e: int) -> tuple[QWeight, QWeight, QWeight]:
        """``(gate, up, down)`` of expert ``e``: views of its slices only."""
        return (QWeight(self.gate[e], self.gate_type, self.n_embd), QWeight(self.up[e], self.up_type, self.n_embd),
                QWeight(self.down[e], self.down_type, self.n_ff_exp))


def moe_ffn(x: np.ndarray, ids: np.ndarray, weights: np.ndarray, experts: ExpertWeights,
            numerics: Numerics, rows: np.ndarray | None = None) -> np.ndarray:
    """Routed SwiGLU experts, weighted and summed in slot order.

    Parameters
    ----------
    x : (n_pos, n_embd) float32 ndarray
        FFN input (after ``ffn_norm``).
    ids : (n_pos, k) int16 ndarray
        Routed experts per position (from :func:`refsim.forward.routing.route_topk`).
    weights : (n_pos, k) float32 ndarray
    experts : ExpertWeights
    numerics : Numerics
    rows : (n_pos,) bool ndarray, optional
        Positions to compute (others return zeros); default all.

    Returns
    -------
    (n_pos, n_embd) float32 ndarray
        ``y_p = ((w_0 y_0 + w_1 y_1) + ...) + w_{k-1} y_{k-1}`` in float32, with
        ``y_i = down_i(silu(gate_i x) * up_i x)``.

    Notes
    -----
    Each expert in the union of ``ids`` is multiplied once by the positions that chose it (the
    slice is read once per call), which does not change any row's arithmetic. Source:
    llama-graph.cpp ``build_moe_ffn`` (``ggml_mul_mat_id``, ``ggml_swiglu_split``, the sum of
    ``experts`` views in slot order); llama-cpp-notes.md §2.4. One position in ``ggml`` mode also has
    a fused kernel doing the whole block in one call (:func:`refsim.forward.fused.moe_ffn`, same bits).
    """
    n_pos, n_embd = x.shape
    k = ids.shape[1]
    assert ids.shape == weights.shape == (n_pos, k) and n_embd == experts.n_embd
    active = np.ones(n_pos, dtype=bool) if rows is None else np.asarray(rows, dtype=bool)
    y = np.zeros((n_pos, k, n_embd), dtype=np.float32)
    sel_ids = np.where(active[:, None], ids.astype(np.int64), -1)
    if active.sum() == 1:
        # one position (a plain decode): its k experts in one threaded call per projection
        p = int(np.nonzero(active)[0][0])
        e_ids = sel_ids[p]
        xk = np.repeat(x[p:p + 1], k, axis=0)                                      # [k, n_embd]
        acts = None
        if (numerics.quantize_activations and experts.gate_type in QDOT_TYPES and experts.up_type in QDOT_TYPES
                and act_block(experts.gate_type) == act_block(experts.up_type)):
            # x quantized once for gate and up (row by row, so the k copies are k equal rows)
            a1 = quantize_acts(x[p:p + 1], act_block(experts.gate_type), numerics.tie_code)
            acts = QActs(np.repeat(a1.q, k, 0), np.repeat(a1.d, k, 0), np.repeat(a1.bsum, k, 0), a1.block)
        g = expert_linear(experts.gate, experts.gate_type, n_embd, e_ids, xk, numerics, acts)
        u = expert_linear(experts.up, experts.up_type, n_embd, e_ids, xk, numerics, acts)
        y[p] = expert_linear(experts.down, experts.down_type, experts.n_ff_exp, e_ids, swiglu(g, u), numerics)
    for e in (np.unique(sel_ids[sel_ids >= 0]) if active.sum() != 1 else ()):
        pp, ss = np.nonzero(sel_ids == e)
        gate, up, down = experts.expert(int(e))
        xe = x[pp]
        h = swiglu(linear(gate, xe, numerics), linear(up, xe, numerics))  # [m, n_ff_exp]
        y[pp, ss] = linear(down, h, numerics)                             # [m, n_embd]
    out = np.zeros((n_pos, n_embd), dtype=np.float32)
    for p in np.nonzero(active)[0]:
        acc = y[p, 0] * weights[p, 0]
        for s in range(1, k):
            acc = acc + y[p, s] * weights[p, s]
        out[p] = acc
    return out


def logit_margin(logits: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 logit per row: ``(n_rows,)`` float32 (``inf`` when ``n_vocab == 1``).

    A row whose margin is below the numerics gap (~1e-2 between ``exact`` and ``ggml``) may
    have a different argmax in llama.cpp: a near-tie.
    """
    if logits.shape[1] < 2:
        return np.full(logits.shape[0], np.inf, dtype=np.float32)
    top2 = np.partition(logits, -2, axis=1)[:, -2:]
    return (top2[:, 1] - top2[:, 0]).astype(np.float32)


__all__ = ["NUMERICS", "Numerics", "QWeight", "ExpertWeights", "linear", "expert_linear", "decode_inputs", "rms_norm",
           "rope_neox", "attention", "swiglu", "geglu", "GELU_F16_TABLE", "moe_ffn", "logit_margin", "ACT_NONE",
           "KERNELS"]
