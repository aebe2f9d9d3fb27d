"""The inputs of the published-verdicts validation (refsim.timing.validate) from the shared
folder: both devices identified on their plain runs, their noise, the Qwen3-30B route trace and
the Qwen3.6-35B-A3B twin (docs/timing.md, "Published verdicts, predicted").

Nothing is copied from the shared folder; a missing folder is the caller's to skip
(:mod:`refsim.testing.shared`).
"""

from __future__ import annotations

import os

from refsim.testing.recording_sets import DESKTOP, PHONE_DROP, PHONE_LANES, QWEN36, set_inputs
from refsim.testing.shared import shared_path

TRIM = 50
"""Warm-up tokens left out of every fit (docs/timing.md)."""


def device_inputs(tmpdir: str, specs_filter=None) -> dict:
    """``{'host': DeviceInputs, 'phone': DeviceInputs}``.

    host: the desktop set (Qwen3.6 Q4_K_M), eps from its chosen prefill group with the twin's
    tensor table, and the spread of its runs' ``--cache-mb auto`` budgets. phone: the 2026-07-22 drop-cold set (the cells' model and recipe); its own
    prefills do not identify eps (docs/whatif-terms.md), so eps is the same phone's 2026-07-12
    Qwen3-30B prefill reading (plain runs, no tensor table). ``specs_filter`` (a callable on a
    spec list) lets a test add or remove runs.
    """
    from refsim.timing.identify import identify_device
    from refsim.timing.noise import auto_budget_sigma
    from refsim.timing.plain import load_plain_runs
    from refsim.timing.validate import HOST, PHONE, DeviceInputs, noise_sigma
    keep = specs_filter or (lambda specs: specs)
    out = {}
    for cls, name in ((HOST, DESKTOP), (PHONE, PHONE_DROP)):
        inp = set_inputs(name, tmpdir)
        specs = keep(inp.specs)
        terms = identify_device(specs, inp.sizes, inp.work, name=name, trim=TRIM)
        runs, _ = load_plain_runs(specs, TRIM)
        if cls == HOST:
            key, eps_p = terms.eps_prefill[QWEN36]
            out[cls] = DeviceInputs(terms, tuple(runs), eps_p, key[1], inp.work[QWEN36],
                                    f"{name} prefill group {key}",
                                    noise_sigma(HOST, terms.device, terms.repeats),
                                    auto_budget_sigma(specs))
        else:
            lanes = set_inputs(PHONE_LANES, tmpdir)
            lt = identify_device(keep(lanes.specs), lanes.sizes, lanes.work, name=PHONE_LANES,
                                 trim=TRIM)
            key, eps_p = lt.eps_prefill["qwen"]
            out[cls] = DeviceInputs(terms, tuple(runs), eps_p, key[1], None,
                                    f"{PHONE_LANES} prefill group {key} (the drop-cold set's "
                                    f"prefills do not identify eps)", noise_sigma(PHONE))
    return out


def validation_inputs(tmpdir: str, specs_filter=None):
    """:class:`refsim.timing.validate.Inputs` from the shared folder (see :func:`device_inputs`)."""
    from refsim.model import open_model
    from refsim.testing.recording_sets import qwen36_inputs
    from refsim.testing.twins import qwen36_twin
    from refsim.timing.validate import Inputs
    from refsim.trace import read_trace
    work, _ = qwen36_inputs(tmpdir)
    twin = open_model(qwen36_twin(os.path.join(tmpdir, "q36-validate.gguf")))
    trace = read_trace(shared_path("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv"))
    return Inputs(device_inputs(tmpdir, specs_filter), trace, work, twin)
