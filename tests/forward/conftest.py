import pytest

from refsim.model import open_model, write_synthetic


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Small synthetic qwen3moe files (F32 and Q4_0, 2 layers, 8 experts top-2, vocab 300)."""
    d = tmp_path_factory.mktemp("fwd")
    return {q: open_model(write_synthetic(d / f"tiny-{q}.gguf", "qwen3moe", q, seed=11)) for q in ("F32", "Q4_0")}
