"""What-if cache-budget sweeps: every budget × every policy over one trace.

``sweep_budgets`` answers "what would this trace have read at budget B under policy P" for a
list of budgets and policies. The ``lru`` column comes from the one-pass exact curve
(:func:`refsim.cache.mrc.lru_curve`); every other policy is one replay per budget on its Numba
fast path (:func:`refsim.cache.replay.replay_policy`). The CSV matches the engine's
``route-replay.py --csv`` (bmoe-engine.md §5): columns ``budget_mib,policy,hit_pct_cum,
hit_pct_decode,read_mib`` formatted ``%s,%s,%.3f,%.3f,%.1f``, where ``read_mib`` includes
prefill reads (CacheSummary.read_mib) and the budget is printed as given (:func:`format_budget`;
whole MiB print as integers, as the engine's ``%.0f`` does for its integer budgets).

refsim's CSV adds one column after the engine's five, ``over_budget`` (1 when the policy holds
more than the budget after the last batch, see :attr:`SweepRow.over_budget`, else 0), and a
rate over zero events (the decode-only hit rate of a trace without decodes) is ``nan`` where the
engine writes 0.000 (:mod:`refsim.fmt`).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass

from refsim import MIB, progress
from refsim.cache.batches import BatchTrace
from refsim.cache.expert_cache import CACHE_MB_RANGE, ExpertCache
from refsim.cache.mrc import lru_curve
from refsim.cache.policies import POLICIES, get_policy
from refsim.cache.replay import replay_policy
from refsim.cache.summary import CacheSummary, KnobSummary
from refsim.errors import ConfigError, UsageError, value_message
from refsim.fileio import open_output
from refsim.fmt import csv_num, num, strict_float
from refsim.frames import Table

CSV_COLUMNS = ("budget_mib", "policy", "hit_pct_cum", "hit_pct_decode", "read_mib")
"""The engine's replay-curve columns (route-replay.py ``--csv``)."""

SWEEP_CSV_COLUMNS = CSV_COLUMNS + ("over_budget",)
"""The columns ``refsim sweep --csv`` writes: the engine's five, then ``over_budget`` (0/1)."""

CSV_DECIMALS = (3, 3, 1)
"""Fraction digits of ``hit_pct_cum``, ``hit_pct_decode``, ``read_mib``: the engine's
``%.3f,%.3f,%.1f``; the budget column is :func:`format_budget`'s text (the engine's ``%.0f``
rounded 100.4 and 100.6 MiB to "100" and "101", two rows that look like other budgets)."""


def format_budget(mib: float) -> str:
    """A budget in MiB as text, exactly as given: ``250.0`` -> ``"250"``, ``100.4`` ->
    ``"100.4"``, ``0.001`` -> ``"0.001"``.

    Whole numbers print without a fraction (so an integer-budget CSV is byte-identical to the
    engine's ``%.0f``); others with up to 12 significant digits (``%.12g``), which is exact for
    anything typed and drops the float noise of ``START:STOP:STEP`` ranges (0.1 + 0.2 prints as
    ``0.3``; the budget in bytes is still ``int(mib * 2**20)`` of the float).
    """
    mib = float(mib)
    if mib.is_integer() and abs(mib) < 1e15:
        return str(int(mib))
    return f"{mib:.12g}"

DEFAULT_BUDGETS_MIB = (250, 500, 750, 1000, 1500, 2000, 3000, 4000, 6000)
"""route-replay.py's default ``--budgets``."""


MAX_BUDGETS = 10_000
"""Most budgets one sweep accepts (each is a replay per policy)."""


