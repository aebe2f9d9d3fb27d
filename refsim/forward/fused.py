"""The fused one-position kernels: several readable blocks of a decode in one Numba call, same bits.

A plain decode (one position) in ``ggml`` numerics spends most of its time between Python calls,
so these kernels compute a run of :mod:`refsim.forward.layers` blocks in one call each:

- :func:`qkv_one` (``_qkv_one_kernel``): ``rms_norm`` -> the q, k, v products -> per-head norms -> RoPE;
- :func:`attn_route_one` (``_attn_route_one_kernel``): attention -> output projection -> residual ->
  ``ffn_norm`` -> router -> top-k;
- :func:`moe_ffn` (``_moe_one_kernel``): :func:`refsim.forward.layers.moe_ffn` of one position;
- :func:`qwen3moe_decode`: a qwen3moe decode whose one-position layers take the three kernels
  (:func:`qwen3moe_layer_one`), and, with no tap and no streaming hook, every layer in one call
  (``_decode_one_kernel``).

Every step inside a kernel is the function the readable block calls (``_rms_norm_kernel``,
``_qdot_rows``, ``_attention_head``, ``_route_kernel``, ...), in the same order, so the bits are the
same; tests/forward/test_fused.py holds each kernel and each fused pass equal to the readable one.
Each kernel returns None (the caller then runs the readable blocks) where it does not apply:
``exact`` numerics, a weight type without an integer product, several positions.

The target picks a fused pass from :data:`refsim.forward.passes.PASSES`; the readable passes never
call into this module (llama2.c keeps ``run.c`` and ``runq.c`` apart the same way).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from refsim.errors import ConfigError
from refsim.forward import qwen3moe, qwen35moe
from refsim.forward.layers import (ExpertWeights, Numerics, QWeight, _attention_head, _linear_rows, _rms_norm_kernel,
                                   _rope_neox_kernel, _rope_tables, _swiglu_kernel)
from refsim.forward.layers import moe_ffn as moe_ffn_blocks
from refsim.forward.routing import _route_kernel
from refsim.kernels.atomic import fetch_add
from refsim.kernels.ggml_matmul import CHUNK as QCHUNK, QDOT_ALL, act_block, qdot_rows as _qdot_rows
from refsim.kernels.mxfp4 import KVALUES
from refsim.kernels.qdot import quantize_acts_into
from refsim.kernels.registry import F16_TO_F32, F32
from refsim.kernels import row_bytes

JOB_ROWS = 256
"""Rows per job of the fused one-position kernels (``_qkv_one_kernel``, ``_attn_route_one_kernel``'s output
projection, ``_moe_one_kernel``), whose jobs are handed out one at a time (:mod:`refsim.kernels.atomic`): a
thread's jobs are then not adjacent, and the first rows of each job start cold (the next-rows prefetch of
:mod:`refsim.kernels.simd` works within a job), so a job should stream for a while: 256 rows (a Q4_K expert
projection of 768 rows is 3 jobs, its 2048-row down projection 8). Measured on a quiet host (2-thread read
bandwidth 61 GB/s), a one-position decode on 2 threads, best of 40 tokens: Q4_K_M 11.18 ms with 64-row
jobs, 10.42 with 128, 9.82-9.87 with 256, 9.69 with 512, 9.66 with 768 (the expert blocks faster, the
2048-row output projection in 3 jobs slower); MXFP4 12.57-12.68 -> 11.16-11.36 ms from 64 to 256. Rows are
computed the same way whatever the job size (bits unchanged)."""


@njit(cache=True, parallel=True)
def _qkv_one_kernel(qkind, kkind, vkind, qraw, qrawi, kraw, krawi, vraw, vrawi, n_embd, attn_norm, q_norm, k_norm,
                    eps, ablock, tie, table, n_rot, ts32, inv64, rope_f32, nt, h, pos, a, qo, ko, vo):
    """:func:`qkv_one`'s work in one call (one position, ``ggml`` mode): ``a = rms_norm(h) * attn_norm``
    quantized once, the q, k and v products split over threads in chunks of rows (handed out one at a
    time, :mod:`refsim.kernels.atomic`), q and k normed per head and rotated. The kernels are those the unfused path calls, so the bits are the same."""
    _rms_norm_kernel(h, attn_norm, eps, a)
    xq = np.empty((1, n_embd), dtype=np.int8)
    xd = np.empty((1, n_embd // ablock), dtype=np.float32)
    xs = np.empty((1, n_embd // 32), dtype=np.int32)
    x1 = np.empty((1, n_embd // 32), dtype=np.float32)        # Q8_1's block sums (Q4_1 / Q5_1 weights)
    quantize_acts_into(a, ablock, tie, xq, xd, xs, x1)
    n_q, n_k, n_v = qraw.shape[0], kraw.shape[0], vraw.shape[0]
    c_q = (n_q + JOB_ROWS - 1) // JOB_ROWS
    c_k = (n_k + JOB_ROWS - 1) // JOB_ROWS
    c_v = (n_v + JOB_ROWS - 1) // JOB_ROWS
    ql = np.empty((1, n_q), dtype=np.float32)
    kl = np.empty((1, n_k), dtype=np.float32)
    n_jobs = c_q + c_k + c_v
    ctr = np.zeros(1, dtype=np.int64)
    for _ in prange(nt):      # nt workers; jobs handed out one at a time (refsim.kernels.atomic)
        job = fetch_add(ctr, 0, 1)
        while job < n_jobs:
            if job < c_q:
                r0 = job * JOB_ROWS
                _qdot_rows(qkind, qraw, qrawi, n_embd, xq, xd, xs, table, ql, r0, min(n_q, r0 + JOB_ROWS), x1)
            elif job < c_q + c_k:
                r0 = (job - c_q) * JOB_ROWS
                _qdot_rows(kkind, kraw, krawi, n_embd, xq, xd, xs, table, kl, r0, min(n_k, r0 + JOB_ROWS), x1)
            else:
                r0 = (job - c_q - c_k) * JOB_ROWS
                _qdot_rows(vkind, vraw, vrawi, n_embd, xq, xd, xs, table, vo, r0, min(n_v, r0 + JOB_ROWS), x1)
            job = fetch_add(ctr, 0, 1)
    hd = q_norm.shape[0]
    qn = np.empty((n_q // hd, hd), dtype=np.float32)
    _rms_norm_kernel(ql.reshape(n_q // hd, hd), q_norm, eps, qn)
    _rope_neox_kernel(qn.reshape(1, n_q // hd, hd), pos, n_rot, ts32, inv64, rope_f32, qo)
    kn = np.empty((n_k // hd, hd), dtype=np.float32)
    _rms_norm_kernel(kl.reshape(n_k // hd, hd), k_norm, eps, kn)
    _rope_neox_kernel(kn.reshape(1, n_k // hd, hd), pos, n_rot, ts32, inv64, rope_f32, ko)


def qkv_static(attn_norm: np.ndarray, wq: QWeight, wk: QWeight, wv: QWeight, q_norm: np.ndarray, k_norm: np.ndarray,
               eps: float, n_rot: int, freq_base: float, n_head: int, n_head_kv: int, head_dim_v: int,
               numerics: Numerics):
    """The weight-side arguments of :func:`_qkv_one_kernel` (everything before ``h``), or ``None`` when the
    fused one-position path does not apply (``exact`` mode, weight types without an integer product or
    with different activation blocks, shapes that do not chain): see :func:`qkv_one`."""
    if not (numerics.quantize_activations and wq.qtype in QDOT_ALL and wk.qtype in QDOT_ALL
            and wv.qtype in QDOT_ALL):
        return None
    ablock = act_block(wq.qtype)
    n_embd = wq.n_in
    hd = q_norm.shape[0]
    if (act_block(wk.qtype) != ablock or act_block(wv.qtype) != ablock or wk.n_in != n_embd or wv.n_in != n_embd
            or wq.n_out != n_head * hd or wk.n_out != n_head_kv * hd or k_norm.shape[0] != hd
            or wv.n_out != n_head_kv * head_dim_v or n_rot % 2 or not 0 < n_rot <= hd
            or attn_norm.shape != (n_embd,)):
        return None
    ts32, inv64 = _rope_tables(n_rot, freq_base)
    return (wq.qtype, wk.qtype, wv.qtype, wq._u8, wq._i8, wk._u8, wk._i8, wv._u8, wv._i8, n_embd, attn_norm, q_norm,
            k_norm, np.float32(eps), ablock, numerics.tie_code, F16_TO_F32, n_rot, ts32, inv64, numerics.rope_f32)


def qkv_one(h: np.ndarray, attn_norm: np.ndarray, wq: QWeight, wk: QWeight, wv: QWeight, q_norm: np.ndarray,
            k_norm: np.ndarray, eps: float, positions: np.ndarray, n_rot: int, freq_base: float, n_head: int,
            n_head_kv: int, head_dim_v: int, numerics: Numerics):
    """A qwen3-style attention input for one position in ``ggml`` mode, in one Numba call.

    Returns ``(a, q, k, v)`` exactly as ``a = rms_norm(h, attn_norm)``, ``q = rope_neox(rms_norm(
    linear(wq, a), q_norm))``, ``k`` likewise, ``v = linear(wv, a)`` compute them (shapes
    ``(1, n_embd)``, ``(1, n_head, hd)``, ``(1, n_head_kv, hd)``, ``(1, n_head_kv, head_dim_v)``), or
    ``None`` when the fused path does not apply (several positions, ``exact`` mode, weight types
    without an integer product or with different activation blocks): the caller then runs the
    blocks one by one.
    """
    if not (h.shape[0] == 1 and h.dtype == np.float32 and h.shape[1] == wq.n_in):
        return None
    static = qkv_static(attn_norm, wq, wk, wv, q_norm, k_norm, eps, n_rot, freq_base, n_head, n_head_kv, head_dim_v,
                        numerics)
    if static is None:
        return None
    hd = q_norm.shape[0]
    a = np.empty((1, h.shape[1]), dtype=np.float32)
    q = np.empty((1, n_head, hd), dtype=np.float32)
    k = np.empty((1, n_head_kv, hd), dtype=np.float32)
    v = np.empty((1, n_head_kv * head_dim_v), dtype=np.float32)
    _qkv_one_kernel(*static, numba.get_num_threads(), np.ascontiguousarray(h), positions, a, q, k, v)
    return a, q, k, v.reshape(1, n_head_kv, head_dim_v)


@njit(cache=True, parallel=True)
def _attn_route_one_kernel(scale, okind, oraw, orawi, oblock, ffn_norm, eps, rkind, rraw, rrawi, rblock, k, tie, table,
                           kvalues, nt, q, kc, vc, pos, h, o, h1, f, logits, ids, wts, margin):
    """:func:`attn_route_one`'s work in one call: attention (heads split over threads), ``o`` quantized
    once and the output projection split over threads in chunks of rows, the residual, ``ffn_norm``,
    the router product (rows split over threads) and top-k; heads and chunks are handed out one at a
    time (:mod:`refsim.kernels.atomic`). Every step is the kernel the unfused path
    calls, so the bits are the same."""
    n_head, hd = q.shape[1], q.shape[2]
    n_embd = h.shape[1]
    n_kv = pos[0] + 1
    o3 = o.reshape(1, n_head, hd)
    ctr = np.zeros(3, dtype=np.int64)         # job counters of the three parallel steps (refsim.kernels.atomic)
    for _ in prange(nt):
        s = np.empty(n_kv, dtype=np.float32)
        acc = np.empty(hd, dtype=np.float64)
        head = fetch_add(ctr, 0, 1)
        while head < n_head:
            _attention_head(q, kc, vc, 0, head, n_kv, 0, scale, s, acc, o3)
            head = fetch_add(ctr, 0, 1)
    n_in = n_head * hd
    xq = np.empty((1, n_in), dtype=np.int8)
    xd = np.empty((1, n_in // oblock), dtype=np.float32)
    xs = np.empty((1, n_in // 32), dtype=np.int32)
    x1 = np.empty((1, n_in // 32), dtype=np.float32)          # Q8_1's block sums (Q4_1 / Q5_1 weights)
    quantize_acts_into(o, oblock, tie, xq, xd, xs, x1)
    y = np.empty((1, n_embd), dtype=np.float32)
    n_ch = (n_embd + JOB_ROWS - 1) // JOB_ROWS
    for _ in prange(nt):
        ch = fetch_add(ctr, 1, 1)
        while ch < n_ch:
            r0 = ch * JOB_ROWS
            _qdot_rows(okind, oraw, orawi, n_in, xq, xd, xs, table, y, r0, min(n_embd, r0 + JOB_ROWS), x1)
            ch = fetch_add(ctr, 1, 1)
    for c in range(n_embd):
        h1[0, c] = h[0, c] + y[0, c]
    _rms_norm_kernel(h1, ffn_norm, eps, f)
    n_expert = rraw.shape[0]
    f64 = f.astype(np.float64)
    fq = np.empty((1, n_embd), dtype=np.int8)
    fd = np.empty((1, n_embd // rblock), dtype=np.float32)
    fs = np.empty((1, n_embd // 32), dtype=np.int32)
    f1 = np.empty((1, n_embd // 32), dtype=np.float32)
    if rkind != F32:
        quantize_acts_into(f, rblock, tie, fq, fd, fs, f1)
    n_ch = (n_expert + QCHUNK - 1) // QCHUNK
    for _ in prange(nt):
        w = np.empty(n_embd, dtype=np.float32)
        ch = fetch_add(ctr, 2, 1)
        while ch < n_ch:
            r0 = ch * QCHUNK
            r1 = min(n_expert, r0 + QCHUNK)
            if rkind == F32:    # F32 router (ggml multiplies it unquantized): linear_kernel's rows
                _linear_rows(0, rraw, n_embd, table, kvalues, f64, logits, r0, r1, w)
            else:
                _qdot_rows(rkind, rraw, rrawi, n_embd, fq, fd, fs, table, logits, r0, r1, f1)
            ch = fetch_add(ctr, 2, 1)
    _route_kernel(logits, k, ids, wts, margin)


def attn_route_static(wo: QWeight, ffn_norm: np.ndarray, eps: float, router: QWeight, k: int, n_head: int, head_dim: int,
                      numerics: Numerics):
    """The weight-side arguments of :func:`_attn_route_one_kernel` (everything before ``q``), or ``None`` when
    the fused one-position path does not apply (``exact`` mode, an output projection without an integer
    product, a router that is neither F32 nor has one, shapes that do not chain): see :func:`attn_route_one`."""
    if not (numerics.quantize_activations and wo.qtype in QDOT_ALL
            and (router.qtype == F32 or router.qtype in QDOT_ALL)):
        return None
    n_embd = wo.n_out
    if (wo.n_in != n_head * head_dim or ffn_norm.shape != (n_embd,) or router.n_in != n_embd
            or not 1 <= k <= router.n_out):
        return None
    rblock = act_block(router.qtype) if router.qtype != F32 else 32
    return (np.float32(1.0 / np.sqrt(head_dim)), wo.qtype, wo._u8, wo._i8, act_block(wo.qtype), ffn_norm, np.float32(eps),
            router.qtype, router._u8, router._i8, rblock, k, numerics.tie_code, F16_TO_F32, KVALUES)


def attn_route_one(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, positions: np.ndarray, wo: QWeight,
                   h: np.ndarray, ffn_norm: np.ndarray, eps: float, router: QWeight, k: int, numerics: Numerics):
    """One position's attention, output projection, residual, FFN norm and routing in one Numba call (``ggml`` mode).

    Returns ``(o, h1, f, logits, ids, w, margin)`` exactly as ``o = attention(q, k_cache, v_cache,
    positions)`` (reshaped ``(1, n_head * head_dim)``), ``h1 = h + linear(wo, o)``, ``f =
    rms_norm(h1, ffn_norm, eps)``, ``logits = linear(router, f)`` and ``ids, w, margin =
    route_topk(logits, k)`` compute them, or ``None`` when the fused path does not apply (several
    positions, ``exact`` mode, an output projection without an integer product, a router that is
    neither F32 nor has one, or shapes that do not chain): the caller then runs the blocks one by one.

    Parameters
    ----------
    q : (1, n_head, head_dim) float32 ndarray
    k_cache, v_cache : (n_kv, n_head_kv, head_dim) float32 ndarray
        This position already appended (``n_kv = positions[0] + 1``).
    positions : (1,) int64 ndarray
    wo : QWeight
        ``attn_output``, ``n_embd`` rows of ``n_head * head_dim``.
    h : (1, n_embd) float32 ndarray
        The residual stream before attention.
    ffn_norm : (n_embd,) float32 ndarray
    router : QWeight
        ``ffn_gate_inp``, ``n_expert`` rows of ``n_embd``.
    k : int
        Experts used (``1..n_expert``).
    """
    if not (q.ndim == 3 and q.shape[0] == 1 and h.shape[0] == 1):
        return None
    _, n_head, hd = q.shape
    n_embd = h.shape[1]
    n_kv = k_cache.shape[0]
    if (k_cache.shape != v_cache.shape or k_cache.shape[2] != hd or n_head % k_cache.shape[1] or wo.n_out != n_embd
            or int(positions[0]) != n_kv - 1 or h.dtype != np.float32):
        return None
    static = attn_route_static(wo, ffn_norm, eps, router, k, n_head, hd, numerics)
    if static is None:
        return None
    o = np.empty((1, n_head * hd), dtype=np.float32)
    h1 = np.empty((1, n_embd), dtype=np.float32)
    f = np.empty((1, n_embd), dtype=np.float32)
    logits = np.empty((1, router.n_out), dtype=np.float32)
    ids = np.empty((1, k), dtype=np.int16)
    w = np.empty((1, k), dtype=np.float32)
    margin = np.empty(1, dtype=np.float32)
    _attn_route_one_kernel(*static, numba.get_num_threads(), np.ascontiguousarray(q, dtype=np.float32), k_cache,
                           v_cache, positions,
                           np.ascontiguousarray(h), o, h1, f, logits, ids, w, margin)
    return o, h1, f, logits, ids, w, margin


@njit(cache=True, parallel=True)
def _moe_one_kernel(gkind, ukind, dkind, g3, gi3, u3, ui3, d3, di3, n_embd, n_ff, ablock, dblock, tie, table, nt,
                    ids, wts, x, out):
    """:func:`moe_ffn` of one position in ``ggml`` mode, in one call: ``x`` (1, n_embd) quantized once
    for gate and up, the 2 k gate/up products split over threads in chunks of rows (handed out one at a
    time, :mod:`refsim.kernels.atomic`), SwiGLU, the k
    hidden rows quantized for down, the k down products, the weighted sum in slot order. Every step
    is the function the unfused path calls (``_qdot_rows``, ``quantize_acts``' kernels,
    ``_swiglu_kernel``), so the bits are the same."""
    k = ids.shape[0]
    xq = np.empty((1, n_embd), dtype=np.int8)
    xd = np.empty((1, n_embd // ablock), dtype=np.float32)
    xs = np.empty((1, n_embd // 32), dtype=np.int32)
    x1 = np.empty((1, n_embd // 32), dtype=np.float32)        # Q8_1's block sums (Q4_1 / Q5_1 weights)
    quantize_acts_into(x, ablock, tie, xq, xd, xs, x1)
    g = np.empty((k, n_ff), dtype=np.float32)
    u = np.empty((k, n_ff), dtype=np.float32)
    per = (n_ff + JOB_ROWS - 1) // JOB_ROWS
    ctr = np.zeros(2, dtype=np.int64)         # job counters of the two parallel steps (refsim.kernels.atomic)
    for _ in prange(nt):
        job = fetch_add(ctr, 0, 1)
        while job < 2 * k * per:
            which = job // (k * per)
            rest = job - which * k * per
            i = rest // per
            r0 = (rest - i * per) * JOB_ROWS
            r1 = min(n_ff, r0 + JOB_ROWS)
            e = ids[i]
            if which == 0:
                _qdot_rows(gkind, g3[e], gi3[e], n_embd, xq, xd, xs, table, g[i:i + 1], r0, r1, x1)
            else:
                _qdot_rows(ukind, u3[e], ui3[e], n_embd, xq, xd, xs, table, u[i:i + 1], r0, r1, x1)
            job = fetch_add(ctr, 0, 1)
    h = np.empty((k, n_ff), dtype=np.float32)
    _swiglu_kernel(g, u, h)
    hq = np.empty((k, n_ff), dtype=np.int8)
    hd = np.empty((k, n_ff // dblock), dtype=np.float32)
    hs = np.empty((k, n_ff // 32), dtype=np.int32)
    h1 = np.empty((k, n_ff // 32), dtype=np.float32)
    quantize_acts_into(h, dblock, tie, hq, hd, hs, h1)
    y = np.empty((k, n_embd), dtype=np.float32)
    perd = (n_embd + JOB_ROWS - 1) // JOB_ROWS
    for _ in prange(nt):
        job = fetch_add(ctr, 1, 1)
        while job < k * perd:
            i = job // perd
            r0 = (job - i * perd) * JOB_ROWS
            r1 = min(n_embd, r0 + JOB_ROWS)
            e = ids[i]
            _qdot_rows(dkind, d3[e], di3[e], n_ff, hq[i:i + 1], hd[i:i + 1], hs[i:i + 1], table, y[i:i + 1], r0, r1,
                       h1[i:i + 1])
            job = fetch_add(ctr, 1, 1)
    for c in range(n_embd):
        acc = np.float32(y[0, c] * wts[0])
        for s in range(1, k):
            acc = np.float32(acc + np.float32(y[s, c] * wts[s]))
        out[0, c] = acc


def moe_static(experts: ExpertWeights, numerics: Numerics):
    """The weight-side arguments of :func:`_moe_one_kernel` (everything before ``nt``), or ``None`` when the
    fused one-position path does not apply (``exact`` mode, a type without an integer product, gate and up
    with different activation blocks, shapes that do not chain). Built once per layer and numerics."""
    if not numerics.quantize_activations:
        return None
    memo = experts._memo
    if numerics not in memo:
        e = experts
        fits = (all(t in QDOT_ALL for t in (e.gate_type, e.up_type, e.down_type))
                and act_block(e.gate_type) == act_block(e.up_type)
                and e.gate.ndim == e.up.ndim == e.down.ndim == 3
                and e.gate.dtype == e.up.dtype == e.down.dtype == np.uint8
                and e.gate.shape[:2] == e.up.shape[:2] == (e.down.shape[0], e.n_ff_exp)
                and e.down.shape[1] == e.n_embd
                and e.gate.shape[2] == row_bytes(e.gate_type, e.n_embd)
                and e.up.shape[2] == row_bytes(e.up_type, e.n_embd)
                and e.down.shape[2] == row_bytes(e.down_type, e.n_ff_exp)
                and all(a.flags.c_contiguous for a in (e.gate, e.up, e.down)))
        g, u, d = (np.asarray(a) for a in (e.gate, e.up, e.down))     # plain ndarrays (see QWeight)
        memo[numerics] = ((e.gate_type, e.up_type, e.down_type, g, g.view(np.int8), u, u.view(np.int8), d,
                           d.view(np.int8), e.n_embd, e.n_ff_exp, act_block(e.gate_type), act_block(e.down_type),
                           numerics.tie_code, F16_TO_F32) if fits else None)
    return memo[numerics]


def moe_ffn(x: np.ndarray, ids: np.ndarray, weights: np.ndarray, experts: ExpertWeights,
            numerics: Numerics, rows: np.ndarray | None = None) -> np.ndarray:
    """:func:`refsim.forward.layers.moe_ffn`, with one position in ``ggml`` mode in one Numba call
    (:func:`_moe_one_kernel`; same bits); anything else runs the readable block.

    Parameters and returns as :func:`refsim.forward.layers.moe_ffn`.

    Raises
    ------
    ConfigError
        An expert id outside ``0..n_expert-1`` (the fused path).
    """
    n_pos, n_embd = x.shape
    k = ids.shape[1]
    assert ids.shape == weights.shape == (n_pos, k) and n_embd == experts.n_embd
    static = moe_static(experts, numerics)
    if static is None or n_pos != 1 or rows is not None or weights.dtype != np.float32:
        return moe_ffn_blocks(x, ids, weights, experts, numerics, rows)
    e_ids = ids[0].astype(np.int64)
    n_expert = experts.gate.shape[0]
    if e_ids.min() < 0 or e_ids.max() >= n_expert:
        raise ConfigError(f"moe: expert ids must be in 0..{n_expert - 1}, got {e_ids.min()}..{e_ids.max()}")
    out = np.empty((1, n_embd), dtype=np.float32)
    _moe_one_kernel(*static, numba.get_num_threads(), e_ids, np.ascontiguousarray(weights[0], dtype=np.float32),
                    np.ascontiguousarray(x, dtype=np.float32), out)
    return out


def qwen3moe_one_static(weights: qwen3moe.Weights, numerics: Numerics):
    """Per layer of a qwen3moe model, the weight-side arguments of the three fused one-position kernels
    (:func:`qkv_static`, :func:`attn_route_static`, :func:`moe_static`), or ``None`` when any layer cannot
    take them (then the decode goes layer by layer). Built once per numerics (``weights._fused``)."""
    if numerics not in weights._fused:
        s = weights.spec
        out = []
        for L in weights.layers:
            parts = (qkv_static(L.attn_norm, L.attn_q, L.attn_k, L.attn_v, L.attn_q_norm, L.attn_k_norm, s.rms_eps,
                                s.n_rot, s.rope_freq_base, s.n_head, s.n_head_kv, s.head_dim_v, numerics),
                     attn_route_static(L.attn_output, L.ffn_norm, s.rms_eps, L.ffn_gate_inp, s.n_expert_used,
                                       s.n_head, s.head_dim_k, numerics),
                     moe_static(L.experts, numerics))
            if any(p is None for p in parts) or s.head_dim_v != s.head_dim_k:
                out = None
                break
            out.append(parts)
        weights._fused[numerics] = None if out is None else tuple(out)
    return weights._fused[numerics]


@njit(cache=True)
def _decode_one_kernel(layers, nt, kcs, vcs, h, pos, n_head, n_head_kv, head_dim, k, routes, rweights, rmargin):
    """Every layer of a one-position ``ggml`` decode in one call: per layer ``_qkv_one_kernel`` (k and v
    written straight into the KV cache row ``pos[0]``), ``_attn_route_one_kernel`` over rows ``0..pos[0]``,
    ``_moe_one_kernel`` on the router's selection, ``h = h1 + moe``: the calls and the arithmetic of
    :func:`qwen3moe_layer_one`, without returning to Python between them (same bits; tested).
    ``nt`` is the worker count of the parallel steps (``numba.get_num_threads()``, read in Python: in
    compiled code it would stop Numba caching the kernel). ``routes``, ``rweights``, ``rmargin`` row 0 are
    filled per layer; returns the last layer's output ``(1, n_embd)``."""
    start = pos[0]
    n_kv = start + 1
    n_embd = h.shape[1]
    for il in range(len(layers)):
        qs, ats, ms = layers[il]
        kc = kcs[il]
        vc = vcs[il]
        a = np.empty((1, n_embd), dtype=np.float32)
        q = np.empty((1, n_head, head_dim), dtype=np.float32)
        _qkv_one_kernel(*qs, nt, h, pos, a, q, kc[start:start + 1], vc[start].reshape(1, n_head_kv * head_dim))
        o = np.empty((1, n_head * head_dim), dtype=np.float32)
        h1 = np.empty((1, n_embd), dtype=np.float32)
        f = np.empty((1, n_embd), dtype=np.float32)
        logits = np.empty((1, ats[8].shape[0]), dtype=np.float32)
        ids = np.empty((1, k), dtype=np.int16)
        w = np.empty((1, k), dtype=np.float32)
        m = np.empty(1, dtype=np.float32)
        _attn_route_one_kernel(*ats, nt, q, kc[:n_kv], vc[:n_kv], pos, h, o, h1, f, logits, ids, w, m)
        routes[0, il, :] = ids[0]
        rweights[0, il, :] = w[0]
        rmargin[0, il] = m[0]
        y = np.empty((1, n_embd), dtype=np.float32)
        _moe_one_kernel(*ms, nt, ids[0].astype(np.int64), w[0], f, y)
        for c in range(n_embd):
            h1[0, c] = h1[0, c] + y[0, c]
        h = h1
    return h


