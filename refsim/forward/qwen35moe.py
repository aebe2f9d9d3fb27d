"""Reference forward pass of ``qwen35moe`` (Qwen3.5/3.6 MoE): the hybrid trunk and the MTP head.

Reads top to bottom like llama.cpp's src/models/qwen35moe.cpp::

    h = token_embd[tokens]                                     # [n_pos, n_embd]
    for il in trunk layers:
        a = rms_norm(h) * attn_norm
        if recurrent(il):                                      # 3 of every 4 layers
            o = gated_delta_net(attn_qkv a, ssm_beta a, ssm_alpha a; conv + ssm state)
            y = rms_norm(o per value head) * ssm_norm * silu(attn_gate a)
            h = h + ssm_out y
        else:                                                  # every full_attention_interval-th
            [q | gate] = attn_q a  (interleaved per head);  k, v = attn_k a, attn_v a
            q, k = imrope(rms_norm(q) * q_norm), imrope(rms_norm(k) * k_norm)   # first n_rot dims
            h = h + attn_output( attention(q, kv[il]) * sigmoid(gate) )
        f = rms_norm(h) * post_attention_norm
        h = h + moe_ffn(f) + shexp(f) * sigmoid(ffn_gate_inp_shexp f)
    h_nextn = rms_norm(h) * output_norm                        # every position: the MTP input
    logits = output h_nextn[out_rows]

    MTP step (blk.{n_layer}), token x_p and h_{p-1}:
    c = eh_proj [rms_norm(E[x_p]) * enorm | rms_norm(h_{p-1}) * hnorm]
    c = c + gated_attention(rms_norm(c) * attn_norm; own KV)
    c = c + moe_ffn + shexp  (the head's own routed experts)
    h_mtp = rms_norm(c) * shared_head_norm;  logits = output h_mtp

Quirks and their sources (llama-cpp-notes.md §3):

- Layer ``il`` is full attention iff ``(il + 1) % full_attention_interval == 0`` (or
  ``attention.recurrent_layers``); the MTP block is never recurrent (§3.1).
- Gated delta net: tiled value-head -> key-head mapping, L2-normalised q/k, ``ssm_a`` stored as
  ``-exp(A_log)``, gated RMSNorm with ``ssm_norm`` *not* stored as ``w+1`` (§3.2, §3.4;
  :mod:`refsim.forward.delta_net`).
- Full attention: ``attn_q`` rows interleave ``[q_h | gate_h]`` per head; output multiplied by
  ``sigmoid(gate)`` before ``attn_output``; RoPE is IMROPE over ``rope.dimension_count`` dims,
  which for text (all position streams equal) is NEOX on those dims; a rotary pair not covered
  by ``rope.dimension_sections`` takes the ``e`` stream (position 0: no rotation) (§3.3).
- MoE: softmax, top-k, renormalised, plus the shared expert scaled by one sigmoid per token;
  ``routed + shared`` (§3.5).
- **No last-layer cut**: llama.cpp cuts the last layer's rows to the outputs only when
  ``embeddings_nextn_masked`` is set; otherwise every position is routed at every layer and
  rows are selected after ``output_norm`` (§1.3). refsim routes every position.
- The MTP head reads the target's hidden state **after** ``output_norm`` (§3.6, #24025);
  missing ``nextn.embed_tokens``/``shared_head_head``/``shared_head_norm`` fall back to
  ``token_embd``/``output``/``output_norm``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from refsim.errors import ConfigError, ModelFormatError
from refsim.forward.delta_net import gated_delta_net
from refsim.forward.kv import KVCache
from refsim.forward.layers import (ExpertWeights, Numerics, QWeight, attention, decode_inputs, linear, logit_margin,
                                   moe_ffn, rms_norm, rope_neox, swiglu)
from refsim.forward.loader import expert_weights, qweight, vector
from refsim.forward.recurrent import HybridState, RecurrentState
from refsim.forward.result import DecodeResult
from refsim.forward.routing import Routing, route_topk
from refsim.model import Model, ModelSpec
from refsim.streaming.drop import gate_layer
from refsim.streaming.hooks import LayerHooks

Tap = Callable[[str, int, np.ndarray], None]

MoeBlock = Callable[..., np.ndarray]
"""``moe(x, ids, weights, experts, numerics) -> (n_pos, n_embd)``: the routed-experts block a pass calls
(:func:`refsim.forward.layers.moe_ffn`, or :func:`refsim.forward.fused.moe_ffn` in a fused pass: same bits)."""

N_RS_SEQ_DEFAULT = 8
"""Snapshots a :func:`new_state` keeps by default: the engine sets ``n_rs_seq = draft_max``
(at most 8), so any loop can roll back (bmoe-engine.md §2)."""


@dataclass(frozen=True)
class FfnWeights:
    """Routed + shared experts of one block."""

    post_attention_norm: np.ndarray
    ffn_gate_inp: QWeight
    experts: ExpertWeights
    gate_inp_shexp: QWeight
    gate_shexp: QWeight
    up_shexp: QWeight
    down_shexp: QWeight


@dataclass(frozen=True)
class AttnWeights:
    """Gated full attention of one block."""

    attn_q: QWeight          # [2 * n_head * head_dim] rows: per head [q | gate]
    attn_k: QWeight
    attn_v: QWeight
    attn_output: QWeight
    attn_q_norm: np.ndarray
    attn_k_norm: np.ndarray


@dataclass(frozen=True)
class DeltaNetWeights:
    """Gated delta net of one block."""

    attn_qkv: QWeight
    attn_gate: QWeight
    ssm_beta: QWeight
    ssm_alpha: QWeight
    ssm_conv1d: np.ndarray   # (C, d_conv) float32
    ssm_dt: np.ndarray       # (Hv,)
    ssm_a: np.ndarray        # (Hv,) = -exp(A_log)
    ssm_norm: np.ndarray     # (Dv,)
    ssm_out: QWeight


@dataclass(frozen=True)
class BlockWeights:
    il: int
    attn_norm: np.ndarray
    mixer: AttnWeights | DeltaNetWeights
    ffn: FfnWeights


@dataclass(frozen=True)
class NextnWeights:
    """The MTP head ``blk.{n_layer}``: projections, its block, and its (fallback) head."""

    eh_proj: QWeight
    enorm: np.ndarray
    hnorm: np.ndarray
    embed: QWeight
    head_norm: np.ndarray
    head: QWeight
    block: BlockWeights


@dataclass(frozen=True)
class Weights:
    spec: ModelSpec
    token_embd: QWeight
    output_norm: np.ndarray
    output: QWeight
    layers: tuple[BlockWeights, ...]
    nextn: NextnWeights | None


@dataclass(frozen=True)
class Qwen35DecodeResult(DecodeResult):
    """:class:`DecodeResult` plus ``h_nextn (n_pos, n_embd) float32``: the post-``output_norm``
    hidden state of every fed position (llama.cpp ``t_h_nextn``, the MTP head's input)."""

    h_nextn: np.ndarray = None


@dataclass(frozen=True)
class MtpResult:
    """One decode of the MTP head.

    Attributes
    ----------
    logits : (n_pos, n_vocab) float32 ndarray
    h : (n_pos, n_embd) float32 ndarray
        ``h_mtp`` after the shared head norm (the next chained step's ``h``).
    routes : (n_pos, k) int16 ndarray
        The head's own routed experts (the router's).
    weights : (n_pos, k) float32 ndarray
    dropped : (n_pos, k) bool ndarray, optional
        Slots ``--drop-cold-experts`` dropped through the seam (None without it).
    """

    logits: np.ndarray
    h: np.ndarray
    routes: np.ndarray
    weights: np.ndarray
    dropped: np.ndarray | None = None


def _dims(s: ModelSpec) -> tuple[int, int, int, int]:
    """(Hk, Dk, Hv, Dv) of the gated delta net."""
    Hk, Dk, Hv = s.ssm_n_group, s.ssm_d_state, s.ssm_dt_rank
    if Hv <= 0 or s.ssm_d_inner % Hv or Hk <= 0 or Hv % Hk:
        raise ModelFormatError(f"qwen35moe: ssm dims time_step_rank {Hv}, group_count {Hk}, inner_size "
                               f"{s.ssm_d_inner}: need inner_size % time_step_rank == 0 and Hv % Hk == 0")
    return Hk, Dk, Hv, s.ssm_d_inner // Hv


def _ffn(model: Model, il: int) -> FfnWeights:
    s, b = model.spec, f"blk.{il}."
    gis = qweight(model, b + "ffn_gate_inp_shexp.weight")
    if gis.n_out != 1 or gis.n_in != s.n_embd:
        raise ModelFormatError(f"{model.path}: {b}ffn_gate_inp_shexp.weight must be [{s.n_embd}]")
    return FfnWeights(vector(model, b + "post_attention_norm.weight", s.n_embd), qweight(model, b + "ffn_gate_inp.weight"),
                      expert_weights(model, il), gis, qweight(model, b + "ffn_gate_shexp.weight"),
                      qweight(model, b + "ffn_up_shexp.weight"), qweight(model, b + "ffn_down_shexp.weight"))


def _attn(model: Model, il: int) -> AttnWeights:
    s, b = model.spec, f"blk.{il}."
    q = qweight(model, b + "attn_q.weight")
    if q.n_out != 2 * s.n_head * s.head_dim_k:
        raise ModelFormatError(f"{model.path}: {b}attn_q.weight has {q.n_out} outputs, expected "
                               f"2 * n_head * head_dim = {2 * s.n_head * s.head_dim_k} ([q | gate] per head)")
    return AttnWeights(q, qweight(model, b + "attn_k.weight"), qweight(model, b + "attn_v.weight"),
                       qweight(model, b + "attn_output.weight"), vector(model, b + "attn_q_norm.weight", s.head_dim_k),
                       vector(model, b + "attn_k_norm.weight", s.head_dim_k))


def _delta(model: Model, il: int) -> DeltaNetWeights:
    s, b = model.spec, f"blk.{il}."
    Hk, Dk, Hv, Dv = _dims(s)
    C = 2 * Hk * Dk + Hv * Dv
    conv = model.dequantize(b + "ssm_conv1d.weight")
    if conv.shape != (C, s.ssm_d_conv):
        raise ModelFormatError(f"{model.path}: {b}ssm_conv1d.weight has numpy shape {conv.shape}, "
                               f"expected ({C}, {s.ssm_d_conv})")
    return DeltaNetWeights(qweight(model, b + "attn_qkv.weight"), qweight(model, b + "attn_gate.weight"),
                           qweight(model, b + "ssm_beta.weight"), qweight(model, b + "ssm_alpha.weight"),
                           np.ascontiguousarray(conv, np.float32), vector(model, b + "ssm_dt.bias", Hv),
                           vector(model, b + "ssm_a", Hv), vector(model, b + "ssm_norm.weight", Dv),
                           qweight(model, b + "ssm_out.weight"))


def load_weights(model: Model) -> Weights:
    """Collect the weights of a qwen35moe model (memory-mapped views; norms as float32).

    Raises
    ------
    ModelFormatError
        Wrong arch, header-only file, inconsistent ssm dims, or a tensor of an unexpected shape.
    """
    s = model.spec
    if s.arch != "qwen35moe":
        raise ModelFormatError(f"{model.path}: arch {s.arch!r} is not qwen35moe")
    if not model.has_data:
        model.raw("token_embd.weight")  # raises the header-only error
    if s.n_rot % 2 or not 0 < s.n_rot <= s.head_dim_k:
        raise ModelFormatError(f"{model.path}: rope.dimension_count {s.n_rot} must be even and <= head_dim {s.head_dim_k}")
    layers = []
    for il in range(s.n_layer):
        mixer = _delta(model, il) if s.is_recurrent(il) else _attn(model, il)
        layers.append(BlockWeights(il, vector(model, f"blk.{il}.attn_norm.weight", s.n_embd), mixer, _ffn(model, il)))
    out_name = "output.weight" if "output.weight" in model.tensors else "token_embd.weight"
    output_norm = vector(model, "output_norm.weight", s.n_embd)
    output = qweight(model, out_name)
    embd = qweight(model, "token_embd.weight")
    nextn = None
    if s.nextn_predict_layers > 0:
        il = s.n_layer
        b = f"blk.{il}.nextn."
        opt = lambda n: b + n in model.tensors  # noqa: E731
        nextn = NextnWeights(
            eh_proj=qweight(model, b + "eh_proj.weight"), enorm=vector(model, b + "enorm.weight", s.n_embd),
            hnorm=vector(model, b + "hnorm.weight", s.n_embd),
            embed=qweight(model, b + "embed_tokens.weight") if opt("embed_tokens.weight") else embd,
            head_norm=vector(model, b + "shared_head_norm.weight", s.n_embd) if opt("shared_head_norm.weight")
            else output_norm,
            head=qweight(model, b + "shared_head_head.weight") if opt("shared_head_head.weight") else output,
            block=BlockWeights(il, vector(model, f"blk.{il}.attn_norm.weight", s.n_embd), _attn(model, il),
                               _ffn(model, il)))
        if nextn.eh_proj.n_in != 2 * s.n_embd or nextn.eh_proj.n_out != s.n_embd:
            raise ModelFormatError(f"{model.path}: {b}eh_proj.weight must be [{2 * s.n_embd}, {s.n_embd}]")
    return Weights(s, embd, output_norm, output, tuple(layers), nextn)


def new_state(spec: ModelSpec, capacity: int = 256, n_rs_seq: int = N_RS_SEQ_DEFAULT) -> HybridState:
    """Empty hybrid memory: KV for the trunk's attention layers, recurrent state with ``n_rs_seq`` snapshots."""
    Hk, Dk, Hv, Dv = _dims(spec)
    C = 2 * Hk * Dk + Hv * Dv
    attn = spec.attention_layers()
    rec = RecurrentState([il for il in range(spec.n_layer) if spec.is_recurrent(il)],
                         (spec.ssm_d_conv - 1, C), (Hv, Dk, Dv), n_rs_seq)
    return HybridState(KVCache(len(attn), spec.n_head_kv, spec.head_dim_k, spec.head_dim_v, capacity), attn, rec)


def new_mtp_state(spec: ModelSpec, capacity: int = 256) -> KVCache:
    """The MTP draft context's own KV (one attention layer; no recurrent state, ``n_rs_seq = 0``)."""
    return KVCache(1, spec.n_head_kv, spec.head_dim_k, spec.head_dim_v, capacity)


# --- blocks ---------------------------------------------------------------------------------
@np.errstate(over="ignore")
def _sigmoid(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    return (np.float32(1.0) / (np.float32(1.0) + np.exp(-x))).astype(np.float32)


@np.errstate(over="ignore")
def _silu(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    return (x / (np.float32(1.0) + np.exp(-x))).astype(np.float32)


def imrope(x: np.ndarray, positions: np.ndarray, s: ModelSpec, numerics: Numerics) -> np.ndarray:
    """IMROPE for text tokens: NEOX on the first ``n_rot`` dims; pairs not covered by the
    sections take position 0 (unrotated).

    Parameters
    ----------
    x : (n_pos, n_heads, head_dim) float32 ndarray
    positions : (n_pos,) int64 ndarray

    Returns
    -------
    (n_pos, n_heads, head_dim) float32 ndarray

    Notes
    -----
    Pair ``i`` (of ``n_rot / 2``) with ``q = i mod sum(sections)`` takes the t/h/w stream (all
    equal to the position for text) iff ``q % 3 == 0 and q < 3*sec0``, ``q % 3 == 1 and
    q < 3*sec1`` or ``q % 3 == 2 and q < 3*sec2``; else the ``e`` stream, 0 for text
    (ggml ``ggml_mrope_cache_init``; llama-cpp-notes.md §3.3).
    """
    out = rope_neox(x, positions, s.n_rot, s.rope_freq_base, numerics)
    sec = tuple(s.rope_sections) + (0,) * (4 - len(s.rope_sections))
    total = sum(sec[:4])
    half = s.n_rot // 2
    for i in range(half):
        q = i % total if total else 0
        covered = total and ((q % 3 == 0 and q < 3 * sec[0]) or (q % 3 == 1 and q < 3 * sec[1])
                             or (q % 3 == 2 and q < 3 * sec[2]))
        if not covered:
            out[..., i] = x[..., i]
            out[..., i + half] = x[..., i + half]
    return out


def gated_attention(W: AttnWeights, a: np.ndarray, kv: KVCache, slot: int, positions: np.ndarray,
                    s: ModelSpec, numerics: Numerics, t: Tap, il: int) -> np.ndarray:
    """Gated full attention: ``attn_output(attention(q, k, v) * sigmoid(gate))``.

    Parameters
    ----------
    a : (n_pos, n_embd) float32 ndarray
        ``rms_norm(h) * attn_norm``.
    kv : KVCache
        Written at ``positions`` in layer ``slot``.

    Returns
    -------
    (n_pos, n_embd) float32 ndarray
    """
    n_pos = a.shape[0]
    H, KV, hd = s.n_head, s.n_head_kv, s.head_dim_k
    qg = linear(W.attn_q, a, numerics).reshape(n_pos, H, 2 * hd)              # [n_pos, n_head, 2*head_dim]
    q, gate = qg[..., :hd], qg[..., hd:].reshape(n_pos, H * hd)               # per head [q | gate]
    k = linear(W.attn_k, a, numerics).reshape(n_pos, KV, hd)
    v = linear(W.attn_v, a, numerics).reshape(n_pos, KV, s.head_dim_v)
    q = imrope(rms_norm(q, W.attn_q_norm, s.rms_eps), positions, s, numerics)
    k = imrope(rms_norm(k, W.attn_k_norm, s.rms_eps), positions, s, numerics)
    t("Qcur", il, q)
    t("Kcur", il, k)
    start = int(positions[0])
    kv.write(slot, start, k, v)
    kc, vc = kv.view(slot, start + n_pos)
    o = attention(q, kc, vc, positions).reshape(n_pos, H * s.head_dim_v)      # [n_pos, n_head*head_dim]
    o = (o * _sigmoid(gate)).astype(np.float32)
    t("attn_gated", il, o)
    return linear(W.attn_output, o, numerics)                                 # [n_pos, n_embd]


def delta_net_block(W: DeltaNetWeights, a: np.ndarray, rec: RecurrentState, il: int, s: ModelSpec,
                    numerics: Numerics, t: Tap) -> np.ndarray:
    """Gated delta net mixer: projections, :func:`refsim.forward.delta_net.gated_delta_net`,
    gated RMSNorm per value head, ``ssm_out``.

    Returns
    -------
    (n_pos, n_embd) float32 ndarray
    """
    n_pos = a.shape[0]
    Hk, Dk, Hv, Dv = _dims(s)
    mix = linear(W.attn_qkv, a, numerics)                                     # [n_pos, 2*Hk*Dk + Hv*Dv]
    z = linear(W.attn_gate, a, numerics).reshape(n_pos, Hv, Dv)               # [n_pos, Hv, Dv]
    beta = linear(W.ssm_beta, a, numerics)                                    # [n_pos, Hv]
    alpha = linear(W.ssm_alpha, a, numerics)                                  # [n_pos, Hv]
    o, sc, ss = gated_delta_net(mix, beta, alpha, W.ssm_conv1d, W.ssm_dt, W.ssm_a, rec.conv[il], rec.ssm[il],
                                Hk, s.rms_eps, rec.n_snap())                  # [n_pos, Hv, Dv]
    rec.record(il, sc, ss)
    t("attn_output_delta", il, o)
    y = (rms_norm(o, W.ssm_norm, s.rms_eps) * _silu(z)).astype(np.float32)    # gated RMSNorm per head
    return linear(W.ssm_out, y.reshape(n_pos, Hv * Dv), numerics)             # [n_pos, n_embd]


def route(F: FfnWeights, f: np.ndarray, k: int, numerics: Numerics, t: Tap, il: int):
    """The block's router on its FFN input ``f (n_pos, n_embd)``: ``(logits_e (n_pos, n_expert), ids, w,
    margin)`` as :func:`refsim.forward.routing.route_topk` gives them."""
    logits_e = linear(F.ffn_gate_inp, f, numerics)                            # [n_pos, n_expert]
    t("ffn_moe_logits", il, logits_e)
    ids, w, m = route_topk(logits_e, k)
    t("ffn_moe_topk", il, ids)
    t("ffn_moe_weights_norm", il, w)
    return logits_e, ids, w, m


def experts_out(F: FfnWeights, f: np.ndarray, ids: np.ndarray, w: np.ndarray, numerics: Numerics, t: Tap, il: int,
                moe: MoeBlock = moe_ffn) -> np.ndarray:
    """Routed experts on ``ids``/``w`` plus the sigmoid-gated shared expert:
    ``moe(f) + shexp(f) * sigmoid(ffn_gate_inp_shexp . f)``, ``(n_pos, n_embd)`` float32."""
    routed = moe(f, ids, w, F.experts, numerics)                              # [n_pos, n_embd]
    t("ffn_moe_out", il, routed)
    sh = linear(F.down_shexp, swiglu(linear(F.gate_shexp, f, numerics), linear(F.up_shexp, f, numerics)), numerics)
    gate = _sigmoid(linear(F.gate_inp_shexp, f, numerics))                    # [n_pos, 1]
    t("shared_expert_gate_sigmoid", il, gate)
    return (routed + (sh * gate).astype(np.float32)).astype(np.float32)


@dataclass
class Graph:
    """One trunk decode (llama.cpp: one graph): what its layers share besides the hidden state ``h``.

    Attributes
    ----------
    spec : ModelSpec
    numerics : Numerics
    state : HybridState
    positions : (n_pos,) int64 ndarray
    out_rows : (n_out,) int64 ndarray
        Rows that produce logits.
    rows : (n_pos,) int64 ndarray
        Rows every layer routes: all of them (no last-layer cut, module docstring).
    routing : Routing
        The decode's routing record and hooks (:mod:`refsim.forward.routing`).
    tap : Tap
    moe : MoeBlock
    """

    spec: ModelSpec
    numerics: Numerics
    state: HybridState
    positions: np.ndarray
    out_rows: np.ndarray
    rows: np.ndarray
    routing: Routing
    tap: Tap
    moe: MoeBlock


def layer(h: np.ndarray, L: BlockWeights, g: Graph) -> np.ndarray:
    """One trunk block (nanoGPT's ``Block``; the body of llama.cpp's qwen35moe.cpp layer loop): the mixer
    (gated delta net or gated attention), then the routed and shared experts, each with its residual."""
    s, num, t, il = g.spec, g.numerics, g.tap, L.il
    a = rms_norm(h, L.attn_norm, s.rms_eps)
    t("attn_norm", il, a)
    if isinstance(L.mixer, DeltaNetWeights):
        mixed = delta_net_block(L.mixer, a, g.state.rec, il, s, num, t)
    else:
        mixed = gated_attention(L.mixer, a, g.state.kv, g.state.attn_index[il], g.positions, s, num, t, il)
    h = (h + mixed).astype(np.float32)
    t("ffn_inp", il, h)
    f = rms_norm(h, L.ffn.post_attention_norm, s.rms_eps)
    t("attn_post_norm", il, f)
    logits_e, ids, w, m = route(L.ffn, f, s.n_expert_used, num, t, il)
    ids, w = g.routing.route_layer(il, g.rows, f, logits_e, ids, w, m)
    h = (h + experts_out(L.ffn, f, ids, w, num, t, il, g.moe)).astype(np.float32)
    t("l_out", il, h)
    return h


def decode(weights: Weights, state: HybridState, tokens: np.ndarray, positions: np.ndarray,
           numerics: Numerics = Numerics(), out_rows: np.ndarray | None = None,
           tap: Tap | None = None, hooks: LayerHooks | None = None, *,
           moe: MoeBlock = moe_ffn) -> Qwen35DecodeResult:
    """Decode ``tokens`` at ``positions`` through the trunk, updating KV and recurrent state.

    Parameters
    ----------
    weights : Weights
    state : HybridState
        Holds positions ``0..state.n-1``; advanced by ``n_pos``.
    tokens : (n_pos,) int array
    positions : (n_pos,) int64 array
        ``state.n, state.n + 1, ...``.
    numerics : Numerics, default exact
    out_rows : (n_out,) int array, optional
        Rows that produce logits (default all). Every position is routed at every layer.
    tap : callable, optional
        ``tap(name, il, array)`` (llama.cpp ``cb`` names).
    hooks : LayerHooks, optional
        The streaming knobs' hooks, as in :func:`refsim.forward.qwen3moe.decode` (every position of a
        graph is routed here, so the stale gate's row is the batch's last position).
    moe : callable, default :func:`refsim.forward.layers.moe_ffn`
        The routed-experts block (:data:`MoeBlock`; the ``ggml`` pass of the target passes
        :func:`refsim.forward.fused.moe_ffn`).

    Returns
    -------
    Qwen35DecodeResult
        ``routes (n_pos, n_layer, k)``, logits of ``out_rows``, ``h_nextn`` of every position.

    Raises
    ------
    ConfigError
        Bad tokens, positions or ``out_rows``.
    """
    s = weights.spec
    tokens, positions, rows = decode_inputs(tokens, positions, s.n_vocab, state.n, out_rows)
    n_pos = tokens.size
    routing = Routing(n_pos, s.n_layer, s.n_expert_used, lambda j: weights.layers[j].ffn.ffn_gate_inp, numerics,
                      hooks)
    g = Graph(s, numerics, state, positions, rows, np.arange(n_pos), routing, tap or (lambda name, il, a: None),
              moe)
    state.rec.begin(n_pos)
    h = weights.token_embd.rows(tokens)                                       # [n_pos, n_embd]
    for L in weights.layers:
        h = layer(h, L, g)
    state.kv.advance(n_pos)
    state.rec.commit(n_pos)
    hn = rms_norm(h, weights.output_norm, s.rms_eps)                          # [n_pos, n_embd]
    g.tap("result_norm", -1, hn)
    logits = linear(weights.output, hn[rows], numerics)                       # [n_out, n_vocab]
    g.tap("result_output", -1, logits)
    return Qwen35DecodeResult(logits=logits, out_rows=rows, margin=logit_margin(logits), h_nextn=hn,
                              **routing.result_fields())


def mtp_decode(weights: Weights, kv: KVCache, tokens: np.ndarray, positions: np.ndarray, h_prev: np.ndarray,
               numerics: Numerics = Numerics(), tap: Tap | None = None, gate=None, *,
               moe: MoeBlock = moe_ffn) -> MtpResult:
    """One decode of the MTP head: row ``p`` gets token ``x_p`` and ``h_prev[p]`` = ``h_{p-1}``.

    Parameters
    ----------
    weights : Weights
        With ``nextn``.
    kv : KVCache
        The draft context's own KV (:func:`new_mtp_state`), holding ``0..kv.n-1``.
    tokens : (n_pos,) int array
    positions : (n_pos,) int64 array
        ``kv.n, kv.n + 1, ...``.
    h_prev : (n_pos, n_embd) float32 ndarray
        Target ``h_nextn`` of the previous position (or the head's own ``h`` when chaining).
    gate : LayerFeed-like, optional
        The drop seam for the head's MoE (layer index ``n_layer``), as the trunk's: the head's
        experts are "streamed, cached and dropped like any other layer's" (engine-docs/mtp.md,
        "How it is wired"). ``routes`` / ``weights`` stay the router's; ``dropped`` marks drops.
        The head takes no other hook.
    moe : callable, default :func:`refsim.forward.layers.moe_ffn`
        The routed-experts block (:data:`MoeBlock`).

    Returns
    -------
    MtpResult

    Raises
    ------
    ConfigError
        A model without the nextn block, bad tokens/positions, ``h_prev`` of the wrong shape.
    """
    s, N = weights.spec, weights.nextn
    if N is None:
        raise ConfigError("the model has no nextn (MTP) block (nextn_predict_layers = 0)")
    tokens, positions, _ = decode_inputs(tokens, positions, s.n_vocab, kv.n)
    n_pos = tokens.size
    h_prev = np.asarray(h_prev, dtype=np.float32)
    if h_prev.shape != (n_pos, s.n_embd):
        raise ConfigError(f"mtp: h_prev has shape {h_prev.shape}, expected ({n_pos}, {s.n_embd})")
    t = tap or (lambda name, il, a: None)
    il, eps = s.n_layer, s.rms_eps
    e = rms_norm(N.embed.rows(tokens), N.enorm, eps)                          # [n_pos, n_embd]
    hh = rms_norm(h_prev, N.hnorm, eps)                                       # [n_pos, n_embd]
    c = linear(N.eh_proj, np.concatenate([e, hh], axis=1), numerics)          # [n_pos, 2*n_embd] -> [n_pos, n_embd]
    t("mtp_eh_proj", il, c)
    B = N.block
    a = rms_norm(c, B.attn_norm, eps)
    c = (c + gated_attention(B.mixer, a, kv, 0, positions, s, numerics, t, il)).astype(np.float32)
    f = rms_norm(c, B.ffn.post_attention_norm, eps)
    _, ids, w, _ = route(B.ffn, f, s.n_expert_used, numerics, t, il)
    dropped = np.zeros((n_pos, s.n_expert_used), dtype=bool)
    use_ids, use_w = ids, w
    if gate is not None:         # the drop seam (refsim.streaming.drop.gate_layer); the router's ids are kept
        use_ids, use_w, dropped[:] = gate_layer(gate, il, np.arange(n_pos), ids, w)
    c = (c + experts_out(B.ffn, f, use_ids, use_w, numerics, t, il, moe)).astype(np.float32)
    kv.advance(n_pos)
    hm = rms_norm(c, N.head_norm, eps)                                        # [n_pos, n_embd]
    logits = linear(N.head, hm, numerics)                                     # [n_pos, n_vocab]
    t("mtp_logits", il, logits)
    return MtpResult(logits=logits, h=hm, routes=ids, weights=w,
                     dropped=dropped if gate is not None else None)
