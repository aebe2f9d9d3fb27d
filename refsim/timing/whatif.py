"""A what-if's counters in seconds: the device model applied to a replay, sweep point or run.

Given a device (refsim.timing.model), the MiB a decode reads on average, the tokens it confirms
(1 without speculation; tokens per verify decode with it) and the positions it carries, a decode
costs ``t = tail * (C (1 + eps (w - 1)) + cache (m0 + m1 X) + overlap kappa X + flash(X))`` ms with
``X = MiB/token * tokens/decode`` (refsim.timing.breakeven's rule), and

- predicted s/token = ``t / tokens_per_decode / 1000``; tok/s its inverse;
- effective tok/s = ``1 / (s/token + drafting s/token)`` (the engine's definition,
  docs/telemetry.md; drafting is refsim's measured figure or 0).

These are predictions of the device, never measurements: every output that carries them says
``predicted``. The stall's hinge is applied to the mean decode (docs/timing.md).

The compute is paid per *position* (``positions_per_decode``: a verify decode's every position,
rejected drafts included), and every figure here is a sum of the one decode rule,
:func:`refsim.timing.decode.decode_terms`, as mixed by :func:`refsim.timing.verdict.point_terms`
where a configuration has several decode kinds or an MTP head (:func:`priced_whatif`: ``union``'s
column, ``run``'s figure): ``refsim whatif``'s price (docs/timing.md, "One price, every command").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from refsim.errors import ConfigError
from refsim.fmt import NA, plural
from refsim.timing.breakeven import DEFAULT_EPS, decode_ms
from refsim.timing.defaults import DEFAULT_IO_THREADS  # noqa: F401  (re-exported)
from refsim.timing.model import DeviceModel


@dataclass(frozen=True)
class DeviceWhatIf:
    """Predicted times of one what-if on one device (s = seconds).

    The four times are ``None`` (text ``n/a``, JSON ``null``) when the what-if has no decoded
    token to price (a prefill-only trace: MiB/token undefined; :meth:`undefined`).
    """

    device: str
    model: str
    io_threads: int
    overlap: bool
    position_cost: float
    ms_per_decode: float | None
    predicted_s_per_token: float | None
    predicted_tok_s: float | None
    predicted_effective_tok_s: float | None

    def undefined(self) -> "DeviceWhatIf":
        """This what-if's device and configuration with every time ``None``: nothing to price
        (no decoded token; docs/cli.md, "Numbers": a ratio over zero events is n/a)."""
        return replace(self, ms_per_decode=None, predicted_s_per_token=None, predicted_tok_s=None,
                       predicted_effective_tok_s=None)

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        config = (f"{plural(self.io_threads, 'lane')}, {'--overlap' if self.overlap else 'serial'}, "
                  f"compute floor of {self.model}")
        if self.predicted_s_per_token is None:
            return (f"device {self.device} (predicted, not measured): {NA} s/token, {NA} tok/s "
                    f"(no decoded tokens to price; {config})")
        eff = (f", effective {self.predicted_effective_tok_s:.3f} tok/s"
               if self.predicted_effective_tok_s != self.predicted_tok_s else "")
        return (f"device {self.device} (predicted, not measured): {self.predicted_s_per_token:.4f} "
                f"s/token, {self.predicted_tok_s:.3f} tok/s{eff} ({config})")


def input_match(device: DeviceModel, input_models) -> str | None:
    """The device's compute-floor key that one of ``input_models`` names
    (:func:`refsim.timing.runs.same_model`: by file name), or None (no name given, or none of
    the device's)."""
    from refsim.timing.runs import same_model
    for key in sorted(device.compute):
        if any(same_model(key, m) for m in input_models):
            return key
    return None


def resolve_model(device: DeviceModel, model: str | None, flag: str = "--device-model",
                  input_models=()) -> str:
    """The compute floor to use: ``model``; else the device's key that the input's own model
    names (``input_models``: a route trace's ``model=``, a GGUF's file name and
    ``general.name``; :func:`input_match`); else the device's only one (:func:`model_warning`
    says when that is another model than the input's).

    ``flag`` names the option in the messages.

    Raises
    ------
    ConfigError
        No model named, none of the input's, and the device knows several; a model the device
        does not know.
    """
    if model is None:
        match = input_match(device, input_models)
        if match is not None:
            return match
        if len(device.compute) != 1:
            raise ConfigError(f"{flag}: the device knows {len(device.compute)} models "
                              f"({', '.join(sorted(device.compute))}); name one")
        return next(iter(device.compute))
    device.compute_floor(model, where=f"{flag} {model}")
    return model


def model_warning(device: DeviceModel, name: str, key: str, named: str | None, input_models,
                  flag: str = "--device-model") -> str | None:
    """The one-line warning when the compute floor ``key`` was taken as the device's only one
    although the input names another model (issue 29: the Qwen3-30B trace priced on the
    Qwen3.6 desktop's floor said nothing); None when ``flag`` named the floor (``named``), the
    input names no model, or names ``key``. The prices are unchanged: still ``key``'s floor.

    ``name``: the device file, as given; ``input_models``: the input's names, the first the one
    printed (:func:`resolve_model`)."""
    names = [m for m in input_models if m]
    if named is not None or not names or input_match(device, names) is not None:
        return None
    return (f"the input's model is {names[0]}, but the device {name} has only {key}'s compute "
            f"floor: priced with it ({flag} {key} says that is meant)")


def device_whatif(device: DeviceModel, name: str, mib_per_token: float, tokens_per_decode: float,
                  model: str, io_threads: int, overlap: bool, cache: bool = True,
                  eps: float = DEFAULT_EPS, draft_s_per_token: float = 0.0,
                  positions_per_decode: float | None = None) -> DeviceWhatIf:
    """Predicted s/token and tok/s (see the module docstring).

    ``positions_per_decode`` (>= ``tokens_per_decode``) is what the decode's compute is paid for:
    a verify decode's every position, rejected drafts included (issue 29 item 1). None takes it
    equal to ``tokens_per_decode`` (every draft accepted, or plain decoding).

    Raises
    ------
    ConfigError
        ``tokens_per_decode`` < 1 or above ``positions_per_decode``; the device's refusals.
    """
    if not tokens_per_decode >= 1.0:
        raise ConfigError(f"tokens per decode {tokens_per_decode!r}: expected >= 1")
    width = tokens_per_decode if positions_per_decode is None else positions_per_decode
    if not width >= tokens_per_decode:
        raise ConfigError(f"positions per decode {width!r}: expected >= the tokens per decode "
                          f"{tokens_per_decode!r}")
    x = mib_per_token * tokens_per_decode
    t = decode_ms(device, x, width, model, io_threads, overlap, cache, eps)
    s_tok = t / tokens_per_decode / 1000.0
    return DeviceWhatIf(device=name, model=model, io_threads=io_threads, overlap=overlap,
                        position_cost=eps, ms_per_decode=t, predicted_s_per_token=s_tok,
                        predicted_tok_s=1.0 / s_tok,
                        predicted_effective_tok_s=1.0 / (s_tok + draft_s_per_token))


def price_device(device: DeviceModel, model: str, io_threads: int, overlap: bool,
                 eps: float = DEFAULT_EPS, cache: bool = True, work=None):
    """The :class:`refsim.timing.verdict.Device` of a ``--device`` what-if: ``eps`` exact (kind
    *assumed*, ``--position-cost``), no band inputs; ``work`` the model's tensor table (the MTP
    head's compute, refsim.timing.head) when known."""
    from refsim.timing.terms import exact
    from refsim.timing.verdict import Device
    return Device(device, model, io_threads, overlap,
                  exact("eps", eps, "fraction of C per extra position", "assumed",
                        "--position-cost"), cache=cache, work=work)


def priced_whatif(dv, name: str, cfg, reads: dict) -> DeviceWhatIf:
    """A :class:`DeviceWhatIf` from :func:`refsim.timing.verdict.point_terms` (the one pricing
    rule, issue 29 item 1): s/token and tok/s of the verify decodes' terms, effective tok/s with
    the MTP head's term added (it runs outside the verify decode: the engine's
    ``mtp_draft_s/tok``, docs/telemetry.md), ``ms_per_decode`` the in-decode ms per token times
    ``cfg``'s tokens per decode.

    Raises
    ------
    ConfigError
        :func:`~refsim.timing.verdict.point_terms`' refusals.
    """
    from refsim.timing.verdict import point_terms
    terms = point_terms(dv, cfg, reads)
    head = terms.pop("head")
    ms_tok = sum(terms.values())
    s_tok = ms_tok / 1000.0
    return DeviceWhatIf(device=name, model=dv.floor_model, io_threads=dv.lanes,
                        overlap=dv.overlap, position_cost=dv.eps.value,
                        ms_per_decode=ms_tok * cfg.tokens_per_decode,
                        predicted_s_per_token=s_tok, predicted_tok_s=1.0 / s_tok,
                        predicted_effective_tok_s=1.0 / (s_tok + head / 1000.0))


def width_whatif(device: DeviceModel, name: str, model: str, io_threads: int, overlap: bool,
                 width: int, mib_per_token: float, eps: float = DEFAULT_EPS) -> DeviceWhatIf:
    """``refsim union --device``'s column: a verify batch of ``width`` positions, every draft
    accepted (:func:`refsim.timing.verdict.accepted_width_config`), each decode reading
    ``mib_per_token * width`` MiB (the replay's MiB per position times the width), priced by
    :func:`priced_whatif`.

    Raises
    ------
    ConfigError
        ``width`` < 1; the device's refusals.
    """
    from refsim.timing.verdict import Reads, accepted_width_config
    if width < 1:
        raise ConfigError(f"width {width!r}: expected >= 1")
    reads = {width: Reads(width, mib_per_token * width)}
    return priced_whatif(price_device(device, model, io_threads, overlap, eps), name,
                         accepted_width_config(width), reads)


def run_width(result) -> int:
    """Positions of a finished run's drafted decode, ``1 + draft_max`` (1 without speculation):
    the width its extra positions are priced at (:meth:`DeviceOptions.eps
    <refsim.timing.device_options.DeviceOptions.eps>`)."""
    return 1 if result.spec == "off" else 1 + int(result.draft_max)


def run_config(result, n_gen: int):
    """``(SpecConfig, reads)`` of a finished run (:class:`refsim.spec.RunResult`), priced as
    ``refsim whatif`` prices a configuration: the run's own coverage (decodes that drafted /
    decodes; 1 for MTP), drafts per drafted decode, and tokens per decode ``n_gen / decodes``
    (its acceptance: ``(tokens per decode - 1) / (coverage x drafts)``); the reads are the mean
    flash MiB of its plain decodes (width 1) and of its drafted ones (width ``draft_max + 1``),
    each decode's ``read_bytes`` (the MTP head's own reads included: the run's MiB/token). MTP
    drafts on every decode (coverage 1): its reads are the mean over every decode, its drafts
    per decode ``drafted / decodes`` and its head's drafting passes per decode the run's count
    (``StepRecord.draft_passes``, refsim.timing.head).

    Raises
    ------
    ConfigError
        A run whose counters do not make a configuration (cannot happen for a finished run).
    """
    from refsim import MIB
    from refsim.timing.verdict import Reads, SpecConfig
    steps = result.steps
    n = len(steps)
    if n == 0:
        return SpecConfig("off"), {1: Reads(1, 0.0)}
    x = [s.read_bytes / MIB for s in steps]
    tpd = max(1.0, n_gen / n)
    drafted = [i for i, s in enumerate(steps) if s.n_draft > 0]
    n_drafts = sum(steps[i].n_draft for i in drafted)
    if result.spec == "off" or not drafted:
        return SpecConfig("off"), {1: Reads(1, sum(x) / n)}
    d = int(result.draft_max)
    if result.spec == "mtp":
        share, mean_d, plain = 1.0, n_drafts / n, []
        wide = range(n)
    else:
        share, mean_d = len(drafted) / n, n_drafts / len(drafted)
        wide, plain = drafted, [i for i, s in enumerate(steps) if s.n_draft == 0]
    acceptance = min(1.0, max(0.0, (tpd - 1.0) / (share * mean_d)))
    reads = {d + 1: Reads(d + 1, sum(x[i] for i in wide) / len(wide))}
    if plain:
        reads[1] = Reads(1, sum(x[i] for i in plain) / len(plain))
    kind = "mtp" if result.spec == "mtp" else "ngram"
    passes = sum(s.draft_passes for s in steps) / n if kind == "mtp" else None
    cfg = SpecConfig(kind, d, acceptance=acceptance, coverage=None if kind == "mtp" else share,
                     source="measured: the run", mean_drafts=min(float(d), mean_d),
                     draft_passes=passes)
    return cfg, reads


def request_whatif(rm, name: str, feats, tokens_per_decode: float, model: str, io_threads: int,
                   overlap: bool, eps: float = DEFAULT_EPS,
                   draft_s_per_token: float = 0.0,
                   positions_per_decode: float | None = None) -> DeviceWhatIf:
    """:func:`device_whatif` with the serial flash term by requests and lanes
    (:class:`refsim.timing.requests.RequestModel`); ``feats`` are one decode's
    (:class:`refsim.timing.requests.IoFeatures`, one row: window MiB, busiest-lane MiB, rounds and
    batches per decode). Under ``--overlap`` the stall is the per-MiB model's, so only ``tail``
    differs from :func:`device_whatif`. ``positions_per_decode``: as :func:`device_whatif`'s.

    Raises
    ------
    ConfigError
        ``tokens_per_decode`` < 1; the device's refusals.
    """
    if not tokens_per_decode >= 1.0:
        raise ConfigError(f"tokens per decode {tokens_per_decode!r}: expected >= 1")
    parts = rm.token_ms(feats, model, io_threads, overlap, True, where=f"--device {name}")
    width = tokens_per_decode if positions_per_decode is None else positions_per_decode
    extra = rm.base.compute_floor(model) * eps * (width - 1)
    t = float(parts["wall"][0]) + rm.tail * extra
    s_tok = t / tokens_per_decode / 1000.0
    return DeviceWhatIf(device=name, model=model, io_threads=io_threads, overlap=overlap,
                        position_cost=eps, ms_per_decode=t, predicted_s_per_token=s_tok,
                        predicted_tok_s=1.0 / s_tok,
                        predicted_effective_tok_s=1.0 / (s_tok + draft_s_per_token))


@dataclass(frozen=True)
class MemoryCase:
    """One read level of ``refsim memory --device``: a plain decode reading ``mib_per_token``."""

    case: str
    mib_per_token: float
    whatif: DeviceWhatIf

    def as_dict(self) -> dict:
        return {"case": self.case, "mib_per_token": self.mib_per_token, **self.whatif.as_dict()}


HIT_DEFINITION = ("decode-only hit without a knob (refsim replay's hit_dec% with no "
                  "--drop-cold-experts/--prefetch)")
"""The hit ``refsim memory --hit-pct`` takes: what ``(1 - P/100) x T`` MiB/token holds for."""

ENGINE_HIT_REFUSAL = (
    "--hit-kind cumulative: the engine's cache_hit_pct counts the prefill's lookups (and, with "
    "--drop-cold-experts, dropped misses that read nothing), so no MiB/token follows from it; give "
    "the run's own figure, --mib-per-token (its summary read_MiB / tokens), or refsim replay's "
    "decode-only hit without a knob, --hit-pct")
"""Why ``refsim memory --hit-kind cumulative`` is refused (bmoe-engine.md: ``cache_hit_pct`` is
lifetime hits / lookups, prefill included; a dropped expert is looked up and missed but not read,
docs/streaming-knobs.md)."""


def memory_whatif(device: DeviceModel, name: str, model: str, t_mib: float, io_threads: int,
                  overlap: bool, hit_pct: float | None = None,
                  mib_per_token: float | None = None) -> list[MemoryCase]:
    """What a device predicts from a model's bytes alone (``refsim memory --device``).

    ``refsim memory`` knows the model's token cycle ``T`` (``t_mib``: Σ trunk layers ``min(k,
    n_expert) × expert_bytes``, MiB) and the budget, not a hit rate: which experts a run routes
    is a trace's fact. So it predicts plain decoding (one position per decode, expert cache on) at
    the read levels the bytes fix, in this order:

    - ``all hits``: 0 MiB/token, the device's floor (``C`` + cache bookkeeping + the fixed flash
      or stall term); also the steady state when the budget holds the whole streamed set;
    - ``hit P%`` (``hit_pct`` given): ``(1 - P/100) × T`` MiB/token — P read as the byte-weighted
      decode hit share (equal to the decode-only hit % when every layer's expert slice has the
      same bytes);
    - ``run M MiB/token`` (``mib_per_token`` given): a run's own decode MiB/token (the engine's
      summary ``read_MiB / tokens``: prefill excluded, with whatever knobs it ran -- a dropped
      expert's skipped read is already out of it). This is how a figure measured with
      ``--drop-cold-experts`` enters: the engine's ``cache_hit_pct`` (cumulative, prefill
      included, dropped misses counted) fixes no read level (:data:`ENGINE_HIT_REFUSAL`);
    - ``all misses``: ``T`` MiB/token, every routed expert read from flash (the cache's worst).

    Raises
    ------
    ConfigError
        ``hit_pct`` outside 0..100; ``mib_per_token`` negative or not finite; the device's own
        refusals (:func:`device_whatif`).
    """
    if hit_pct is not None and not 0.0 <= hit_pct <= 100.0:
        raise ConfigError(f"--hit-pct: expected 0..100, got {hit_pct!r}")
    if mib_per_token is not None and not 0.0 <= mib_per_token < float("inf"):
        raise ConfigError(f"--mib-per-token: expected a finite number >= 0, got {mib_per_token!r}")
    levels = [("all hits", 0.0)]
    if hit_pct is not None:
        levels.append((f"hit {hit_pct:g}%", (1.0 - hit_pct / 100.0) * t_mib))
    if mib_per_token is not None:
        levels.append((f"run {mib_per_token:g} MiB/token", mib_per_token))
    levels.append(("all misses", t_mib))
    return [MemoryCase(case, x, device_whatif(device, name, x, 1.0, model, io_threads, overlap))
            for case, x in levels]


def predicted_run_times(device: DeviceModel, name: str, result, model: str, io_threads: int,
                        overlap: bool, eps: float = DEFAULT_EPS):
    """Per-decode predicted times of a :class:`refsim.spec.RunResult`, for its metrics CSV and
    ``BMOE_DONE`` (:class:`refsim.telemetry.predicted.PredictedTimes`).

    Decode ``i`` of ``w = 1 + n_draft`` positions reading ``x`` MiB (its ``read_bytes`` less the
    draft source's ``draft_read_bytes``: drafting is outside the engine's ``wall_ms``) is priced
    by the one decode rule, :func:`refsim.timing.decode.decode_term_arrays` (the terms of
    :func:`refsim.timing.decode.decode_terms`, every decode at once), and its terms fill the
    engine's columns (ms; docs/telemetry.md, "Predicted times")::

        compute = compute + extra_positions + contention
        mgmt    = bookkeeping
        io      = the serial flash time of the reads (the flash term serially; for reference
                  under --overlap, where the decode waits for the stall instead)
        stall   = stall                                   (0 serially)
        wall    = the sum of the terms in TERMS order     (refsim.timing.decode.decode_ms)

    Raises
    ------
    ConfigError
        The device's refusals (unknown model, a mode it was not fitted on, a time <= 0).
    """
    import numpy as np

    from refsim import MIB
    from refsim.telemetry.predicted import PredictedTimes
    from refsim.timing.decode import SERIAL_FLASH, TERMS, decode_term_arrays
    steps = result.steps
    x = np.array([(s.read_bytes - getattr(s, "draft_read_bytes", 0)) / MIB for s in steps],
                 dtype=np.float64)
    w = np.array([1 + s.n_draft for s in steps], dtype=np.float64)
    t = decode_term_arrays(device, model, io_threads, overlap, result.cache is not None, x, w,
                           eps, where=f"--device {name}")
    return PredictedTimes(device=name, overlap=overlap, io_threads=io_threads,
                          wall_ms=sum(t[k] for k in TERMS),
                          compute_ms=t["compute"] + t["extra_positions"] + t["contention"],
                          mgmt_ms=t["bookkeeping"], io_ms=t[SERIAL_FLASH], stall_ms=t["stall"])
