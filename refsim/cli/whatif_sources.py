"""Where ``refsim whatif`` takes each configuration's reads and acceptance from (issue 29 item 1,
issue 30 ``--spec-policy``): a route trace, or a live run of a model. Not a subcommand.

- :class:`TraceSource`: the trace's exact union replay at width 1 and ``d + 1`` (knobs on), the
  acceptance from ``--spec`` (assumed) or ``--tokens`` (ngram-whatif, measured). With a draft
  policy other than ``fixed``, each speculation configuration is replayed as the loop with that
  policy would decode the trace (:func:`refsim.studies.spec_policy.policy_replay` on a seeded
  acceptance stream drawn with the configuration's acceptance and coverage), and its own
  counters are priced (:mod:`refsim.timing.measured`).
- :class:`LiveSource`: every configuration run live at every budget through
  :func:`refsim.session.simulate` (``refsim run``'s path, the policy included), priced from the
  run's own counters (:func:`refsim.timing.measured.from_steps`): acceptance, coverage, drafts
  per drafted decode, and the mean read and hit of its plain and drafted decodes.

Each source's :meth:`priced` returns what :func:`refsim.timing.verdict.price` takes for one
configuration at one budget, and the counters measured (None when nothing was measured).
"""

from __future__ import annotations

import os
import sys

from refsim import MIB
from refsim.errors import ConfigError, UsageError

BUILTIN = "builtin"
"""``refsim whatif builtin ...``: the built-in synthetic qwen3moe (``refsim run``'s default model,
made once under ``$REFSIM_CACHE`` or ``~/.cache/refsim``; no download)."""

TRACE_MAGIC = b"# route_trace v1"
"""The first bytes of a route trace (refsim.trace.format)."""

LIVE_SOURCE = "measured: live run"
"""The acceptance source of every configuration a live run measured."""

POLICY_SEED = 0
"""The acceptance stream's seed of a policy replay on a trace (refsim.studies.spec_policy)."""


def live_model(text: str) -> str | None:
    """The model ``text`` names when ``whatif`` runs it live, else None (a route trace).

    A file wins over a name: a file that begins with the GGUF magic is a model, any other file
    a trace (the trace reader names what is wrong with it), except an empty file or a ``.gguf``
    that is neither, refused naming both; ``builtin`` names the built-in model and ``gemma-3-270m`` the named model of
    ``refsim run`` (:data:`refsim.session.NAMED_MODELS`). A missing path ending in ``.gguf`` is
    a missing model.

    Raises
    ------
    ConfigError
        ``MODEL X: no such file``, a file that cannot be read, an empty file, a ``.gguf`` file
        that is neither a GGUF nor a trace.
    """
    from refsim.session import NAMED_MODELS
    if text == "-":
        return None
    if os.path.isfile(text):
        try:
            with open(text, "rb") as f:
                head = f.read(len(TRACE_MAGIC))
        except OSError as exc:
            raise ConfigError(f"{text}: cannot read: {exc.strerror}") from None
        if head[:4] == b"GGUF":
            return text
        if not head or (text.lower().endswith(".gguf") and head != TRACE_MAGIC):
            got = "an empty file" if not head else f"{head[:4]!r} at byte 0"
            raise ConfigError(f"TRACE|MODEL {text}: expected a GGUF model (magic 'GGUF') or a "
                              f"route trace ('# route_trace v1'), got {got}")
    if text == BUILTIN or text in NAMED_MODELS:
        return text
    if text.lower().endswith(".gguf"):
        raise ConfigError(f"MODEL {text}: no such file")
    return None


