"""Four rows at a time for the further weight types: the ``ggml`` products of Q4_1, Q5_1, IQ4_NL, IQ4_XS, Q2_K,
Q3_K, TQ1_0 and TQ2_0 as LLVM vector code (issue 18).

Each ``<type>_rows4(a, r, nb, xq, xd, xs, table)`` returns the float64 dots of the rows ``a[r:r+4]`` (``nb``
blocks each) with one quantized activation, element ``i`` equal bit for bit to
:func:`refsim.kernels.qdot_ext.ext_row` of row ``r + i`` (the one-row reference; tests/kernels/test_rows4_ext.py
checks every path). The walk is :mod:`refsim.kernels.rows4`'s (:func:`~refsim.kernels.rows4._rows4_codegen`:
lane ``i`` of a ``<4 x double>`` accumulator is row ``i``'s sum with ``ext_row``'s float64 operations in its
block order, the next four rows prefetched); per block the integer sums are exact int32 (bounds in the
comments), so the order in which lanes are added cannot change them:

==========  ========================================================================================================
weight      per block, per row (AVX2: ``vpmaddubsw`` / ``vpmaddwd``; elsewhere generic vector code)
==========  ========================================================================================================
Q4_1, Q5_1  ``isum = sum u x`` with ``u`` the unsigned quant (nibble; Q5_1 with its high bit: 0..31); term
            ``(d dx) isum + m sx`` (``xs`` = Q8_1's block sums ``s``, float32)
IQ4_NL      ``q = kvalues_iq4nl[nibble]`` by ``vpshufb`` (signed, so the products go through int16: ``vpmaddwd``)
IQ4_XS      the same per sub-block of 32, times its scale ``ls - 32``, summed over the 8 sub-blocks
Q2_K        ``sum_g (sc_g & 15) isum_g`` and ``sum_g (sc_g >> 4) bsum_g`` (sub-blocks of 16: the activation's
            16 sub-block sums once per block for the four rows, then one ``vpmaddwd`` per row with the 16 mins);
            term ``(d dx) acc - (dmin dx) accm``
Q3_K        ``sum_g sc_g isum_g`` with ``q = u - 4``, ``u = low2 | high << 2`` (``u x - 4 x`` pairs in int16)
TQ2_0       ``sum code x - sum x`` (``q = code - 1``; ``sum x`` over the 256 once per block)
TQ1_0       the same with the base-3 digits ``((c 3^p mod 256) 3) >> 8`` computed in int8 / int16 lanes
==========  ========================================================================================================

``xs`` is read only by Q4_1 / Q5_1 (a float32 array of the activation's Q8_1 block sums); the other types take
any float32 array there. ``table`` is the half -> float32 table (the scales are halves, converted as
:func:`refsim.kernels.rows4._halves4` does).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic, overload

from refsim.kernels import simd
from refsim.kernels.iq4 import KVALUES_IQ4
from refsim.kernels.qdot_ext import ext_row
from refsim.kernels.registry import KERNELS, ROWS4_EXT_TYPES
from refsim.kernels.rows4 import (_c, _halves4, _lanes4, _maddubs, _maddwd, _nibbles32, _q5_high, _reduce,
                                  _rows4_codegen, _switch_codegen, _u_dot32, _vload)
from refsim.kernels.simd import _I8, _I32, _splat

ROWS4_EXT_QTYPE = {KERNELS[t].qtype.name.lower(): t for t in ROWS4_EXT_TYPES}
"""Kind (``"q4_1"`` ...) -> ggml type id: the further types the registry marks ``rows4``
(:data:`refsim.kernels.registry.ROWS4_EXT_TYPES`); :data:`BLOCK_TERMS` has a block term for each."""
ROWS4_EXT = {kind: (KERNELS[t].block_size, KERNELS[t].type_size) for kind, t in ROWS4_EXT_QTYPE.items()}
"""Kind -> (elements, bytes) per block (the registry's)."""

_V16 = ir.VectorType(ir.IntType(16), 16)
_D4 = ir.VectorType(ir.DoubleType(), 4)


def _k8(n: int, x):
    return ir.Constant(ir.VectorType(_I8, n), x if isinstance(x, list) else [x] * n)


def _lut16(builder, table: list[int], nib):
    """``table[nib]`` per lane for ``nib`` ``<16|32 x i8>`` values 0..15 (``vpshufb``, which looks up within each
    128-bit half, so the table is repeated per half; elsewhere a tree of 15 selects on the nibble's bits)."""
    n = nib.type.count
    if simd.AVX2:
        vt = ir.VectorType(_I8, n)
        name = "llvm.x86.avx2.pshuf.b" if n == 32 else "llvm.x86.ssse3.pshuf.b.128"
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt, vt]), name)
        return builder.call(fn, [_k8(n, [int(t) for t in table] * (n // 16)), nib])
    level = [_k8(n, int(t)) for t in table]
    for bit in range(4):
        on = builder.icmp_unsigned("!=", builder.and_(nib, _k8(n, 1 << bit)), _k8(n, 0))
        level = [builder.select(on, level[2 * i + 1], level[2 * i]) for i in range(len(level) // 2)]
    return level[0]


def _s_dot32(builder, q, x):
    """``sum q x`` over 32 signed bytes of each: ``<8 x i32>`` partial sums on AVX2 (sign-extended to int16,
    ``vpmaddwd``: exact for every int8, -128 included), else an i32."""
    if simd.AVX2:
        parts = []
        for h in range(2):
            sel = ir.Constant(ir.VectorType(_I32, 16), list(range(16 * h, 16 * h + 16)))
            parts.append(_maddwd(builder, builder.sext(builder.shuffle_vector(q, q, sel), _V16),
                                 builder.sext(builder.shuffle_vector(x, x, sel), _V16)))
        return builder.add(parts[0], parts[1])
    v32 = ir.VectorType(_I32, 32)
    return _reduce(builder, builder.mul(builder.sext(q, v32), builder.sext(x, v32)), 32)


def _halves16(builder, v, signed: bool):
    """Generic path: the 32 lanes of ``<32 x i8>`` ``v`` widened to i32 as two ``<16 x i32>`` (lanes 0..15, 16..31)."""
    v32 = ir.VectorType(_I32, 32)
    w = builder.sext(v, v32) if signed else builder.zext(v, v32)
    return [builder.shuffle_vector(w, w, ir.Constant(ir.VectorType(_I32, 16), list(range(16 * h, 16 * h + 16))))
            for h in range(2)]


def _scale_pairs(builder, s16, g0: int):
    """AVX2: ``<16 x i16>`` whose lanes 0..7 are ``s16[g0]`` and 8..15 ``s16[g0 + 1]`` (the scales of the two
    sub-blocks of 16 that a chunk of 32 elements covers, one per ``vpmaddubsw`` pair)."""
    return builder.shuffle_vector(s16, s16, ir.Constant(ir.VectorType(_I32, 16), [g0] * 8 + [g0 + 1] * 8))


def _x_chunks(builder, blk):
    """The block's activation as 8 ``<32 x i8>`` chunks (elements ``32 c .. 32 c + 31``)."""
    return [_vload(builder, blk.px, builder.add(blk.xo, _c(blk.xo, 32 * c)), 32) for c in range(8)]


def _x_total(builder, xv):
    """``sum x`` over the 256 activation values of a block as an i32 (exact: |sum| <= 256 * 128)."""
    if simd.AVX2:
        ones = _k8(32, 1)
        tot = None
        for x in xv:
            t = _maddwd(builder, _maddubs(builder, ones, x), ir.Constant(_V16, [1] * 16))
            tot = t if tot is None else builder.add(tot, t)
        return _reduce(builder, tot, 8)
    tot = None
    for x in xv:
        t = _reduce(builder, builder.sext(x, ir.VectorType(_I32, 32)), 32)
        tot = t if tot is None else builder.add(tot, t)
    return tot


def _two_bits(builder, pa, off, c):
    """Q2_K / Q3_K / TQ2_0 layout: the 2-bit fields of elements ``32 c .. 32 c + 31`` (``c = 4 h + s``: bits
    ``2 s`` of the 32 bytes at ``off + 32 h``) as ``<32 x i8>`` 0..3."""
    h, sft = c >> 2, c & 3
    raw = _vload(builder, pa, builder.add(off, _c(off, 32 * h)), 32)
    return builder.and_(builder.lshr(raw, _k8(32, 2 * sft)), _k8(32, 3))


def _q3k_scales(builder, pa, off):
    """Q3_K: the 16 signed 6-bit scales of the 12 bytes at ``pa + off`` as ``<16 x i16>``
    (:func:`refsim.kernels.k_quants.q3_k_scale` for g = 0..15: low nibble of byte ``g`` (g < 8) or high nibble
    of byte ``g - 8``, bits ``2 (g // 4)`` of byte ``8 + g % 4`` as bits 4..5, minus 32). Reads exactly the 12
    bytes (8 + 4: the block may be the last of the mapping)."""
    lo8 = _vload(builder, pa, off, 8)
    hi4 = _vload(builder, pa, builder.add(off, _c(off, 8)), 4)
    v16 = ir.VectorType(_I8, 16)
    a = builder.shuffle_vector(lo8, lo8, ir.Constant(ir.VectorType(_I32, 16), list(range(8)) * 2))
    low = builder.select(ir.Constant(ir.VectorType(ir.IntType(1), 16), [1] * 8 + [0] * 8),
                         builder.and_(a, _k8(16, 15)), builder.lshr(a, _k8(16, 4)))
    h4 = builder.shuffle_vector(hi4, hi4, ir.Constant(ir.VectorType(_I32, 16), [0, 1, 2, 3] * 4))
    shifted = [builder.lshr(h4, _k8(16, 2 * k)) for k in range(4)]                  # lane g needs shift 2 (g // 4)
    pick01 = builder.shuffle_vector(shifted[0], shifted[1], ir.Constant(ir.VectorType(_I32, 8),
                                                                        [0, 1, 2, 3, 20, 21, 22, 23]))
    pick23 = builder.shuffle_vector(shifted[2], shifted[3], ir.Constant(ir.VectorType(_I32, 8),
                                                                        [8, 9, 10, 11, 28, 29, 30, 31]))
    high = builder.shuffle_vector(pick01, pick23, ir.Constant(ir.VectorType(_I32, 16), list(range(16))))
    high = builder.and_(high, _k8(16, 3))
    sc = builder.or_(low, builder.shl(high, _k8(16, 4)))                               # 0..63
    return builder.sub(builder.zext(sc, _V16), ir.Constant(_V16, [32] * 16))


def _tq1_digits(builder, bytes32, mult: list[int]):
    """TQ1_0: base-3 digit ``((c m mod 256) 3) >> 8`` of each byte ``c`` with per-lane multiplier ``m`` (a power
    of 3): ``<32 x i8>`` 0..2."""
    v = builder.mul(bytes32, _k8(32, list(mult)))                                   # mod 256: int8 wrap-around
    w = builder.mul(builder.zext(v, ir.VectorType(ir.IntType(16), 32)), ir.Constant(ir.VectorType(ir.IntType(16), 32),
                                                                                     [3] * 32))
    return builder.trunc(builder.lshr(w, ir.Constant(w.type, [8] * 32)), ir.VectorType(_I8, 32))


def _scaled(builder, blk, delta: int, isum):
    """``(f64(d_w) * dx) * f64(isum)`` with ``d_w`` the half at byte ``delta`` of each row's block."""
    return builder.fmul(builder.fmul(_halves4(builder, blk.pa, blk.pt, blk.offs, delta), blk.dx),
                        builder.sitofp(isum, _D4))


def _term_q45_1(builder, blk, kind):
    wb = _vload(builder, blk.px, blk.xo, 32)
    per = []
    for off in blk.offs:
        if kind == "q4_1":
            u = _nibbles32(builder, _vload(builder, blk.pa, builder.add(off, _c(off, 4)), 16))           # 0..15
        else:
            u = _nibbles32(builder, _vload(builder, blk.pa, builder.add(off, _c(off, 8)), 16))
            u = builder.or_(u, _q5_high(builder, blk.pa, builder.add(off, _c(off, 4))))                  # 0..31
        per.append(_u_dot32(builder, u, wb))                                  # |isum| <= 32 * 31 * 128
    sx = _splat(builder, builder.fpext(builder.load(builder.gep(blk.ps, [blk.b])), ir.DoubleType()), ir.DoubleType(), 4)
    m = builder.fmul(_halves4(builder, blk.pa, blk.pt, blk.offs, 2), sx)
    return builder.fadd(_scaled(builder, blk, 0, _lanes4(builder, per)), m)


def _term_iq4_nl(builder, blk):
    wb = _vload(builder, blk.px, blk.xo, 32)
    per = []
    for off in blk.offs:
        q = _lut16(builder, list(KVALUES_IQ4), _nibbles32(builder, _vload(builder, blk.pa, builder.add(off, _c(off, 2)), 16)))
        per.append(_s_dot32(builder, q, wb))                                  # |isum| <= 32 * 127 * 128
    return _scaled(builder, blk, 0, _lanes4(builder, per))


def _term_iq4_xs(builder, blk):
    xv = _x_chunks(builder, blk)
    per = []
    for off in blk.offs:
        sl = builder.zext(_vload(builder, blk.pa, builder.add(off, _c(off, 4)), 4), ir.VectorType(_I32, 4))
        sh = builder.zext(builder.load(builder.bitcast(builder.gep(blk.pa, [builder.add(off, _c(off, 2))]),
                                                       ir.IntType(16).as_pointer()), align=1), _I32)
        v8 = ir.VectorType(_I32, 8)
        lo = builder.and_(builder.lshr(builder.shuffle_vector(sl, sl, ir.Constant(v8, [0, 0, 1, 1, 2, 2, 3, 3])),
                                       ir.Constant(v8, [0, 4] * 4)), ir.Constant(v8, [15] * 8))
        hi = builder.and_(builder.lshr(_splat(builder, sh, _I32, 8), ir.Constant(v8, [2 * i for i in range(8)])),
                          ir.Constant(v8, [3] * 8))
        ls = builder.sub(builder.or_(lo, builder.shl(hi, ir.Constant(v8, [4] * 8))), ir.Constant(v8, [32] * 8))  # -32..31
        tot = None
        for ib in range(8):
            raw = _vload(builder, blk.pa, builder.add(off, _c(off, 8 + 16 * ib)), 16)
            q = _lut16(builder, list(KVALUES_IQ4), _nibbles32(builder, raw))
            lsi = builder.extract_element(ls, ir.Constant(_I32, ib))
            t = _s_dot32(builder, q, xv[ib])
            t = builder.mul(t, _splat(builder, lsi, _I32, 8) if simd.AVX2 else lsi)    # |.| <= 32 * 127 * 128 * 32
            tot = t if tot is None else builder.add(tot, t)                       # 8 sub-blocks: < 2^31
        per.append(tot)
    return _scaled(builder, blk, 0, _lanes4(builder, per))


def _sub16_sums(builder, xp):
    """AVX2: the 16 sums of 16 activation values of a Q2_K block (ggml's ``block_q8_K.bsums``) as ``<16 x i16>``,
    lane ``g`` = sub-block ``g`` (``|.| <= 16 * 128``), from the 8 chunks' ``vpmaddubsw`` pair sums ``xp[c]``
    (lanes 0..7 of chunk ``c`` are sub-block ``2 c``, 8..15 sub-block ``2 c + 1``). Three levels of pairwise adds:
    two vectors' 32 lanes, sorted by sub-block, are summed in adjacent pairs into one of 16 lanes, still sorted,
    until each sub-block has one lane."""
    vecs = list(xp)
    while len(vecs) > 1:
        nxt = []
        for a, b in zip(vecs[0::2], vecs[1::2]):
            even = builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_I32, 16), list(range(0, 32, 2))))
            odd = builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_I32, 16), list(range(1, 32, 2))))
            nxt.append(builder.add(even, odd))
        vecs = nxt
    return vecs[0]


