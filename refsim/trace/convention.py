"""The last-layer convention of a route trace: where a prefill chunk routes the last MoE layer.

Every layer of a prefill routes every prompt position, except, in some llama.cpp graphs, the
last: before the last layer's FFN those graphs keep only the rows whose logits were asked for
(``inp_out_ids``; ``ggml_get_rows`` under ``il == n_layer - 1``), and the engine asks logits on
the prompt's final token only (bmoe-engine.md §2, "Prefill"). The engine records what the graph
routed: ``router_hook.cpp`` ``RouterHook::flush_pending`` maps token ``j`` of a layer to
``base + j`` when the layer routed the whole batch and to the batch's final position when it
routed one row. So a recording holds one of two conventions:

- :data:`FINAL`: the chunk that ends a turn's prefill routes the last layer at its final position
  only, an earlier chunk of the turn routes it nowhere (``flush_pending`` returns without rows
  when the layer routed no token);
- :data:`EVERY`: every position, as every other layer.

Which one depends on the arch *and* on the llama.cpp the engine was built with (gemma4's graph
cut the rows in ``src/models/gemma4-iswa.cpp`` and cuts them only with
``cparams.embeddings_nextn_masked`` in the later ``src/models/gemma4.cpp``; a real gemma4-26B-A4B
recording routes every position). So the reader takes the convention from the recording: its
first prefill chunk that tells the two apart (:func:`chunk_shape`), and refuses a trace that
mixes them. :data:`ARCH_GRAPHS` records what llama.cpp's graph of each arch the engine streams
does (docs/trace-format.md, "The last-layer convention", cites each file and function).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FINAL = "final"
"""A prefill routes the last MoE layer at the output position only (the prompt's final one)."""
EVERY = "every"
"""A prefill routes the last MoE layer at every position."""
CONVENTIONS = (FINAL, EVERY)


@dataclass(frozen=True)
class ArchGraph:
    """What llama.cpp's graph of one arch does before its last layer's MoE.

    Attributes
    ----------
    convention : str or None
        :data:`FINAL` when the graph cuts the rows unconditionally in the sources read, None when
        the cut depends on the llama.cpp version or a context flag (the trace decides).
    strict : bool
        A trace of the other convention is refused (the graph and a real recording agree); when
        False it is read with a warning (the graph's source alone says so).
    source : str
        Where the rule comes from (file and function of llama.cpp, or the engine's recording).
    """

    convention: str | None
    strict: bool
    source: str


ARCH_GRAPHS = {
    "qwen3moe": ArchGraph(FINAL, True,
                          "llama.cpp src/models/qwen3moe.cpp, llama_model_qwen3moe::graph: "
                          "ggml_get_rows(inp_out_ids) under il == n_layer - 1, before "
                          "build_moe_ffn, unconditionally; the engine's Qwen3-30B-A3B trace"),
    "qwen2moe": ArchGraph(FINAL, False,
                          "llama.cpp src/models/qwen2moe.cpp, llama_model_qwen2moe::graph: "
                          "ggml_get_rows(inp_out_ids) under il == n_layer - 1"),
    "gpt-oss": ArchGraph(FINAL, False,
                         "llama.cpp src/models/openai-moe-iswa.cpp, llm_build_openai_moe_iswa: "
                         "ggml_get_rows(inp_out_ids) under il == n_layer - 1"),
    "lfm2moe": ArchGraph(FINAL, False,
                         "llama.cpp src/models/lfm2.cpp, llm_build_lfm2: "
                         "ggml_get_rows(inp_out_ids) under il == n_layer - 1"),
    "qwen35moe": ArchGraph(None, False,
                           "llama.cpp src/models/qwen35moe.cpp: the cut only with "
                           "cparams.embeddings_nextn_masked (false by default, "
                           "llama-context.cpp); rows gathered after output_norm otherwise"),
    "gemma4": ArchGraph(None, False,
                        "llama.cpp src/models/gemma4-iswa.cpp cuts under il == n_layer - 1; "
                        "src/models/gemma4.cpp only with cparams.embeddings_nextn_masked; the "
                        "engine's gemma4-26B-A4B recording routes every position"),
    "bailingmoe3": ArchGraph(None, False,
                             "llama.cpp src/models/bailingmoe3.cpp, "
                             "llama_model_bailingmoe3::graph: the cut only with "
                             "cparams.embeddings_nextn_masked"),
    "deepseek4": ArchGraph(None, False,
                           "llama.cpp src/models/deepseek4.cpp, llama_model_deepseek4::graph: "
                           "no cut before the last layer (rows gathered after it)"),
}
"""The archs of the engine's registry (bmoe-engine.md §6) and their llama.cpp graphs."""

UNKNOWN_GRAPH = ArchGraph(None, False, "no source: an arch outside the engine's registry")


def arch_graph(arch: str) -> ArchGraph:
    """:data:`ARCH_GRAPHS`'s entry for ``arch`` (:data:`UNKNOWN_GRAPH` when it has none)."""
    return ARCH_GRAPHS.get(arch, UNKNOWN_GRAPH)


def chunk_shape(n_pos: int, last_steps: np.ndarray, final_step: int, more: bool) -> str | None:
    """The convention one prefill chunk shows, or None when it shows neither.

    Parameters
    ----------
    n_pos : int
        Positions of the chunk.
    last_steps : (n,) int ndarray
        The distinct steps at which the chunk routes the last layer.
    final_step : int
        The chunk's last position.
    more : bool
        Another prefill chunk of the same turn follows (this chunk does not end the prefill).

    Returns
    -------
    str or None
        :data:`EVERY` when the last layer is routed at every position and the chunk could not be
        a :data:`FINAL` one (it has more than one position, or it does not end the prefill);
        :data:`FINAL` when it is routed nowhere in a chunk that does not end the prefill, or at the
        final position only of a chunk of more than one position that ends it; None otherwise (a
        one-position chunk ending the prefill reads the same under both; anything else breaks
        both, which the reader reports).
    """
    n = int(last_steps.size)
    if n == n_pos and (n_pos > 1 or more):
        return EVERY
    if more and n == 0:
        return FINAL
    if not more and n_pos > 1 and n == 1 and int(last_steps[0]) == final_step:
        return FINAL
    return None


def block_convention(block) -> tuple[str | None, int]:
    """The convention of a valid :class:`~refsim.events.EventBlock` and the index of the first
    prefill event that shows it (None, -1 when no event tells the two apart)."""
    from refsim.events import DecodeKind

    routed = (block.routes >= 0).any(axis=(0, 2))
    if not routed.any():
        return None, -1
    last = int(np.flatnonzero(routed)[-1])
    kind, turn, st = block.kind, block.turn, block.event_start
    for e in np.flatnonzero(kind == DecodeKind.PREFILL).tolist():
        a, b = int(st[e]), int(st[e + 1])
        more = (e + 1 < kind.size and kind[e + 1] == DecodeKind.PREFILL
                and turn[e + 1] == turn[e])
        hit = (block.routes[a:b, last] >= 0).any(axis=1)
        shape = chunk_shape(b - a, block.positions[a:b][hit], int(block.positions[b - 1]), more)
        if shape is not None:
            return shape, e
    return None, -1
