"""Four rows at a time for the ``exact`` numerics: decoded float32 weights times float64 activations, summed in
8 float64 lanes per row (issue 18, item 2).

:func:`refsim.forward.layers._linear_rows` computes one row as ``dot8``: the row decoded to float32 exactly as
:mod:`refsim.kernels` decodes it (bit-exact with gguf-py), element ``c`` multiplied by ``x[c]`` in float64 and
added to lane ``c % 8``, the lanes combined ``((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7))``. Each lane is a chain of
dependent float64 additions, one every 8 elements, so one row at a time the loop waits on the adder's latency
(~0.34 ns per weight measured on this repo's host, whatever the weight type's decode). ``exact_rows4`` walks
four rows at once: the four rows' 8-lane accumulators are independent chains (4 x 2 AVX registers), each row's
lanes still take the same products in the same order, and the four rows share every load of ``x``. The block
is decoded in registers with the decoder's float32 operations (no fused multiply-add: LLVM contracts only
under fast-math flags, which these instructions do not carry), so every lane holds the bits the one-row loop
holds. The next four rows are prefetched as in :mod:`refsim.kernels.rows4`.

=======  =================================================================  =================================
kind     float32 weight (the decoder's operations, each rounded to float32)  source
=======  =================================================================  =================================
f32      the row's bytes                                                      ``decode_row_f32``
q4_0     ``d * float32(nibble - 8)``                                          ``legacy.decode_row_q4_0``
q5_0     ``d * float32(q5 - 16)``                                             ``legacy.decode_row_q5_0``
q8_0     ``d * float32(q)``                                                   ``legacy.decode_row_q8_0``
mxfp4    ``float32(2^(e-128)) * kvalues[nibble]``                             ``mxfp4.decode_row_mxfp4``
q4_k     ``(d * float32(sc)) * float32(q) - dmin * float32(m)``               ``k_quants.decode_row_q4_k``
q5_k     the same with the fifth bit                                          ``k_quants.decode_row_q5_k``
q6_k     ``(d * float32(sc)) * float32(q6 - 32)``                             ``k_quants.decode_row_q6_k``
=======  =================================================================  =================================

``d``/``dmin`` are read through the ``F16_TO_F32`` table (``table``), as the decoders do. The other types keep
the one-row loop (decode the row into a buffer, then :func:`refsim.kernels.simd.acc8_f32`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload

from refsim.kernels.loops import decode_row
from refsim.kernels.mxfp4 import KVALUES
from refsim.kernels.registry import EXACT4_BLOCK, EXACT4_TYPES, KERNELS
from refsim.kernels.rows4 import (_c, _mxfp4_u, _nibbles32, _prefetch_next4, _q5_high, _scales_mins8, _switch_codegen,
                                  _vload)
from refsim.kernels.simd import _I8, _I32, _splat

EXACT_ROWS4 = {KERNELS[t].qtype.name.lower(): (t, int(EXACT4_BLOCK[t]), KERNELS[t].row_bytes(int(EXACT4_BLOCK[t])))
               for t in EXACT4_TYPES}
"""Kind -> (ggml type id, elements, bytes) per block step, for the types the registry marks ``exact4``
(:data:`refsim.kernels.registry.EXACT4_TYPES`; the elements are
:data:`~refsim.kernels.registry.EXACT4_BLOCK`'s, F32 steps of 32 floats); :func:`_decode` decodes a block of each."""
DECODED = ("f32", "q4_0", "q5_0", "q8_0", "mxfp4", "q4_k", "q5_k", "q6_k")
"""The kinds :func:`_decode` decodes in registers: the types this module can walk (the registry's ``exact4`` marks
which it does; tests/kernels/test_registry_paths.py checks they are the same)."""
EXACT_QTYPES = tuple(v[0] for v in EXACT_ROWS4.values())
"""The ggml type ids :func:`exact_rows4` handles."""

_F = ir.FloatType()
_D = ir.DoubleType()
_F32 = ir.VectorType(_F, 32)
_D8 = ir.VectorType(_D, 8)


def _k(n: int, ty, x):
    return ir.Constant(ir.VectorType(ty, n), x if isinstance(x, list) else [x] * n)


def _half_f32(builder, pa, pt, off):
    """The float32 ``F16_TO_F32[half]`` of the little-endian half at byte ``off``."""
    lo = builder.zext(builder.load(builder.gep(pa, [off])), ir.IntType(64))
    hi = builder.zext(builder.load(builder.gep(pa, [builder.add(off, _c(off, 1))])), ir.IntType(64))
    return builder.load(builder.gep(pt, [builder.or_(lo, builder.shl(hi, ir.Constant(ir.IntType(64), 8)))]))


def _times(builder, d, q):
    """float32 ``d * float32(q)`` for ``<32 x i8>`` signed ``q`` (``d`` a float scalar, or a ``<32 x float>``)."""
    dv = d if isinstance(d.type, ir.VectorType) else _splat(builder, d, _F, 32)
    return builder.fmul(dv, builder.sitofp(q, _F32))


def _decode(builder, kind, pa, pt, off):
    """Row block at byte ``off`` -> its float32 weights as ``<32 x float>`` chunks (1 for blocks of 32, 8 for 256)."""
    if kind == "f32":
        return [builder.load(builder.bitcast(builder.gep(pa, [off]), _F32.as_pointer()), align=1)]
    if kind in ("q4_0", "q5_0", "q8_0"):
        d = _half_f32(builder, pa, pt, off)
        if kind == "q8_0":
            return [_times(builder, d, _vload(builder, pa, builder.add(off, _c(off, 2)), 32))]
        if kind == "q4_0":
            u = _nibbles32(builder, _vload(builder, pa, builder.add(off, _c(off, 2)), 16))
            return [_times(builder, d, builder.sub(u, _k(32, _I8, 8)))]
        u = _nibbles32(builder, _vload(builder, pa, builder.add(off, _c(off, 6)), 16))
        u = builder.or_(u, _q5_high(builder, pa, builder.add(off, _c(off, 2))))
        return [_times(builder, d, builder.sub(u, _k(32, _I8, 16)))]
    if kind == "mxfp4":
        e = builder.zext(builder.load(builder.gep(pa, [off])), _I32)
        # float32(2^(e - 128)): normal bits (e - 1) << 23 for e >= 2, subnormal 2^-128 / 2^-127 for e = 0 / 1
        normal = builder.shl(builder.sub(e, ir.Constant(_I32, 1)), ir.Constant(_I32, 23))
        sub = builder.shl(ir.Constant(_I32, 0x00200000), e)
        bits = builder.select(builder.icmp_unsigned(">=", e, ir.Constant(_I32, 2)), normal, sub)
        d = builder.bitcast(bits, _F)
        raw = _vload(builder, pa, builder.add(off, _c(off, 1)), 16)
        v8 = ir.VectorType(_I8, 16)
        lo = _mxfp4_u(builder, builder.and_(raw, ir.Constant(v8, [15] * 16)))
        hi = _mxfp4_u(builder, builder.lshr(raw, ir.Constant(v8, [4] * 16)))
        u = builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_I32, 32), list(range(32))))
        return [_times(builder, d, builder.sub(u, _k(32, _I8, 12)))]                # kvalues_mxfp4, exact integers
    if kind in ("q4_k", "q5_k"):
        d = _half_f32(builder, pa, pt, off)
        dmin = _half_f32(builder, pa, pt, builder.add(off, _c(off, 2)))
        sc, m = _scales_mins8(builder, _vload(builder, pa, builder.add(off, _c(off, 4)), 16))
        f8 = ir.VectorType(_F, 8)
        dj = builder.fmul(_splat(builder, d, _F, 8), builder.uitofp(sc, f8))          # float32 d * sc_j
        mj = builder.fmul(_splat(builder, dmin, _F, 8), builder.uitofp(m, f8))        # float32 dmin * m_j
        nib = 48 if kind == "q5_k" else 16
        if kind == "q5_k":
            qh = _vload(builder, pa, builder.add(off, _c(off, 16)), 32)
        out = []
        for j in range(8):
            raw = _vload(builder, pa, builder.add(off, _c(off, nib + (j >> 1) * 32)), 32)
            q = builder.and_(builder.lshr(raw, _k(32, _I8, 4 * (j & 1))), _k(32, _I8, 15))
            if kind == "q5_k":
                hb = builder.and_(builder.lshr(qh, _k(32, _I8, j)), _k(32, _I8, 1))
                q = builder.or_(q, builder.shl(hb, _k(32, _I8, 4)))
            pick = ir.Constant(ir.VectorType(_I32, 32), [j] * 32)
            w = builder.fmul(builder.shuffle_vector(dj, dj, pick), builder.uitofp(q, _F32))
            out.append(builder.fsub(w, builder.shuffle_vector(mj, mj, pick)))
        return out
    if kind != "q6_k":
        raise NotImplementedError(f"simd_exact: no block decode for {kind} (decoded: {DECODED})")
    d = _half_f32(builder, pa, pt, builder.add(off, _c(off, 208)))
    scb = _vload(builder, pa, builder.add(off, _c(off, 192)), 16)                   # 16 int8 scales
    ds = builder.fmul(_splat(builder, d, _F, 16), builder.sitofp(scb, ir.VectorType(_F, 16)))   # float32 d * sc_g
    out = []
    for c in range(8):   # 32 elements 128 h + 32 k: sub-blocks 8 h + 2 k and the next
        h, k = c >> 2, c & 3
        ql = _vload(builder, pa, builder.add(off, _c(off, 64 * h + 32 * (k & 1))), 32)
        qh = _vload(builder, pa, builder.add(off, _c(off, 128 + 32 * h)), 32)
        lo = builder.and_(builder.lshr(ql, _k(32, _I8, 4 * (k >> 1))), _k(32, _I8, 15))
        hi = builder.and_(builder.lshr(qh, _k(32, _I8, 2 * k)), _k(32, _I8, 3))
        q = builder.sub(builder.or_(lo, builder.shl(hi, _k(32, _I8, 4))), _k(32, _I8, 32))
        g0 = 8 * h + 2 * k
        dpat = builder.shuffle_vector(ds, ds, ir.Constant(ir.VectorType(_I32, 32), [g0] * 16 + [g0 + 1] * 16))
        out.append(_times(builder, dpat, q))
    return out


