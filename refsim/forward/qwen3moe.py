"""Reference forward pass of ``qwen3moe`` (Qwen3-30B-A3B and its synthetic twins).

Reads top to bottom like llama.cpp's src/models/qwen3moe.cpp::

    h = token_embd[tokens]                                  # [n_pos, n_embd]
    for il in layers:
        a = rms_norm(h) * attn_norm
        q, k, v = attn_q a, attn_k a, attn_v a              # [n_pos, n_head|n_head_kv, head_dim]
        q, k = rope_neox(rms_norm(q) * q_norm), rope_neox(rms_norm(k) * k_norm)
        kv[il] <- k, v ;  o = attention(q, kv[il])          # causal, GQA
        h = h + attn_output o
        (last layer: keep only the positions that produce logits)
        f = rms_norm(h) * ffn_norm
        ids, w = route_topk(ffn_gate_inp f, k)              # softmax -> top-k -> renormalise
        h = h + moe_ffn(f, ids, w)                          # SwiGLU experts, routed slices only
    logits = output (rms_norm(h) * output_norm)             # output tied to token_embd if absent

Quirks and their sources:

- Router: softmax over all experts, top-k, **always** renormalised (``norm_w = true`` is
  hard-coded; HF ``norm_topk_prob`` is not read); no ``expert_weights_scale``
  (llama-cpp-notes.md §2.1, §2.4).
- q/k RMSNorm per head, before RoPE; RoPE is NEOX over ``rope.dimension_count`` (= head_dim)
  (§2.3).
- **The last-layer rule**: on ``il == n_layer - 1`` llama.cpp cuts the hidden states to the
  output rows (``inp_out_ids``) *before* the FFN, so the last layer's experts are routed only
  for positions that produce logits (§1.3). A prefill that asks logits on its last position
  therefore routes the last layer once, for that position; the engine's route traces show the
  same (bmoe-engine.md §3.2, prefill quirk (a)). A verify decode asks logits on every row and
  routes all of them. refsim marks the skipped (position, layer) with ``NOT_ROUTED`` (-1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numba
import numpy as np
from numba import njit

from refsim.streaming.drop import gate_layer
from refsim.errors import ModelFormatError
from refsim.events import NOT_ROUTED
from refsim.forward.kv import KVCache
from refsim.forward.layers import (_attn_route_one_kernel, _moe_one_kernel, _qkv_one_kernel, decode_inputs, route_weights,
                                   ExpertWeights, Numerics, QWeight, attention, attn_route_one, attn_route_static, linear,
                                   logit_margin, moe_ffn, qkv_one, qkv_static, rms_norm, rope_neox, route_topk)
from refsim.forward.result import DecodeResult
from refsim.streaming.stale_gate import predict_layer
from refsim.kernels import require_kernel
from refsim.model import Model, ModelSpec

Tap = Callable[[str, int, np.ndarray], None]
"""``tap(name, il, array)``: observes named intermediates (llama.cpp ``cb`` names; il = -1 global)."""


@dataclass(frozen=True)
class LayerWeights:
    """One block's weights (raw rows, memory-mapped); norms as float32 vectors."""

    attn_norm: np.ndarray
    attn_q: QWeight
    attn_k: QWeight
    attn_v: QWeight
    attn_output: QWeight
    attn_q_norm: np.ndarray
    attn_k_norm: np.ndarray
    ffn_norm: np.ndarray
    ffn_gate_inp: QWeight
    experts: ExpertWeights


@dataclass(frozen=True)
class Weights:
    """Read-only weights of a qwen3moe model (spec + raw views; nothing dequantized whole)."""

    spec: ModelSpec
    token_embd: QWeight
    output_norm: np.ndarray
    output: QWeight
    layers: tuple[LayerWeights, ...]
    _one: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    """numerics -> the one-call decode's per-layer arguments (:func:`_one_static`), built on first use."""


def _qweight(model: Model, name: str) -> QWeight:
    ti = model.tensor(name)
    require_kernel(ti.ggml_type, name, model.path)
    return QWeight(model.raw(name), int(ti.ggml_type), int(ti.shape_gguf[0]))


