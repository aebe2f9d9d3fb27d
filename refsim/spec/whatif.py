"""Offline n-gram what-if: acceptance, coverage and tokens per decode over a (draft, min-match)
grid from one greedy token stream.

Why it is exact: with greedy decoding and a batch-invariant target, the target's argmax after
position ``p`` is the greedy stream's token ``p + 1`` whatever was drafted, so every verify
decode's outcome is decided by the stream alone (bmoe-engine.md §2 steps 2-9 with the target
replaced by the stream). For each cell the loop is replayed with the engine's matcher and the
live loop's stop rule (:class:`refsim.spec.loop.SpeculativeLoop`):

- ``tok`` = stream[P + n_gen]; if ``tok`` is the end-of-generation token, stop;
- corpus = stream[: P + n_gen + 1];
- ``room = n_predict - n_gen - 1``; draft = matcher(corpus, min(draft, room), min_match, 12);
- ``n_acc`` = longest draft prefix equal to stream[P + n_gen + 1 ...]; an accepted EOG counts
  in ``n_acc``, is not emitted and ends the generation;
- ``decodes += 1``, ``n_gen += 1 + n_acc``.

Two ways a live run ends, so two ways to replay it. Stopped at ``-n``: ``n_predict`` is the
stream's generated length. Stopped at an end-of-generation token ``eog`` before ``-n``: the
stream is followed by ``eog`` (the target's prediction after the last emitted token, never
emitted), and ``n_predict`` is the run's ``-n``, which bounds ``room`` near the end (the live
loop drafts there while a replay that took the stream's length would not; ``refsim run --json``
prints ``stop``, ``n_predict`` and ``eog_token``). Either way every cell emits the stream's
generated tokens, so ``tokens`` is the same in every cell. Flash bytes are not predicted here
(they depend on routes; use a live run or a trace).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from refsim.errors import ConfigError, UsageError, value_message
from refsim.fmt import pct, ratio
from refsim.spec.constants import DRAFT_MAX_LIMIT, NGRAM_MAX_MATCH, TOKEN_ID_MAX
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
                max_match: int = NGRAM_MAX_MATCH, n_predict: int | None = None,
                eog: int | None = None) -> WhatIfCell:
    """Replay the loop for one cell.

    Parameters
    ----------
    stream : (P + n_gen,) int array-like
        Prompt tokens followed by the greedy generated tokens (an end token not included).
    prompt_len : int
        ``P``, 1 <= P < len(stream).
    draft, min_match, max_match : int
        ``--draft``, ``--ngram-min-match``, ``ngram_max_match``.
    n_predict : int, optional
        The run's ``-n``; default ``n_gen`` (the run stopped at ``-n``).
    eog : int, optional
        The end-of-generation token that stopped the run (needed when ``n_predict > n_gen``);
        its id is also the stop rule for drafted tokens.

    Returns
    -------
    WhatIfCell

    Raises
    ------
    ConfigError
        From :func:`check_stop` (the stream, ``n_predict`` and ``eog`` cannot be one run).
    """
    s = np.ascontiguousarray(stream, dtype=np.int64)
    n_predict = check_stop(s, prompt_len, n_predict, eog)
    ext = s if eog is None else np.append(s, np.int64(eog))   # the target's prediction at the end
    n_gen = decodes = drafted = accepted = drafted_steps = 0
    while n_gen < n_predict:
        base = prompt_len + n_gen            # index of tok in the stream
        if ext[base] == eog:
            break                            # tok is end-of-generation: never decoded
        room = n_predict - n_gen - 1
        d = ngram_draft_numba(ext[: base + 1], min(draft, room), min_match, max_match) \
            if room > 0 else np.zeros(0, dtype=np.int32)
        n = d.size
        truth = ext[base + 1: base + 1 + n]
        n_acc, ended = 0, False
        while n_acc < min(n, truth.size) and d[n_acc] == truth[n_acc]:
            n_acc += 1
            if d[n_acc - 1] == eog:
                ended = True                 # an accepted EOG: counted, not emitted, the end
                break
        decodes += 1
        drafted += n
        accepted += n_acc
        drafted_steps += int(n > 0)
        n_gen += n_acc if ended else 1 + n_acc
        if ended:
            break
    return WhatIfCell(draft=draft, min_match=min_match, tokens=n_gen, decodes=decodes,
                      drafted=drafted, accepted=accepted, drafted_steps=drafted_steps)


def check_stop(stream: np.ndarray, prompt_len: int, n_predict: int | None,
               eog: int | None) -> int:
    """The ``n_predict`` a replay of ``stream`` runs to, after checking that the stream, ``-n``
    and the end token describe one live run (:class:`refsim.spec.loop.SpeculativeLoop` stops at
    ``n_predict`` emitted tokens or before, at an end-of-generation token, never emitted).

    Raises
    ------
    ConfigError
        ``--prompt-len`` outside ``1..len(stream)-1``; more generated tokens than ``-n``; fewer
        without an end token (``--eog``); the end token inside the generated part (the run
        would have stopped there).
    """
    n_gen = stream.size - prompt_len
    if not 1 <= prompt_len < stream.size:
        raise ConfigError(f"--prompt-len: expected 1..{stream.size - 1} (the stream has "
                          f"{stream.size} tokens), got {prompt_len}")
    n_predict = n_gen if n_predict is None else int(n_predict)
    if n_predict < n_gen:
        raise ConfigError(f"-n {n_predict}: the stream has {n_gen} generated tokens, more than "
                          f"-n (expected the run's -n, at least {n_gen})")
    if n_predict > n_gen and eog is None:
        raise ConfigError(f"-n {n_predict}: the stream has {n_gen} generated tokens, fewer than "
                          f"-n; a run stops early only at an end-of-generation token: give --eog "
                          f"ID (refsim run --json prints eog_token) or --model")
    if eog is not None:
        hits = np.flatnonzero(stream[prompt_len:] == eog)
        if hits.size:
            raise ConfigError(f"--eog {eog}: generated token {int(hits[0])} (stream index "
                              f"{prompt_len + int(hits[0])}) is that end-of-generation token; the "
                              f"live loop stops there and never emits it")
    return n_predict


def ngram_whatif(stream, prompt_len: int, drafts: Iterable[int], min_matches: Iterable[int],
                 max_match: int = NGRAM_MAX_MATCH, n_predict: int | None = None,
                 eog: int | None = None) -> list[WhatIfCell]:
    """The whole grid, draft-major (``n_predict`` and ``eog`` as in :func:`whatif_cell`).

    Raises
    ------
    ConfigError
        From :func:`check_stop`; a draft outside 1..8 or a min-match outside ``1..max_match``
        (the engine's ranges; a :class:`refsim.errors.UsageError`).
    """
    s = np.asarray(stream, dtype=np.int64).reshape(-1)
    check_stop(s, prompt_len, n_predict, eog)
    drafts, min_matches = list(drafts), list(min_matches)
    for d in drafts:
        if not 1 <= d <= DRAFT_MAX_LIMIT:
            raise UsageError(value_message("--draft", f"values in 1..{DRAFT_MAX_LIMIT}", d))
    for m in min_matches:
        if not 1 <= m <= max_match:
            raise UsageError(value_message("--min-match", f"values in 1..{max_match}", m))
    return [whatif_cell(s, prompt_len, d, m, max_match, n_predict, eog)
            for d in drafts for m in min_matches]


TOKEN_FILE_CHUNK = 1 << 20
"""Bytes read at a time by :func:`read_token_file`; each chunk is checked before the next is read,
so a binary file (or ``/dev/zero``) is refused from its first bytes."""

_TOKEN_FIELD_MAX = 64
"""Bytes around a bad byte searched for its field, for the error message."""

_QUOTE = 40
"""Digits of a too-long field quoted in its error message (then ``...``); a field still growing
past them at a chunk's end is refused without reading the rest."""

_NOT_TOKEN_BYTE = re.compile(rb"[^0-9,\s]")
_TOKEN_SEP = re.compile(rb"[,\s]")
_DIGITS = re.compile(rb"[0-9]+")
_NL = b"\n"


def _after_last_separator(buf: bytes) -> int:
    """Index just past the last comma or ASCII whitespace byte of ``buf`` (0 if none)."""
    return max(buf.rfind(bytes([c])) for c in b", \t\n\r\v\f") + 1


def read_token_file(path, flag: str = "--tokens") -> np.ndarray:
    """Token ids from a text file: ASCII integers separated by commas and/or ASCII whitespace.

    The file is read in chunks of :data:`TOKEN_FILE_CHUNK` bytes and each is checked before the
    next is read, so a binary file (or ``/dev/zero``) is refused from its first bytes; a field has
    at most 10 digits (2**31 - 1 has 10), so a long one is refused without reading it whole.
    Lines are counted by ``\n``.

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
        Naming ``flag`` and the file: missing or unreadable file, a folder, a NUL byte or text that
        is not UTF-8 (names the line and the byte offset), a field that is not an ASCII integer
        in ``0..2**31-1`` (names the line; non-ASCII digits and separators are refused), no ids.
    """
    path = os.fspath(path)
    expected = "expected a text file of token ids separated by commas or whitespace"
    out: list[int] = []
    offset = 0           # file offset of buf[0]
    line = 1             # line of buf[0]
    buf = b""

    def field_error(pos: int) -> ConfigError:
        """The error for the bad byte at ``buf[pos]``: NUL, not UTF-8, or a bad field."""
        where = f"{flag} {path}:{line + buf.count(_NL, 0, pos)}"
        if buf[pos] == 0:
            return ConfigError(f"{where}: NUL byte at byte offset {offset + pos}; {expected} "
                               f"(a binary file?)")
        a = max((m.end() for m in _TOKEN_SEP.finditer(buf, max(0, pos - _TOKEN_FIELD_MAX), pos)),
                default=max(0, pos - _TOKEN_FIELD_MAX))
        m = _TOKEN_SEP.search(buf, pos)
        b = min(m.start() if m else len(buf), a + _TOKEN_FIELD_MAX)
        seg = buf[a:b]
        try:
            text = seg.decode("utf-8")
        except UnicodeDecodeError as exc:
            if not (exc.reason == "unexpected end of data" and exc.end == len(seg)):
                bad = a + exc.start
                return ConfigError(f"{where}: not UTF-8 text (byte 0x{buf[bad]:02x} at offset "
                                   f"{offset + bad}); {expected}")
            text = seg[:exc.start].decode("utf-8") + "..."   # a character cut by the chunk
        return ConfigError(f"{where}: {text!r} is not a token id (expected an integer "
                           f"0..{TOKEN_ID_MAX})")

    def not_an_id(pos: int, digits: bytes) -> ConfigError:
        text = digits[:_QUOTE].decode() + ("..." if len(digits) > _QUOTE else "")
        return ConfigError(f"{flag} {path}:{line + buf.count(_NL, 0, pos)}: {text!r} is not a "
                           f"token id (expected an integer 0..{TOKEN_ID_MAX})")

    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise ConfigError(f"{flag} {path}: no such file; {expected}") from None
    except IsADirectoryError:
        raise ConfigError(f"{flag} {path}: is a folder; {expected}") from None
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot read ({exc.strerror}); {expected}") from None
    with fh:
        while True:
            try:
                chunk = fh.read(TOKEN_FILE_CHUNK)
            except OSError as exc:
                raise ConfigError(f"{flag} {path}: cannot read ({exc.strerror}); {expected}") \
                    from None
            buf += chunk
            # complete fields end at the last separator; the rest waits for the next chunk
            cut = _after_last_separator(buf) if chunk else len(buf)
            bad = _NOT_TOKEN_BYTE.search(buf)
            for m in _DIGITS.finditer(buf, 0, cut if bad is None else min(cut, bad.start())):
                if m.end() - m.start() > 10 or int(m.group()) > TOKEN_ID_MAX:
                    raise not_an_id(m.start(), m.group())
                out.append(int(m.group()))
            if bad is not None:                  # after the fields before it: the first error
                raise field_error(bad.start())
            if len(buf) - cut > _QUOTE:          # a digit run far too long for an id
                raise not_an_id(cut, buf[cut:])
            line += buf.count(b"\n", 0, cut)
            offset += cut
            buf = buf[cut:]
            if not chunk:
                break
    if not out:
        raise ConfigError(f"{flag} {path}: no token ids found; {expected}")
    return np.asarray(out, dtype=np.int64)
