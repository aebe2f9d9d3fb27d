"""Greedy acceptance of a draft against the target's own argmax (a pure function).

Rules (bmoe-engine.md §2 step 5 and step 9; llama-cpp-notes.md §5.1,
``common_sampler_sample_and_accept_n`` with greedy sampling):

- The verify decode fed ``[tok, d1..dn]`` at positions ``n_past .. n_past + n``; logits row
  ``i`` is the target's prediction *after* the token at position ``n_past + i``, so row ``i``
  is compared with draft token ``d(i+1)`` (0-based: ``target_ids[i]`` vs ``draft[i]``).
- Accept while they are equal; stop at the first mismatch.
- An accepted draft token that is end-of-generation (EOG) still counts in ``n_acc`` (and stays
  in the KV) but is not emitted, and the generation ends there: nothing after it counts.
- Otherwise the next token (the bonus) is ``target_ids[n_acc]``: the target's own prediction
  after the accepted prefix; when every draft was accepted that is the last row, ``n``.
- The fed token ``tok`` itself is confirmed unconditionally (it was the previous step's
  prediction); it is not part of this function's input.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AcceptResult:
    """Outcome of one greedy acceptance.

    Attributes
    ----------
    n_acc : int
        Draft tokens equal to the target's argmax at their position (EOG included).
    emitted : (e,) int32 ndarray
        Accepted draft tokens to emit after ``tok``: ``draft[:n_acc]``, without a final EOG.
    next_token : int
        The bonus token ``target_ids[n_acc]``, or -1 when an accepted EOG ended the generation.
    eog : bool
        True when an accepted draft token was end-of-generation.
    """

    n_acc: int
    emitted: np.ndarray
    next_token: int
    eog: bool


def greedy_accept(draft, target_ids, eos_ids: Collection[int] = ()) -> AcceptResult:
    """Accept the longest draft prefix equal to the target's argmax, plus its bonus token.

    Parameters
    ----------
    draft : (n,) int array-like
        Draft tokens ``d1..dn`` (``n`` may be 0: the plain path).
    target_ids : (n + 1,) int array-like
        Argmax of each logits row of the decode of ``[tok, d1..dn]``.
    eos_ids : collection of int
        End-of-generation token ids.

    Returns
    -------
    AcceptResult

    Raises
    ------
    ValueError
        If ``target_ids`` does not have ``len(draft) + 1`` rows.

    Examples
    --------
    >>> r = greedy_accept([5, 6, 7], [5, 6, 9, 4])
    >>> r.n_acc, r.emitted.tolist(), r.next_token
    (2, [5, 6], 9)
    """
    d = np.asarray(draft, dtype=np.int64).reshape(-1)
    t = np.asarray(target_ids, dtype=np.int64).reshape(-1)
    n = d.size
    if t.size != n + 1:
        raise ValueError(f"target_ids must have len(draft) + 1 = {n + 1} rows, got {t.size}")
    n_acc = 0
    eog = False
    for i in range(n):
        if t[i] != d[i]:
            break
        n_acc += 1
        if int(d[i]) in eos_ids:
            eog = True
            break
    emitted = d[: n_acc - 1 if eog else n_acc].astype(np.int32)
    next_token = -1 if eog else int(t[n_acc])
    return AcceptResult(n_acc=n_acc, emitted=emitted, next_token=next_token, eog=eog)