ROW0 = np.zeros(1, dtype=np.int64)
"""The routed rows of a one-position decode."""


def qwen3moe_layer_one(h: np.ndarray, L: qwen3moe.LayerWeights, il: int, g: qwen3moe.Graph) -> np.ndarray:
    """:func:`refsim.forward.qwen3moe.layer` for one position: :func:`qkv_one` and :func:`attn_route_one`
    where they apply (else the readable blocks), then the same hooks and experts
    (:func:`refsim.forward.qwen3moe.moe_out`). Same bits, same taps in the same order."""
    s, num = g.spec, g.numerics
    qkv = qkv_one(h, L.attn_norm, L.attn_q, L.attn_k, L.attn_v, L.attn_q_norm, L.attn_k_norm, s.rms_eps, g.positions,
                  s.n_rot, s.rope_freq_base, s.n_head, s.n_head_kv, s.head_dim_v, num)
    if qkv is None:
        q, k, v = qwen3moe.attention_in(h, L, il, g)
    else:
        a, q, k, v = qkv
        g.tap("attn_norm", il, a)
    kc, vc = qwen3moe.kv_store(il, q, k, v, g)
    one = attn_route_one(q, kc, vc, g.positions, L.attn_output, h, L.ffn_norm, s.rms_eps, L.ffn_gate_inp,
                         s.n_expert_used, num)
    if one is None:
        return qwen3moe.moe_out(*qwen3moe.attend_and_route(h, q, kc, vc, L, il, g), L, il, g)
    o, h, f, logits_e, ids, w, m = one
    for name, x in (("kqv_out", o), ("ffn_inp", h), ("ffn_norm", f), ("ffn_moe_logits", logits_e),
                    ("ffn_moe_topk", ids), ("ffn_moe_weights_norm", w)):
        g.tap(name, il, x)
    return qwen3moe.moe_out(h, ROW0, f, logits_e, ids, w, m, L, il, g)


