"""Helpers for the analysis tests: run the engine's route-analyze.py (oracle) and refsim analyze,
split their text into sections, and a small hand-made speculative trace."""

import functools
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from refsim import MIB
from refsim.cache import ExpertCache
from refsim.events import NOT_ROUTED, DecodeEvent, DecodeKind
from refsim.testing.shared import require_shared
from refsim.analysis import analyze, format_text
from refsim.trace import TraceHeader, read_trace, write_trace

NUM = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?!\w)")


def numbers(line: str) -> list[str]:
    """Standalone numbers of a line, as text ('L0', 's1', 'never_2nd' are not numbers)."""
    return NUM.findall(line)


def sections(text: str) -> dict[str, list[str]]:
    """``=== title ===`` sections: the title's first word -> the lines after it."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"=== (\S+)", line)
        if m:
            cur = m.group(1)
            out[cur] = [line]
        elif cur is not None:
            out[cur].append(line)
    return out


@pytest.fixture(scope="session")
def route_analyze():
    """Run the engine's route-analyze.py (never copied; skip when ../shared is absent)."""
    script = require_shared("reference", "engine-docs", "scripts", "route-analyze.py")

    @functools.lru_cache(maxsize=None)
    def run(trace, *args):
        p = subprocess.run([sys.executable, str(script), str(trace), *args],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stdout
    return run


@functools.lru_cache(maxsize=8)
def _read(path: str, mtime: float):
    return read_trace(path)


def refsim_analyze(*argv) -> str:
    """``refsim analyze ARGV`` as the CLI prints it (the trace read once per file)."""
    from refsim.cli import analyze as cli_analyze
    from refsim.cli import make_parser
    args = make_parser().parse_args(["analyze", *map(str, argv)])
    path = str(args.trace)
    rep = analyze(_read(path, os.path.getmtime(path)), cli_analyze.options_from_args(args))
    return json.dumps(rep) + "\n" if args.json else format_text(rep)


# A hand-made speculative trace (docs/analysis.md, "Framing", worked example): 2 layers,
# 10 experts, top-2; prefill 0..1, plain 2, verify [3,4,5] (accepts 1), verify [5,6] (accepts
# 1; position 5 is decoded twice), plain 7 with layer 0's slot 1 (expert 9, a miss) dropped.
SPEC_ROUTES = [
    (DecodeKind.PREFILL, [0, 1], [[[0, 1], [-1, -1]], [[2, 3], [0, 1]]]),
    (DecodeKind.PLAIN, [2], [[[0, 4], [1, 2]]]),
    (DecodeKind.VERIFY, [3, 4, 5], [[[4, 5], [2, 3]], [[5, 6], [3, 4]], [[6, 7], [4, 5]]]),
    (DecodeKind.VERIFY, [5, 6], [[[6, 0], [5, 6]], [[0, 1], [6, 7]]]),
    (DecodeKind.PLAIN, [7], [[[1, 9], [7, 0]]]),
]


@pytest.fixture()
def spec_trace_path(tmp_path):
    """Write the hand-made trace; residency and bytes from refsim's LRU at 64 MiB (all fit)."""
    header = TraceHeader(model="hand</b><script>x</script>", arch="qwen3moe", n_layer=2,
                         n_expert=10, n_expert_used=2,
                         expert_bytes=np.array([MIB, 2 * MIB], np.int64),
                         dense_bytes=np.array([5 * MIB, 5 * MIB], np.int64))
    cache = ExpertCache(header.expert_bytes, header.n_expert, 64 * MIB)
    events, res, chg = [], [], []
    for kind, pos, routes in SPEC_ROUTES:
        r = np.array(routes, np.int16)
        w = np.where(r >= 0, np.float32(0.75), np.float32(np.nan)).astype(np.float32)
        w[:, :, 1] = np.where(r[:, :, 1] >= 0, 0.25, np.nan)
        drop = None
        if kind is DecodeKind.PLAIN and pos == [7]:
            drop = np.zeros(r.shape, bool)
            drop[0, 0, 1] = True
        n = len(pos)
        ev = DecodeEvent(kind, np.array(pos, np.int64), r, weights=w, dropped=drop,
                         n_draft=n - 1 if kind is DecodeKind.VERIFY else 0)
        rec = cache.apply(ev)
        rs = rec.residency.copy()
        rs[(rs < 0) & (r != NOT_ROUTED)] = 0            # a dropped slot is a recorded miss
        events.append(ev)
        res.append(rs)
        chg.append(rec.charged_bytes)
    path = tmp_path / "spec.route.csv"
    write_trace(path, header, events, res, chg)
    return path
