"""Block dot products written as LLVM vector code: exact integer block dots (the inner loops of
:mod:`refsim.kernels.qdot`, ``ggml`` mode) and the 8-lane float64 accumulation of the ``exact``
mode (``acc8_*``, the inner loops of :func:`refsim.forward.layers.linear`).

Numba runs LLVM with the SLP vectorizer off and fully unrolls a loop of constant length 32 before
the loop vectorizer sees it, so a block dot ``sum_j w_j * x_j`` over 32 int8 values compiles to 32
scalar multiply-adds (~1.7 ns per element measured here). Each function below is one such block
dot written directly as LLVM vector IR (load ``<32 x i8>``, widen, multiply, ``llvm.vector.reduce.add``);
LLVM lowers it to the machine's SIMD (on x86 AVX2: ``vpmovsx``/``vpmaddwd``; ~0.12-0.25 ns per
element). Every integer sum is an **exact** int32 (at most 32 products of magnitude <= 127 * 255),
so the order in which the hardware adds the lanes cannot change the result; the ``acc8_*``
functions keep 8 separate float64 lanes, each added in element order (see their section).

Each function is a plain Python function (used as-is when ``NUMBA_DISABLE_JIT=1`` and by the tests
as the reference) with a Numba ``overload`` that calls the vector intrinsic in compiled code.

Arguments ``a``/``b`` are 1-D C-contiguous arrays of 8-bit integers (``a`` as documented per
function, ``b`` always int8: the quantized activation); ``ao``/``bo`` are element offsets. No
bounds are checked in compiled code: callers pass offsets of whole blocks inside the row.

This module is the bottom layer of the products: the block dots and the host's vector features
(:data:`AVX2`, :data:`F16C`, read when an intrinsic is compiled). The one-row references built on them
are :mod:`refsim.kernels.qdot`; the walkers that take four rows at once are :mod:`refsim.kernels.rows4`
(and :mod:`refsim.kernels.simd_ext`, :mod:`refsim.kernels.simd_exact`); the dispatch between them is
:mod:`refsim.kernels.ggml_matmul`.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload

_I8, _I32 = ir.IntType(8), ir.IntType(32)


def _check8(name: str, arr) -> None:
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"
            and arr.dtype in (types.int8, types.uint8)):
        raise TypingError(f"{name}: expected a 1-D C-contiguous int8/uint8 array, got {arr}")


def _load(context, builder, arrty, arr, off, n):
    """``<n x i8>`` loaded from ``arr.data + off`` (unaligned)."""
    ary = context.make_array(arrty)(context, builder, arr)
    ptr = builder.gep(ary.data, [off])
    return builder.load(builder.bitcast(ptr, ir.VectorType(_I8, n).as_pointer()), align=1)


def _splat(builder, value, ty, n):
    vty = ir.VectorType(ty, n)
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(v, ir.Constant(vty, ir.Undefined), ir.Constant(ir.VectorType(_I32, n), [0] * n))


def _dot(builder, w_i32, b8, n):
    """``reduce.add(w * sext(b))`` over ``n`` int32 lanes."""
    prod = builder.mul(w_i32, builder.sext(b8, ir.VectorType(_I32, n)))
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [ir.VectorType(_I32, n)]),
                                        f"llvm.vector.reduce.add.v{n}i32")
    return builder.call(fn, [prod])


# --- int8 x int8 -----------------------------------------------------------------------------

def _make_dot_i8(n: int):
    @intrinsic
    def _impl(typingctx, a, ao, b, bo):
        _check8("dot_i8", a)
        _check8("dot_i8", b)
        sig = types.int32(a, types.intp, b, types.intp)

        def codegen(context, builder, signature, args):
            wa = _load(context, builder, signature.args[0], args[0], args[1], n)
            wb = _load(context, builder, signature.args[2], args[2], args[3], n)
            return _dot(builder, builder.sext(wa, ir.VectorType(_I32, n)), wb, n)
        return sig, codegen
    return _impl


_dot_i8x32 = _make_dot_i8(32)
_dot_i8x16 = _make_dot_i8(16)


def dot_i8x32(a, ao, b, bo):
    """``sum_{j<32} a[ao+j] * b[bo+j]`` with ``a`` int8 (e.g. a Q8_0 row viewed as int8): int."""
    return int(np.dot(a[ao:ao + 32].astype(np.int64), b[bo:bo + 32].astype(np.int64)))


def dot_i8x16(a, ao, b, bo):
    """``sum_{j<16} a[ao+j] * b[bo+j]`` with ``a`` int8: int."""
    return int(np.dot(a[ao:ao + 16].astype(np.int64), b[bo:bo + 16].astype(np.int64)))


@overload(dot_i8x32, inline="always")
def _ov_dot_i8x32(a, ao, b, bo):
    return lambda a, ao, b, bo: _dot_i8x32(a, ao, b, bo)


@overload(dot_i8x16, inline="always")
def _ov_dot_i8x16(a, ao, b, bo):
    return lambda a, ao, b, bo: _dot_i8x16(a, ao, b, bo)


# --- 4-bit nibbles, Q4_0 layout (16 bytes -> 32 values) --------------------------------------

@intrinsic
def _dot_nib16x2(typingctx, a, ao, bias, b, bo):
    _check8("dot_nib16x2", a)
    _check8("dot_nib16x2", b)
    sig = types.int32(a, types.intp, types.int32, b, types.intp)

    def codegen(context, builder, signature, args):
        raw = _load(context, builder, signature.args[0], args[0], args[1], 16)
        lo = builder.and_(raw, ir.Constant(ir.VectorType(_I8, 16), [15] * 16))
        hi = builder.lshr(raw, ir.Constant(ir.VectorType(_I8, 16), [4] * 16))
        q = builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_I32, 32), list(range(32))))
        # q - bias in int8 (|q - bias| <= 16), then widened: LLVM sees 16-bit products (vpmaddwd)
        q = builder.sub(q, _splat(builder, builder.trunc(args[2], _I8), _I8, 32))
        wb = _load(context, builder, signature.args[3], args[3], args[4], 32)
        return _dot(builder, builder.sext(q, ir.VectorType(_I32, 32)), wb, 32)
    return sig, codegen


def dot_nib16x2(a, ao, bias, b, bo):
    """Q4_0/Q5_0 nibbles: ``sum_{j<16} ((a[ao+j] & 15) - bias) b[bo+j] + ((a[ao+j] >> 4) - bias) b[bo+16+j]``
    with ``a`` uint8: int."""
    q = a[ao:ao + 16].astype(np.int64)
    w = np.concatenate([(q & 15) - bias, (q >> 4) - bias])
    return int(np.dot(w, b[bo:bo + 32].astype(np.int64)))


@overload(dot_nib16x2, inline="always")
def _ov_dot_nib16x2(a, ao, bias, b, bo):
    return lambda a, ao, bias, b, bo: _dot_nib16x2(a, ao, np.int32(bias), b, bo)


# --- unsigned Q4_0 nibbles (16 bytes -> 32 values 0..15) ---------------------------------------

def _avx2() -> bool:
    """True when Numba compiles for this host and the host has AVX2 (x86 ``vpmaddubsw`` exists)."""
    from numba import config
    if config.CPU_NAME or config.CPU_FEATURES:
        return False
    try:
        import llvmlite.binding as llvm
        return bool(llvm.get_host_cpu_features().get("avx2", False))
    except (AttributeError, RuntimeError):   # pragma: no cover - an llvmlite without the query
        return False


AVX2 = _avx2()
"""Whether :func:`dot_nibu16x2` uses the x86 ``vpmaddubsw``/``vpmaddwd`` pair (else generic vector code;
the result is the same exact integer)."""


@intrinsic
def _dot_nibu16x2(typingctx, a, ao, b, bo):
    _check8("dot_nibu16x2", a)
    _check8("dot_nibu16x2", b)
    sig = types.int32(a, types.intp, b, types.intp)

    def codegen(context, builder, signature, args):
        v8 = ir.VectorType(_I8, 16)
        raw = _load(context, builder, signature.args[0], args[0], args[1], 16)
        lo = builder.and_(raw, ir.Constant(v8, [15] * 16))
        hi = builder.and_(builder.lshr(raw, ir.Constant(v8, [4] * 16)), ir.Constant(v8, [15] * 16))
        q = builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_I32, 32), list(range(32))))
        wb = _load(context, builder, signature.args[2], args[2], args[3], 32)
        if not AVX2:
            return _dot(builder, builder.zext(q, ir.VectorType(_I32, 32)), wb, 32)
        # u8 x s8 pairs summed to i16 (|sum| <= 2 * 15 * 128: no saturation), then pairs of i16 to i32
        v16 = ir.VectorType(ir.IntType(16), 16)
        ub = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16, [ir.VectorType(_I8, 32)] * 2),
                                            "llvm.x86.avx2.pmadd.ub.sw")
        wd = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VectorType(_I32, 8), [v16, v16]),
                                            "llvm.x86.avx2.pmadd.wd")
        p32 = builder.call(wd, [builder.call(ub, [q, wb]), ir.Constant(v16, [1] * 16)])
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [ir.VectorType(_I32, 8)]),
                                            "llvm.vector.reduce.add.v8i32")
        return builder.call(fn, [p32])
    return sig, codegen


def dot_nibu16x2(a, ao, b, bo):
    """Unsigned Q4_0 nibbles: ``sum_{j<16} (a[ao+j] & 15) b[bo+j] + (a[ao+j] >> 4) b[bo+16+j]`` with
    ``a`` uint8: int (Q4_0's ``q - 8`` is this minus ``8 * sum(b[bo:bo+32])``, as llama.cpp's AVX2 path)."""
    q = a[ao:ao + 16].astype(np.int64)
    return int(np.dot(np.concatenate([q & 15, q >> 4]), b[bo:bo + 32].astype(np.int64)))


@overload(dot_nibu16x2, inline="always")
def _ov_dot_nibu16x2(a, ao, b, bo):
    return lambda a, ao, b, bo: _dot_nibu16x2(a, ao, b, bo)


# --- a bit field of 32 bytes (K-quant nibbles and high bits) ---------------------------------

@intrinsic
def _dot_field32(typingctx, a, ao, shift, mask, b, bo):
    _check8("dot_field32", a)
    _check8("dot_field32", b)
    sig = types.int32(a, types.intp, types.int32, types.int32, b, types.intp)

    def codegen(context, builder, signature, args):
        raw = _load(context, builder, signature.args[0], args[0], args[1], 32)
        q = builder.lshr(raw, _splat(builder, builder.trunc(args[2], _I8), _I8, 32))
        q = builder.and_(q, _splat(builder, builder.trunc(args[3], _I8), _I8, 32))
        wb = _load(context, builder, signature.args[4], args[4], args[5], 32)
        return _dot(builder, builder.zext(q, ir.VectorType(_I32, 32)), wb, 32)
    return sig, codegen


def dot_field32(a, ao, shift, mask, b, bo):
    """``sum_{j<32} ((a[ao+j] >> shift) & mask) * b[bo+j]`` with ``a`` uint8 (Q4_K/Q5_K nibbles:
    shift 0|4, mask 15; Q5_K high bits: shift j, mask 1): int."""
    w = (a[ao:ao + 32].astype(np.int64) >> shift) & mask
    return int(np.dot(w, b[bo:bo + 32].astype(np.int64)))


@overload(dot_field32, inline="always")
def _ov_dot_field32(a, ao, shift, mask, b, bo):
    return lambda a, ao, shift, mask, b, bo: _dot_field32(a, ao, np.int32(shift), np.int32(mask), b, bo)


# --- the 32 bits of a little-endian u32 (Q5_0 high bits) -------------------------------------

@intrinsic
def _dot_bits32(typingctx, word, b, bo):
    _check8("dot_bits32", b)
    sig = types.int32(types.uint32, b, types.intp)

    def codegen(context, builder, signature, args):
        w = builder.lshr(_splat(builder, args[0], _I32, 32), ir.Constant(ir.VectorType(_I32, 32), list(range(32))))
        w = builder.and_(w, ir.Constant(ir.VectorType(_I32, 32), [1] * 32))
        wb = _load(context, builder, signature.args[1], args[1], args[2], 32)
        return _dot(builder, w, wb, 32)
    return sig, codegen


def dot_bits32(word, b, bo):
    """``sum_{j<32} ((word >> j) & 1) * b[bo+j]`` for a 32-bit ``word``: int."""
    bits = (int(word) >> np.arange(32)) & 1
    return int(np.dot(bits, b[bo:bo + 32].astype(np.int64)))


@overload(dot_bits32, inline="always")
def _ov_dot_bits32(word, b, bo):
    return lambda word, b, bo: _dot_bits32(np.uint32(word), b, bo)


# --- Q6_K: 16 values of 4 low bits (ql) and 2 high bits (qh), minus 32 ------------------------

@intrinsic
def _dot_q6x16(typingctx, a, lo, lshift, ho, hshift, b, bo):
    _check8("dot_q6x16", a)
    _check8("dot_q6x16", b)
    sig = types.int32(a, types.intp, types.int32, types.intp, types.int32, b, types.intp)

    def codegen(context, builder, signature, args):
        v8 = ir.VectorType(_I8, 16)
        ql = _load(context, builder, signature.args[0], args[0], args[1], 16)
        qh = _load(context, builder, signature.args[0], args[0], args[3], 16)
        ql = builder.and_(builder.lshr(ql, _splat(builder, builder.trunc(args[2], _I8), _I8, 16)), ir.Constant(v8, [15] * 16))
        qh = builder.and_(builder.lshr(qh, _splat(builder, builder.trunc(args[4], _I8), _I8, 16)), ir.Constant(v8, [3] * 16))
        q = builder.sub(builder.or_(ql, builder.shl(qh, ir.Constant(v8, [4] * 16))), ir.Constant(v8, [32] * 16))
        wb = _load(context, builder, signature.args[5], args[5], args[6], 16)
        return _dot(builder, builder.sext(q, ir.VectorType(_I32, 16)), wb, 16)
    return sig, codegen


def dot_q6x16(a, lo, lshift, ho, hshift, b, bo):
    """Q6_K: ``sum_{j<16} ((((a[lo+j] >> lshift) & 15) | (((a[ho+j] >> hshift) & 3) << 4)) - 32) * b[bo+j]``
    with ``a`` uint8 (the block's low-nibble bytes at ``lo``, high-bit bytes at ``ho``): int."""
    ql = (a[lo:lo + 16].astype(np.int64) >> lshift) & 15
    qh = (a[ho:ho + 16].astype(np.int64) >> hshift) & 3
    return int(np.dot((ql | (qh << 4)) - 32, b[bo:bo + 16].astype(np.int64)))


@overload(dot_q6x16, inline="always")
def _ov_dot_q6x16(a, lo, lshift, ho, hshift, b, bo):
    return lambda a, lo, lshift, ho, hshift, b, bo: _dot_q6x16(a, lo, np.int32(lshift), ho, np.int32(hshift), b, bo)


# --- float64 accumulation of float32 products into 8 lanes (the ``exact`` mode's dot) ------------
#
# ``acc[k] += float64(w[c]) * float64(x[c])`` for the 8 consecutive elements ``c = c0 + k``: lane k
# is the partial sum of the elements ``c % 8 == k``, exactly the scalar loop of
# :func:`refsim.forward.layers._dot8`, so the results are bit-identical (each lane's adds happen in
# the same order; a float32 x float32 product is exact in float64, so a fused multiply-add could not
# change it either).

_F64X8 = types.UniTuple(types.float64, 8)


def _acc_in(builder, acc):
    v = ir.Constant(ir.VectorType(ir.DoubleType(), 8), ir.Undefined)
    for k in range(8):
        v = builder.insert_element(v, builder.extract_value(acc, k), ir.Constant(_I32, k))
    return v


def _acc_out(context, builder, v):
    out = context.get_constant_undef(_F64X8)
    for k in range(8):
        out = builder.insert_value(out, builder.extract_element(v, ir.Constant(_I32, k)), k)
    return out


def _load_f64x8(context, builder, arrty, arr, off):
    ary = context.make_array(arrty)(context, builder, arr)
    ptr = builder.gep(ary.data, [off])
    return builder.load(builder.bitcast(ptr, ir.VectorType(ir.DoubleType(), 8).as_pointer()), align=8)


def _fma8(builder, acc, w_f32x8, x_f64x8):
    return builder.fadd(acc, builder.fmul(builder.fpext(w_f32x8, ir.VectorType(ir.DoubleType(), 8)), x_f64x8))


@intrinsic
def _acc8_f32(typingctx, acc, w, wo, x, xo):
    if not (isinstance(w, types.Array) and w.dtype == types.float32 and w.layout == "C"
            and isinstance(x, types.Array) and x.dtype == types.float64 and x.layout == "C"):
        raise TypingError(f"acc8_f32: expected C-contiguous float32 w and float64 x, got {w}, {x}")
    sig = _F64X8(_F64X8, w, types.intp, x, types.intp)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[1])(context, builder, args[1])
        ptr = builder.gep(ary.data, [args[2]])
        wv = builder.load(builder.bitcast(ptr, ir.VectorType(ir.FloatType(), 8).as_pointer()), align=4)
        xv = _load_f64x8(context, builder, signature.args[3], args[3], args[4])
        return _acc_out(context, builder, _fma8(builder, _acc_in(builder, args[0]), wv, xv))
    return sig, codegen