def _term_q2_k(builder, blk):
    xv = _x_chunks(builder, blk)
    if simd.AVX2:   # the 16 sub-block sums from the pair sums of x (|.| <= 256), shared by the four rows
        bsums = _sub16_sums(builder, [_maddubs(builder, _k8(32, 1), x) for x in xv])
    else:
        xh = [_halves16(builder, x, True) for x in xv]
    acc_rows, accm_rows = [], []
    for off in blk.offs:
        scb = _vload(builder, blk.pa, off, 16)
        sc = builder.and_(scb, _k8(16, 15))
        mn = builder.lshr(scb, _k8(16, 4))
        acc = accm = None
        if simd.AVX2:   # sum_g min_g bsum_g: <= 15 * 2048 per lane product, pairs summed in i32
            accm = _maddwd(builder, builder.zext(mn, _V16), bsums)
        for c in range(8):
            q = _two_bits(builder, blk.pa, builder.add(off, _c(off, 16)), c)
            g0 = 2 * c                                                      # chunk c covers sub-blocks 2c, 2c + 1
            if simd.AVX2:   # u x pairs <= 2 * 3 * 128; times sc <= 15: exact in i32
                t = _maddwd(builder, _maddubs(builder, q, xv[c]), _scale_pairs(builder, builder.zext(sc, _V16), g0))
            else:
                qh = _halves16(builder, q, False)
                t = tm = None
                for h in range(2):
                    s_g = builder.zext(builder.extract_element(sc, ir.Constant(_I32, g0 + h)), _I32)
                    m_g = builder.zext(builder.extract_element(mn, ir.Constant(_I32, g0 + h)), _I32)
                    p = builder.mul(_reduce(builder, builder.mul(qh[h], xh[c][h]), 16), s_g)
                    pm = builder.mul(_reduce(builder, xh[c][h], 16), m_g)
                    t = p if t is None else builder.add(t, p)
                    tm = pm if tm is None else builder.add(tm, pm)
                accm = tm if accm is None else builder.add(accm, tm)     # |accm| <= 16 * 15 * 16 * 128
            acc = t if acc is None else builder.add(acc, t)              # |acc| <= 16 * 15 * 16 * 3 * 128
        acc_rows.append(acc)
        accm_rows.append(accm)
    t1 = _scaled(builder, blk, 80, _lanes4(builder, acc_rows))
    t2 = _scaled(builder, blk, 82, _lanes4(builder, accm_rows))
    return builder.fsub(t1, t2)