def _sum8(builder, v):
    """``((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7))`` of an ``<8 x double>``, as :func:`refsim.forward.layers._sum8`."""
    s = [builder.extract_element(v, ir.Constant(_I32, i)) for i in range(8)]
    return builder.fadd(builder.fadd(builder.fadd(s[0], s[1]), builder.fadd(s[2], s[3])),
                        builder.fadd(builder.fadd(s[4], s[5]), builder.fadd(s[6], s[7])))


def _make(kind: str):
    """The codegen of :func:`exact_rows4` for one type: ``(a, r, nb, x, table) -> 4 float64``."""
    _, nel, bsize = EXACT_ROWS4[kind]
    ret = types.UniTuple(types.float64, 4)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        pa = ary.data
        rb = builder.extract_value(ary.strides, 0)
        r, nb = args[1], args[2]
        px = context.make_array(signature.args[3])(context, builder, args[3]).data
        pt = context.make_array(signature.args[4])(context, builder, args[4]).data
        base = builder.mul(r, rb)
        rows = [builder.add(base, builder.mul(rb, _c(rb, i))) for i in range(4)]
        accs = [cgutils.alloca_once_value(builder, ir.Constant(_D8, [0.0] * 8)) for _ in range(4)]
        with cgutils.for_range(builder, nb) as loop:
            b = loop.index
            offs = [builder.add(row, builder.mul(b, _c(b, bsize))) for row in rows]
            _prefetch_next4(builder, pa, base, rb, b, bsize)
            chunks = [_decode(builder, kind, pa, pt, off) for off in offs]
            vals = [builder.load(acc) for acc in accs]
            for c in range(nel // 32):
                for g in range(4):      # elements 32 c + 8 g ... + 7: lanes 0..7
                    xo = builder.add(builder.mul(b, _c(b, nel)), _c(b, 32 * c + 8 * g))
                    xg = builder.load(builder.bitcast(builder.gep(px, [xo]), _D8.as_pointer()), align=8)
                    sel = ir.Constant(ir.VectorType(_I32, 8), list(range(8 * g, 8 * g + 8)))
                    for i in range(4):
                        w = builder.fpext(builder.shuffle_vector(chunks[i][c], chunks[i][c], sel), _D8)
                        vals[i] = builder.fadd(vals[i], builder.fmul(w, xg))
            for acc, v in zip(accs, vals):
                builder.store(v, acc)
        out = context.get_constant_undef(ret)
        for i in range(4):
            out = builder.insert_value(out, _sum8(builder, builder.load(accs[i])), i)
        return out
    return codegen


_KIND = {v[0]: k for k, v in EXACT_ROWS4.items()}


def exact_rows4_python(qtype, a, r, nb, x, table):
    """The reference: rows ``r..r+3`` decoded by :func:`refsim.kernels.loops.decode_row` and dotted with ``x``
    by the one-row 8-lane loop (:func:`refsim.forward.layers._dot8`'s order); a 4-tuple of floats."""
    n_cols = nb * EXACT_ROWS4[_KIND[qtype]][1]
    w = np.empty(n_cols, np.float32)
    out = []
    with np.errstate(all="ignore"):     # inf and NaN from extreme scales are results here, as in compiled code
        return _rows_python(qtype, a, r, n_cols, x, table, w, out)


def _rows_python(qtype, a, r, n_cols, x, table, w, out):
    for i in range(4):
        decode_row(qtype, a[r + i], n_cols, table, KVALUES, w)
        lanes = [0.0] * 8
        for c in range(n_cols):
            lanes[c % 8] = float(np.float64(lanes[c % 8]) + np.float64(w[c]) * np.float64(x[c]))
        out.append(((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])))
    return tuple(out)