def acc8_f32(acc, w, wo, x, xo):
    """``acc[k] + float64(w[wo+k]) * x[xo+k]`` for ``k < 8`` (``w`` float32, ``x`` float64): 8-tuple."""
    return tuple(float(acc[k] + np.float64(w[wo + k]) * np.float64(x[xo + k])) for k in range(8))


@overload(acc8_f32, inline="always")
def _ov_acc8_f32(acc, w, wo, x, xo):
    return lambda acc, w, wo, x, xo: _acc8_f32(acc, w, wo, x, xo)


def _make_acc8_block(kind: str):
    """A 32-element block decoded to float32 ``d * q`` in registers, then 4 steps of :func:`acc8_f32`."""
    @intrinsic
    def _impl(typingctx, acc, a, ao, d, x, xo):
        _check8("acc8_" + kind, a)
        sig = _F64X8(_F64X8, a, types.intp, types.float32, x, types.intp)

        def codegen(context, builder, signature, args):
            if kind == "q4_0":
                raw = _load(context, builder, signature.args[1], args[1], args[2], 16)
                lo = builder.and_(raw, ir.Constant(ir.VectorType(_I8, 16), [15] * 16))
                hi = builder.lshr(raw, ir.Constant(ir.VectorType(_I8, 16), [4] * 16))
                q = builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_I32, 32), list(range(32))))
                q = builder.sub(q, ir.Constant(ir.VectorType(_I8, 32), [8] * 32))
            else:  # q8_0
                q = _load(context, builder, signature.args[1], args[1], args[2], 32)
            qf = builder.sitofp(q, ir.VectorType(ir.FloatType(), 32))
            w = builder.fmul(_splat(builder, args[3], ir.FloatType(), 32), qf)      # float32 d * q, as the decoder
            v = _acc_in(builder, args[0])
            for g in range(4):
                wg = builder.shuffle_vector(w, w, ir.Constant(ir.VectorType(_I32, 8), list(range(8 * g, 8 * g + 8))))
                off = builder.add(args[5], ir.Constant(args[5].type, 8 * g))
                v = _fma8(builder, v, wg, _load_f64x8(context, builder, signature.args[4], args[4], off))
            return _acc_out(context, builder, v)
        return sig, codegen
    return _impl


