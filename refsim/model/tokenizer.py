"""The tokenizer of a GGUF's own vocabulary.

:class:`Tokenizer` is the SPM tokenizer of a ``tokenizer.ggml.model = 'llama'`` vocabulary —
Gemma-3-270M's 262144 pieces, or the small vocabulary refsim's synthetic models carry —
agreeing with llama.cpp's ids (below). ``refsim run --prompt`` uses it for every model.

What llama.cpp does with an SPM vocabulary (``llama_vocab::impl::tokenize``, SPM branch, with
``parse_special = false`` as ``Llama.tokenize(..., special=False)``), and how :class:`Tokenizer`
reproduces it:

1. **Partition.** Every USER_DEFINED token (GGUF ``token_type`` 4: Gemma 3's ``"\\n\\n"``,
   whitespace runs ``"  "``, tab runs, ``"<start_of_image>"``, ...) is cut out of the raw text
   first, longest token text first, each one at every occurrence in the still-raw fragments,
   left to right (``tokenizer_st_partition``). CONTROL and UNKNOWN tokens are *not* cut out:
   ``"<bos>"`` typed by a user is ordinary text. This step is a few lines of Python here
   (:func:`partition`).
2. **Escape.** In each raw fragment ``' '`` becomes ``'▁'`` (U+2581); a space prefix is added
   only if ``tokenizer.ggml.add_space_prefix`` is true (False for Gemma 3).
3. **Merge.** Symbols start as single UTF-8 characters; the adjacent pair whose concatenation is
   a vocabulary token with the highest score is merged (ties: leftmost), until no pair merges.
   A symbol that is not a token is emitted as its bytes' ``<0xXX>`` tokens (byte fallback).
   This is SentencePiece's BPE encoder, and refsim runs the ``sentencepiece`` library on a model
   built in memory from the GGUF pieces and scores (:func:`sentencepiece_model_bytes`):
   ``model_type = BPE``, ``byte_fallback = true``, identity normalizer, no dummy prefix, no
   whitespace splitting. Every non-BYTE piece except the unknown piece is given to
   SentencePiece as NORMAL, because llama.cpp's merge loop accepts any vocabulary text as a
   merge result (CONTROL pieces included, at their score -1000) while SentencePiece would skip
   CONTROL ones. Known remaining difference: llama.cpp could also merge into the unknown
   piece's text (``<unk>``); SentencePiece never does.
4. ``<bos>`` is prepended when ``add_bos`` (default ``tokenizer.ggml.add_bos_token``).

Why a library for step 3: the merge loop with byte fallback and its tie rule is exactly
SentencePiece's, a well-kept C++ implementation (the library Gemma's own tokenizer was made
with), so refsim only writes the protobuf (a few fields, serialised here without the protobuf
package) and the llama.cpp-specific partition around it. Agreement with llama.cpp is tested on
real sentences (tests/model/test_tokenizer_gemma3.py, goldens from llama-cpp-python).

Decoding follows llama.cpp's ``token_to_piece`` with ``special = false``: NORMAL pieces with
``'▁'`` -> ``' '``, USER_DEFINED pieces verbatim, BYTE pieces as their byte, CONTROL pieces
empty, UNKNOWN as ``'▅'`` (U+2585); the bytes are joined, then decoded as UTF-8.

Source: llama.cpp ``src/llama-vocab.cpp`` (``llm_tokenizer_spm_session``,
``tokenizer_st_partition``, ``token_to_piece``) at the version vendored by llama-cpp-python
0.3.36; SentencePiece ``src/sentencepiece_model.proto`` (field numbers) and ``src/bpe_model.cc``.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gguf import GGUFValueType, Keys

from refsim.errors import ModelFormatError
from refsim.model.gguf_io import KeyReader

_TOKENS = "tokenizer.ggml.tokens"


# --- the SPM tokenizer (real vocabularies) ------------------------------------------------------

# GGUF / llama.cpp token types (``llama_token_type``; the same numbers as SentencePiece's Type enum)
UNDEFINED, NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 0, 1, 2, 3, 4, 5, 6

SPACE_ESCAPE = "\u2581"
"""``'▁'``: SentencePiece's visible space."""

UNK_TEXT = "\u2585"
"""``'▅'``: what llama.cpp prints for the UNKNOWN token."""