def check_live_flags(args, live: str | None) -> None:
    """The flags of one source refused with the other (usage errors).

    Raises
    ------
    UsageError
        ``--prompt``/``--prompt-tokens``/``-n`` with a trace; ``--tokens``/``--prompt-len``/
        ``--gguf`` with a live model.
    """
    if live is None:
        given = [f for f, v in (("--prompt", args.prompt), ("--prompt-tokens", args.prompt_tokens),
                                ("-n", args.n_predict)) if v is not None]
        if given:
            raise UsageError(f"{', '.join(given)}: for a live run of a MODEL (GGUF or builtin); "
                             f"{args.source} is a route trace")
        return
    given = [f for f, v in (("--tokens", args.tokens), ("--prompt-len", args.prompt_len),
                            ("--gguf", args.gguf)) if v is not None]
    if given:
        raise UsageError(f"{', '.join(given)}: for a route trace; with MODEL {args.source} the "
                         f"live run measures the acceptance and the model is MODEL itself")


def open_live_model(live: str):
    """The opened model of a live source (the built-in one written on first use).

    Raises
    ------
    ConfigError
        A dense model (no routed experts: no expert cache to price).
    ModelFormatError
        A malformed GGUF.
    """
    from refsim.model import open_model
    from refsim.session import named_model_path
    if live == BUILTIN and not os.path.isfile(live):
        from refsim.forward.builtin import builtin_model_path
        path = builtin_model_path()
    else:
        path = named_model_path(live)
    model = open_model(path)
    if not model.spec.n_expert:
        raise ConfigError(f"MODEL {live}: {model.spec.arch} is a dense model (no routed experts): "
                          f"whatif prices expert-cache reads; give an MoE model")
    return path, model


def check_live_configs(cfgs, live: str, model) -> None:
    """The ``--spec`` items a live run can measure.

    Raises
    ------
    UsageError
        An item with ``acceptance=``/``coverage=`` (the live run measures them).
    ConfigError
        An ``mtp:`` item on a model without an MTP (nextn) block.
    """
    for c in cfgs:
        if c.kind != "off" and (c.acceptance is not None or c.coverage is not None):
            raise UsageError(f"--spec {c.label}: acceptance=/coverage= with MODEL {live}: the live "
                             f"run measures them (give them with a TRACE)")
    check_mtp_block(cfgs, f"MODEL {live}", model)


def check_mtp_block(cfgs, what: str, model) -> None:
    """An ``mtp:`` item needs a model with an MTP (nextn) block (its head and ledger): ``what``
    names the model as the user gave it (``MODEL X``, ``--gguf X``).

    Raises
    ------
    ConfigError
        An ``mtp:`` item and ``nextn_predict_layers = 0``.
    """
    for c in cfgs:
        if c.kind == "mtp" and model.spec.nextn_predict_layers <= 0:
            raise ConfigError(f"--spec {c.label}: {what} has no MTP (nextn) block "
                              f"(nextn_predict_layers = 0); use ngram: items")


