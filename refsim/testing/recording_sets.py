"""The engine's shared recording sets (``../shared/real-runs``) as the what-if terms read them:
each set's run specs (with the ``@`` overrides the legacy files need), the expert entry sizes
per model, and the tensor-table figures where a header-only twin exists (docs/whatif-terms.md).

Nothing here is copied from the shared folder; the paths are resolved with
:mod:`refsim.testing.shared` and a missing folder is the caller's to skip.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from refsim.testing.shared import shared_path

QWEN36 = "Qwen_Qwen3.6-35B-A3B-Q4_K_M.gguf"
"""The model file the desktop and phone drop-cold runs name in their preamble."""

DESKTOP = "desktop-2026-07-24-qwen36"
PHONE_LANES = "phone-2026-07-12-cache-lanes"
PHONE_DROP = "phone-2026-07-22-drop-cold"
SETS = (DESKTOP, PHONE_LANES, PHONE_DROP)
ROUTE_TRACE = ("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")
"""The shared Qwen3-30B route trace, as parts under the shared folder."""


def check_shared_inputs():
    """The shared folder, after checking that the three recording sets and the route trace are
    there (a script's one-line error otherwise: :func:`refsim.testing.shared.shared_or_error`)."""
    from refsim.testing.shared import shared_or_error
    return shared_or_error(*(("real-runs", n) for n in SETS), ROUTE_TRACE)

GEMMA_ENTRY_BYTES = (3593216, 4336640)
"""gemma-4-26B-A4B Q4_K_M expert entries, smallest and largest (bmoe-engine.md §3.1, from the
route-trace preamble); which layers have which is not published."""
GEMMA_MOE_LAYERS = 30
"""gemma-4-26B-A4B MoE layers (engine-docs bench-notes 2026-07-15-route-trace: 30 layers)."""


def set_specs(name: str) -> list[str]:
    """``PATH[@overrides]`` of every CSV of a shared set, sorted. The legacy phone files state
    neither model nor lanes: ``_l2`` files ran 2 lanes, every other 4 (the folder's summary.md)."""
    folder = shared_path("real-runs", name)
    names = sorted(n for n in os.listdir(folder) if n.endswith(".csv"))
    if name == PHONE_LANES:
        return [f"{folder / n}@model={n.split('_')[0]},io_threads={2 if '_l2' in n else 4}"
                for n in names]
    return [str(folder / n) for n in names]


@dataclass(frozen=True)
class SetInputs:
    """What :func:`refsim.timing.identify.identify_device` needs for one shared set."""

    name: str
    specs: list
    sizes: dict
    work: dict


def qwen36_inputs(tmpdir: str):
    """``(PositionWork, ExpertSizes)`` of the Qwen3.6-35B-A3B header-only twin written in
    ``tmpdir`` (refsim.testing.twins)."""
    from refsim.model import open_model
    from refsim.testing.twins import qwen36_twin
    from refsim.timing.prefill import ExpertSizes
    from refsim.timing.work import position_work
    model = open_model(qwen36_twin(os.path.join(tmpdir, "q36.gguf")))
    return position_work(model), ExpertSizes.from_model_bytes(
        model.bytes, 8, "the Qwen3.6-35B-A3B twin's tensor table (refsim.testing.twins)")


def set_inputs(name: str, tmpdir: str) -> SetInputs:
    """The inputs of one shared set (the Qwen3-30B sizes come from the shared route trace's
    preamble, the same Q4_K_M file the 2026-07-12 phone runs read)."""
    from refsim.timing.prefill import ExpertSizes
    if name in (DESKTOP, PHONE_DROP):
        work, sizes = qwen36_inputs(tmpdir)
        return SetInputs(name, set_specs(name), {QWEN36: sizes}, {QWEN36: work})
    from refsim.trace import read_trace
    trace = read_trace(shared_path("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv"))
    sizes = {
        "qwen": ExpertSizes.from_layer_bytes(trace.header.expert_bytes, 8,
                                             "the Qwen3-30B route trace's preamble"),
        "gemma": ExpertSizes.from_range(GEMMA_MOE_LAYERS, 8, *GEMMA_ENTRY_BYTES,
                                        "bmoe-engine.md §3.1 (gemma entry sizes)"),
    }
    return SetInputs(name, set_specs(name), sizes, {})
