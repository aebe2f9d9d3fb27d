"""The memory-pressure model against the engine's phone data: every shared phone run and the
published phone cells (docs/memory-pressure.md; ``tools/pressure_table.py`` prints these rows).

- :func:`recorded_rows`: the runs that record faults (2026-07-22): recorded majflt/token against
  the model at the run's own measured eviction, with ``g`` pooled over the four runs and with
  ``g`` from the other three (leave one run out).
- :func:`lanes_rows`: the 2026-07-12 runs (legacy layout: no ``majflt`` column): the model's
  prediction from the configuration (``R`` = the sidecar's ``mem_avail_before_kb``), beside the
  recorded ``MemAvailable`` floor.
- :func:`cell_rows`: the published phone cells with majflt/token (bmoe-engine.md §7, n-gram and
  MTP on the phone): the direction and size of the change from each cell's ``off`` base that the
  model gives from the memory speculation adds (the ledger's snapshots and draft context).

MiB = 2^20 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from refsim import MIB
from refsim.timing.pressure import PressureFit, majflt_at_excess, predict_majflt
from refsim.timing.terms import Term


@dataclass(frozen=True)
class FaultCell:
    """A published phone cell with its major faults per token (bmoe-engine.md §7)."""

    name: str
    base: tuple
    """The cells (names) this one is compared with: the same prompt with speculation off."""
    majflt: tuple
    """Recorded faults/token: one value, or (low, high) when the doc gives a range."""
    spec: str
    """``off``, ``ngram`` or ``mtp``."""
    draft: int
    mib_per_token: float
    hit: float
    """Cumulative hit fraction."""


PHONE_FAULT_CELLS = (
    # n-gram, phone (thermally gated): prose / copy prompts
    FaultCell("prose off", ("prose off",), (299,), "off", 0, 82.5, 0.809),
    FaultCell("prose off (repeat)", ("prose off",), (480,), "off", 0, 82.5, 0.809),
    FaultCell("prose ngram", ("prose off", "prose off (repeat)"), (330,), "ngram", 3, 105.8, 0.771),
    FaultCell("copy off", ("copy off",), (126,), "off", 0, 127.0, 0.676),
    FaultCell("copy mtp", ("copy off",), (958,), "mtp", 3, 151.7, 0.586),
    FaultCell("copy ngram", ("copy off",), (1427,), "ngram", 3, 145.1, 0.653),
    # MTP, phone (overlap, 3000 MiB, pinned dense, drop 0.75); off 69-109
    FaultCell("mtp off", ("mtp off",), (69, 109), "off", 0, 69.3, 0.735),
    FaultCell("mtp d2", ("mtp off",), (230,), "mtp", 2, 93.8, 0.654),
    FaultCell("mtp d3", ("mtp off",), (633,), "mtp", 3, 106.6, 0.667),
)
"""Published phone cells with majflt/token (bmoe-engine.md §7: "n-gram, phone" and "MTP, phone";
docs/mtp.md). All on the 12 GB phone, Qwen3.6-35B-A3B Q4_K_M, 3000 MiB cache, pinned dense."""


@dataclass(frozen=True)
class RecordedRow:
    label: str
    recorded: float
    """Mean majflt/token over the kept tokens."""
    summary: float
    """The ``# summary``'s whole-run ``majflt/tok``."""
    evicted_fraction: float
    touched_mib: float
    pooled: Term
    loo: float
    """The model with ``g`` pooled over the other runs only."""


def recorded_rows(fit: PressureFit, runs, summaries) -> list[RecordedRow]:
    """One row per run that records faults: the model at the run's own eviction.

    ``pooled`` = ``mean(256 g W q)`` with the fit's ``g`` (interval: ``g``'s); ``loo`` the same
    with ``g`` = Σ majflt / Σ exposure over the other runs.
    """
    out = []
    for i, r in enumerate(runs):
        x = float(r.exposure.mean())
        g = fit.refault
        others = [o for j, o in enumerate(runs) if j != i]
        g_loo = sum(float(o.majflt.sum()) for o in others) / sum(float(o.exposure.sum()) for o in others)
        out.append(RecordedRow(r.label, float(r.majflt.mean()), float(summaries[i]),
                               float(r.evicted_fraction.mean()), float(r.touched_mib.mean()),
                               Term("majflt", g.value * x, g.lo * x, g.hi * x, "faults/token",
                                    "fitted", fit.source, "at the run's measured swap / (rss + swap)"),
                               g_loo * x))
    return out