class TraceSource:
    """The reads of a route trace (module docstring).

    Parameters
    ----------
    trace : refsim.trace.RouteTrace
    widths : list of int
        Every width a configuration needs (1 included).
    knobs : refsim.streaming.knobs.StreamKnobs
    policy : refsim.spec.policies.DraftPolicy or None
        A draft policy other than ``fixed`` (None: every candidate verified, the union replay).
    policy_text : str or None
        Its ``--spec-policy`` text.
    """

    def __init__(self, trace, widths, knobs, policy=None, policy_text=None):
        self.trace, self.widths, self.knobs = trace, widths, knobs
        self.policy, self.policy_text = policy, policy_text
        self._replays: dict = {}

    def reads_at(self, mib: float) -> dict:
        """The union replay at ``mib`` MiB of cache (:func:`refsim.studies.union.union_study`)."""
        from refsim.cache import ExpertCache
        from refsim.studies.union import union_study
        from refsim.timing.verdict import reads_from_union
        if mib not in self._replays:
            on = self.knobs.any_on
            rows = union_study(self.trace, self.widths, ExpertCache.mib_to_bytes(mib),
                               self.knobs if on else None)
            self._replays[mib] = reads_from_union(rows, on)
        return self._replays[mib]

    def priced(self, c, mib: float, off_mib: float, fixed_replay: bool = False):
        """``(config, reads, off_reads, measured)`` of configuration ``c`` at ``mib`` MiB.

        ``fixed_replay``: with a policy other than ``fixed``, ``c`` replayed with ``fixed`` by the
        policy's own replay (the same seeded stream and ``rejected='same'`` rule): the row the
        policy's row differs from by the policy alone (docs/timing.md "The draft policy")."""
        if self.policy is None or c.kind == "off":
            return c, self.reads_at(mib), (self.reads_at(off_mib) if mib != off_mib else None), None
        from refsim.cache import ExpertCache
        from refsim.studies.spec_policy import policy_replay
        from refsim.timing.measured import from_policy_row
        alpha = c.acceptance
        c.tokens_per_decode                      # refuses a missing acceptance or coverage
        if alpha >= 1.0:
            raise ConfigError(f"--spec-policy {self.policy_text} on a trace: {c.label} acceptance "
                              f"{alpha:g}; the seeded acceptance stream needs an acceptance "
                              f"below 1")
        from refsim.spec.policies import parse_spec_policy
        pol, text = ((parse_spec_policy("fixed"), "fixed") if fixed_replay else
                     (self.policy, self.policy_text))
        row = policy_replay(self.trace, ExpertCache.mib_to_bytes(mib), text, c.draft,
                            coverage=c.drafted_fraction, accept=alpha, seed=POLICY_SEED,
                            knobs=self.knobs if self.knobs.any_on else None, rejected="same")
        m = from_policy_row(row)
        # the acceptance and coverage shown are the replay's own counters (the policy changes
        # both): measured, whatever the stream was drawn with (assumed in --spec, or measured
        # from --tokens), which the label names
        stream = (f"measured: {pol.label()} replay of the assumed acceptance {alpha:g} "
                  f"and coverage {c.drafted_fraction:g} (--spec)" if c.source == "assumed" else
                  f"{c.source}; {pol.label()}")
        src = (f"{stream} on a seeded acceptance stream (refsim.studies.spec_policy, seed "
               f"{POLICY_SEED})")
        cfg = m.config(c.kind, c.draft, c.min_match, src, pol.label())
        return cfg, m.reads(c.width, self.reads_at(mib)[1]), self.reads_at(off_mib), _counts(m)