_acc8_q4_0 = _make_acc8_block("q4_0")
_acc8_q8_0 = _make_acc8_block("q8_0")


def _acc8_python(acc, w, x, xo):
    acc = list(acc)
    for c in range(32):
        acc[c % 8] = float(acc[c % 8] + np.float64(w[c]) * np.float64(x[xo + c]))
    return tuple(acc)


def acc8_q4_0(acc, a, ao, d, x, xo):
    """A Q4_0 block's 16 nibble bytes at ``a[ao:]`` decoded as float32 ``d * (q - 8)`` (elements 0..15
    low nibbles, 16..31 high), accumulated as four :func:`acc8_f32` steps against ``x[xo:xo+32]``."""
    q = a[ao:ao + 16].astype(np.int64)
    w = np.float32(d) * np.concatenate([(q & 15) - 8, (q >> 4) - 8]).astype(np.float32)
    return _acc8_python(acc, w, x, xo)


def acc8_q8_0(acc, a, ao, d, x, xo):
    """A Q8_0 block's 32 int8 at ``a[ao:]`` (``a`` int8) decoded as float32 ``d * q``, accumulated as
    four :func:`acc8_f32` steps against ``x[xo:xo+32]``."""
    w = np.float32(d) * a[ao:ao + 32].astype(np.float32)
    return _acc8_python(acc, w, x, xo)


