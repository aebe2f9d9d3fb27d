"""Four rows at a time: the ``ggml`` mode's walkers for the types of :mod:`refsim.kernels.qdot` (Q4_0, Q8_0,
Q5_0, MXFP4, Q4_K, Q5_K, Q6_K), and the walk they share with :mod:`refsim.kernels.simd_ext` (the further
types) and :mod:`refsim.kernels.simd_exact` (the ``exact`` mode).

Each ``<type>_rows4(a, r, nb, xq, xd, xs, table)`` returns the float64 dots of the rows ``a[r:r+4]`` (``nb``
blocks each) with one quantized activation, element ``i`` equal bit for bit to
:func:`refsim.kernels.qdot.qdot_row` of row ``r + i``: the plain Python function is that reference (it calls
``qdot_row``), and a Numba ``overload`` replaces it in compiled code by an LLVM intrinsic that walks the four
rows at once (the section comments below say how). Which of the registered types have such a walker is
:attr:`refsim.kernels.registry.QuantKernel.rows4`; :data:`BY_TYPE` maps each to its function, and the block
sizes come from the registry. The code paths follow :data:`refsim.kernels.simd.AVX2` and
:data:`refsim.kernels.simd.F16C`, read when an intrinsic is compiled.

Layers: the block-dot primitives (:mod:`refsim.kernels.simd`), the one-row references
(:mod:`refsim.kernels.qdot`), these walkers, then the dispatch that picks between them
(:mod:`refsim.kernels.ggml_matmul`).
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload

from refsim.kernels import simd
from refsim.kernels.qdot import qdot_row
from refsim.kernels.registry import KERNELS, MXFP4, Q4_0, Q4_K, Q5_0, Q5_K, Q6_K, Q8_0
from refsim.kernels.simd import _I8, _I32, _check8, _dot, _splat, dot_i8x32, dot_nibu16x2


def _sizes(kind: str) -> tuple[int, int]:
    """(elements, bytes) per block of the type ``kind`` names (``"q4_k"``), from the registry."""
    k = KERNELS[Q[kind.upper()]]
    return k.block_size, k.type_size


# --- four consecutive Q4_0 / Q8_0 rows against one quantized activation (the ``ggml`` mode's rows) ---
#
# :mod:`refsim.kernels.qdot` sums a row as ``s += (f64(d_w) * f64(d_x)) * f64(isum)`` block by block.
# Done one row at a time, each block pays a horizontal reduction of its integer lanes and a scalar
# float64 tail, and the hardware prefetcher, which stops at every 4 KiB page of the memory-mapped
# file, leaves the loads waiting on DRAM. These functions walk four rows at once: the four blocks'
# integer lanes are reduced together into one ``<4 x i32>`` (a transpose of partial sums; exact
# integers, so the order is free), lane ``i`` of a ``<4 x double>`` accumulator is row ``i``'s ``s``
# with the same float64 operations in the same block order (no fused multiply-add: LLVM contracts
# only with fast-math flags, which these instructions do not carry; and every product here is exact
# in float64 anyway), and each block step prefetches the same bytes of the next four rows
# (``llvm.prefetch``, a hint that never faults). Measured on this repo's 2-core AMD EPYC host, one
# thread, Q4_0 rows of 2048 from DRAM: 0.11-0.15 -> 0.065-0.075 ns per weight.

_ROWS4 = {kind: _sizes(kind)[1] for kind in ("q4_0", "q8_0")}
"""Bytes per 32-element block of the types :func:`_make_rows4` walks."""


def _rows4_lanes(context, builder, kind, pa, offs, wb):
    """Per row ``i`` at byte offset ``offs[i]`` (the block's start): its block's integer dot with the
    activation block ``wb`` (``<32 x i8>``), as an ``<8 x i32>`` of partial sums (AVX2, Q8_0) or an i32 (the
    generic path; Q4_0 on AVX2 goes through :func:`_nibble_pairs`)."""
    v8 = ir.VectorType(_I8, 16)
    v16 = ir.VectorType(ir.IntType(16), 16)
    out = []
    for off in offs:
        if kind == "q4_0":
            raw = builder.load(builder.bitcast(builder.gep(pa, [builder.add(off, ir.Constant(off.type, 2))]),
                                               v8.as_pointer()), align=1)
            lo = builder.and_(raw, ir.Constant(v8, [15] * 16))
            hi = builder.and_(builder.lshr(raw, ir.Constant(v8, [4] * 16)), ir.Constant(v8, [15] * 16))
            q = builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_I32, 32), list(range(32))))
            out.append(_dot(builder, builder.zext(q, ir.VectorType(_I32, 32)), wb, 32))   # AVX2: _nibble_pairs
        else:   # q8_0: int8 x int8, widened to i16 first (exact for every int8, -128 included)
            q = builder.load(builder.bitcast(builder.gep(pa, [builder.add(off, ir.Constant(off.type, 2))]),
                                             ir.VectorType(_I8, 32).as_pointer()), align=1)
            if not simd.AVX2:
                out.append(_dot(builder, builder.sext(q, ir.VectorType(_I32, 32)), wb, 32))
                continue
            wd = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VectorType(_I32, 8), [v16, v16]),
                                                "llvm.x86.avx2.pmadd.wd")
            halves = []
            for h in range(2):
                sel = ir.Constant(ir.VectorType(_I32, 16), list(range(16 * h, 16 * h + 16)))
                qa = builder.sext(builder.shuffle_vector(q, q, sel), v16)
                xa = builder.sext(builder.shuffle_vector(wb, wb, sel), v16)
                halves.append(builder.call(wd, [qa, xa]))
            out.append(builder.add(halves[0], halves[1]))
    return out


def _sum_lanes4(builder, ps):
    """Four ``<8 x i32>`` -> ``<4 x i32>`` whose lane ``i`` is the sum of ``ps[i]``'s lanes: in-lane pair sums of
    two rows interleaved (``[a01 b01 a23 b23 | a45 b45 a67 b67]``), then of four (``[a0..3 b0..3 c0..3 d0..3 |
    a4..7 ...]``), then the two 128-bit halves added: 11 instructions where halving each row first took 17."""
    v8, v4 = ir.VectorType(_I32, 8), ir.VectorType(_I32, 4)

    def step(a, b, lo, hi):
        return builder.add(builder.shuffle_vector(a, b, ir.Constant(v8, lo)), builder.shuffle_vector(a, b, ir.Constant(v8, hi)))
    ab = step(ps[0], ps[1], [0, 8, 2, 10, 4, 12, 6, 14], [1, 9, 3, 11, 5, 13, 7, 15])
    cd = step(ps[2], ps[3], [0, 8, 2, 10, 4, 12, 6, 14], [1, 9, 3, 11, 5, 13, 7, 15])
    t = step(ab, cd, [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15])
    return builder.add(builder.shuffle_vector(t, t, ir.Constant(v4, [0, 1, 2, 3])),
                       builder.shuffle_vector(t, t, ir.Constant(v4, [4, 5, 6, 7])))


def _prefetch_next4(builder, pa, base, rb, b, bsize):
    """Prefetch, at block step ``b``, the bytes ``[4 rb + 4 b bsize, 4 rb + 4 (b + 1) bsize)`` past ``base``:
    the next four rows (``rb`` bytes each) at the pace this pass reads the current four (one call per 64-byte
    line; ``llvm.prefetch`` is a hint that never faults, so past the end is harmless)."""
    pf = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [_I8.as_pointer(), _I32, _I32, _I32]), "llvm.prefetch.p0i8")
    nxt = builder.add(builder.add(base, builder.mul(rb, ir.Constant(rb.type, 4))),
                      builder.mul(b, ir.Constant(b.type, 4 * bsize)))
    for k in range(0, 4 * bsize, 64):
        builder.call(pf, [builder.gep(pa, [builder.add(nxt, ir.Constant(nxt.type, k))]),
                          ir.Constant(_I32, 0), ir.Constant(_I32, 3), ir.Constant(_I32, 1)])


def _halves4(builder, pa, pt, offs, delta):
    """``<4 x double>``: the half (little-endian f16) at byte ``offs[i] + delta`` of each of four rows, via
    ``vcvtph2ps`` when :data:`refsim.kernels.simd.F16C`, else the ``F16_TO_F32`` table ``pt`` (equal for every
    non-NaN half)."""
    d4 = ir.VectorType(ir.DoubleType(), 4)
    offs = [builder.add(off, ir.Constant(off.type, delta)) if delta else off for off in offs]
    if simd.F16C:
        hv = ir.Constant(ir.VectorType(ir.IntType(16), 4), ir.Undefined)
        for i, off in enumerate(offs):
            h = builder.load(builder.bitcast(builder.gep(pa, [off]), ir.IntType(16).as_pointer()), align=1)
            hv = builder.insert_element(hv, h, ir.Constant(_I32, i))
        return builder.fpext(builder.bitcast(hv, ir.VectorType(ir.HalfType(), 4)), d4)
    fv = ir.Constant(ir.VectorType(ir.FloatType(), 4), ir.Undefined)
    for i, off in enumerate(offs):
        lo = builder.zext(builder.load(builder.gep(pa, [off])), ir.IntType(64))
        hi = builder.zext(builder.load(builder.gep(pa, [builder.add(off, ir.Constant(off.type, 1))])), ir.IntType(64))
        idx = builder.or_(lo, builder.shl(hi, ir.Constant(ir.IntType(64), 8)))
        fv = builder.insert_element(fv, builder.load(builder.gep(pt, [idx])), ir.Constant(_I32, i))
    return builder.fpext(fv, d4)


def _check_rows4(kind: str, a, xq, xd, xs, table) -> None:
    """Typing of a ``*_rows4`` intrinsic's arguments: 2-D uint8 rows, int8 activations
    (:func:`_check8`), 1-D C-contiguous float32 scales, int32 block sums, float32 table."""
    if not (isinstance(a, types.Array) and a.ndim == 2 and a.dtype == types.uint8):
        raise TypingError(f"{kind}_rows4: expected 2-D uint8 rows, got {a}")
    _check8(f"{kind}_rows4", xq)
    for arr, dt in ((xd, types.float32), (xs, types.int32), (table, types.float32)):
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C" and arr.dtype == dt):
            raise TypingError(f"{kind}_rows4: expected a 1-D C-contiguous {dt} array, got {arr}")


def _rows4_args(context, builder, signature, args):
    """A ``*_rows4`` codegen's operands: (rows data pointer, bytes per row, r, nb, activation,
    scale, block-sum and table data pointers)."""
    a, r, nb, xq, xd, xs, table = args
    ary = context.make_array(signature.args[0])(context, builder, a)
    rb = builder.extract_value(ary.strides, 0)                   # bytes per row
    px, pd, ps, pt = (context.make_array(signature.args[i])(context, builder, v).data
                      for i, v in ((3, xq), (4, xd), (5, xs), (6, table)))
    return ary.data, rb, r, nb, px, pd, ps, pt


def _make_rows4(kind: str):
    bsize = _ROWS4[kind]
    d4 = ir.VectorType(ir.DoubleType(), 4)
    ret = types.UniTuple(types.float64, 4)

    @intrinsic
    def _impl(typingctx, a, r, nb, xq, xd, xs, table):
        _check_rows4(kind, a, xq, xd, xs, table)
        sig = ret(a, types.intp, types.intp, xq, xd, xs, table)

        def codegen(context, builder, signature, args):
            pa, rb, r, nb, px, pd, ps, pt = _rows4_args(context, builder, signature, args)
            base = builder.mul(r, rb)
            rows = [builder.add(base, builder.mul(rb, ir.Constant(rb.type, i))) for i in range(4)]
            acc = cgutils.alloca_once_value(builder, ir.Constant(d4, [0.0] * 4))
            with cgutils.for_range(builder, nb) as loop:
                b = loop.index
                o = builder.mul(b, ir.Constant(b.type, bsize))
                offs = [builder.add(row, o) for row in rows]
                _prefetch_next4(builder, pa, base, rb, b, bsize)
                wb = builder.load(builder.bitcast(builder.gep(px, [builder.mul(b, ir.Constant(b.type, 32))]),
                                                  ir.VectorType(_I8, 32).as_pointer()), align=1)
                if kind == "q4_0" and simd.AVX2:
                    isum = _nibble_pairs(builder, pa, offs, 2, px, builder.mul(b, ir.Constant(b.type, 32)))
                elif simd.AVX2:
                    isum = _sum_lanes4(builder, _rows4_lanes(context, builder, kind, pa, offs, wb))
                else:
                    lanes = _rows4_lanes(context, builder, kind, pa, offs, wb)
                    isum = ir.Constant(ir.VectorType(_I32, 4), ir.Undefined)
                    for i, s in enumerate(lanes):
                        isum = builder.insert_element(isum, s, ir.Constant(_I32, i))
                if kind == "q4_0":   # q - 8: minus 8 * (sum of the activation block)
                    xs8 = builder.mul(builder.load(builder.gep(ps, [b])), ir.Constant(_I32, 8))
                    isum = builder.sub(isum, _splat(builder, xs8, _I32, 4))
                dw = _halves4(builder, pa, pt, offs, 0)
                dx = builder.fpext(builder.load(builder.gep(pd, [b])), ir.DoubleType())
                term = builder.fmul(builder.fmul(dw, _splat(builder, dx, ir.DoubleType(), 4)), builder.sitofp(isum, d4))
                builder.store(builder.fadd(builder.load(acc), term), acc)
            return _tuple4(context, builder, builder.load(acc), ret)
        return sig, codegen
    return _impl


_q4_0_rows4 = _make_rows4("q4_0")
_q8_0_rows4 = _make_rows4("q8_0")


def _rows4_python(kind, a, r, nb, xq, xd, xs, table):
    out = []
    bsize = _ROWS4[kind]
    for i in range(4):
        row = a[r + i]
        s = 0.0
        for b in range(nb):
            o = b * bsize
            dw = np.float64(table[int(row[o]) | (int(row[o + 1]) << 8)])
            if kind == "q4_0":
                isum = dot_nibu16x2(row, o + 2, xq, b * 32) - 8 * int(xs[b])
            else:
                isum = dot_i8x32(row.view(np.int8), o + 2, xq, b * 32)
            s = float(np.float64(s) + (dw * np.float64(xd[b])) * np.float64(isum))
        out.append(s)
    return tuple(out)


def q4_0_rows4(a, r, nb, xq, xd, xs, table):
    """float64 dots of the Q4_0 rows ``a[r:r+4]`` (``nb`` blocks of 18 bytes) with one Q8_0 activation
    (``xq`` int8, ``xd`` float32 block scales, ``xs`` int32 block sums): a 4-tuple, element ``i``
    equal bit for bit to ``s = sum_b (f64(d_w) * f64(xd[b])) * f64(isum_b)`` added in block order,
    ``isum_b = sum_j nibble_j xq_j - 8 xs[b]`` (:mod:`refsim.kernels.qdot`'s Q4_0 row). ``table`` is
    the half -> float32 table. Reads 4 whole rows, which must each be contiguous (``a.strides[1] == 1``;
    rows ``a.strides[0]`` bytes apart); prefetches the next 4 (past the end is harmless)."""
    return _rows4_python("q4_0", a, r, nb, xq, xd, xs, table)


def q8_0_rows4(a, r, nb, xq, xd, xs, table):
    """:func:`q4_0_rows4` for Q8_0 rows (blocks of 34 bytes, ``isum_b = sum_j q_j xq_j``; ``xs`` unused)."""
    return _rows4_python("q8_0", a, r, nb, xq, xd, xs, table)


@overload(q4_0_rows4, inline="always")
def _ov_q4_0_rows4(a, r, nb, xq, xd, xs, table):
    return lambda a, r, nb, xq, xd, xs, table: _q4_0_rows4(a, r, nb, xq, xd, xs, table)


@overload(q8_0_rows4, inline="always")
def _ov_q8_0_rows4(a, r, nb, xq, xd, xs, table):
    return lambda a, r, nb, xq, xd, xs, table: _q8_0_rows4(a, r, nb, xq, xd, xs, table)


# --- four rows of the other Q8_0 / Q8_K weight types (Q5_0, MXFP4, Q4_K, Q5_K, Q6_K) ------------------
#
# The same walk as q4_0_rows4 (four rows per pass, lane i of a <4 x double> accumulator = row i's float64
# sum with the one-row function's operations in its block order, the next four rows prefetched), for the
# row functions of refsim.kernels.qdot:
#
#   q5_0, mxfp4 (Q8_0 activations, blocks of 32): the 32 weights as unsigned bytes u = q + bias (Q5_0:
#     nibble | high bit << 4, bias 16; MXFP4: kvalues_mxfp4[nibble] + 12, bias 12), the block dot
#     sum u x - bias * xs[b] (as Q4_0's - 8 * xs[b]); the scale term as the row function's
#     (f64(d_w) * f64(d_x)) * isum, d_w the half (Q5_0) or 2^(e - 128) (MXFP4, exact in float64).
#   q4_k, q5_k (Q8_K activations, blocks of 256): acc_sc = sum_j sc_j isum_j, acc_m = sum_j m_j xs[8b + j]
#     over the 8 sub-blocks of 32, s += (d * dx) * acc_sc - (dmin * dx) * acc_m.
#   q6_k: acc = sum_g sc_g isum_g over the 16 sub-blocks of 16 (q = q6 - 32), s += (d * dx) * acc.
#
# Every integer above is exact in int32 (bounds at each step in the comments), so it equals the row
# function's int64 sums whatever order the lanes are added in. On AVX2 the products are vpmaddubsw
# (unsigned weight bytes x signed activations, pairs to i16) then vpmaddwd (pairs to i32, by 1 or by the
# sub-block scale), as ggml's AVX2 kernels do; elsewhere generic vector code.

_ROWS4_X = {kind: _sizes(kind) for kind in ("q5_0", "mxfp4", "q4_k", "q5_k", "q6_k")}
"""Elements and bytes per block of the types :func:`_make_rows4_x` walks."""

_MXFP4_U = [12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0]
"""ggml ``kvalues_mxfp4`` plus 12 (0..24)."""


def _vload(builder, ptr, off, n):
    return builder.load(builder.bitcast(builder.gep(ptr, [off]), ir.VectorType(_I8, n).as_pointer()), align=1)


def _c(off, k):
    return ir.Constant(off.type, k)


def _nibbles32(builder, raw16):
    """16 bytes -> ``<32 x i8>``: low nibbles (elements 0..15), then high nibbles (16..31)."""
    v8 = ir.VectorType(_I8, 16)
    lo = builder.and_(raw16, ir.Constant(v8, [15] * 16))
    hi = builder.lshr(raw16, ir.Constant(v8, [4] * 16))
    return builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_I32, 32), list(range(32))))


def _mxfp4_u(builder, nib):
    """``<16 x i8>`` nibbles (0..15) -> kvalues_mxfp4[nib] + 12 (``vpshufb`` on AVX2, else arithmetic:
    magnitude m = nib & 7 maps to m (m < 4), 2m - 4 (m < 6), 4m - 16; sign bit nib & 8)."""
    v8 = ir.VectorType(_I8, 16)
    if simd.AVX2:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v8, [v8, v8]), "llvm.x86.ssse3.pshuf.b.128")
        return builder.call(fn, [ir.Constant(v8, _MXFP4_U), nib])
    k = lambda x: ir.Constant(v8, [x] * 16)  # noqa: E731
    m = builder.and_(nib, k(7))
    two = builder.sub(builder.shl(m, k(1)), k(4))
    four = builder.sub(builder.shl(m, k(2)), k(16))
    mag = builder.select(builder.icmp_unsigned("<", m, k(4)), m,
                         builder.select(builder.icmp_unsigned("<", m, k(6)), two, four))
    neg = builder.icmp_unsigned("!=", builder.and_(nib, k(8)), k(0))
    return builder.select(neg, builder.sub(k(12), mag), builder.add(k(12), mag))


def _maddubs(builder, u, x):
    """AVX2 ``vpmaddubsw``: ``<32 x i8>`` unsigned ``u`` times signed ``x``, adjacent pairs summed to
    ``<16 x i16>`` (callers keep every pair sum inside int16: no saturation)."""
    v16 = ir.VectorType(ir.IntType(16), 16)
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16, [ir.VectorType(_I8, 32)] * 2),
                                        "llvm.x86.avx2.pmadd.ub.sw")
    return builder.call(fn, [u, x])


def _maddwd(builder, a, b):
    """AVX2 ``vpmaddwd``: ``<16 x i16>`` products, adjacent pairs summed to ``<8 x i32>``."""
    v16 = ir.VectorType(ir.IntType(16), 16)
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VectorType(_I32, 8), [v16, v16]),
                                        "llvm.x86.avx2.pmadd.wd")
    return builder.call(fn, [a, b])


def _reduce(builder, v, n):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [ir.VectorType(_I32, n)]),
                                        f"llvm.vector.reduce.add.v{n}i32")
    return builder.call(fn, [v])


def _lanes4(builder, per_row):
    """Four row values -> ``<4 x i32>``: ``<8 x i32>`` partial sums reduced together (:func:`_sum_lanes4`),
    or i32 scalars inserted."""
    if isinstance(per_row[0].type, ir.VectorType):
        return _sum_lanes4(builder, per_row)
    v = ir.Constant(ir.VectorType(_I32, 4), ir.Undefined)
    for i, s in enumerate(per_row):
        v = builder.insert_element(v, s, ir.Constant(_I32, i))
    return v


def _u_dot32(builder, u, x):
    """``sum_j u_j x_j`` over 32 (``u`` unsigned bytes <= 31 or 24, ``x`` int8): ``<8 x i32>`` partial sums on
    AVX2 (pairs <= 2 * 31 * 128 = 7936 in int16), else an i32."""
    if simd.AVX2:
        return _maddwd(builder, _maddubs(builder, u, x), ir.Constant(ir.VectorType(ir.IntType(16), 16), [1] * 16))
    v32 = ir.VectorType(_I32, 32)
    return _reduce(builder, builder.mul(builder.zext(u, v32), builder.sext(x, v32)), 32)


def _scales_mins8(builder, raw16):
    """Q4_K/Q5_K: the 12 packed scale bytes (first 12 of ``raw16``) -> (sc, m) as ``<8 x i8>`` (6 bits each),
    :func:`refsim.kernels.k_quants._scale_min` for j = 0..7 at once."""
    v8 = ir.VectorType(_I8, 8)
    sh = lambda idx: builder.shuffle_vector(raw16, raw16, ir.Constant(ir.VectorType(_I32, 8), idx))  # noqa: E731
    k = lambda x: ir.Constant(v8, [x] * 8)  # noqa: E731
    low4 = ir.Constant(ir.VectorType(ir.IntType(1), 8), [1] * 4 + [0] * 4)
    a = sh([0, 1, 2, 3, 8, 9, 10, 11])            # q[j] (j < 4), q[j + 4] (j >= 4)
    b = sh([0, 1, 2, 3, 0, 1, 2, 3])              # q[j - 4] for j >= 4
    c = sh([4, 5, 6, 7, 8, 9, 10, 11])            # q[j + 4]
    d = sh([4, 5, 6, 7, 4, 5, 6, 7])              # q[j] for j >= 4
    top = lambda v: builder.shl(builder.lshr(v, k(6)), k(4))  # noqa: E731
    sc = builder.select(low4, builder.and_(a, k(63)), builder.or_(builder.and_(a, k(15)), top(b)))
    m = builder.select(low4, builder.and_(c, k(63)), builder.or_(builder.lshr(c, k(4)), top(d)))
    return sc, m


def _tuple4(context, builder, v, ret):
    """A ``<4 x double>`` as the 4-tuple of float64 ``ret`` the four-rows intrinsics return."""
    out = context.get_constant_undef(ret)
    for i in range(4):
        out = builder.insert_value(out, builder.extract_element(v, ir.Constant(_I32, i)), i)
    return out


def _rows4_codegen(nel: int, bsize: int, block_term):
    """The codegen of a four-rows intrinsic (signature ``(a, r, nb, xq, xd, xs, table) -> 4 float64``): rows
    ``r..r+3`` of ``a`` walked block by block (``nb`` blocks of ``nel`` elements, ``bsize`` bytes), the next four
    rows prefetched at the same pace, lane ``i`` of a ``<4 x double>`` accumulator row ``i``'s sum, ``acc +=
    block_term(builder, Block)`` once per block in block order (:class:`Block` holds the block's operands)."""
    d4 = ir.VectorType(ir.DoubleType(), 4)
    ret = types.UniTuple(types.float64, 4)

    def codegen(context, builder, signature, args):
        pa, rb, r, nb, px, pd, ps, pt = _rows4_args(context, builder, signature, args)
        base = builder.mul(r, rb)
        rows = [builder.add(base, builder.mul(rb, _c(rb, i))) for i in range(4)]
        acc = cgutils.alloca_once_value(builder, ir.Constant(d4, [0.0] * 4))
        with cgutils.for_range(builder, nb) as loop:
            b = loop.index
            offs = [builder.add(row, builder.mul(b, _c(b, bsize))) for row in rows]
            _prefetch_next4(builder, pa, base, rb, b, bsize)
            dx = _splat(builder, builder.fpext(builder.load(builder.gep(pd, [b])), ir.DoubleType()),
                        ir.DoubleType(), 4)
            term = block_term(builder, Block(pa, offs, b, builder.mul(b, _c(b, nel)), dx, px, ps, pt))
            builder.store(builder.fadd(builder.load(acc), term), acc)
        return _tuple4(context, builder, builder.load(acc), ret)
    return codegen


def _switch_codegen(cases: dict, ret):
    """A codegen whose first argument is a runtime ggml type id: an LLVM ``switch`` on it to one block per
    ``cases[type_id]`` (a codegen of the remaining arguments); an id not in ``cases`` gives NaNs."""
    def codegen(context, builder, signature, args):
        sub = signature.return_type(*signature.args[1:])
        out = cgutils.alloca_once(builder, context.get_value_type(ret))
        builder.store(context.get_constant_generic(builder, ret, (float("nan"),) * ret.count), out)
        end = builder.append_basic_block("rows4.end")
        sw = builder.switch(builder.trunc(args[0], _I32), end)
        for qtype, gen in cases.items():
            bb = builder.append_basic_block(f"rows4.{qtype}")
            sw.add_case(ir.Constant(_I32, qtype), bb)
            with builder.goto_block(bb):
                builder.store(gen(context, builder, sub, args[1:]), out)
                builder.branch(end)
        builder.position_at_end(end)
        return builder.load(out)
    return codegen


class Block:
    """One block step of :func:`_rows4_codegen`: ``pa`` the rows' bytes, ``offs`` the four rows' byte offsets of
    block ``b``, ``xo`` its first element, ``dx`` the activation block scale as ``<4 x double>``, ``px``/``ps``/
    ``pt`` the activation, block-sum and half-table pointers."""

    def __init__(self, pa, offs, b, xo, dx, px, ps, pt):
        self.pa, self.offs, self.b, self.xo, self.dx, self.px, self.ps, self.pt = pa, offs, b, xo, dx, px, ps, pt


def _q5_high(builder, pa, off):
    """Q5_0/Q5_1: the 4 bytes of high bits at ``pa + off`` (bit ``j``: element ``j``) as ``<32 x i8>`` of 16 where
    the bit is set, else 0."""
    v32 = ir.VectorType(_I8, 32)
    qh = _vload(builder, pa, off, 4)
    rep = builder.shuffle_vector(qh, qh, ir.Constant(ir.VectorType(_I32, 32), [j // 8 for j in range(32)]))
    bit = builder.and_(rep, ir.Constant(v32, [1 << (j % 8) for j in range(32)]))
    return builder.select(builder.icmp_unsigned("!=", bit, ir.Constant(v32, [0] * 32)), ir.Constant(v32, [16] * 32),
                          ir.Constant(v32, [0] * 32))


def _nibble_pairs(builder, pa, offs, delta, px, xo, table=None):
    """AVX2, one block of 16 packed nibble bytes (at byte ``delta`` of each row's block; elements 0..15 in the low
    nibbles, 16..31 in the high ones, as Q4_0 and MXFP4 store them) of four rows: ``sum_j u_j x_j`` of each row as
    ``<4 x i32>``, ``u`` the nibble (``table`` None: Q4_0) or ``table[nibble]`` (MXFP4's ``kvalue + 12``, by
    ``vpshufb``), two rows per ``<32 x i8>`` register. Row ``2p``'s 16 bytes go in the low 128-bit lane and row
    ``2p + 1``'s in the high one, so one mask (and one ``vpshufb``) gives the low nibbles of both rows and one
    ``vpmaddubsw`` takes them against elements 0..15 of the activation, repeated in both lanes; the high nibbles
    (elements 16..31) the same. The two int16 results are added (each pair sum is at most ``2 * 24 * 128 = 6144``,
    so the sum ``<= 12288`` cannot overflow int16) and widened by one ``vpmaddwd``: four partial sums of each
    row per ``<8 x i32>``. That is 9-11 vector instructions per two rows where one row per register takes 6-7 per
    row, and the reduction starts from half as many lanes. Exact integers, so the order of the adds changes
    nothing. In-cache ``qdot_matmul``, MXFP4, one thread, 768 x 2048: 0.0645-0.0648 -> 0.0586-0.0600 ns per
    weight."""
    v32 = ir.VectorType(_I8, 32)
    dup = ir.Constant(ir.VectorType(_I32, 32), list(range(16)) * 2)
    cat = ir.Constant(ir.VectorType(_I32, 32), list(range(32)))
    x_lo, x_hi = (builder.shuffle_vector(h, h, dup) for h in (_vload(builder, px, xo, 16),
                                                            _vload(builder, px, builder.add(xo, _c(xo, 16)), 16)))
    shuf = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v32, [v32, v32]), "llvm.x86.avx2.pshuf.b")
    lut = (lambda v: v) if table is None else (lambda v: builder.call(shuf, [ir.Constant(v32, list(table) * 2), v]))  # noqa: E731
    ones = ir.Constant(ir.VectorType(ir.IntType(16), 16), [1] * 16)
    pairs = []
    for p in range(2):
        a, b = (_vload(builder, pa, builder.add(offs[2 * p + i], _c(offs[0], delta)), 16) for i in range(2))
        v = builder.shuffle_vector(a, b, cat)
        lo = lut(builder.and_(v, ir.Constant(v32, [15] * 32)))
        hi = lut(builder.lshr(v, ir.Constant(v32, [4] * 32)))
        pairs.append(_maddwd(builder, builder.add(_maddubs(builder, lo, x_lo), _maddubs(builder, hi, x_hi)), ones))
    return _pair_lanes4(builder, pairs)


def _pair_lanes4(builder, pairs):
    """Two ``<8 x i32>``, ``pairs[p]`` = [row ``2p``: 4 partial sums | row ``2p + 1``: 4 partial sums], -> ``<4 x i32>``
    whose lane ``i`` is row ``i``'s sum."""
    v8 = ir.VectorType(_I32, 8)   # h = [r0, r0, r2, r2 | r1, r1, r3, r3]
    h = builder.add(builder.shuffle_vector(pairs[0], pairs[1], ir.Constant(v8, [0, 2, 8, 10, 4, 6, 12, 14])),
                    builder.shuffle_vector(pairs[0], pairs[1], ir.Constant(v8, [1, 3, 9, 11, 5, 7, 13, 15])))
    v4 = ir.VectorType(_I32, 4)
    return builder.add(builder.shuffle_vector(h, h, ir.Constant(v4, [0, 4, 2, 6])),
                       builder.shuffle_vector(h, h, ir.Constant(v4, [1, 5, 3, 7])))


def _q4_k_pairs(builder, pa, offs, px, xo, scs):
    """AVX2, one Q4_K block of four rows: ``acc_sc = sum_j sc_j sum_l u_jl x_jl`` of each row as ``<4 x i32>``
    (``scs[i]`` row ``i``'s 8 scales, :func:`_scales_mins8`), two rows per register as :func:`_nibble_pairs` does:
    for each pair of sub-blocks ``2k, 2k + 1`` (the low and high nibbles of 32 bytes), bytes 0..15 of rows ``2p``
    and ``2p + 1`` in one ``<32 x i8>`` and bytes 16..31 in another; the two ``vpmaddubsw`` of a sub-block (its
    elements 0..15 and 16..31 against the activation, each half repeated in both lanes) added in int16 (each
    pair sum ``<= 2 * 15 * 128 = 3840``, so ``<= 7680``), then one ``vpmaddwd`` by the sub-block's scale of each
    row (``[sc_a x 8 | sc_b x 8]``, an in-lane shuffle): per 64 weights of a row 11 vector instructions against
    14 one row per register (where the scale broadcast takes two). Every lane ``<= 8 * 2 * 7680 * 63``: int32."""
    v32 = ir.VectorType(_I8, 32)
    v16 = ir.VectorType(ir.IntType(16), 16)
    dup = ir.Constant(ir.VectorType(_I32, 32), list(range(16)) * 2)
    cat = ir.Constant(ir.VectorType(_I32, 32), list(range(32)))
    x = [builder.shuffle_vector(h, h, dup) for h in
         (_vload(builder, px, builder.add(xo, _c(xo, 16 * q)), 16) for q in range(16))]   # x[2 j + half]
    pairs = []
    for p in range(2):
        oa, ob = offs[2 * p], offs[2 * p + 1]
        s2 = builder.zext(builder.shuffle_vector(scs[2 * p], scs[2 * p + 1], ir.Constant(ir.VectorType(_I32, 16),
                                                                                          list(range(16)))), v16)
        acc = None
        for k in range(4):
            v = [builder.shuffle_vector(_vload(builder, pa, builder.add(oa, _c(oa, 16 + 32 * k + 16 * hf)), 16),
                                        _vload(builder, pa, builder.add(ob, _c(ob, 16 + 32 * k + 16 * hf)), 16), cat)
                 for hf in range(2)]
            for nib in range(2):
                j = 2 * k + nib
                u = [builder.and_(builder.lshr(w, ir.Constant(v32, [4 * nib] * 32)), ir.Constant(v32, [15] * 32))
                     for w in v]
                pp = builder.add(_maddubs(builder, u[0], x[2 * j]), _maddubs(builder, u[1], x[2 * j + 1]))
                sj = builder.shuffle_vector(s2, s2, ir.Constant(ir.VectorType(_I32, 16), [j] * 8 + [8 + j] * 8))
                t = _maddwd(builder, pp, sj)
                acc = t if acc is None else builder.add(acc, t)
        pairs.append(acc)
    return _pair_lanes4(builder, pairs)


def _mins_pairs(builder, ps, b, mins):
    """AVX2, Q4_K: ``acc_m = sum_j m_j xs[8 b + j]`` of four rows (``mins[i]`` row ``i``'s 8 mins, 0..63) as
    ``<4 x i32>``: the activation's 8 sub-block sums narrowed to int16 (each ``|xs| <= 32 * 128``: exact), two rows'
    mins per ``<16 x i16>``, one ``vpmaddwd`` per two rows (pair sums ``<= 2 * 63 * 4096``), then
    :func:`_pair_lanes4`: no ``vpmulld``."""
    v16 = ir.VectorType(ir.IntType(16), 16)
    xs8 = builder.load(builder.bitcast(builder.gep(ps, [builder.mul(b, _c(b, 8))]), ir.VectorType(_I32, 8).as_pointer()),
                       align=4)
    xs16 = builder.trunc(xs8, ir.VectorType(ir.IntType(16), 8))
    xs2 = builder.shuffle_vector(xs16, xs16, ir.Constant(ir.VectorType(_I32, 16), list(range(8)) * 2))
    cat = ir.Constant(ir.VectorType(_I32, 16), list(range(16)))
    return _pair_lanes4(builder, [_maddwd(builder, builder.zext(builder.shuffle_vector(mins[2 * p], mins[2 * p + 1], cat), v16),
                                          xs2) for p in range(2)])


def _make_rows4_x(kind: str):
    nel, bsize = _ROWS4_X[kind]
    d4 = ir.VectorType(ir.DoubleType(), 4)
    v16 = ir.VectorType(ir.IntType(16), 16)
    ret = types.UniTuple(types.float64, 4)

    def block_term(builder, blk):
        pa, offs, b, xo, dx, px, ps, pt = blk.pa, blk.offs, blk.b, blk.xo, blk.dx, blk.px, blk.ps, blk.pt
        if kind in ("q5_0", "mxfp4"):
            if kind == "mxfp4" and simd.AVX2:
                sums = _nibble_pairs(builder, pa, offs, 1, px, xo, _MXFP4_U)
            else:
                wb = _vload(builder, px, xo, 32)
                per = []
                for off in offs:
                    if kind == "q5_0":
                        u = _nibbles32(builder, _vload(builder, pa, builder.add(off, _c(off, 6)), 16))
                        u = builder.or_(u, _q5_high(builder, pa, builder.add(off, _c(off, 2))))   # 0..31
                    else:
                        raw = _vload(builder, pa, builder.add(off, _c(off, 1)), 16)
                        v8 = ir.VectorType(_I8, 16)
                        lo = _mxfp4_u(builder, builder.and_(raw, ir.Constant(v8, [15] * 16)))
                        hi = _mxfp4_u(builder, builder.lshr(raw, ir.Constant(v8, [4] * 16)))
                        u = builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_I32, 32), list(range(32))))
                    per.append(_u_dot32(builder, u, wb))
                sums = _lanes4(builder, per)
            bias = 16 if kind == "q5_0" else 12
            isum = builder.sub(sums,                                          # |isum| <= 32 * 31 * 128
                               _splat(builder, builder.mul(builder.load(builder.gep(ps, [b])), ir.Constant(_I32, bias)),
                                      _I32, 4))
            if kind == "q5_0":
                dw = _halves4(builder, pa, pt, offs, 0)
            else:   # 2^(e - 128) as float64 bits: (e - 128 + 1023) << 52, a normal number for every e; the four
                # exponent bytes packed into one i32 by scalar shifts, then widened in one vector register
                e4 = None
                for i, off in enumerate(offs):
                    e = builder.shl(builder.zext(builder.load(builder.gep(pa, [off])), _I32), ir.Constant(_I32, 8 * i))
                    e4 = e if e4 is None else builder.or_(e4, e)
                ev = builder.zext(builder.bitcast(e4, ir.VectorType(_I8, 4)), ir.VectorType(ir.IntType(64), 4))
                bits = builder.shl(builder.add(ev, ir.Constant(ev.type, [1023 - 128] * 4)),
                                   ir.Constant(ev.type, [52] * 4))
                dw = builder.bitcast(bits, d4)
            term = builder.fmul(builder.fmul(dw, dx), builder.sitofp(isum, d4))
        elif kind in ("q4_k", "q5_k"):
            nib = 48 if kind == "q5_k" else 16
            xv = [_vload(builder, px, builder.add(xo, _c(xo, 32 * j)), 32) for j in range(8)]
            sc_rows, m_rows = [], []
            pair4 = kind == "q4_k" and simd.AVX2
            for off in offs:
                sc, m = _scales_mins8(builder, _vload(builder, pa, builder.add(off, _c(off, 4)), 16))
                if pair4:   # the scale and min sums after the loop (_q4_k_pairs, _mins_pairs)
                    sc_rows.append(sc)
                    m_rows.append(m)
                    continue
                if kind == "q5_k":
                    qh = _vload(builder, pa, builder.add(off, _c(off, 16)), 32)
                tot = None
                for j in range(8):
                    raw = _vload(builder, pa, builder.add(off, _c(off, nib + (j >> 1) * 32)), 32)
                    v32 = ir.VectorType(_I8, 32)
                    u = builder.and_(builder.lshr(raw, ir.Constant(v32, [4 * (j & 1)] * 32)), ir.Constant(v32, [15] * 32))
                    if kind == "q5_k":    # + 16 * bit j of qh: u <= 31
                        hb = builder.and_(builder.lshr(qh, ir.Constant(v32, [j] * 32)), ir.Constant(v32, [1] * 32))
                        u = builder.or_(u, builder.shl(hb, ir.Constant(v32, [4] * 32)))
                    if simd.AVX2:   # pairs <= 2 * 31 * 128 in int16; times sc <= 63: <= 500k per i32 lane
                        s16 = builder.shuffle_vector(builder.zext(sc, ir.VectorType(ir.IntType(16), 8)),
                                                     ir.Constant(ir.VectorType(ir.IntType(16), 8), ir.Undefined),
                                                     ir.Constant(ir.VectorType(_I32, 16), [j] * 16))
                        t = _maddwd(builder, _maddubs(builder, u, xv[j]), s16)
                    else:
                        t = builder.mul(_u_dot32(builder, u, xv[j]),
                                        builder.zext(builder.extract_element(sc, ir.Constant(_I32, j)), _I32))
                    tot = t if tot is None else builder.add(tot, t)
                sc_rows.append(tot)                                          # |acc_sc| <= 8 * 63 * 32 * 31 * 128
                xs8 = builder.load(builder.bitcast(builder.gep(ps, [builder.mul(b, _c(b, 8))]),
                                                   ir.VectorType(_I32, 8).as_pointer()), align=4)
                m_rows.append(builder.mul(builder.zext(m, ir.VectorType(_I32, 8)), xs8))   # <= 63 * 4096 each
            acc_sc = builder.sitofp(_q4_k_pairs(builder, pa, offs, px, xo, sc_rows) if pair4 else _lanes4(builder, sc_rows), d4)
            acc_m = builder.sitofp(_mins_pairs(builder, ps, b, m_rows) if pair4 else _sum_lanes4(builder, m_rows), d4)
            t1 = builder.fmul(builder.fmul(_halves4(builder, pa, pt, offs, 0), dx), acc_sc)
            t2 = builder.fmul(builder.fmul(_halves4(builder, pa, pt, offs, 2), dx), acc_m)
            term = builder.fsub(t1, t2)
        else:   # q6_k
            v32 = ir.VectorType(_I8, 32)
            xv = [_vload(builder, px, builder.add(xo, _c(xo, 32 * c)), 32) for c in range(8)]
            if simd.AVX2:   # 32 x (sum of each activation pair), once for the four rows: |.| <= 8192
                x32 = [_maddubs(builder, ir.Constant(v32, [32] * 32), x) for x in xv]
            per = []
            for off in offs:
                scb = _vload(builder, pa, builder.add(off, _c(off, 192)), 16)      # 16 int8 scales
                tot = None
                for c in range(8):     # 32 elements 128 h + 32 k: sub-blocks g0 = 8 h + 2 k and g0 + 1
                    h, k = c >> 2, c & 3
                    ql = _vload(builder, pa, builder.add(off, _c(off, 64 * h + 32 * (k & 1))), 32)
                    qh = _vload(builder, pa, builder.add(off, _c(off, 128 + 32 * h)), 32)
                    lo = builder.and_(builder.lshr(ql, ir.Constant(v32, [4 * (k >> 1)] * 32)), ir.Constant(v32, [15] * 32))
                    hi = builder.and_(builder.lshr(qh, ir.Constant(v32, [2 * k] * 32)), ir.Constant(v32, [3] * 32))
                    u = builder.or_(lo, builder.shl(hi, ir.Constant(v32, [4] * 32)))   # q6 = q + 32, 0..63
                    g0 = 8 * h + 2 * k
                    if simd.AVX2:   # (u x - 32 x) pairs in [-24256, 24194]: int16; times sc (int8): int32
                        s16 = builder.shuffle_vector(builder.sext(scb, v16), builder.sext(scb, v16),
                                                     ir.Constant(ir.VectorType(_I32, 16), [g0] * 8 + [g0 + 1] * 8))
                        t = _maddwd(builder, builder.sub(_maddubs(builder, u, xv[c]), x32[c]), s16)
                    else:
                        w = ir.VectorType(_I32, 32)
                        prod = builder.mul(builder.sub(builder.zext(u, w), ir.Constant(w, [32] * 32)),
                                           builder.sext(xv[c], w))
                        t = None
                        for half in range(2):
                            part = builder.shuffle_vector(prod, prod, ir.Constant(ir.VectorType(_I32, 16),
                                                                                list(range(16 * half, 16 * half + 16))))
                            sg = builder.sext(builder.extract_element(scb, ir.Constant(_I32, g0 + half)), _I32)
                            p = builder.mul(_reduce(builder, part, 16), sg)
                            t = p if t is None else builder.add(t, p)
                    tot = t if tot is None else builder.add(tot, t)
                per.append(tot)                                              # |acc| <= 16 * 128 * 16 * 32 * 128
            term = builder.fmul(builder.fmul(_halves4(builder, pa, pt, offs, 208), dx),
                                builder.sitofp(_lanes4(builder, per), d4))
        return term

    @intrinsic
    def _impl(typingctx, a, r, nb, xq, xd, xs, table):
        _check_rows4(kind, a, xq, xd, xs, table)
        return ret(a, types.intp, types.intp, xq, xd, xs, table), _rows4_codegen(nel, bsize, block_term)
    return _impl


