"""``refsim inspect MODEL.gguf [--json] [-k N]``: architecture, hparams, per-layer bytes, totals."""

from __future__ import annotations

from refsim.errors import ConfigError

import json

from refsim import MIB
from refsim.cli.common import positive_int
from refsim.fmt import num


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("inspect", help="show a GGUF model's hparams and exact expert/dense bytes")
    p.add_argument("model", help="GGUF file (a header-only file works too)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("-k", "--n-expert-used", type=positive_int, default=None,
                   help="experts per token for T (default: the file's expert_used_count)")
    p.set_defaults(func=run)


def summary(path: str, k: int | None = None) -> dict:
    """The inspect report of one model as a JSON-ready dict (bytes are ints, MiB = 2**20 bytes)."""
    from refsim.model import open_model
    m = open_model(path)
    s, b = m.spec, m.bytes
    k = s.n_expert_used if k is None else k
    if s.n_expert and k > s.n_expert:
        raise ConfigError(f"-k/--n-expert-used {k}: {path} has only n_expert={s.n_expert}")
    return {
        "path": m.path, "arch": s.arch, "has_data": m.has_data,
        "n_layer": s.n_layer, "n_layer_all": s.n_layer_all, "nextn_predict_layers": s.nextn_predict_layers,
        "n_embd": s.n_embd, "n_head": s.n_head, "n_head_kv": s.n_head_kv,
        "head_dim_k": s.head_dim_k, "head_dim_v": s.head_dim_v, "n_ff": s.n_ff,
        "n_expert": s.n_expert, "n_expert_used": s.n_expert_used, "k": k,
        "n_ff_exp": s.n_ff_exp, "n_ff_shexp": s.n_ff_shexp, "n_vocab": s.n_vocab,
        "n_ctx_train": s.n_ctx_train, "rms_eps": s.rms_eps, "rope_freq_base": s.rope_freq_base, "n_rot": s.n_rot,
        "rope_sections": list(s.rope_sections), "full_attention_interval": s.full_attention_interval,
        "ssm": {"d_conv": s.ssm_d_conv, "d_state": s.ssm_d_state, "n_group": s.ssm_n_group,
                "dt_rank": s.ssm_dt_rank, "d_inner": s.ssm_d_inner},
        "layers": [{"il": lb.il, "nextn": lb.is_nextn,
                    "kind": ("nextn" if lb.is_nextn else "recurrent" if s.is_recurrent(lb.il) else "attention"),
                    "expert_bytes": lb.expert_bytes, "dense_bytes": lb.dense_bytes,
                    "shared_expert_bytes": lb.shared_expert_bytes,
                    "expert_types": {suffix: t for suffix, t in lb.expert_types}} for lb in b.layers],
        "total_expert_bytes": b.total_expert_bytes, "trunk_expert_bytes": b.trunk_expert_bytes,
        "total_dense_bytes": b.total_dense_bytes, "global_bytes": b.global_bytes,
        "file_tensor_bytes": b.file_tensor_bytes,
        "t_bytes": b.t_bytes(k), "t_mib": b.t_bytes(k) / MIB, "t_nextn_bytes": b.t_bytes(k, nextn=True),
        "kv_bytes_per_token": b.kv_bytes_per_token, "kv_bytes_per_token_nextn": b.kv_bytes_per_token_nextn,
        "recurrent_bytes_per_seq": b.recurrent_bytes_per_seq,
    }


def render(r: dict) -> str:
    """Human-readable tables of a :func:`summary` dict."""
    mib = lambda n: num(n / MIB, 2)  # noqa: E731
    lines = [f"model   {r['path']}" + ("" if r["has_data"] else "   (header-only: no tensor data)"),
             f"arch    {r['arch']}  n_layer={r['n_layer']} (+{r['nextn_predict_layers']} nextn)  n_embd={r['n_embd']}  "
             f"n_head={r['n_head']}/{r['n_head_kv']}  head_dim={r['head_dim_k']}/{r['head_dim_v']}  n_vocab={r['n_vocab']}",
             f"moe     n_expert={r['n_expert']}  n_expert_used={r['n_expert_used']}  n_ff_exp={r['n_ff_exp']}  "
             f"n_ff_shexp={r['n_ff_shexp']}  n_ff={r['n_ff']}",
             f"rope    base={r['rope_freq_base']:g}  n_rot={r['n_rot']}  sections={r['rope_sections']}  rms_eps={r['rms_eps']:g}"]
    if r["full_attention_interval"]:
        lines.append(f"ssm     full_attention_interval={r['full_attention_interval']}  " +
                     "  ".join(f"{k}={v}" for k, v in r["ssm"].items()))
    lines.append("")
    lines.append(f"{'layer':>5} {'kind':<9} {'expert_bytes':>12} {'dense_bytes':>12} {'shexp_bytes':>11}  expert types")
    for lb in r["layers"]:
        types = " ".join(f"{k.replace('ffn_', '').replace('_exps', '')}={v}" for k, v in lb["expert_types"].items())
        lines.append(f"{lb['il']:>5} {lb['kind']:<9} {lb['expert_bytes']:>12} {lb['dense_bytes']:>12} "
                     f"{lb['shared_expert_bytes']:>11}  {types}")
    lines += ["",
              f"total expert  {mib(r['total_expert_bytes'])} MiB (trunk {mib(r['trunk_expert_bytes'])} MiB)",
              f"total dense   {mib(r['total_dense_bytes'])} MiB   global (embd/output) {mib(r['global_bytes'])} MiB   "
              f"all tensors {mib(r['file_tensor_bytes'])} MiB",
              f"T (k={r['k']})     {num(r['t_mib'], 2)} MiB ({r['t_bytes']} B) per token cycle"
              + (f"; nextn {mib(r['t_nextn_bytes'])} MiB" if r["t_nextn_bytes"] else ""),
              f"KV (F16)      {r['kv_bytes_per_token']} B/token"
              + (f" (+{r['kv_bytes_per_token_nextn']} B/token nextn)" if r["kv_bytes_per_token_nextn"] else ""),
              f"recurrent     {r['recurrent_bytes_per_seq']} B/sequence ({mib(r['recurrent_bytes_per_seq'])} MiB)"]
    return "\n".join(lines)


def run(args) -> int:
    r = summary(args.model, args.n_expert_used)
    print(json.dumps(r) if args.json else render(r))
    return 0
