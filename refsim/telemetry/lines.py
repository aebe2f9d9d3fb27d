"""The engine's stdout summary lines (bmoe-engine.md §4.2; cli/main.cpp), byte for byte.

Printed in the engine's order; refsim prints the lines it can fill:

- ``generation:`` always;
- the ``compute:`` line is omitted: refsim does not measure CPU occupancy or major faults
  (the engine omits it too when unmeasurable);
- ``<src>:`` acceptance and drafting-cost lines when speculation is on and decodes > 0, and
  the ``ngram:`` coverage line for the n-gram source;
- ``prefill:``;
- ``moe-stream:`` / ``moe-cache:`` when the run had an expert cache (the engine's
  ``--moe-stream``); the churn line only when evictions or re-reads > 0. Flash I/O and cache
  management seconds are not measured by a simulator, and neither is MiB/s (read MiB / I/O
  seconds): they print ``n/a``, not zeros that read like measurements.

Numbers use the engine's fixed printf formats (:func:`refsim.fmt.num` with ``sig=None``); a rate
over zero events (acceptance with no draft, tok/s over no measured second) prints ``n/a``.
"""

from __future__ import annotations

from refsim import MIB
from refsim.fmt import NA, num, pct_text, plural, ratio
from refsim.telemetry.stats import RunStats


def _f(x, decimals: int) -> str:
    """The engine's ``%.<decimals>f``, ``n/a`` for an undefined rate."""
    return num(x, decimals, sig=None)


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
        f"{src}: {s.accepted}/{s.drafted} drafts accepted ({_pct(s.acceptance_pct)}), "
        f"{_f(s.tokens_per_decode, 2)} tokens per verify decode ({s.decodes} decodes for "
        f"{s.tokens} tokens)",
        f"{src}: drafting costs {_f(s.draft_s_per_tok, 4)} s/token on top of decode \u2192 "
        f"{_f(s.effective_tok_s, 2)} tok/s effective (vs {_f(s.tok_s, 2)} reported)",
    ]
    if src == "ngram":
        out.append(f"ngram: drafted on {s.drafted_steps} of {s.decodes} steps "
                   f"({_pct(s.coverage_pct)}); the rest decoded plainly")
    if src == "mtp" and s.read_bytes > 0:
        draft_mib = s.draft_read_bytes / MIB
        out.append(f"mtp: of {_f(s.read_mib, 1)} MiB streamed, {_f(draft_mib, 1)} MiB "
                   f"({_pct(100.0 * s.draft_read_bytes / s.read_bytes)}) was the head's own routing, "
                   f"{_f(s.read_mib - draft_mib, 1)} MiB the widened verify batch")
    return out


def drafted_decodes_line(s: RunStats) -> str | None:
    """refsim's line after the engine's ``<src>: ... tokens per verify decode (D decodes for T
    tokens)``, whose figure is ``tokens / decodes`` over *every* target decode (the engine's
    definition, docs/telemetry.md): what the decodes that carried a draft confirmed each. None
    when speculation is off, no decode carried a draft, or every decode did (then the engine's
    figure is already per drafted decode).

    Examples
    --------
    40 tokens over 34 decodes, 5 of them with a draft, 6 drafts accepted:
    ``ngram: 1.18 above is tokens / all 34 decodes (the engine's figure); the 5 decodes that
    carried a draft confirmed 2.20 tokens per decode (1 + accepted drafts)``.
    """
    if not s.spec_on or s.verify_decodes <= 0 or s.verify_decodes >= s.decodes:
        return None
    return (f"{s.spec}: {_f(s.tokens_per_decode, 2)} above is tokens / all {s.decodes} decodes (the "
            f"engine's figure); the {plural(s.verify_decodes, 'decode')} that carried a draft "
            f"confirmed {_f(s.tokens_per_drafted_decode, 2)} tokens per decode (1 + accepted drafts)")


def _pct(x) -> str:
    """``44.2%``; ``n/a`` (no percent sign) for an undefined rate."""
    return NA if x is None else f"{_f(x, 1)}%"


def summary_lines(s: RunStats) -> list[str]:
    """All summary lines refsim can fill, in the engine's order (no trailing newlines)."""
    out = [f"generation: {s.tokens} tokens, {_f(s.s_per_tok, 3)} s/token ({_f(s.tok_s, 3)} tok/s)"]
    out += spec_lines(s)
    out.append(f"prefill: {s.n_prompt} tokens, {_f(s.prefill_s, 3)} s ({_f(s.prefill_tps, 1)} tok/s) "
               f"| model load {_f(s.load_s, 3)} s | TTFT {_f(s.load_s + s.prefill_s, 3)} s")
    if s.has_cache:
        # cache management, flash I/O and MiB/s (read MiB / I/O seconds) are not measured
        out.append(f"moe-stream: read {_f(s.read_mib, 1)} MiB ({_f(s.mib_per_token, 2)} MiB/token), "
                   f"decode {_f(s.s_per_tok, 3)} s/token (compute {_f(s.s_per_tok, 3)} + cache mgmt "
                   f"{NA} + flash I/O {NA} s/token, {NA} MiB/s)")
        out.append(f"moe-cache: {_pct(s.cache_hit_pct)} hit, resident "
                   f"{_f(s.resident_bytes / MIB, 1)} MiB")
        if s.evictions or s.rereads:
            out.append(f"moe-cache: {s.evictions} evictions, {s.rereads} re-reads "
                       f"({_f(ratio(s.rereads, s.tokens), 1)}/token) \u2014 bytes the cache had already paid for once")
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
    if k.prefetch > 0 or k.route_ahead > 0 or k.predict_prefetch:
        tag = (" [route-ahead]" if k.route_ahead > 0 else " [stale-gate]" if k.predict_prefetch
               else "")
        out.append(f"moe-prefetch: {k.spec_read_mib:.1f} MiB speculative, {k.spec_useful}/"
                   f"{k.spec_experts} experts useful ({pct_text(k.useful_pct, 0)}){tag}")
    if k.drop_frac > 0:
        out.append(f"moe-drop: {k.experts_dropped}/{k.experts_routed} routed experts dropped "
                   f"({pct_text(k.dropped_pct, 1)}), threshold {k.drop_frac:.2f} x uniform")
    return out
