"""Route-trace analysis: the views of ``refsim analyze`` and the page of ``refsim view``.

``frame_trace`` selects and frames a :class:`refsim.trace.RouteTrace` (decode or position
framing); ``refsim.analysis.views`` computes each view as a JSON-ready dict; ``analyze`` /
``format_text`` run and render one; ``refsim.analysis.viewer`` builds the HTML page. Cache
outcomes are replayed through :mod:`refsim.cache`, never re-modelled here. docs/analysis.md.
"""

from refsim.analysis.frame import FRAMINGS, Framed, frame_trace, parse_span
from refsim.analysis.report import AnalyzeOptions, analyze, format_text
from refsim.analysis.views import VIEWS

__all__ = ["FRAMINGS", "Framed", "frame_trace", "parse_span", "AnalyzeOptions", "analyze",
           "format_text", "VIEWS"]
