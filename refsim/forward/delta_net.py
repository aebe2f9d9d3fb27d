"""The gated delta net of qwen35moe's linear-attention layers (one token at a time, exact order).

Per token ``t`` of one layer (llama-cpp-notes.md §3.4; llama.cpp ``build_layer_attn_linear``,
``delta-net-base.cpp`` and ggml's CPU ``gated_delta_net``), with ``C = 2*Hk*Dk + Hv*Dv``
conv channels:

1. causal depthwise conv: ``u[c] = sum_{j<K} W[c, j] * X[j, c]`` where ``X`` is the conv state
   (the previous ``K-1`` inputs) followed by ``mix[t]``; ``W[:, K-1]`` multiplies the newest
   input; then ``u = silu(u)`` and the state shifts by one;
2. split ``u`` into q ``[Hk, Dk]``, k ``[Hk, Dk]``, v ``[Hv, Dv]``; q and k L2-normalised per head
   (``x * 1/max(||x||, eps)``, ``ggml_l2_norm``); q scaled by ``1/sqrt(Dk)``;
3. ``g = softplus(alpha + dt_bias) * ssm_a`` (``ssm_a = -exp(A_log)``, so ``g <= 0``),
   ``beta = sigmoid(beta_raw)``;
4. per value head ``h``, reading key head ``h % Hk`` (llama.cpp's **tiled** head mapping; the
   converter reorders V heads so that this holds; an interleaved reading is off by ~5 in the
   logits, shared/reference/oracle/README.md), with state ``S[h]`` of shape ``[Dk, Dv]``::

       S <- exp(g_h) * S
       d_j = beta_h * (v_j - sum_i S[i, j] k_i)
       S[i, j] <- S[i, j] + k_i d_j
       o_j = sum_i S[i, j] q_i

The gated RMSNorm and ``ssm_out`` that follow are in :mod:`refsim.forward.qwen35moe`.

Arithmetic: float32 storage, every sum accumulated in float64 and rounded once to float32;
tokens are processed strictly in order, so decoding N tokens at once is bit-identical to N
one-token calls (batch invariance).
"""

from __future__ import annotations

import numpy as np

import refsim.kernels  # noqa: F401  (first: Numba's cache folder, refsim.jitcache)
from numba import njit


@njit(cache=True)
def _silu32(x):
    return np.float32(x / np.float32(np.float32(1.0) + np.float32(np.exp(-x))))


@njit(cache=True)
def _softplus32(x):
    # ggml_softplus: log1p(exp(x)), returning x above 20
    if x > np.float32(20.0):
        return x
    return np.float32(np.log1p(np.exp(np.float64(x))))


