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

import numpy as np

from refsim.errors import ModelFormatError
from refsim.forward.kv import KVCache
from refsim.forward.layers import (ExpertWeights, Numerics, QWeight, attention, decode_inputs, linear, logit_margin,
                                   moe_ffn, rms_norm, rope_neox)
from refsim.forward.loader import expert_weights, qweight, vector
from refsim.forward.result import DecodeResult
from refsim.forward.routing import Routing, route_topk
from refsim.model import Model, ModelSpec
from refsim.streaming.hooks import LayerHooks

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
    _fused: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    """numerics -> the one-call decode's per-layer arguments (:func:`refsim.forward.fused.qwen3moe_one_static`),
    built on first use."""


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
            attn_norm=vector(model, b + "attn_norm.weight", s.n_embd),
            attn_q=qweight(model, b + "attn_q.weight"), attn_k=qweight(model, b + "attn_k.weight"),
            attn_v=qweight(model, b + "attn_v.weight"), attn_output=qweight(model, b + "attn_output.weight"),
            attn_q_norm=vector(model, b + "attn_q_norm.weight", s.head_dim_k),
            attn_k_norm=vector(model, b + "attn_k_norm.weight", s.head_dim_k),
            ffn_norm=vector(model, b + "ffn_norm.weight", s.n_embd),
            ffn_gate_inp=qweight(model, b + "ffn_gate_inp.weight"), experts=expert_weights(model, il)))
    out_name = "output.weight" if "output.weight" in model.tensors else "token_embd.weight"
    return Weights(spec=s, token_embd=qweight(model, "token_embd.weight"),
                   output_norm=vector(model, "output_norm.weight", s.n_embd),
                   output=qweight(model, out_name), layers=tuple(layers))


def new_state(spec: ModelSpec, capacity: int = 256) -> KVCache:
    """An empty KV cache for ``spec`` (every trunk layer has attention)."""
    return KVCache(spec.n_layer, spec.n_head_kv, spec.head_dim_k, spec.head_dim_v, capacity)


MoeBlock = Callable[..., np.ndarray]
"""``moe(x, ids, weights, experts, numerics) -> (n_pos, n_embd)``: the routed-experts block a pass calls
(:func:`refsim.forward.layers.moe_ffn`, or :func:`refsim.forward.fused.moe_ffn` in a fused pass: same bits)."""


@dataclass
class Graph:
    """One decode (llama.cpp: one graph): what its layers share besides the hidden state ``h``.

    Attributes
    ----------
    spec : ModelSpec
    numerics : Numerics
    state : KVCache
        Holds positions ``0..start-1``; each layer writes this decode's rows at ``start``.
    positions : (n_pos,) int64 ndarray
        ``start, start + 1, ...``.
    start : int
    out_rows : (n_out,) int64 ndarray
        Positions that produce logits, sorted (the last layer routes only these: the last-layer rule).
    is_out : (n_pos,) bool ndarray
        The same as a mask.
    routing : Routing
        The decode's routing record and hooks (:mod:`refsim.forward.routing`).
    tap : Tap
    moe : MoeBlock
    """

    spec: ModelSpec
    numerics: Numerics
    state: KVCache
    positions: np.ndarray
    start: int
    out_rows: np.ndarray
    is_out: np.ndarray
    routing: Routing
    tap: Tap
    moe: MoeBlock

    def routed_rows(self, il: int) -> np.ndarray:
        """Rows layer ``il`` routes: every position, on the last layer the output rows only."""
        return np.nonzero(self.is_out if il == self.spec.n_layer - 1 else np.ones(self.is_out.size, dtype=bool))[0]


