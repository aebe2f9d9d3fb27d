"""Reads as the device sees them: aligned windows, requests and lanes (docs/io.md).

A replay says which (layer, expert) entries each decode reads; this room says how the engine
reads them: one request per projection slice, widened to the O_DIRECT block
(:mod:`refsim.io.window`), at the offsets of the model file's tensor table
(:mod:`refsim.io.layout`), issued per layer in the engine's order and drained by its lanes
(:mod:`refsim.io.requests`, :mod:`refsim.io.lanes`). Pure functions over what a replay already
yields; it never changes what is read.
"""

from refsim.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "ENGINE_BLOCK_BYTES": "window", "window_span": "window", "window_bytes": "window",
    "SliceLayout": "layout", "layout_from_model": "layout", "assign_lanes": "lanes",
    "engine_lanes": "lanes", "IoConfig": "requests", "IoTally": "requests",
    "EventRequests": "requests", "event_requests": "requests", "batch_order": "requests",
})
__all__ = ["ENGINE_BLOCK_BYTES", "window_span", "window_bytes", "SliceLayout", "layout_from_model",
           "assign_lanes", "engine_lanes", "IoConfig", "IoTally", "EventRequests",
           "event_requests", "batch_order"]
