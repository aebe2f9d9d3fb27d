"""Which pass runs a model: the table ``(arch, numerics) -> pass`` the target picks from.

A pass is the functions that load an arch's weights, make its state and decode. Each arch has one
readable pass (its module's ``decode``: a straight top-to-bottom function); some numerics have
another pass of the same arithmetic or their own (llama2.c keeps ``run.c`` and ``runq.c`` apart the
same way):

======================  ====================================  ==========================================
(arch, numerics)        decode                                what it is
======================  ====================================  ==========================================
qwen3moe, exact         ``qwen3moe.decode``                   the readable pass
qwen3moe, ggml          ``fused.qwen3moe_decode``             the readable blocks with the fused
                                                              one-position kernels (same bits)
qwen35moe, exact        ``qwen35moe.decode``                  the readable pass
qwen35moe, ggml         ``fused.qwen35moe_decode``            the readable pass, fused MoE block
gemma3, exact / ggml    ``gemma3.decode``                     the readable pass
gemma3, llamacpp        ``gemma3_llamacpp.decode``            llama.cpp's CPU arithmetic bit for bit
                        (:func:`llamacpp_decode`)
======================  ====================================  ==========================================

The qwen3moe and qwen35moe passes take the streaming knobs' hooks
(:class:`refsim.streaming.hooks.LayerHooks`); the gemma3 passes (a dense model) and the ``llamacpp``
numerics do not. Modules are imported when a pass is asked for (the ``llamacpp`` one only then).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

ARCH_MODULES = {"qwen3moe": "qwen3moe", "qwen35moe": "qwen35moe", "gemma3": "gemma3"}
"""GGUF ``general.architecture`` -> the :mod:`refsim.forward` module of its readable pass."""

PASSES: dict[tuple[str, str], tuple[str, str, bool, str | None]] = {
    # (arch, numerics): (weights/state module, "module.decode", takes hooks, "module.mtp decode")
    ("qwen3moe", "exact"): ("qwen3moe", "qwen3moe.decode", True, None),
    ("qwen3moe", "ggml"): ("qwen3moe", "fused.qwen3moe_decode", True, None),
    ("qwen35moe", "exact"): ("qwen35moe", "qwen35moe.decode", True, "qwen35moe.mtp_decode"),
    ("qwen35moe", "ggml"): ("qwen35moe", "fused.qwen35moe_decode", True, "fused.qwen35moe_mtp_decode"),
    ("gemma3", "exact"): ("gemma3", "gemma3.decode", False, None),
    ("gemma3", "ggml"): ("gemma3", "gemma3.decode", False, None),
    ("gemma3", "llamacpp"): ("gemma3_llamacpp", "passes.llamacpp_decode", False, None),
}
"""``(arch, numerics)`` -> ``(module, decode, hooks, mtp_decode)``, names within :mod:`refsim.forward`:
``module`` gives ``load_weights(model)`` and ``new_state(spec, capacity, ...)``; ``decode(weights, state,
tokens, positions, numerics, out_rows=None, tap=None[, hooks=None])``; ``hooks``: the decode takes
:class:`~refsim.streaming.hooks.LayerHooks`; ``mtp_decode``: the MTP head's decode (qwen35moe)."""


@dataclass(frozen=True)
class Pass:
    """One row of :data:`PASSES`, its functions imported.

    Attributes
    ----------
    arch, numerics : str
    load_weights : callable
        ``load_weights(model) -> weights``.
    new_state : callable
        ``new_state(spec, capacity, ...) -> state`` (KV cache; hybrid memory for qwen35moe).
    decode : callable
        ``decode(weights, state, tokens, positions, numerics, out_rows=None, tap=None[, hooks=None])
        -> DecodeResult``.
    hooks : bool
        ``decode`` takes ``hooks=`` (the streaming seam).
    mtp_decode : callable or None
        The MTP head's decode (:func:`refsim.forward.qwen35moe.mtp_decode`'s arguments).
    """

    arch: str
    numerics: str
    load_weights: Callable
    new_state: Callable
    decode: Callable
    hooks: bool
    mtp_decode: Callable | None = None


def llamacpp_decode(weights, state, tokens, positions, numerics=None, out_rows=None, tap=None):
    """:func:`refsim.forward.gemma3_llamacpp.decode` called as every pass is called; ``numerics`` is not read
    (the pass's arithmetic is llama.cpp's own)."""
    from refsim.forward import gemma3_llamacpp
    return gemma3_llamacpp.decode(weights, state, tokens, positions, out_rows=out_rows, tap=tap)


def _resolve(name: str) -> Callable:
    module, func = name.split(".")
    return getattr(importlib.import_module(f"refsim.forward.{module}"), func)


def pass_for(arch: str, numerics: str) -> Pass:
    """The pass of ``(arch, numerics)`` (:data:`PASSES`).

    Raises
    ------
    KeyError
        No row for the pair (:func:`refsim.spec.forward_target.ForwardTarget` checks the arch and the
        numerics first, each with its own one-line error).
    """
    module, decode, hooks, mtp = PASSES[(arch, numerics)]
    m = importlib.import_module(f"refsim.forward.{module}")
    return Pass(arch, numerics, m.load_weights, m.new_state, _resolve(decode), hooks,
                None if mtp is None else _resolve(mtp))


__all__ = ["ARCH_MODULES", "PASSES", "Pass", "pass_for", "llamacpp_decode"]