def parse_budgets_mib(text: str) -> list[float]:
    """Parse ``--cache-mb`` lists: ``"250,500,1000"``, ``"250:8000:250"`` (start:stop:step,
    stop included when reached) or a mix (``"250:1000:250,4000"``). Values are MiB (2**20 B),
    each in :data:`refsim.cache.expert_cache.CACHE_MB_RANGE` (the bounds of a single
    ``--cache-mb``, :meth:`ExpertCache.mib_to_bytes`), each number in the one form of a number
    read from text (:func:`refsim.fmt.strict_float`: ``1_0`` and non-ASCII digits are refused,
    as every single ``--cache-mb`` refuses them).

    Raises
    ------
    UsageError
        ``"argument --cache-mb: expected N[,N,...] or START:STOP:STEP, each <CACHE_MB_RANGE>,
        got '<item>'"`` naming the bad item: not a number, out of range, an empty range
        (stop < start), a step that is not a number > 0; or more than :data:`MAX_BUDGETS`.
    """
    out: list[float] = []
    expected = f"N[,N,...] or START:STOP:STEP, each {CACHE_MB_RANGE}"
    for item in text.split(","):
        item = item.strip()
        try:
            parts = [strict_float(x) for x in item.split(":")]     # 1_0 and non-ASCII digits refused
        except ValueError:
            parts = []
        if len(parts) not in (1, 3) or not all(math.isfinite(p) and p > 0 for p in parts):
            raise UsageError(value_message("--cache-mb", expected, item))
        if len(parts) == 1:
            if not _in_range(parts[0]):
                raise UsageError(value_message("--cache-mb", expected, item))
            out.append(parts[0])
            continue
        start, stop, step = parts
        if stop < start or not (_in_range(start) and _in_range(stop)):
            raise UsageError(value_message("--cache-mb", expected + " (START <= STOP)", item))
        n = int(math.floor((stop - start) / step + 1e-9)) + 1
        if len(out) + n > MAX_BUDGETS:
            raise UsageError(value_message("--cache-mb", f"at most {MAX_BUDGETS} budgets in one "
                                           f"sweep (use a larger step)", item))
        out.extend(start + i * step for i in range(n))
    return out


def _in_range(mib: float) -> bool:
    """``mib`` is a budget :meth:`ExpertCache.mib_to_bytes` accepts."""
    try:
        ExpertCache.mib_to_bytes(mib)
    except ConfigError:
        return False
    return True


@dataclass(frozen=True)
class SweepRow:
    """One (budget, policy) point: the summary of that replay."""

    budget_mib: float
    policy: str
    summary: CacheSummary
    knobs: KnobSummary | None = None

    def csv_fields(self) -> list[str]:
        """The engine-format CSV fields of this row (:data:`CSV_COLUMNS`; an undefined rate is
        ``nan``)."""
        s = self.summary
        nums = (s.hit_pct_cum, s.hit_pct_decode, s.read_mib)
        return [format_budget(self.budget_mib), self.policy] + \
            [csv_num(v, d) for v, d in zip(nums, CSV_DECIMALS)]

    @property
    def held_bytes(self) -> int | None:
        """Resident entry bytes after the last batch, or None where the replay does not track
        them (the one-pass ``lru`` curve)."""
        held = self.summary.resident_bytes
        return held if held >= 0 else None

    @property
    def over_budget(self) -> bool:
        """The policy holds more than the budget after the last batch.

        A partitioned policy (``layer``, ``layerlfu``) gives each layer ``budget // n_layer``
        bytes and never evicts what the layer's current batch touched (bmoe-engine.md §5,
        route-replay.py's simulator), so below about one token cycle T each layer still holds its
        batch: at 250 MiB on the qwen trace it holds T, 3.1x the budget. Such a point is not a
        cache of that size, and the table, CSV and plot mark it.
        """
        held = self.held_bytes
        return held is not None and held > self.summary.budget_bytes


@dataclass(frozen=True)
class SweepResult(Table):
    """Rows budget-major, then policy in the requested order; ``t_bytes`` = one token cycle.

    As a table (:meth:`to_pandas`, :meth:`to_columns`): one row per (budget, policy) point, in
    this order: ``budget_mib`` (as given), ``policy`` (its label), every
    :class:`~refsim.cache.CacheSummary` field (``hit_pct_cum``, ``hit_pct_decode``, ``read_mib``,
    ``mib_per_token``, ... ; ``resident_bytes``, ``evictions``, ``rereads`` are -1 where the
    replay does not track them: the one-pass ``lru`` curve), ``over_budget``, and with a knob on
    every :class:`~refsim.cache.summary.KnobSummary` field (docs/notebook.md)."""

    rows: list[SweepRow]
    policies: list[str]
    budgets_mib: list[float]
    t_bytes: int
    n_batch: int
    tokens: int

    def to_columns(self) -> dict:
        """The points as columns (class docstring); values exactly the rows' (the CSV rounds them)."""
        import numpy as np

        from refsim.frames import dataclass_columns, texts
        rows = self.rows
        cols = {"budget_mib": np.array([r.budget_mib for r in rows], np.float64).reshape(len(rows)),
                "policy": texts([r.policy for r in rows]),
                **dataclass_columns([r.summary for r in rows], CacheSummary),
                "over_budget": np.array([r.over_budget for r in rows], bool).reshape(len(rows))}
        if rows and all(r.knobs is not None for r in rows):
            cols.update(dataclass_columns([r.knobs for r in rows], KnobSummary))
        return cols

    def row(self, budget_mib: float, policy: str) -> SweepRow:
        """The row of one point (KeyError if absent)."""
        for r in self.rows:
            if r.budget_mib == budget_mib and r.policy == policy:
                return r
        raise KeyError((budget_mib, policy))


