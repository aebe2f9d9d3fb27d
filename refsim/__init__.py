"""refsim: a reference simulator of the streamed-MoE speculative decoding loop.

Rooms (see docs/architecture.md): ``model`` (GGUF), ``kernels`` (Numba quant kernels),
``forward`` (reference passes), ``spec`` (draft, verify, accept), ``cache`` (expert cache and
flash accounting), ``trace`` (route-trace files), ``telemetry`` (engine-format output),
``studies`` (what-if sweeps). Data flows one way, through :class:`refsim.events.DecodeEvent`.
"""

__version__ = "0.1.0"

MIB = 1 << 20
"""Bytes in one MiB (2**20). Every ``*_mib`` figure refsim prints is bytes / MIB."""

MAX_CACHE_MIB = 1 << 40
"""Largest cache budget refsim counts: 2**40 MiB = 1 EiB (``--cache-mb`` and a trace's recorded
``cache_mb=``; byte counts stay far inside int64)."""
