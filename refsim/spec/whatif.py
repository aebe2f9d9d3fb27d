"""Offline n-gram what-if: acceptance, coverage and tokens per decode over a (draft, min-match)
grid from one greedy token stream.

Why it is exact: with greedy decoding and a batch-invariant target, the target's argmax after
position ``p`` is the greedy stream's token ``p + 1`` whatever was drafted, so every verify
decode's outcome is decided by the stream alone (bmoe-engine.md §2 steps 2-9 with the target
replaced by the stream). For each cell the loop is replayed with the engine's matcher:

- ``tok`` = stream[P + n_gen]; corpus = stream[: P + n_gen + 1];
- ``room = n_predict - n_gen - 1``; draft = matcher(corpus, min(draft, room), min_match, 12);
- ``n_acc`` = longest draft prefix equal to stream[P + n_gen + 1 ...];
- ``decodes += 1``, ``n_gen += 1 + n_acc``; ``n_predict`` = the stream's generated length.

The stream carries no end-of-generation token (it ends where generation ended), so the count
of tokens per cell is the same for every cell: ``tokens = decodes + accepted``. Flash bytes are
not predicted here (they depend on routes; use a live run or a trace).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from refsim.errors import ConfigError
from refsim.fmt import pct, ratio
from refsim.spec.constants import NGRAM_MAX_MATCH
from refsim.spec.ngram_numba import ngram_draft_numba


@dataclass(frozen=True)
class WhatIfCell:
    """One (draft, min_match) cell of the grid (definitions as in docs/telemetry.md)."""

    draft: int
    min_match: int
    tokens: int
    decodes: int
    drafted: int
    accepted: int
    drafted_steps: int

    @property
    def acceptance_pct(self) -> float | None:
        """100 × accepted / drafted; None for a cell that never drafted."""
        return pct(self.accepted, self.drafted)

    @property
    def coverage_pct(self) -> float | None:
        """100 × drafted_steps / decodes; None with no decode."""
        return pct(self.drafted_steps, self.decodes)

    @property
    def tokens_per_decode(self) -> float | None:
        """tokens / decodes; None with no decode."""
        return ratio(self.tokens, self.decodes)


def whatif_cell(stream, prompt_len: int, draft: int, min_match: int,
                max_match: int = NGRAM_MAX_MATCH) -> WhatIfCell:
    """Replay the loop for one cell.

    Parameters
    ----------
    stream : (P + n_gen,) int array-like
        Prompt tokens followed by the greedy generated tokens.
    prompt_len : int
        ``P``, 1 <= P < len(stream).
    draft, min_match, max_match : int
        ``--draft``, ``--ngram-min-match``, ``ngram_max_match``.

    Returns
    -------
    WhatIfCell
    """
    s = np.ascontiguousarray(stream, dtype=np.int64)
    n_predict = s.size - prompt_len
    n_gen = decodes = drafted = accepted = drafted_steps = 0
    while n_gen < n_predict:
        base = prompt_len + n_gen            # index of tok in the stream
        room = n_predict - n_gen - 1
        d = ngram_draft_numba(s[: base + 1], min(draft, room), min_match, max_match) \
            if room > 0 else np.zeros(0, dtype=np.int32)
        n = d.size
        truth = s[base + 1: base + 1 + n]
        n_acc = 0
        while n_acc < n and d[n_acc] == truth[n_acc]:
            n_acc += 1
        decodes += 1
        drafted += n
        accepted += n_acc
        drafted_steps += int(n > 0)
        n_gen += 1 + n_acc
    return WhatIfCell(draft=draft, min_match=min_match, tokens=n_gen, decodes=decodes,
                      drafted=drafted, accepted=accepted, drafted_steps=drafted_steps)


def ngram_whatif(stream, prompt_len: int, drafts: Iterable[int], min_matches: Iterable[int],
                 max_match: int = NGRAM_MAX_MATCH) -> list[WhatIfCell]:
    """The whole grid, draft-major.

    Raises
    ------
    ConfigError
        ``--prompt-len`` outside ``1..len(stream)-1``, a draft outside 1..8 or a min-match
        outside ``1..max_match`` (the engine's ranges).
    """
    s = np.asarray(stream, dtype=np.int64).reshape(-1)
    if not 1 <= prompt_len < s.size:
        raise ConfigError(f"--prompt-len: expected 1..{s.size - 1} (the stream has {s.size} "
                          f"tokens), got {prompt_len}")
    drafts, min_matches = list(drafts), list(min_matches)
    for d in drafts:
        if not 1 <= d <= 8:
            raise ConfigError(f"--draft: expected values in 1..8, got {d}")
    for m in min_matches:
        if not 1 <= m <= max_match:
            raise ConfigError(f"--min-match: expected values in 1..{max_match}, got {m}")
    return [whatif_cell(s, prompt_len, d, m, max_match) for d in drafts for m in min_matches]


TOKEN_ID_MAX = 2**31 - 1
"""Largest token id: llama.cpp's ``llama_token`` is ``int32_t`` (include/llama.h)."""


def read_token_file(path, flag: str = "--tokens") -> np.ndarray:
    """Token ids from a text file: integers separated by commas and/or whitespace.

    Parameters
    ----------
    path : str or path-like
        UTF-8 (or ASCII) text file.
    flag : str, default ``"--tokens"``
        The flag named in error messages.

    Returns
    -------
    (n,) int64 ndarray
        Every id in ``0..TOKEN_ID_MAX`` (2**31 - 1, the int32 ``llama_token``).

    Raises
    ------
    ConfigError
        Naming ``flag`` and the file: missing or unreadable file, a folder, text that is not
        UTF-8, a field that is not an ASCII integer in ``0..2**31-1`` (names the line), no ids.
    """
    path = os.fspath(path)
    expected = "expected a text file of token ids separated by commas or whitespace"
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise ConfigError(f"{flag} {path}: no such file; {expected}") from None
    except IsADirectoryError:
        raise ConfigError(f"{flag} {path}: is a folder; {expected}") from None
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot read ({exc.strerror}); {expected}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{flag} {path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                          f"{exc.start}); {expected}") from None
    out: list[int] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for field in line.replace(",", " ").split():
            # isascii: str.isdigit also accepts '²' and other digits int() refuses or reads
            if not (field.isascii() and field.isdigit()) or int(field) > TOKEN_ID_MAX:
                raise ConfigError(f"{flag} {path}:{lineno}: {field!r} is not a token id (expected "
                                  f"an integer 0..{TOKEN_ID_MAX})")
            out.append(int(field))
    if not out:
        raise ConfigError(f"{flag} {path}: no token ids found; {expected}")
    return np.asarray(out, dtype=np.int64)
