"""refsim/kernels is built in layers, each importing only from the layers below it (issue 27, cycle C4): the
block-dot primitives, the dequantization families, the registry, the one-row references, the four-row
walkers, then the dispatch and the package's face; and no module imports another of the package inside a
function (a lazy import that dodges a cycle). Read from the sources, so a new import that breaks the order
fails here."""

from __future__ import annotations

import ast
import pathlib

import refsim.kernels

ROOT = pathlib.Path(refsim.kernels.__file__).parent

LAYERS = [
    {"simd", "atomic", "dense", "ggml_cpu", "floats", "legacy", "k_quants", "mxfp4"},   # no refsim.kernels imports
    {"iq4", "iq_grid", "ternary"},                        # families built on another family's helpers
    {"registry"},                                         # the table: decoders of the families
    {"loops", "qdot", "qdot_ext", "q8dot"},               # one row at a time (decode; integer products)
    {"rows4"},                                            # four-row walkers of the qdot types, and the walk
    {"simd_ext", "simd_exact"},                           # the other walkers, on that walk
    {"ggml_matmul", "__init__"},                          # dispatch, the face
]
LAYER = {m: i for i, names in enumerate(LAYERS) for m in names}


def _imports(tree) -> list[tuple[str, bool]]:
    """(module of refsim.kernels imported, whether at module level) for each import in ``tree``."""
    top = {id(n) for n in tree.body}
    out = []
    for n in ast.walk(tree):
        names = []
        if isinstance(n, ast.ImportFrom) and n.module == "refsim.kernels":
            names = [a.name if (ROOT / f"{a.name}.py").exists() else "__init__" for a in n.names]
        elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("refsim.kernels."):
            names = [n.module.split(".")[2]]
        elif isinstance(n, ast.Import):
            names = [a.name.split(".")[2] for a in n.names if a.name.startswith("refsim.kernels.")]
        out += [(m, id(n) in top) for m in names]
    return out


def test_every_module_has_a_layer():
    assert {p.stem for p in ROOT.glob("*.py")} == set(LAYER)


def test_imports_go_down_only_and_at_module_level():
    wrong = []
    for p in sorted(ROOT.glob("*.py")):
        for m, top in _imports(ast.parse(p.read_text())):
            if not top:
                wrong.append(f"{p.stem} imports {m} inside a function")
            elif LAYER[m] >= LAYER[p.stem]:
                wrong.append(f"{p.stem} (layer {LAYER[p.stem]}) imports {m} (layer {LAYER[m]})")
    assert not wrong, "\n".join(wrong)


def test_the_walk_sees_upward_and_lazy_imports():
    tree = ast.parse("from refsim.kernels.ggml_matmul import qdot_matmul\n")
    assert _imports(tree) == [("ggml_matmul", True)]
    assert LAYER["ggml_matmul"] > LAYER["qdot"]
    lazy = ast.parse("def f():\n    from refsim.kernels.qdot import qdot_row\n")
    assert _imports(lazy) == [("qdot", False)]