def _term_q3_k(builder, blk):
    xv = _x_chunks(builder, blk)
    if simd.AVX2:   # 4 x pair sums (|.| <= 1024), shared by the four rows
        x4 = [_maddubs(builder, _k8(32, 4), x) for x in xv]
    else:
        xh = [_halves16(builder, x, True) for x in xv]
    per = []
    for off in blk.offs:
        hm = _vload(builder, blk.pa, off, 32)
        sc16 = _q3k_scales(builder, blk.pa, builder.add(off, _c(off, 96)))
        tot = None
        for c in range(8):
            low = _two_bits(builder, blk.pa, builder.add(off, _c(off, 32)), c)
            high = builder.and_(builder.lshr(hm, _k8(32, c)), _k8(32, 1))       # bit 4 h + s = c of hmask[l]
            u = builder.or_(low, builder.shl(high, _k8(32, 2)))                 # q + 4, 0..7
            g0 = 2 * c
            if simd.AVX2:   # (u x - 4 x) pairs in [-1024, 1024]; times sc (|sc| <= 32): exact in i32
                t = _maddwd(builder, builder.sub(_maddubs(builder, u, xv[c]), x4[c]), _scale_pairs(builder, sc16, g0))
            else:
                uh = _halves16(builder, u, False)
                t = None
                for h in range(2):
                    qv = builder.sub(uh[h], ir.Constant(ir.VectorType(_I32, 16), [4] * 16))
                    s_g = builder.sext(builder.extract_element(sc16, ir.Constant(_I32, g0 + h)), _I32)
                    p = builder.mul(_reduce(builder, builder.mul(qv, xh[c][h]), 16), s_g)
                    t = p if t is None else builder.add(t, p)
            tot = t if tot is None else builder.add(tot, t)                   # |acc| <= 16 * 32 * 16 * 4 * 128
        per.append(tot)
    return _scaled(builder, blk, 108, _lanes4(builder, per))


