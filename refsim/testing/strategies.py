"""Hypothesis strategies for speculation tests (``@st.composite`` nouns; reuse them).

- :func:`token_streams` — token id lists over a small vocabulary (small vocabularies make
  repeats, so the matcher has work).
- :func:`corpora` — token streams with planted repeats: a segment copied later, with the
  corpus often ending inside a copy, so there is a match to find.
- :func:`ngram_params` — ``(n_draft, min_match, max_match)`` in and around the engine's ranges
  (including the degenerate ones the engine guards: ``n_draft = 0``, ``max < min``).
- :func:`markov_scripts`, :func:`scripted_targets` — batch-invariant scripted targets, with
  or without routes and end-of-generation ids.
- :func:`prompts` — prompt token lists.
- :func:`quantized_weight_rows` — random rows of a quantized ggml type with finite block scales
  (and some all-zero rows), for kernel tests.

Shrinking: lists are built element by element (deleting a run of elements stays valid), and
the simplest option is drawn first (hypothesis advice, how-to/strategies-that-shrink.rst).
"""

from __future__ import annotations

from hypothesis import strategies as st

from refsim.spec.constants import DRAFT_MAX_LIMIT, NGRAM_MAX_MATCH
from refsim.testing.targets import MarkovScript, ScriptedRouter, ScriptedTarget


@st.composite
def token_streams(draw, n_vocab: int = 6, min_size: int = 0, max_size: int = 40) -> list[int]:
    """A list of token ids in ``0..n_vocab-1``."""
    return draw(st.lists(st.integers(0, n_vocab - 1), min_size=min_size, max_size=max_size))


