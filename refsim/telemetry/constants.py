"""Names the engine's telemetry writes (one flat module, no logic; bmoe-engine.md §4).

A name or order written to a file never changes meaning.
"""

METRICS_MAGIC = "# bmoe_metrics v2"
"""First line of a per-token metrics CSV (core/src/metrics/csv_metrics_sink.cpp)."""

METRICS_COLUMNS = (
    "step", "steps", "wall_ms", "io_ms", "compute_ms", "read_bytes", "cache_hit_pct",
    "stall_ms", "mgmt_ms", "majflt", "cpu_ms", "dense_resident_frac", "turn", "majflt_mib",
    "cache_budget_mib", "rss_mib", "rss_anon_mib", "rss_file_mib", "swap_mib",
    "mem_available_mib", "mem_free_mib", "swap_free_mib", "loop_overhead_ms", "mtp_batch",
    "mtp_draft_ms", "drain_ms", "adopt_ms", "ra_issue_ms", "ra_wd_ms",
)
"""The 29 per-token columns of ``bmoe_metrics v2``, in order (bmoe-engine.md §4.1)."""

SUMMARY_KEYS = (
    ("tokens", "d"), ("s/tok", ".3f"), ("tok/s", ".3f"), ("read_MiB", ".1f"), ("io_s", ".2f"),
    ("compute_s/tok", ".3f"), ("io_s/tok", ".3f"), ("cache_hit_pct", ".1f"),
    ("n_prompt", "d"), ("load_s", ".3f"), ("prefill_s", ".3f"), ("prefill_tps", ".2f"),
    ("stall_s/tok", ".3f"), ("mgmt_s/tok", ".3f"), ("cache_resident_MiB", ".1f"),
    ("cache_budget_MiB", ".1f"), ("cache_resizes", "d"), ("spec_read_MiB", ".1f"),
    ("spec_experts", "d"), ("spec_useful", "d"), ("majflt/tok", ".2f"), ("cpu_s/tok", ".4f"),
    ("token_demand_MiB", ".1f"), ("layer_demand_MiB", ".1f"), ("experts_routed", "d"),
    ("experts_dropped", "d"), ("loop_overhead_s/tok", ".4f"), ("mtp_drafted", "d"),
    ("mtp_accepted", "d"), ("mtp_decodes", "d"), ("mtp_draft_s/tok", ".4f"),
    ("drafted_steps", "d"), ("ra_committed", "d"), ("ra_passthrough", "d"),
    ("ra_agree_pct", ".1f"), ("ra_gemv_ms/tok", ".2f"), ("ra_issue_ms/tok", ".2f"),
    ("ra_wd_ms/tok", ".2f"), ("drain_s/tok", ".3f"), ("adopt_s/tok", ".3f"),
    ("evictions", "d"), ("rereads", "d"),
)
"""``# summary`` trailer keys in order with their printf formats (bmoe-engine.md §4.1)."""

DONE_KEYS = (
    ("id", "s"), ("cancelled", "b"), ("tokens", "d"), ("tok_s", ".3f"), ("prefill_s", ".3f"),
    ("prefill_tps", ".3f"), ("load_s", ".3f"), ("cache_hit_pct", ".1f"), ("n_prompt", "d"),
    ("n_past", "d"), ("compute_s_tok", ".4f"), ("io_s_tok", ".4f"),
    ("cache_resident_mib", ".0f"), ("cache_budget_mib", ".0f"), ("read_mib", ".1f"),
    ("stall_s_tok", ".4f"), ("mgmt_s_tok", ".4f"), ("majflt_tok", ".2f"), ("cpu_s_tok", ".4f"),
    ("token_demand_mib", ".1f"), ("mtp_drafted", "d"), ("mtp_accepted", "d"),
    ("mtp_decodes", "d"), ("mtp_draft_s_tok", ".4f"), ("drafted_steps", "d"),
    ("loop_overhead_s_tok", ".4f"), ("reasoning", "s"), ("text", "s"),
)
"""``BMOE_DONE`` JSON keys in order with formats (bmoe-engine.md §4.4). The reference gives a
format for some keys only; the others here are our reading (derived): seconds per token
``.4f``, ``prefill_s``/``prefill_tps``/``load_s`` ``.3f`` as ``tok_s`` before them, counts as
integers, ``s`` = JSON string, ``b`` = JSON boolean."""