def start(weights: Weights, state: KVCache, tokens, positions, numerics: Numerics, out_rows, tap: Tap | None,
          hooks: LayerHooks | None, moe: MoeBlock = moe_ffn) -> tuple[np.ndarray, Graph]:
    """Validate a decode's inputs and embed its tokens: ``(h (n_pos, n_embd) float32, graph)``
    (the arguments of :func:`decode`; raises as it does)."""
    s = weights.spec
    tokens, positions, rows = decode_inputs(tokens, positions, s.n_vocab, state.n, out_rows)
    is_out = np.zeros(tokens.size, dtype=bool)
    is_out[rows] = True
    routing = Routing(tokens.size, s.n_layer, s.n_expert_used, lambda j: weights.layers[j].ffn_gate_inp, numerics,
                      hooks)
    g = Graph(s, numerics, state, positions, state.n, rows, is_out, routing, tap or (lambda name, il, a: None), moe)
    return weights.token_embd.rows(tokens), g                                   # [n_pos, n_embd]


def attention_in(h: np.ndarray, L: LayerWeights, il: int, g: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``a = rms_norm(h) * attn_norm``; ``q, k, v`` projected, q and k normed per head and rotated:
    ``(n_pos, n_head, head_dim)``, ``(n_pos, n_head_kv, head_dim)``, ``(n_pos, n_head_kv, head_dim_v)``."""
    s, num, eps = g.spec, g.numerics, g.spec.rms_eps
    n_pos, hd = h.shape[0], s.head_dim_k
    a = rms_norm(h, L.attn_norm, eps)
    g.tap("attn_norm", il, a)
    q = linear(L.attn_q, a, num).reshape(n_pos, s.n_head, hd)                  # [n_pos, n_head, head_dim]
    k = linear(L.attn_k, a, num).reshape(n_pos, s.n_head_kv, hd)               # [n_pos, n_head_kv, head_dim]
    v = linear(L.attn_v, a, num).reshape(n_pos, s.n_head_kv, s.head_dim_v)
    q = rope_neox(rms_norm(q, L.attn_q_norm, eps), g.positions, s.n_rot, s.rope_freq_base, num)
    k = rope_neox(rms_norm(k, L.attn_k_norm, eps), g.positions, s.n_rot, s.rope_freq_base, num)
    return q, k, v


def kv_store(il: int, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: Graph) -> tuple[np.ndarray, np.ndarray]:
    """``kv[il] <- k, v`` at this decode's positions; returns the layer's keys and values ``0..start+n_pos-1``."""
    g.tap("Qcur", il, q)
    g.tap("Kcur", il, k)
    g.tap("Vcur", il, v)
    g.state.write(il, g.start, k, v)
    return g.state.view(il, g.start + k.shape[0])


def attend_and_route(h: np.ndarray, q: np.ndarray, kc: np.ndarray, vc: np.ndarray, L: LayerWeights, il: int,
                     g: Graph) -> tuple:
    """Attention, the output projection and residual, then the router on the routed rows (the last-layer
    rule). Returns ``(h, rows, f, logits_e, ids, w, margin)``: the residual stream ``(n_pos, n_embd)``, the
    routed rows ``(n_act,)``, their FFN input, router logits ``(n_act, n_expert)`` and top-k."""
    s, num = g.spec, g.numerics
    n_pos = h.shape[0]
    o = attention(q, kc, vc, g.positions).reshape(n_pos, s.n_head * s.head_dim_v)   # [n_pos, n_head*head_dim]
    g.tap("kqv_out", il, o)
    h = h + linear(L.attn_output, o, num)                                       # [n_pos, n_embd]
    g.tap("ffn_inp", il, h)
    rows = g.routed_rows(il)
    f = rms_norm(h[rows], L.ffn_norm, s.rms_eps)                                # [n_act, n_embd]
    g.tap("ffn_norm", il, f)
    logits_e = linear(L.ffn_gate_inp, f, num)                                   # [n_act, n_expert]
    g.tap("ffn_moe_logits", il, logits_e)
    ids, w, m = route_topk(logits_e, s.n_expert_used)                           # [n_act, k]
    g.tap("ffn_moe_topk", il, ids)
    g.tap("ffn_moe_weights_norm", il, w)
    return h, rows, f, logits_e, ids, w, m


def moe_out(h: np.ndarray, rows: np.ndarray, f: np.ndarray, logits_e: np.ndarray, ids: np.ndarray, w: np.ndarray,
            m: np.ndarray, L: LayerWeights, il: int, g: Graph) -> np.ndarray:
    """The streaming hooks (:meth:`Routing.route_layer`), the routed experts on the rows' FFN input and the
    residual: the block's output ``(n_pos, n_embd)``."""
    ids, w = g.routing.route_layer(il, rows, f, logits_e, ids, w, m)
    y = g.moe(f, ids, w, L.experts, g.numerics)                                # [n_act, n_embd]
    g.tap("ffn_moe_out", il, y)
    out = h.copy()
    out[rows] = h[rows] + y
    g.tap("l_out", il, out)
    return out


def layer(h: np.ndarray, L: LayerWeights, il: int, g: Graph) -> np.ndarray:
    """One block (nanoGPT's ``Block``; the body of llama.cpp's qwen3moe.cpp layer loop): attention,
    then the routed experts. ``h (n_pos, n_embd)`` in, the block's output out."""
    q, k, v = attention_in(h, L, il, g)
    kc, vc = kv_store(il, q, k, v, g)
    h, rows, f, logits_e, ids, w, m = attend_and_route(h, q, kc, vc, L, il, g)
    return moe_out(h, rows, f, logits_e, ids, w, m, L, il, g)


def finish(weights: Weights, h: np.ndarray, g: Graph) -> DecodeResult:
    """Advance the KV cache; the output norm and logits of the output rows; the result."""
    g.state.advance(h.shape[0])
    rows = g.out_rows
    hn = rms_norm(h[rows], weights.output_norm, g.spec.rms_eps)                 # [n_out, n_embd]
    g.tap("result_norm", -1, hn)
    logits = linear(weights.output, hn, g.numerics)                            # [n_out, n_vocab]
    g.tap("result_output", -1, logits)
    return DecodeResult(logits=logits, out_rows=rows, margin=logit_margin(logits), **g.routing.result_fields())


def decode(weights: Weights, state: KVCache, tokens: np.ndarray, positions: np.ndarray,
           numerics: Numerics = Numerics(), out_rows: np.ndarray | None = None,
           tap: Tap | None = None, hooks: LayerHooks | None = None, *, moe: MoeBlock = moe_ffn) -> DecodeResult:
    """Decode ``tokens`` at ``positions``, appending them to the KV cache (the readable pass).

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
    hooks : LayerHooks, optional
        The streaming knobs' hooks (:mod:`refsim.streaming.hooks`), called after each layer's
        router in the order of :meth:`refsim.forward.routing.Routing.route_layer`:

        - ``ahead`` (``--route-ahead N``): where ``ahead.commits(il)``, layer il's selection is the
          ranking of its router on layer il−N's gate input, with its true renormalised weights;
          ``routes`` and ``weights`` hold the committed routing (what the engine's trace records).
        - ``ahead`` or ``predictor`` (``--predict-prefetch``): at layer il the pass ranks layer
          il+N's (il+2's) router on layer il's gate input (the batch's last routed position) and
          records it (``pred_routes``, ``pred_weights`` and ``gate.predicted``).
        - ``probe`` (``--predict-log``): handed the last routed position's ids and gate input, and
          a ranking function over any layer's router.
        - ``gate`` (the drop seam, :func:`refsim.streaming.drop.gate_layer`): asked whether
          ``--drop-cold-experts`` applies and which ids are resident; the rule is applied to the
          routing the experts use and the router's routing reported. The pass never counts bytes.
          ``routes`` / ``weights`` stay the router's; ``dropped`` marks the drops.
    moe : callable, default :func:`refsim.forward.layers.moe_ffn`
        The routed-experts block (:data:`MoeBlock`).

    Returns
    -------
    DecodeResult

    Raises
    ------
    ConfigError
        Token ids out of range, non-contiguous positions, bad ``out_rows``.

    Notes
    -----
    With ``ggml`` numerics the target runs :func:`refsim.forward.fused.qwen3moe_decode` instead
    (:mod:`refsim.forward.passes`): the same blocks with one-position fused kernels, same bits.
    """
    h, g = start(weights, state, tokens, positions, numerics, out_rows, tap, hooks, moe)
    for il, L in enumerate(weights.layers):
        h = layer(h, L, il, g)
    return finish(weights, h, g)
