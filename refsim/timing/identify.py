"""Every term of a device what-if, identified from the device's recorded plain runs (issue 29).

:func:`identify_device` reads a recording set (``PATH[@overrides]`` metrics CSVs, each with its
stdout ``.log`` beside it when there is one), keeps the plain runs (refsim.timing.plain: a
speculation run is never an input), and returns a :class:`DeviceTerms`:

- the device fit (refsim.timing.fit, with its jackknife);
- the prefill observations (refsim.timing.prefill), grouped by (model, prompt length, threads,
  ``--overlap``, cache on) — each group a set of repeats of the same work — and ``eps`` at the
  prefill's width per group (refsim.timing.positions);
- per model, the group ``eps`` is taken from: a serial group before an overlap one (a serial
  prefill splits into compute + flash + bookkeeping by the device's own serial rules; under
  overlap every read may be hidden, so it only bounds), without a cache before with one (no
  bookkeeping term), at the requested compute threads (``threads``; default the most common),
  then more repeats;
- with the model's tensor table (:class:`refsim.timing.work.PositionWork`), the tensor-size
  reading ``eps_bytes`` at the verify width; and ``eps`` at that width
  (:func:`refsim.timing.positions.width_eps`: the roofline of the two readings);
- the shared runs' own repeats (:func:`refsim.timing.noise.device_repeats`, the rule ``timing fit``
  stores a device file's noise by).

:func:`calibrate_cells` calibrates a device on published tables' ``off`` cells, ignoring their
speculation cells (they are what a what-if predicts).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from refsim.errors import ConfigError
from refsim.timing.fit import fit_device
from refsim.timing.model import DeviceModel
from refsim.timing.noise import Repeat, dead_levers, device_repeats  # noqa: F401 (dead_levers: re-exported)
from refsim.timing.plain import load_plain_runs, plain_cells
from refsim.timing.positions import bytes_eps, prefill_eps, width_eps
from refsim.timing.prefill import PrefillObs, prefill_figures, prefill_obs, prefill_union
from refsim.timing.runs import split_spec
from refsim.timing.terms import Term

GroupKey = tuple
"""(model, n_prompt, threads, overlap, cache) of a prefill group."""


@dataclass(frozen=True)
class DeviceTerms:
    """The terms of one device (module docstring).

    Attributes
    ----------
    name : str
    device : DeviceModel
        Fitted on the plain runs.
    prefills : tuple of PrefillObs
    prefill_groups : dict of GroupKey -> Term
        ``eps`` at the prefill's width per group of repeats.
    eps_prefill : dict of str -> (GroupKey, Term)
        Per model, the group chosen (module docstring).
    eps_bytes : dict of str -> Term
        Per model with a tensor table, the tensor-size reading at ``width``.
    eps : dict of str -> Term
        Per model, ``eps`` at the verify width (the roofline of the prefill and tensor-size
        readings).
    work_ratio : dict of str -> float
        Per model with a tensor table, verify/prefill multiplies per position.
    repeats : tuple of Repeat
        The recorded runs' own repeats.
    notes : tuple of str
        Inputs left out (speculation runs, mmap runs, runs without prefill figures) and why.
    """

    name: str
    device: DeviceModel
    prefills: tuple
    prefill_groups: dict
    eps_prefill: dict
    eps_bytes: dict
    eps: dict
    work_ratio: dict
    repeats: tuple
    notes: tuple = field(default=())

    def terms(self) -> dict:
        """Every identified value by name (for comparison and ``--explain``): the device's
        parameters and floors, and the ``eps`` terms."""
        out = {f"param:{k}": (p.value, p.se, p.identified) for k, p in self.device.params.items()}
        out |= {f"C:{m}": (c.value, c.se) for m, c in self.device.compute.items()}
        out |= {f"prefill:{k}": t for k, t in self.prefill_groups.items()}
        out |= {f"eps:{m}": t for m, t in self.eps.items()}
        out |= {f"eps_bytes:{m}": t for m, t in self.eps_bytes.items()}
        out |= {f"repeat:{r.name}": r.tok_s for r in self.repeats}
        return out


def _log_beside(path: str):
    from refsim.telemetry.log_reader import read_engine_log
    log = os.path.splitext(path)[0] + ".log"
    return read_engine_log(log) if os.path.exists(log) else None


def _intersect(terms: list[Term]) -> Term:
    """The sibling runs' estimates of one prefill union: their intervals' intersection (the hull
    when they do not meet), the value of the narrowest, kept inside."""
    best = min(terms, key=lambda t: t.width)
    lo, hi = max(t.lo for t in terms), min(t.hi for t in terms)
    if lo > hi:
        lo, hi = min(t.lo for t in terms), max(t.hi for t in terms)
    value = min(max(best.value, lo), hi)
    return Term("U", value, lo, hi, best.unit, "fitted",
                f"runs of the same model and prompt: {'; '.join(t.source for t in terms)}",
                "intersection of the siblings' intervals")


def prefill_observations(device: DeviceModel, runs, metrics: dict, sizes: dict) -> tuple[list, list]:
    """:class:`PrefillObs` of every run that has prefill figures.

    A run without a cache takes the prefill union of its siblings (same model and prompt length,
    cache on): the intersection of their intervals.

    Parameters
    ----------
    runs : list of RunData
    metrics : dict of str -> MetricsRun
        The runs as read, by label.
    sizes : dict of str -> ExpertSizes
        Per model file; a model without sizes gives no prefill observation (noted).
    """
    notes, unions, pending = [], {}, []
    for r in runs:
        mr = metrics[r.label]
        log = _log_beside(r.label)
        if r.model not in sizes:
            notes.append(f"{r.label}: no expert sizes for model {r.model!r}; its prefill is not used")
            continue
        try:
            n_prompt, _ = prefill_figures(mr, log, r.label)
        except ConfigError as exc:
            notes.append(f"{exc}; its prefill is not used")
            continue
        u = None
        if r.cache:
            try:
                u = prefill_union(mr, sizes[r.model], r.label)
                unions.setdefault((r.model, n_prompt), []).append(u)
            except ConfigError as exc:
                notes.append(f"{exc}; its prefill is not used")
                continue
        pending.append((r, mr, log, n_prompt, u))
    obs = []
    for r, mr, log, n_prompt, u in pending:
        if u is None:
            sib = unions.get((r.model, n_prompt))
            if not sib:
                notes.append(f"{r.label}: no cache and no sibling run of the same model and prompt "
                             f"with one; its prefill's flash read is unknown")
                continue
            u = _intersect(sib)
        obs.append(prefill_obs(mr, r, device, u, log, r.label))
    return obs, notes


def group_key(o: PrefillObs) -> GroupKey:
    return (o.model, o.n_prompt, o.threads, o.overlap, o.cache)


def choose_group(keys, threads: int | None = None):
    """The prefill group a model's ``eps`` is taken from (module docstring), or None.

    ``keys`` are ``(GroupKey, n_runs)`` pairs of one model.
    """
    keys = list(keys)
    if not keys:
        return None
    if threads is None:
        count = Counter()
        for k, n in keys:
            count[k[2]] += n
        threads = count.most_common(1)[0][0]
    # serial first, no cache first, the requested threads, more repeats
    return min(keys, key=lambda kn: (kn[0][3], kn[0][4], kn[0][2] != threads, -kn[1], str(kn[0])))[0]


def identify_device(specs: list[str], sizes: dict, work: dict | None = None, width: int = 4,
                    ctx: int = 256, threads: int | None = None, trim: int = 50,
                    name: str = "") -> DeviceTerms:
    """The terms of one device from its recording set (module docstring).

    Parameters
    ----------
    specs : list of str
        ``PATH[@overrides]`` metrics CSVs of one device (speculation runs are left out, noted).
    sizes : dict of str -> ExpertSizes
        Per model file, for the prefill's flash read.
    work : dict of str -> PositionWork, optional
        Per model file, the tensor table's per-position figures.
    width : int, default 4
        The verify width the tensor-size reading is given at (``--draft 3``).
    ctx : int, default 256
        Context of a verify position (attention's share of its multiplies).
    threads : int, optional
        Compute threads whose prefill group is preferred.

    Raises
    ------
    ConfigError
        Fewer than 2 plain runs; the readers' errors.
    """
    from refsim.telemetry.metrics_reader import read_metrics

    runs, notes = load_plain_runs(specs, trim)
    if len(runs) < 2:
        raise ConfigError(f"identify: {len(runs)} plain run(s) left of {len(specs)}; a device needs "
                          f"at least 2" + (f" ({'; '.join(notes)})" if notes else ""))
    device = fit_device(runs, name=name)
    metrics = {r.label: read_metrics(split_spec(r.label)[0]) for r in runs}
    obs, more = prefill_observations(device, runs, metrics, sizes)
    groups: dict = {}
    for o in obs:
        groups.setdefault(group_key(o), []).append(o)
    group_terms = {k: prefill_eps(device, g) for k, g in sorted(groups.items(), key=lambda kv: str(kv[0]))}
    chosen, eps_b, eps, ratio = {}, {}, {}, {}
    for model in sorted({o.model for o in obs}):
        key = choose_group([(k, len(g)) for k, g in groups.items() if k[0] == model], threads)
        chosen[model] = (key, group_terms[key])
        w = (work or {}).get(model)
        if w is not None:
            eb = bytes_eps(w, width)
            r = w.verify_elems(ctx) / w.prefill_elems(key[1])
            eps_b[model], ratio[model] = eb, r
            eps[model] = width_eps(group_terms[key], key[1], width, max(1.0, r), eb)
        else:
            eps[model] = width_eps(group_terms[key], key[1], width)
    reps = device_repeats(runs, device, {r.label: metrics[r.label].config for r in runs}, name)
    return DeviceTerms(name=name or device.name, device=device, prefills=tuple(obs),
                       prefill_groups=group_terms, eps_prefill=chosen, eps_bytes=eps_b, eps=eps,
                       work_ratio=ratio, repeats=tuple(reps), notes=tuple(notes + more))


def calibrate_cells(device: DeviceModel, tables, model: str, lanes: int, overlap: bool):
    """Calibrate ``C[model]`` on each published table's ``off`` cell (a table: a list of
    :class:`refsim.timing.cells.Cell` of one session and prompt). Speculation cells are left out
    with a note; a table without an ``off`` cell is skipped with a note.

    Returns
    -------
    calibrations : list of Calibration
        One per table with an ``off`` cell, in order.
    notes : list of str
    """
    from refsim.timing.calibrate import calibrate_to_cell
    out, notes = [], []
    for table in tables:
        offs, left = plain_cells(table)
        notes += left
        if not offs:
            notes.append("a table without an off cell: nothing to calibrate on")
            continue
        out.append(calibrate_to_cell(device, offs[0], model, lanes, overlap))
    return out, notes
