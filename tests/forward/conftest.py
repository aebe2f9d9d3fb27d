import json
from pathlib import Path

import numpy as np
import pytest

from refsim.model import open_model, write_synthetic


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Small synthetic qwen3moe files (F32 and Q4_0, 2 layers, 8 experts top-2, vocab 300)."""
    d = tmp_path_factory.mktemp("fwd")
    return {q: open_model(write_synthetic(d / f"tiny-{q}.gguf", "qwen3moe", q, seed=11)) for q in ("F32", "Q4_0")}


GOLDEN_DIR = Path(__file__).resolve().parents[1] / "data" / "oracle"


@pytest.fixture(scope="session")
def golden_models(tmp_path_factory):
    """``load(tool, prefix) -> {name: (model, golden arrays)}`` for every ``tool.GOLDEN_RECIPES``
    entry: the golden ``tests/data/oracle/<prefix>-<name>.npz`` and its synthetic model rebuilt bit
    for bit (asserted through the recipe and the tensor digest the golden records)."""
    def load(tool, prefix: str) -> dict:
        folder = tmp_path_factory.mktemp(f"{prefix}-models")
        out = {}
        for name, recipe in tool.GOLDEN_RECIPES.items():
            f = GOLDEN_DIR / f"{prefix}-{name}.npz"
            assert f.exists(), f"missing golden {f}: run python tools/{tool.__name__}.py --make-goldens {GOLDEN_DIR}"
            with np.load(f) as z:
                g = {k: z[k] for k in z.files}
            assert json.loads(str(g["recipe"])) == recipe, f"{f}: recipe changed; regenerate the goldens"
            path = write_synthetic(folder / f"{name}.gguf", **recipe)
            assert tool.tensor_digest(path) == str(g["digest"]), (
                f"{f}: the synthetic writer now makes different weights (tensor digest changed); "
                f"regenerate the goldens")
            out[name] = (open_model(path), g)
        return out
    return load


@pytest.fixture(scope="module")
def builtin_model_cache(tmp_path_factory):
    """``$REFSIM_CACHE`` pointed at a fresh folder for the module, where ``refsim run`` builds
    its built-in model once; yields the folder."""
    mp = pytest.MonkeyPatch()
    d = tmp_path_factory.mktemp("refsim-cache")
    mp.setenv("REFSIM_CACHE", str(d))
    yield d
    mp.undo()
