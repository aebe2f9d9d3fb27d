"""The speculative loop: draft, verify, accept, roll back, emit — producing decode events.

One step, in our words (bmoe-engine.md §2 "Per step"; the engine's session.cpp generate):

0. Prefill the prompt at positions ``0..n_prompt-1`` (one event, kind PREFILL); the first
   token ``tok`` is the argmax of the last prompt row; ``n_past = n_prompt``; the corpus is
   the prompt.
1. While ``n_gen < n_predict``: if ``tok`` is end-of-generation, stop (EOG is never emitted).
2. Draft only if a source is configured and ``room = n_predict - n_gen - 1 > 0``: ask for
   ``min(draft_max, room)`` tokens from the corpus and ``tok``; truncate to ``room``.
   ``drafted += n``; ``drafted_steps += 1`` if ``n > 0``.
3. ``n == 0``: the plain path, one position (``tok`` at ``n_past``), one logits row.
   Otherwise the verify decode of ``[tok, d1..dn]`` at ``n_past..n_past+n``, a row per position.
4. One target decode (``decodes += 1``, also without speculation).
5. Greedy acceptance (:func:`refsim.spec.accept.greedy_accept`); ``accepted += n_acc``.
6. Roll back: when ``n_acc < n`` the target keeps positions ``< n_past + 1 + n_acc``.
7. Emit ``[tok] + accepted drafts`` (without an accepted EOG) while ``n_gen < n_predict``;
   each is appended to the corpus and is one metrics row.
8. Stop on an accepted EOG; else ``n_past += 1 + n_acc`` and ``tok`` = the bonus token.

Every target decode becomes one :class:`refsim.events.DecodeEvent` (PLAIN or VERIFY with its
positions, fed tokens, routes and ``accepted``), fed to the one :class:`ExpertCache`, so flash
bytes, hit rate and MiB/token come from the same accounting path as a trace replay.

Times are the simulator's own measured seconds (``clock``, default ``time.perf_counter``):
decode wall brackets ``target.decode`` only, drafting brackets the draft call, loop overhead is
the wall between the previous decode's end and this decode's start (drafting included), as in
the engine. None of them is the engine's time on a device.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from refsim import progress
from refsim.cache import EventRecord, ExpertCache
from refsim.errors import ConfigError
from refsim.events import DecodeEvent, DecodeKind
from refsim.spec.accept import greedy_accept
from refsim.spec.constants import DRAFT_MAX_DEFAULT, DRAFT_MAX_LIMIT, SPEC_OFF
from refsim.spec.draft import DraftSource, NoDraft
from refsim.spec.target import Target, TargetOutput


@dataclass(frozen=True)
class StepRecord:
    """One target decode and what it produced (one CSV row group).

    Attributes
    ----------
    kind : DecodeKind
        PLAIN (no draft) or VERIFY.
    n_past : int
        Position of the fed token ``tok`` (the decode's first position).
    n_draft : int
        Draft tokens carried.
    n_acc : int
        Draft tokens accepted (an accepted EOG included).
    batch : int
        Tokens the decode confirmed: ``1 + n_acc`` minus an accepted EOG (the CSV's
        ``mtp_batch``, the same on every row of the group).
    n_emitted : int
        Rows written (``batch`` unless ``n_predict`` cut the group).
    eog : bool
        An accepted draft token was end-of-generation.
    wall_s : float
        Measured seconds of ``target.decode`` (simulator time).
    draft_s : float
        Measured seconds of drafting before this decode.
    loop_overhead_s : float
        Seconds between the previous decode's end (or the prefill's end) and this decode's
        start; includes ``draft_s``.
    read_bytes : int
        Flash bytes of this decode's misses plus the draft source's events (0 without cache).
    lookups, hits : int
        Expert lookups and hits of this decode (and its draft events).
    cum_lookups, cum_hits : int
        Lifetime lookups and hits after this decode, prefill included (``cache_hit_pct``).
    draft_read_bytes : int
        The part of ``read_bytes`` read by the draft source's events (the MTP head's own
        routing: drafting and catch-up), for the ``mtp:`` flash split.
    draft_passes : int
        Draft-context decodes the draft source ran to propose this step's candidate (the MTP
        head's drafting passes, one position each; 0 for n-gram and when there was no room to
        draft). They run before a ``--spec-policy`` picks the width, so a policy that verifies
        fewer tokens, or none, does not make them fewer (refsim.timing.head).
    catchup_positions : int
        Positions of the draft source's decodes after acceptance (the MTP catch-up over
        ``[tok, d1..d_nacc]``: ``1 + n_acc``, at every decode, drafted or not; 0 for n-gram).
    """

    kind: DecodeKind
    n_past: int
    n_draft: int
    n_acc: int
    batch: int
    n_emitted: int
    eog: bool
    wall_s: float
    draft_s: float
    loop_overhead_s: float
    read_bytes: int = 0
    lookups: int = 0
    hits: int = 0
    cum_lookups: int = 0
    cum_hits: int = 0
    draft_read_bytes: int = 0
    draft_passes: int = 0
    catchup_positions: int = 0


@dataclass
class RunResult:
    """Everything one generation produced.

    Attributes
    ----------
    prompt : (n_prompt,) int32 ndarray
    tokens : (n_gen,) int32 ndarray
        Emitted tokens (EOG never included).
    steps : list of StepRecord
        One per target decode, in order.
    events : list of DecodeEvent
        Every event in decode order: the prefill, draft-source events, target decodes.
    records : list of EventRecord or None
        The cache's record of each event (None entries when no cache was given).
    spec : str
        Draft source name ('off', 'ngram', 'mtp').
    draft_max : int
        ``--draft`` in force (0 when speculation is off).
    n_predict : int
    eog : bool
        The generation ended on an end-of-generation token.
    eog_token : int
        That token's id (never emitted): the target's prediction fed as ``tok``, or an accepted
        draft token; -1 when the run stopped at ``n_predict``.
    prefill_s : float
        Measured seconds of ``target.prefill``.
    tail_s : float
        Seconds after the last decode until the loop returned (counted in loop overhead).
    cache : ExpertCache or None
        The cache the events were fed to.
    first_event, last_event : DecodeEvent or None
        The first (the prefill) and last event of the run, kept even when ``events`` is not
        (:class:`SpeculativeLoop` with ``keep_events=False``).
    n_events : int
        Events the run produced (``len(events)`` when they are kept).
    """

    prompt: np.ndarray
    tokens: np.ndarray
    steps: list[StepRecord]
    events: list[DecodeEvent]
    records: list[EventRecord | None]
    spec: str
    draft_max: int
    n_predict: int
    eog: bool = False
    eog_token: int = -1
    prefill_s: float = 0.0
    tail_s: float = 0.0
    cache: ExpertCache | None = field(default=None, repr=False)
    first_event: DecodeEvent | None = field(default=None, repr=False)
    last_event: DecodeEvent | None = field(default=None, repr=False)
    n_events: int = 0

    @property
    def n_prompt(self) -> int:
        return int(self.prompt.size)

    @property
    def n_gen(self) -> int:
        return int(self.tokens.size)

    @property
    def stop_reason(self) -> str:
        """``'eog'`` (an end-of-generation token, :attr:`eog_token`) or ``'n_predict'``
        (``n_predict`` tokens were emitted)."""
        return "eog" if self.eog else "n_predict"

    def write_trace(self, path, header) -> None:
        """Write the run's route trace (engine framing: one block per decode, every position
        of a verify decode, re-decoded positions again) atomically.

        Parameters
        ----------
        path : str or path-like
        header : refsim.trace.TraceHeader
            Model identity and per-layer bytes; ``header.expert_bytes`` should be the cache's.

        Raises
        ------
        ConfigError
            If the run had no cache (residency is the cache's record).
        """
        from refsim.trace import write_trace
        if self.cache is None or any(r is None for r in self.records):
            raise ConfigError("a route trace needs a run with an expert cache (--cache-mb)")
        if self.n_events and len(self.events) != self.n_events:
            raise ConfigError("the run did not keep its events (keep_events=False); write the "
                              "trace as it runs (SpeculativeLoop on_event, refsim.trace.TraceWriter)")
        traced = [(e, r) for e, r in zip(self.events, self.records)
                  if not e.kind.draft_context]
        write_trace(path, header, [e for e, _ in traced], [r.trace_residency() for _, r in traced],
                    [r.charged_bytes for _, r in traced],
                    pred=any(e.pred_routes is not None for e, _ in traced))


def _event(kind: DecodeKind, positions: np.ndarray, tokens: np.ndarray, out: TargetOutput,
           n_layer: int, k: int, **kw) -> DecodeEvent:
    n_pos = positions.size
    if out.routes is None:
        routes = np.zeros((n_pos, n_layer, k), dtype=np.int16) - 1
        weights = None
    else:
        routes = np.asarray(out.routes, dtype=np.int16)
        if routes.shape != (n_pos, n_layer, k):
            raise ConfigError(f"target returned routes of shape {routes.shape}, expected "
                              f"({n_pos}, {n_layer}, {k}) (n_pos, n_layer, n_expert_used)")
        weights = None if out.weights is None else np.asarray(out.weights, dtype=np.float32)
    dropped = out.dropped if out.dropped is not None and np.any(out.dropped) else None
    pred = {} if out.pred_routes is None or out.routes is None else {
        "pred_routes": np.asarray(out.pred_routes, np.int16),
        "pred_weights": np.asarray(out.pred_weights, np.float32)}
    return DecodeEvent(kind=kind, positions=positions.astype(np.int64), routes=routes,
                       weights=weights, tokens=tokens.astype(np.int32), dropped=dropped,
                       **pred, **kw)


class SpeculativeLoop:
    """The engine's greedy speculative loop over one target and one draft source.

    Parameters
    ----------
    target : Target
        The model (reference forward pass or a scripted target).
    draft_source : DraftSource, optional
        :class:`refsim.spec.draft.NgramDraft`, ... ; None or :class:`NoDraft` = speculation off.
    draft_max : int, default 3
        ``--draft N`` (1..8): most draft tokens per step.
    n_predict : int
        Tokens to generate (``-n``), >= 1.
    cache : ExpertCache, optional
        Every event is applied to it; its records give bytes, lookups and hits.
    clock : callable, default time.perf_counter
        Seconds source (tests pass a fake clock for reproducible telemetry).
    on_event : callable, optional
        Called as ``on_event(event, record)`` for every event in order, once the cache has
        applied it (``record`` None without a cache): ``refsim run --route-trace`` writes the
        trace's rows here (:meth:`refsim.trace.TraceWriter.write_record`).
    keep_events : bool, default True
        Keep every event and record in the result; False keeps only the first and last event
        and a count (what the telemetry needs), so memory does not grow with the events.
    policy : refsim.spec.policies.DraftPolicy, optional
        ``--spec-policy``: how many of each candidate's tokens to verify; None verifies them all
        (today's engine, what ``fixed`` also does).

    Raises
    ------
    ConfigError
        ``draft_max`` outside 1..8, ``n_predict < 1``, or a cache whose layer span differs
        from the target's.
    """

    def __init__(self, target: Target, draft_source: DraftSource | None = None,
                 draft_max: int = DRAFT_MAX_DEFAULT, n_predict: int = 128,
                 cache: ExpertCache | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 on_event: Callable | None = None, keep_events: bool = True, policy=None):
        if not 1 <= int(draft_max) <= DRAFT_MAX_LIMIT:
            raise ConfigError(f"--draft: expected 1..{DRAFT_MAX_LIMIT}, got {draft_max}")
        if int(n_predict) < 1:
            raise ConfigError(f"n_predict: expected >= 1, got {n_predict}")
        if cache is not None and cache.n_layer != target.n_layer:
            raise ConfigError(f"cache has n_layer={cache.n_layer}, the target routes "
                              f"{target.n_layer} layers")
        self.target = target
        self.draft_source = draft_source if draft_source is not None else NoDraft()
        self.draft_max = int(draft_max)
        self.n_predict = int(n_predict)
        self.cache = cache
        self.clock = clock
        self.on_event = on_event
        self.keep_events = bool(keep_events)
        self._first = self._last = None
        self._n_events = 0
        self.policy = policy
        self.driver = None

    @property
    def spec_on(self) -> bool:
        """A draft source is configured (the engine's ``spec_on``)."""
        return self.draft_source.name != SPEC_OFF

    def _apply(self, event: DecodeEvent, events: list, records: list,
               gate=None) -> EventRecord | None:
        applied = getattr(self.draft_source, "applied", None)
        if gate is not None:
            self.target.hooks.gate = None
            rec = gate.close(event)
        elif applied and event in applied:    # fed to the cache as it ran (the MTP head's seam)
            rec = applied.pop(event)
        else:
            rec = self.cache.apply(event) if self.cache is not None else None
        if self.keep_events:
            events.append(event)
            records.append(rec)
        if self._first is None:
            self._first = event
        self._last = event
        self._n_events += 1
        if self.driver is not None:
            self.driver.seen(event)
        if self.on_event is not None:
            self.on_event(event, rec)
        return rec

    @staticmethod
    def _tally(rec, draft: bool, tally: list) -> None:
        if rec is not None:
            tally[0] += rec.read_bytes
            tally[1] += rec.lookups
            tally[2] += rec.hits
            if draft:
                tally[3] += rec.read_bytes

    def _open_gate(self, kind: DecodeKind, positions: np.ndarray):
        """The drop seam for one target graph when ``--drop-cold-experts`` is armed: the
        cache's :class:`~refsim.cache.expert_cache.LayerFeed`, handed to the target's pass
        (``target.hooks.gate``); None otherwise.

        Raises
        ------
        ConfigError
            If the target's pass has no drop seam.
        """
        if self.cache is None or not self.cache.knobs.drop_on:
            return None
        hooks = self.target.hooks
        if hooks is None:
            raise ConfigError("--drop-cold-experts: this target's forward pass has no drop seam "
                              "(refsim runs it live for qwen3moe and qwen35moe; replay a trace otherwise)")
        gate = self.cache.open_event(kind, positions, int(self.target.n_expert_used))
        hooks.gate = gate
        return gate

    def run(self, prompt) -> RunResult:
        """Prefill ``prompt`` and generate up to ``n_predict`` tokens.

        Parameters
        ----------
        prompt : (n_prompt,) int array-like
            Prompt token ids, ``n_prompt >= 1``.

        Returns
        -------
        RunResult

        Raises
        ------
        ConfigError
            An empty prompt, or target outputs of the wrong shape.
        """
        tgt, clock = self.target, self.clock
        prompt = np.asarray(prompt, dtype=np.int32).reshape(-1)
        if prompt.size < 1:
            raise ConfigError("prompt: expected at least one token")
        n_layer, k = int(tgt.n_layer), int(tgt.n_expert_used)
        eos = frozenset(int(t) for t in tgt.eos_ids)
        events: list[DecodeEvent] = []
        records: list[EventRecord | None] = []
        steps: list[StepRecord] = []
        self._first = self._last = None
        self._n_events = 0
        if self.policy is not None:
            from refsim.spec.policies.driver import PolicyDriver
            self.driver = PolicyDriver(self.policy, n_layer, k, self.cache)
        n_prompt = prompt.size
        corpus = np.empty(n_prompt + self.n_predict, dtype=np.int64)
        corpus[:n_prompt] = prompt
        n_ctx = n_prompt
        gen: list[int] = []

        if (self.cache is not None and self.cache.knobs.drop_on
                and hasattr(self.draft_source, "cache_feed")):
            cache = self.cache             # the draft context feeds its decodes as they run
            self.draft_source.cache_feed = lambda kind, pos, k: cache.open_event(kind, pos, k)
        positions = np.arange(n_prompt, dtype=np.int64)
        gate = self._open_gate(DecodeKind.PREFILL, positions)
        t0 = clock()
        out = tgt.prefill(prompt)
        t1 = clock()
        if out.n_rows < 1:
            raise ConfigError("target.prefill returned no logits row")
        self._apply(_event(DecodeKind.PREFILL, positions, prompt, out, n_layer, k),
                    events, records, gate)
        begin = getattr(self.draft_source, "begin", None)
        if begin is not None:  # a draft context processes the prompt (MTP); prefill-phase reads
            for ev in begin(prompt):
                self._apply(ev, events, records)
        tok = int(out.argmax()[-1])
        n_past = n_prompt
        prev_end = t1
        eog, eog_token = False, -1
        spec_on = self.spec_on
        bar = progress.bar(total=self.n_predict, desc="generating", unit="tok")
        while len(gen) < self.n_predict:
            if tok in eos:
                eog, eog_token = True, tok
                break
            room = self.n_predict - len(gen) - 1
            drafts = np.zeros(0, dtype=np.int64)
            draft_events: tuple[DecodeEvent, ...] = ()
            draft_s = 0.0
            if spec_on and room > 0:
                d0 = clock()
                proposal = self.draft_source.draft(corpus[:n_ctx], tok, n_past,
                                                   min(self.draft_max, room))
                drafts = np.asarray(proposal.tokens, dtype=np.int64)[:room]
                draft_events = tuple(proposal.events)
                draft_s = clock() - d0
                if self.driver is not None and drafts.size:     # the policy picks the width
                    drafts = drafts[:self.driver.choose(drafts, tok, self.draft_max)]
            n = int(drafts.size)
            fed = np.concatenate(([tok], drafts)).astype(np.int32)
            positions = n_past + np.arange(n + 1, dtype=np.int64)
            gate = self._open_gate(DecodeKind.VERIFY if n else DecodeKind.PLAIN, positions)
            w0 = clock()
            out = tgt.decode(fed, positions)
            w1 = clock()
            if out.n_rows != n + 1:
                raise ConfigError(f"target.decode returned {out.n_rows} rows for {n + 1} "
                                  f"positions")
            res = greedy_accept(drafts, out.argmax(), eos)
            if self.driver is not None:
                self.driver.observe(n, res.n_acc)
            if res.n_acc < n:
                tgt.trim(n_past + 1 + res.n_acc)
            kind = DecodeKind.VERIFY if n else DecodeKind.PLAIN
            ev = _event(kind, positions, fed, out, n_layer, k, n_draft=n,
                        accepted=res.n_acc if n else None)
            # cache order as the engine reads: drafting, the target decode, then the catch-up.
            # The catch-up decodes only after the target decode's record is closed: a draft
            # source that feeds the cache as it decodes (the MTP head's drop seam) sees its reads.
            tally = [0, 0, 0, 0]                       # read, lookups, hits, draft read
            for e in draft_events + (ev,):
                self._tally(self._apply(e, events, records, gate if e is ev else None),
                            e is not ev, tally)
            catchup = 0
            for e in self.draft_source.accept(res.n_acc):
                self._tally(self._apply(e, events, records), True, tally)
                catchup += int(e.positions.size)
            read, looks, hits, draft_read = tally
            confirmed = [tok] + res.emitted.tolist()
            emitted = 0
            for t in confirmed:
                if len(gen) >= self.n_predict:
                    break
                gen.append(int(t))
                corpus[n_ctx] = t
                n_ctx += 1
                emitted += 1
            bar.update(emitted)
            st = self.cache.stats if self.cache is not None else None
            steps.append(StepRecord(
                kind=kind, n_past=n_past, n_draft=n, n_acc=res.n_acc, batch=len(confirmed),
                n_emitted=emitted, eog=res.eog, wall_s=w1 - w0, draft_s=draft_s,
                loop_overhead_s=w0 - prev_end, read_bytes=read, lookups=looks, hits=hits,
                cum_lookups=st.total("lookups") if st else 0,
                cum_hits=st.total("hits") if st else 0, draft_read_bytes=draft_read,
                draft_passes=sum(e.kind == DecodeKind.DRAFT for e in draft_events),
                catchup_positions=catchup))
            prev_end = w1
            if res.eog:
                eog, eog_token = True, int(drafts[res.n_acc - 1])
                break
            n_past += 1 + res.n_acc
            tok = res.next_token
        bar.close()
        t_end = clock()
        return RunResult(
            prompt=prompt, tokens=np.asarray(gen, dtype=np.int32), steps=steps, events=events,
            records=records, spec=self.draft_source.name,
            draft_max=self.draft_max if spec_on else 0, n_predict=self.n_predict, eog=eog,
            eog_token=eog_token, prefill_s=t1 - t0, tail_s=t_end - prev_end, cache=self.cache,
            first_event=self._first, last_event=self._last, n_events=self._n_events)


def run_generation(target: Target, draft_source: DraftSource | None, prompt, n_predict: int,
                   cache: ExpertCache | None = None, draft_max: int = DRAFT_MAX_DEFAULT,
                   clock: Callable[[], float] = time.perf_counter,
                   on_event: Callable | None = None, keep_events: bool = True,
                   policy=None) -> RunResult:
    """One-call form of :class:`SpeculativeLoop` (what ``refsim run`` calls).

    Parameters
    ----------
    target : Target
    draft_source : DraftSource or None
        None = speculation off.
    prompt : (n_prompt,) int array-like
    n_predict : int
    cache : ExpertCache, optional
    draft_max : int, default 3
    clock : callable, default time.perf_counter
    on_event : callable, optional
    keep_events : bool, default True
    policy : refsim.spec.policies.DraftPolicy, optional
        As :class:`SpeculativeLoop`'s.

    Returns
    -------
    RunResult

    See Also
    --------
    refsim.telemetry.RunStats.from_run : counters and rates of the result.
    refsim.spec.config.SpecConfig : flag validation and :func:`draft_source_for`.
    """
    loop = SpeculativeLoop(target, draft_source, draft_max=draft_max, n_predict=n_predict,
                           cache=cache, clock=clock, on_event=on_event, keep_events=keep_events,
                           policy=policy)
    return loop.run(prompt)


def draft_source_for(config) -> DraftSource:
    """The draft source a validated :class:`refsim.spec.config.SpecConfig` asks for.

    Raises
    ------
    ConfigError
        For ``spec='mtp'``: the MTP source needs the model (use
        :func:`refsim.spec.mtp.mtp_source_for`).
    """
    from refsim.spec.draft import NgramDraft
    if config.spec == SPEC_OFF:
        return NoDraft()
    if config.spec == "ngram":
        return NgramDraft(config.ngram_min_match, config.ngram_max_match)
    raise ConfigError("--mtp: the MTP draft source is not available from draft_source_for (it needs "
                      "the model); use refsim.spec.mtp.mtp_source_for")