def _vector(model: Model, name: str, n: int) -> np.ndarray:
    ti = model.tensor(name)
    if tuple(ti.shape_gguf) != (n,):
        raise ModelFormatError(f"{model.path}: {name} has shape {list(ti.shape_gguf)}, expected [{n}]")
    return np.ascontiguousarray(model.dequantize(name).reshape(-1), dtype=np.float32)


def _experts(model: Model, il: int) -> ExpertWeights:
    s = model.spec
    raws, types = [], []
    for part in ("gate", "up", "down"):
        name = f"blk.{il}.ffn_{part}_exps.weight"
        if name not in model.tensors:
            raise ModelFormatError(f"{model.path}: {name} missing (fused ffn_gate_up_exps is not supported yet)")
        ti = model.tensor(name)
        require_kernel(ti.ggml_type, name, model.path)
        raws.append(model.raw(name).reshape(s.n_expert, ti.shape_gguf[1], ti.row_bytes))
        types.append(int(ti.ggml_type))
    return ExpertWeights(raws[0], raws[1], raws[2], types[0], types[1], types[2], s.n_embd, s.n_ff_exp)


def load_weights(model: Model) -> Weights:
    """Collect the weights of a qwen3moe model (views only).

    Parameters
    ----------
    model : refsim.model.Model
        An opened qwen3moe GGUF with tensor data.

    Returns
    -------
    Weights

    Raises
    ------
    ModelFormatError
        Wrong arch, header-only file, or a tensor of an unexpected shape; ``n_rot != head_dim``
        (llama.cpp asserts the same for qwen3moe).
    """
    s = model.spec
    if s.arch != "qwen3moe":
        raise ModelFormatError(f"{model.path}: arch {s.arch!r} is not qwen3moe")
    if not model.has_data:
        model.raw("token_embd.weight")  # raises the header-only error
    if s.n_rot != s.head_dim_k:
        raise ModelFormatError(f"{model.path}: qwen3moe needs rope.dimension_count == head_dim "
                               f"({s.n_rot} != {s.head_dim_k})")
    layers = []
    for il in range(s.n_layer):
        b = f"blk.{il}."
        layers.append(LayerWeights(
            attn_norm=_vector(model, b + "attn_norm.weight", s.n_embd),
            attn_q=_qweight(model, b + "attn_q.weight"), attn_k=_qweight(model, b + "attn_k.weight"),
            attn_v=_qweight(model, b + "attn_v.weight"), attn_output=_qweight(model, b + "attn_output.weight"),
            attn_q_norm=_vector(model, b + "attn_q_norm.weight", s.head_dim_k),
            attn_k_norm=_vector(model, b + "attn_k_norm.weight", s.head_dim_k),
            ffn_norm=_vector(model, b + "ffn_norm.weight", s.n_embd),
            ffn_gate_inp=_qweight(model, b + "ffn_gate_inp.weight"), experts=_experts(model, il)))
    out_name = "output.weight" if "output.weight" in model.tensors else "token_embd.weight"
    return Weights(spec=s, token_embd=_qweight(model, "token_embd.weight"),
                   output_norm=_vector(model, "output_norm.weight", s.n_embd),
                   output=_qweight(model, out_name), layers=tuple(layers))


def new_state(spec: ModelSpec, capacity: int = 256) -> KVCache:
    """An empty KV cache for ``spec`` (every trunk layer has attention)."""
    return KVCache(spec.n_layer, spec.n_head_kv, spec.head_dim_k, spec.head_dim_v, capacity)


def _commit_ahead(ahead, il, ids, w, logits_e, pred_routes, row):
    """``--route-ahead``: where the policy commits, replace layer il's selection (one position)
    by the ranking made at layer il−N (``pred_routes[row, il]``) with its true weights from layer
    il's own logits; count the routing."""
    if ahead is None:
        return ids, w
    committed = None
    if ahead.commits(il) and ids.shape[0] == 1 and pred_routes[row, il, 0] >= 0:
        committed = pred_routes[row:row + 1, il].copy()
    ahead.record(ids, committed)
    if committed is None:
        return ids, w
    return committed, route_weights(logits_e, committed)


