#!/usr/bin/env python3
"""Train a tiny qwen3moe- or qwen35moe-layout MoE on the Python standard library and write it as GGUF.

Usage (the commands that made the committed files; see docs/real-moe.md)::

    python3 tools/train_tiny_moe.py --steps 1000 --out-dir models                      # tiny-moe-*
    python3 tools/train_tiny_moe.py --arch qwen35moe --steps 200 --batch 4 --warmup 20 --out-dir models   # tiny-moe35-*

Needs the optional extra ``train`` (``pip install 'refsim[train]'``: torch, sentencepiece).
torch is never a runtime dependency of refsim; only this script imports it.

What it does, in order:

1. **Corpus.** Every ``*.py`` file of the running interpreter's standard library
   (``sysconfig.get_paths()['stdlib']``; no ``site-packages``, no ``test``/``tests`` packages,
   no ``idle_test``) as code, and the prose of the library reference's topics
   (``pydoc_data/topics.py``: the text ``help()`` prints) as docs. A document is held out when
   ``zlib.crc32(name) % 20 == 0`` (code) or ``% 5 == 0`` (prose topics). The corpus digest (sha256 over names and texts)
   is printed and stored in the report: another Python version gives another corpus.
2. **Tokenizer.** A SentencePiece BPE model trained on the training documents' lines
   (identity normalisation, no dummy prefix, whitespace kept, byte fallback, ``"\\n"`` a
   user-defined piece, one thread), stored in the GGUF as an SPM ("llama") vocabulary the way
   llama.cpp's ``convert_hf_to_gguf.py`` stores one: pieces, scores and token types copied
   (UNKNOWN 2, CONTROL 3, USER_DEFINED 4, BYTE 6, else NORMAL 1). The corpus is then tokenized
   with :class:`refsim.model.tokenizer.Tokenizer` built from exactly those GGUF fields, so the
   training ids are the ids refsim and llama.cpp produce.
3. **Model.** :class:`TinyMoE` is the graph of :mod:`refsim.forward.qwen3moe` (llama.cpp
   ``src/models/qwen3moe.cpp``) written in torch: RMSNorm ``x / sqrt(mean(x^2) + eps) * w``;
   q/k RMSNorm per head before NEOX RoPE over the whole head; causal GQA attention (query head
   ``h`` reads kv head ``h // (n_head / n_head_kv)``) scaled by ``1/sqrt(head_dim)``; the router
   softmax over all experts, top-k, always renormalised; SwiGLU experts; the output tied to
   ``token_embd`` (``output.weight`` absent). Before anything long is written the script checks
   the torch logits against refsim's reference pass on the same tokens (an F32 GGUF of the
   initial weights, then of the trained ones).
   With ``--arch qwen35moe``, :class:`TinyMoE35` is the graph of :mod:`refsim.forward.qwen35moe`
   and :mod:`refsim.forward.delta_net` (llama.cpp ``src/models/qwen35moe.cpp``): gated delta net
   layers (causal depthwise conv + SiLU, L2-normed q/k, tiled value->key heads, decay
   ``softplus(alpha + dt) * -exp(A_log)``, the delta rule, gated RMSNorm; in torch the rule runs
   chunked, :func:`build_model_class`'s ``gated_delta_rule``) with gated full attention at every
   ``full_attention_interval``-th layer (``[q | gate]`` rows per head, IMRoPE on the first
   ``rope.dimension_count`` dims), the shared expert behind a per-token sigmoid, and the MTP
   block ``blk.{n_layer}`` trained on the token after next: row ``p`` = ``eh_proj [rms_norm(E x_p)
   * enorm | rms_norm(h_{p-1}) * hnorm]`` (``h`` after ``output_norm``; zeros for row 0, as
   llama.cpp's draft context begins), one gated-attention MoE block, ``shared_head_norm``, the
   shared tied head; loss ``ce + mtp_coef * ce_mtp`` (both on ``x_{p+1}``), as the DeepSeek-V3 /
   Qwen3-Next MTP objective. The check then covers the MTP head's logits and experts too
   (:func:`refsim.forward.qwen35moe.mtp_decode` with its own KV).
4. **Training.** AdamW, linear warm-up then cosine decay, cross-entropy on every position plus
   the Switch-Transformer load-balancing loss (Fedus et al. 2021, eq. 4; Qwen's
   ``load_balancing_loss_func``): ``aux = E * sum_e f_e * P_e`` with ``f_e`` the fraction of the
   ``T * k`` routed slots that chose expert ``e`` and ``P_e`` its mean router probability,
   averaged over layers, weight ``--aux-coef``. Seeded (``torch.manual_seed``), deterministic
   algorithms, one thread (``torch.set_num_threads(1)``): the same command gives the same bytes.
5. **Files.** ``tiny-moe-q8_0.gguf`` (every matrix Q8_0) and ``tiny-moe-q4_k_m.gguf`` (``tiny-moe35-*`` for qwen35moe)
   (refsim's ``mixed``: Q4_K with Q6_K ``attn_v``/``ffn_down_exps`` on llama.cpp's
   ``use_more_bits`` layers, rows that are not a multiple of 256 falling back to Q8_0), written by
   :func:`refsim.model.write_weights`, and ``tiny-moe.train.json`` (config, time, losses, digests).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import sys
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIG = dict(n_layer=4, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_expert=32, n_expert_used=4,
              n_ff_exp=64, n_vocab=2048, n_ctx=256, eps=1e-6, rope_base=10000.0)
"""The model: 4 layers, n_embd 256, GQA 4/2 heads of 64, 32 experts of 64, top-4, vocab 2048, ctx 256."""

CONFIG35 = dict(arch="qwen35moe", n_layer=4, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_expert=32,
                n_expert_used=4, n_ff_exp=32, n_ff_shexp=128, n_vocab=2048, n_ctx=256, eps=1e-6, rope_base=10000.0,
                full_attention_interval=4, ssm_conv=4, ssm_state=64, ssm_group=2, ssm_dt_rank=4, rope_dim=16,
                rope_sections=(3, 3, 2, 0))
"""The qwen35moe model: 4 trunk layers (gated delta net at 0-2, gated attention at 3: Qwen3-Next's
``full_attention_interval`` 4) and one MTP block; n_embd 256; attention 4/2 heads of 64, RoPE on
the first 16 dims (a quarter of the head, as Qwen3.5's 64 of 256) with IMRoPE sections 3/3/2
covering all 8 pairs; delta net 2 key heads and 4 value heads of 64, conv kernel 4; 32 experts of
32, top-4, shared expert 128; vocab 2048 (the qwen3moe model's tokenizer), ctx 256."""

HELD_OUT_MOD = 20
HELD_OUT_PROSE_MOD = 5
EXCLUDED_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__", "pydoc_data"}
NEWLINE = "\n"


# --- corpus -------------------------------------------------------------------------------------

def load_corpus(root: str | None = None) -> list[tuple[str, str]]:
    """``[(name, text)]``: stdlib sources (``py/<relpath>``) and library-reference topics (``doc/<key>``).

    Sorted by name; texts decoded as UTF-8 with ``errors='replace'``; ``\\r\\n`` -> ``\\n``.
    """
    import sysconfig
    root = root or sysconfig.get_paths()["stdlib"]
    docs = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in EXCLUDED_DIRS)
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(d, f)
                with open(p, "rb") as fh:
                    text = fh.read().decode("utf-8", errors="replace").replace("\r\n", "\n")
                docs.append(("py/" + os.path.relpath(p, root).replace(os.sep, "/"), text))
    ns: dict = {}
    with open(os.path.join(root, "pydoc_data", "topics.py"), "rb") as fh:
        exec(compile(fh.read(), "topics.py", "exec"), ns)  # the stdlib's own data file: a dict of str
    for key in sorted(ns["topics"]):
        docs.append(("doc/" + key, ns["topics"][key]))
    docs.sort()
    return docs


def is_held_out(name: str) -> bool:
    """Held-out documents: ``zlib.crc32(name) % 20 == 0`` for code, ``% 5 == 0`` for the prose
    topics (only 79 of them: one in 20 would hold out a few hundred tokens of prose)."""
    return zlib.crc32(name.encode()) % (HELD_OUT_PROSE_MOD if name.startswith("doc/") else HELD_OUT_MOD) == 0


def corpus_digest(docs: list[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for n, t in docs:
        h.update(n.encode() + b"\0" + t.encode("utf-8", errors="replace") + b"\0")
    return h.hexdigest()


# --- tokenizer ----------------------------------------------------------------------------------

def train_tokenizer(docs: list[tuple[str, str]], vocab_size: int) -> tuple[list[str], list[float], list[int]]:
    """SentencePiece BPE on the documents' lines -> the GGUF vocab ``(pieces, scores, types)``."""
    import sentencepiece as spm
    spm.set_random_generator_seed(0)
    lines = [ln for _, t in docs for ln in t.split("\n") if ln.strip()]
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=buf, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, normalization_rule_name="identity", add_dummy_prefix=False,
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True, split_digits=True,
        user_defined_symbols=["\u2424"], character_coverage=0.9995, max_sentence_length=1 << 16,
        input_sentence_size=0, shuffle_input_sentence=False, num_threads=1, unk_id=0, bos_id=1, eos_id=2,
        pad_id=-1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=buf.getvalue())
    pieces, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        p = sp.id_to_piece(i)
        if p == "\u2424":       # placeholder for the user-defined newline piece (lines hold no "\n")
            pieces.append(NEWLINE); types.append(4)
        else:
            pieces.append(p)
            types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i) else 1)
        scores.append(float(sp.get_score(i)))
    return pieces, scores, types


