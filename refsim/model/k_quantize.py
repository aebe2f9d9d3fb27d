"""Reference NumPy quantizers for the K-quants Q4_K, Q5_K and Q6_K (gguf-py only dequantizes them).

These are plain min/max quantizers, written for synthetic test models: they produce valid blocks
that ``gguf.quants.dequantize`` decodes to values close to the input. They are *not* llama.cpp's
``make_qkx2_quants`` search (no imatrix, no error-minimising scale search), so their bytes differ
from ``llama-quantize``'s.

Block layouts (QK_K = 256; gguf-py ``quants.py``; ggml ``block_q4_K`` etc.):

- Q4_K (144 B): f16 d, f16 dmin, 12 B of 6-bit scales/mins for 8 sub-blocks of 32, 128 B nibbles.
  value = d * sc[j] * q - dmin * m[j], q in 0..15.
- Q5_K (176 B): as Q4_K plus 32 B of high bits (bit j of byte i = high bit of element i of
  sub-block j); q in 0..31.
- Q6_K (210 B): 128 B low nibbles, 64 B high 2-bit pairs, 16 int8 scales (sub-blocks of 16), f16 d.
  value = d * sc[j] * (q - 32), q in 0..63.
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


def _affine_blocks(x: np.ndarray, qmax: int):
    """Shared Q4_K/Q5_K part: (n, 256) f32 -> d, dmin (n,) f16, sc, mn (n, 8), q (n, 8, 32)."""
    n = x.shape[0]
    sub = x.reshape(n, 8, 32)
    lo = np.minimum(sub.min(axis=-1), 0.0)           # mins are <= 0 so m = -lo >= 0
    hi = sub.max(axis=-1)
    scale = (hi - lo) / qmax                          # (n, 8) per-sub-block step
    d = _f16(scale.max(axis=-1) / 63)
    dmin = _f16((-lo).max(axis=-1) / 63)
    df, dmf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.rint(scale / df), 0).clip(0, 63)
        mn = np.where(dmf > 0, np.rint(-lo / dmf), 0).clip(0, 63)
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