def exact_rows4(qtype, a, r, nb, x, table):
    """float64 ``dot8`` of the rows ``a[r:r+4]`` (``nb`` blocks of ggml type ``qtype``, one of
    :data:`EXACT_QTYPES`; F32 rows count blocks of 32 floats) with the float64 activation ``x``: a 4-tuple,
    element ``i`` equal bit for bit to the one-row loop of :func:`refsim.forward.layers._linear_rows` before its
    rounding to float32. In compiled code ``qtype`` is a runtime value (a ``switch`` to the type's loop; another
    id gives NaNs). Rows must be contiguous (``a.strides[1] == 1``); reads 4 whole rows, prefetches the next 4."""
    return exact_rows4_python(qtype, a, r, nb, x, table)


@intrinsic
def _exact_rows4(typingctx, qtype, a, r, nb, x, table):
    if not (isinstance(a, types.Array) and a.ndim == 2 and a.dtype == types.uint8):
        raise TypingError(f"exact_rows4: expected 2-D uint8 rows, got {a}")
    for arr, dt in ((x, types.float64), (table, types.float32)):
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C" and arr.dtype == dt):
            raise TypingError(f"exact_rows4: expected a 1-D C-contiguous {dt} array, got {arr}")
    ret = types.UniTuple(types.float64, 4)
    cases = {q: _make(k) for q, k in _KIND.items()}
    return ret(types.intp, a, types.intp, types.intp, x, table), _switch_codegen(cases, ret)


@overload(exact_rows4, inline="always")
def _ov_exact_rows4(qtype, a, r, nb, x, table):
    return lambda qtype, a, r, nb, x, table: _exact_rows4(qtype, a, r, nb, x, table)


__all__ = ["DECODED", "EXACT_QTYPES", "EXACT_ROWS4", "exact_rows4", "exact_rows4_python"]
