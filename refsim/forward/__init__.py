"""Reference forward passes: the arithmetic the engine only approximates, with routes.

``ARCHS`` maps a GGUF ``general.architecture`` string to its module; each module provides
``load_weights(model) -> Weights``, ``new_state(spec) -> state`` and
``decode(weights, state, tokens, positions, numerics, out_rows=None, tap=None) -> DecodeResult``
and reads top to bottom like llama.cpp's ``src/models/<arch>.cpp``. Shared blocks live in
:mod:`refsim.forward.layers`; the KV cache in :mod:`refsim.forward.kv`;
:class:`ForwardTarget` adapts any of them to the speculative loop's Target protocol.
See docs/forward.md.
"""

from refsim.forward import gemma3, qwen3moe, qwen35moe
from refsim.forward.kv import KVCache
from refsim.forward.layers import NUMERICS, Numerics
from refsim.forward.result import DecodeResult
from refsim.forward.target import ForwardTarget

ARCHS = {"qwen3moe": qwen3moe, "qwen35moe": qwen35moe, "gemma3": gemma3}
"""GGUF arch string -> forward module."""

__all__ = ["ARCHS", "DecodeResult", "ForwardTarget", "KVCache", "NUMERICS", "Numerics", "qwen3moe"]
