"""The notebook face's studies: one call each, from a trace path (or a read trace) and budgets in
MiB, to a result that is also a table (``.to_pandas()``; docs/notebook.md).

These are thin wrappers: each calls the one implementation the command line calls
(``refsim replay`` -> :func:`refsim.studies.replay.replay_trace`, ``refsim sweep`` ->
:func:`refsim.studies.sweep.sweep_budgets` / :func:`~refsim.studies.sweep.sweep_knobs`,
``refsim union`` -> :func:`refsim.studies.union.union_study`, ``refsim timing fit/predict`` ->
:func:`refsim.timing.fit.fit_device` / :func:`~refsim.timing.fit.predict_run`), so a number here is
the number the command prints. ``import refsim`` exposes them lazily (``refsim.sweep(...)``).
MiB = 2^20 bytes throughout.
"""

from __future__ import annotations

import os

DEFAULT_WINDOWS = tuple(range(1, 9))
"""``refsim union``'s default window widths: 1..8 (a verify batch of 1 token + up to 7 drafts)."""


def _trace(trace, purpose: str):
    """A :class:`~refsim.trace.RouteTrace` from a path or a trace already read; a file must have
    rows (as the command requires: nothing to ``purpose`` otherwise)."""
    from refsim.trace import RouteTrace, read_trace
    t = trace if isinstance(trace, RouteTrace) else read_trace(trace)
    if t.path:                           # read from a file (a trace built in memory has no path)
        t.require_rows(purpose)
    return t


def _budget(cache_mb) -> float:
    """One budget in MiB checked by ``--cache-mb``'s own validator
    (:func:`refsim.validators.cache_mib`) on ``str(cache_mb)``: the command's message for a value
    it refuses (``True``, ``nan``, 0, beyond 2^40).

    Raises
    ------
    UsageError
        ``"argument --cache-mb: expected a number of MiB from 2^-20 (one byte) to 2^40 (1 EiB),
        got 'TEXT'"``.
    """
    from refsim.validators import cache_mib, check_value
    return check_value("--cache-mb", str(cache_mb), cache_mib)


def replay(trace, cache_mb: float, *, knobs=None, max_disagreements: int = 10):
    """Replay a route trace through the engine's LRU expert cache at one budget (``refsim replay``).

    Parameters
    ----------
    trace : str, path-like or RouteTrace
        A ``route_trace v1`` file, or a trace :func:`refsim.read_trace` returned.
    cache_mb : float
        Budget in MiB (2^20 bytes), 2^-20..2^40; ``int(cache_mb * 2**20)`` bytes; checked as
        ``--cache-mb str(cache_mb)`` (:func:`_budget`).
    knobs : StreamKnobs, optional
        The streaming knobs (``--drop-cold-experts``, ``--prefetch``, ``--route-ahead``,
        ``--predict-prefetch``); default off.
    max_disagreements : int
        Disagreeing rows kept in the report.

    Returns
    -------
    refsim.studies.replay.ReplayReport
        ``.summary`` (a :class:`~refsim.cache.CacheSummary`: hit %, MiB, MiB/token, ...;
        ``.summary.to_pandas()`` one row), the residency comparison, and ``.to_pandas()``: one row
        per event, the columns of ``refsim replay --csv``.

    Raises
    ------
    TraceFormatError
        The file is malformed, or has no rows.
    ConfigError
        A budget outside 2^-20..2^40 MiB (:class:`~refsim.errors.UsageError`, the CLI's message);
        knobs the trace cannot replay (weights missing for dropping, no prediction columns for
        ``predict_prefetch``).
    """
    from refsim.cache.expert_cache import ExpertCache
    from refsim.studies.replay import replay_trace
    t = _trace(trace, "replay")
    return replay_trace(t, ExpertCache.mib_to_bytes(_budget(cache_mb)), max_disagreements,
                        knobs=knobs)


