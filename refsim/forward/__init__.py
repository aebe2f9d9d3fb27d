"""Reference forward passes: the arithmetic the engine only approximates, with routes.

Each arch module (``qwen3moe``, ``qwen35moe``, ``gemma3``) provides ``load_weights(model) -> Weights``,
``new_state(spec) -> state`` and a readable ``decode(weights, state, tokens, positions, numerics,
out_rows=None, tap=None) -> DecodeResult`` that reads top to bottom like llama.cpp's
``src/models/<arch>.cpp`` (a per-layer ``layer`` function, as nanoGPT's ``Block``). The rooms:

- :mod:`~refsim.forward.layers`: the readable blocks (``linear``, ``rms_norm``, ``rope_neox``,
  ``attention``, ``swiglu``/``geglu``, ``moe_ffn``); :mod:`~refsim.forward.routing`: the router and
  the streaming knobs' per-layer hook sequence; :mod:`~refsim.forward.loader`: tensors from a GGUF;
  :mod:`~refsim.forward.kv` / :mod:`~refsim.forward.recurrent`: the state.
- :mod:`~refsim.forward.fused`: the fused one-position kernels (same bits, other speed);
  :mod:`~refsim.forward.gemma3_llamacpp`: llama.cpp's own arithmetic for gemma3.
- :mod:`~refsim.forward.passes`: the table ``(arch, numerics) -> pass`` a target picks from.

:class:`refsim.spec.forward_target.ForwardTarget` adapts a pass to the speculative loop's Target
protocol (re-exported here, lazily, for docs/real-model.md's example). See docs/forward.md.

Names are imported on first use (:mod:`refsim.lazy`).
"""

import importlib

from refsim.lazy import lazy_exports

_getattr, _dir = lazy_exports(__name__, {
    "KVCache": "kv", "NUMERICS": "layers", "Numerics": "layers", "DecodeResult": "result",
})


def __getattr__(name: str):
    if name == "ARCHS":      # GGUF arch string -> its readable pass's module
        from refsim.forward.passes import ARCH_MODULES
        value = {arch: importlib.import_module(f"{__name__}.{m}") for arch, m in ARCH_MODULES.items()}
    elif name == "ForwardTarget":
        value = importlib.import_module("refsim.spec.forward_target").ForwardTarget
    else:
        return _getattr(name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(_dir()) | {"ARCHS", "ForwardTarget"})


__all__ = ["ARCHS", "DecodeResult", "ForwardTarget", "KVCache", "NUMERICS", "Numerics", "qwen3moe"]