@overload(acc8_q4_0, inline="always")
def _ov_acc8_q4_0(acc, a, ao, d, x, xo):
    return lambda acc, a, ao, d, x, xo: _acc8_q4_0(acc, a, ao, np.float32(d), x, xo)


@overload(acc8_q8_0, inline="always")
def _ov_acc8_q8_0(acc, a, ao, d, x, xo):
    return lambda acc, a, ao, d, x, xo: _acc8_q8_0(acc, a, ao, np.float32(d), x, xo)


# --- host features read by the four-row walkers --------------------------------------------------

def _f16c() -> bool:
    """True when Numba compiles for this host and the host has F16C (``vcvtph2ps``)."""
    from numba import config
    if config.CPU_NAME or config.CPU_FEATURES:
        return False
    try:
        import llvmlite.binding as llvm
        return bool(llvm.get_host_cpu_features().get("f16c", False))
    except (AttributeError, RuntimeError):   # pragma: no cover
        return False


F16C = AVX2 and _f16c()
"""Whether the four-row walkers (:mod:`refsim.kernels.rows4`, :mod:`refsim.kernels.simd_ext`) convert the rows'
half scales with ``vcvtph2ps`` (equal to the ``F16_TO_F32`` table for every half that is not a NaN) instead of
the table."""


__all__ = [
    "AVX2",
    "acc8_f32",
    "acc8_q4_0",
    "acc8_q8_0",
    "dot_bits32",
    "dot_field32",
    "dot_i8x16",
    "dot_i8x32",
    "dot_nib16x2",
    "dot_nibu16x2",
    "dot_q6x16",
    "F16C",
]
