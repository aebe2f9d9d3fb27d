"""Published verdicts, predicted: ``refsim whatif``'s pricing checked against every speculation
cell the engine publishes (issue 29 item 4; docs/timing.md "Published verdicts, predicted").

The rules of the check (the issue's):

1. **Fit on plain runs only.** Each device is identified from its recording set's plain runs
   (:func:`refsim.timing.identify.identify_device` leaves speculation runs out); the band's
   parameter spread is the bootstrap over those runs (:func:`refsim.timing.band.bootstrap_devices`).
2. **Calibrate only on each session's ``off`` cell.** Every published table (a *session*: one
   device, recipe and prompt) calibrates the compute floor ``C`` of a fresh model key on its
   ``off`` cell (:func:`refsim.timing.calibrate.calibrate_to_cell`), on the full fit and on every
   bootstrap replicate; speculation cells are never read by a fit or a calibration
   (:func:`fitted_parameters` is what the test compares with and without them).
3. **Predict each speculation cell from its published acceptance, coverage and tokens per
   decode** through :func:`refsim.timing.verdict.price` (``refsim whatif``'s one pricing path),
   with the reads of the shared Qwen3-30B route trace replayed (the exact union replay, the
   session's ``--drop-cold-experts`` on) at the budget whose plain MiB/token matches the session's
   ``off`` cell (:func:`match_budget`). The published MiB/token of a speculation cell is printed
   beside the prediction, never used.

Inputs per cell: ``d`` and ``m`` (the engine's flags), acceptance ``alpha`` and coverage ``c``
(MTP: 1); where tokens per verify decode are published, the mean drafts per drafted decode are
``(tpd - 1) / (c alpha)`` clipped to ``[0, d]`` (the published figures are rounded to two
decimals), else ``d``. The MTP head: for a cell that publishes an *effective* rate (drafting
included) the head is derived from the nextn block (refsim.timing.head through ``price``); the
engine's reported ``tok/s`` is "computed from decode time alone and drafting happens between
decodes" (engine-docs/mtp.md, "Reading the numbers"), so a reported rate is priced with the head
term at an exact 0.

The band of an auto session's cell also spans the budget it may have run at
(:func:`auto_budget_ends`): the assumed auto budget's interval and the device's run-to-run
spread of the auto budget (:func:`refsim.timing.noise.auto_budget_sigma`, from the recorded
runs' ``cache_mb``), as a hull, like the memory term's interval.

The memory term: on the phone (fixed 3000 MiB budget) the memory-pressure model
(refsim.timing.pressure, fitted on the 2026-07-22 phone runs, plain) prices the faults the
speculative memory adds: the ``off`` cell's published majflt/token times ``q(E0 + a, P0 + a) /
q(E0, P0) - 1`` (``a`` the ledger's speculation MiB, ``E0`` the fit's eviction, ``P0`` the
evictable pool at the recipe, ``q = E / P``), times ``t_f`` ms per fault; interval: ``E0``'s and
``t_f``'s ends and the off cell's published range. On the host (``--cache-mb auto``) the
speculative memory leaves the cache instead (the engine sizes the cache once at load from what
memory is left, bmoe-engine.md §3.3): a speculation cell is replayed at the matched budget
scaled by ``(B - a) / B`` (:func:`auto_cell_budget`), ``B`` the host's published auto budget
(:data:`HOST_AUTO_BUDGET_MIB`) and ``a`` what the ledger's auto rule takes from it for the cell
(speculative memory, and the nextn block's dense tensors with ``--mtp``) at the desktop runs'
``n_ctx`` and ``anon`` dense weights; the off cell stays at the matched budget (``price(..., off_reads=)``). The memory
term is then an exact 0 (the memory left the cache; nothing is resident beyond it).

MiB = 2^20 bytes; deltas in % of the ``off`` cell's tok/s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from refsim.errors import ConfigError
from refsim.timing.terms import Term, exact

HOST, PHONE = "host", "phone"
DEVICES = (HOST, PHONE)

BUDGET_RANGE_MIB = (250, 20000)
"""Cache budgets :func:`match_budget` searches, MiB (the trace's bank is 16740 MiB)."""

HOST_CRITERION_PTS = 10.0
"""The issue's bound on a host band: no wider than +-10 points."""
INSIDE_CRITERION = 0.80
"""The issue's bound: at least 80 % of the published deltas inside their bands."""

HOST_N_CTX = 2048
"""``n_ctx`` of the host's runs: the desktop recording set's preamble (``n_ctx=2048``, every
run of real-runs/desktop-2026-07-24-qwen36; the same 8-core, 14.8 GiB host)."""


@dataclass(frozen=True)
class PublishedCell:
    """One published cell (bmoe-engine.md §7).

    Attributes
    ----------
    name : str
    kind : str
        ``off``, ``ngram`` or ``mtp``.
    draft, min_match : int
        ``--draft`` and ``--ngram-min-match`` (0 when not applicable).
    tok_s : float
        The engine's reported tok/s (decode time alone).
    mib_per_token : float
        Published flash MiB per token (the ``off`` cell's matches the replay budget; a
        speculation cell's is printed only).
    acceptance, coverage, tokens_per_decode : float or None
        Published: accepted / drafted, drafted decodes / decodes, tokens per verify decode.
    effective_tok_s : float or None
        The published effective rate (drafting included) when it differs from ``tok_s``.
    majflt : tuple of float
        Published major faults per token (one value or a (low, high) range); empty if none.
    assumed : str
        What is assumed for this cell (not published), said in the table.
    """

    name: str
    kind: str
    tok_s: float
    mib_per_token: float
    draft: int = 0
    min_match: int = 0
    acceptance: float | None = None
    coverage: float | None = None
    tokens_per_decode: float | None = None
    effective_tok_s: float | None = None
    majflt: tuple = ()
    assumed: str = ""


@dataclass(frozen=True)
class Session:
    """One published table of one device, recipe and prompt: its ``off`` cell first."""

    name: str
    device: str
    cells: tuple
    drop_frac: float
    lanes: int
    overlap: bool
    budget: str
    """``auto`` (``--cache-mb auto``) or a fixed budget in MiB as published."""
    source: str
    auto_mib: tuple = ()
    """``auto`` only: the plain run's auto budget, MiB: ``(value,)`` when published, or
    ``(value, other end)`` when assumed (the band takes the hull over both; docs/timing.md)."""

    @property
    def off(self) -> PublishedCell:
        return self.cells[0]


HOST_AUTO_BUDGET_MIB = 3219.0
"""The host's ``--cache-mb auto`` budget of a plain run, MiB: published for the MTP session
(bmoe-engine.md §7, "MTP draft context cost: the auto budget fell from 3219 to 2697 MiB"; the
2697 of the speculation run is a check, never an input). The prose and copy sessions (same
model, host and recipe) publish none: this value is assumed, with
:data:`HOST_AUTO_BUDGET_HI_MIB` as the interval's other end."""
HOST_AUTO_BUDGET_HI_MIB = 7420.0
"""The largest ``--cache-mb auto`` budget the same host chose in its recorded runs, MiB
(real-runs/desktop-2026-07-24-qwen36: ``cache_mb=`` 5280, 7127, 7184, 7304, 7420 in the
preambles of its auto runs; "auto sizing tracks free RAM", findings.md)."""
_HOST_RECIPE = "--overlap --cache-mb auto --drop-cold-experts 0.75, 256 greedy tokens"
SESSIONS = (
    Session("host mtp", HOST, (
        PublishedCell("host mtp off", "off", 7.12, 19.7),
        PublishedCell("host mtp d2", "mtp", 7.66, 30.3, 2, 0, 0.714, 1.0, 2.42),
        PublishedCell("host mtp d3", "mtp", 8.19, 33.7, 3, 0, 0.601, 1.0, 2.78),
        PublishedCell("host mtp d4", "mtp", 7.64, 31.1, 4, 0, 0.524, 1.0, 3.08),
    ), 0.75, 4, True, "auto", f"bmoe-engine.md §7 'MTP, host' (engine-docs/mtp.md): {_HOST_RECIPE}",
       (HOST_AUTO_BUDGET_MIB,)),
    Session("host prose", HOST, (
        PublishedCell("host prose off", "off", 5.80, 46.0),
        PublishedCell("host prose mtp d3", "mtp", 8.80, 42.2, 3, 0, 0.604, 1.0, 2.81, 7.32),
        PublishedCell("host prose ngram d3 m3", "ngram", 6.51, 32.3, 3, 3, 0.222, 0.074, 1.05,
                      assumed="m 3 (the default; the copy sweep's d3 m3 row is this table's ngram 3)"),
    ), 0.75, 4, True, "auto", f"bmoe-engine.md §7 'n-gram vs MTP, host', prose: {_HOST_RECIPE}",
       (HOST_AUTO_BUDGET_MIB, HOST_AUTO_BUDGET_HI_MIB)),
    Session("host copy", HOST, (
        PublishedCell("host copy off", "off", 5.45, 58.1),
        PublishedCell("host copy mtp d3", "mtp", 7.40, 65.5, 3, 0, 0.824, 1.0, 3.46, 6.43),
        PublishedCell("host copy ngram d3 m3", "ngram", 5.24, 67.2, 3, 3, 0.442, 0.150, 1.20),
        PublishedCell("host copy ngram d3 m5", "ngram", 5.31, 71.1, 3, 5, 0.718, 0.057, 1.12),
        PublishedCell("host copy ngram d3 m8", "ngram", 5.49, 66.1, 3, 8, 0.750, 0.034, 1.08),
        PublishedCell("host copy ngram d1 m5", "ngram", 5.56, 59.7, 1, 5, 0.826, 0.097, 1.08),
    ), 0.75, 4, True, "auto", f"bmoe-engine.md §7 'n-gram vs MTP, host', copy-heavy and the "
                              f"--ngram-min-match sweep: {_HOST_RECIPE}",
       (HOST_AUTO_BUDGET_MIB, HOST_AUTO_BUDGET_HI_MIB)),
    Session("phone mtp", PHONE, (
        PublishedCell("phone mtp off", "off", 5.82, 69.3, majflt=(69.0, 109.0)),
        PublishedCell("phone mtp d2", "mtp", 5.59, 93.8, 2, 0, 0.69, 1.0, None, majflt=(230.0,)),
        PublishedCell("phone mtp d3", "mtp", 4.38, 106.6, 3, 0, 0.52, 1.0, None, majflt=(633.0,)),
    ), 0.75, 4, True, "3000", "bmoe-engine.md §7 'MTP, phone' (engine-docs/mtp.md): 12 GB, "
                             "Qwen3.6-35B-A3B Q4_K_M, overlap, 3000 MiB, pinned dense, drop 0.75; "
                             "off 5.82 / 6.14 (the first calibrates)"),
    Session("phone prose", PHONE, (
        PublishedCell("phone prose off", "off", 5.17, 82.5, majflt=(299.0,)),
        PublishedCell("phone prose ngram d3 m3", "ngram", 4.90, 105.8, 3, 3, 0.222, 0.048, None,
                      majflt=(330.0,), assumed="d 3 m 3 (the defaults; not published)"),
    ), 0.75, 4, True, "3000", "bmoe-engine.md §7 'n-gram, phone' (thermally gated), prose; recipe "
                             "assumed the phone's shipping one (overlap, 3000 MiB, pinned dense, "
                             "drop 0.75, 4 lanes)"),
    Session("phone copy", PHONE, (
        PublishedCell("phone copy off", "off", 4.43, 127.0, majflt=(126.0,)),
        PublishedCell("phone copy mtp d3", "mtp", 4.15, 151.7, 3, 0, 0.743, 1.0, 3.20, 3.64,
                      majflt=(958.0,), assumed="d 3 (not published; 3.20 tokens per decode at "
                                               "74.3 % implies 2.96 drafts)"),
        PublishedCell("phone copy ngram d3 m3", "ngram", 3.14, 145.1, 3, 3, 0.500, 0.142, None,
                      majflt=(1427.0,), assumed="d 3 m 3 (the defaults; not published)"),
    ), 0.75, 4, True, "3000", "bmoe-engine.md §7 'n-gram, phone' (thermally gated), copy; recipe "
                             "as the prose table's"),
)
"""Every published speculation table of bmoe-engine.md §7 that gives acceptance (host prose and
copy prompts with the ``--ngram-min-match``/``--draft`` sweep, the MTP commit's host widths and
phone table, the thermally gated phone table). Not included: "Without drop, draft 3 went from
4.28 to 5.52 tok/s" (no MiB/token, no acceptance) and the Qwen3-30B copy cell (its draft width
and min-match are not published)."""


@dataclass(frozen=True)
class DeviceInputs:
    """What one device contributes, every figure from plain runs or the model's tensor table.

    Attributes
    ----------
    terms : refsim.timing.identify.DeviceTerms
        The device identified on its recording set's plain runs.
    runs : tuple of RunData
        Those plain runs (kept tokens), for the bootstrap.
    eps_prefill : Term
        ``eps`` at the prefill's width (refsim.timing.positions.prefill_eps), the reading
        :func:`refsim.timing.positions.width_eps` extends to each verify width.
    n_prompt : int
        The prefill's positions ``P``.
    eps_work : PositionWork or None
        The tensor table of the model ``eps_prefill`` was measured on (the tensor-size reading
        and the verify/prefill multiplies); None: no table (memory-bound side 0, ratio 1).
    eps_source : str
        Which runs identified ``eps_prefill``.
    sigma : Term
        Run-to-run noise of this device class (refsim.timing.noise).
    auto_sigma : Term or None
        Run-to-run spread of the ``--cache-mb auto`` budget on this device
        (:func:`refsim.timing.noise.auto_budget_sigma`, from its recorded auto runs); None: not
        recorded (the sessions at a fixed budget do not need it).
    """

    terms: object
    runs: tuple
    eps_prefill: Term
    n_prompt: int
    eps_work: object
    eps_source: str
    sigma: Term
    auto_sigma: Term | None = None


@dataclass(frozen=True)
class Inputs:
    """Everything :func:`validate` reads.

    Attributes
    ----------
    devices : dict of str -> DeviceInputs
        ``host`` and ``phone``.
    trace : RouteTrace
        The shared Qwen3-30B route trace (the reads).
    work : PositionWork
        The cells' model's tensor table (Qwen3.6-35B-A3B twin): the MTP head.
    twin : refsim.model.Model
        The same model, for the memory ledger (speculation bytes, resident demand).
    """

    devices: dict
    trace: object
    work: object
    twin: object


@dataclass(frozen=True)
class Row:
    """One published delta against its prediction."""

    session: str
    off: PublishedCell
    cell: PublishedCell
    rate: str
    """``tok/s`` (the engine's reported rate; for n-gram also the effective one) or ``effective``."""
    published_pct: float
    price: object
    budget_mib: int
    off_mib_per_token: float
    """The trace's plain MiB/token at ``budget_mib`` (matched to the off cell's)."""
    dv: object = None
    """The :class:`refsim.timing.verdict.Device` it was priced on."""
    reads: dict = field(default_factory=dict)
    """The union replay's ``{width: Reads}`` it was priced with."""
    cell_budget_mib: int | None = None
    """The budget the cell itself was replayed at when it differs from ``budget_mib`` (``--cache-mb
    auto``: :func:`auto_cell_budget`); None: ``budget_mib``."""
    off_reads: dict | None = None
    """The off cell's replay when the cell ran at ``cell_budget_mib`` (``price(..., off_reads=)``)."""

    @property
    def band(self):
        return self.price.delta

    @property
    def inside(self) -> bool:
        return self.band.lo <= self.published_pct <= self.band.hi

    @property
    def sign_agrees(self) -> bool:
        return (self.band.point > 0) == (self.published_pct > 0)

    @property
    def half_width(self) -> float:
        """Points either side of the point, the larger (``Band.half_width``)."""
        return self.band.half_width

    @property
    def device(self) -> str:
        return self.session.split()[0]


@dataclass(frozen=True)
class Criteria:
    """The issue's criteria, evaluated."""

    n: int
    signs_agree: int
    inside: int
    host_widest_pts: float
    host_within_10: int
    host_n: int
    copy_ngram_inside: bool

    @property
    def inside_share(self) -> float:
        return self.inside / self.n

    def lines(self) -> list[str]:
        ok = lambda b: "met" if b else "NOT met"  # noqa: E731
        return [
            f"every published sign agrees: {self.signs_agree} of {self.n} "
            f"({ok(self.signs_agree == self.n)})",
            f">= 80 % of published deltas inside the band: {self.inside} of {self.n} = "
            f"{100 * self.inside_share:.0f} % ({ok(self.inside_share >= INSIDE_CRITERION)})",
            f"host bands no wider than +-10 points: {self.host_within_10} of {self.host_n}, widest "
            f"+-{self.host_widest_pts:.1f} ({ok(self.host_within_10 == self.host_n)})",
            f"the phone --ngram copy cell (-29 %) inside its band: "
            f"{'yes' if self.copy_ngram_inside else 'no'} ({ok(self.copy_ngram_inside)})",
        ]


@dataclass(frozen=True)
class Result:
    rows: tuple
    criteria: Criteria
    budgets: dict
    """Per session: (budget MiB, the trace's plain MiB/token there)."""
    calibrations: dict
    """Per session: the Calibration of the full fit on its off cell."""
    parameters: dict
    """Every fitted or calibrated figure priced with (:func:`fitted_parameters`' keys)."""
    notes: tuple = field(default=())


# --- the pieces ---------------------------------------------------------------------------------


def _knobs(drop_frac: float):
    from refsim.streaming.knobs import StreamKnobs
    return StreamKnobs(drop_frac=drop_frac)


def plain_mib_per_token(trace, budget_mib: int, drop_frac: float) -> float:
    """The trace's plain (width 1) MiB per decode token at ``budget_mib`` with the drop knob
    (the union replay of :func:`refsim.studies.union.union_study`, as ``refsim whatif``)."""
    return reads_at(trace, budget_mib, drop_frac, (1,))[1].mib_per_decode


def reads_at(trace, budget_mib: int, drop_frac: float, widths) -> dict:
    """``{width: Reads}`` of the union replay at ``budget_mib`` (knob columns when ``drop_frac``
    is on), the reads ``refsim whatif`` prices."""
    from refsim.cache import ExpertCache
    from refsim.studies.union import union_study
    from refsim.timing.verdict import reads_from_union
    knobs = _knobs(drop_frac)
    rows = union_study(trace, sorted(set(widths) | {1}), ExpertCache.mib_to_bytes(budget_mib),
                       knobs if knobs.any_on else None)
    return reads_from_union(rows, knobs.any_on)


def match_budget(trace, target_mib_per_token: float, drop_frac: float,
                 lo: int = BUDGET_RANGE_MIB[0], hi: int = BUDGET_RANGE_MIB[1]) -> tuple[int, float]:
    """The whole-MiB budget whose plain MiB/token is nearest ``target_mib_per_token``: bisection
    on ``[lo, hi]`` (the replay's reads fall as the budget grows), then the nearer of the two
    bracketing budgets. Returns ``(budget MiB, its plain MiB/token)``.

    Raises
    ------
    ConfigError
        The target is outside what the trace reads over the range (with the knob on).
    """
    return bisect_budget(lambda b: plain_mib_per_token(trace, b, drop_frac), target_mib_per_token,
                         lo, hi)


def bisect_budget(f, target_mib_per_token: float, lo: int = BUDGET_RANGE_MIB[0],
                  hi: int = BUDGET_RANGE_MIB[1]) -> tuple[int, float]:
    """The whole-MiB budget ``b`` in ``[lo, hi]`` where ``f`` (MiB/token, falling as the budget
    grows) crosses ``target_mib_per_token``, and ``f(b)``: bisection to two adjacent budgets
    that bracket the target, then the nearer (:func:`match_budget`'s search). An LRU replay's
    reads are not monotone to the last digit (a budget one MiB larger can read a hair more), so
    ``b`` is the crossing the bisection finds, not necessarily the nearest budget over the range.

    Raises
    ------
    ConfigError
        The target is outside ``f(hi)..f(lo)``.
    """
    f_lo, f_hi = f(lo), f(hi)
    if not f_hi <= target_mib_per_token <= f_lo:
        raise ConfigError(f"budget match: {target_mib_per_token:g} MiB/token is outside "
                          f"{f_hi:.1f}..{f_lo:.1f}, what the trace reads at {lo}..{hi} MiB")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        v = f(mid)
        if v > target_mib_per_token:
            lo, f_lo = mid, v
        else:
            hi, f_hi = mid, v
    return (lo, f_lo) if abs(f_lo - target_mib_per_token) < abs(f_hi - target_mib_per_token) else (hi, f_hi)


def eps_at(dev: DeviceInputs, width: int, ctx: int = 256) -> Term:
    """``eps`` at a verify width from the device's prefill reading
    (:func:`refsim.timing.positions.width_eps`; with the tensor table, its multiplies ratio and the
    tensor-size reading, as :func:`refsim.timing.identify.identify_device` does at width 4)."""
    from refsim.timing.positions import bytes_eps, width_eps
    w = dev.eps_work
    if w is None:
        return width_eps(dev.eps_prefill, dev.n_prompt, width)
    r = w.verify_elems(ctx) / w.prefill_elems(dev.n_prompt)
    return width_eps(dev.eps_prefill, dev.n_prompt, width, max(1.0, r), bytes_eps(w, width))


def speculation_mib(twin, cell: PublishedCell, n_ctx: int = 4096) -> float:
    """The ledger's speculation MiB of the cell's configuration (snapshots, MTP draft context):
    :func:`refsim.cache.ledger.memory_ledger` on the cells' model, ``ahwb`` dense, at the
    phone runs' ``n_ctx`` 4096."""
    from refsim import MIB
    from refsim.cache.ledger import memory_ledger
    led = memory_ledger(twin, n_ctx, cell.draft, cell.kind == "mtp", dense_weights="ahwb")
    return led.speculation_bytes / MIB


def auto_cell_budget(twin, cell: PublishedCell, matched_mib: int,
                     auto_mib: float = HOST_AUTO_BUDGET_MIB, n_ctx: int = HOST_N_CTX,
                     dense_weights: str = "anon") -> tuple:
    """``(budget MiB, shrink MiB)``: the trace budget a ``--cache-mb auto`` speculation cell is
    replayed at, and how much the engine's auto budget falls for the cell's configuration.

    The engine's auto budget (:func:`refsim.cache.ledger.auto_budget`, bmoe-engine.md §3.3) is
    computed by the memory ledger for the plain run and for the cell's configuration at the one
    memory ``R`` that gives the plain run ``auto_mib`` (the published budget); the difference is
    the speculative memory (snapshots, the MTP draft context) plus, with ``--mtp`` and ``anon``
    or ``ahwb`` dense weights, the nextn block's dense tensors. The cache keeps ``B_cell /
    auto_mib`` of its capacity; the trace's matched budget ``matched_mib`` (the off cell's) is
    scaled by the same fraction and rounded to a whole MiB (the trace's model is not the cells',
    so capacity, not MiB, is carried over).

    Example (the Qwen3.6 twin, n_ctx 2048, anon): MTP d3 shrinks the budget by 277.4 MiB (253.1
    of speculative memory and 24.4 of nextn dense), so the host MTP session's 8182 MiB becomes
    ``round(8182 x 2941.6 / 3219)`` = 7477 MiB.

    Raises
    ------
    ConfigError
        The ledger's refusals; a configuration whose budget is not below the plain one's linear
        range (the rule's floor or cap reached).
    """
    from refsim import MIB
    from refsim.cache.ledger import memory_ledger
    probe = auto_mib + 10000.0           # in the rule's linear range for a budget of a few GiB

    def budget(ram_mb: float, c: PublishedCell) -> float:
        led = memory_ledger(twin, n_ctx, c.draft if c.kind != "off" else 0, c.kind == "mtp",
                            ram_mb=ram_mb, dense_weights=dense_weights)
        return led.budget_bytes / MIB
    ram = probe - (budget(probe, replace(cell, kind="off")) - auto_mib)
    b_off, b_cell = budget(ram, replace(cell, kind="off")), budget(ram, cell)
    if abs(b_off - auto_mib) > 1e-6 or not 0.0 < b_cell <= b_off:
        raise ConfigError(f"{cell.name}: the auto budget {auto_mib:g} MiB is outside the ledger's "
                          f"linear range (plain {b_off:.1f}, cell {b_cell:.1f} MiB)")
    return max(1, round(matched_mib * b_cell / auto_mib)), auto_mib - b_cell


def auto_budget_ends(twin, cell: PublishedCell, matched_mib: int, auto_mib: tuple,
                     auto_sigma: Term | None, level: float = 0.9) -> tuple:
    """The budgets, MiB, an auto session's speculation cell is priced at: first the point
    (:func:`auto_cell_budget` at ``auto_mib[0]``), then the band's other ends: the same at each
    other assumed auto budget (``auto_mib[1:]``), and each of those times ``exp(-+ z sqrt(2)
    sigma)`` (``sigma`` = ``auto_sigma``, the device's run-to-run spread of the auto budget; two
    runs, the off cell's and the cell's, each drew their own; ``z`` the normal quantile of the
    band's ``level``), rounded and kept inside :data:`BUDGET_RANGE_MIB`. Duplicates are dropped.

    Example: host prose MTP d3, matched 5483 MiB, auto (3219, 7420), sigma 0.1431: the point 5010
    (5483 x 2941.6 / 3219); k = exp(1.6449 x 1.4142 x 0.1431) = 1.39507; then 3591 and 6989 (5010
    / k, 5010 k), 5278 (at 7420 MiB: 5483 x 7142.6 / 7420), 3783 and 7363.

    Raises
    ------
    ConfigError
        :func:`auto_cell_budget`'s.
    """
    import math
    from statistics import NormalDist
    ks = [1.0]
    if auto_sigma is not None and auto_sigma.value > 0:
        k = math.exp(NormalDist().inv_cdf(0.5 + level / 2) * math.sqrt(2.0) * auto_sigma.value)
        ks += [1.0 / k, k]
    out = []
    lo, hi = BUDGET_RANGE_MIB
    for b in auto_mib:
        cb = auto_cell_budget(twin, cell, matched_mib, b)[0]
        for k in ks:
            x = min(hi, max(lo, round(cb * k)))
            if x not in out:
                out.append(x)
    return tuple(out)


def pressure_memory(twin, off: PublishedCell, cell: PublishedCell, budget_mib: float = 3000.0,
                    n_ctx: int = 4096, fit=None) -> Term:
    """The memory term of a phone cell, ms per emitted token (module docstring): the faults the
    speculative memory adds over the ``off`` cell's published faults, priced at ``t_f``.

    ``faults = majflt_off x (q(E0 + a, P0 + e) / q(E0, P0) - 1)`` with
    :func:`refsim.timing.pressure.majflt_at_excess` (the touched MiB cancel in the ratio),
    ``ms = t_f x faults``; ``a`` the resident demand the cell's configuration adds
    (:func:`refsim.cache.demand.model_demand` of its ledger less the plain one's: the speculative
    memory, and with ``--mtp`` the nextn block's dense tensors, pinned under ``ahwb``), ``e`` the
    part of it reclaim can take (the speculative memory: anonymous pages). The interval takes
    ``E0``'s, ``t_f``'s and the off cell's published range's ends together (low with low).

    Raises
    ------
    ConfigError
        The off cell has no published faults.
    """
    from refsim import MIB
    from refsim.cache.demand import added_demand, model_demand
    from refsim.cache.ledger import memory_ledger
    from refsim.timing.pressure import PHONE_FIT, majflt_at_excess
    fit = fit or PHONE_FIT
    if not off.majflt:
        raise ConfigError(f"{off.name}: no published majflt/token; the memory term needs the base's")
    plain = memory_ledger(twin, n_ctx, 0, False, dense_weights="ahwb")
    led = memory_ledger(twin, n_ctx, cell.draft, cell.kind == "mtp", dense_weights="ahwb")
    p0 = model_demand(twin, plain, int(budget_mib * MIB)).evictable_bytes / MIB
    a, e_add = (x / MIB for x in added_demand(twin, plain, led, int(budget_mib * MIB)))

    def ms(e0: float, tf: float, base_faults: float) -> float:
        q = lambda e, p: majflt_at_excess(fit, e, p, 1.0).value  # noqa: E731
        return tf * base_faults * (q(e0 + a, p0 + e_add) / q(e0, p0) - 1.0)

    e0, tf = fit.evicted, fit.ms_per_fault
    v = ms(e0.value, tf.value, sum(off.majflt) / len(off.majflt))
    ends = sorted([ms(e0.lo, tf.lo, min(off.majflt)), ms(e0.hi, tf.hi, max(off.majflt))])
    return Term("memory", v, min(ends[0], v), max(ends[1], v), "ms/token", "fitted",
                f"memory-pressure model ({fit.source}): speculation adds {a:.1f} MiB resident "
                f"(ledger, n_ctx {n_ctx}, ahwb) to E0 {e0.value:.0f} MiB and {e_add:.1f} to P0 "
                f"{p0:.0f} MiB; {off.name} "
                f"{'-'.join(f'{x:g}' for x in off.majflt)} majflt/token; t_f {tf.value:.4f} ms",
                "interval: E0, t_f and the off cell's faults at their ends")


def spec_config(cell: PublishedCell):
    """The :class:`refsim.timing.verdict.SpecConfig` of a published speculation cell (module
    docstring: mean drafts from the published tokens per decode, clipped to ``[0, d]``)."""
    from refsim.timing.verdict import SpecConfig
    c = 1.0 if cell.kind == "mtp" else cell.coverage
    mean = None
    if cell.tokens_per_decode is not None and c * cell.acceptance > 0:
        mean = min(float(cell.draft), max(0.0, (cell.tokens_per_decode - 1.0) / (c * cell.acceptance)))
    return SpecConfig(cell.kind, cell.draft, cell.min_match, cell.acceptance,
                      cell.coverage if cell.kind == "ngram" else None,
                      source=f"published: {cell.name}", mean_drafts=mean)


def device_replicates(dev: DeviceInputs, n_boot: int, seed: int) -> tuple[tuple, tuple]:
    """``(replicates, notes)``: the device's bootstrap refits over its plain runs
    (:func:`refsim.timing.band.bootstrap_devices`; none when ``n_boot`` is 0) and the strata
    whose spread is not estimated."""
    from refsim.timing.band import bootstrap_devices
    if not n_boot:
        return (), ("no bootstrap replicates: the parameters' spread is not estimated",)
    reps, notes = bootstrap_devices(list(dev.runs), n_boot, seed)
    return tuple(reps), tuple(notes)


def session_devices(dev: DeviceInputs, session: Session, replicates: tuple):
    """``(calibration, calibrated replicates)``: the device's full fit and each replicate with
    ``C['cell']`` calibrated on the session's **off cell only**
    (:func:`refsim.timing.calibrate.calibrate_to_cell`)."""
    from refsim.timing.calibrate import calibrate_to_cell
    cal = calibrate_to_cell(dev.terms.device, session.off, "cell", session.lanes, session.overlap)
    reps = tuple(calibrate_to_cell(d, session.off, "cell", session.lanes, session.overlap).device
                 for d in replicates)
    return cal, reps


def _device_parameters(inputs: Inputs) -> dict:
    out = {}
    for name, dev in sorted(inputs.devices.items()):
        d = dev.terms.device
        out |= {f"{name}:param:{k}": (p.value, p.se) for k, p in sorted(d.params.items())}
        out |= {f"{name}:C:{m}": (c.value, c.se) for m, c in sorted(d.compute.items())}
        out[f"{name}:eps_prefill"] = dev.eps_prefill
        out[f"{name}:sigma"] = dev.sigma
    return out


def _session_parameters(s: Session, cal, reps) -> dict:
    return {f"{s.name}:C": cal.floor.value,
            f"{s.name}:replicate C": tuple(r.compute["cell"].value for r in reps)}


def fitted_parameters(inputs: Inputs, sessions=SESSIONS, n_boot: int = 20, seed: int = 0) -> dict:
    """Every fitted or calibrated figure the validation prices with, by name (the devices'
    parameters and floors, the eps readings, the noise, each session's calibrated floor and its
    replicates' floors), computed from the sessions' **off cells alone**: a session's other cells
    are dropped before anything is fitted. :attr:`Result.parameters` must equal it (tested)."""
    out = _device_parameters(inputs)
    reps = {k: device_replicates(d, n_boot, seed)[0] for k, d in inputs.devices.items()}
    for s in sessions:
        offs = tuple(c for c in s.cells if c.kind == "off")
        if offs:
            s = replace(s, cells=offs[:1])
            out |= _session_parameters(s, *session_devices(inputs.devices[s.device], s,
                                                           reps[s.device]))
    return out


def validate(inputs: Inputs, sessions=SESSIONS, n_boot: int = 200, seed: int = 0) -> Result:
    """Predict every published speculation cell of ``sessions`` (module docstring).

    Returns
    -------
    Result
        One :class:`Row` per published delta (a cell with a published effective rate gives two:
        the reported ``tok/s`` and the ``effective``), the criteria, the budgets, the calibrations.

    Raises
    ------
    ConfigError
        A session without an ``off`` first, a budget the trace cannot match, the pricing's errors.
    """
    from refsim.timing.band import DEFAULT_LEVEL
    from refsim.timing.verdict import Device, price
    rows, budgets, cals, notes = [], {}, {}, []
    params = _device_parameters(inputs)
    boot = {}
    for k, d in sorted(inputs.devices.items()):
        boot[k], more = device_replicates(d, n_boot, seed)
        notes += [f"{k}: {n}" for n in more]
    for s in sessions:
        if s.off.kind != "off":
            raise ConfigError(f"{s.name}: the first cell must be the off cell (the baseline)")
        dev = inputs.devices[s.device]
        cal, reps = session_devices(dev, s, boot[s.device])
        cals[s.name] = cal
        params |= _session_parameters(s, cal, reps)
        budget, off_mib = match_budget(inputs.trace, s.off.mib_per_token, s.drop_frac)
        budgets[s.name] = (budget, off_mib)
        specs = [c for c in s.cells[1:] if c.kind != "off"]
        reads = reads_at(inputs.trace, budget, s.drop_frac, [c.draft + 1 for c in specs])
        for cell in specs:
            cfg = spec_config(cell)
            eps = eps_at(dev, cfg.width)
            cell_budget, cell_reads, off_reads = None, reads, None
            alt = []                        # (reads, memory) at the auto budget's other end
            if s.budget == "auto":
                b0 = s.auto_mib[0]
                cell_budget, a = auto_cell_budget(inputs.twin, cell, budget, b0)
                cell_reads = reads_at(inputs.trace, cell_budget, s.drop_frac, [cfg.width])
                off_reads = reads
                memory = exact("memory", 0.0, "ms/token", "derived",
                               f"--cache-mb auto: the auto budget falls {a:.1f} MiB (ledger, "
                               f"n_ctx {HOST_N_CTX}, anon dense) and the memory leaves the "
                               f"cache: the cell is replayed at {cell_budget} MiB = {budget} x "
                               f"({b0:g} - {a:.1f}) / {b0:g}")
                for cb1 in auto_budget_ends(inputs.twin, cell, budget, s.auto_mib,
                                            dev.auto_sigma, DEFAULT_LEVEL)[1:]:
                    alt.append(reads_at(inputs.trace, cb1, s.drop_frac, [cfg.width]))
            else:
                memory = pressure_memory(inputs.twin, s.off, cell)
            rates = [("tok/s", cell.tok_s, False)]
            if cell.kind == "mtp" and cell.effective_tok_s is not None:
                rates.append(("effective", cell.effective_tok_s, True))
            for rate, published, with_head in rates:
                head = None if with_head or cell.kind != "mtp" else exact(
                    "head_ms", 0.0, "ms/token", "published",
                    "engine-docs/mtp.md: the reported tok/s is decode time alone (drafting between "
                    "decodes)")
                dv = Device(cal.device, "cell", s.lanes, s.overlap, eps, cache=True,
                            sigma=dev.sigma.value, replicates=reps,
                            work=inputs.work if head is None else None, head=head)
                p = price(dv, cfg, cell_reads, budget_mib=float(cell_budget or budget),
                          memory=memory, off_reads=off_reads)
                if alt:
                    p = _budget_hull(p, [price(dv, cfg, r, memory=memory, off_reads=off_reads)
                                         for r in alt])
                rows.append(Row(s.name, s.off, cell, rate, 100.0 * (published / s.off.tok_s - 1.0), p,
                                budget, off_mib, dv, cell_reads, cell_budget, off_reads))
    return Result(tuple(rows), criteria(rows), budgets, cals, params, tuple(notes))


def _budget_hull(p, others):
    """``p`` with its tok/s and change bands widened to the hull of ``others``' (the same cell
    priced at the assumed auto budget's other end): the point stays ``p``'s."""
    from refsim.timing.verdict import band_hull, verdict_of
    tok = band_hull([p.eff_tok_s] + [o.eff_tok_s for o in others])
    delta = band_hull([p.delta] + [o.delta for o in others])
    return replace(p, eff_tok_s=tok, delta=delta, verdict=verdict_of(delta))


def criteria(rows) -> Criteria:
    """The issue's four criteria on ``rows`` (:class:`Criteria`)."""
    host = [r for r in rows if r.device == HOST]
    copy = [r for r in rows if r.cell.name == "phone copy ngram d3 m3"]
    return Criteria(n=len(rows), signs_agree=sum(r.sign_agrees for r in rows),
                    inside=sum(r.inside for r in rows),
                    host_widest_pts=max((r.half_width for r in host), default=0.0),
                    host_within_10=sum(r.half_width <= HOST_CRITERION_PTS for r in host),
                    host_n=len(host), copy_ngram_inside=bool(copy) and all(r.inside for r in copy))


def markdown(result: Result) -> list[str]:
    """The table of docs/timing.md "Published verdicts, predicted", as lines."""
    out = ["| cell | rate | budget MiB, off → cell (plain MiB/tok: trace / cell) | MiB/tok predicted / published "
           "| published Δ | predicted Δ [band] | inside | sign agrees |",
           "|---|---|---|---|---|---|---|---|"]
    for r in result.rows:
        b = r.band
        at = (f"{r.budget_mib}" if r.cell_budget_mib is None else
              f"{r.budget_mib} → {r.cell_budget_mib}")
        out.append(f"| {r.cell.name} | {r.rate} | {at} ({r.off_mib_per_token:.1f} / "
                   f"{r.off.mib_per_token:g}) | "
                   f"{r.price.mib_per_token:.1f} / {r.cell.mib_per_token:g} | "
                   f"{r.published_pct:+.1f} % | {b.point:+.1f} % [{b.lo:+.1f}, {b.hi:+.1f}] | "
                   f"{'yes' if r.inside else '**no**'} | {'yes' if r.sign_agrees else '**no**'} |")
    return out


def noise_sigma(device_class: str, host_device=None, shared_repeats=()) -> Term:
    """Run-to-run noise of one device class (refsim.timing.noise.log_sigma): the engine's
    published repeats of that class, and the recording set's own (``shared_repeats``); a repeat
    whose runs read differently is compared after ``host_device``'s prediction at each read,
    calibrated on the repeat's first run (docs/whatif-terms.md, "Run-to-run noise")."""
    from refsim.timing.calibrate import calibrate_to_cell
    from refsim.timing.noise import PUBLISHED_REPEATS, log_sigma
    reps = list(shared_repeats) + [r for r in PUBLISHED_REPEATS if r.device == device_class]

    def predict(rep, mib):
        off = PublishedCell(rep.name, "off", rep.tok_s[0], rep.mib_per_token[0])
        dev = calibrate_to_cell(host_device, off, "cell", 4, True).device
        return 1000.0 / float(dev.token_ms([mib], "cell", 4, True, True)["wall"][0])
    return log_sigma(reps, predict if host_device is not None else None, f"noise_{device_class}")


def recorded_fault_check(row: Row, fit=None):
    """A **check, never an input**: ``row``'s phone cell re-priced with the memory term at the
    faults the cell *recorded* instead of the model's, ``t_f x (majflt_cell - majflt_off)``
    ms/token (the off cell's mean when it gives a range). It tells whether the fault model's
    rule and ``t_f`` would close the gap if the fault count were known -- which the shared runs
    cannot predict (docs/memory-pressure.md: ``g`` spans 48x over four runs of one demand).

    Returns
    -------
    (Term, Price)
        The memory term used and the re-priced cell.

    Raises
    ------
    ConfigError
        Not a phone row, or a cell without published faults.
    """
    from refsim.timing.pressure import PHONE_FIT
    from refsim.timing.verdict import price
    fit = fit or PHONE_FIT
    if row.device != PHONE or not row.cell.majflt or not row.off.majflt:
        raise ConfigError(f"{row.cell.name}: the recorded-fault check needs a phone cell and its off "
                          f"cell with published majflt/token")
    extra = sum(row.cell.majflt) / len(row.cell.majflt) - sum(row.off.majflt) / len(row.off.majflt)
    tf = fit.ms_per_fault
    mem = Term("memory", tf.value * extra, tf.lo * extra, tf.hi * extra, "ms/token", "check",
               f"recorded faults: {row.cell.name} {sum(row.cell.majflt) / len(row.cell.majflt):g} - "
               f"{row.off.name} {sum(row.off.majflt) / len(row.off.majflt):g} majflt/token x t_f "
               f"{tf.value:.4f} ms ({fit.source})", "interval: t_f's")
    p = row.price
    return mem, price(row.dv, p.config, row.reads, budget_mib=p.budget_mib, memory=mem,
                      off_reads=row.off_reads)


def published_reads_check(row: Row, trace, drop_frac: float, budget_mib: int | None = None):
    """A **check, never an input**: ``row``'s cell re-priced at the budget where the trace's
    replay reads the MiB/token the cell *published* (its width mix, :func:`refsim.timing.verdict.
    reads_mix`), the off cell's reads, device, eps, memory term and band as the row's, the auto
    budget's run-to-run spread left out (the reads are given). It separates the two halves of a
    prediction: the bytes (which budget the cell ran at; under ``--cache-mb auto`` not recorded)
    and the time the device takes for given bytes.

    ``budget_mib``: that budget when already found (a cell's ``tok/s`` and ``effective`` rows read
    alike: :func:`published_reads_markdown` searches once per cell).

    Returns
    -------
    (int, Price)
        The budget, MiB, and the re-priced cell.

    Raises
    ------
    ConfigError
        The published MiB/token is outside what the trace reads over :data:`BUDGET_RANGE_MIB`.
    """
    from refsim.timing.verdict import price, reads_mix
    cfg, p = row.price.config, row.price
    mem = next(t for t in p.terms if t.name == "memory")

    def at(b: int) -> dict:
        return reads_at(trace, b, drop_frac, [cfg.width])
    budget = budget_mib if budget_mib is not None else bisect_budget(
        lambda b: reads_mix(cfg, at(b))[0] / cfg.tokens_per_decode, row.cell.mib_per_token)[0]
    return budget, price(row.dv, cfg, at(budget), budget_mib=float(budget), memory=mem,
                         off_reads=row.off_reads if row.off_reads is not None else row.reads)


def published_reads_markdown(result: Result, trace) -> list[str]:
    """The table of docs/timing.md's check "every cell at the MiB/token it published"
    (:func:`published_reads_check` on every row of ``result``), with its counts and the host
    bands' widths, as lines."""
    out = ["| cell | rate | budget MiB giving the published reads | MiB/tok | predicted Δ [band] | "
           "published Δ | inside | sign agrees |", "|---|---|---|---|---|---|---|---|"]
    signs = inside = 0
    host, found = [], {}                # (session, cell) -> its budget: one search per cell
    for r in result.rows:
        drop = next(s.drop_frac for s in SESSIONS if s.name == r.session)
        try:
            budget, p = published_reads_check(r, trace, drop, found.get((r.session, r.cell.name)))
            found[(r.session, r.cell.name)] = budget
        except ConfigError as exc:
            out.append(f"| {r.cell.name} | {r.rate} | {exc} | | | {r.published_pct:+.1f} % | | |")
            continue
        d = p.delta
        ok_in, ok_sign = d.contains(r.published_pct), (d.point > 0) == (r.published_pct > 0)
        signs, inside = signs + ok_sign, inside + ok_in
        if r.device == HOST:
            host.append(d.half_width)
        out.append(f"| {r.cell.name} | {r.rate} | {budget} | {p.mib_per_token:.1f} / "
                   f"{r.cell.mib_per_token:g} | {d.point:+.1f} % [{d.lo:+.1f}, {d.hi:+.1f}] | "
                   f"{r.published_pct:+.1f} % | {'yes' if ok_in else '**no**'} | "
                   f"{'yes' if ok_sign else '**no**'} |")
    out += ["", f"At the published reads: signs agree {signs} of {len(result.rows)}; {inside} inside "
                f"the band; host bands within ±{HOST_CRITERION_PTS:g} points "
                f"{sum(h <= HOST_CRITERION_PTS for h in host)} of {len(host)} (widest "
                f"±{max(host, default=0.0):.1f})."]
    return out
