"""Predicting a published speculation cell from its off cell and its own counters.

The engine's speculation tables (bmoe-engine.md §7) give, per cell, tok/s, flash MiB per token,
tokens per verify decode and (for n-gram) the share of decodes that carried a draft. A cell is
predicted on a fitted device (refsim.timing.model) in two steps:

1. the **off** cell calibrates the compute floor of the cell's model and prompt on the device:
   ``C`` is solved from ``tail * (C + cache (m0 + m1 x) + overlap kappa x + flash(x)) = 1000 /
   tok_s_off`` at the off cell's ``x`` MiB per token (the published models differ from the fitted
   runs': MXFP4 on the host, and the prompts differ);
2. a speculation cell's decode reads ``X = MiB/token * tokens/decode``, carries on average
   ``1 + coverage * draft`` positions, and costs ``tail * (C (1 + eps * coverage * draft) + ...
   at X)``; its tok/s is ``1000 * tokens/decode / that``, and its effective tok/s adds the drafting
   cost (the MTP head's, ms per emitted token) to each token.

``eps`` (the compute cost of an extra verify position, as a fraction of one position's) is the one
input no recorded run identifies; docs/timing.md derives 0.2-0.4 from the host MTP figures.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from refsim.timing.calibrate import solve_floor
from refsim.timing.model import DeviceModel, Param


@dataclass(frozen=True)
class Cell:
    """One published cell (bmoe-engine.md §7)."""

    name: str
    tok_s: float                 # published tok/s
    mib_per_token: float         # published flash MiB/token
    tokens_per_decode: float = 1.0
    draft: int = 0               # draft width (0: off)
    coverage: float = 1.0        # decodes that carried a draft (MTP: every one)
    draft_ms_per_token: float = 0.0


def calibrated(device: DeviceModel, off: Cell, model: str, lanes: int, overlap: bool) -> DeviceModel:
    """``device`` with ``C[model]`` solved so that it predicts the off cell exactly
    (:func:`refsim.timing.calibrate.solve_floor` at the cell's one read level).

    Raises
    ------
    ConfigError
        If no positive compute floor reproduces the off cell (the off cell is faster than the
        device's flash and bookkeeping alone allow).
    """
    c = solve_floor(device, model, [off.mib_per_token], lanes, overlap, True, 1000.0 / off.tok_s,
                    where=off.name)
    return replace(device, compute={**device.compute, model: Param(c)})


def predict_cell(device: DeviceModel, cell: Cell, model: str, lanes: int, overlap: bool,
                 eps: float) -> tuple[float, float]:
    """(tok/s, effective tok/s) predicted for ``cell`` on a device calibrated by
    :func:`calibrated`."""
    x = cell.mib_per_token * cell.tokens_per_decode
    parts = device.token_ms([x], model, lanes, overlap, True)
    extra = device.compute_floor(model) * eps * cell.coverage * cell.draft
    decode = float(parts["wall"][0]) + device.value("tail") * extra
    per_token = decode / cell.tokens_per_decode
    return 1000.0 / per_token, 1000.0 / (per_token + cell.draft_ms_per_token)


# --- the published cells (bmoe-engine.md §7) ------------------------------------------------------

HEAD_MS_PER_TOKEN = 21.5
"""The MTP head's cost on the host, ms per emitted token: bmoe-engine.md §7 "The head costs
0.020-0.023 s/tok" (midpoint)."""

HOST_MTP = [  # MTP, host: --overlap --cache-mb auto --drop-cold-experts 0.75, 256 tokens
    Cell("host mtp off", 7.12, 19.7),
    Cell("host mtp d2", 7.66, 30.3, 2.42, 2, 1.0, HEAD_MS_PER_TOKEN),
    Cell("host mtp d3", 8.19, 33.7, 2.78, 3, 1.0, HEAD_MS_PER_TOKEN),
    Cell("host mtp d4", 7.64, 31.1, 3.08, 4, 1.0, HEAD_MS_PER_TOKEN),
]
HOST_PROSE = [  # n-gram vs MTP, host, prose (the off cell; its repeat differs by 13.6 %)
    Cell("host prose off", 5.80, 46.0),
    Cell("host prose mtp d3", 8.80, 42.2, 2.81, 3, 1.0, HEAD_MS_PER_TOKEN),
    Cell("host prose ngram d3", 6.51, 32.3, 1.05, 3, 0.074),
]
HOST_COPY = [
    Cell("host copy off", 5.45, 58.1),
    Cell("host copy mtp d3", 7.40, 65.5, 3.46, 3, 1.0, HEAD_MS_PER_TOKEN),
    Cell("host copy ngram d3", 5.24, 67.2, 1.20, 3, 0.150),
]
PHONE_MTP = [  # MTP, phone: overlap, 3000 MiB, pinned dense, drop 0.75 (off: 5.82 / 6.14);
    # tok/verify as 1 + d * acceptance (the doc gives the range 2.35-2.52)
    Cell("phone mtp off", 5.82, 69.3),
    Cell("phone mtp d2", 5.59, 93.8, 1.0 + 2 * 0.69, 2, 1.0),
    Cell("phone mtp d3", 4.38, 106.6, 1.0 + 3 * 0.52, 3, 1.0),
]
PHONE_NGRAM = [  # n-gram, phone (thermally gated); tok/verify derived as 1 + coverage * d * accept
    Cell("phone prose off", 5.17, 82.5),
    Cell("phone prose ngram", 4.90, 105.8, 1.0 + 0.048 * 3 * 0.222, 3, 0.048),
    Cell("phone copy off", 4.43, 127.0),
    Cell("phone copy ngram", 3.14, 145.1, 1.0 + 0.142 * 3 * 0.500, 3, 0.142),
]