def sweep_budgets(batches: BatchTrace, budgets_mib, policies, t_bytes: int) -> SweepResult:
    """Replay ``batches`` at every budget under every policy.

    Parameters
    ----------
    batches : BatchTrace
        The trace's layer batches (``BatchTrace.from_block``).
    budgets_mib : sequence of float
        Budgets in MiB (2**20 bytes); each becomes ``int(budget * 2**20)`` bytes, as
        ``--cache-mb`` does (``ExpertCache.mib_to_bytes``). A repeated value is dropped (the
        first occurrence keeps its place), so every row is a distinct point.
    policies : sequence of str or Policy
        Registered policy names (:data:`refsim.cache.policies.POLICIES`, default parameters) or
        instances (:func:`refsim.cache.policies.parse_policy_list`); a row's ``policy`` is the
        instance's ``label`` (``name`` or ``name:key=value,...``); repeated labels are dropped
        the same way.
    t_bytes : int
        One token cycle in bytes (``TraceHeader.token_cycle_bytes``), for the summaries.

    Returns
    -------
    SweepResult

    Raises
    ------
    ConfigError
        On an unknown policy, an empty list or a budget that is not > 0.
    """
    from refsim.cache.expert_cache import ExpertCache

    budgets_mib = list(dict.fromkeys(float(b) for b in budgets_mib))
    insts = {}
    for p in policies:
        pol = get_policy(p) if isinstance(p, str) else p
        insts.setdefault(pol.label, pol)
    policies = list(insts)
    if not budgets_mib:
        raise ConfigError("--cache-mb: no budget given")
    if not policies:
        raise ConfigError("--policy: no policy given")
    budgets = [ExpertCache.mib_to_bytes(b) for b in budgets_mib]
    per_policy = {}
    with progress.bar(total=len(insts) * len(budgets), desc="sweep", unit="replay") as bar:
        for name, pol in insts.items():
            bar.set_description_str(f"sweep {name}")
            if name == "lru":
                per_policy[name] = lru_curve(batches, budgets)
                bar.update(len(budgets))
                continue
            per_policy[name] = []
            for b in budgets:
                per_policy[name].append(replay_policy(batches, pol, b))
                bar.update()
    rows = [SweepRow(float(bm), name, per_policy[name][i].summary(t_bytes))
            for i, bm in enumerate(budgets_mib) for name in policies]
    return SweepResult(rows, list(policies), [float(b) for b in budgets_mib], int(t_bytes),
                       batches.n_batch, batches.tokens)


def sweep_knobs(trace, budgets_mib, knobs, policies=("lru",)) -> SweepResult:
    """Replay ``trace`` at every budget through :class:`~refsim.cache.ExpertCache` with the
    engine's cache-side knobs (``--drop-cold-experts``, ``--prefetch``).

    Dropping is dynamic (a slot drops only if it misses in the state earlier drops produced) and
    prefetch changes the state too, so there is no one-pass curve: one replay per budget.

    Parameters
    ----------
    trace : RouteTrace
    budgets_mib : sequence of float
        Budgets in MiB; repeats dropped as in :func:`sweep_budgets`.
    knobs : StreamKnobs
    policies : sequence of str or Policy
        Must be lru only: the engine implements both knobs for its LRU cache only.

    Raises
    ------
    UsageError
        For a policy other than lru.
    ConfigError
        For a budget that is not > 0.
    """
    from refsim.studies.replay import replay_trace

    check_knob_policies(policies)
    budgets_mib = list(dict.fromkeys(float(b) for b in budgets_mib))
    if not budgets_mib:
        raise ConfigError("--cache-mb: no budget given")
    rows = []
    for bm in progress.bar(budgets_mib, desc="sweep lru", unit="replay"):
        rep = replay_trace(trace, ExpertCache.mib_to_bytes(bm), knobs=knobs)
        rows.append(SweepRow(bm, "lru", rep.summary, rep.knobs))
    h = trace.header
    n_batch = trace.n_events * h.n_layer
    return SweepResult(rows, ["lru"], budgets_mib, int(h.token_cycle_bytes), n_batch,
                       rows[0].summary.tokens)