def _term_tq(builder, blk, kind):
    xv = _x_chunks(builder, blk)
    xsum = _splat(builder, _x_total(builder, xv), _I32, 4)
    per = []
    for off in blk.offs:
        if kind == "tq2_0":
            codes = [_two_bits(builder, blk.pa, off, c) for c in range(8)]
        else:
            q0 = _vload(builder, blk.pa, off, 32)
            q1 = _vload(builder, blk.pa, builder.add(off, _c(off, 32)), 16)
            qh = _vload(builder, blk.pa, builder.add(off, _c(off, 48)), 4)
            v32 = ir.Constant(ir.VectorType(_I32, 32), list(range(16)) * 2)
            q11 = builder.shuffle_vector(q1, q1, v32)                             # qs[32..47] twice
            tail = builder.shuffle_vector(q1, builder.shuffle_vector(qh, qh, ir.Constant(ir.VectorType(_I32, 16),
                                                                                          [0, 1, 2, 3] * 4)),
                                          ir.Constant(ir.VectorType(_I32, 32), list(range(32))))
            codes = [_tq1_digits(builder, q0, [3 ** p] * 32) for p in range(5)]       # elements 32 p + m
            codes.append(_tq1_digits(builder, q11, [1] * 16 + [3] * 16))            # 160 + 16 p + m, p = 0, 1
            codes.append(_tq1_digits(builder, q11, [9] * 16 + [27] * 16))           # p = 2, 3
            codes.append(_tq1_digits(builder, tail, [81] * 16 + [3 ** (i // 4) for i in range(16)]))  # p = 4; qh
        tot = None
        for c in range(8):
            t = _u_dot32(builder, codes[c], xv[c])
            tot = t if tot is None else builder.add(tot, t)                   # |.| <= 256 * 2 * 128
        per.append(tot)
    isum = builder.sub(_lanes4(builder, per), xsum)                              # sum (code - 1) x
    return _scaled(builder, blk, 64 if kind == "tq2_0" else 52, isum)


BLOCK_TERMS = {
    "q4_1": lambda builder, blk: _term_q45_1(builder, blk, "q4_1"),
    "q5_1": lambda builder, blk: _term_q45_1(builder, blk, "q5_1"),
    "iq4_nl": _term_iq4_nl,
    "iq4_xs": _term_iq4_xs,
    "q2_k": _term_q2_k,
    "q3_k": _term_q3_k,
    "tq1_0": lambda builder, blk: _term_tq(builder, blk, "tq1_0"),
    "tq2_0": lambda builder, blk: _term_tq(builder, blk, "tq2_0"),
}
"""Kind -> the block term this module writes for it (``term(builder, Block) -> <4 x double>``): the types it can
walk. The registry's ``rows4`` marks which it does walk (tests/kernels/test_registry_paths.py checks they are
the same)."""


def _check_args(kind, a, xq, xd, xs, table):
    if not (isinstance(a, types.Array) and a.ndim == 2 and a.dtype == types.uint8):
        raise TypingError(f"{kind}_rows4: expected 2-D uint8 rows, got {a}")
    simd._check8(f"{kind}_rows4", xq)
    for arr in (xd, xs, table):
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C" and arr.dtype == types.float32):
            raise TypingError(f"{kind}_rows4: expected a 1-D C-contiguous float32 array, got {arr}")


def ext_rows4_python(qtype, a, r, nb, xq, xd, xs, table):
    """The reference: :func:`refsim.kernels.qdot_ext.ext_row` of rows ``r..r+3`` (a 4-tuple of floats)."""
    n_cols = nb * ROWS4_EXT[_KIND[qtype]][0]
    return tuple(float(ext_row(qtype, a[r + i], n_cols, xq, xd, xs, table)) for i in range(4))


def ext_rows4(qtype, a, r, nb, xq, xd, xs, table):
    """Four rows ``a[r:r+4]`` of ggml type ``qtype`` (one of :data:`ROWS4_EXT_QTYPE`'s values; ``nb`` blocks)
    times one quantized activation: element ``i`` equal bit for bit to ``qdot_ext.ext_row`` of row ``r + i``
    (module docstring). Rows must be contiguous (``a.strides[1] == 1``); reads 4 whole rows, prefetches the
    next 4. In compiled code ``qtype`` is a runtime value (a ``switch`` to the type's loop; another id gives
    NaNs)."""
    return ext_rows4_python(qtype, a, r, nb, xq, xd, xs, table)


_KIND = {v: k for k, v in ROWS4_EXT_QTYPE.items()}


@intrinsic
def _ext_rows4(typingctx, qtype, a, r, nb, xq, xd, xs, table):
    _check_args("ext", a, xq, xd, xs, table)
    ret = types.UniTuple(types.float64, 4)
    cases = {q: _rows4_codegen(*ROWS4_EXT[k], BLOCK_TERMS[k]) for q, k in _KIND.items()}
    return ret(types.intp, a, types.intp, types.intp, xq, xd, xs, table), _switch_codegen(cases, ret)


@overload(ext_rows4, inline="always")
def _ov_ext_rows4(qtype, a, r, nb, xq, xd, xs, table):
    return lambda qtype, a, r, nb, xq, xd, xs, table: _ext_rows4(qtype, a, r, nb, xq, xd, xs, table)


__all__ = ["BLOCK_TERMS", "ROWS4_EXT", "ROWS4_EXT_QTYPE", "ext_rows4", "ext_rows4_python"]
