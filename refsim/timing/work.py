"""What one position of a decode reads and multiplies, from a GGUF's tensor table.

A decode of ``w`` positions reads each weight it uses **once** from DRAM and multiplies it by each
position that uses it (engine-docs/mtp.md, "Why a wider decode can be faster"). So, per trunk
token, from the tensor table (refsim.model.bytes; MiB = 2^20 bytes):

- **dense** bytes ``D``: every non-expert tensor of the trunk blocks (attention or gated delta
  net, norms, router, shared expert): read once per decode, multiplied by every position;
- **output** bytes ``O``: the logits matrix (``output``, or ``token_embd`` when tied): read once
  per decode that asks for logits, multiplied by each position that does (a verify decode: every
  row; a prefill: the last row only, bmoe-engine.md §2);
- **expert** bytes ``T`` = sum over trunk layers of ``k x expert_bytes``: one position's routed
  experts. A w-position decode reads the **union** of its positions' experts, ``u(w) x T`` with
  ``1 <= u(w) <= w`` (refsim.studies.union measures ``u`` on a trace), and multiplies each expert
  by the positions routed to it: ``w x T`` worth of multiplies;
- the token embedding's one row per position is left out (kilobytes).

Multiplies are counted as weight elements per position (one multiply-add per element of each
>= 2-D weight tensor a position passes through; the 1-D norms and the recurrent state update
are left out), plus attention's ``n_head x (head_dim_k + head_dim_v)`` per context key per
full-attention layer. The nextn (MTP) block is counted apart: it is the draft head
(refsim.timing.head), not part of a trunk position.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from refsim import MIB
from refsim.errors import ConfigError


@dataclass(frozen=True)
class PositionWork:
    """Per-position figures of one model (see the module docstring).

    Attributes
    ----------
    k : int
        Experts routed per position.
    n_expert : int
        Routed experts per layer.
    dense_mib, output_mib, expert_mib : float
        ``D``, ``O``, ``T`` in MiB.
    dense_elems : float
        Weight elements of the trunk's dense tensors (multiplies per position).
    last_ffn_elems : float
        Of ``dense_elems``, the last trunk layer's FFN tensors (router, shared expert): a prefill
        computes them for its last position only (``inp_out_ids``, engine-docs/telemetry.md).
    expert_elems, last_expert_elems : float
        Weight elements of ``k`` routed experts over the trunk layers; of the last layer.
    output_elems : float
        Elements of the logits matrix.
    attn_macs_per_key : float
        Attention multiply-adds per position per context key, over the trunk's full-attention
        layers.
    head_dense_mib, head_expert_mib, head_output_mib : float
        The nextn block's dense tensors, ``k`` of its experts, and its logits matrix (the trunk's
        ``output`` unless the block has its own ``shared_head_head``), MiB; 0 without a block.
    head_dense_elems, head_expert_elems, head_output_elems : float
        The same in weight elements.
    head_attn_macs_per_key : float
        Attention multiply-adds per position per context key in the nextn block.
    """

    k: int
    n_expert: int
    dense_mib: float
    output_mib: float
    expert_mib: float
    dense_elems: float
    last_ffn_elems: float
    expert_elems: float
    last_expert_elems: float
    output_elems: float
    attn_macs_per_key: float
    head_dense_mib: float = 0.0
    head_expert_mib: float = 0.0
    head_output_mib: float = 0.0
    head_dense_elems: float = 0.0
    head_expert_elems: float = 0.0
    head_output_elems: float = 0.0
    head_attn_macs_per_key: float = 0.0

    @property
    def token_mib(self) -> float:
        """``B(1) = D + O + T``: what one plain decode position reads, MiB."""
        return self.dense_mib + self.output_mib + self.expert_mib

    @property
    def has_head(self) -> bool:
        return self.head_dense_mib > 0

    def verify_elems(self, ctx: int) -> float:
        """Multiplies of one verify position at context ``ctx`` (every row has logits)."""
        return self.dense_elems + self.expert_elems + self.output_elems + self.attn_macs_per_key * ctx

    def prefill_elems(self, n_prompt: int) -> float:
        """Mean multiplies of one prefill position of an ``n_prompt`` batch: the last layer's FFN
        and experts and the logits for the last position only; position ``i`` attends to ``i + 1``
        keys (mean ``(n_prompt + 1) / 2``)."""
        p = float(n_prompt)
        return (self.dense_elems - (1.0 - 1.0 / p) * self.last_ffn_elems + self.expert_elems
                - (1.0 - 1.0 / p) * self.last_expert_elems + self.output_elems / p
                + self.attn_macs_per_key * (p + 1.0) / 2.0)


def _elems(ti) -> float:
    return float(math.prod(ti.shape_gguf)) if len(ti.shape_gguf) >= 2 else 0.0


def _attn_macs(spec) -> float:
    return float(spec.n_head * (spec.head_dim_k + spec.head_dim_v))


def position_work(model, k: int | None = None) -> PositionWork:
    """:class:`PositionWork` of ``model`` (a :class:`refsim.model.model.Model`: its ``spec``,
    ``bytes`` and ``tensors``), ``k`` experts per position (default ``n_expert_used``).

    Raises
    ------
    ConfigError
        A model without routed experts, or without an ``output``/``token_embd`` matrix.
    """
    spec, mb, tensors = model.spec, model.bytes, model.tensors
    k = spec.n_expert_used if k is None else k
    trunk = [lb for lb in mb.layers if not lb.is_nextn]
    if not any(lb.n_expert for lb in trunk) or k < 1:
        raise ConfigError(f"{model.path}: no routed experts (or k = {k}); not a MoE model")
    out_name = "output.weight" if "output.weight" in tensors else "token_embd.weight"
    if out_name not in tensors:
        raise ConfigError(f"{model.path}: neither output.weight nor token_embd.weight: no logits matrix")
    out = tensors[out_name]
    n_layer = spec.n_layer
    last = n_layer - 1
    dense_e = last_ffn = expert_e = last_exp = 0.0
    head_dense_e = head_exp = 0.0
    head_out = None
    for ti in tensors.values():
        parts = ti.name.split(".")
        if parts[0] != "blk":
            continue
        il = int(parts[1])
        stem = ti.name[len(f"blk.{il}."):].removesuffix(".weight")
        is_expert = len(ti.shape_gguf) == 3 and stem.endswith("_exps")
        if il >= n_layer:                                  # the nextn block
            if "shared_head_head" in stem:
                head_out = ti
            elif is_expert:
                head_exp += k * float(math.prod(ti.shape_gguf[:2]))
            else:
                head_dense_e += _elems(ti)
            continue
        if is_expert:
            e = k * float(math.prod(ti.shape_gguf[:2]))
            expert_e += e
            last_exp += e if il == last else 0.0
        else:
            dense_e += _elems(ti)
            if il == last and stem.startswith("ffn"):
                last_ffn += _elems(ti)
    rec = spec.recurrent_layers or (False,) * n_layer
    attn = _attn_macs(spec) * sum(1 for il in range(n_layer) if not rec[il])
    head = [lb for lb in mb.layers if lb.is_nextn]
    head_out = head_out or (out if head else None)
    return PositionWork(
        k=k, n_expert=spec.n_expert, dense_mib=sum(lb.dense_bytes for lb in trunk) / MIB, output_mib=out.n_bytes / MIB,
        expert_mib=mb.t_bytes(k) / MIB, dense_elems=dense_e, last_ffn_elems=last_ffn,
        expert_elems=expert_e, last_expert_elems=last_exp, output_elems=_elems(out),
        attn_macs_per_key=attn,
        head_dense_mib=sum(lb.dense_bytes for lb in head) / MIB - (
            head_out.n_bytes / MIB if head and head_out is not out else 0.0),
        head_expert_mib=mb.t_bytes(k, nextn=True) / MIB,
        head_output_mib=head_out.n_bytes / MIB if head else 0.0,
        head_dense_elems=head_dense_e, head_expert_elems=head_exp,
        head_output_elems=_elems(head_out) if head else 0.0,
        head_attn_macs_per_key=_attn_macs(spec) * len(head))
