"""RunStats: the counters of one generation and the rates derived from them (one place).

Definitions (docs/telemetry.md; bmoe-engine.md §2, §3.7, §4.1):

- ``tokens``: emitted tokens (``n_gen``); ``decodes``: target decodes after prefill, plain and
  verify (the engine's ``mtp_decodes``, counted also without speculation).
- ``drafted``: draft tokens proposed; ``accepted``: draft tokens equal to the target's argmax
  at their position; ``drafted_steps``: decodes that carried >= 1 draft token.
- acceptance = accepted / drafted; tokens per verify decode = tokens / decodes;
  coverage = drafted_steps / decodes.
- ``decode_s``: Σ measured wall of the target decodes; ``s_per_tok = decode_s / tokens``;
  ``tok_s = tokens / decode_s``; ``draft_s_per_tok = draft_s / tokens``; effective tok/s =
  ``1 / (s_per_tok + draft_s_per_tok)``. Seconds are the simulator's own, not a device's.
  ``draft_s`` is the MTP head's drafting time only (the engine's ``mtp_draft_s``): the engine
  times no n-gram lookup, so an n-gram run's drafting cost is 0 and its effective tok/s equals the
  reported one (bmoe-engine.md §4.2, the docs/ngram.md example ``drafting costs 0.0000 s/token
  ... 5.24 tok/s effective (vs 5.24 reported)``); refsim's own Python lookup time is not a cost
  the engine has (issue 26 C11).
- ``read_bytes``: flash bytes of the generation's decodes (prefill excluded, draft-source
  decodes included), the Σ of the CSV rows' ``read_bytes``; MiB = 2**20 bytes;
  ``mib_per_token = read_bytes / MiB / tokens``.
- ``cache_hit_pct``: lifetime hits / lookups × 100, prefill included; -1 without a cache.
- ``n_past``: positions in the target's KV at the end (the BMOE_DONE key).
- ``token_demand_bytes``: distinct-expert bytes of the last decode graph (union over its
  positions per layer); ``layer_demand_bytes``: the largest layer's share of it.

Every rate over zero events is ``None`` (acceptance with no draft, tokens per decode with no
decode, tok/s with no measured second, ...): text prints ``n/a``, JSON ``null``
(:mod:`refsim.fmt`); the engine-format files write the engine's 0 (docs/telemetry.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from refsim import MIB
from refsim.events import DecodeKind
from refsim.fmt import pct, ratio as _div


def _final_n_past(result) -> int:
    """The engine's ``n_past`` after the loop: advanced by ``1 + n_acc`` per decode, except
    after the decode whose accepted draft held EOG (the loop stops before advancing)."""
    if not result.steps:
        return result.n_prompt
    last = result.steps[-1]
    return last.n_past if last.eog else last.n_past + 1 + last.n_acc


def _knob_counters(cache) -> dict:
    """``--drop-cold-experts`` / ``--prefetch`` counters of the generation (decode kinds; the
    engine's generation delta), 0 without a cache."""
    if cache is None:
        return {}
    from refsim.cache.summary import KnobSummary
    k = KnobSummary.from_stats(cache.stats, cache.knobs)
    return dict(experts_routed=k.experts_routed, experts_dropped=k.experts_dropped,
                spec_read_bytes=k.spec_read_bytes, spec_experts=k.spec_experts,
                spec_useful=k.spec_useful)


@dataclass(frozen=True)
class RunStats:
    """Counters of one generation (units in the names; seconds measured by the simulator)."""

    spec: str
    draft_max: int
    n_predict: int
    n_prompt: int
    tokens: int
    decodes: int
    verify_decodes: int
    drafted: int
    accepted: int
    drafted_steps: int
    prefill_s: float
    decode_s: float
    draft_s: float
    loop_overhead_s: float
    has_cache: bool
    lookups: int
    hits: int
    read_bytes: int
    prefill_read_bytes: int
    resident_bytes: int
    budget_bytes: int
    evictions: int
    rereads: int
    token_demand_bytes: int
    layer_demand_bytes: int
    n_past: int = 0
    load_s: float = 0.0
    draft_read_bytes: int = 0
    experts_routed: int = 0
    experts_dropped: int = 0
    spec_read_bytes: int = 0
    spec_experts: int = 0
    spec_useful: int = 0

    @classmethod
    def from_run(cls, result) -> "RunStats":
        """Derive the counters of a :class:`refsim.spec.RunResult`."""
        steps = result.steps
        cache = result.cache
        st = cache.stats if cache is not None else None
        token_demand = layer_demand = 0
        ev = result.last_event if result.last_event is not None else (
            result.events[-1] if result.events else None)
        if cache is not None and ev is not None:
            per_layer = [np.unique(ev.layer_ids(il)).size * int(cache.expert_bytes[il])
                         for il in range(ev.n_layer)]
            token_demand, layer_demand = int(sum(per_layer)), int(max(per_layer, default=0))
        return cls(
            spec=result.spec, draft_max=result.draft_max, n_predict=result.n_predict,
            n_prompt=result.n_prompt, tokens=result.n_gen, decodes=len(steps),
            verify_decodes=sum(1 for s in steps if s.kind is DecodeKind.VERIFY),
            drafted=sum(s.n_draft for s in steps), accepted=sum(s.n_acc for s in steps),
            drafted_steps=sum(1 for s in steps if s.n_draft > 0),
            prefill_s=result.prefill_s, decode_s=sum(s.wall_s for s in steps),
            draft_s=sum(s.draft_s for s in steps) if result.spec == "mtp" else 0.0,
            loop_overhead_s=sum(s.loop_overhead_s for s in steps) + result.tail_s,
            has_cache=cache is not None,
            lookups=st.total("lookups") if st else 0, hits=st.total("hits") if st else 0,
            read_bytes=sum(s.read_bytes for s in steps),
            prefill_read_bytes=st.total("read_bytes", (DecodeKind.PREFILL, DecodeKind.DRAFT_PREFILL))
            if st else 0,
            resident_bytes=st.resident_bytes if st else 0,
            budget_bytes=cache.budget_bytes if cache is not None else 0,
            evictions=st.evictions if st else 0, rereads=st.rereads if st else 0,
            token_demand_bytes=token_demand, layer_demand_bytes=layer_demand,
            n_past=_final_n_past(result),
            draft_read_bytes=sum(getattr(s, "draft_read_bytes", 0) for s in steps),
            **_knob_counters(cache))

    # --- derived rates ---------------------------------------------------------------------
    @property
    def spec_on(self) -> bool:
        return self.spec != "off"

    @property
    def acceptance_pct(self) -> float | None:
        """100 × accepted / drafted (None when nothing was drafted)."""
        return pct(self.accepted, self.drafted)

    @property
    def tokens_per_decode(self) -> float | None:
        """tokens / decodes ("tokens per verify decode")."""
        return _div(self.tokens, self.decodes)

    @property
    def tokens_per_drafted_decode(self) -> float | None:
        """(verify_decodes + accepted) / verify_decodes: the tokens a decode that carried a draft
        confirmed on average (its own token and its accepted drafts); None without one. Not the
        engine's "tokens per verify decode", which divides by every decode."""
        return _div(self.verify_decodes + self.accepted, self.verify_decodes)

    @property
    def coverage_pct(self) -> float | None:
        """100 × drafted_steps / decodes."""
        return pct(self.drafted_steps, self.decodes)

    @property
    def s_per_tok(self) -> float | None:
        return _div(self.decode_s, self.tokens)

    @property
    def tok_s(self) -> float | None:
        return _div(self.tokens, self.decode_s)

    @property
    def draft_s_per_tok(self) -> float | None:
        return _div(self.draft_s, self.tokens)

    @property
    def effective_tok_s(self) -> float | None:
        """1 / (s_per_tok + draft_s_per_tok)."""
        if self.s_per_tok is None or self.draft_s_per_tok is None:
            return None
        return _div(1.0, self.s_per_tok + self.draft_s_per_tok)

    @property
    def loop_overhead_s_per_tok(self) -> float | None:
        return _div(self.loop_overhead_s, self.tokens)

    @property
    def prefill_tps(self) -> float | None:
        return _div(self.n_prompt, self.prefill_s)

    @property
    def cache_hit_pct(self) -> float | None:
        """Lifetime hit %, prefill included; -1 without a cache (the engine's value), None with a
        cache that had no lookup."""
        if not self.has_cache:
            return -1.0
        return pct(self.hits, self.lookups)

    @property
    def read_mib(self) -> float:
        return self.read_bytes / MIB

    @property
    def mib_per_token(self) -> float | None:
        return _div(self.read_mib, self.tokens)

    def as_dict(self) -> dict:
        """Plain dict of the counters and the derived rates (full precision)."""
        out = asdict(self)
        for name in ("acceptance_pct", "tokens_per_decode", "coverage_pct", "s_per_tok",
                     "tok_s", "draft_s_per_tok", "effective_tok_s", "cache_hit_pct",
                     "read_mib", "mib_per_token"):
            out[name] = getattr(self, name)
        return out
