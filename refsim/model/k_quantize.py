"""Reference NumPy quantizers for the types gguf-py only dequantizes: the K-quants Q2_K, Q3_K, Q4_K,
Q5_K, Q6_K and the non-linear IQ4_NL, IQ4_XS.

These are plain min/max (IQ4: nearest table value) quantizers, written for synthetic test models:
they produce valid blocks that ``gguf.quants.dequantize`` decodes to values close to the input. They
are *not* llama.cpp's ``make_qkx2_quants`` / ``quantize_row_iq4_nl_impl`` searches (no imatrix, no
error-minimising scale search), so their bytes differ from ``llama-quantize``'s.

Block layouts (QK_K = 256; gguf-py ``quants.py``; ggml ``block_q4_K`` etc.):

- Q4_K (144 B): f16 d, f16 dmin, 12 B of 6-bit scales/mins for 8 sub-blocks of 32, 128 B nibbles.
  value = d * sc[j] * q - dmin * m[j], q in 0..15.
- Q5_K (176 B): as Q4_K plus 32 B of high bits (bit j of byte i = high bit of element i of
  sub-block j); q in 0..31.
- Q6_K (210 B): 128 B low nibbles, 64 B high 2-bit pairs, 16 int8 scales (sub-blocks of 16), f16 d.
  value = d * sc[j] * (q - 32), q in 0..63.
- Q2_K (84 B): 16 B scale|min<<4 (sub-blocks of 16), 64 B 2-bit quants, f16 d, f16 dmin.
  value = d * sc[j] * q - dmin * m[j], q in 0..3.
- Q3_K (110 B): 32 B high-bit mask, 64 B 2-bit quants, 12 B 6-bit scales (stored + 32), f16 d.
  value = d * sc[j] * q, q in -4..3 (stored q + 4: low 2 bits, and bit 2 in the mask).
- IQ4_NL (18 B, blocks of 32): f16 d, 16 B nibbles indexing :data:`refsim.kernels.iq4.KVALUES_IQ4`.
- IQ4_XS (136 B): f16 d, u16 high scale bits, 4 B low scale nibbles (8 sub-blocks of 32, stored
  + 32), 128 B nibbles; value = d * ls[j] * KVALUES_IQ4[nibble].
"""

from __future__ import annotations

import numpy as np

QK_K = 256


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16)


def _pack_scales_mins(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    """(n, 8) 6-bit scales and mins -> (n, 12) uint8, the K_SCALE_SIZE packing."""
    sc, mn = sc.astype(np.uint8), mn.astype(np.uint8)
    out = np.empty((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    out[:, 4:8] = (mn[:, :4] & 63) | ((mn[:, 4:] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:] & 15) | ((mn[:, 4:] & 15) << 4)
    return out


def _affine_blocks(x: np.ndarray, qmax: int, n_sub: int = 8, sc_max: int = 63):
    """Shared Q2_K/Q4_K/Q5_K part: (n, 256) f32 -> d, dmin (n,) f16, sc, mn (n, n_sub) in 0..sc_max,
    q (n, n_sub, 256 // n_sub) in 0..qmax."""
    n = x.shape[0]
    sub = x.reshape(n, n_sub, QK_K // n_sub)
    lo = np.minimum(sub.min(axis=-1), 0.0)           # mins are <= 0 so m = -lo >= 0
    hi = sub.max(axis=-1)
    scale = (hi - lo) / qmax                          # (n, n_sub) per-sub-block step
    d = _f16(scale.max(axis=-1) / sc_max)
    dmin = _f16((-lo).max(axis=-1) / sc_max)
    df, dmf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.rint(scale / df), 0).clip(0, sc_max)
        mn = np.where(dmf > 0, np.rint(-lo / dmf), 0).clip(0, sc_max)
        step = (df * sc)[..., None]
        off = (dmf * mn)[..., None]
        q = np.where(step > 0, np.rint((sub + off) / step), 0).clip(0, qmax)
    return d, dmin, sc, mn, q.astype(np.uint8)


def _nibbles_4k(q: np.ndarray) -> np.ndarray:
    """(n, 8, 32) 4-bit values -> (n, 128) bytes: chunk c holds sub-block 2c low, 2c+1 high."""
    n = q.shape[0]
    q = q.reshape(n, 4, 2, 32)
    return ((q[:, :, 0] & 15) | ((q[:, :, 1] & 15) << 4)).reshape(n, 128).astype(np.uint8)


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """Quantize rows to Q4_K.

    Parameters
    ----------
    x : (..., n) float array
        ``n`` a multiple of 256.

    Returns
    -------
    (..., n // 256 * 144) uint8 ndarray
    """
    shape = x.shape
    blocks = np.asarray(x, dtype=np.float32).reshape(-1, QK_K)
    d, dmin, sc, mn, q = _affine_blocks(blocks, 15)
    out = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
                          _pack_scales_mins(sc, mn), _nibbles_4k(q)], axis=1)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * 144)