_KEY_MODEL = "tokenizer.ggml.model"
_KEY_SCORES = "tokenizer.ggml.scores"
_KEY_TYPES = "tokenizer.ggml.token_type"

SPECIAL_ID_KEYS = tuple(v for k, v in vars(Keys.Tokenizer).items() if k.endswith("_ID"))
"""``tokenizer.ggml.bos_token_id``, ``eos``, ``unknown``, ``padding``, ``eot``, ``fim_*``, ...: u32 token ids."""

FLAG_KEYS = (Keys.Tokenizer.ADD_BOS, Keys.Tokenizer.ADD_EOS, Keys.Tokenizer.ADD_SEP, Keys.Tokenizer.ADD_PREFIX,
             Keys.Tokenizer.REMOVE_EXTRA_WS)
"""Tokenizer flags: bool."""

_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>\Z")


def check_vocab(metadata: Mapping[str, Any], path: str, types: Mapping | None = None) -> int | None:
    """Check the ``tokenizer.ggml.*`` keys as llama.cpp's vocabulary loader reads them.

    Run by :func:`refsim.model.open_model` (so ``inspect``, ``memory`` and ``run`` all report a
    bad vocabulary) and by :meth:`Tokenizer.from_metadata`.

    Parameters
    ----------
    metadata : mapping
        GGUF metadata.
    path : str
        File name for messages.
    types : mapping, optional
        Key -> ``(value type, element type)`` (:attr:`refsim.model.gguf_io.GGUFHeader.types`).

    Returns
    -------
    int or None
        The number of tokens, or None when the file has no ``tokenizer.ggml.tokens``.

    Raises
    ------
    ModelFormatError
        Naming the key (and the token index where one is at fault): ``tokens`` not an array of
        str, empty, with an empty or a duplicate piece; ``scores`` not f32, ``token_type`` not
        i32, either of another length than ``tokens``, a non-finite score, a token type outside
        0..6; a BYTE-typed piece that is not ``<0xXX>``; a special id that is not a u32 below the
        token count; ``model`` not a str; a flag not a bool.

    Notes
    -----
    llama.cpp ``src/llama-vocab.cpp`` ``llama_vocab::impl::load`` (ggml-org/llama.cpp at
    00ad355e): "invalid gguf type for tokenizer.ggml.tokens" unless arr[str]; scores and
    token_type are read as raw ``const float *`` / ``const int *`` arrays
    (``gguf_get_arr_data``, which refuses only strings), so only arr[f32] scores and arr[i32]
    types mean what they say (an arr[i32] of scores would be read as the floats of its bits);
    "duplicate token in vocabulary: '%s' has ids %d and %u"; special ids and flags through
    ``get_key<uint32_t>`` / ``get_key<bool>``. refsim is stricter in five places, each a file
    llama.cpp would load into another vocabulary than it says: a special id out of range is an
    error (llama.cpp warns and keeps its default), scores/types longer than the token list are
    an error (llama.cpp ignores the tail), an empty piece is an error (llama.cpp renames it
    ``[EMPTY_i]``), a NaN/inf score is an error (the merge order it sets is undefined), a token
    type outside 0..6 is an error (llama.cpp's ``switch`` maps it to UNDEFINED).
    """
    kr = KeyReader(metadata, path, types)
    if _KEY_MODEL in metadata:
        kr.string(_KEY_MODEL)
    for k in FLAG_KEYS:
        if k in metadata:
            kr.boolean(k)
    if Keys.Tokenizer.MERGES in metadata:
        kr.array(Keys.Tokenizer.MERGES, (GGUFValueType.STRING,))
    if _TOKENS not in metadata:
        for k in SPECIAL_ID_KEYS:
            if k in metadata:
                kr.u32(k)
        return None
    pieces = kr.array(_TOKENS, (GGUFValueType.STRING,))
    n = len(pieces)
    if n == 0:
        raise ModelFormatError(f"{path}: key {_TOKENS} is empty (a vocabulary needs at least one token)")
    if len(set(pieces)) != n or "" in pieces:
        seen: dict[str, int] = {}
        for i, p in enumerate(pieces):
            if not p:
                raise ModelFormatError(f"{path}: key {_TOKENS}[{i}] is an empty piece")
            j = seen.setdefault(p, i)
            if j != i:
                raise ModelFormatError(f"{path}: key {_TOKENS}: duplicate piece {p[:40]!r} at indices {j} and {i}")
    for key, etypes in ((_KEY_SCORES, (GGUFValueType.FLOAT32,)), (_KEY_TYPES, (GGUFValueType.INT32,))):
        if key in metadata:
            arr = kr.array(key, etypes)
            if len(arr) != n:
                raise ModelFormatError(f"{path}: {_TOKENS} has {n} entries but {key} has {len(arr)}; "
                                       f"expected equal lengths")
    if _KEY_SCORES in metadata:
        bad = np.flatnonzero(~np.isfinite(np.asarray(metadata[_KEY_SCORES], dtype=np.float64)))
        if bad.size:
            raise ModelFormatError(f"{path}: key {_KEY_SCORES}[{int(bad[0])}] is "
                                   f"{float(metadata[_KEY_SCORES][bad[0]])!r}, expected a finite merge score")
    if _KEY_TYPES in metadata:
        tt = np.asarray(metadata[_KEY_TYPES], dtype=np.int64)
        bad = np.flatnonzero((tt < UNDEFINED) | (tt > BYTE))
        if bad.size:
            i = int(bad[0])
            raise ModelFormatError(f"{path}: key {_KEY_TYPES}[{i}] is {int(tt[i])}, expected a llama.cpp token "
                                   f"type 0..6 (UNDEFINED, NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE; "
                                   f"llama.cpp reads any other value as UNDEFINED)")
        for i in np.flatnonzero(tt == BYTE).tolist():
            if not _BYTE_PIECE.match(pieces[i]):
                raise ModelFormatError(f"{path}: key {_KEY_TYPES}[{i}] is BYTE ({BYTE}) but the piece is "
                                       f"{pieces[i][:40]!r}, expected '<0xXX>'")
    for k in SPECIAL_ID_KEYS:
        if k in metadata:
            v = kr.u32(k)
            if v >= n:
                raise ModelFormatError(f"{path}: key {k} = {v} is not a token id: {_TOKENS} has {n} tokens "
                                       f"(0..{n - 1})")
    return n


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field_bytes(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _field_int(num: int, value: int) -> bytes:
    return _varint(num << 3) + _varint(value & 0xFFFFFFFFFFFFFFFF if value < 0 else value)


def _field_float(num: int, value: float) -> bytes:
    return _varint(num << 3 | 5) + struct.pack("<f", value)


def sentencepiece_model_bytes(pieces: list[str], scores: np.ndarray, types: np.ndarray,
                              unk_id: int, bos_id: int, eos_id: int, pad_id: int) -> bytes:
    """A serialised SentencePiece ``ModelProto`` (BPE) holding a GGUF vocabulary.

    Parameters
    ----------
    pieces : list of str, length n_vocab
        ``tokenizer.ggml.tokens``.
    scores : (n_vocab,) float32 ndarray
        ``tokenizer.ggml.scores`` (merge priority; higher merges first).
    types : (n_vocab,) int ndarray
        ``tokenizer.ggml.token_type``.
    unk_id, bos_id, eos_id, pad_id : int
        Special ids (``-1`` = none, except ``unk_id`` which SentencePiece requires).

    Returns
    -------
    bytes
        Accepted by ``sentencepiece.SentencePieceProcessor(model_proto=...)``.

    Notes
    -----
    Field numbers from SentencePiece's ``sentencepiece_model.proto``: ModelProto.pieces = 1,
    .trainer_spec = 2, .normalizer_spec = 3; SentencePiece.piece = 1, .score = 2, .type = 3;
    TrainerSpec.model_type = 3 (BPE = 2), .vocab_size = 4, .split_by_whitespace = 22,
    .byte_fallback = 35, .unk_id = 40, .bos_id = 41, .eos_id = 42, .pad_id = 43;
    NormalizerSpec.name = 1, .add_dummy_prefix = 3, .remove_extra_whitespaces = 4,
    .escape_whitespaces = 5. Every type but BYTE and the unknown piece is written as NORMAL
    (module docstring, step 3).
    """
    out = bytearray()
    for i, (p, s, t) in enumerate(zip(pieces, np.asarray(scores).tolist(), np.asarray(types).tolist())):
        sp_type = UNKNOWN if i == unk_id else BYTE if t == BYTE else NORMAL
        msg = _field_bytes(1, p.encode("utf-8")) + _field_float(2, s) + _field_int(3, sp_type)
        out += _field_bytes(1, msg)
    trainer = (_field_int(3, 2) + _field_int(4, len(pieces)) + _field_int(22, 0) + _field_int(35, 1)
               + _field_int(40, unk_id) + _field_int(41, bos_id) + _field_int(42, eos_id) + _field_int(43, pad_id))
    normalizer = _field_bytes(1, b"identity") + _field_int(3, 0) + _field_int(4, 0) + _field_int(5, 1)
    out += _field_bytes(2, trainer) + _field_bytes(3, normalizer)
    return bytes(out)


def partition(text: str, specials: list[tuple[str, int]]) -> list[str | int]:
    """Cut special-token texts out of ``text`` as llama.cpp's ``tokenizer_st_partition`` does.

    Parameters
    ----------
    text : str
    specials : list of (text, id)
        In the order to try them (llama.cpp: text length descending).

    Returns
    -------
    list of str or int
        Raw-text fragments (non-empty str) and token ids, in text order.

    Notes
    -----
    For each special in turn, every raw fragment is searched left to right and split at each
    non-overlapping occurrence; already-cut tokens are never searched again.
    """
    frags: list[str | int] = [text] if text else []
    for s, tid in specials:
        nxt: list[str | int] = []
        for f in frags:
            if isinstance(f, int) or s not in f:
                nxt.append(f)
                continue
            start = 0
            while True:
                j = f.find(s, start)
                if j < 0:
                    break
                if j > start:
                    nxt.append(f[start:j])
                nxt.append(tid)
                start = j + len(s)
            if start < len(f):
                nxt.append(f[start:])
        frags = nxt
    return frags


@dataclass(frozen=True)
class Tokenizer:
    """SPM tokenizer of one GGUF vocabulary (llama.cpp-compatible ids).

    Build with :meth:`from_metadata` (or :meth:`from_model`); building the Gemma-3 vocabulary
    (262144 pieces) takes about 3 s.

    Attributes
    ----------
    pieces : tuple of str
        Token texts, index = id (``n_vocab`` entries).
    types : (n_vocab,) int32 ndarray
        GGUF token types.
    bos_id, eos_id, unk_id : int
    add_bos : bool
        ``tokenizer.ggml.add_bos_token``: :meth:`encode` prepends ``bos_id`` by default.
    add_space_prefix : bool
        ``tokenizer.ggml.add_space_prefix``.
    """

    pieces: tuple[str, ...]
    types: np.ndarray
    bos_id: int
    eos_id: int
    unk_id: int
    add_bos: bool
    add_space_prefix: bool
    _sp: Any = field(repr=False, compare=False)
    _specials: tuple[tuple[str, int], ...] = field(repr=False, compare=False)

    @property
    def n_vocab(self) -> int:
        """Number of tokens."""
        return len(self.pieces)

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any], path: str = "<gguf>",
                      key_types: Mapping | None = None) -> "Tokenizer":
        """Build from GGUF metadata (``tokenizer.ggml.*``).

        Parameters
        ----------
        metadata : mapping
            As :attr:`refsim.model.Model.metadata`.
        path : str
            File name for messages.
        key_types : mapping, optional
            Key -> ``(value type, element type)`` (inferred from the values when absent).

        Raises
        ------
        ModelFormatError
            Anything :func:`check_vocab` refuses; ``tokenizer.ggml.model`` is not ``'llama'``
            (SPM); tokens missing; no ``<0xXX>`` byte token for some byte; a vocabulary
            SentencePiece refuses (its message, naming the file).
        """
        check_vocab(metadata, path, key_types)
        kind = metadata.get(_KEY_MODEL)
        if kind != "llama":
            raise ModelFormatError(f"{path}: {_KEY_MODEL} is {kind!r}; refsim's tokenizer reads SPM "
                                   f"vocabularies ('llama') only")
        pieces = metadata.get(_TOKENS)
        if not pieces:
            raise ModelFormatError(f"{path}: missing {_TOKENS}")
        n = len(pieces)
        scores = np.asarray(metadata.get(_KEY_SCORES, np.zeros(n)), dtype=np.float32).reshape(-1)
        types = np.asarray(metadata.get(_KEY_TYPES, np.full(n, NORMAL)), dtype=np.int32).reshape(-1)
        if scores.size != n or types.size != n:
            raise ModelFormatError(f"{path}: {_TOKENS} has {n} entries but {_KEY_SCORES} has "
                                   f"{scores.size} and {_KEY_TYPES} {types.size}; expected equal lengths")

        def ident(key: str, default: int) -> int:
            v = int(np.asarray(metadata.get(f"tokenizer.ggml.{key}", default)).reshape(-1)[0])
            if not -1 <= v < n:
                raise ModelFormatError(f"{path}: tokenizer.ggml.{key} = {v} outside 0..{n - 1}")
            return v

        def flag(key: str, default: bool) -> bool:
            return bool(np.asarray(metadata.get(f"tokenizer.ggml.{key}", default)).reshape(-1)[0])

        unk_id, bos_id, eos_id = ident("unknown_token_id", 0), ident("bos_token_id", 1), ident("eos_token_id", 2)
        pad_id = ident("padding_token_id", -1)
        index = {p: i for i, p in enumerate(pieces)}
        for b in range(256):
            tid = index.get(f"<0x{b:02X}>")
            if tid is None or types[tid] != BYTE:
                raise ModelFormatError(f"{path}: no byte token <0x{b:02X}> (type {BYTE}) for byte fallback")
        import sentencepiece as spm  # imported here: only a tokenizer build needs it
        proto = sentencepiece_model_bytes(list(pieces), scores, types, unk_id, bos_id, eos_id, pad_id)
        try:
            sp = spm.SentencePieceProcessor(model_proto=proto)
        except RuntimeError as exc:   # a vocabulary check above missed: still one line naming the file
            msg = " ".join(str(exc).split())
            raise ModelFormatError(f"{path}: SentencePiece refuses the vocabulary: {msg}") from None
        specials = sorted(((pieces[i], int(i)) for i in np.flatnonzero(types == USER_DEFINED)),
                          key=lambda st: -len(st[0].encode("utf-8")))
        return cls(tuple(pieces), types, bos_id, eos_id, unk_id, flag("add_bos_token", True),
                   flag("add_space_prefix", False), sp, tuple(specials))

    @classmethod
    def from_model(cls, model) -> "Tokenizer":
        """Build from an opened :class:`refsim.model.Model`."""
        return cls.from_metadata(model.metadata, model.path, model.header.types)

    def encode(self, text: str, add_bos: bool | None = None) -> np.ndarray:
        """Text -> token ids, as llama.cpp's ``llama_tokenize(..., parse_special=false)``.

        Parameters
        ----------
        text : str
        add_bos : bool, optional
            Prepend ``bos_id``; default :attr:`add_bos`.

        Returns
        -------
        (n_tokens,) int32 ndarray
        """
        ids: list[int] = [self.bos_id] if (self.add_bos if add_bos is None else add_bos) else []
        first = True
        for frag in partition(text, list(self._specials)):
            if isinstance(frag, int):
                ids.append(frag)
            else:
                if self.add_space_prefix and first:
                    frag = " " + frag
                ids.extend(self._sp.encode(frag.replace(" ", SPACE_ESCAPE)))
            first = False
        return np.asarray(ids, dtype=np.int32)

    def piece_bytes(self, token_id: int) -> bytes:
        """The bytes one token prints (llama.cpp ``token_to_piece``, ``special=false``).

        Raises
        ------
        ModelFormatError
            ``token_id`` outside ``0..n_vocab-1``.
        """
        if not 0 <= token_id < self.n_vocab:
            raise ModelFormatError(f"token id {token_id} outside 0..{self.n_vocab - 1}")
        t = int(self.types[token_id])
        p = self.pieces[token_id]
        if t == BYTE:
            return bytes([int(p[3:5], 16)])
        if t == USER_DEFINED:
            return p.encode("utf-8")
        if t == NORMAL or t == UNUSED:
            return p.replace(SPACE_ESCAPE, " ").encode("utf-8")
        if t == UNKNOWN:
            return UNK_TEXT.encode("utf-8")
        return b""

    def decode_bytes(self, ids) -> bytes:
        """Token ids -> the concatenated bytes llama.cpp's ``detokenize`` gives."""
        return b"".join(self.piece_bytes(int(t)) for t in np.asarray(ids).reshape(-1))

    def decode(self, ids) -> str:
        """Token ids -> text (UTF-8; invalid sequences replaced by U+FFFD, ``errors='replace'``)."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")
