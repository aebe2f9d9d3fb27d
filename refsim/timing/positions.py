"""The compute cost of the extra positions of a w-position decode, identified per device.

A decode of ``w`` positions is taken to cost ``C (1 + eps (w - 1))`` of compute (refsim.timing
.breakeven), ``C`` the device's one-position floor. No shared run decodes more than one position
per *decode*; the shared runs vary the positions only in their **prefill** (refsim.timing.prefill),
and the published speculation cells vary them in their verify decodes. This module gives ``eps``
three ways, each a :class:`~refsim.timing.terms.Term` with its interval:

1. **From prefill** (:func:`prefill_eps`, kind ``fitted``). A prefill of ``P`` positions on a
   cold cache costs::

       prefill_ms = compute_P + flash(U) + mgmt(U)         (serial)
       prefill_ms = compute_P + stall(U) + mgmt(U)         (--overlap)

   with ``U`` its flash read (recovered from the first decode row), so
   ``eps_P = (compute_P / C - 1) / (P - 1)`` with ``C`` the same run's floor (session calibration
   on its own decode tokens). The flash, stall and bookkeeping parts are the device's rules at
   ``U`` (the same run's measured flash ms/MiB when serial); their intervals:

   - serial flash: the decode rule ``i0 + U (a + b/L)``; from the bandwidth-bound share alone
     (``U a``, the fit's ceiling: a prefill reads dozens of experts per layer at once, so the
     lanes' latency share may vanish) to the larger of the rule and the run's own decode rate
     (a run reading few experts per token is latency-bound: a prefill is not);
   - overlap stall: the device's stall rule at ``U``; from 0 (every read hidden) to the serial
     flash time's upper end (on the shared desktop, overlap stalls 68 ms/token where the same
     reads took 88 serially), or, on a device with no serial fit, the run's summed lane-busy
     time per MiB (``io_ms``) times ``U``;
   - bookkeeping (cache on): the same run's first decode row's ``mgmt_ms`` per MiB times ``U``
     (a cache the prefill just filled: cold page commits, 0.011 ms/MiB on the desktop runs whose
     budget held the prefill, against the decode rule's 0.184 for evict + insert), at most the
     decode rule ``m0 + m1 U``; from 0 to that rule;
   - ``C``: the run's floor interval (its quarters); ``compute_P >= C`` (a batch is never cheaper
     than one of its positions), so ``eps_P >= 0``.

   A group of repeated prefills (same model, prompt, threads and mode) gives the mean of their
   points; its interval is the mean of their ends widened by twice the standard error of the
   points (the repeats' spread is the prefill's run-to-run noise).

   What differs from a verify decode (carried by item 4): a prefill computes the logits, the last
   layer's FFN and its experts for the **last** position only, and attends over ``(P + 1)/2``
   keys on average where a verify position attends over the whole context; the work ratio
   ``r = verify_elems / prefill_elems`` (refsim.timing.work) scales the prefill's per-position
   cost up for the compute-bound reading. And a prefill is much wider (19-42 positions) than a
   verify decode (2-9). The prefill batch is one ubatch in every shared run (``P`` <= ``n_ctx``
   = ``n_batch`` = ``n_ubatch``).

2. **From tensor sizes** (:func:`bytes_eps`, kind ``derived``): the memory-bound reading. A
   w-position decode reads ``D + O + u(w) T`` against ``D + O + T`` for one position
   (refsim.timing.work), so ``eps_bytes(w) = T (u(w) - 1) / ((w - 1) (D + O + T))``: the extra
   positions cost only the experts they add. ``u(w)`` comes from a trace's union study when
   given; else its value is the independent-routing union ``(n/k)(1 - (1 - k/n)^w)`` and its
   interval ``[1, w]``.

3. **Implied by a published speculation cell** (:func:`published_eps_checks`, kind ``check``):
   printed for comparison, never an input (the fit must not see speculation: issue 29).

4. **At a verify width** (:func:`width_eps`): a decode takes the longer of moving its bytes
   (item 2) and doing its multiplies, which the prefill measures at width ``P`` (item 1,
   scaled by ``r``). With ``f`` the compute-bound cost of one position as a fraction of ``C``,
   ``w f`` is the multiplies' time of ``w`` positions: while ``w f < 1 + (w - 1) eps_bytes`` the
   decode is memory-bound and the extra positions cost only the experts they add; past it they
   cost ``f`` each. So ``eps`` grows with the width, from the tensor-size reading toward the
   prefill's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refsim.errors import ConfigError
from refsim.timing.model import DeviceModel
from refsim.timing.prefill import PrefillObs
from refsim.timing.terms import Term

EPS_UNIT = "fraction of C per extra position"


@dataclass(frozen=True)
class PrefillSplit:
    """One prefill's time split into its parts (ms), each ``(lo, point, hi)``; ``eps`` likewise
    (its ends held at >= 0, its point not: :func:`prefill_eps` clamps the group's mean)."""

    label: str
    n_prompt: int
    prefill_ms: float
    flash_ms: tuple
    mgmt_ms: tuple
    compute_ms: tuple
    floor_ms: tuple
    eps: tuple


def split_prefill(device: DeviceModel, obs: PrefillObs) -> PrefillSplit:
    """The parts of one prefill (see the module docstring, item 1).

    Raises
    ------
    ConfigError
        ``n_prompt < 2`` (no extra position); a serial prefill on a device without a serial fit
        and no measured flash rate.
    """
    if obs.n_prompt < 2:
        raise ConfigError(f"{obs.label}: a prefill of {obs.n_prompt} position(s) has no extra position")
    v = device.value
    u_lo, u, u_hi = obs.union.lo, obs.union.value, obs.union.hi
    serial_hi = None
    if device.serial_runs:
        rule = v("a") + v("b") / obs.lanes
        rates = [rule] + ([obs.io_ms_per_mib] if obs.io_ms_per_mib is not None and not obs.overlap
                          else [])
        serial = (max(0.0, u_lo * min([v("a")] + rates)), v("i0") + u * rule,
                  v("i0") + u_hi * max(rates))
        serial_hi = serial[2]
    if obs.overlap:
        if serial_hi is None and obs.io_ms_per_mib is None:
            raise ConfigError(f"{obs.label}: an --overlap prefill on a device without a serial fit "
                              f"needs the run's lane-busy flash time (io_ms)")
        hi = serial_hi if serial_hi is not None else obs.io_ms_per_mib * u_hi
        rule = max(0.0, v("s0") + v("s1") * u - v("h") * obs.floor.value)
        flash = (0.0, min(rule, hi), hi)
    else:
        if serial_hi is None:
            if obs.io_ms_per_mib is None:
                raise ConfigError(f"{obs.label}: a serial prefill, but the device has no serial "
                                  f"flash rule and the run no measured flash rate")
            r = obs.io_ms_per_mib
            serial = (u_lo * r, u * r, u_hi * r)
        flash = serial
    if obs.cache:
        rule = max(0.0, v("m0") + v("m1") * u)
        point = rule if obs.first_mgmt_ms_per_mib is None else min(rule, obs.first_mgmt_ms_per_mib * u)
        mgmt = (0.0, point, max(0.0, v("m0") + v("m1") * u_hi))
    else:
        mgmt = (0.0, 0.0, 0.0)
    c_lo, c, c_hi = obs.floor.lo, obs.floor.value, obs.floor.hi
    t = obs.prefill_ms
    comp_point = t - flash[1] - mgmt[1]
    comp_lo = t - flash[2] - mgmt[2]
    comp_hi = t - flash[0] - mgmt[0]
    p1 = obs.n_prompt - 1
    eps_lo = max(0.0, (comp_lo / c_hi - 1.0) / p1)
    eps_hi = max(eps_lo, (comp_hi / c_lo - 1.0) / p1)
    eps = (comp_point / c - 1.0) / p1        # not clamped: a group averages the repeats' noise
    return PrefillSplit(label=obs.label, n_prompt=obs.n_prompt, prefill_ms=t, flash_ms=flash,
                        mgmt_ms=mgmt, compute_ms=(comp_lo, comp_point, comp_hi),
                        floor_ms=(c_lo, c, c_hi), eps=(eps_lo, eps, eps_hi))


def prefill_eps(device: DeviceModel, group: list[PrefillObs], name: str = "eps_prefill") -> Term:
    """``eps`` at width ``P`` from a group of prefills of one model and prompt length on one device
    (repeats of the same work: the value is the mean of their points; the interval the mean of
    their ends -+ 2 standard errors of the points, or one run's own ends).

    Raises
    ------
    ConfigError
        An empty group, or prefills of different models or prompt lengths.
    """
    if not group:
        raise ConfigError("prefill eps: no prefill")
    if len({(o.model, o.n_prompt) for o in group}) != 1:
        raise ConfigError("prefill eps: a group must share one model and one prompt length, got "
                          + ", ".join(sorted({f'{o.model}/P={o.n_prompt}' for o in group})))
    splits = [split_prefill(device, o) for o in group]
    pts = np.array([sp.eps[1] for sp in splits])
    los = np.array([sp.eps[0] for sp in splits])
    his = np.array([sp.eps[2] for sp in splits])
    if len(splits) > 1:
        se = float(pts.std(ddof=1) / np.sqrt(pts.size))
        lo, hi = max(0.0, float(los.mean()) - 2.0 * se), float(his.mean()) + 2.0 * se
        how = (f"interval: the runs' mean ends (flash, bookkeeping, C) -+ 2 s.e. of the "
               f"{len(splits)} repeats' points (s.e. {se:.3f})")
    else:
        lo, hi = float(los[0]), float(his[0])
        how = "interval: flash, bookkeeping and C at their ends (one run: no repeat spread)"
    value = min(max(float(pts.mean()), lo), hi)
    o = group[0]
    mode = "overlap" if o.overlap else "serial"
    return Term(name, value, min(lo, value), max(hi, value), EPS_UNIT, "fitted",
                f"prefill of {o.n_prompt} positions, {len(group)} {mode} run(s) of {o.model} "
                f"({', '.join(sp.label for sp in splits)})",
                f"points {', '.join(f'{p:.3f}' for p in pts)}; {how}")


def width_eps(prefill: Term, n_prompt: int, width: int, work_ratio: float = 1.0,
              bytes_term: Term | None = None, name: str = "") -> Term:
    """``eps`` of a ``width``-position verify decode from the two readings (module docstring,
    item 4): the compute-bound cost per position ``f = r (1 + (P - 1) eps_P) / P`` (a fraction
    of ``C``) and the memory-bound ``eps_bytes(w)``, combined as a roofline: a decode takes the
    longer of moving its bytes and doing its multiplies::

        eps(w) = max(eps_bytes(w), (w f - 1) / (w - 1))

    The value uses the points; the lower end ``eps_P``'s lower end with ``r = 1`` and
    ``eps_bytes``'s lower end; the upper end both upper ends with ``r``. Without a tensor table
    (``bytes_term`` None) the memory-bound side is 0.

    Raises
    ------
    ConfigError
        ``width`` or ``n_prompt`` < 2; ``work_ratio`` < 1 or not finite.
    """
    if width < 2 or n_prompt < 2:
        raise ConfigError(f"width eps: width {width}, prompt {n_prompt}; both must be >= 2")
    if not (work_ratio >= 1.0 and np.isfinite(work_ratio)):
        raise ConfigError(f"width eps: work ratio {work_ratio!r}, expected a finite number >= 1")

    def compute_bound(e: float, r: float) -> float:
        f = r * (1.0 + (n_prompt - 1) * e) / n_prompt
        return (width * f - 1.0) / (width - 1)

    b = (0.0, 0.0, 0.0) if bytes_term is None else (bytes_term.lo, bytes_term.value, bytes_term.hi)
    lo = max(0.0, b[0], compute_bound(prefill.lo, 1.0))
    value = max(0.0, b[1], compute_bound(prefill.value, work_ratio))
    hi = max(b[2], compute_bound(prefill.hi, work_ratio))
    src = prefill.source + (f"; {bytes_term.name} {bytes_term.value:.3f}" if bytes_term else "")
    return Term(name or f"eps(w={width})", value, min(lo, value), max(hi, value), EPS_UNIT, "fitted",
                src, f"roofline of eps_P {prefill.value:.3f} at P = {n_prompt} (x {work_ratio:.3f} "
                f"verify/prefill multiplies) and the tensor-size reading")


def independent_union(n_expert: int, k: int, width: int) -> float:
    """``u(w)`` when positions route independently and uniformly: the expected distinct experts
    of ``w`` draws of ``k`` of ``n`` per layer, over ``k``: ``(n/k)(1 - (1 - k/n)^w)``."""
    return n_expert / k * (1.0 - (1.0 - k / n_expert) ** width)


def bytes_eps(work, width: int, union_ratio: float | None = None,
              source: str = "the GGUF's tensor table") -> Term:
    """``eps`` of a ``width``-position decode read from tensor sizes alone (module docstring,
    item 2): ``T (u - 1) / ((w - 1) (D + O + T))``.

    Parameters
    ----------
    work : PositionWork
    width : int
        ``w`` >= 2.
    union_ratio : float, optional
        ``u(w)`` measured on a trace (``union_mib_mean(w) / union_mib_mean(1)`` of
        :func:`refsim.studies.union.union_study`); default: the independent-routing value with
        the interval ``[1, w]``.

    Raises
    ------
    ConfigError
        ``width`` < 2, or ``union_ratio`` outside ``[1, width]``.
    """
    if width < 2:
        raise ConfigError(f"bytes eps: width {width}, expected >= 2")
    if union_ratio is not None and not 1.0 <= union_ratio <= width:
        raise ConfigError(f"bytes eps: union ratio {union_ratio!r}, expected 1..{width}")
    scale = work.expert_mib / ((width - 1) * work.token_mib)
    if union_ratio is None:
        u = independent_union(work.n_expert, work.k, width)
        return Term(f"eps_bytes(w={width})", scale * (u - 1.0), 0.0, scale * (width - 1.0), EPS_UNIT,
                    "derived", f"{source}: D {work.dense_mib:.1f} + O {work.output_mib:.1f} + T "
                    f"{work.expert_mib:.1f} MiB per position",
                    f"u(w) = {u:.3f} if positions route independently; interval u in [1, {width}]")
    return Term(f"eps_bytes(w={width})", scale * (union_ratio - 1.0), scale * (union_ratio - 1.0),
                scale * (union_ratio - 1.0), EPS_UNIT, "derived",
                f"{source}: D {work.dense_mib:.1f} + O {work.output_mib:.1f} + T {work.expert_mib:.1f} "
                f"MiB per position; u(w) = {union_ratio:.3f} from a trace", "memory-bound reading")


def eps_from_compute(name: str, floor: tuple, wide: tuple, tokens_per_decode: tuple, width: int,
                     source: str, note: str = "") -> Term:
    """``eps`` implied by a compute (or CPU) time per **token** at one position and at ``width``
    positions: a decode of ``width`` positions costs ``wide x tokens_per_decode``, so
    ``eps = (wide tpd / floor - 1) / (width - 1)``. Each input is ``(lo, point, hi)``; the result
    is a ``check`` term (a published speculation cell: never an input)."""
    f = lambda c1, cw, t: (cw * t / c1 - 1.0) / (width - 1)  # noqa: E731
    value = f(floor[1], wide[1], tokens_per_decode[1])
    lo = f(floor[2], wide[0], tokens_per_decode[0])
    hi = f(floor[0], wide[2], tokens_per_decode[2])
    return Term(name, value, min(lo, value), max(hi, value), EPS_UNIT, "check", source, note)


def published_eps_checks() -> list[Term]:
    """``eps`` implied by the engine's published speculation figures (bmoe-engine.md §7;
    engine-docs/mtp.md). For comparison only: no fit or default uses them.

    - host, MTP draft 3 (w = 4): compute per token 0.115 -> 0.088 s at 2.78 tokens per verify
      decode (the doc prints 3 digits: +-0.0005 s); the MXFP4 host model, ``--overlap``, drop 0.75;
    - phone, MTP draft 2 and 3 (w = 3, 4): cpu-s/token 0.43-0.45 off -> 0.57 and 0.74; tokens per
      verify decode ``1 + d x acceptance`` (2.38, 2.56) within the published 2.35-2.52 (widened to
      include the point). ``cpu_ms`` is CPU time over all threads bracketed around the decode
      (bmoe-engine.md §2, step 4), so it counts page-fault service (3-9x more faults) and spinning;
      mtp.md's prose reads the rise as drafting, which by the code is outside the bracket.
    """
    host = eps_from_compute(
        "eps_check(host mtp d3)", (0.1145, 0.115, 0.1155), (0.0875, 0.088, 0.0885),
        (2.775, 2.78, 2.785), 4, "published: host MTP draft 3, compute per token 0.115 -> 0.088 s "
        "at 2.78 tokens per verify decode (bmoe-engine.md §7)",
        "the cell it would predict; was the default 0.38 (docs/timing.md)")
    d2 = eps_from_compute(
        "eps_check(phone mtp d2)", (0.43, 0.44, 0.45), (0.565, 0.57, 0.575),
        (2.35, 1 + 2 * 0.69, 2.52), 3, "published: phone MTP draft 2, cpu-s/token 0.43-0.45 -> 0.57 "
        "(engine-docs/mtp.md)", "CPU time, not wall: counts fault service and spinning")
    d3 = eps_from_compute(
        "eps_check(phone mtp d3)", (0.43, 0.44, 0.45), (0.735, 0.74, 0.745),
        (2.35, 1 + 3 * 0.52, 2.56), 4, "published: phone MTP draft 3, cpu-s/token 0.43-0.45 -> 0.74 "
        "(engine-docs/mtp.md)", "CPU time, not wall: counts fault service and spinning")
    return [host, d2, d3]


def position_cost_entry(eps_prefill: Term, n_prompt: int, work=None, ctx: int = 256,
                        source: str = "") -> dict:
    """One model's ``position_cost`` entry of a device file (``timing fit --gguf``;
    :func:`refsim.timing.model.read_position_cost_doc` gives the layout): the prefill reading
    ``eps_prefill`` at ``n_prompt`` positions and, with the model's tensor table ``work``
    (:func:`refsim.timing.work.position_work`), the verify/prefill multiplies ratio at context
    ``ctx`` and the tensor-size reading at each width of
    :data:`refsim.timing.model.POSITION_WIDTHS` -- what :func:`width_eps` combines, so the file
    holds the readings and :func:`device_eps` applies the one rule.

    Raises
    ------
    ConfigError
        :func:`bytes_eps`'s; ``n_prompt`` < 2.
    """
    from refsim.timing.model import POSITION_WIDTHS
    if n_prompt < 2:
        raise ConfigError(f"position cost: prefill of {n_prompt} position(s); eps needs >= 2")
    ratio, table = 1.0, None
    if work is not None:
        ratio = max(1.0, work.verify_elems(ctx) / work.prefill_elems(n_prompt))
        table = [[t.value, t.lo, t.hi] for t in (bytes_eps(work, w) for w in POSITION_WIDTHS)]
    return {"eps_prefill": [eps_prefill.value, eps_prefill.lo, eps_prefill.hi],
            "n_prompt": int(n_prompt), "work_ratio": float(ratio), "bytes_eps": table,
            "source": source or eps_prefill.source}


def device_eps(device: DeviceModel, model: str, width: int) -> Term | None:
    """``eps`` of a ``width``-position verify decode on ``device`` for compute floor ``model``,
    from the readings its file holds (:func:`position_cost_entry`) through :func:`width_eps`; None
    when the file does not identify it for that model. ``width`` is clamped to
    :data:`refsim.timing.model.POSITION_WIDTHS` (at width 1 there is no extra position: any
    value prices 0).

    Examples: the desktop set fitted with the Qwen3.6 twin (``refsim timing fit ... --gguf``)
    gives eps(4) = 0.581 [0, 1.204], as docs/whatif-terms.md's table.
    """
    from refsim.timing.model import POSITION_WIDTHS
    e = device.position_cost.get(model)
    if e is None:
        return None
    w = min(max(int(width), POSITION_WIDTHS[0]), POSITION_WIDTHS[-1])
    v, lo, hi = e["eps_prefill"]
    prefill = Term("eps_P", v, lo, hi, EPS_UNIT, "fitted", e["source"])
    bt = None
    if e["bytes_eps"] is not None:
        bv, blo, bhi = e["bytes_eps"][POSITION_WIDTHS.index(w)]
        bt = Term(f"eps_bytes(w={w})", bv, blo, bhi, EPS_UNIT, "derived", "the tensor table")
    return width_eps(prefill, e["n_prompt"], w, e["work_ratio"], bt)


def resolve_eps(device: DeviceModel, model: str, width: int, given: float | None = None,
                interval: tuple | None = None) -> Term:
    """The ``eps`` a ``--device`` figure prices a ``width``-position decode with, as a
    :class:`Term` (issue 29 item 2: identified from data where the device file can):

    1. ``given`` (``--position-cost EPS``): kind ``assumed``, interval ``interval`` (default the
       exact value);
    2. else the device file's own reading (:func:`device_eps`; ``timing fit --gguf``): kind
       ``fitted``, its interval;
    3. else :data:`refsim.timing.defaults.DEFAULT_EPS` (0.38, bmoe-engine.md §7's host MTP d3 cell:
       a speculation cell), kind ``assumed``, interval ``interval`` (default
       :data:`refsim.timing.defaults.EPS_INTERVAL`), its source saying the device does not
       identify eps.

    Raises
    ------
    ConfigError
        ``given`` negative or not finite; an interval that does not hold the value.
    """
    from refsim.timing.defaults import DEFAULT_EPS, EPS_INTERVAL
    if given is not None:
        if not (given >= 0.0 and np.isfinite(given)):
            raise ConfigError(f"--position-cost: expected a finite number >= 0, got {given!r}")
        lo, hi = interval if interval is not None else (given, given)
        return Term("eps", float(given), lo, hi, EPS_UNIT, "assumed", "--position-cost")
    t = device_eps(device, model, width)
    if t is not None:
        return t
    lo, hi = interval if interval is not None else EPS_INTERVAL
    return Term("eps", DEFAULT_EPS, lo, hi, EPS_UNIT, "assumed",
                f"default {DEFAULT_EPS:g}: the device file does not identify eps for {model!r} "
                f"(refsim timing fit --gguf does, from the runs' prefills); {DEFAULT_EPS:g} is "
                f"bmoe-engine.md §7's host MTP d3 cell, a speculation cell")