def vocab_metadata(vocab) -> dict:
    """The ``tokenizer.ggml.*`` keys :func:`refsim.model.write_weights` stores for ``vocab``."""
    pieces, scores, types = vocab
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": pieces,
            "tokenizer.ggml.scores": np.asarray(scores, np.float32),
            "tokenizer.ggml.token_type": np.asarray(types, np.int32), "tokenizer.ggml.bos_token_id": 1,
            "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
            "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_space_prefix": False}


def tokenize_docs(tok, docs) -> np.ndarray:
    """One stream: ``<s> doc </s> <s> doc </s> ...`` (int32)."""
    out = []
    for _, t in docs:
        out.append(tok.encode(t, add_bos=True))
        out.append(np.array([tok.eos_id], np.int32))
    return np.concatenate(out).astype(np.int32)


# --- the model (torch) --------------------------------------------------------------------------

def rope_tables(c: dict) -> tuple[np.ndarray, np.ndarray]:
    """``(cos, sin)`` float32 ``[n_ctx, n_rot/2]`` of the arch's RoPE, read off refsim's own rotation.

    qwen3moe: NEOX over the whole head (``n_rot = head_dim``), angles in float64 as below.
    qwen35moe: refsim's :func:`refsim.forward.qwen35moe.imrope` (NEOX on the first ``n_rot`` dims,
    pairs outside ``rope.dimension_sections`` unrotated) applied to the vector that is 1 on the
    first half of each pair, so its output *is* the table (cos on the first half, sin on the
    second; 1 and 0 on an unrotated pair) and the torch model rotates exactly as refsim does.
    """
    if c.get("arch", "qwen3moe") == "qwen3moe":
        hd = c["head_dim"]
        inv = c["rope_base"] ** (-2.0 * np.arange(hd // 2, dtype=np.float64) / hd)
        ang = np.arange(c["n_ctx"], dtype=np.float64)[:, None] * inv[None, :]
        return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    from types import SimpleNamespace

    from refsim.forward import Numerics
    from refsim.forward.qwen35moe import imrope
    half = c["rope_dim"] // 2
    x = np.zeros((c["n_ctx"], 1, c["head_dim"]), np.float32)
    x[:, 0, :half] = 1.0
    spec = SimpleNamespace(n_rot=c["rope_dim"], rope_freq_base=c["rope_base"], rope_sections=tuple(c["rope_sections"]))
    out = imrope(x, np.arange(c["n_ctx"], dtype=np.int64), spec, Numerics("exact"))[:, 0]
    return np.ascontiguousarray(out[:, :half]), np.ascontiguousarray(out[:, half:2 * half])


def build_model_class(arch: str = "qwen3moe"):
    """The torch model class of ``arch``: :class:`TinyMoE` (qwen3moe) or :class:`TinyMoE35` (qwen35moe).

    Both share the parameter init, RMSNorm, RoPE, GQA attention and the routed-expert MoE with
    its load-balancing term; the qwen35moe class adds the gated delta net, gated attention, the
    shared expert and the MTP block.
    """
    import torch
    import torch.nn.functional as F
    from torch import nn

    def rms_norm(x, w, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def param(*shape, std):
        return nn.Parameter(torch.randn(*shape) * std)

    def routed_moe(m, f, E, k):
        """Softmax router, top-k renormalised, SwiGLU experts. f [N, D] -> (out [N, D], aux, ids [N, k]).

        ``aux = E * sum_e f_e * P_e`` (the Switch/Qwen load-balancing loss, module docstring)."""
        probs = torch.softmax(f @ m.ffn_gate_inp.t(), -1)   # [N, E]
        w, ids = torch.topk(probs, k, -1)
        w = w / w.sum(-1, keepdim=True).clamp_min(6.103515625e-5)
        flat_ids = ids.reshape(-1)
        tok = torch.arange(f.shape[0], device=f.device).repeat_interleave(k)
        order = torch.argsort(flat_ids, stable=True)
        counts = torch.bincount(flat_ids, minlength=E)
        out = torch.zeros_like(f)
        flat_w = w.reshape(-1)
        start = 0
        for e, n in enumerate(counts.tolist()):
            if n == 0:
                continue
            sel = order[start:start + n]
            start += n
            t = tok[sel]
            x = f[t]
            h = F.silu(x @ m.ffn_gate_exps[e].t()) * (x @ m.ffn_up_exps[e].t())
            out.index_add_(0, t, (h @ m.ffn_down_exps[e].t()) * flat_w[sel, None])
        frac = counts.to(f.dtype) / flat_ids.numel()
        aux = E * (frac * probs.mean(0)).sum()
        return out, aux, ids

    def add_experts(m, c, out_std):
        D, E, Fx = c["n_embd"], c["n_expert"], c["n_ff_exp"]
        m.ffn_gate_inp = param(E, D, std=0.02)
        m.ffn_gate_exps = param(E, Fx, D, std=0.02)
        m.ffn_up_exps = param(E, Fx, D, std=0.02)
        m.ffn_down_exps = param(E, D, Fx, std=out_std)

    def add_attention(m, c, out_std, q_mult):
        D, H, KV, hd = c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"]
        m.attn_q = param(q_mult * H * hd, D, std=0.02)
        m.attn_k = param(KV * hd, D, std=0.02)
        m.attn_v = param(KV * hd, D, std=0.02)
        m.attn_output = param(D, H * hd, std=out_std)
        m.attn_q_norm = nn.Parameter(torch.ones(hd))
        m.attn_k_norm = nn.Parameter(torch.ones(hd))

    class Base(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.c = c
            cos, sin = rope_tables(c)
            self.register_buffer("cos", torch.as_tensor(cos), persistent=False)
            self.register_buffer("sin", torch.as_tensor(sin), persistent=False)

        def rope(self, x):                      # x [B, T, heads, hd]; NEOX: pairs (i, i + n_rot/2)
            T, half = x.shape[1], self.cos.shape[1]
            cos, sin = self.cos[:T, None, :], self.sin[:T, None, :]
            x0, x1, rest = x[..., :half], x[..., half:2 * half], x[..., 2 * half:]
            return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos, rest], -1)

        def attend(self, m, a):
            """q/k-normed, roped causal GQA attention of ``a [B, T, D]`` -> ``(o [B, T, H*hd], extra)``,
            ``extra`` the rest of each head's ``attn_q`` rows (qwen35moe's gate; empty for qwen3moe)."""
            c = self.c
            B, T, _ = a.shape
            H, KV, hd, eps = c["n_head"], c["n_head_kv"], c["head_dim"], c["eps"]
            qx = (a @ m.attn_q.t()).view(B, T, H, -1)                 # per head [q | gate] (qwen35moe)
            q, extra = qx[..., :hd], qx[..., hd:]
            kk = (a @ m.attn_k.t()).view(B, T, KV, hd)
            v = (a @ m.attn_v.t()).view(B, T, KV, hd)
            q = self.rope(rms_norm(q, m.attn_q_norm, eps))
            kk = self.rope(rms_norm(kk, m.attn_k_norm, eps))
            rep = H // KV                        # query head h reads kv head h // rep
            kk = kk.repeat_interleave(rep, dim=2)
            v = v.repeat_interleave(rep, dim=2)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), kk.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True)                               # [B, H, T, hd]
            return o.transpose(1, 2).reshape(B, T, H * hd), extra.reshape(B, T, -1)

    class TinyMoE(Base):
        """The qwen3moe graph (refsim/forward/qwen3moe.py) with the output tied to the embedding."""

        def __init__(self, c):
            super().__init__(c)
            D, V, L = c["n_embd"], c["n_vocab"], c["n_layer"]
            out_std = 0.02 / math.sqrt(2 * L)
            self.token_embd = param(V, D, std=0.02)
            self.output_norm = nn.Parameter(torch.ones(D))
            self.layers = nn.ModuleList()
            for _ in range(L):
                m = nn.Module()
                m.attn_norm = nn.Parameter(torch.ones(D))
                add_attention(m, c, out_std, 1)
                m.ffn_norm = nn.Parameter(torch.ones(D))
                add_experts(m, c, out_std)
                self.layers.append(m)

        def forward(self, tokens, return_routes=False):
            c = self.c
            B, T = tokens.shape
            eps = c["eps"]
            h = self.token_embd[tokens]
            aux_total = h.new_zeros(())
            routes = []
            for m in self.layers:
                o, _ = self.attend(m, rms_norm(h, m.attn_norm, eps))
                h = h + o @ m.attn_output.t()
                f = rms_norm(h, m.ffn_norm, eps).reshape(B * T, -1)
                y, aux, ids = routed_moe(m, f, c["n_expert"], c["n_expert_used"])
                routes.append(ids.view(B, T, -1))
                aux_total = aux_total + aux
                h = h + y.view(B, T, -1)
            logits = rms_norm(h, self.output_norm, eps) @ self.token_embd.t()
            aux_total = aux_total / len(self.layers)
            if return_routes:
                return logits, aux_total, torch.stack(routes, 2)                           # [B, T, L, k]
            return logits, aux_total

        def gguf_tensors(self) -> dict:
            """name -> float32 ndarray in the GGUF layout (NumPy shapes; no output.weight: tied)."""
            t = {"token_embd.weight": self.token_embd, "output_norm.weight": self.output_norm}
            for il, m in enumerate(self.layers):
                for name in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
                             "ffn_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
                    t[f"blk.{il}.{name}.weight"] = getattr(m, name)
            return {k: v.detach().cpu().numpy().astype(np.float32) for k, v in t.items()}

    def gated_delta_rule(q, k, v, g, beta, chunk):
        """The gated delta rule of :mod:`refsim.forward.delta_net` over a whole sequence, chunked.

        q, k [B, T, H, Dk] (L2-normed, q scaled), v [B, T, H, Dv], g (log decay, <= 0) and
        beta [B, T, H]; state zero at t = 0. Per head the recurrence ``S <- e^g S;
        d = beta (v - S^T k); S <- S + k d^T; o = S^T q`` is, inside a chunk with cumulative
        decay ``G_t`` and the chunk's initial state ``S0``, the unit-lower-triangular system
        ``(I + L) D = beta V - (beta e^G K) S0`` with ``L[t, s] = beta_t e^(G_t - G_s) k_t.k_s``
        (s < t), then ``O = (e^G Q) S0 + (Q K^T * e^(G_t - G_s), s <= t) D`` and
        ``S_end = e^(G_C) S0 + sum_s e^(G_C - G_s) k_s d_s^T`` (the WY/chunk form of Yang et al.
        2024, "Gated Delta Networks", arXiv:2412.06464). Mathematically the token-by-token rule;
        the training script's check against refsim measures the float difference.
        """
        B, T, H, Dk = k.shape
        Dv = v.shape[-1]
        n = T // chunk
        assert n * chunk == T, (T, chunk)
        tr = lambda x: x.transpose(1, 2).reshape(B, H, n, chunk, *x.shape[3:])  # noqa: E731
        q, k, v, g, beta = tr(q), tr(k), tr(v), tr(g), tr(beta)
        G = g.cumsum(-1)                                                         # [B, H, n, C]
        incl = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool))
        strict = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool), -1)
        decay = torch.exp((G[..., :, None] - G[..., None, :]).masked_fill(~incl, float("-inf")))
        L = (beta[..., None] * (k @ k.transpose(-1, -2)) * decay).masked_fill(~strict, 0.0)
        eye = torch.eye(chunk, dtype=k.dtype)
        eG = G.exp()
        rhs = torch.cat([beta[..., None] * v, (beta * eG)[..., None] * k], -1)
        X = torch.linalg.solve_triangular(eye + L, rhs, upper=False, unitriangular=True)
        U, W = X[..., :Dv], X[..., Dv:]                                          # D = U - W S0
        qk = (q @ k.transpose(-1, -2)) * decay
        S = k.new_zeros(B, H, Dk, Dv)
        outs = []
        for i in range(n):
            Dc = U[:, :, i] - W[:, :, i] @ S
            outs.append((q[:, :, i] * eG[:, :, i, :, None]) @ S + qk[:, :, i] @ Dc)
            S = (eG[:, :, i, -1, None, None] * S
                 + (k[:, :, i] * torch.exp(G[:, :, i, -1:] - G[:, :, i])[..., None]).transpose(-1, -2) @ Dc)
        return torch.stack(outs, 2).reshape(B, H, T, Dv).transpose(1, 2)       # [B, T, H, Dv]

    class TinyMoE35(Base):
        """The qwen35moe graph (refsim/forward/qwen35moe.py, delta_net.py; llama.cpp
        ``src/models/qwen35moe.cpp``) with its MTP block, the output tied to the embedding.

        Trunk layer ``il`` is full (gated) attention iff ``(il + 1) % full_attention_interval == 0``,
        else a gated delta net; every layer's FFN is the routed experts plus the sigmoid-gated
        shared expert. The MTP block ``blk.{n_layer}``: row ``p`` gets token ``x_p`` and the trunk's
        post-``output_norm`` state of ``p - 1`` (zeros for row 0, as llama.cpp's draft context
        starts), ``eh_proj [rms_norm(E x_p) enorm | rms_norm(h_{p-1}) hnorm]``, one gated-attention
        MoE block, ``shared_head_norm``, the shared (tied) head; trained on ``x_{p+1}``, the token
        after next as seen from ``h_{p-1}``.
        """

        def __init__(self, c):
            super().__init__(c)
            D, V, L = c["n_embd"], c["n_vocab"], c["n_layer"]
            Hk, Dk, Hv = c["ssm_group"], c["ssm_state"], c["ssm_dt_rank"]
            Cv = 2 * Hk * Dk + Hv * Dk                     # conv channels (Dv = Dk: inner_size = Dk * Hv)
            out_std = 0.02 / math.sqrt(2 * (L + 1))
            self.token_embd = param(V, D, std=0.02)
            self.output_norm = nn.Parameter(torch.ones(D))
            self.layers = nn.ModuleList()
            for il in range(L + 1):
                m = nn.Module()
                m.recurrent = il < L and (il + 1) % c["full_attention_interval"] != 0
                m.attn_norm = nn.Parameter(torch.ones(D))
                if m.recurrent:
                    m.attn_qkv = param(Cv, D, std=0.02)
                    m.attn_gate = param(Hv * Dk, D, std=0.02)
                    m.ssm_conv1d = nn.Parameter(torch.empty(Cv, c["ssm_conv"]).uniform_(-0.5, 0.5))
                    m.ssm_dt = nn.Parameter(torch.ones(Hv))                  # dt bias (Qwen3-Next init)
                    m.A_log = nn.Parameter(torch.empty(Hv).uniform_(1.0, 16.0).log())
                    m.ssm_beta = param(Hv, D, std=0.02)
                    m.ssm_alpha = param(Hv, D, std=0.02)
                    m.ssm_norm = nn.Parameter(torch.ones(Dk))
                    m.ssm_out = param(D, Hv * Dk, std=out_std)
                else:
                    add_attention(m, c, out_std, 2)
                m.post_attention_norm = nn.Parameter(torch.ones(D))
                add_experts(m, c, out_std)
                S = c["n_ff_shexp"]
                m.ffn_gate_inp_shexp = param(D, std=0.02)
                m.ffn_gate_shexp = param(S, D, std=0.02)
                m.ffn_up_shexp = param(S, D, std=0.02)
                m.ffn_down_shexp = param(D, S, std=out_std)
                self.layers.append(m)
            self.eh_proj = param(D, 2 * D, std=0.02)
            self.enorm = nn.Parameter(torch.ones(D))
            self.hnorm = nn.Parameter(torch.ones(D))
            self.shared_head_norm = nn.Parameter(torch.ones(D))

        def delta_net(self, m, a):
            c = self.c
            B, T, _ = a.shape
            Hk, Dk, Hv, eps = c["ssm_group"], c["ssm_state"], c["ssm_dt_rank"], c["eps"]
            K = c["ssm_conv"]
            mix = a @ m.attn_qkv.t()                                             # [B, T, C]
            z = (a @ m.attn_gate.t()).view(B, T, Hv, Dk)
            beta = torch.sigmoid(a @ m.ssm_beta.t())                             # [B, T, Hv]
            g = F.softplus(a @ m.ssm_alpha.t() + m.ssm_dt) * -torch.exp(m.A_log)  # ssm_a = -exp(A_log)
            # causal depthwise conv (state zero at t = 0), W[:, K-1] on the newest input, then SiLU
            u = F.silu(F.conv1d(F.pad(mix.transpose(1, 2), (K - 1, 0)), m.ssm_conv1d[:, None, :],
                                groups=mix.shape[-1])).transpose(1, 2)
            q = u[..., :Hk * Dk].reshape(B, T, Hk, Dk)
            kk = u[..., Hk * Dk:2 * Hk * Dk].reshape(B, T, Hk, Dk)
            v = u[..., 2 * Hk * Dk:].reshape(B, T, Hv, Dk)
            q = q / q.norm(dim=-1, keepdim=True).clamp_min(eps) / math.sqrt(Dk)
            kk = kk / kk.norm(dim=-1, keepdim=True).clamp_min(eps)
            q, kk = q.repeat(1, 1, Hv // Hk, 1), kk.repeat(1, 1, Hv // Hk, 1)   # tiled: value head h reads h % Hk
            o = gated_delta_rule(q, kk, v, g, beta, math.gcd(T, 64))
            y = rms_norm(o, m.ssm_norm, eps) * F.silu(z)                         # gated RMSNorm per head
            return y.reshape(B, T, Hv * Dk) @ m.ssm_out.t()

        def gated_attention(self, m, a):
            o, gate = self.attend(m, a)
            return (o * torch.sigmoid(gate)) @ m.attn_output.t()

        def block(self, m, h):
            """One block: mixer, then routed + shared experts. -> (h, aux, ids [B, T, k])."""
            c = self.c
            B, T, _ = h.shape
            a = rms_norm(h, m.attn_norm, c["eps"])
            h = h + (self.delta_net(m, a) if m.recurrent else self.gated_attention(m, a))
            f = rms_norm(h, m.post_attention_norm, c["eps"]).reshape(B * T, -1)
            y, aux, ids = routed_moe(m, f, c["n_expert"], c["n_expert_used"])
            sh = (F.silu(f @ m.ffn_gate_shexp.t()) * (f @ m.ffn_up_shexp.t())) @ m.ffn_down_shexp.t()
            y = y + sh * torch.sigmoid(f @ m.ffn_gate_inp_shexp)[:, None]
            return h + y.view(B, T, -1), aux, ids.view(B, T, -1)

        def forward(self, tokens, return_routes=False):
            """-> ``(logits, aux, mtp_logits)`` [B, T, V] (and routes [B, T, n_layer + 1, k]).

            ``mtp_logits[:, p]`` is the head's guess of ``tokens[:, p + 1]``, as ``logits[:, p]`` is."""
            c = self.c
            eps = c["eps"]
            h = self.token_embd[tokens]
            aux_total = h.new_zeros(())
            routes = []
            for m in self.layers[:-1]:
                h, aux, ids = self.block(m, h)
                aux_total = aux_total + aux
                routes.append(ids)
            hn = rms_norm(h, self.output_norm, eps)                             # h_nextn
            logits = hn @ self.token_embd.t()
            h_prev = torch.cat([torch.zeros_like(hn[:, :1]), hn[:, :-1]], 1)
            x = torch.cat([rms_norm(self.token_embd[tokens], self.enorm, eps), rms_norm(h_prev, self.hnorm, eps)], -1)
            hm, aux, ids = self.block(self.layers[-1], x @ self.eh_proj.t())
            aux_total = (aux_total + aux) / len(self.layers)
            routes.append(ids)
            mtp_logits = rms_norm(hm, self.shared_head_norm, eps) @ self.token_embd.t()
            if return_routes:
                return logits, aux_total, mtp_logits, torch.stack(routes, 2)
            return logits, aux_total, mtp_logits

        def gguf_tensors(self) -> dict:
            """name -> float32 ndarray in the GGUF layout (refsim.model.synth.tensor_plan; no output.weight)."""
            t = {"token_embd.weight": self.token_embd, "output_norm.weight": self.output_norm}
            for il, m in enumerate(self.layers):
                names = ["attn_norm", "post_attention_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps",
                         "ffn_down_exps", "ffn_gate_inp_shexp", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"]
                if m.recurrent:
                    names += ["attn_qkv", "attn_gate", "ssm_conv1d", "ssm_beta", "ssm_alpha", "ssm_norm", "ssm_out"]
                    t[f"blk.{il}.ssm_dt.bias"] = m.ssm_dt
                    t[f"blk.{il}.ssm_a"] = -torch.exp(m.A_log)
                else:
                    names += ["attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm"]
                for name in names:
                    t[f"blk.{il}.{name}.weight"] = getattr(m, name)
            il = len(self.layers) - 1
            for name in ("eh_proj", "enorm", "hnorm", "shared_head_norm"):
                t[f"blk.{il}.nextn.{name}.weight"] = getattr(self, name)
            return {k: v.detach().cpu().numpy().astype(np.float32) for k, v in t.items()}

    return TinyMoE if arch == "qwen3moe" else TinyMoE35


def gguf_dims(c: dict) -> dict:
    d = dict(n_layer=c["n_layer"], n_embd=c["n_embd"], n_head=c["n_head"], n_head_kv=c["n_head_kv"],
             head_dim=c["head_dim"], n_expert=c["n_expert"], n_expert_used=c["n_expert_used"],
             n_ff_exp=c["n_ff_exp"], n_ff=c["n_ff_exp"] * c["n_expert_used"], n_vocab=c["n_vocab"],
             n_ctx=c["n_ctx"], eps=c["eps"], rope_base=c["rope_base"])
    if c.get("arch") == "qwen35moe":
        d.update(n_layer_35=c["n_layer"], **{k: c[k] for k in ("n_ff_shexp", "full_attention_interval", "ssm_conv",
                                                               "ssm_state", "ssm_group", "ssm_dt_rank", "rope_dim",
                                                               "rope_sections")})
    return d


def write_gguf(model, vocab, path: str, quant: str) -> str:
    from refsim.model import write_weights
    arch = model.c.get("arch", "qwen3moe")
    stem = "tiny-moe" if arch == "qwen3moe" else "tiny-moe35"
    return write_weights(path, arch, model.gguf_tensors(), quant=quant, dims=gguf_dims(model.c),
                         vocab=vocab, name=f"refsim {stem} (stdlib) {quant}", nextn=arch == "qwen35moe")


def _cmp(lt: np.ndarray, lr: np.ndarray, rt: np.ndarray, rr: np.ndarray) -> dict:
    """Logit and route-set agreement of torch (``lt``, ``rt``) and refsim (``lr``, ``rr``)."""
    d = np.abs(lt - lr)
    same_route = (np.sort(rr, -1) == np.sort(rt, -1)).all(-1)
    return dict(max_abs_dlogit=float(d.max()), max_rel_dlogit=float(d.max() / np.abs(lr).max()),
                argmax_equal=float((lt.argmax(1) == lr.argmax(1)).mean()), route_sets_equal=float(same_route.mean()))


def agreement(model, vocab, tokens: np.ndarray, tmpdir: str) -> dict:
    """Torch logits/routes vs refsim's reference pass (exact numerics) on an F32 GGUF of ``model``.

    qwen35moe: also the MTP head (``mtp_*``): refsim's :func:`refsim.forward.qwen35moe.mtp_decode`
    over the same tokens with its own KV, row ``p`` carrying the trunk's ``h_nextn[p - 1]`` (zeros
    for row 0), against the torch head's logits and routed experts."""
    import torch
    from refsim.forward import Numerics, qwen35moe, qwen3moe
    from refsim.model import open_model
    path = write_gguf(model, vocab, os.path.join(tmpdir, "check-f32.gguf"), "F32")
    m = open_model(path)
    n = len(tokens)
    pos = np.arange(n)
    with torch.no_grad():
        out = model(torch.as_tensor(tokens[None].astype(np.int64)), return_routes=True)
    if m.spec.arch == "qwen3moe":
        res = qwen3moe.decode(qwen3moe.load_weights(m), qwen3moe.new_state(m.spec, n), tokens, pos, Numerics("exact"))
        # every row asks for logits here, so refsim routes the last layer on every row too
        return dict(n_tokens=int(n), **_cmp(out[0][0].numpy(), res.logits, out[2][0].numpy(), res.routes))
    w = qwen35moe.load_weights(m)
    res = qwen35moe.decode(w, qwen35moe.new_state(m.spec, n), tokens, pos, Numerics("exact"))
    h_prev = np.concatenate([np.zeros((1, m.spec.n_embd), np.float32), res.h_nextn[:-1]])
    mtp = qwen35moe.mtp_decode(w, qwen35moe.new_mtp_state(m.spec, n), tokens, pos, h_prev, Numerics("exact"))
    lt, mt, rt = (out[i][0].numpy() for i in (0, 2, 3))
    trunk = _cmp(lt, res.logits, rt[:, :-1], res.routes)
    head = _cmp(mt, mtp.logits, rt[:, -1], mtp.routes)
    return dict(n_tokens=int(n), **trunk, **{"mtp_" + k: v for k, v in head.items()})


# --- training -----------------------------------------------------------------------------------

def losses(model, x, y):
    """``(ce, ce_mtp, aux)`` of one batch: mean cross-entropy of the output on ``y`` (the next
    tokens), of the MTP head on the same ``y`` (qwen35moe; ``None`` for qwen3moe: the head's row
    ``p`` reads ``h_{p-1}``, so ``y[p]`` is the token after next from there) and the
    load-balancing term."""
    import torch.nn.functional as F
    out = model(x)
    ce = lambda lg: F.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1))  # noqa: E731
    return ce(out[0]), (ce(out[2]) if len(out) > 2 else None), out[1]


