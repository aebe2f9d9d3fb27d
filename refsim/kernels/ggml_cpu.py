"""llama.cpp's x86 CPU arithmetic, bit for bit (AVX2 + FMA + F16C build): the ``llamacpp`` numerics kernels.

The ``ggml`` numerics mode (:mod:`refsim.forward.actq`) reproduces *what* llama.cpp rounds (activation
quantisation, the f16 GELU table) but sums in float64. This module reproduces *how* it sums: which
float32 lane every partial product lands in, the order of every fused multiply-add and of every
horizontal reduction. With it the gemma3 pass returns the same float32 bits as llama.cpp's CPU backend
(tests/forward/test_gemma3_bitexact.py compares every named tensor of a prompt decode and of one-token
decodes with llama.cpp's own ``cb_eval`` dumps).

Which kernel llama.cpp runs depends on the weight type *and on the number of rows in the batch*
(llama.cpp is not batch-invariant, so neither is this mode). For the Gemma-3-270M Q4_K_M file on an
AVX2 machine (llama.cpp vendored by llama-cpp-python 0.3.36; ``ggml/src/ggml-cpu/``):

===============  =====================================  ==========================================
weight           rows >= 2 (prompt)                       1 row (decode)
===============  =====================================  ==========================================
Q5_0, Q8_0       llamafile/sgemm.cpp ``tinyBLAS_Q0_AVX``   arch/x86/quants.c ``ggml_vec_dot_q5_0_q8_0``
                 (same lane sums as vec_dot)              / ``ggml_vec_dot_q8_0_q8_0``: :func:`q0_matmul`
Q4_K             repack.cpp ``q4_K_8x8_q8_K`` (the CPU     ``ggml_gemv_q4_K_8x8_q8_K``:
                 "extra buffer"): ``ggml_gemm_...`` for    :func:`q4k_matmul` (activation rows:
                 groups of 4 rows, gemv for the rest       :func:`quantize_q8_k` / ``_4x8``)
Q6_K             >= 8 rows: tiled/tiled.cpp                ``ggml_vec_dot_q6_K_q8_K``:
                 ``tiled_run_microtile_avx2``:             :func:`q6k_matmul_vecdot`
                 :func:`q6k_matmul_tiled`; 2..7 rows:
                 vec_dot
F32 K x Q        ``ggml_vec_dot_f32`` (Q is permuted, so   ``ggml_vec_dot_f32``: :func:`f32_vecdot_matmul`
                 never sgemm): :func:`f32_vecdot_matmul`
F32 V x softmax  sgemm ``tinyBLAS<8, __m256>``:             ``ggml_vec_dot_f32``
                 :func:`f32_tinyblas_matmul`
F16 K x Q        Q to F16 (:func:`round_f16`), then       Q to F16, then vec.cpp ``ggml_vec_dot_f16``
                 sgemm ``tinyBLAS<8, __m256>`` on          = :func:`f32_vecdot_matmul` of the
                 halves (the F16 copy of Q is              widened halves
                 contiguous): :func:`f32_tinyblas_matmul`
F16 V x softmax  softmax rows to F16, then sgemm on        softmax row to F16, then
                 halves: :func:`f32_tinyblas_matmul`       ``ggml_vec_dot_f16``
===============  =====================================  ==========================================

F16 KV cache (llama.cpp's default ``type_k = type_v = F16``): the cache holds ``round_f16(K)`` and
``round_f16(V)``; ``ggml_compute_forward_mul_mat`` (ggml-cpu.c) converts the F32 ``src1`` (the
scaled Q, the softmax rows) to the ``vec_dot_type`` of F16, which is F16, before either kernel.
Widening a half to float32 (``_mm256_cvtph_ps``) is exact, and on this build (AVX2 without
AVX512-FP16) both F16 kernels multiply and add in float32 lanes exactly as their F32 twins
(``GGML_F16_VEC`` is ``GGML_F32Cx8``, ``GGML_F16_VEC_REDUCE`` is ``GGML_F32x8_REDUCE``; tinyBLAS'
``load<__m256>(const ggml_fp16_t *)`` widens, then the same ``madd``/``hsum``), so the F16 path is
the F32 kernels applied to F16-rounded operands — with one difference of dispatch: for ``n >= 2``
rows ``K x Q`` now takes sgemm (the F32 path cannot, because the permuted Q is not contiguous;
the F16 copy is).

Every integer part of a product is exact in any order (it is checked below that no int16 stage
saturates for these formats), so a kernel here computes the integer of each float32 *lane*
directly and then repeats llama.cpp's float32 steps in its order: ``fma`` is the hardware fused
multiply-add (LLVM ``llvm.fma.f32`` through :func:`fma32`), products and sums are float32 with one
rounding each, exactly as the SSE/AVX instructions.

Horizontal sums (the two orders llama.cpp uses for one ``__m256`` of lanes ``v0..v7``):

- ``hsum_float_8`` (quants.c) and tinyBLAS ``hsum``: ``((v0+v4) + (v2+v6)) + ((v1+v5) + (v3+v7))``.
- ``GGML_F32x8_REDUCE`` (simd-mappings.h, after folding 4 accumulators ``s0+s2``, ``s1+s3``, then
  the two): ``t = lo + hi``; ``(t0+t1) + (t2+t3)`` (two ``hadd``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

QK_K = 256
"""Elements per K-quant superblock (and per Q8_K activation block)."""

QK8_0 = 32
"""Elements per Q8_0 / Q5_0 block."""


@intrinsic
def fma32(typingctx, a, b, c):
    """``a * b + c`` in float32 with one rounding (x86 ``vfmadd``; LLVM ``llvm.fma.f32``).

    All three arguments must already be float32 (``np.float32(...)``).
    """
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        return builder.fma(args[0], args[1], args[2])

    return sig, codegen


@njit(cache=True, inline="always")
def hsum8(v):
    """``hsum_float_8`` / tinyBLAS ``hsum`` of 8 float32 lanes (see the module docstring)."""
    a0 = np.float32(v[4] + v[0])
    a1 = np.float32(v[5] + v[1])
    a2 = np.float32(v[6] + v[2])
    a3 = np.float32(v[7] + v[3])
    return np.float32(np.float32(a0 + a2) + np.float32(a1 + a3))


# ------------------------------------------------------------------------------------------------
# activation quantisation


@njit(cache=True)
def quantize_q8_0(x, qs, d):
    """Rows of ``x`` to Q8_0 as arch/x86/quants.c ``quantize_row_q8_0`` (AVX2).

    Parameters
    ----------
    x : (n_rows, n) float32, ``n % 32 == 0``
    qs : (n_rows, n) int8, written
    d : (n_rows, n // 32) float32, written: ``amax / 127`` (float32; :func:`quantize_q8_0_rows` rounds
        it to f16 as ``GGML_CPU_FP32_TO_FP16`` does, round to nearest even)

    Rule per block of 32: ``amax = max|x|``; ``d = f16(amax / 127.f)``; ``id = 127.f / amax``
    (0 if ``amax == 0``); ``q = round_half_even(x * id)`` (``_mm256_round_ps`` nearest, then packs
    with int8 saturation, which never triggers since ``|x * id| <= 127``).
    """
    n = x.shape[1]
    for r in range(x.shape[0]):
        for b in range(n // QK8_0):
            amax = np.float32(0.0)
            for j in range(QK8_0):
                a = abs(x[r, b * QK8_0 + j])
                amax = max(amax, a)
            d[r, b] = np.float32(amax / np.float32(127.0))  # rounded to f16 by the caller (quantize_q8_0_rows)
            idv = np.float32(np.float32(127.0) / amax) if amax != 0 else np.float32(0.0)
            for j in range(QK8_0):
                qs[r, b * QK8_0 + j] = np.int8(np.rint(np.float32(x[r, b * QK8_0 + j] * idv)))


@njit(cache=True)
def quantize_q8_k(x, qs, d, positive_ties):
    """Rows of ``x`` to Q8_K (blocks of 256, float32 scale).

    Parameters
    ----------
    x : (n_rows, n) float32, ``n % 256 == 0``
    qs : (n_rows, n) int8, written
    d : (n_rows, n // 256) float32, written
    positive_ties : bool
        How the sign of the block maximum is chosen when ``+M`` and ``-M`` both occur
        (``M = max|x|``): False: the first element with ``|x| == M`` (ggml-quants.c
        ``quantize_row_q8_K_ref``, the ``from_float`` of a single row); True: ``+M`` wins
        (arch/x86/repack.cpp ``ggml_quantize_mat_q8_K_4x8``, used for each group of 4 rows a
        repacked Q4_K product quantizes together).

    Rule: ``iscale = -127 / max`` with ``max`` the signed extreme; ``d = 1 / iscale``;
    ``q = min(127, round_half_even(iscale * x))``; an all-zero block gives ``d = 0`` and zeros.
    """
    n = x.shape[1]
    for r in range(x.shape[0]):
        for b in range(n // QK_K):
            o = b * QK_K
            amax = np.float32(0.0)
            mx = np.float32(0.0)
            for j in range(QK_K):
                v = x[r, o + j]
                a = abs(v)
                if a > amax:
                    amax = a
                    mx = v
            if positive_ties and mx < 0:
                for j in range(QK_K):
                    if x[r, o + j] == amax:
                        mx = amax
                        break
            if amax == 0:
                d[r, b] = np.float32(0.0)
                for j in range(QK_K):
                    qs[r, o + j] = 0
                continue
            iscale = np.float32(np.float32(-127.0) / mx)
            d[r, b] = np.float32(np.float32(1.0) / iscale)
            for j in range(QK_K):
                q = np.rint(np.float32(iscale * x[r, o + j]))
                qs[r, o + j] = np.int8(min(127.0, q))


# ------------------------------------------------------------------------------------------------
# weight unpacking (once per model)


@njit(cache=True)
def unpack_q5_0(raw, n, table, q, d):
    """Q5_0 rows -> signed codes ``q`` (-16..15, element order) and ``d`` (f16 as float32).

    raw : (n_rows, n/32*22) uint8 (block: f16 d, u32 qh, 16 qs); q : (n_rows, n) int8;
    d : (n_rows, n/32) float32. Element ``j < 16`` of a block is ``(qs[j] & 15) | bit_j(qh) << 4``,
    element ``j + 16`` is ``(qs[j] >> 4) | bit_{j+16}(qh) << 4``; minus 16 (ggml-quants.c
    ``dequantize_row_q5_0``).
    """
    for r in range(raw.shape[0]):
        for b in range(n // 32):
            o = b * 22
            d[r, b] = table[np.int64(raw[r, o]) | (np.int64(raw[r, o + 1]) << 8)]
            qh = np.uint32(raw[r, o + 2]) | (np.uint32(raw[r, o + 3]) << 8) | \
                (np.uint32(raw[r, o + 4]) << 16) | (np.uint32(raw[r, o + 5]) << 24)
            for j in range(16):
                byte = raw[r, o + 6 + j]
                lo = np.int32(byte & 15) | np.int32(((qh >> j) & 1) << 4)
                hi = np.int32(byte >> 4) | np.int32(((qh >> (j + 16)) & 1) << 4)
                q[r, b * 32 + j] = np.int8(lo - 16)
                q[r, b * 32 + j + 16] = np.int8(hi - 16)


@njit(cache=True)
def unpack_q8_0(raw, n, table, q, d):
    """Q8_0 rows (block: f16 d, 32 int8) -> ``q`` (n_rows, n) int8 and ``d`` (n_rows, n/32) float32."""
    for r in range(raw.shape[0]):
        for b in range(n // 32):
            o = b * 34
            d[r, b] = table[np.int64(raw[r, o]) | (np.int64(raw[r, o + 1]) << 8)]
            for j in range(32):
                q[r, b * 32 + j] = np.int8(np.int16(raw[r, o + 2 + j]) - 256 * (raw[r, o + 2 + j] >= 128))


@njit(cache=True)
def unpack_q4_k(raw, n, table, q, sc, mn, d, dmin):
    """Q4_K rows -> codes ``q`` (0..15), 6-bit sub-block scales/mins, and f16 ``d``/``dmin``.

    raw : (n_rows, n/256*144) uint8 (block: f16 d, f16 dmin, 12 scale bytes, 128 qs);
    q : (n_rows, n) uint8; sc, mn : (n_rows, n/32) int32; d, dmin : (n_rows, n/256) float32.
    Sub-block ``j`` (32 elements): ``j < 4``: ``sc = s[j] & 63``, ``m = s[j+4] & 63``; else
    ``sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4``, ``m = (s[j+4] >> 4) | (s[j] >> 6) << 4``
    (ggml-quants.c ``get_scale_min_k4``). Elements ``64c..64c+31`` are the low nibbles of
    ``qs[32c..32c+31]``, ``64c+32..64c+63`` the high nibbles.
    """
    for r in range(raw.shape[0]):
        for b in range(n // QK_K):
            o = b * 144
            d[r, b] = table[np.int64(raw[r, o]) | (np.int64(raw[r, o + 1]) << 8)]
            dmin[r, b] = table[np.int64(raw[r, o + 2]) | (np.int64(raw[r, o + 3]) << 8)]
            s = raw[r, o + 4:o + 16]
            for j in range(8):
                if j < 4:
                    scj = np.int32(s[j] & 63)
                    mnj = np.int32(s[j + 4] & 63)
                else:
                    scj = np.int32(s[j + 4] & 15) | (np.int32(s[j - 4] >> 6) << 4)
                    mnj = np.int32(s[j + 4] >> 4) | (np.int32(s[j] >> 6) << 4)
                sc[r, b * 8 + j] = scj
                mn[r, b * 8 + j] = mnj
            for c in range(4):
                for l in range(32):
                    byte = raw[r, o + 16 + 32 * c + l]
                    q[r, b * QK_K + 64 * c + l] = byte & 15
                    q[r, b * QK_K + 64 * c + 32 + l] = byte >> 4


@njit(cache=True)
def unpack_q6_k(raw, n, table, q, sc, d):
    """Q6_K rows -> unsigned codes ``q`` (0..63; value ``q - 32``), int8 scales per 16, f16 ``d``.

    raw : (n_rows, n/256*210) uint8 (block: 128 ql, 64 qh, 16 int8 scales, f16 d);
    q : (n_rows, n) uint8; sc : (n_rows, n/16) int32; d : (n_rows, n/256) float32.
    Layout per half ``h`` (128 elements; ql += 64h, qh += 32h), ``l < 32``: element ``l`` =
    ``ql[l] & 15 | (qh[l] & 3) << 4``, ``l+32`` = ``ql[l+32] & 15 | ((qh[l] >> 2) & 3) << 4``,
    ``l+64`` = ``ql[l] >> 4 | ((qh[l] >> 4) & 3) << 4``, ``l+96`` = ``ql[l+32] >> 4 | (qh[l] >> 6) << 4``
    (ggml-quants.c ``dequantize_row_q6_K``); scale of element ``e`` is ``scales[e // 16]``.
    """
    for r in range(raw.shape[0]):
        for b in range(n // QK_K):
            o = b * 210
            d[r, b] = table[np.int64(raw[r, o + 208]) | (np.int64(raw[r, o + 209]) << 8)]
            for j in range(16):
                v = np.int32(raw[r, o + 192 + j])
                sc[r, b * 16 + j] = v - 256 if v >= 128 else v
            for h in range(2):
                ql = o + 64 * h
                qh = o + 128 + 32 * h
                e0 = b * QK_K + 128 * h
                for l in range(32):
                    a = raw[r, ql + l]
                    c = raw[r, ql + l + 32]
                    hh = raw[r, qh + l]
                    q[r, e0 + l] = (a & 15) | ((hh & 3) << 4)
                    q[r, e0 + l + 32] = (c & 15) | (((hh >> 2) & 3) << 4)
                    q[r, e0 + l + 64] = (a >> 4) | (((hh >> 4) & 3) << 4)
                    q[r, e0 + l + 96] = (c >> 4) | (((hh >> 6) & 3) << 4)


# ------------------------------------------------------------------------------------------------
# products


Q0_ROWS = 16
"""Weight rows interleaved per group in :func:`interleave_q0` (one int32 AVX2 register pair per element)."""


def interleave_q0(q: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Re-lay Q5_0/Q8_0 codes for :func:`q0_matmul`: rows in groups of :data:`Q0_ROWS`, element-major.

    Parameters
    ----------
    q : (n_out, n) int8 — codes in element order ; d : (n_out, n/32) float32 — block scales

    Returns
    -------
    w : (n_groups, n, Q0_ROWS) int8 — ``w[g, e, r] = q[g*Q0_ROWS + r, e]`` (rows past ``n_out`` are 0)
    dg : (n_groups, n/32, Q0_ROWS) float32 — the scales the same way

    Only the memory order changes (so that the compiler vectorizes over 16 rows); every output is
    computed with the same operations in the same order.
    """
    n_out, n = q.shape
    ng = -(-n_out // Q0_ROWS)
    qp = np.zeros((ng * Q0_ROWS, n), np.int8)
    qp[:n_out] = q
    dp = np.zeros((ng * Q0_ROWS, d.shape[1]), np.float32)
    dp[:n_out] = d
    w = np.ascontiguousarray(qp.reshape(ng, Q0_ROWS, n).transpose(0, 2, 1))
    dg = np.ascontiguousarray(dp.reshape(ng, Q0_ROWS, -1).transpose(0, 2, 1))
    return w, dg


@njit(cache=True, parallel=True)
def q0_matmul(w, dg, aq, ad, out):
    """``out[p, o]`` = Q5_0/Q8_0 weight row ``o`` . Q8_0 activation row ``p``, in llama.cpp's lane order.

    Parameters
    ----------
    w, dg : :func:`interleave_q0` of the weight codes (Q5_0: -16..15; Q8_0: -127..127) and scales
    aq : (n_pos, n) int8 ; ad : (n_pos, n/32) float32 — :func:`quantize_q8_0` of the activation
    out : (n_pos, n_groups * Q0_ROWS) float32, written (the caller drops the padding rows)

    Rule (quants.c ``ggml_vec_dot_q{5,8}_0_q8_0`` AVX2 and sgemm.cpp ``tinyBLAS_Q0_AVX``, identical
    per output): 8 float32 lanes; for each block ``b`` in order, ``dd = wd * ad`` (float32) and lane
    ``l = fma(dd, float(sum of the products of elements 4l..4l+3), l)``; then :func:`hsum8`
    (written out below for the 16 rows of a group).
    """
    ng, n, R = w.shape
    n_pos = aq.shape[0]
    nb = n // 32
    a16 = aq.astype(np.int16)
    for g in prange(ng):
        s = np.empty(R, np.int32)
        acc = np.empty((8, R), np.float32)   # [lane, row]
        dd = np.empty(R, np.float32)
        for p in range(n_pos):
            acc[:, :] = 0
            for b in range(nb):
                for r in range(R):
                    dd[r] = np.float32(dg[g, b, r] * ad[p, b])
                for l in range(8):
                    e = b * 32 + 4 * l
                    a0 = a16[p, e]
                    a1 = a16[p, e + 1]
                    a2 = a16[p, e + 2]
                    a3 = a16[p, e + 3]
                    for r in range(R):
                        s[r] = (np.int32(np.int16(w[g, e, r]) * a0) + np.int32(np.int16(w[g, e + 1, r]) * a1)
                                + np.int32(np.int16(w[g, e + 2, r]) * a2) + np.int32(np.int16(w[g, e + 3, r]) * a3))
                    for r in range(R):
                        acc[l, r] = fma32(dd[r], np.float32(s[r]), acc[l, r])
            for r in range(R):
                out[p, g * R + r] = np.float32(
                    np.float32(np.float32(acc[4, r] + acc[0, r]) + np.float32(acc[6, r] + acc[2, r]))
                    + np.float32(np.float32(acc[5, r] + acc[1, r]) + np.float32(acc[7, r] + acc[3, r])))


def q8_0_codes(raw: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q8_0 rows ``raw`` (n_rows, n/32*34) uint8 -> codes (n_rows, n) int8 and scales (n_rows, n/32) float32."""
    blocks = raw.reshape(raw.shape[0], -1, 34)
    d = table[blocks[:, :, 0].astype(np.int64) | (blocks[:, :, 1].astype(np.int64) << 8)]
    return blocks[:, :, 2:].view(np.int8).reshape(raw.shape[0], -1), d


def interleave_rows(a: np.ndarray) -> np.ndarray:
    """``(n_out, m)`` -> ``(n_groups, m, Q0_ROWS)`` with ``out[g, i, r] = a[g*Q0_ROWS + r, i]`` (zero-padded rows)."""
    n_out, m = a.shape
    ng = -(-n_out // Q0_ROWS)
    ap = np.zeros((ng * Q0_ROWS, m), a.dtype)
    ap[:n_out] = a
    return np.ascontiguousarray(ap.reshape(ng, Q0_ROWS, m).transpose(0, 2, 1))


@njit(cache=True, parallel=True)
def q4k_matmul(q, sc, mn, d, dmin, aq, ad, n_gemm, out):
    """Repacked Q4_K (``q4_K_8x8``) x Q8_K, as arch/x86/repack.cpp ``ggml_gemm/gemv_q4_K_8x8_q8_K`` (AVX2).

    Parameters
    ----------
    q, sc, mn, d, dmin : :func:`unpack_q4_k` output, each through :func:`interleave_rows`
        (``q`` (n_groups, n, 16) uint8; ``sc``/``mn`` (n_groups, n/32, 16) int32;
        ``d``/``dmin`` (n_groups, n/256, 16) float32)
    aq : (n_pos, n) int8 ; ad : (n_pos, n/256) float32 — :func:`quantize_q8_k` of the activation
    n_gemm : int
        Rows ``p < n_gemm`` (a multiple of 4) go through ``ggml_gemm_q4_K_8x8_q8_K``, the rest
        through ``ggml_gemv_q4_K_8x8_q8_K`` (repack.cpp ``forward_mul_mat_one_chunk``).
    out : (n_pos, n_groups * 16) float32, written

    Rule per output, with exact integers per sub-block ``j``: ``i_j = sc_j * sum(q * a)`` and
    ``m_j = mn_j * sum(a)``. gemv: per superblock ``b`` in order,
    ``acc = fma(float(sum_j i_j), d_b * ad_b, acc)`` and ``accm = fma(float(sum_j m_j), dmin_b * ad_b, accm)``;
    gemm: the same but one fma per *pair* of sub-blocks (``j = 2s, 2s+1``, ``s < 4``), four per
    superblock. Result ``acc - accm``. (int16 stages hold at most 16 products of 15 x 128.)
    """
    ng, n, R = q.shape
    n_pos = aq.shape[0]
    nsb = n // QK_K
    a16 = aq.astype(np.int16)
    for g in prange(ng):
        s = np.empty(R, np.int32)
        isum = np.empty(R, np.int32)
        msum = np.empty(R, np.int32)
        acc = np.empty(R, np.float32)
        accm = np.empty(R, np.float32)
        dd = np.empty(R, np.float32)
        dm = np.empty(R, np.float32)
        for p in range(n_pos):
            pair = p < n_gemm
            acc[:] = 0
            accm[:] = 0
            for b in range(nsb):
                for r in range(R):
                    dd[r] = np.float32(d[g, b, r] * ad[p, b])
                    dm[r] = np.float32(dmin[g, b, r] * ad[p, b])
                isum[:] = 0
                msum[:] = 0
                for j in range(8):
                    e0 = b * QK_K + 32 * j
                    s[:] = 0
                    asum = np.int32(0)
                    for t in range(32):
                        av = a16[p, e0 + t]
                        asum += np.int32(av)
                        for r in range(R):
                            s[r] += np.int32(np.int16(q[g, e0 + t, r]) * av)
                    for r in range(R):
                        isum[r] += sc[g, b * 8 + j, r] * s[r]
                        msum[r] += mn[g, b * 8 + j, r] * asum
                    if pair and j % 2 == 1:
                        for r in range(R):
                            acc[r] = fma32(np.float32(isum[r]), dd[r], acc[r])
                            accm[r] = fma32(np.float32(msum[r]), dm[r], accm[r])
                        isum[:] = 0
                        msum[:] = 0
                if not pair:
                    for r in range(R):
                        acc[r] = fma32(np.float32(isum[r]), dd[r], acc[r])
                        accm[r] = fma32(np.float32(msum[r]), dm[r], accm[r])
            for r in range(R):
                out[p, g * R + r] = np.float32(acc[r] - accm[r])


Q6K_LANE_ORDER = np.array([128 * h + 32 * x + 4 * k + t for k in range(8) for h in range(2) for x in range(4)
                           for t in range(4)], dtype=np.int64)
"""Superblock element order that makes lane ``k`` of ``ggml_vec_dot_q6_K_q8_K`` 32 contiguous elements."""


def q6k_lane_major(q: np.ndarray, sc: np.ndarray) -> np.ndarray:
    """``sc * q`` of :func:`unpack_q6_k` output, superblocks reordered by :data:`Q6K_LANE_ORDER`, rows
    interleaved (:func:`interleave_rows`): (n_groups, n, 16) int16 (|sc * q| <= 128 * 63)."""
    n = q.shape[1]
    wq = (np.repeat(sc, 16, axis=1) * q.astype(np.int32)).astype(np.int16)
    order = (np.arange(n // QK_K)[:, None] * QK_K + Q6K_LANE_ORDER[None, :]).reshape(-1)
    return interleave_rows(wq[:, order])


@njit(cache=True, parallel=True)
def q6k_matmul_vecdot(wq, sc, d, aq_lane, bsum, ad, out):
    """Q6_K x Q8_K as quants.c ``ggml_vec_dot_q6_K_q8_K`` (AVX2): the path for fewer than 8 rows.

    Parameters
    ----------
    wq : :func:`q6k_lane_major` of the weight ; sc : (n_groups, n/16, 16) int32 and
    d : (n_groups, n/256, 16) float32 — :func:`unpack_q6_k`'s scales through :func:`interleave_rows`
    aq_lane : (n_pos, n) int16 — the Q8_K activation codes in :data:`Q6K_LANE_ORDER`
    bsum : (n_pos, n/16) int32 — sums of 16 consecutive activation codes (Q8_K ``bsums``)
    ad : (n_pos, n/256) float32 ; out : (n_pos, n_groups * 16) float32, written

    Rule: 8 int32 lanes per superblock; lane ``k`` holds ``sum sc * q * a`` over the elements
    ``128h + 32x + 4k + t`` (``h < 2``, ``x < 4``, ``t < 4``) minus ``32 * (sc_{2k} bsum_{2k} +
    sc_{2k+1} bsum_{2k+1})`` (the ``q8sclsub`` term); ``acc_k = fma(ad_b * d_b, float(lane_k), acc_k)``;
    then :func:`hsum8`.
    """
    ng, n, R = wq.shape
    n_pos = aq_lane.shape[0]
    nsb = n // QK_K
    for g in prange(ng):
        s = np.empty(R, np.int32)
        acc = np.empty((8, R), np.float32)
        db = np.empty(R, np.float32)
        for p in range(n_pos):
            acc[:, :] = 0
            for b in range(nsb):
                for r in range(R):
                    db[r] = np.float32(ad[p, b] * d[g, b, r])
                for k in range(8):
                    s[:] = 0
                    e0 = b * QK_K + 32 * k
                    for u in range(32):
                        av = np.int32(aq_lane[p, e0 + u])
                        for r in range(R):
                            s[r] += np.int32(wq[g, e0 + u, r]) * av
                    m0 = b * 16 + 2 * k
                    for r in range(R):
                        lane = s[r] - 32 * (sc[g, m0, r] * bsum[p, m0] + sc[g, m0 + 1, r] * bsum[p, m0 + 1])
                        acc[k, r] = fma32(db[r], np.float32(lane), acc[k, r])
            for r in range(R):
                out[p, g * R + r] = np.float32(
                    np.float32(np.float32(acc[4, r] + acc[0, r]) + np.float32(acc[6, r] + acc[2, r]))
                    + np.float32(np.float32(acc[5, r] + acc[1, r]) + np.float32(acc[7, r] + acc[3, r])))


@njit(cache=True, parallel=True)
def q6k_matmul_tiled(q, sc, d, aq, ad, out):
    """Q6_K x Q8_K as tiled/tiled-kernel.cpp ``tiled_run_microtile_avx2`` (the >= 8-row path).

    Rule per output: per superblock in order, ``S = sum sc * (q - 32) * a`` (exact integer);
    ``res = d_b * float(S)`` (float32); ``acc = fma(res, ad_b, acc)`` (the tile buffer starts at 0).
    """
    n_out, n = q.shape
    n_pos = aq.shape[0]
    nsb = n // QK_K
    for o in prange(n_out):
        for p in range(n_pos):
            acc = np.float32(0.0)
            for b in range(nsb):
                s = np.int32(0)
                for g in range(16):
                    dot = np.int32(0)
                    for t in range(16):
                        e = b * QK_K + 16 * g + t
                        dot += (np.int32(q[o, e]) - 32) * np.int32(aq[p, e])
                    s += sc[o, b * 16 + g] * dot
                res = np.float32(d[o, b] * np.float32(s))
                acc = fma32(res, ad[p, b], acc)
            out[p, o] = acc


@njit(cache=True, inline="always")
def _vec_dot_f32(x, y, n, s):
    """vec.cpp ``ggml_vec_dot_f32`` (AVX2): 4 x 8 lanes stepping 32, ``GGML_F32x8_REDUCE``, scalar tail.

    ``s`` is a (4, 8) float32 scratch array (overwritten).
    """
    s[:, :] = 0
    npart = n & ~31
    for i in range(0, npart, 32):
        for j in range(4):
            for l in range(8):
                s[j, l] = fma32(x[i + 8 * j + l], y[i + 8 * j + l], s[j, l])
    for l in range(8):
        s[0, l] = np.float32(np.float32(s[0, l] + s[2, l]) + np.float32(s[1, l] + s[3, l]))
    t0 = np.float32(s[0, 0] + s[0, 4])
    t1 = np.float32(s[0, 1] + s[0, 5])
    t2 = np.float32(s[0, 2] + s[0, 6])
    t3 = np.float32(s[0, 3] + s[0, 7])
    r = np.float32(np.float32(t0 + t1) + np.float32(t2 + t3))
    for i in range(npart, n):
        r = np.float32(r + np.float32(x[i] * y[i]))
    return r


@njit(cache=True, parallel=True)
def f32_vecdot_matmul(a, b, out):
    """``out[j, i] = ggml_vec_dot_f32(a[i], b[j])``: a (m, n) float32, b (p, n) float32 -> (p, m).

    (The scalar tail, ``n % 32`` elements, is never reached for Gemma-3: head_dim 256 and a KV
    length padded to 256. It is written as the C code reads, ``sumf += x*y`` in float32; this
    build might contract it into an fma, which is not checked.)
    """
    m, n = a.shape
    for j in prange(b.shape[0]):
        s = np.empty((4, 8), np.float32)
        for i in range(m):
            out[j, i] = _vec_dot_f32(a[i], b[j], n, s)


@njit(cache=True, parallel=True)
def f32_tinyblas_matmul(a, b, out):
    """sgemm.cpp ``tinyBLAS<8, __m256>::gemm_bloc``: ``out[j, i] = hsum8(sum_l fma(a[i, 8l:8l+8], b[j, ...]))``.

    a (m, k) float32 with ``k % 8 == 0``, b (p, k) float32 -> out (p, m). One accumulator of 8 lanes
    per output, ``k`` stepped by 8 in order; :func:`hsum8`. (The tile shape only changes which
    outputs are computed together, not any output's arithmetic.)
    """
    m, k = a.shape
    for j in prange(b.shape[0]):
        acc = np.empty(8, np.float32)
        for i in range(m):
            acc[:] = 0
            for l in range(0, k, 8):
                for t in range(8):
                    acc[t] = fma32(a[i, l + t], b[j, l + t], acc[t])
            out[j, i] = hsum8(acc)


# ------------------------------------------------------------------------------------------------
# element-wise ops


@njit(cache=True)
def rms_norm(x, w, eps, out):
    """ops.cpp ``ggml_compute_forward_rms_norm_f32`` (+ the ``MUL`` by ``w``, fused or not: same bits).

    x : (n_rows, n) float32; w : (n,) float32; eps : float32; out : (n_rows, n) float32.
    ``sum`` of ``float(x*x)`` in float64 in order; ``mean = float32(sum / n)``;
    ``scale = 1 / sqrtf(mean + eps)``; ``y = (x * scale) * w`` (float32).
    """
    n = x.shape[1]
    for r in range(x.shape[0]):
        s = 0.0
        for i in range(n):
            s += np.float64(np.float32(x[r, i] * x[r, i]))
        mean = np.float32(s / n)
        scale = np.float32(np.float32(1.0) / np.sqrt(np.float32(mean + eps)))
        for i in range(n):
            out[r, i] = np.float32(np.float32(x[r, i] * scale) * w[i])


_EXP_C = tuple(np.float32(float.fromhex(h)) for h in (
    "0x1.8p23", "0x1.715476p+0", "0x1.7f7d1cp-20", "0x1.62e4p-1", "0x1.0e4020p-7", "0x1.573e2ep-5",
    "0x1.555e66p-3", "0x1.fffdb6p-2", "0x1.ffffecp-1"))
"""The constants of vec.h ``ggml_v_expf`` (AVX2), as written there in hex."""

_R, _LOG2E, _LN2_LO, _LN2_HI, _P5, _P4, _P3, _P2, _P1 = _EXP_C


@njit(cache=True, inline="always")
def _bits(f, fb, ib):
    fb[0] = f
    return np.int64(ib[0])


@njit(cache=True, inline="always")
def _float(bits, fb, ib):
    ib[0] = np.int32(np.int64(bits & 0xFFFFFFFF) - (np.int64(1) << 32) if (bits & 0x80000000) else bits & 0xFFFFFFFF)
    return fb[0]


@njit(cache=True)
def v_expf(x, fb, ib):
    """vec.h ``ggml_v_expf`` (AVX2 + FMA) of one float32 lane, bit-exact.

    ``fb``/``ib``: a 1-element float32 array and its int32 view (scratch for bit casts). The slow
    path (taken for a whole vector if any lane has ``|n| > 126``) gives, for a lane that does not
    need it, the same ``fma(k, j, k)`` as the fast path, so lanes are independent.
    """
    z = fma32(x, _LOG2E, _R)
    nn = np.float32(z - _R)
    b = fma32(-nn, _LN2_LO, fma32(-nn, _LN2_HI, x))
    e = (_bits(z, fb, ib) << 23) & 0xFFFFFFFF
    k = _float(e + 0x3F800000, fb, ib)
    u = np.float32(b * b)
    j = fma32(fma32(fma32(_P5, b, _P4), u, fma32(_P3, b, _P2)), u, np.float32(_P1 * b))
    an = abs(nn)
    if not (an > np.float32(126.0)):
        return fma32(j, k, k)
    g = 0x82000000 if nn <= np.float32(0.0) else 0
    s1 = _float(g + 0x7F000000, fb, ib)
    s2 = _float(e - g, fb, ib)
    if an > np.float32(192.0):
        return np.float32(s1 * s1)
    return np.float32(fma32(s2, j, s2) * s1)


@njit(cache=True)
def soft_max_rows(x, mask, out):
    """ops.cpp ``ggml_compute_forward_soft_max_f32`` (scale 1, no ALiBi, no sinks) of each row.

    x, mask : (n_rows, n) float32 (mask 0 or -inf), n % 8 == 0; out : (n_rows, n) float32.
    ``w = x + mask``; ``max``; vec.cpp ``ggml_vec_soft_max_f32``: ``y = expf(w - max)`` by
    :func:`v_expf`, each 8-lane group summed as :func:`hsum8` and added to a float64 sum;
    ``y *= float32(1.0 / sum)``.
    """
    n = x.shape[1]
    w = np.empty(n, np.float32)
    v = np.empty(8, np.float32)
    fb = np.empty(1, np.float32)
    ib = fb.view(np.int32)
    for r in range(x.shape[0]):
        mx = np.float32(-np.inf)
        for i in range(n):
            w[i] = np.float32(x[r, i] + mask[r, i])
            mx = max(mx, w[i])
        s = 0.0
        for g in range(0, n, 8):
            for l in range(8):
                v[l] = v_expf(np.float32(w[g + l] - mx), fb, ib)
                out[r, g + l] = v[l]
            s += np.float64(hsum8(v))
        inv = np.float32(1.0 / s)
        for i in range(n):
            out[r, i] = np.float32(out[r, i] * inv)


@njit(cache=True)
def rope_neox(x, cache, out):
    """ops.cpp ``rotate_pairs`` (NEOX, ``n_rot == head_dim``) as this build compiles it.

    x, out : (n_pos, n_heads, hd) float32; cache : (n_pos, hd/2, 2) float32 ``(cos, sin)`` per pair
    (:func:`refsim.forward.gemma3_llamacpp.rope_cache`). GCC contracts each expression into one
    fused multiply-add (measured against llama.cpp's ``Qcur``/``Kcur``, bit for bit):
    ``y[i] = fma(x[i], cos, -(x[i+h] * sin))``, ``y[i+h] = fma(x[i], sin, x[i+h] * cos)``.
    """
    n_pos, n_heads, hd = x.shape
    h = hd // 2
    for p in range(n_pos):
        for hh in range(n_heads):
            for i in range(h):
                c = cache[p, i, 0]
                s = cache[p, i, 1]
                x0 = x[p, hh, i]
                x1 = x[p, hh, i + h]
                out[p, hh, i] = fma32(x0, c, -np.float32(x1 * s))
                out[p, hh, i + h] = fma32(x0, s, np.float32(x1 * c))


@njit(cache=True)
def _gelu_args(x, out):
    a = np.float32(0.044715)
    k = np.float32(0.79788456080286535587989211986876)
    for i in range(x.size):
        xi = x[i]
        out[i] = np.float32(np.float32(k * xi) * fma32(np.float32(a * xi), xi, np.float32(1.0)))


def gelu_f16_table(tanhf) -> np.ndarray:
    """``ggml_table_gelu_f16`` as this build computes it (ggml-cpu.c init, vec.h ``ggml_gelu_f32``).

    ``g(x) = f16((0.5f*x) * (1.0f + tanhf((SQRT_2_OVER_PI*x) * fma(GELU_COEF_A*x, x, 1.0f))))`` for
    every half ``x`` (GCC contracts ``1.0f + GELU_COEF_A*x*x`` into one fma), with glibc's
    ``tanhf`` passed in (a ctypes function float -> float). Returns (65536,) float32 indexed by the
    half's bits. Checked equal to the table in libggml-cpu.so except at ``x = +inf``, which
    ``ggml_vec_geglu_f32`` never looks up (``x >= 10`` is handled before the table).
    """
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    arg = np.empty_like(x)
    _gelu_args(x, arg)
    t = np.array([tanhf(float(v)) if np.isfinite(v) else np.nan for v in arg], dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        g = ((np.float32(0.5) * x).astype(np.float32) * (np.float32(1.0) + t).astype(np.float32)).astype(np.float32)
        return g.astype(np.float16).astype(np.float32)


def round_f16(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` rounded to half precision and widened back: float32, same shape.

    The conversion of ggml-cpu.c ``ggml_cpu_fp32_to_fp16`` on an F16C build (``_mm256_cvtps_ph(x, 0)``
    for 8 at a time, ``_cvtss_sh(x, 0)`` for the tail): round to nearest even, subnormal halves kept,
    ``|x| >= 65520`` to ``inf``. NumPy's float32 -> float16 cast follows the same IEEE rule. Used
    where llama.cpp writes the F16 KV cache (``ggml_set_rows``) and converts ``src1`` of an F16
    ``mul_mat``.
    """
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def quantize_q8_0_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`quantize_q8_0` of ``(n_rows, n)`` float32 -> ``(qs int8 (n_rows, n), d float32 (n_rows, n/32))``."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    qs = np.empty(x.shape, np.int8)
    d = np.empty((x.shape[0], x.shape[1] // QK8_0), np.float32)
    quantize_q8_0(x, qs, d)
    return qs, d.astype(np.float16).astype(np.float32)


def quantize_q8_k_rows(x: np.ndarray, positive_ties: bool) -> tuple[np.ndarray, np.ndarray]:
    """:func:`quantize_q8_k` of ``(n_rows, n)`` float32 -> ``(qs int8 (n_rows, n), d float32 (n_rows, n/256))``."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    qs = np.empty(x.shape, np.int8)
    d = np.empty((x.shape[0], x.shape[1] // QK_K), np.float32)
    quantize_q8_k(x, qs, d, positive_ties)
    return qs, d


__all__ = [
    "Q0_ROWS",
    "Q6K_LANE_ORDER",
    "QK8_0",
    "QK_K",
    "f32_tinyblas_matmul",
    "f32_vecdot_matmul",
    "fma32",
    "gelu_f16_table",
    "hsum8",
    "interleave_q0",
    "interleave_rows",
    "q0_matmul",
    "q4k_matmul",
    "q6k_lane_major",
    "q6k_matmul_tiled",
    "q6k_matmul_vecdot",
    "q8_0_codes",
    "quantize_q8_0",
    "quantize_q8_0_rows",
    "quantize_q8_k",
    "quantize_q8_k_rows",
    "rms_norm",
    "rope_neox",
    "round_f16",
    "soft_max_rows",
    "unpack_q4_k",
    "unpack_q5_0",
    "unpack_q6_k",
    "unpack_q8_0",
    "v_expf",
]