def _one_static(weights: Weights, numerics: Numerics):
    """Per layer, the weight-side arguments of the three fused one-position kernels of
    :mod:`refsim.forward.layers` (``qkv_static``, ``attn_route_static``, ``ExpertWeights.one_static``), or
    ``None`` when any layer cannot take them (then every layer goes block by block)."""
    if numerics not in weights._one:
        s = weights.spec
        out = []
        for L in weights.layers:
            parts = (qkv_static(L.attn_norm, L.attn_q, L.attn_k, L.attn_v, L.attn_q_norm, L.attn_k_norm, s.rms_eps,
                                s.n_rot, s.rope_freq_base, s.n_head, s.n_head_kv, s.head_dim_v, numerics),
                     attn_route_static(L.attn_output, L.ffn_norm, s.rms_eps, L.ffn_gate_inp, s.n_expert_used,
                                       s.n_head, s.head_dim_k, numerics),
                     L.experts.one_static(numerics))
            if any(p is None for p in parts) or s.head_dim_v != s.head_dim_k:
                out = None
                break
            out.append(parts)
        weights._one[numerics] = None if out is None else tuple(out)
    return weights._one[numerics]


@njit(cache=True)
def _decode_one_kernel(layers, nt, kcs, vcs, h, pos, n_head, n_head_kv, head_dim, k, routes, rweights, rmargin):
    """Every layer of a one-position ``ggml`` decode in one call: per layer ``_qkv_one_kernel`` (k and v
    written straight into the KV cache row ``pos[0]``), ``_attn_route_one_kernel`` over rows ``0..pos[0]``,
    ``_moe_one_kernel`` on the router's selection, ``h = h1 + moe``: the calls and the arithmetic of
    :func:`decode`'s per-layer path, without returning to Python between them (same bits; tested).
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


def decode(weights: Weights, state: KVCache, tokens: np.ndarray, positions: np.ndarray,
           numerics: Numerics = Numerics(), out_rows: np.ndarray | None = None,
           tap: Tap | None = None, gate=None, probe=None, ahead=None,
           predictor=None) -> DecodeResult:
    """Decode ``tokens`` at ``positions``, appending them to the KV cache.

    Parameters
    ----------
    weights : Weights
    state : KVCache
        Holds positions ``0..state.n-1``; advanced by ``n_pos`` on return.
    tokens : (n_pos,) int array
        Token ids in ``0..n_vocab-1``.
    positions : (n_pos,) int64 array
        ``state.n, state.n + 1, ...`` (contiguous).
    numerics : Numerics, default exact
    out_rows : (n_out,) int array, optional
        Positions (indices into ``tokens``) that produce logits; default all. The last
        layer's MoE runs only for these (the last-layer rule, module docstring).
    tap : callable, optional
        ``tap(name, il, array)`` with llama.cpp's names: ``attn_norm``, ``Qcur``, ``Kcur``,
        ``Vcur``, ``kqv_out``, ``ffn_inp``, ``ffn_norm``, ``ffn_moe_logits``, ``ffn_moe_topk``,
        ``ffn_moe_weights_norm``, ``ffn_moe_out``, ``l_out``, ``result_norm``, ``result_output``.
    gate : LayerFeed-like, optional
        The drop seam (:func:`refsim.streaming.drop.gate_layer`): before each layer's expert FFN the
        pass asks it whether ``--drop-cold-experts`` applies and which ids are resident, applies
        the rule to the routing the FFN uses, and reports the router's routing. The pass never
        counts bytes. ``routes`` / ``weights`` stay the router's; ``dropped`` marks the drops.
    probe : refsim.streaming.predict.PredictProbe, optional
        ``--predict-log``: after each layer's routing the pass hands it the last routed
        position's ids and gate input, and a ranking function over any layer's router.
    ahead : refsim.streaming.route_ahead.RouteAhead, optional
        ``--route-ahead N``: where ``ahead.commits(il)``, layer il's selection is the ranking of
        its router on layer il−N's gate input, with its true renormalised weights; ``routes`` and
        ``weights`` hold the committed routing (what the engine's trace records). The ranking
        for layer L is made at layer L−N and recorded in ``pred_routes`` / ``pred_weights``.
    predictor : refsim.streaming.stale_gate.PredictPrefetch, optional
        ``--predict-prefetch``: at layer il the pass ranks layer il+2's router on layer il's
        gate input (the batch's last position) and records it (``pred_routes``, ``pred_weights``
        and ``gate.predicted``); the routing is unchanged.

    Returns
    -------
    DecodeResult

    Raises
    ------
    ConfigError
        Token ids out of range, non-contiguous positions, bad ``out_rows``.
    """
    s = weights.spec
    tokens, positions, rows = decode_inputs(tokens, positions, s.n_vocab, state.n, out_rows)
    n_pos = tokens.size
    is_out = np.zeros(n_pos, dtype=bool)
    is_out[rows] = True
    t = tap or (lambda name, il, a: None)
    H, KV, hd, k = s.n_head, s.n_head_kv, s.head_dim_k, s.n_expert_used
    eps = s.rms_eps
    n_layer = s.n_layer
    routes = np.full((n_pos, n_layer, k), NOT_ROUTED, dtype=np.int16)
    rweights = np.full((n_pos, n_layer, k), np.nan, dtype=np.float32)
    rmargin = np.full((n_pos, n_layer), np.nan, dtype=np.float32)
    dropped = np.zeros((n_pos, n_layer, k), dtype=bool)
    start = state.n

    def rank(j: int, x: np.ndarray) -> np.ndarray:
        """Layer j's router on gate input x (n, n_embd): its top-k ids (n, k) (probe, route-ahead)."""
        return route_topk(linear(weights.layers[j].ffn_gate_inp, x, numerics), k)[0]

    def stale(j: int, x: np.ndarray):
        """Layer j's router on gate input x (1, n_embd): ranked ids (1, k) and logits."""
        sc = linear(weights.layers[j].ffn_gate_inp, x, numerics)
        return route_topk(sc, k)[0], sc

    ranker = ahead if ahead is not None else predictor
    pred_routes = np.full((n_pos, n_layer, k), NOT_ROUTED, dtype=np.int16)
    pred_weights = np.full((n_pos, n_layer, k), np.nan, dtype=np.float32)

    h = weights.token_embd.rows(tokens)                                          # [n_pos, n_embd]
    one = None
    if n_pos == 1 and tap is None and gate is None and probe is None and ranker is None:
        one = _one_static(weights, numerics)
    if one is not None:   # a plain one-position ggml decode: every layer in one Numba call (same bits)
        kcs, vcs = state.storage(start + 1)
        h = _decode_one_kernel(one, numba.get_num_threads(), kcs, vcs, h, positions, H, KV, hd, k, routes, rweights, rmargin)
    for il, L in enumerate(weights.layers if one is None else ()):
        fused = qkv_one(h, L.attn_norm, L.attn_q, L.attn_k, L.attn_v, L.attn_q_norm, L.attn_k_norm, eps, positions,
                        s.n_rot, s.rope_freq_base, H, KV, s.head_dim_v, numerics)   # one position, ggml mode
        if fused is not None:
            a, q, kk, v = fused
            t("attn_norm", il, a)
        else:
            a = rms_norm(h, L.attn_norm, eps)
            t("attn_norm", il, a)
            q = linear(L.attn_q, a, numerics).reshape(n_pos, H, hd)              # [n_pos, n_head, head_dim]
            kk = linear(L.attn_k, a, numerics).reshape(n_pos, KV, hd)            # [n_pos, n_head_kv, head_dim]
            v = linear(L.attn_v, a, numerics).reshape(n_pos, KV, s.head_dim_v)
            q = rope_neox(rms_norm(q, L.attn_q_norm, eps), positions, s.n_rot, s.rope_freq_base, numerics)
            kk = rope_neox(rms_norm(kk, L.attn_k_norm, eps), positions, s.n_rot, s.rope_freq_base, numerics)
        t("Qcur", il, q)
        t("Kcur", il, kk)
        t("Vcur", il, v)
        state.write(il, start, kk, v)
        kc, vc = state.view(il, start + n_pos)
        one = attn_route_one(q, kc, vc, positions, L.attn_output, h, L.ffn_norm, eps, L.ffn_gate_inp, k,
                             numerics)                                   # one position, ggml mode: one call
        if one is not None:
            o, h, f, logits_e, ids, w, m = one
            for name, x in (("kqv_out", o), ("ffn_inp", h), ("ffn_norm", f), ("ffn_moe_logits", logits_e),
                            ("ffn_moe_topk", ids), ("ffn_moe_weights_norm", w)):
                t(name, il, x)
            ids, w = _commit_ahead(ahead, il, ids, w, logits_e, pred_routes, 0)
            if ranker is not None:
                predict_layer(ranker, il, f, stale, 0, pred_routes, pred_weights, gate)
            routes[0, il] = ids[0]
            rweights[0, il] = w[0]
            rmargin[0, il] = m[0]
            if probe is not None:
                probe.layer(il, ids[0], f, rank)
            if gate is not None:
                ids, w, dropped[:1, il] = gate_layer(gate, il, [0], ids, w)
            moe = moe_ffn(f, ids, w, L.experts, numerics)                        # [1, n_embd]
            t("ffn_moe_out", il, moe)
            h = h + moe
            t("l_out", il, h)
            continue
        o = attention(q, kc, vc, positions).reshape(n_pos, H * s.head_dim_v)  # [n_pos, n_head*head_dim]
        t("kqv_out", il, o)
        h = h + linear(L.attn_output, o, numerics)                              # [n_pos, n_embd]
        t("ffn_inp", il, h)
        active = is_out if il == n_layer - 1 else np.ones(n_pos, dtype=bool)
        idx = np.nonzero(active)[0]
        f = rms_norm(h[idx], L.ffn_norm, eps)                                   # [n_act, n_embd]
        t("ffn_norm", il, f)
        logits_e = linear(L.ffn_gate_inp, f, numerics)                          # [n_act, n_expert]
        t("ffn_moe_logits", il, logits_e)
        ids, w, m = route_topk(logits_e, k)                                     # [n_act, k]
        t("ffn_moe_topk", il, ids)
        t("ffn_moe_weights_norm", il, w)
        ids, w = _commit_ahead(ahead, il, ids, w, logits_e, pred_routes, int(idx[-1]))
        if ranker is not None:
            predict_layer(ranker, il, f[-1:], stale, int(idx[-1]), pred_routes, pred_weights, gate)
        routes[idx, il] = ids
        rweights[idx, il] = w
        rmargin[idx, il] = m
        if probe is not None:
            probe.layer(il, ids[-1], f[-1:], rank)
        if gate is not None:
            ids, w, dropped[idx, il] = gate_layer(gate, il, idx, ids, w)
        moe = moe_ffn(f, ids, w, L.experts, numerics)                            # [n_act, n_embd]
        t("ffn_moe_out", il, moe)
        h2 = h.copy()
        h2[idx] = h[idx] + moe
        h = h2
        t("l_out", il, h)
    state.advance(n_pos)
    hn = rms_norm(h[rows], weights.output_norm, eps)                              # [n_out, n_embd]
    t("result_norm", -1, hn)
    logits = linear(weights.output, hn, numerics)                                 # [n_out, n_vocab]
    t("result_output", -1, logits)
    return DecodeResult(logits=logits, out_rows=rows, routes=routes, weights=rweights,
                        margin=logit_margin(logits), route_margin=rmargin,
                        dropped=dropped if gate is not None else None,
                        pred_routes=pred_routes if ranker is not None else None,
                        pred_weights=pred_weights if ranker is not None else None)
