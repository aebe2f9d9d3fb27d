"""The MTP draft source: qwen35moe's nextn head drafting for the verify loop, as the engine does.

Engine rules (bmoe-engine.md §2; llama-cpp-notes.md §5.6, llama.cpp ``draft-mtp``):

- The draft context is a second context over the same model with its own KV for the nextn
  block (``blk.{n_layer}``), no recurrent state, ``n_rs_seq = 0``. Its decodes stream the head's
  **own routed experts**, at layer index ``n_layer`` of the streamed span ``n_layer + 1``.
- **Begin** (after the prefill): the draft context processes the prompt at ``0..n_prompt-1``;
  row ``p`` carries the target's ``h_nextn`` of ``p - 1``; row 0 carries ``pending_h``, zero at
  the start (llama.cpp common/speculative.cpp ``common_speculative_impl_draft_mtp``: the
  constructor fills ``pending_h`` with zeros and ``process()`` gives it to the first row; checked
  against llama.cpp by tests/forward/test_qwen35moe_oracle.py).
  ``pending_h`` = the last prompt row's ``h``.
- **Draft**: step 0 decodes ``tok`` at ``n_past`` with ``pending_h``; each step takes the top-1
  token and its probability ``p`` (softmax over the 10 best logits: the driver's top-k 10
  sampler, ``cur_p[0]``); stop if ``p < --mtp-p-min``; else append it; stop at ``n_max``
  tokens; else decode it at the next position with the head's own ``h_mtp``. Afterwards the
  draft KV is trimmed back to ``n_past`` (drafting wrote there).
- **Accept before catch-up**: after the verify decode and acceptance, the draft context
  processes ``[tok, d1..d_nacc]`` — the accepted prefix only, never the rejected tail — at
  ``n_past..``, rows carrying ``pending_h`` then the verify batch's ``h`` rows ``0..n_acc-1``;
  then ``pending_h`` = verify row ``n_acc``. The draft context never rolls back.

Every draft-context decode (begin, each draft step, each catch-up) is a
:class:`refsim.events.DecodeEvent` of kind ``DRAFT`` whose routes hold the head's experts at
index ``n_layer`` (``NOT_ROUTED`` elsewhere), fed to the same cache as the target's decodes, so
the flash split of the ``mtp:`` line is the cache's own accounting.

With ``--drop-cold-experts`` the head's MoE goes through the same drop seam as the trunk's
(engine-docs/mtp.md, "How it is wired": the head's experts are "streamed, cached and dropped like
any other layer's"): the loop hands the source ``cache_feed`` and each draft-context decode is
fed to the cache *as it runs*, layer ``n_layer`` through a
:class:`refsim.cache.expert_cache.LayerFeed`, so a draft's drop decision sees the residency the
earlier graphs left; its record is kept in ``applied`` for the loop (which does not apply the
event again). The trunk's verify decode gets the seam through :class:`MtpTarget`.

Load-time rejections (:func:`check_mtp_load`): ``--mtp`` on a model without
``nextn_predict_layers``, with ``--ngram``, with non-greedy sampling (both in
:class:`refsim.spec.config.SpecConfig`), and a ubatch narrower than the verify batch.
"""

from __future__ import annotations

import os

import numpy as np

from refsim.errors import ConfigError
from refsim.events import NOT_ROUTED, DecodeEvent, DecodeKind
from refsim.spec.constants import SPEC_MTP
from refsim.spec.draft import Draft
from refsim.spec.target import TargetOutput

MTP_TOP_K = 10
"""The driver's sampler keeps the 10 best candidates; ``p`` is the top one's share of them."""


def check_mtp_load(spec, config, n_ubatch: int = 0) -> None:
    """The engine's load-time rejections for ``--mtp``.

    Parameters
    ----------
    spec : refsim.model.ModelSpec
    config : refsim.spec.SpecConfig
        Already validated (``--ngram`` with ``--mtp`` and ``temp > 0`` are rejected there).
    n_ubatch : int, default 0
        ``--ubatch``; 0 = ``n_batch`` (wide enough).

    Raises
    ------
    ConfigError
        No nextn block ("use --ngram"), or ``0 < n_ubatch < draft_max + 1``.
    """
    if config.spec != SPEC_MTP:
        return
    if spec.nextn_predict_layers <= 0:
        raise ConfigError("--mtp: the model has no nextn (MTP) block (nextn_predict_layers = 0); "
                          "--ngram needs no model support")
    if 0 < n_ubatch < config.draft_max + 1:
        raise ConfigError(f"--ubatch {n_ubatch}: narrower than the verify batch (--draft {config.draft_max} + 1 = "
                          f"{config.draft_max + 1}); the verify batch must fit one graph")