def sweep(trace, cache_mb=None, policies=None, *, knobs=None):
    """Hit % and flash MiB at many budgets under many policies (``refsim sweep``, one trace).

    Parameters
    ----------
    trace : str, path-like or RouteTrace
    cache_mb : sequence of float, float or str, optional
        Budgets in MiB: numbers, or the command's text (``"250,500"``, ``"250:8000:250"``);
        default route-replay.py's nine (250 .. 6000). A repeated budget is dropped (first kept).
        Numbers are checked as the command's text (their ``str()`` joined by commas,
        :func:`refsim.validators.list_text`) by the command's parser
        (:func:`refsim.studies.sweep.parse_budgets_mib`): an empty list or a budget out of range
        is refused with the command's message.
    policies : sequence of str or Policy, or str, optional
        Names (``"lru"``, ``"s3fifo:small=0.2"``, ...), or the command's comma-separated text;
        default every registered policy, or ``lru`` alone with a knob on. Names are parsed by the
        command's parser (:func:`refsim.cache.policies.parse_policy_list`; names in a list are
        joined by commas): an empty list or an unknown name is refused with its message.
    knobs : StreamKnobs, optional
        With a knob on: one :class:`~refsim.cache.ExpertCache` replay per budget (lru only).

    Returns
    -------
    refsim.studies.sweep.SweepResult
        ``.rows`` budget-major then policy; ``.to_pandas()``: one row per (budget, policy) with
        ``budget_mib``, ``policy``, ``hit_pct_cum``, ``hit_pct_decode``, ``read_mib``,
        ``mib_per_token``, every counter and ``over_budget`` (docs/notebook.md).

    Raises
    ------
    TraceFormatError
        The file is malformed, or has no rows.
    ConfigError
        A budget or policy the command refuses (:class:`~refsim.errors.UsageError`, the same
        message text), a knob with a policy other than lru.
    """
    from refsim.cache.batches import BatchTrace
    from refsim.cache.policies import parse_policy_list
    from refsim.studies.sweep import (DEFAULT_BUDGETS_MIB, default_policies, parse_budgets_mib,
                                      sweep_budgets, sweep_knobs)
    from refsim.validators import list_text
    t = _trace(trace, "sweep")
    if cache_mb is None:
        budgets = list(DEFAULT_BUDGETS_MIB)
    else:
        budgets = parse_budgets_mib(list_text(cache_mb))
    if policies is None:
        policies = default_policies(knobs)
    else:
        given = [policies] if isinstance(policies, str) else list(policies)
        if all(isinstance(p, str) for p in given):     # names: the command's text, its parser
            policies = parse_policy_list(list_text(given))
        else:                            # Policy objects as given, names parsed one by one
            policies = [q for p in given
                        for q in (parse_policy_list(p) if isinstance(p, str) else [p])]
    if knobs is not None and knobs.any_on:
        return sweep_knobs(t, budgets, knobs, policies)
    h = t.header
    batches = BatchTrace.from_block(t.block, h.expert_bytes, h.n_expert)
    return sweep_budgets(batches, budgets, policies, h.token_cycle_bytes)


def union(trace, windows=DEFAULT_WINDOWS, cache_mb: float | None = None, *, knobs=None):
    """Verify-batch widening (``refsim union``): per window width w, the per-layer union of w
    consecutive decode positions' experts and, with a budget, what verify batches of width w read.

    Parameters
    ----------
    trace : str, path-like or RouteTrace
    windows : sequence of int, int or str
        Window widths, each 1..the trace's decode positions; default 1..8. Checked by the rule of
        ``--window`` (:func:`refsim.validators.int_list`) on the command's text (a str as is,
        numbers' ``str()`` joined by commas: :func:`refsim.validators.list_text`), so an empty
        list, a width < 1 or a non-integer is refused with the command's message.
    cache_mb : float, optional
        Budget in MiB for the replay (checked as :func:`replay`'s); None: union sizes only.
    knobs : StreamKnobs, optional
        With a budget: the same replay again with these knobs (the ``knob_*`` columns).

    Returns
    -------
    refsim.studies.union.UnionResult
        ``.rows`` (:class:`~refsim.studies.union.UnionRow`, one per width); ``.to_pandas()``: one
        row per width.

    Raises
    ------
    TraceFormatError
        The file is malformed.
    UsageError
        ``windows`` or ``cache_mb`` the command refuses (``argument --window: expected N,
        N,M,... or A..B with A <= B, each an integer in 1..2147483647, got ''`` for ``[]``): the
        command's message text, as a :class:`~refsim.errors.ConfigError` kind.
    ConfigError
        A width beyond the decode positions (``--window: W is outside 1..N (the trace's decode
        positions)``, as the command), a trace without decode positions, knobs without a budget.
    """
    from refsim.cache.expert_cache import ExpertCache
    from refsim.studies.union import UnionResult, union_study
    from refsim.trace import RouteTrace, read_trace
    from refsim.validators import check_list, int_list
    widths = check_list("--window", windows, int_list(1))     # refsim union's --window rule
    budget = None if cache_mb is None else ExpertCache.mib_to_bytes(_budget(cache_mb))
    t = trace if isinstance(trace, RouteTrace) else read_trace(trace)
    return UnionResult(union_study(t, widths, budget, knobs), budget)


