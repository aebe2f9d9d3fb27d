"""``ForwardTarget``: the reference forward pass behind the speculative loop's Target protocol.

Implements :class:`refsim.spec.target.Target` (``prefill``/``decode``/``trim``/``hooks``) for any
arch of :data:`refsim.forward.passes.ARCH_MODULES`, running the pass the table
:data:`refsim.forward.passes.PASSES` gives for its ``(arch, numerics)``. It lives on the ``spec``
side because it adapts ``forward`` to ``spec``'s protocol (``spec`` imports ``forward``, never the
reverse). The prefill asks logits on the last prompt position only, so the last MoE layer routes
only that position (the last-layer rule; qwen3moe module docstring); decodes ask logits on every
row (a verify decode routes all of them).
"""

from __future__ import annotations

import os

import numpy as np

from refsim.errors import ConfigError, ModelFormatError
from refsim.forward.gemma3 import LLAMACPP
from refsim.forward.layers import Numerics
from refsim.forward.passes import ARCH_MODULES, pass_for
from refsim.forward.result import DecodeResult
from refsim.model import Model, open_model
from refsim.spec.target import TargetOutput
from refsim.streaming.hooks import LayerHooks


def eog_ids(model: Model) -> frozenset[int]:
    """The end-of-generation ids the loop stops at for ``model``: ``tokenizer.ggml.eos_token_id``
    when the file has one (what ``refsim run`` stops at, and ``refsim ngram-whatif --model``
    replays), else none."""
    eos = model.metadata.get("tokenizer.ggml.eos_token_id")
    return frozenset() if eos is None else frozenset([int(eos)])


def _output(res: DecodeResult) -> TargetOutput:
    return TargetOutput(logits=res.logits, routes=res.routes, weights=res.weights,
                        dropped=res.dropped, pred_routes=res.pred_routes,
                        pred_weights=res.pred_weights)


