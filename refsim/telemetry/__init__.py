"""Telemetry in the engine's formats: counters, summary lines, metrics CSV v2, BMOE_DONE.

Definitions of every counter: docs/telemetry.md. Public API:

- :class:`RunStats` (``RunStats.from_run(result)``) — counters and derived rates;
- :func:`summary_lines`, :func:`spec_lines` — the stdout lines (``generation:``, ``ngram:``,
  ``prefill:``, ``moe-stream:``, ``moe-cache:``);
- :class:`MetricsPreamble`, :func:`format_metrics_csv`, :func:`write_metrics_csv` — the
  ``bmoe_metrics v2`` per-token CSV;
- :func:`done_line` — the ``BMOE_DONE`` line;
- :func:`read_metrics`, :class:`MetricsRun`, :func:`read_sidecar` — read (and validate) the
  engine's metrics CSVs (``v2``, ``v1``, legacy) and their ``.metrics`` sidecar.
"""

from refsim.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "done_line": "done", "done_values": "done", "spec_lines": "lines", "summary_lines": "lines",
    "MetricsPreamble": "metrics_csv", "format_metrics_csv": "metrics_csv",
    "metric_rows": "metrics_csv", "summary_trailer": "metrics_csv",
    "write_metrics_csv": "metrics_csv", "MetricsRun": "metrics_reader",
    "read_metrics": "metrics_reader", "read_sidecar": "metrics_reader", "RunStats": "stats",
})
__all__ = ["RunStats", "summary_lines", "spec_lines", "MetricsPreamble", "format_metrics_csv",
           "write_metrics_csv", "metric_rows", "summary_trailer", "done_line", "done_values",
           "MetricsRun", "read_metrics", "read_sidecar"]