class LiveSource:
    """Every configuration run live at every budget (module docstring).

    Parameters
    ----------
    args : argparse.Namespace
        ``whatif``'s flags (the prompt, ``-n``, the policy text).
    live : str
        The MODEL text (``builtin``, a name or a GGUF path).
    knobs : refsim.streaming.knobs.StreamKnobs
    policy : refsim.spec.policies.DraftPolicy or None
        A draft policy other than ``fixed`` (None: the run's default path).
    """

    N_PREDICT = 32
    """``-n`` unless given (``refsim run``'s default)."""

    def __init__(self, args, live: str, knobs, policy=None):
        self.args, self.knobs, self.policy = args, knobs, policy
        self.model = None if live == BUILTIN and not os.path.isfile(live) else live
        self.n_predict = args.n_predict or self.N_PREDICT
        self._runs: dict = {}
        self._stops: dict = {}      # (label, MiB) -> (tokens generated, EOG id or None)
        self._said: set = set()

    def _warn(self, line: str) -> None:
        # simulate(cmd="whatif") names this command; each line once over all the runs
        if line not in self._said:
            self._said.add(line)
            print(line, file=sys.stderr)

    def run(self, c, mib: float):
        """The :class:`refsim.timing.measured.Measured` of configuration ``c`` run live at
        ``mib`` MiB (one run per configuration and budget)."""
        from refsim.session import RunConfig, simulate
        from refsim.spec import SpecConfig as RunSpec
        from refsim.timing.measured import from_steps
        key = (c.label, mib)
        if key not in self._runs:
            spec = RunSpec.from_flags(
                ngram=c.kind == "ngram", mtp=c.kind == "mtp",
                draft=c.draft if c.kind != "off" else None,
                ngram_min_match=c.min_match if c.kind == "ngram" else None,
                spec_policy=(self.args.spec_policy if c.kind != "off" and self.policy is not None
                             else None))
            report = simulate(RunConfig(model=self.model, prompt=self.args.prompt,
                                        prompt_tokens=self.args.prompt_tokens,
                                        n_predict=self.n_predict, spec=spec, cache_mb=mib,
                                        knobs=self.knobs), warn=self._warn, cmd="whatif")
            self._runs[key] = from_steps(report.result.steps)
            r = report.result
            self._stops[key] = (r.n_gen, int(r.eog_token) if r.eog else None)
        return self._runs[key]

    def stop(self, c, mib: float) -> dict:
        """How the run of ``c`` at ``mib`` MiB ended: ``generated`` (tokens emitted, the
        end-of-generation token never included), ``stop`` (``eog`` or ``n_predict``) and
        ``eog_token`` (None at ``n_predict``): ``refsim run --json``'s ``stop`` fields."""
        n, eog = self._stops[(c.label, mib)]
        return {"generated": n, "stop": "n_predict" if eog is None else "eog", "eog_token": eog}

    def generated(self) -> str:
        """What every run so far generated, for the header (:func:`generated_text`)."""
        return generated_text(self.n_predict, list(self._stops.values()))

    def priced(self, c, mib: float, off_mib: float):
        """``(config, reads, off_reads, measured)`` of configuration ``c`` at ``mib`` MiB: the
        plain run at ``off_mib`` is always the baseline (a speculative run's own plain decodes
        see another cache)."""
        from refsim.timing.verdict import SpecConfig
        off_cfg = SpecConfig("off")
        off = self.run(off_cfg, off_mib)
        off_reads = off.reads(1)
        if c.kind == "off":
            return c, off_reads, None, _counts(off) | self.stop(off_cfg, off_mib)
        m = self.run(c, mib)
        label = "fixed" if self.policy is None else self.policy.label()
        cfg = m.config(c.kind, c.draft, c.min_match, LIVE_SOURCE, label)
        return cfg, m.reads(c.width, off_reads[1]), off_reads, _counts(m) | self.stop(c, mib)


def generated_text(n_predict: int, stops) -> str:
    """What live runs generated, as the header says it: ``16 tokens`` when every run reached
    ``-n``; else ``up to 16 tokens (-n); ...`` naming how many runs stopped at an
    end-of-generation token (its id, the ids when several), after how many tokens (a range when
    they differ) and that the others reached ``-n``.

    ``stops``: one ``(tokens generated, end-of-generation id or None)`` per run."""
    eog = [(n, t) for n, t in stops if t is not None]
    if not eog:
        return f"{n_predict} tokens"
    ns, ids = sorted({n for n, _ in eog}), sorted({t for _, t in eog})
    after = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]} to {ns[-1]}"
    token = (f"the end-of-generation token {ids[0]}" if len(ids) == 1 else
             f"an end-of-generation token ({', '.join(str(t) for t in ids)})")
    rest = len(stops) - len(eog)
    who = "every run" if not rest else f"{len(eog)} of {len(stops)} runs"
    return (f"up to {n_predict} tokens (-n); {who} stopped at {token} after {after} tokens"
            + ("" if not rest else f", the other{'s' if rest > 1 else ''} at -n"))


def _counts(m) -> dict:
    """The measured counters a row reports (``measured`` in ``--json``)."""
    return {"decodes": m.decodes, "drafted_steps": m.drafted.decodes, "drafted": m.n_drafted,
            "accepted": m.accepted, "read_mib": m.read_bytes / MIB,
            "lookups": m.plain.lookups + m.drafted.lookups, "hits": m.plain.hits + m.drafted.hits}