def quantize_q5_k(x: np.ndarray) -> np.ndarray:
    """Quantize rows to Q5_K; ``(..., n)`` float -> ``(..., n // 256 * 176)`` uint8."""
    shape = x.shape
    blocks = np.asarray(x, dtype=np.float32).reshape(-1, QK_K)
    d, dmin, sc, mn, q = _affine_blocks(blocks, 31)
    n = blocks.shape[0]
    high = (q >> 4) & 1                                             # (n, 8, 32)
    qh = (high << np.arange(8, dtype=np.uint8)[None, :, None]).sum(axis=1).astype(np.uint8)  # (n, 32)
    out = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
                          _pack_scales_mins(sc, mn), qh, _nibbles_4k(q & 15)], axis=1)
    assert out.shape == (n, 176)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * 176)


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    """Quantize rows to Q6_K; ``(..., n)`` float -> ``(..., n // 256 * 210)`` uint8."""
    shape = x.shape
    blocks = np.asarray(x, dtype=np.float32).reshape(-1, QK_K)
    n = blocks.shape[0]
    sub = blocks.reshape(n, 16, 16)
    scale = np.abs(sub).max(axis=-1) / 31                           # (n, 16)
    d = _f16(scale.max(axis=-1) / 127)
    df = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.rint(scale / df), 0).clip(-128, 127)
        step = (df * sc)[..., None]
        q = np.where(step != 0, np.rint(sub / step), 0).clip(-32, 31)
    u = (q + 32).astype(np.uint8).reshape(n, 2, 4, 32)              # element h*128 + s*32 + i
    low, high = u & 15, u >> 4
    ql = (low[:, :, 0:2].reshape(n, 2, 64) | (low[:, :, 2:4].reshape(n, 2, 64) << 4)).reshape(n, 128)
    qh = (high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)).reshape(n, 64)
    out = np.concatenate([ql.astype(np.uint8), qh.astype(np.uint8), sc.astype(np.int8).view(np.uint8),
                          d.view(np.uint8).reshape(-1, 2)], axis=1)
    assert out.shape == (n, 210)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * 210)


def _pack_2bit(q: np.ndarray) -> np.ndarray:
    """(n, 256) values 0..3 -> (n, 64) bytes: element 128 h + 32 s + l in bits 2s of byte 32 h + l."""
    q = q.astype(np.uint8).reshape(q.shape[0], 2, 4, 32)
    return (q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)).reshape(-1, 64)


def quantize_q2_k(x: np.ndarray) -> np.ndarray:
    """Quantize rows to Q2_K; ``(..., n)`` float (n a multiple of 256) -> ``(..., n // 256 * 84)`` uint8."""
    shape = x.shape
    blocks = np.asarray(x, dtype=np.float32).reshape(-1, QK_K)
    n = blocks.shape[0]
    d, dmin, sc, mn, q = _affine_blocks(blocks, 3, n_sub=16, sc_max=15)
    scales = (sc.astype(np.uint8) | (mn.astype(np.uint8) << 4))
    out = np.concatenate([scales, _pack_2bit(q.reshape(n, QK_K)), d.view(np.uint8).reshape(-1, 2),
                          dmin.view(np.uint8).reshape(-1, 2)], axis=1)
    assert out.shape == (n, 84)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * 84)


def quantize_q3_k(x: np.ndarray) -> np.ndarray:
    """Quantize rows to Q3_K; ``(..., n)`` float (n a multiple of 256) -> ``(..., n // 256 * 110)`` uint8."""
    shape = x.shape
    blocks = np.asarray(x, dtype=np.float32).reshape(-1, QK_K)
    n = blocks.shape[0]
    sub = blocks.reshape(n, 16, 16)
    scale = np.abs(sub).max(axis=-1) / 4                            # (n, 16), q = x / scale in -4..4
    d = _f16(scale.max(axis=-1) / 31)
    df = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.rint(scale / df), 0).clip(0, 31)
        step = (df * sc)[..., None]
        q = np.where(step > 0, np.rint(sub / step), 0).clip(-4, 3)
    u = (q.reshape(n, QK_K) + 4).astype(np.uint8)                   # 0..7
    hbit = (u >> 2).reshape(n, 8, 32)
    hmask = (hbit << np.arange(8, dtype=np.uint8)[None, :, None]).sum(axis=1).astype(np.uint8)
    s6 = (sc + 32).astype(np.uint8)                                 # 32..63
    low = (s6[:, :8] & 15) | ((s6[:, 8:] & 15) << 4)
    high = ((s6 >> 4) & 3).reshape(n, 4, 4)                         # scale 4 s + k -> bits 2s of byte 8 + k
    high = (high[:, 0] | (high[:, 1] << 2) | (high[:, 2] << 4) | (high[:, 3] << 6)).astype(np.uint8)
    out = np.concatenate([hmask, _pack_2bit(u & 3), low, high, d.view(np.uint8).reshape(-1, 2)], axis=1)
    assert out.shape == (n, 110)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * 110)


