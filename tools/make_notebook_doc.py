"""Run docs/notebook.md's code and write each block's real output under it.

Usage: python tools/make_notebook_doc.py [--check]

Every fenced block whose info string is exactly ``python`` is run, in page order, in one
namespace, from the repository's root (the page's paths are relative to it), with pandas' display
width fixed by the page's first block. The ``text`` block right after a code block holds what that
code printed: this tool rewrites it (``--check``: compares and exits 1 on a difference).
Blocks marked ``python no-run`` are shown, not run (they need the engine's shared runs).
tests/test_notebook.py runs the same blocks through :func:`run_page` and compares.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "notebook.md"

_BLOCK = re.compile(r"```python\n(?P<code>.*?)```\n(?:\n```text\n(?P<out>.*?)```\n)?", re.S)


def code_blocks(text: str) -> list[re.Match]:
    """The runnable blocks of the page (info string ``python``), each with its output block."""
    return list(_BLOCK.finditer(text))


def run_page(text: str) -> list[str]:
    """Run every runnable block of ``text`` in order (one namespace, the repository's root as the
    working folder); returns what each printed."""
    ns: dict = {"__name__": "__notebook__"}
    outs = []
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        for i, m in enumerate(code_blocks(text)):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                exec(compile(m.group("code"), f"{PAGE.name} block {i + 1}", "exec"), ns)
            outs.append(buf.getvalue())
    finally:
        os.chdir(here)
    return outs


def with_outputs(text: str, outs: list[str]) -> str:
    """``text`` with each runnable block followed by a ``text`` block of its output (none when it
    printed nothing)."""
    parts, last = [], 0
    for m, out in zip(code_blocks(text), outs):
        parts.append(text[last:m.start()])
        parts.append(f"```python\n{m.group('code')}```\n")
        if out:
            parts.append(f"\n```text\n{out}```\n")
        last = m.end()
    parts.append(text[last:])
    return "".join(parts)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = PAGE.read_text()
    new = with_outputs(text, run_page(text))
    if "--check" in argv:
        if new != text:
            print(f"{PAGE}: the outputs differ from what its code prints; run "
                  f"python tools/make_notebook_doc.py", file=sys.stderr)
            return 1
        return 0
    from refsim.fileio import write_text_atomic
    write_text_atomic(PAGE, new)
    return 0


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(main))