def held_out_loss(model, stream: np.ndarray, T: int, n_windows: int) -> tuple[float, float | None]:
    """Mean cross-entropy (nats/token) of the output and of the MTP head (``None`` without one)
    over ``n_windows`` evenly spaced windows of ``T + 1`` tokens."""
    import torch
    starts = np.linspace(0, len(stream) - T - 2, n_windows).astype(np.int64)
    tot, tot_mtp, n = 0.0, 0.0, 0
    with torch.no_grad():
        for i in range(0, n_windows, 8):
            idx = starts[i:i + 8]
            x = torch.as_tensor(np.stack([stream[s:s + T] for s in idx]).astype(np.int64))
            y = torch.as_tensor(np.stack([stream[s + 1:s + T + 1] for s in idx]).astype(np.int64))
            ce, ce_mtp, _ = losses(model, x, y)
            tot += float(ce) * y.numel()
            tot_mtp += float(ce_mtp) * y.numel() if ce_mtp is not None else 0.0
            n += y.numel()
    return tot / n, (tot_mtp / n if model.c.get("arch") == "qwen35moe" else None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=("qwen3moe", "qwen35moe"), default="qwen3moe",
                    help="qwen3moe: tiny-moe-*.gguf (CONFIG); qwen35moe: tiny-moe35-*.gguf with the MTP block (CONFIG35)")
    ap.add_argument("--out-dir", default="models")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--mtp-coef", type=float, default=0.3, help="qwen35moe: weight of the MTP head's cross-entropy")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--ckpt", help="torch checkpoint to write (default under the temp directory)")
    ap.add_argument("--from-ckpt", help="skip training: load this checkpoint and write the files")
    ap.add_argument("--check-only", action="store_true", help="only the torch-vs-refsim check on the initial weights")
    ap.add_argument("--bench-steps", type=int, default=0, help="time this many steps and exit")
    a = ap.parse_args(argv)

    import tempfile

    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(a.seed)
    from refsim.model.tokenizer import Tokenizer

    cfg = CONFIG if a.arch == "qwen3moe" else CONFIG35
    stem = "tiny-moe" if a.arch == "qwen3moe" else "tiny-moe35"
    t0 = time.time()
    docs = load_corpus()
    digest = corpus_digest(docs)
    train_docs = [d for d in docs if not is_held_out(d[0])]
    held_docs = [d for d in docs if is_held_out(d[0])]
    print(f"corpus: {len(docs)} documents ({len(held_docs)} held out), "
          f"{sum(len(t) for _, t in docs) / 2**20:.2f} MiB of text, sha256 {digest}", flush=True)
    vocab = train_tokenizer(train_docs, cfg["n_vocab"])
    tok = Tokenizer.from_metadata(vocab_metadata(vocab), "<trained vocab>")
    train = tokenize_docs(tok, train_docs)
    held = tokenize_docs(tok, held_docs)
    held_prose = tokenize_docs(tok, [d for d in held_docs if d[0].startswith("doc/")])
    t_prep = time.time() - t0
    print(f"tokens: train {train.size}, held-out {held.size} (prose {held_prose.size}); "
          f"{sum(len(t) for _, t in train_docs) / train.size:.2f} chars/token; prep {t_prep:.0f} s", flush=True)

    model = build_model_class(a.arch)(cfg)
    T = cfg["n_ctx"]
    with tempfile.TemporaryDirectory(prefix="refsim-train-") as tmp:
        check0 = agreement(model, vocab, held[:96], tmp)
        print(f"torch vs refsim (initial weights): {check0}", flush=True)
        if a.check_only:
            return 0
        ckpt = a.ckpt or os.path.join(tempfile.gettempdir(), f"refsim-{stem}-seed{a.seed}.pt")
        log = []
        if a.from_ckpt:
            state = torch.load(a.from_ckpt, weights_only=False)
            model.load_state_dict(state["model"])
            log, train_s = state["log"], state["train_s"]
        else:
            decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
            no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
            opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                                     {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
            g = np.random.default_rng(a.seed)
            steps = a.bench_steps or a.steps
            t1 = time.time()
            for step in range(steps):
                lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
                for grp in opt.param_groups:
                    grp["lr"] = lr
                starts = g.integers(0, train.size - T - 1, a.batch)
                x = torch.as_tensor(np.stack([train[s:s + T] for s in starts]).astype(np.int64))
                y = torch.as_tensor(np.stack([train[s + 1:s + T + 1] for s in starts]).astype(np.int64))
                ce, ce_mtp, aux = losses(model, x, y)
                loss = ce + a.aux_coef * aux + (a.mtp_coef * ce_mtp if ce_mtp is not None else 0.0)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                if step % 25 == 0 or step == steps - 1:
                    el = time.time() - t1
                    row = dict(step=step, ce=ce.item(), aux=aux.item(), lr=lr, s=round(el, 1))
                    if ce_mtp is not None:
                        row["ce_mtp"] = ce_mtp.item()
                    log.append(row)
                    print(f"step {step:5d} ce {ce.item():.4f}" + (f" mtp {ce_mtp.item():.4f}" if ce_mtp is not None else "")
                          + f" aux {aux.item():.4f} lr {lr:.2e} {el:.0f} s", flush=True)
            train_s = time.time() - t1
            if a.bench_steps:
                print(f"{steps} steps in {train_s:.1f} s: {train_s / steps:.2f} s/step")
                return 0
            torch.save({"model": model.state_dict(), "log": log, "train_s": train_s}, ckpt)
            print(f"checkpoint: {ckpt}", flush=True)
        model.eval()
        loss_held, mtp_held = held_out_loss(model, held, T, a.eval_windows)
        loss_prose, mtp_prose = held_out_loss(model, held_prose, T, min(a.eval_windows, 32))
        loss_train, mtp_train = held_out_loss(model, train, T, a.eval_windows)
        print(f"loss (nats/token): held-out {loss_held:.4f}, held-out prose {loss_prose:.4f}, train {loss_train:.4f}"
              + (f"; MTP head (token after next): held-out {mtp_held:.4f}, prose {mtp_prose:.4f}, train {mtp_train:.4f}"
                 if mtp_held is not None else ""), flush=True)
        check = agreement(model, vocab, held[:128], tmp)
        print(f"torch vs refsim (trained): {check}", flush=True)
        os.makedirs(a.out_dir, exist_ok=True)
        files = {}
        for quant, fname in (("Q8_0", f"{stem}-q8_0.gguf"), ("mixed", f"{stem}-q4_k_m.gguf")):
            p = write_gguf(model, vocab, os.path.join(a.out_dir, fname), quant)
            with open(p, "rb") as fh:
                files[fname] = dict(quant=quant, bytes=os.path.getsize(p), sha256=hashlib.sha256(fh.read()).hexdigest())
            print(f"{p}: {files[fname]}", flush=True)
    loss = dict(held_out=loss_held, held_out_prose=loss_prose, train_sample=loss_train)
    if mtp_held is not None:
        loss.update(mtp_held_out=mtp_held, mtp_held_out_prose=mtp_prose, mtp_train_sample=mtp_train)
    args = {k: v for k, v in vars(a).items() if k not in ("ckpt", "from_ckpt", "out_dir")}
    if a.arch == "qwen3moe":      # the keys the qwen3moe report was written with
        args = {k: v for k, v in args.items() if k not in ("arch", "mtp_coef")}
    report = dict(config=cfg, args=args,
                  corpus_sha256=digest, n_docs=len(docs), n_held_out_docs=len(held_docs),
                  tokens=dict(train=int(train.size), held_out=int(held.size), held_out_prose=int(held_prose.size)),
                  train_seconds=round(train_s, 1), prep_seconds=round(t_prep, 1),
                  loss=loss, torch_vs_refsim=dict(initial=check0, trained=check), files=files, log=log,
                  python=sys.version.split()[0], torch=torch.__version__)
    from refsim.fileio import atomic_path
    out = os.path.join(a.out_dir, f"{stem}.train.json")
    with atomic_path(out, "--out-dir", suffix=".json.tmp") as tmpf:
        with open(tmpf, "w") as fh:
            json.dump(report, fh, indent=1)
    print(out)
    return 0


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(main))
