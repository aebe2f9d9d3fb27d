"""Header-only twins of real models: the real tensor table (names, shapes, quant types), no
weights. For byte accounting at real widths (the memory ledger, the what-if terms) without the
real file.

Moved here from tests/cache/test_ledger.py (and examples/spec_study.py, which had the same
function); the implementation now lives in :mod:`refsim.model.synth` (``refsim synth --like
qwen3.6-35b-a3b --header-only`` writes it), re-exported here for tests, examples and tools.
"""

from __future__ import annotations

from refsim.model.synth import qwen36_35b_a3b_twin as qwen36_twin  # noqa: F401 (the one implementation)