class ForwardTarget:
    """A GGUF model run by refsim's reference pass, one greedy sequence.

    Parameters
    ----------
    model : refsim.model.Model or path
    numerics : {'exact', 'ggml', 'llamacpp'} or Numerics, default 'exact'
        ``'llamacpp'`` (gemma3 only): llama.cpp's x86 CPU arithmetic bit for bit
        (:mod:`refsim.forward.gemma3_llamacpp`), as llama.cpp runs with ``logits_all``: every
        row goes through every layer. Not batch-invariant (llama.cpp is not), so a speculative
        run may legitimately differ from plain greedy, as the engine's does.
    capacity : int, default 256
        Initial KV rows (grows as needed).
    kv_type : {'f32', 'f16'}, default 'f32'
        KV cache element type; ``'f16'`` (llama.cpp's default) only with ``numerics='llamacpp'``.
    hooks : LayerHooks, optional
        The streaming knobs' hooks for a pass that takes them (default: an empty
        :class:`~refsim.streaming.hooks.LayerHooks`).

    Attributes
    ----------
    n_layer, n_expert, n_expert_used : int
    eos_ids : frozenset of int
        ``tokenizer.ggml.eos_token_id`` when the file has one.
    hooks : LayerHooks or None
        What the pass is handed on every prefill/decode (:class:`refsim.spec.target.Target`): a
        :class:`~refsim.streaming.hooks.LayerHooks` for the qwen3moe and qwen35moe passes (exact/ggml
        numerics), None for the others (no drop seam, probe or stale gate).
    passes : refsim.forward.passes.Pass
        The pass running the model (its ``decode``, ``mtp_decode``, ...).
    min_margin : float
        Smallest top-1/top-2 logit margin over every logits row produced so far (``inf`` before
        the first); rows below ~1e-2 are near-ties where llama.cpp may pick another token.
    results : list of DecodeResult
        Every decode's full result (prefill first), for inspection.

    Raises
    ------
    ModelFormatError
        Unsupported arch or a file without tensor data.
    ConfigError
        ``numerics='llamacpp'`` on another arch than gemma3, ``kv_type='f16'`` without it, an
        unknown numerics / kv_type, or ``hooks`` for a pass that takes none.
    """

    def __init__(self, model: Model | str | os.PathLike, numerics: str | Numerics = "exact", capacity: int = 256,
                 kv_type: str = "f32", hooks: LayerHooks | None = None):
        self.model = model if isinstance(model, Model) else open_model(model)
        spec = self.model.spec
        if spec.arch not in ARCH_MODULES:
            raise ModelFormatError(f"{self.model.path}: no forward pass for arch {spec.arch!r} "
                                   f"(available: {', '.join(ARCH_MODULES)})")
        if numerics == LLAMACPP:
            if spec.arch != "gemma3":
                raise ConfigError(f"--numerics {LLAMACPP}: implemented for gemma3 only "
                                  f"(refsim.forward.gemma3_llamacpp); {spec.arch} runs exact or ggml")
            self.numerics = Numerics("exact")      # not read: the llamacpp pass has its own arithmetic
            self.numerics_name = LLAMACPP
        else:
            if kv_type != "f32":
                raise ConfigError(f"kv_type {kv_type!r}: only the {LLAMACPP} numerics (gemma3) model an "
                                  f"F16 KV cache; exact and ggml keep K and V in float32")
            self.numerics = numerics if isinstance(numerics, Numerics) else Numerics(numerics)
            self.numerics_name = self.numerics.mode
        self.passes = pass_for(spec.arch, self.numerics_name)
        if hooks is not None and not self.passes.hooks:
            raise ConfigError(f"the {spec.arch} pass with {self.numerics_name} numerics takes no streaming hooks "
                              f"(only the qwen3moe and qwen35moe passes, exact/ggml numerics, do)")
        self.hooks = (hooks if hooks is not None else LayerHooks()) if self.passes.hooks else None
        self.weights = self.passes.load_weights(self.model)
        self.state = (self.passes.new_state(spec, capacity, kv_type) if self.numerics_name == LLAMACPP
                      else self.passes.new_state(spec, capacity))
        self.n_layer = spec.n_layer
        self.n_expert = spec.n_expert
        self.n_expert_used = spec.n_expert_used
        self.eos_ids = eog_ids(self.model)
        self.min_margin = float("inf")
        self.results: list[DecodeResult] = []

    def _run(self, tokens, positions, out_rows=None, phase: int = 1) -> DecodeResult:
        hooks = self.hooks
        kw = {}
        if hooks is not None:
            hooks.begin_graph(phase)
            kw["hooks"] = hooks
        with np.errstate(invalid="ignore", over="ignore"):   # NaN/inf from the file: refused just below, in one line
            res = self.passes.decode(self.weights, self.state, tokens, positions, self.numerics,
                                     out_rows=out_rows, **kw)
        bad = ~np.isfinite(res.logits)
        if bad.any():
            row, col = (int(v[0]) for v in np.nonzero(bad))
            raise ModelFormatError(
                f"{self.model.path}: decode {len(self.results)} produced a non-finite logit "
                f"({float(res.logits[row, col])} at position {int(np.asarray(positions).reshape(-1)[res.out_rows[row]])}, "
                f"token id {col}): the file's weights or metadata hold NaN/inf (refsim does not "
                f"print tokens chosen from such logits)")
        self.results.append(res)
        if res.margin.size:
            self.min_margin = min(self.min_margin, float(res.margin.min()))
        return res

    def prefill(self, tokens: np.ndarray) -> TargetOutput:
        """Decode the prompt into an empty KV; one logits row (the last position).

        Raises
        ------
        ConfigError
            If the KV cache is not empty or the prompt is empty.
        """
        tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if self.state.n != 0:
            raise ConfigError(f"prefill needs an empty KV cache (holds {self.state.n} positions)")
        if tokens.size == 0:
            raise ConfigError("prefill: empty prompt")
        res = self._run(tokens, np.arange(tokens.size), out_rows=[tokens.size - 1], phase=0)
        return _output(res)

    def decode(self, tokens: np.ndarray, positions: np.ndarray) -> TargetOutput:
        """Decode ``tokens`` at ``positions`` (contiguous from the KV length); a row per position."""
        return _output(self._run(tokens, positions))

    def trim(self, n_keep: int) -> None:
        """Keep KV positions ``< n_keep`` (the rollback after a rejected draft)."""
        self.state.trim(n_keep)