@dataclass(frozen=True)
class LanesRow:
    label: str
    model: str
    cache_mib: float
    mmap: bool
    ram_mib: float
    demand_mib: float
    anon_mib: float
    touched_mib: float
    floor_mib: float
    predicted: Term


def lanes_rows(fit: PressureFit, files, models) -> list[LanesRow]:
    """One row per 2026-07-12 run (``files``: CSV paths, each with its ``.metrics`` sidecar).

    Demand: the cache budget from the name (``cN``; ``stream``: 0) as anon, the dense set as page
    cache (these runs predate ``--dense-weights anon``: the dense weights stayed mmap-resident,
    engine-docs/benchmarks.md "Dense-weight policy"); an ``mmap`` run keeps the whole file in
    the page cache. ``W`` = the run's hits (``T`` - mean read) + the dense set (``mmap``: ``T`` +
    dense). KV and recurrent state are left out (no tensor table here; Qwen3-30B and gemma have no
    recurrent layers and their KV at these contexts is tens of MiB).
    """
    from refsim.telemetry.metrics_reader import read_metrics
    out = []
    for path in files:
        run = read_metrics(path)
        name = path.rsplit("/", 1)[-1].removesuffix(".csv")
        m = models[name.split("_")[0]]
        mmap = "_mmap" in name
        cache = float(name.split("_c")[1].split("_")[0]) if "_c" in name else 0.0
        read = float(run.column("read_bytes")[1:].mean()) / MIB
        if mmap:
            page, w = m.file_mib, m.t_mib + m.dense_mib
        else:
            page, w = m.dense_mib, max(m.t_mib - read, 0.0) + m.dense_mib
        ram = run.sidecar["mem_avail_before_kb"] / 1024.0
        floor = run.sidecar["mem_avail_floor_kb"] / 1024.0
        d = cache + page
        out.append(LanesRow(name, m.name, cache, mmap, ram, d, cache, w, floor,
                            predict_majflt(fit, d, ram, w)))
    return out


@dataclass(frozen=True)
class CellRow:
    cell: FaultCell
    base_recorded: tuple
    added_mib: float
    ratio: Term
    """Predicted faults/token of the cell over its base's (interval: ``E0``'s and ``g``'s ends)."""
    recorded_ratio: tuple
    """(low, high) over the base's recorded values."""


def cell_rows(fit: PressureFit, ledger_for, pinned_mib: float, anon_base_mib: float,
              touched_fixed_mib: float) -> list[CellRow]:
    """The published cells against their base (the same phone, recipe and prompt, speculation off).

    Parameters
    ----------
    ledger_for : callable (spec, draft) -> MemoryLedger
        The ledger of the cell's configuration (speculation adds ``n_rs_seq = draft`` snapshots
        and, with MTP, the draft context).
    pinned_mib : float
        Pinned MiB (the dense set under ``ahwb``), not evictable.
    anon_base_mib : float
        The base's evictable pool ``P0`` (cache + KV + one recurrent slot).
    touched_fixed_mib : float
        What a token touches besides the cache hits (one recurrent slot and the KV read).

    Notes
    -----
    The base eviction is the fit's ``E0`` (the phone's measured swap at this recipe); a cell's is
    ``E0`` plus what speculation adds to the demand (``ledger.speculation_bytes``). A cell's
    hits per token are read from its published figures: ``MiB/token x hit / (1 - hit)``.
    """
    base_by_name = {c.name: c for c in PHONE_FAULT_CELLS}
    e0 = fit.evicted
    out = []
    for cell in PHONE_FAULT_CELLS:
        base = base_by_name[cell.base[0]]  # the bases of one cell share a configuration
        base_values = tuple(x for name in cell.base for x in base_by_name[name].majflt)
        added = ledger_for(cell.spec, cell.draft).speculation_bytes / MIB
        hits = lambda c: c.mib_per_token * c.hit / (1.0 - c.hit)  # noqa: E731
        w_base = hits(base) + touched_fixed_mib
        w_cell = hits(cell) + touched_fixed_mib
        p0 = anon_base_mib

        def ratio(e: float) -> float:
            b = majflt_at_excess(fit, e, p0, w_base).value
            c = majflt_at_excess(fit, e + added, p0 + added, w_cell).value
            return c / b if b > 0 else float("nan")

        ends = sorted([ratio(e0.lo), ratio(e0.hi)])
        v = ratio(e0.value)
        rec = [x / y for x in cell.majflt for y in base_values]
        out.append(CellRow(cell, base_values, added,
                           Term("ratio", v, min(ends[0], v), max(ends[1], v), "ratio", "fitted",
                                fit.source, "faults/token over the base's, E0's ends; g cancels"),
                           (min(rec), max(rec))))
    return out