def top_prob(logits: np.ndarray, top_k: int = MTP_TOP_K) -> tuple[int, float]:
    """Top-1 token and its probability among the ``top_k`` best logits.

    Parameters
    ----------
    logits : (n_vocab,) float32 ndarray

    Returns
    -------
    (int, float)
        Token id (lowest id among equal maxima) and ``p`` in (0, 1].
    """
    logits = np.asarray(logits, dtype=np.float64)
    tok = int(np.argmax(logits))
    k = min(top_k, logits.size)
    best = np.partition(logits, -k)[-k:]
    e = np.exp(best - logits[tok])
    return tok, float(1.0 / e.sum())


class MtpTarget:
    """A qwen35moe :class:`refsim.spec.forward_target.ForwardTarget` seen with the streamed span ``n_layer + 1``.

    Routes gain the head's column (``NOT_ROUTED`` in target decodes), so the target's and the
    draft context's events share one cache. Also remembers the last decode's fed tokens and
    ``h_nextn`` rows for the draft source.

    Parameters
    ----------
    model : refsim.model.Model or path
    numerics : {'exact', 'ggml'}, default 'exact'
    n_rs_seq : int, default 8
        Recurrent snapshots (the engine uses ``draft_max``).

    Raises
    ------
    ConfigError
        A model without a nextn block, or not qwen35moe.
    """

    def __init__(self, model, numerics: str = "exact", n_rs_seq: int = 8):
        from refsim.forward import qwen35moe as Q
        from refsim.model import Model, open_model
        from refsim.spec.forward_target import ForwardTarget
        m = model if isinstance(model, Model) else open_model(model)
        if m.spec.arch != "qwen35moe":
            raise ConfigError(f"--mtp: {m.path} is {m.spec.arch}; the MTP head exists only for qwen35moe")
        if m.spec.nextn_predict_layers <= 0:
            raise ConfigError(f"--mtp: {m.path} has no nextn (MTP) block (nextn_predict_layers = 0); "
                              f"--ngram needs no model support")
        self.inner = ForwardTarget(m, numerics)
        self.inner.state = Q.new_state(m.spec, n_rs_seq=n_rs_seq)
        self.model, self.spec = m, m.spec
        self.n_layer = m.spec.n_layer + 1
        self.n_expert, self.n_expert_used = m.spec.n_expert, m.spec.n_expert_used
        self.eos_ids = self.inner.eos_ids
        self.last_tokens = np.zeros(0, np.int64)
        self.last_positions = np.zeros(0, np.int64)

    @property
    def last(self):
        """The last decode's :class:`refsim.forward.qwen35moe.Qwen35DecodeResult`."""
        return self.inner.results[-1]

    @property
    def hooks(self):
        """The trunk pass's hooks (the inner target's): the drop seam of the next trunk decode, whose
        span is ``n_layer + 1``, of which the trunk feeds layers ``0..n_layer-1`` (the head's seam is
        fed by :class:`MtpDraft`)."""
        return self.inner.hooks

    def _widen(self, out: TargetOutput) -> TargetOutput:
        n_pos, _, k = out.routes.shape
        routes = np.full((n_pos, self.n_layer, k), NOT_ROUTED, np.int16)
        weights = np.full((n_pos, self.n_layer, k), np.nan, np.float32)
        routes[:, :-1], weights[:, :-1] = out.routes, out.weights
        dropped = None
        if out.dropped is not None:
            dropped = np.zeros((n_pos, self.n_layer, k), bool)
            dropped[:, :-1] = out.dropped
        return TargetOutput(logits=out.logits, routes=routes, weights=weights, dropped=dropped)

    def prefill(self, tokens):
        tokens = np.asarray(tokens, np.int64)
        self.last_tokens, self.last_positions = tokens, np.arange(tokens.size, dtype=np.int64)
        return self._widen(self.inner.prefill(tokens))

    def decode(self, tokens, positions):
        self.last_tokens = np.asarray(tokens, np.int64)
        self.last_positions = np.asarray(positions, np.int64)
        return self._widen(self.inner.decode(tokens, positions))

    def trim(self, n_keep: int) -> None:
        self.inner.trim(n_keep)


