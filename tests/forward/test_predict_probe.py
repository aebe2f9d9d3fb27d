"""`refsim run --predict-log`: the live probe's predictors (engine-docs/expert-prediction.md),
hand-worked on a fake ranking, and on the built-in qwen3moe, where the control must read 100 %."""

import json

import numpy as np

from refsim.cli import main
from refsim.streaming.predict import PredictProbe


def test_probe_hand_worked():
    # 2 layers, k = 2. rank(j, x) returns the ids stored in x for layer j: x = [[a0, a1, b0, b1]].
    rank = lambda j, x: np.array([x[0, 2 * j:2 * j + 2]])          # noqa: E731
    p = PredictProbe(2)
    p.begin_graph(0)                                      # prefill: only records prev-token
    p.layer(0, np.array([1, 2]), np.array([[9, 9, 9, 9]]), rank)
    p.layer(1, np.array([3, 4]), np.array([[9, 9, 9, 9]]), rank)
    p.begin_graph(1)                                      # first decode: stale/ctrl unscored
    p.layer(0, np.array([1, 5]), np.array([[1, 5, 3, 6]]), rank)
    p.layer(1, np.array([3, 6]), np.array([[0, 0, 3, 6]]), rank)
    p.begin_graph(1)
    # layer 0: prev {1,5} vs {1,7}: 1 hit; ctrl rank(0) = {1,7}: 2 hits; stale for layer 1 = {3,8}
    p.layer(0, np.array([1, 7]), np.array([[1, 7, 3, 8]]), rank)
    # layer 1: prev {3,6} vs {3,8}: 1; stale {3,8}: 2 (whole); ctrl rank(1) = {3,8}: 2
    p.layer(1, np.array([3, 8]), np.array([[0, 0, 3, 8]]), rank)
    pv, sg, ct = p.total("prev-token"), p.total("stale-gate"), p.total("control")
    # prev-token: decode 1 vs the prompt: layer 0 {1,2}/{1,5} 1, layer 1 {3,4}/{3,6} 1; decode 2: 1 + 1
    assert (pv.rows, pv.slots, pv.hits, pv.exact) == (4, 8, 4, 0)
    assert (sg.rows, sg.hits, sg.exact) == (1, 2, 1)
    assert (ct.rows, ct.hits, ct.exact) == (2, 4, 2)
    assert p.unranked == 3            # decode 1's two layers and decode 2's layer 0
    assert p.lines()[3].split() == ["0", "-", "50.0%", "100.0%", "2"]


def test_live_probe_on_the_builtin_model(builtin_model_cache, capsys):
    assert main(["run", "-n", "8", "--json", "--predict-log"]) == 0
    run = json.loads(capsys.readouterr().out)
    from refsim.model import open_model
    spec = open_model(builtin_model_cache / "builtin-qwen3moe-v1.gguf").spec
    L, k, d = spec.n_layer, spec.n_expert_used, run["decodes"]
    p = run["predict"]
    assert p["control"]["hits"] == p["control"]["slots"] == (d - 1) * L * k   # exactly 100 %
    assert p["control"]["exact"] == p["control"]["rows"] == (d - 1) * L
    assert p["stale-gate"]["rows"] == (d - 1) * (L - 1)
    assert p["prev-token"]["rows"] == d * L
    assert 0 <= p["stale-gate"]["hits"] <= p["stale-gate"]["slots"]
    # the probe reads bytes nobody else reads: the cache counters equal an unprobed run's
    assert main(["run", "-n", "8", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["cache"] == run["cache"] and plain["tokens"] == run["tokens"]