_NEAREST_CHUNK = 1 << 20
"""Elements per pass of :func:`_nearest_iq4` (its error table is 16 float32 per element: 64 MiB a pass; one
pass over a whole expert tensor of the 1/8 Qwen3-30B-A3B benchmark model, 201 M elements, needed 13 GB and
was killed by the OOM killer)."""


def _nearest_iq4(v: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Index of the table value nearest ``v / step`` (``step`` of ``v``'s shape): ``argmin |v - step * grid|``
    in float32, the first index on ties; computed :data:`_NEAREST_CHUNK` elements at a time (each element on
    its own, so the chunking cannot change a result)."""
    from refsim.kernels.iq4 import KVALUES_IQ4
    grid = KVALUES_IQ4.astype(np.float32)
    v = np.asarray(v, dtype=np.float32)
    flat_v = v.reshape(-1)
    flat_s = np.broadcast_to(step, v.shape).reshape(-1)
    out = np.empty(flat_v.shape, dtype=np.uint8)
    for i in range(0, flat_v.size, _NEAREST_CHUNK):
        err = np.abs(flat_v[i:i + _NEAREST_CHUNK, None] - flat_s[i:i + _NEAREST_CHUNK, None] * grid)
        out[i:i + _NEAREST_CHUNK] = err.argmin(axis=-1)
    return out.reshape(v.shape)


def _pack_nibbles_32(idx: np.ndarray) -> np.ndarray:
    """(..., 32) 4-bit values -> (..., 16) bytes: element j < 16 low nibble of byte j, j + 16 high."""
    return (idx[..., :16] | (idx[..., 16:] << 4)).astype(np.uint8)


def _signed_max(v: np.ndarray) -> np.ndarray:
    """The element of largest magnitude along the last axis, with its sign."""
    return np.take_along_axis(v, np.abs(v).argmax(axis=-1)[..., None], axis=-1)[..., 0]


def quantize_iq4_nl(x: np.ndarray) -> np.ndarray:
    """Quantize rows to IQ4_NL; ``(..., n)`` float (n a multiple of 32) -> ``(..., n // 32 * 18)`` uint8.

    ``d = f16(max / -127)`` with ``max`` the block's signed extreme (so it maps to the table's
    -127), then each element to the nearest ``d * KVALUES_IQ4[i]``.
    """
    shape = x.shape
    blocks = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    d = _f16(_signed_max(blocks) / -127)
    idx = _nearest_iq4(blocks, np.broadcast_to(d.astype(np.float32)[:, None], blocks.shape))
    out = np.concatenate([d.view(np.uint8).reshape(-1, 2), _pack_nibbles_32(idx)], axis=1)
    return out.reshape(*shape[:-1], shape[-1] // 32 * 18)


def quantize_iq4_xs(x: np.ndarray) -> np.ndarray:
    """Quantize rows to IQ4_XS; ``(..., n)`` float (n a multiple of 256) -> ``(..., n // 256 * 136)`` uint8.

    Per sub-block of 32 the ideal step is ``max / -127`` (signed extreme); the super-block's
    ``d = f16(max |step| / 31)``, each sub-block's ``ls = rint(step / d)`` in -32..31, and every
    element the nearest ``d * ls * KVALUES_IQ4[i]``.
    """
    shape = x.shape
    blocks = np.asarray(x, dtype=np.float32).reshape(-1, QK_K)
    n = blocks.shape[0]
    sub = blocks.reshape(n, 8, 32)
    step = _signed_max(sub) / -127                                  # (n, 8)
    d = _f16(np.abs(step).max(axis=-1) / 31)
    df = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ls = np.where(df > 0, np.rint(step / df), 0).clip(-32, 31)
    dl = (df * ls).astype(np.float32)
    idx = _nearest_iq4(sub, np.broadcast_to(dl[..., None], sub.shape))
    u = (ls + 32).astype(np.uint16)                                 # 0..63
    scales_h = (((u >> 4) & 3) << (2 * np.arange(8, dtype=np.uint16))[None, :]).sum(axis=1).astype(np.uint16)
    scales_l = ((u[:, 0::2] & 15) | ((u[:, 1::2] & 15) << 4)).astype(np.uint8)
    out = np.concatenate([d.view(np.uint8).reshape(-1, 2), scales_h.view(np.uint8).reshape(-1, 2), scales_l,
                          _pack_nibbles_32(idx).reshape(n, 128)], axis=1)
    assert out.shape == (n, 136)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * 136)