def qwen3moe_decode(weights: qwen3moe.Weights, state, tokens: np.ndarray, positions: np.ndarray,
                    numerics: Numerics = Numerics(), out_rows: np.ndarray | None = None, tap=None,
                    hooks=None):
    """:func:`refsim.forward.qwen3moe.decode` with the fused kernels where they apply (the target's pass for
    ``ggml`` numerics): a one-position decode with no tap and no streaming hook runs every layer in one
    call (:func:`_decode_one_kernel`); other one-position decodes go layer by layer through
    :func:`qwen3moe_layer_one`; wider decodes through the readable layers. The MoE block is
    :func:`moe_ffn` throughout (a prefill's last layer routes one row). Same arguments, results and bits."""
    h, g = qwen3moe.start(weights, state, tokens, positions, numerics, out_rows, tap, hooks, moe_ffn)
    one = None
    if h.shape[0] == 1 and tap is None and (hooks is None or hooks.idle):
        one = qwen3moe_one_static(weights, numerics)
    if one is not None:          # a plain one-position decode: every layer in one Numba call
        s, r = weights.spec, g.routing
        kcs, vcs = state.storage(g.start + 1)
        h = _decode_one_kernel(one, numba.get_num_threads(), kcs, vcs, h, g.positions, s.n_head, s.n_head_kv,
                               s.head_dim_k, s.n_expert_used, r.routes, r.weights, r.margin)
    else:
        layer = qwen3moe_layer_one if h.shape[0] == 1 else qwen3moe.layer
        for il, L in enumerate(weights.layers):
            h = layer(h, L, il, g)
    return qwen3moe.finish(weights, h, g)


