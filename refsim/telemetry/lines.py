"""The engine's stdout summary lines (bmoe-engine.md §4.2; cli/main.cpp), byte for byte.

Printed in the engine's order; refsim prints the lines it can fill:

- ``generation:`` always;
- the ``compute:`` line is omitted: refsim does not measure CPU occupancy or major faults
  (the engine omits it too when unmeasurable);
- ``<src>:`` acceptance and drafting-cost lines when speculation is on and decodes > 0, and
  the ``ngram:`` coverage line for the n-gram source;
- ``prefill:``;
- ``moe-stream:`` / ``moe-cache:`` when the run had an expert cache (the engine's
  ``--moe-stream``); the churn line only when evictions or re-reads > 0. Flash I/O, cache
  management and load seconds are unmeasured and print as 0; MiB/s (read MiB / I/O seconds)
  prints 0 when I/O seconds are 0.
"""

from __future__ import annotations

from refsim import MIB
from refsim.telemetry.stats import RunStats


def spec_lines(s: RunStats) -> list[str]:
    """The ``<src>:`` lines (two, plus the ``ngram:`` coverage line for n-gram); [] when
    speculation is off or there were no decodes.

    Examples
    --------
    With 42 of 95 drafts accepted, 256 tokens over 214 decodes, 32 drafted steps:
    ``ngram: 42/95 drafts accepted (44.2%), 1.20 tokens per verify decode (214 decodes for 256
    tokens)`` (docs/ngram.md of the engine).
    """
    if not s.spec_on or s.decodes <= 0:
        return []
    src = s.spec
    out = [
        f"{src}: {s.accepted}/{s.drafted} drafts accepted ({s.acceptance_pct:.1f}%), "
        f"{s.tokens_per_decode:.2f} tokens per verify decode ({s.decodes} decodes for "
        f"{s.tokens} tokens)",
        f"{src}: drafting costs {s.draft_s_per_tok:.4f} s/token on top of decode \u2192 "
        f"{s.effective_tok_s:.2f} tok/s effective (vs {s.tok_s:.2f} reported)",
    ]
    if src == "ngram":
        out.append(f"ngram: drafted on {s.drafted_steps} of {s.decodes} steps "
                   f"({s.coverage_pct:.1f}%); the rest decoded plainly")
    if src == "mtp" and s.read_bytes > 0:
        draft_mib = s.draft_read_bytes / MIB
        out.append(f"mtp: of {s.read_mib:.1f} MiB streamed, {draft_mib:.1f} MiB "
                   f"({100.0 * s.draft_read_bytes / s.read_bytes:.1f}%) was the head's own routing, "
                   f"{s.read_mib - draft_mib:.1f} MiB the widened verify batch")
    return out


def summary_lines(s: RunStats) -> list[str]:
    """All summary lines refsim can fill, in the engine's order (no trailing newlines)."""
    out = [f"generation: {s.tokens} tokens, {s.s_per_tok:.3f} s/token ({s.tok_s:.3f} tok/s)"]
    out += spec_lines(s)
    out.append(f"prefill: {s.n_prompt} tokens, {s.prefill_s:.3f} s ({s.prefill_tps:.1f} tok/s) "
               f"| model load {s.load_s:.3f} s | TTFT {s.load_s + s.prefill_s:.3f} s")
    if s.has_cache:
        io_s = 0.0
        mib_s = s.read_mib / io_s if io_s else 0.0
        out.append(f"moe-stream: read {s.read_mib:.1f} MiB ({s.mib_per_token:.2f} MiB/token), "
                   f"decode {s.s_per_tok:.3f} s/token (compute {s.s_per_tok:.3f} + cache mgmt "
                   f"{0.0:.3f} + flash I/O {0.0:.3f} s/token, {mib_s:.0f} MiB/s)")
        out.append(f"moe-cache: {s.cache_hit_pct:.1f}% hit, resident "
                   f"{s.resident_bytes / MIB:.1f} MiB")
        if s.evictions or s.rereads:
            rr_tok = s.rereads / s.tokens if s.tokens else 0.0
            out.append(f"moe-cache: {s.evictions} evictions, {s.rereads} re-reads "
                       f"({rr_tok:.1f}/token) \u2014 bytes the cache had already paid for once")
    return out


def knob_lines(k) -> list[str]:
    """The engine's ``moe-prefetch:`` and ``moe-drop:`` lines (bmoe-engine.md §4.2;
    engine-docs/telemetry.md) for a :class:`refsim.cache.summary.KnobSummary`; each only when
    its knob is on.

    Examples
    --------
    ``moe-prefetch: 812.4 MiB speculative, 410/1024 experts useful (40%)``;
    ``moe-drop: 5146/81920 routed experts dropped (6.3%), threshold 0.75 x uniform``.
    """
    out = []
    if k.prefetch > 0 or k.route_ahead > 0:
        tag = " [route-ahead]" if k.route_ahead > 0 else ""
        out.append(f"moe-prefetch: {k.spec_read_mib:.1f} MiB speculative, {k.spec_useful}/"
                   f"{k.spec_experts} experts useful ({k.useful_pct:.0f}%){tag}")
    if k.drop_frac > 0:
        out.append(f"moe-drop: {k.experts_dropped}/{k.experts_routed} routed experts dropped "
                   f"({k.dropped_pct:.1f}%), threshold {k.drop_frac:.2f} x uniform")
    return out
