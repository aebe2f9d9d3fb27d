"""The ``BMOE_DONE {json}`` line (bmoe-engine.md §4.4; session mode of cli/main.cpp).

One JSON object with the keys of :data:`refsim.telemetry.constants.DONE_KEYS` in order,
numbers printed with the listed printf formats. ``mtp_*`` counters are this turn's (refsim
runs one turn). Unmeasured quantities (I/O, stall, management, major faults, CPU) are 0.
"""

from __future__ import annotations

import json

from refsim import MIB
from refsim.telemetry.constants import DONE_KEYS
from refsim.telemetry.stats import RunStats


def done_values(s: RunStats, *, id: str = "", text: str = "", reasoning: str = "",
                cancelled: bool = False) -> dict:
    """The DONE line's values by key (a rate over zero events is the engine's 0:
    :func:`refsim.telemetry.metrics_csv.engine_number`)."""
    from refsim.telemetry.metrics_csv import engine_number
    vals = {
        "id": id, "cancelled": cancelled, "tokens": s.tokens, "tok_s": s.tok_s,
        "prefill_s": s.prefill_s, "prefill_tps": s.prefill_tps, "load_s": s.load_s,
        "cache_hit_pct": s.cache_hit_pct, "n_prompt": s.n_prompt, "n_past": s.n_past,
        "compute_s_tok": s.s_per_tok, "io_s_tok": 0.0,
        "cache_resident_mib": s.resident_bytes / MIB, "cache_budget_mib": s.budget_bytes / MIB,
        "read_mib": s.read_mib, "stall_s_tok": 0.0, "mgmt_s_tok": 0.0, "majflt_tok": 0.0,
        "cpu_s_tok": 0.0, "token_demand_mib": s.token_demand_bytes / MIB,
        "mtp_drafted": s.drafted, "mtp_accepted": s.accepted, "mtp_decodes": s.decodes,
        "mtp_draft_s_tok": s.draft_s_per_tok, "drafted_steps": s.drafted_steps,
        "loop_overhead_s_tok": s.loop_overhead_s_per_tok, "reasoning": reasoning, "text": text,
    }
    return {k: v if isinstance(v, (str, bool)) else engine_number(v) for k, v in vals.items()}


def done_line(s: RunStats, **kw) -> str:
    """``BMOE_DONE {...}`` (no newline); ``kw`` = ``id``, ``text``, ``reasoning``,
    ``cancelled``."""
    vals = done_values(s, **kw)
    parts = []
    for key, fmt in DONE_KEYS:
        v = vals[key]
        if fmt == "s":
            txt = json.dumps(v, ensure_ascii=False)
        elif fmt == "b":
            txt = "true" if v else "false"
        else:
            txt = format(v, fmt)
        parts.append(f'"{key}":{txt}')
    return "BMOE_DONE {" + ",".join(parts) + "}"
