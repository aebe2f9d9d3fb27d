"""Route traces: the engine's ``route_trace v1`` format, read (validating) and written (atomic).

See docs/trace-format.md for the format in our words.
"""

from refsim.trace.format import TRACE_MAGIC, TraceHeader
from refsim.trace.reader import RouteTrace, read_trace
from refsim.trace.stream import TraceStream, iter_trace_turns
from refsim.trace.writer import TraceWriter, format_event_rows, format_header, write_trace

__all__ = ["TRACE_MAGIC", "TraceHeader", "RouteTrace", "TraceStream", "iter_trace_turns", "read_trace", "write_trace", "TraceWriter",
           "format_header", "format_event_rows"]