class MtpDraft:
    """The ``mtp`` draft source over an :class:`MtpTarget` (see the module docstring).

    Parameters
    ----------
    target : MtpTarget
    p_min : float, default 0.0
        ``--mtp-p-min``: stop drafting when the head's top-1 probability is below it.

    Attributes
    ----------
    n_mtp_decodes : int
        Draft-context decodes so far (begin, draft steps, catch-ups).
    """

    name = SPEC_MTP

    def __init__(self, target: MtpTarget, p_min: float = 0.0):
        from refsim.forward import qwen35moe as Q
        if not 0.0 <= p_min <= 1.0:
            raise ConfigError(f"--mtp-p-min: expected a probability in [0, 1], got {p_min}")
        self.target, self.p_min = target, float(p_min)
        spec = target.spec
        self.kv = Q.new_mtp_state(spec)
        self.pending_h = np.zeros(spec.n_embd, np.float32)
        self.began = False
        self.n_mtp_decodes = 0
        self.cache_feed = None
        """``cache_feed(kind, positions, k) -> LayerFeed`` (set by the loop when
        ``--drop-cold-experts`` is armed): each draft-context decode is fed to the cache as it
        runs, through the drop seam."""
        self.applied: dict = {}
        """Event -> its :class:`refsim.cache.EventRecord`, for events already fed to the cache
        (the loop takes them from here instead of applying the event again)."""

    def _decode(self, tokens, positions, h_prev, kind=DecodeKind.DRAFT) -> tuple:
        t = self.target
        positions = np.asarray(positions, np.int64)
        gate = (None if self.cache_feed is None
                else self.cache_feed(kind, positions, t.n_expert_used))
        res = t.inner.passes.mtp_decode(t.inner.weights, self.kv, tokens, positions, h_prev, t.inner.numerics,
                                        gate=gate)
        self.n_mtp_decodes += 1
        n_pos, k = res.routes.shape
        routes = np.full((n_pos, t.n_layer, k), NOT_ROUTED, np.int16)
        weights = np.full((n_pos, t.n_layer, k), np.nan, np.float32)
        routes[:, -1], weights[:, -1] = res.routes, res.weights
        dropped = None
        if res.dropped is not None and res.dropped.any():
            dropped = np.zeros(routes.shape, bool)
            dropped[:, -1] = res.dropped
        ev = DecodeEvent(kind=kind, positions=positions, routes=routes, weights=weights,
                         tokens=np.asarray(tokens, np.int32), dropped=dropped)
        if gate is not None:
            self.applied[ev] = gate.close(ev)
        return res, ev

    def _process(self, tokens, positions, h_rows, kind=DecodeKind.DRAFT) -> DecodeEvent:
        """Draft-context decode of target-confirmed rows (begin: ``DRAFT_PREFILL``; catch-up)."""
        h_prev = np.concatenate([self.pending_h[None, :], h_rows[:-1]], axis=0) if len(tokens) else h_rows
        _, ev = self._decode(tokens, positions, h_prev, kind)
        self.pending_h = h_rows[-1].copy()
        return ev

    def begin(self, prompt) -> tuple[DecodeEvent, ...]:
        """Process the prompt after the target's prefill (call once)."""
        self.began = True
        t = self.target
        return (self._process(t.last_tokens, t.last_positions, t.last.h_nextn, DecodeKind.DRAFT_PREFILL),)

    def draft(self, ctx: np.ndarray, last: int, n_past: int, n_max: int) -> Draft:
        events: list[DecodeEvent] = []
        if not self.began:            # a loop without the begin hook
            events += self.begin(ctx)
        toks: list[int] = []
        h = self.pending_h[None, :]
        tok, pos = int(last), int(n_past)
        while len(toks) < n_max:
            res, ev = self._decode([tok], [pos], h)
            events.append(ev)
            tok, p = top_prob(res.logits[0])
            if p < self.p_min:
                break
            toks.append(tok)
            h, pos = res.h, pos + 1
        self.kv.trim(int(n_past))     # drafting wrote from n_past on
        return Draft(np.asarray(toks, np.int32), tuple(events))

    def accept(self, n_acc: int) -> tuple[DecodeEvent, ...]:
        """Catch-up on ``[tok, d1..d_nacc]`` with the verify batch's ``h`` rows."""
        t = self.target
        n = 1 + int(n_acc)
        h_rows = t.last.h_nextn[:n]
        return (self._process(t.last_tokens[:n], t.last_positions[:n], h_rows),)

    def __repr__(self) -> str:
        return f"MtpDraft(p_min={self.p_min})"


def mtp_source_for(model: "str | os.PathLike | object", config, numerics: str = "exact",
                   n_ubatch: int = 0) -> tuple[MtpTarget, MtpDraft]:
    """Target and draft source for ``--mtp`` (the engine's load: rejections, ``n_rs_seq = draft_max``).

    Raises
    ------
    ConfigError
        Every :func:`check_mtp_load` rejection.
    """
    from refsim.model import Model, open_model
    m = model if isinstance(model, Model) else open_model(model)
    check_mtp_load(m.spec, config, n_ubatch)
    target = MtpTarget(m, numerics, n_rs_seq=config.draft_max)
    return target, MtpDraft(target, config.mtp_p_min)