def check_knob_policies(policies) -> None:
    """The knobs' policy list must be lru alone (the engine implements them for its LRU only).

    Raises
    ------
    UsageError
        ``"--policy P,Q: --drop-cold-experts and --prefetch act in the engine's LRU cache only;
        expected --policy lru"``.
    """
    policies = list(dict.fromkeys(getattr(p, "label", p) for p in policies))
    if policies != ["lru"]:
        raise UsageError(f"--policy {','.join(policies)}: --drop-cold-experts and --prefetch act "
                         f"in the engine's LRU cache only; expected --policy lru")


def sweep_csv_rows(result: SweepResult, tok_s: list | None = None) -> list[list]:
    """The data rows of :func:`write_sweep_csv` (after its column line), as field lists."""
    return [r.csv_fields() + [int(r.over_budget)] + ([csv_num(tok_s[i], 3)] if tok_s is not None else [])
            for i, r in enumerate(result.rows)]


def write_sweep_csv(path: str, result: SweepResult, tok_s: list | None = None) -> None:
    """Write the engine-format curve CSV (:data:`SWEEP_CSV_COLUMNS`: the engine's five columns,
    then ``over_budget``; with ``tok_s`` from ``--device`` a last ``predicted_tok_s`` column) to
    ``path`` by :func:`refsim.fileio.open_output`'s rules.

    Raises
    ------
    ConfigError
        Naming ``--csv`` and the path if the folder cannot be written.
    """
    with open_output(path, "--csv") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(SWEEP_CSV_COLUMNS + (("predicted_tok_s",) if tok_s is not None else ()))
        w.writerows(sweep_csv_rows(result, tok_s))


def format_table(result: SweepResult, tok_s: list | None = None) -> list[str]:
    """Text table: one line per (budget, policy), hit % cumulative and decode-only, read MiB
    (prefill included) and decode MiB/token; with knobs also experts dropped (decode), their
    % of routed slots, speculative MiB read (decode) and useful/prefetched entries; a point that
    holds more than its budget (:attr:`SweepRow.over_budget`) ends in ``holds N.Nx`` (held bytes /
    budget) and a note follows the table. An undefined rate prints ``n/a``. ``tok_s`` (one value
    per row, from ``--device``) adds a ``pred_tok/s`` column: a prediction, never a measurement."""
    w = max(8, *(len(p) for p in result.policies))
    knobs = any(r.knobs is not None for r in result.rows)
    extra = f"  {'dropped':>8}  {'drop%':>5}  {'spec_MiB':>9}  {'useful':>11}" if knobs else ""
    lines = [f"{'budget_mib':>10}  {'policy':<{w}}  {'hit_cum%':>8}  {'hit_dec%':>8}  "
             f"{'read_MiB':>10}  {'MiB/token':>9}{extra}"
             + (f"  {'pred_tok/s':>10}" if tok_s is not None else "")]
    over = False
    for i, r in enumerate(result.rows):
        s = r.summary
        line = (f"{format_budget(r.budget_mib):>10}  {r.policy:<{w}}  {num(s.hit_pct_cum, 3):>8}  "
                f"{num(s.hit_pct_decode, 3):>8}  {num(s.read_mib, 1):>10}  {num(s.mib_per_token, 2):>9}")
        if knobs and r.knobs is not None:
            k = r.knobs
            line += (f"  {k.experts_dropped:>8}  {num(k.dropped_pct, 1):>5}  {num(k.spec_read_mib, 1):>9}  "
                     f"{f'{k.spec_useful}/{k.spec_experts}':>11}")
        if tok_s is not None:
            line += f"  {num(tok_s[i], 3):>10}"
        if r.over_budget:
            over = True
            line += f"  holds {num(r.held_bytes / s.budget_bytes, 2)}x"
        lines.append(line)
    if over:
        lines.append("holds Nx: the policy holds N times the budget after the last batch (no "
                     "policy evicts what the current batch touched, and a layer partition keeps "
                     "its layer's last batch; docs/cache-studies.md, the batch rules), so the "
                     "point is not a cache of that size")
    return lines


def known_policies() -> list[str]:
    """Registered policy names in registration order."""
    return list(POLICIES)


def default_policies(knobs=None) -> list[str]:
    """The policies a sweep runs when none is named: every registered one, or ``lru`` alone with a
    streaming knob on (the engine implements the knobs for its LRU only)."""
    if knobs is not None and knobs.any_on:
        return ["lru"]
    return known_policies()


__all__ = ["sweep_budgets", "sweep_knobs", "check_knob_policies", "sweep_csv_rows", "SweepResult", "SweepRow", "parse_budgets_mib",
           "write_sweep_csv", "SWEEP_CSV_COLUMNS",
           "format_budget",
           "format_table", "known_policies", "default_policies", "CSV_COLUMNS",
           "DEFAULT_BUDGETS_MIB", "MIB"]
