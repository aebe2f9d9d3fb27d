"""The import graph of refsim/ (issue 27): no cycle between its files, and no import from a lower
room to a higher one.

Read from the sources with :mod:`ast`, every ``import`` statement anywhere in a file (a lazy
import inside a function is still an arrow: it only defers a cycle, it does not remove it).
``from refsim.a import b`` is an arrow to ``refsim.a.b`` when that is a module, else to
``refsim.a``. The rooms' order is the one docs/architecture.md draws (data flows model -> forward
-> spec -> cache -> telemetry/studies; the CLI on top); a new room must be placed in
:data:`ROOM_ORDER` before it can be imported.
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict

import pytest

import refsim

PKG_DIR = os.path.dirname(refsim.__file__)

BASE = ("refsim", "errors", "events", "fmt", "fileio", "frames", "jit", "jitcache", "lazy",
        "progress")
"""The ground floor: shared by every room, importing only each other."""

ROOM_ORDER = (BASE, ("kernels",), ("model",), ("trace",), ("streaming",), ("cache",),
              ("forward",), ("spec",), ("io",), ("telemetry",), ("studies",), ("timing",),
              ("analysis",), ("validators",), ("session",), ("scale",), ("api",), ("testing",),
              ("interrupt",), ("cli",), ("__main__",))
"""Lowest first. A file may import its own room, the ground floor and any room below it."""

RANK = {room: i for i, rooms in enumerate(ROOM_ORDER) for room in rooms}


def modules(pkg_dir: str = PKG_DIR) -> dict[str, str]:
    """Dotted module name -> file path, for every .py under ``pkg_dir``."""
    out = {}
    base = os.path.dirname(pkg_dir)
    for d, _, files in os.walk(pkg_dir):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                name = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
                out[name.removesuffix(".__init__")] = path
    return out


def import_edges(mods: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the refsim modules its import statements name (see the module docstring)."""
    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        pkg = mod if path.endswith("__init__.py") else mod.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names if a.name.split(".")[0] == "refsim"]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                if base.split(".")[0] != "refsim":
                    continue
                targets = [resolve(f"{base}.{a.name}") if f"{base}.{a.name}" in mods
                           else resolve(base) for a in node.names]
            else:
                continue
            edges[mod].update(t for t in targets if t and t != mod)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    nodes = set(edges) | {t for ts in edges.values() for t in ts}
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def room(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "refsim"


def upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Arrows from a room to a higher one (or from a room :data:`ROOM_ORDER` does not place)."""
    bad = []
    for a, targets in edges.items():
        for b in targets:
            ra, rb = room(a), room(b)
            if ra == rb:
                continue
            if ra not in RANK or rb not in RANK or RANK[rb] > RANK[ra]:
                bad.append((a, b))
    return sorted(bad)


# -- the detector itself, on hand-made packages ---------------------------------------------------

def _write_pkg(tmp_path, files: dict[str, str]) -> str:
    pkg = tmp_path / "refsim"
    for rel, text in files.items():
        p = pkg / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(pkg)


def test_detector_finds_a_lazy_cycle_and_resolves_relative_imports(tmp_path):
    pkg = _write_pkg(tmp_path, {
        "__init__.py": "",
        "cache/__init__.py": "",
        "cache/a.py": "from refsim.cache.b import x\n",
        "cache/b.py": "def f():\n    from . import a\n",          # lazy + relative: still an arrow
        "cache/c.py": "import refsim.cache.a\nfrom refsim.cache import nothing_here\n",
    })
    edges = import_edges(modules(pkg))
    assert edges["refsim.cache.a"] == {"refsim.cache.b"}
    assert edges["refsim.cache.b"] == {"refsim.cache.a"}
    assert edges["refsim.cache.c"] == {"refsim.cache.a", "refsim.cache"}
    assert cycles(edges) == [["refsim.cache.a", "refsim.cache.b"]]


def test_detector_finds_an_upward_arrow(tmp_path):
    pkg = _write_pkg(tmp_path, {
        "__init__.py": "", "cli/__init__.py": "", "cache/__init__.py": "",
        "cache/lru.py": "from refsim.cli import helpers\n",
        "cli/helpers.py": "from refsim.cache import lru\n",
        "nowhere/__init__.py": "", "nowhere/x.py": "import refsim.errors\n", "errors.py": "",
    })
    edges = import_edges(modules(pkg))
    assert upward(edges) == [("refsim.cache.lru", "refsim.cli.helpers"),
                             ("refsim.nowhere.x", "refsim.errors")]    # an unplaced room


# -- refsim itself ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def refsim_edges():
    return import_edges(modules())


def test_no_import_cycles(refsim_edges):
    assert cycles(refsim_edges) == []


def test_no_upward_imports(refsim_edges):
    assert upward(refsim_edges) == []


def test_every_room_is_placed():
    rooms = {room(m) for m in modules()}
    assert rooms - set(RANK) == set()
