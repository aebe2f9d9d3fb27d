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

from refsim.telemetry.done import done_line, done_values
from refsim.telemetry.lines import spec_lines, summary_lines
from refsim.telemetry.metrics_csv import (MetricsPreamble, format_metrics_csv, metric_rows,
                                          summary_trailer, write_metrics_csv)
from refsim.telemetry.metrics_reader import MetricsRun, read_metrics, read_sidecar
from refsim.telemetry.stats import RunStats

__all__ = ["RunStats", "summary_lines", "spec_lines", "MetricsPreamble", "format_metrics_csv",
           "write_metrics_csv", "metric_rows", "summary_trailer", "done_line", "done_values",
           "MetricsRun", "read_metrics", "read_sidecar"]
