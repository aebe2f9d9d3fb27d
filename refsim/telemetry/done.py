"""The ``BMOE_DONE {json}`` line (bmoe-engine.md §4.4; session mode of cli/main.cpp).

One JSON object with the keys of :data:`refsim.telemetry.constants.DONE_KEYS` in order,
numbers printed with the listed printf formats. ``mtp_*`` counters are this turn's (refsim
runs one turn). Unmeasured quantities (I/O, stall, management, major faults, CPU) are 0.

With predicted times (:class:`refsim.telemetry.predicted.PredictedTimes`) the time keys are the
device model's, every simulator second is 0, and two keys follow the engine's:
``"times":"predicted"`` and ``"device":"<name>"`` (docs/telemetry.md, "Predicted times").
"""

from __future__ import annotations

import json

from refsim import MIB
from refsim.telemetry.constants import DONE_KEYS
from refsim.telemetry.stats import RunStats


def done_values(s: RunStats, *, id: str = "", text: str = "", reasoning: str = "",
                cancelled: bool = False, times=None) -> dict:
    """The DONE line's values by key (a rate over zero events is the engine's 0:
    :func:`refsim.telemetry.metrics_csv.engine_number`); ``times``: predicted (module docstring)."""
    from refsim.telemetry.metrics_csv import engine_number, predicted_split
    if times is not None:
        s = times.stats(s)
    t = predicted_split(s, times)
    vals = {
        "id": id, "cancelled": cancelled, "tokens": s.tokens, "tok_s": s.tok_s,
        "prefill_s": s.prefill_s, "prefill_tps": s.prefill_tps, "load_s": s.load_s,
        "cache_hit_pct": s.cache_hit_pct, "n_prompt": s.n_prompt, "n_past": s.n_past,
        "compute_s_tok": t["compute"], "io_s_tok": t["io"],
        "cache_resident_mib": s.resident_bytes / MIB, "cache_budget_mib": s.budget_bytes / MIB,
        "read_mib": s.read_mib, "stall_s_tok": t["stall"], "mgmt_s_tok": t["mgmt"],
        "majflt_tok": 0.0,
        "cpu_s_tok": 0.0, "token_demand_mib": s.token_demand_bytes / MIB,
        "mtp_drafted": s.drafted, "mtp_accepted": s.accepted, "mtp_decodes": s.decodes,
        "mtp_draft_s_tok": s.draft_s_per_tok, "drafted_steps": s.drafted_steps,
        "loop_overhead_s_tok": s.loop_overhead_s_per_tok, "reasoning": reasoning, "text": text,
    }
    out = {k: v if isinstance(v, (str, bool)) else engine_number(v) for k, v in vals.items()}
    if times is not None:
        from refsim.telemetry.predicted import PREDICTED, device_token
        out.update(times=PREDICTED, device=device_token(times.device))
    return out


def done_line(s: RunStats, **kw) -> str:
    """``BMOE_DONE {...}`` (no newline); ``kw`` = ``id``, ``text``, ``reasoning``,
    ``cancelled``, ``times`` (predicted times: ``times`` and ``device`` keys after the engine's)."""
    vals = done_values(s, **kw)
    parts = []
    keys = DONE_KEYS + ((("times", "s"), ("device", "s")) if "times" in vals else ())
    for key, fmt in keys:
        v = vals[key]
        if fmt == "s":
            txt = json.dumps(v, ensure_ascii=False)
        elif fmt == "b":
            txt = "true" if v else "false"
        else:
            txt = format(v, fmt)
        parts.append(f'"{key}":{txt}')
    return "BMOE_DONE {" + ",".join(parts) + "}"