def _some(runs) -> list:
    """``runs`` as a list, refused when empty as the commands refuse no ``RUN.csv``; one path
    (a ``str`` or path-like, which ``list()`` would split into characters) or one RunData is a
    list of one.

    Raises
    ------
    UsageError
        ``"the following arguments are required: RUN.csv"`` (argparse's text, ``nargs="+"``);
        ``runs`` None or not iterable.
    """
    from refsim.errors import UsageError
    from refsim.timing import RunData
    if isinstance(runs, (str, os.PathLike, RunData)):
        return [runs]
    try:
        runs = list(runs)
    except TypeError:
        raise UsageError(f"runs: expected a list of RUN.csv paths or RunData, got "
                         f"{type(runs).__name__}") from None
    if not runs:
        raise UsageError("the following arguments are required: RUN.csv")
    return runs


def _runs(runs, trim: int):
    """RunData of ``runs``: RunData as given, or paths (``RUN.csv[@key=value,...]``) read with
    ``trim`` (:func:`refsim.timing.runs.load_runs`), not a mix.

    Raises
    ------
    UsageError
        No run: argparse's text for the commands' missing ``RUN.csv`` (``refsim timing fit`` and
        ``timing predict`` take one or more), ``"the following arguments are required: RUN.csv"``.
    ConfigError
        RunData and paths mixed.
    """
    from refsim.errors import ConfigError
    from refsim.timing import RunData, load_runs
    runs = _some(runs)
    given = [isinstance(r, RunData) for r in runs]
    if all(given):
        return runs
    if any(given):
        raise ConfigError("runs: RunData and paths mixed; expected all RunData or all paths "
                          "(RUN.csv[@key=value,...])")
    return load_runs([os.fspath(r) for r in runs], trim)[0]


def fit_device(runs, *, trim: int = 50, name: str = "", jackknife: bool = True):
    """Fit one device's time model to its recorded runs (``refsim timing fit``).

    Parameters
    ----------
    runs : sequence of str, path-like or RunData
        The engine's per-token metrics CSVs of one device (``RUN.csv``, or
        ``RUN.csv@model=NAME,io_threads=N`` for a legacy file), at least 2; or their
        :class:`~refsim.timing.RunData` (then ``trim`` is theirs).
    trim : int
        Warm-up tokens left out of every run (default 50).
    name : str
        The device's name (stored in its JSON).
    jackknife : bool
        Standard errors by refitting without each run (3 runs or more).

    Returns
    -------
    refsim.timing.DeviceModel
        ``.params`` (value, s.e., unit) and ``.compute`` floors, and, when ``runs`` are paths
        holding repeats, the device's own run-to-run noise (``.noise``:
        :func:`refsim.timing.noise.with_device_noise`; RunData carry no preamble configuration,
        so their repeats are not looked for); ``.to_json()`` is the device file
        ``refsim timing fit --out`` writes.

    Raises
    ------
    UsageError
        No run: ``"the following arguments are required: RUN.csv"``, the command's message.
    MetricsFormatError
        A file is not a valid metrics CSV.
    ConfigError
        Fewer than 2 runs, a run the model does not describe (an mmap run), a missing
        ``model``/``io_threads``, a file of predicted times.
    """
    from refsim.timing import RunData
    from refsim.timing.fit import fit_device as fit
    from refsim.timing.noise import with_device_noise
    runs = _some(runs)
    got = _runs(runs, trim)
    dev = fit(got, name=name, jackknife=jackknife)
    if all(isinstance(r, RunData) for r in runs):
        return dev
    return with_device_noise(dev, got, name=name)


def predict_time(device, runs, *, trim: int | None = None) -> list:
    """Each run's mean decode time predicted from its configuration and flash reads alone, beside
    the measured one (``refsim timing predict``).

    Parameters
    ----------
    device : DeviceModel, str or path-like
        A fitted model (:func:`fit_device`) or its JSON file.
    runs : sequence of str, path-like or RunData
        Metrics CSVs (as :func:`fit_device`'s).
    trim : int, optional
        Warm-up tokens left out; default the device's own.

    Returns
    -------
    list of refsim.timing.Prediction
        ``predicted_tok_s``, ``measured_tok_s``, ``error_pct``, ms per token (predictions of the
        device, never measurements); ``pandas.DataFrame([p.as_dict() for p in ...])`` tabulates
        them.

    Raises
    ------
    UsageError
        No run (the command's message, as :func:`fit_device`).
    ConfigError
        A bad device file; the runs' refusals (as :func:`fit_device`).
    """
    from refsim.timing import DeviceModel, load_device, predict_run
    runs = _some(runs)                   # before the device, as the command's parser does
    dev = device if isinstance(device, DeviceModel) else load_device(os.fspath(device))
    return [predict_run(dev, r) for r in _runs(runs, dev.trim if trim is None else trim)]


__all__ = ["replay", "sweep", "union", "fit_device", "predict_time", "DEFAULT_WINDOWS"]