@njit(cache=True)
def gated_delta_net_kernel(mix, beta_raw, alpha_raw, conv_w, dt_bias, ssm_a, conv_state, ssm_state,
                           n_k_head, eps, snap_from, snap_conv, snap_ssm, out):
    """Run one gated-delta-net layer over ``n_pos`` tokens, updating its state in place.

    Parameters
    ----------
    mix : (n_pos, C) float32
        ``attn_qkv @ x`` per token (before the conv).
    beta_raw, alpha_raw : (n_pos, Hv) float32
        ``ssm_beta @ x`` and ``ssm_alpha @ x``.
    conv_w : (C, K) float32
        ``ssm_conv1d.weight`` (NumPy order).
    dt_bias, ssm_a : (Hv,) float32
    conv_state : (K-1, C) float32
        In/out: the last ``K-1`` conv inputs, oldest first.
    ssm_state : (Hv, Dk, Dv) float32
        In/out: ``S[h, i, j]``, i = key dim, j = value dim.
    n_k_head : int
        ``Hk`` (``ssm.group_count``).
    eps : float32
        ``rms_eps`` (the L2-norm floor).
    snap_from : int
        Token index from which to record the state after each token into the snapshot arrays
        (slot ``t - snap_from``); ``n_pos`` records none.
    snap_conv : (n_snap, K-1, C) float32
    snap_ssm : (n_snap, Hv, Dk, Dv) float32
    out : (n_pos, Hv, Dv) float32
        Written: ``o`` per token and value head.
    """
    n_pos, C = mix.shape
    K = conv_w.shape[1]
    n_v_head, Dk, Dv = ssm_state.shape
    q_off = 0
    k_off = n_k_head * Dk
    v_off = 2 * n_k_head * Dk
    u = np.empty(C, dtype=np.float32)
    q = np.empty((n_k_head, Dk), dtype=np.float32)
    kk = np.empty((n_k_head, Dk), dtype=np.float32)
    d = np.empty(Dv, dtype=np.float32)
    qscale = np.float32(1.0 / np.sqrt(np.float64(Dk)))
    for t in range(n_pos):
        # 1. causal depthwise conv + SiLU, then shift the state
        for c in range(C):
            acc = 0.0
            for j in range(K - 1):
                acc += np.float64(conv_w[c, j]) * np.float64(conv_state[j, c])
            acc += np.float64(conv_w[c, K - 1]) * np.float64(mix[t, c])
            u[c] = _silu32(np.float32(acc))
        for j in range(K - 2):
            for c in range(C):
                conv_state[j, c] = conv_state[j + 1, c]
        if K > 1:
            for c in range(C):
                conv_state[K - 2, c] = mix[t, c]
        # 2. split, L2-normalise q and k per head, scale q
        for hk in range(n_k_head):
            sq = 0.0
            sk = 0.0
            for i in range(Dk):
                a = u[q_off + hk * Dk + i]
                b = u[k_off + hk * Dk + i]
                sq += np.float64(a) * np.float64(a)
                sk += np.float64(b) * np.float64(b)
            nq = np.float32(np.sqrt(sq))
            nk = np.float32(np.sqrt(sk))
            iq = np.float32(1.0) / (nq if nq > eps else eps)
            ik = np.float32(1.0) / (nk if nk > eps else eps)
            for i in range(Dk):
                q[hk, i] = np.float32(np.float32(u[q_off + hk * Dk + i] * iq) * qscale)
                kk[hk, i] = np.float32(u[k_off + hk * Dk + i] * ik)
        # 3-4. decay and delta rule per value head (tiled: key head h % Hk)
        for h in range(n_v_head):
            hk = h % n_k_head
            g = np.float32(_softplus32(np.float32(alpha_raw[t, h] + dt_bias[h])) * ssm_a[h])
            decay = np.float32(np.exp(g))
            b = np.float32(np.float32(1.0) / np.float32(np.float32(1.0) + np.float32(np.exp(-beta_raw[t, h]))))
            S = ssm_state[h]
            for i in range(Dk):
                for j in range(Dv):
                    S[i, j] = np.float32(S[i, j] * decay)
            for j in range(Dv):
                acc = 0.0
                for i in range(Dk):
                    acc += np.float64(S[i, j]) * np.float64(kk[hk, i])
                d[j] = np.float32(b * np.float32(u[v_off + h * Dv + j] - np.float32(acc)))
            for i in range(Dk):
                ki = kk[hk, i]
                for j in range(Dv):
                    S[i, j] = np.float32(S[i, j] + np.float32(ki * d[j]))
            for j in range(Dv):
                acc = 0.0
                for i in range(Dk):
                    acc += np.float64(S[i, j]) * np.float64(q[hk, i])
                out[t, h, j] = np.float32(acc)
        if t >= snap_from:
            snap_conv[t - snap_from] = conv_state
            snap_ssm[t - snap_from] = ssm_state


def gated_delta_net(mix: np.ndarray, beta_raw: np.ndarray, alpha_raw: np.ndarray, conv_w: np.ndarray,
                    dt_bias: np.ndarray, ssm_a: np.ndarray, conv_state: np.ndarray, ssm_state: np.ndarray,
                    n_k_head: int, eps: float, n_snap: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One gated-delta-net layer over a batch (see the module docstring for the rule).

    Parameters
    ----------
    mix : (n_pos, C) float32 ndarray
    beta_raw, alpha_raw : (n_pos, Hv) float32 ndarray
    conv_w : (C, K) float32 ndarray
    dt_bias, ssm_a : (Hv,) float32 ndarray
    conv_state : (K-1, C) float32 ndarray
        Updated in place.
    ssm_state : (Hv, Dk, Dv) float32 ndarray
        Updated in place.
    n_k_head : int
    eps : float
    n_snap : int, default 0
        Also return the states after each of the last ``min(n_snap, n_pos)`` tokens.

    Returns
    -------
    o : (n_pos, Hv, Dv) float32 ndarray
    snap_conv : (n_rec, K-1, C) float32 ndarray
        State after token ``n_pos - n_rec + s`` in slot ``s`` (oldest first).
    snap_ssm : (n_rec, Hv, Dk, Dv) float32 ndarray
    """
    n_pos, C = mix.shape
    n_v_head, Dk, Dv = ssm_state.shape
    assert conv_w.shape[0] == C and conv_state.shape == (conv_w.shape[1] - 1, C)
    assert 2 * n_k_head * Dk + n_v_head * Dv == C and beta_raw.shape == alpha_raw.shape == (n_pos, n_v_head)
    n_rec = min(n_snap, n_pos)
    snap_conv = np.empty((n_rec,) + conv_state.shape, dtype=np.float32)
    snap_ssm = np.empty((n_rec,) + ssm_state.shape, dtype=np.float32)
    out = np.empty((n_pos, n_v_head, Dv), dtype=np.float32)
    f = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
    gated_delta_net_kernel(f(mix), f(beta_raw), f(alpha_raw), f(conv_w), f(dt_bias), f(ssm_a), conv_state,
                           ssm_state, int(n_k_head), np.float32(eps), n_pos - n_rec, snap_conv, snap_ssm, out)
    return out, snap_conv, snap_ssm
