"""GGUF models: spec, tensor table, exact byte accounting, weights by memory map, synthetic files.

Entry points: :func:`open_model` (-> :class:`Model`), :func:`write_synthetic`,
:func:`qwen3_30b_a3b_q4_k_m_twin` (header-only twin of a real file). See docs/models.md.
"""

from refsim.model.bytes import EXPERT_SUFFIXES, LayerBytes, ModelBytes
from refsim.model.gguf_io import GGUFHeader, TensorInfo, read_header
from refsim.model.model import Model, open_model
from refsim.model.spec import SUPPORTED_ARCHS, ModelSpec
from refsim.model.synth import (QUANTS, QWEN3_30B_A3B_EIGHTH, qwen3_30b_a3b_q4_k_m_twin, write_header_only, write_weights,
                                write_synthetic)

__all__ = ["EXPERT_SUFFIXES", "GGUFHeader", "LayerBytes", "Model", "ModelBytes", "ModelSpec", "QUANTS",
           "QWEN3_30B_A3B_EIGHTH", "SUPPORTED_ARCHS", "TensorInfo", "open_model", "qwen3_30b_a3b_q4_k_m_twin",
           "read_header", "write_header_only", "write_synthetic", "write_weights"]
