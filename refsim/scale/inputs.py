"""Expand the ``TRACE [TRACE ...]`` arguments of ``refsim sweep`` / ``refsim union``: paths,
globs and folders of ``*.route.csv`` (docs/scale.md, "Inputs")."""

from __future__ import annotations

import glob
import os

from refsim.errors import ConfigError

TRACE_SUFFIX = ".route.csv"
"""What a trace file in a folder argument is named like (the engine's ``--route-trace`` files
and ``refsim run --route-trace``'s)."""

MAX_TRACES = 100_000
"""Most traces one command takes (each is read once by the command and once per worker)."""

_GLOB_CHARS = frozenset("*?[")


def expand_traces(items: list[str], what: str = "TRACE") -> list[str]:
    """The trace paths the arguments name, in a deterministic order.

    - an existing **folder**: its ``*.route.csv`` files (not recursive), sorted by name;
    - a **glob** (``*``, ``?`` or ``[`` in an argument that is not an existing path): the files it
      matches, sorted (``glob.glob``; ``**`` is not recursive);
    - anything else: the path as given (the reader reports a missing file).

    The arguments keep their order; a file named twice (same real path) keeps its first place, so
    no trace counts twice in a pooled summary.

    Raises
    ------
    ConfigError
        ``"TRACE DIR: no *.route.csv file in this folder"``, ``"TRACE PATTERN: matches no file"``,
        or more than :data:`MAX_TRACES` traces.
    """
    out: dict[str, str] = {}
    for item in items:
        if os.path.isdir(item):
            found = sorted(os.path.join(item, n) for n in os.listdir(item)
                           if n.endswith(TRACE_SUFFIX) and os.path.isfile(os.path.join(item, n)))
            if not found:
                raise ConfigError(f"{what} {item}: no *{TRACE_SUFFIX} file in this folder")
        elif not os.path.exists(item) and _GLOB_CHARS & set(item):
            found = sorted(p for p in glob.glob(item) if os.path.isfile(p))
            if not found:
                raise ConfigError(f"{what} {item}: matches no file")
        else:
            found = [item]
        for p in found:
            out.setdefault(os.path.realpath(p), p)
        if len(out) > MAX_TRACES:
            raise ConfigError(f"{what}: more than {MAX_TRACES} traces; split the study")
    return list(out.values())
