"""Two small traces of different models for the many-trace tests: the repository's demo trace and
a scripted n-gram run's trace (written live, so its residency is the cache's record)."""

import shutil
from pathlib import Path

import numpy as np
import pytest

from refsim.cache import ExpertCache
from refsim.spec import NgramDraft, run_generation
from refsim.testing import DocumentScript, ScriptedRouter, ScriptedTarget, copy_heavy_document
from refsim.trace import TraceHeader, TraceWriter

DEMO = Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv"


def write_scripted_trace(path, seed=3, n_predict=60, budget=40_000):
    n_layer, n_expert, k = 4, 16, 2
    eb = np.array([3000, 2000, 3000, 2500], dtype=np.int64)
    doc = copy_heavy_document(200, n_vocab=40, seed=5)
    target = ScriptedTarget(DocumentScript(doc, eos=None), ScriptedRouter(n_layer, n_expert, k, seed=seed))
    h = TraceHeader(model="scripted", arch="qwen3moe", n_layer=n_layer, n_expert=n_expert,
                    n_expert_used=k, expert_bytes=eb, dense_bytes=np.zeros(n_layer, dtype=np.int64))
    with TraceWriter(path, h) as w:
        run_generation(target, NgramDraft(min_match=2), np.asarray(doc[:20]), n_predict,
                       cache=ExpertCache(eb, n_expert, budget), draft_max=3, keep_events=False,
                       on_event=w.write_record)
    return path


@pytest.fixture
def two_traces(tmp_path):
    """A folder with ``a.route.csv`` (the demo trace) and ``b.route.csv`` (a scripted run)."""
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(DEMO, folder / "a.route.csv")
    write_scripted_trace(folder / "b.route.csv")
    return folder