_ROWS4_X_IMPL = {k: _make_rows4_x(k) for k in _ROWS4_X}
_ROWS4_X_QTYPE = {kind: KERNELS[Q[kind.upper()]].kind for kind in _ROWS4_X}
"""Kind -> ggml type id."""


def _rows4_x_python(kind, a, r, nb, xq, xd, xs, table):
    n_cols = nb * _ROWS4_X[kind][0]
    scratch = np.empty(32, np.int8)
    return tuple(float(qdot_row(_ROWS4_X_QTYPE[kind], a[r + i], a[r + i].view(np.int8), n_cols, xq, xd, xs, table,
                                scratch)) for i in range(4))


def q5_0_rows4(a, r, nb, xq, xd, xs, table):
    """:func:`q4_0_rows4` for Q5_0 rows (blocks of 22 bytes): element ``i`` equal bit for bit to
    :func:`refsim.kernels.qdot.qdot_row` of row ``r + i``. ``xs`` must be the activation's block sums
    (:class:`refsim.kernels.qdot.QActs` ``bsum``): the compiled form sums ``(q + 16) x`` and subtracts
    ``16 xs[b]``."""
    return _rows4_x_python("q5_0", a, r, nb, xq, xd, xs, table)


def mxfp4_rows4(a, r, nb, xq, xd, xs, table):
    """:func:`q5_0_rows4` for MXFP4 rows (blocks of 17 bytes; ``(kvalue + 12) x`` minus ``12 xs[b]``; the
    scale ``2^(e - 128)``; ``table`` unused)."""
    return _rows4_x_python("mxfp4", a, r, nb, xq, xd, xs, table)