def qwen35moe_decode(weights: qwen35moe.Weights, state, tokens: np.ndarray, positions: np.ndarray,
                     numerics: Numerics = Numerics(), out_rows: np.ndarray | None = None, tap=None, hooks=None):
    """:func:`refsim.forward.qwen35moe.decode` with :func:`moe_ffn` as its MoE block (the target's pass for
    ``ggml`` numerics). Same arguments, results and bits."""
    return qwen35moe.decode(weights, state, tokens, positions, numerics, out_rows, tap, hooks, moe=moe_ffn)


def qwen35moe_mtp_decode(weights: qwen35moe.Weights, kv, tokens: np.ndarray, positions: np.ndarray,
                         h_prev: np.ndarray, numerics: Numerics = Numerics(), tap=None, gate=None):
    """:func:`refsim.forward.qwen35moe.mtp_decode` with :func:`moe_ffn` as its MoE block (``ggml``
    numerics; the MTP head drafts one position at a time). Same arguments, results and bits."""
    return qwen35moe.mtp_decode(weights, kv, tokens, positions, h_prev, numerics, tap, gate, moe=moe_ffn)


__all__ = ["JOB_ROWS", "qkv_static", "qkv_one", "attn_route_static", "attn_route_one", "moe_static", "moe_ffn",
           "qwen3moe_one_static", "qwen3moe_layer_one", "qwen3moe_decode", "qwen35moe_decode", "qwen35moe_mtp_decode"]
