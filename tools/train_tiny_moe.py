#!/usr/bin/env python3
"""Train a tiny qwen3moe-layout MoE on the Python standard library and write it as GGUF.

Usage (the command that made the committed files; see docs/real-moe.md)::

    python3 tools/train_tiny_moe.py --out-dir models

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
4. **Training.** AdamW, linear warm-up then cosine decay, cross-entropy on every position plus
   the Switch-Transformer load-balancing loss (Fedus et al. 2021, eq. 4; Qwen's
   ``load_balancing_loss_func``): ``aux = E * sum_e f_e * P_e`` with ``f_e`` the fraction of the
   ``T * k`` routed slots that chose expert ``e`` and ``P_e`` its mean router probability,
   averaged over layers, weight ``--aux-coef``. Seeded (``torch.manual_seed``), deterministic
   algorithms, one thread (``torch.set_num_threads(1)``): the same command gives the same bytes.
5. **Files.** ``tiny-moe-q8_0.gguf`` (every matrix Q8_0) and ``tiny-moe-q4_k_m.gguf``
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

def build_model_class():
    import torch
    import torch.nn.functional as F
    from torch import nn

    def rms_norm(x, w, eps):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    class TinyMoE(nn.Module):
        """The qwen3moe graph (refsim/forward/qwen3moe.py) with the output tied to the embedding."""

        def __init__(self, c):
            super().__init__()
            self.c = c
            D, H, KV, hd, E, Fx, V, L = (c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"], c["n_expert"],
                                         c["n_ff_exp"], c["n_vocab"], c["n_layer"])
            p = lambda *shape, std: nn.Parameter(torch.randn(*shape) * std)  # noqa: E731
            out_std = 0.02 / math.sqrt(2 * L)
            self.token_embd = p(V, D, std=0.02)
            self.output_norm = nn.Parameter(torch.ones(D))
            self.layers = nn.ModuleList()
            for _ in range(L):
                m = nn.Module()
                m.attn_norm = nn.Parameter(torch.ones(D))
                m.attn_q = p(H * hd, D, std=0.02)
                m.attn_k = p(KV * hd, D, std=0.02)
                m.attn_v = p(KV * hd, D, std=0.02)
                m.attn_output = p(D, H * hd, std=out_std)
                m.attn_q_norm = nn.Parameter(torch.ones(hd))
                m.attn_k_norm = nn.Parameter(torch.ones(hd))
                m.ffn_norm = nn.Parameter(torch.ones(D))
                m.ffn_gate_inp = p(E, D, std=0.02)
                m.ffn_gate_exps = p(E, Fx, D, std=0.02)
                m.ffn_up_exps = p(E, Fx, D, std=0.02)
                m.ffn_down_exps = p(E, D, Fx, std=out_std)
                self.layers.append(m)
            half = hd // 2
            inv = c["rope_base"] ** (-2.0 * torch.arange(half, dtype=torch.float64) / hd)
            ang = torch.arange(c["n_ctx"], dtype=torch.float64)[:, None] * inv[None, :]
            self.register_buffer("cos", ang.cos().float(), persistent=False)
            self.register_buffer("sin", ang.sin().float(), persistent=False)

        def rope(self, x):                      # x [B, T, heads, hd]; NEOX: pairs (i, i + hd/2)
            T, half = x.shape[1], x.shape[-1] // 2
            cos, sin = self.cos[:T, None, :], self.sin[:T, None, :]
            x0, x1 = x[..., :half], x[..., half:]
            return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1)

        def moe(self, m, f):
            """f [N, D] -> (out [N, D], aux scalar, ids [N, k])."""
            c = self.c
            E, k = c["n_expert"], c["n_expert_used"]
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

        def forward(self, tokens, return_routes=False):
            c = self.c
            B, T = tokens.shape
            H, KV, hd, eps = c["n_head"], c["n_head_kv"], c["head_dim"], c["eps"]
            h = self.token_embd[tokens]
            aux_total = h.new_zeros(())
            routes = []
            for m in self.layers:
                a = rms_norm(h, m.attn_norm, eps)
                q = (a @ m.attn_q.t()).view(B, T, H, hd)
                kk = (a @ m.attn_k.t()).view(B, T, KV, hd)
                v = (a @ m.attn_v.t()).view(B, T, KV, hd)
                q = self.rope(rms_norm(q, m.attn_q_norm, eps))
                kk = self.rope(rms_norm(kk, m.attn_k_norm, eps))
                rep = H // KV
                kk = kk.repeat_interleave(rep, dim=2)
                v = v.repeat_interleave(rep, dim=2)
                o = F.scaled_dot_product_attention(q.transpose(1, 2), kk.transpose(1, 2), v.transpose(1, 2),
                                                   is_causal=True)                          # [B, H, T, hd]
                h = h + o.transpose(1, 2).reshape(B, T, H * hd) @ m.attn_output.t()
                f = rms_norm(h, m.ffn_norm, eps).reshape(B * T, -1)
                y, aux, ids = self.moe(m, f)
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

    return TinyMoE


def gguf_dims(c: dict) -> dict:
    return dict(n_layer=c["n_layer"], n_embd=c["n_embd"], n_head=c["n_head"], n_head_kv=c["n_head_kv"],
                head_dim=c["head_dim"], n_expert=c["n_expert"], n_expert_used=c["n_expert_used"],
                n_ff_exp=c["n_ff_exp"], n_ff=c["n_ff_exp"] * c["n_expert_used"], n_vocab=c["n_vocab"],
                n_ctx=c["n_ctx"], eps=c["eps"], rope_base=c["rope_base"])


def write_gguf(model, vocab, path: str, quant: str) -> str:
    from refsim.model import write_weights
    return write_weights(path, "qwen3moe", model.gguf_tensors(), quant=quant, dims=gguf_dims(model.c),
                         vocab=vocab, name=f"refsim tiny-moe (stdlib) {quant}")


def agreement(model, vocab, tokens: np.ndarray, tmpdir: str) -> dict:
    """Torch logits/routes vs refsim's reference pass (exact numerics) on an F32 GGUF of ``model``."""
    import torch
    from refsim.forward import Numerics, qwen3moe
    from refsim.model import open_model
    path = write_gguf(model, vocab, os.path.join(tmpdir, "check-f32.gguf"), "F32")
    m = open_model(path)
    res = qwen3moe.decode(qwen3moe.load_weights(m), qwen3moe.new_state(m.spec, len(tokens)), tokens,
                          np.arange(len(tokens)), Numerics("exact"))
    with torch.no_grad():
        lt, _, rt = model(torch.as_tensor(tokens[None].astype(np.int64)), return_routes=True)
    lt, rt = lt[0].numpy(), rt[0].numpy()
    d = np.abs(lt - res.logits)
    # every row asks for logits here, so refsim routes the last layer on every row too
    same_route = (np.sort(res.routes, -1) == np.sort(rt, -1)).all(-1)                # [n, n_layer]
    return dict(n_tokens=int(len(tokens)), max_abs_dlogit=float(d.max()),
                max_rel_dlogit=float(d.max() / np.abs(res.logits).max()),
                argmax_equal=float((lt.argmax(1) == res.logits.argmax(1)).mean()),
                route_sets_equal=float(same_route.mean()))