def q4_k_rows4(a, r, nb, xq, xd, xs, table):
    """Four Q4_K rows ``a[r:r+4]`` (``nb`` blocks of 144 bytes) with one Q8_K activation (``xq`` int8,
    ``xd`` float32 per 256, ``xs`` int32 sums per 32): element ``i`` equal bit for bit to
    :func:`refsim.kernels.qdot.qdot_row` of row ``r + i``; prefetches the next four rows."""
    return _rows4_x_python("q4_k", a, r, nb, xq, xd, xs, table)


def q5_k_rows4(a, r, nb, xq, xd, xs, table):
    """:func:`q4_k_rows4` for Q5_K rows (blocks of 176 bytes)."""
    return _rows4_x_python("q5_k", a, r, nb, xq, xd, xs, table)


def q6_k_rows4(a, r, nb, xq, xd, xs, table):
    """:func:`q4_k_rows4` for Q6_K rows (blocks of 210 bytes; ``xs`` unused)."""
    return _rows4_x_python("q6_k", a, r, nb, xq, xd, xs, table)


def _ov_rows4_x(py, kind):
    impl = _ROWS4_X_IMPL[kind]

    @overload(py, inline="always")
    def _ov(a, r, nb, xq, xd, xs, table):
        return lambda a, r, nb, xq, xd, xs, table: impl(a, r, nb, xq, xd, xs, table)


for _py, _kind in ((q5_0_rows4, "q5_0"), (mxfp4_rows4, "mxfp4"), (q4_k_rows4, "q4_k"), (q5_k_rows4, "q5_k"),
                   (q6_k_rows4, "q6_k")):
    _ov_rows4_x(_py, _kind)

BY_TYPE = {Q4_0: q4_0_rows4, Q8_0: q8_0_rows4, Q5_0: q5_0_rows4, MXFP4: mxfp4_rows4, Q4_K: q4_k_rows4,
           Q5_K: q5_k_rows4, Q6_K: q6_k_rows4}
"""ggml type id -> its four-row function: the registered types with ``rows4`` and ``dot``
:data:`refsim.kernels.registry.QDOT` (tests/kernels/test_registry_paths.py checks the two agree)."""


__all__ = [
    "BY_TYPE",
    "mxfp4_rows4",
    "q4_0_rows4",
    "q4_k_rows4",
    "q5_0_rows4",
    "q5_k_rows4",
    "q6_k_rows4",
    "q8_0_rows4",
]