@st.composite
def corpora(draw, n_vocab: int = 8, max_size: int = 60) -> list[int]:
    """A non-empty corpus with planted repeats.

    Built as: a random stream, then zero or more planted copies of an earlier segment (each
    possibly followed by noise), and, half the time, the corpus is cut inside the last copy so
    the suffix is a repeat.
    """
    base = draw(token_streams(n_vocab=n_vocab, min_size=1, max_size=max_size // 2))
    out = list(base)
    while draw(st.booleans()) and len(out) < max_size:
        a = draw(st.integers(0, len(out) - 1))
        b = draw(st.integers(a + 1, min(len(out), a + 14)))
        out.extend(out[a:b])
        out.extend(draw(token_streams(n_vocab=n_vocab, max_size=3)))
    if draw(st.booleans()) and len(out) > 1:
        out = out[: draw(st.integers(1, len(out)))]
    return out[:max_size] or [0]


@st.composite
def ngram_params(draw) -> tuple[int, int, int]:
    """``(n_draft, min_match, max_match)``: n_draft 0..8, min_match 0..6, max_match 1..12.

    Degenerate values (n_draft 0, min_match 0 raised to 1, max_match < min_match) are included.
    """
    n_draft = draw(st.integers(0, DRAFT_MAX_LIMIT))
    min_match = draw(st.integers(0, 6))
    max_match = draw(st.integers(1, NGRAM_MAX_MATCH))
    return n_draft, min_match, max_match


@st.composite
def prompts(draw, n_vocab: int = 8, min_size: int = 1, max_size: int = 24) -> list[int]:
    """A prompt: a non-empty list of token ids (avoiding id 0, the scripted EOG)."""
    return draw(st.lists(st.integers(1, n_vocab - 1), min_size=min_size, max_size=max_size))


@st.composite
def markov_scripts(draw, n_vocab: int = 8) -> MarkovScript:
    """A deterministic order-1..3 Markov script over ``0..n_vocab-1`` (id 0 may be EOG)."""
    order = draw(st.integers(1, 3))
    table = draw(st.lists(st.integers(0, n_vocab - 1), min_size=1, max_size=32))
    return MarkovScript(tuple(table), order)


@st.composite
def scripted_targets(draw, n_vocab: int = 8, routed: bool | None = None,
                     eos: bool | None = None) -> ScriptedTarget:
    """A fresh batch-invariant :class:`ScriptedTarget` (call ``.fresh()`` for another run).

    Parameters
    ----------
    routed : bool, optional
        With a :class:`ScriptedRouter` (2-4 layers, 4-16 experts, k 1-3); drawn when None.
    eos : bool, optional
        Token 0 is end-of-generation; drawn when None.
    """
    script = draw(markov_scripts(n_vocab=n_vocab))
    if routed is None:
        routed = draw(st.booleans())
    router = None
    if routed:
        n_expert = draw(st.integers(4, 16))
        router = ScriptedRouter(n_layer=draw(st.integers(2, 4)), n_expert=n_expert,
                                k=draw(st.integers(1, 3)), seed=draw(st.integers(0, 3)))
    if eos is None:
        eos = draw(st.booleans())
    logits = draw(st.booleans())
    return ScriptedTarget(script, router, eos_ids=(0,) if eos else (),
                          n_vocab=n_vocab if logits else None)


@st.composite
def decode_splits(draw, n_vocab: int = 300, max_width: int = 9) -> tuple[list[int], list[int]]:
    """Tokens to decode (1..``max_width``) and a split of them into consecutive decode calls.

    Returns ``(tokens, sizes)`` with ``sum(sizes) == len(tokens)``; the simplest split (one call)
    comes first when shrinking. Used by the forward pass's batch-invariance property.
    """
    tokens = draw(st.lists(st.integers(0, n_vocab - 1), min_size=1, max_size=max_width))
    sizes: list[int] = []
    left = len(tokens)
    while left:
        size = draw(st.integers(1, left).map(lambda s, left=left: left - s + 1))
        sizes.append(size)
        left -= size
    return tokens, sizes


QUANT_SCALE_FIELDS = {2: (18, (0,)), 6: (22, (0,)), 8: (34, (0,)), 12: (144, (0, 2)), 13: (176, (0, 2)),
                      14: (210, (208,)), 39: (17, ()),
                      3: (20, (0, 2)), 7: (24, (0, 2)), 10: (84, (80, 82)), 11: (110, (108,)), 20: (18, (0,)),
                      23: (136, (0,)), 34: (54, (52,)), 35: (66, (64,)),
                      16: (66, (0,)), 17: (74, (0,)), 18: (98, (0,)), 21: (110, (0,)), 22: (82, (0,)), 19: (50, (0,)),
                      29: (56, ())}
"""ggml type id -> (block bytes, byte offsets of the block's f16 scales) for :func:`quantized_weight_rows`
(MXFP4: an E8M0 byte; IQ1_M: its f16 ``d`` is spread over four nibbles, see refsim.kernels.iq_grid)."""


@st.composite
def quantized_weight_rows(draw, qtype: int, max_rows: int = 5, max_blocks: int = 3):
    """``(raw, n_cols)``: ``(n_rows, row_bytes)`` uint8 rows of ggml type ``qtype`` (a key of
    :data:`QUANT_SCALE_FIELDS`) with random quants, f16 scales in ``±[2^-12, 4)`` (MXFP4: exponents
    118..137), so products stay finite; some rows all-zero. ``n_cols`` is 1..max_blocks blocks
    (32 elements, 256 for K-quants)."""
    import numpy as np

    from refsim.kernels import KERNELS
    k = next(v for t, v in KERNELS.items() if int(t) == qtype)
    size, scales = QUANT_SCALE_FIELDS[qtype]
    n_blocks = draw(st.integers(1, max_blocks))
    n_rows = draw(st.integers(1, max_rows))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    raw = rng.integers(0, 256, (n_rows, n_blocks * size), dtype=np.uint8)
    blocks = raw.reshape(n_rows, n_blocks, size)
    for o in scales:
        h = (rng.uniform(1, 2, (n_rows, n_blocks)) * 2.0 ** rng.integers(-12, 2, (n_rows, n_blocks))
             * rng.choice([-1, 1], (n_rows, n_blocks))).astype(np.float16)
        blocks[:, :, o:o + 2] = h.view(np.uint8).reshape(n_rows, n_blocks, 2)
    if qtype == 39:
        blocks[:, :, 0] = rng.integers(118, 138, (n_rows, n_blocks))
    raw[draw(st.lists(st.integers(0, n_rows - 1), max_size=1))] = 0
    return raw, n_blocks * k.block_size
