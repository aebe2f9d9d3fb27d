"""A minimal tokenizer from a GGUF's vocabulary: byte-level encoding through ``<0xNN>`` tokens.

The synthetic models carry a SentencePiece-style ('llama') vocabulary whose entries 3..258 are
the 256 byte tokens ``<0xNN>`` (:func:`refsim.model.synth._spm_vocab`). :func:`encode` maps each
UTF-8 byte of the text to its byte token (SentencePiece's byte fallback applied to every byte)
and prepends BOS when the file asks for it; :func:`detokenize` inverts that and renders pieces
(``\\u2581`` = space). This is deliberately small: a real SPM/BPE tokenizer (gemma3) replaces
these two functions without touching their callers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from refsim.errors import ConfigError

_TOKENS = "tokenizer.ggml.tokens"


def _byte_ids(tokens: Sequence[str]) -> dict[int, int]:
    out = {}
    for i, t in enumerate(tokens):
        if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            try:
                out[int(t[3:5], 16)] = i
            except ValueError:
                continue
    return out


def encode(metadata: Mapping[str, Any], text: str, path: str = "<gguf>") -> list[int]:
    """Token ids of ``text``: BOS (if ``tokenizer.ggml.add_bos_token`` is not false and a BOS id
    exists), then one ``<0xNN>`` token per UTF-8 byte.

    Parameters
    ----------
    metadata : mapping
        GGUF metadata (``Model.metadata``).
    text : str
    path : str
        File name for messages.

    Returns
    -------
    list of int

    Raises
    ------
    ConfigError
        The file has no vocabulary, or its vocabulary lacks a byte token that ``text`` needs.
    """
    tokens = metadata.get(_TOKENS)
    if not tokens:
        raise ConfigError(f"--prompt needs a vocabulary ({_TOKENS}) and {path} has none; use --prompt-tokens")
    table = _byte_ids(tokens)
    ids: list[int] = []
    bos = metadata.get("tokenizer.ggml.bos_token_id")
    if bos is not None and metadata.get("tokenizer.ggml.add_bos_token", True):
        ids.append(int(bos))
    for b in text.encode("utf-8"):
        if b not in table:
            raise ConfigError(f"--prompt: {path} has no byte token <0x{b:02X}> (needed by the text)")
        ids.append(table[b])
    return ids


def detokenize(metadata: Mapping[str, Any], ids: Sequence[int]) -> str:
    """Text of token ids: byte tokens become bytes (decoded as UTF-8, errors replaced), pieces
    have ``\\u2581`` turned into a space, control tokens (``<s>``, ``</s>``, ``<unk>``) vanish.
    Without a vocabulary, ids are shown as ``[id]``."""
    tokens = metadata.get(_TOKENS)
    if not tokens:
        return "".join(f"[{i}]" for i in ids)
    out = bytearray()
    for i in ids:
        t = tokens[i] if 0 <= i < len(tokens) else ""
        if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            out.append(int(t[3:5], 16))
        elif t in ("<s>", "</s>", "<unk>"):
            continue
        else:
            out += t.replace("\u2581", " ").encode("utf-8")
    return out.decode("utf-8", errors="replace")