# --- training -----------------------------------------------------------------------------------

def held_out_loss(model, stream: np.ndarray, T: int, n_windows: int) -> float:
    """Mean cross-entropy (nats/token) over ``n_windows`` evenly spaced windows of ``T + 1`` tokens."""
    import torch
    import torch.nn.functional as F
    starts = np.linspace(0, len(stream) - T - 2, n_windows).astype(np.int64)
    tot, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, n_windows, 8):
            idx = starts[i:i + 8]
            x = torch.as_tensor(np.stack([stream[s:s + T] for s in idx]).astype(np.int64))
            y = torch.as_tensor(np.stack([stream[s + 1:s + T + 1] for s in idx]).astype(np.int64))
            logits, _ = model(x)
            tot += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"))
            n += y.numel()
    return tot / n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", default="models")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--ckpt", help="torch checkpoint to write (default OUT_DIR/../.cache path under /tmp)")
    ap.add_argument("--from-ckpt", help="skip training: load this checkpoint and write the files")
    ap.add_argument("--check-only", action="store_true", help="only the torch-vs-refsim check on the initial weights")
    ap.add_argument("--bench-steps", type=int, default=0, help="time this many steps and exit")
    a = ap.parse_args(argv)

    import tempfile

    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(a.seed)
    from refsim.model.tokenizer import Tokenizer

    t0 = time.time()
    docs = load_corpus()
    digest = corpus_digest(docs)
    train_docs = [d for d in docs if not is_held_out(d[0])]
    held_docs = [d for d in docs if is_held_out(d[0])]
    print(f"corpus: {len(docs)} documents ({len(held_docs)} held out), "
          f"{sum(len(t) for _, t in docs) / 2**20:.2f} MiB of text, sha256 {digest}", flush=True)
    vocab = train_tokenizer(train_docs, CONFIG["n_vocab"])
    tok = Tokenizer.from_metadata(vocab_metadata(vocab), "<trained vocab>")
    train = tokenize_docs(tok, train_docs)
    held = tokenize_docs(tok, held_docs)
    held_prose = tokenize_docs(tok, [d for d in held_docs if d[0].startswith("doc/")])
    t_prep = time.time() - t0
    print(f"tokens: train {train.size}, held-out {held.size} (prose {held_prose.size}); "
          f"{sum(len(t) for _, t in train_docs) / train.size:.2f} chars/token; prep {t_prep:.0f} s", flush=True)

    TinyMoE = build_model_class()
    model = TinyMoE(CONFIG)
    T = CONFIG["n_ctx"]
    with tempfile.TemporaryDirectory(prefix="refsim-train-") as tmp:
        check0 = agreement(model, vocab, held[:96], tmp)
        print(f"torch vs refsim (initial weights): {check0}", flush=True)
        if a.check_only:
            return 0
        ckpt = a.ckpt or os.path.join(tempfile.gettempdir(), f"refsim-tiny-moe-seed{a.seed}.pt")
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
                logits, aux = model(x)
                ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
                loss = ce + a.aux_coef * aux
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                if step % 25 == 0 or step == steps - 1:
                    el = time.time() - t1
                    log.append(dict(step=step, ce=ce.item(), aux=aux.item(), lr=lr, s=round(el, 1)))
                    print(f"step {step:5d} ce {ce.item():.4f} aux {aux.item():.4f} lr {lr:.2e} {el:.0f} s", flush=True)
            train_s = time.time() - t1
            if a.bench_steps:
                print(f"{steps} steps in {train_s:.1f} s: {train_s / steps:.2f} s/step")
                return 0
            torch.save({"model": model.state_dict(), "log": log, "train_s": train_s}, ckpt)
            print(f"checkpoint: {ckpt}", flush=True)
        model.eval()
        loss_held = held_out_loss(model, held, T, a.eval_windows)
        loss_prose = held_out_loss(model, held_prose, T, min(a.eval_windows, 32))
        loss_train = held_out_loss(model, train, T, a.eval_windows)
        print(f"loss (nats/token): held-out {loss_held:.4f}, held-out prose {loss_prose:.4f}, train {loss_train:.4f}",
              flush=True)
        check = agreement(model, vocab, held[:128], tmp)
        print(f"torch vs refsim (trained): {check}", flush=True)
        os.makedirs(a.out_dir, exist_ok=True)
        files = {}
        for quant, fname in (("Q8_0", "tiny-moe-q8_0.gguf"), ("mixed", "tiny-moe-q4_k_m.gguf")):
            p = write_gguf(model, vocab, os.path.join(a.out_dir, fname), quant)
            with open(p, "rb") as fh:
                files[fname] = dict(quant=quant, bytes=os.path.getsize(p), sha256=hashlib.sha256(fh.read()).hexdigest())
            print(f"{p}: {files[fname]}", flush=True)
    report = dict(config=CONFIG, args={k: v for k, v in vars(a).items() if k not in ("ckpt", "from_ckpt", "out_dir")},
                  corpus_sha256=digest, n_docs=len(docs), n_held_out_docs=len(held_docs),
                  tokens=dict(train=int(train.size), held_out=int(held.size), held_out_prose=int(held_prose.size)),
                  train_seconds=round(train_s, 1), prep_seconds=round(t_prep, 1),
                  loss=dict(held_out=loss_held, held_out_prose=loss_prose, train_sample=loss_train),
                  torch_vs_refsim=dict(initial=check0, trained=check), files=files, log=log,
                  python=sys.version.split()[0], torch=torch.__version__)
    from refsim.fileio import atomic_path
    out = os.path.join(a.out_dir, "tiny-moe.train.json")
    with atomic_path(out, "--out-dir", suffix=".json.tmp") as tmpf:
        with open(tmpf, "w") as fh:
            json.dump(report, fh, indent=1)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
