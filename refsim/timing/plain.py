"""Plain inputs only: what keeps every speculation run and cell out of a fit (issue 29).

A device's terms are identified on plain decoding (one position per decode) and calibrated on
plain (``off``) cells; a speculation run or cell is what a what-if *predicts*, so it must never
be an input of the prediction (that would be circular, as the position cost derived from the host
MTP cell was: docs/timing.md). This module decides what is speculative and filters it out, with a
note naming each input left out.

A metrics run is speculative when its preamble says ``spec=mtp|ngram`` or ``spec_draft_max`` > 0
(v2, bmoe-engine.md §4.1), when a decode confirmed more than one token (``mtp_batch`` > 1), or when
a turn's ``# summary`` counts drafts (``mtp_drafted``, ``drafted_steps`` > 0). An n-gram run whose
drafts were all rejected has ``mtp_batch`` 1 on every row, but its verify decodes still carried
extra positions; the preamble or the summary says so. v1 and legacy files predate speculation.
A published cell is speculative when it carries drafts (:attr:`refsim.timing.cells.Cell.draft`).
"""

from __future__ import annotations

from refsim.timing.runs import RunData, load_runs


def speculation_of(run) -> str | None:
    """Why a :class:`~refsim.telemetry.metrics_reader.MetricsRun` is speculative, or None when
    it is plain (see the module docstring)."""
    spec = run.config.get("spec")
    if spec not in (None, "off"):
        return f"spec={spec}"
    draft = run.config.get("spec_draft_max")
    if draft not in (None, "0"):
        return f"spec_draft_max={draft}"
    batch = run.column("mtp_batch")
    if batch is not None and batch.size and int(batch.max()) > 1:
        return f"mtp_batch up to {int(batch.max())}"
    for s in run.summaries:
        for key in ("mtp_drafted", "drafted_steps"):
            if s.get(key, 0) > 0:
                return f"{key}={s[key]:g}"
    return None


def load_plain_runs(specs: list[str], trim: int) -> tuple[list[RunData], list[str]]:
    """Read every ``PATH[@overrides]`` plain run of ``specs`` (:func:`refsim.timing.runs.load_runs`),
    leaving out the speculative ones and the unmodelled (mmap) ones, each with a note.

    Raises
    ------
    MetricsFormatError, ConfigError
        As :func:`refsim.timing.runs.load_runs`.
    """
    def speculative(path, run):
        why = speculation_of(run)
        return None if why is None else (f"left out: {path}: a speculation run ({why}); terms "
                                         f"are identified on plain runs only")
    return load_runs(specs, trim, skip_unmodelled=True, leave_out=speculative)


def plain_cells(cells) -> tuple[list, list[str]]:
    """The ``off`` cells of ``cells`` (:class:`refsim.timing.cells.Cell`, ``draft == 0``) and a
    note per speculation cell left out."""
    keep = [c for c in cells if c.draft == 0]
    notes = [f"left out: cell {c.name!r}: a speculation cell (draft {c.draft}); used for "
             f"validation only, never to identify a term" for c in cells if c.draft != 0]
    return keep, notes
