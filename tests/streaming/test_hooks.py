"""The streaming room (refsim.streaming): the one hooks object a pass is handed, and the room's place
below forward/ and cache/."""

import ast
from pathlib import Path

import pytest

import refsim.streaming
from refsim.errors import ConfigError
from refsim.streaming.hooks import LayerHooks
from refsim.streaming.knobs import StreamKnobs
from refsim.streaming.predict import PredictProbe
from refsim.streaming.route_ahead import RouteAhead
from refsim.streaming.stale_gate import PredictPrefetch


def test_arm_sets_the_hooks_of_a_run_and_leaves_the_gate():
    h = LayerHooks(gate="the loop's")
    assert not h.idle and h.ranker is None
    h.arm(StreamKnobs(route_ahead=2), n_layer=3)
    assert h.ahead == RouteAhead(2) and h.predictor is None and h.probe is None and h.gate == "the loop's"
    assert h.ranker is h.ahead
    h.arm(StreamKnobs(predict_prefetch=True, drop_frac=0.5), n_layer=3, predict_log=True)
    assert h.ahead is None and h.predictor == PredictPrefetch() and h.ranker is h.predictor
    assert isinstance(h.probe, PredictProbe) and h.probe.n_layer == 3 and len(h.probe.per_layer["control"]) == 3
    h.arm(StreamKnobs(), n_layer=3)
    h.gate = None
    assert h.idle and (h.probe, h.ahead, h.predictor) == (None, None, None)
    with pytest.raises(ConfigError, match="--route-ahead and --predict-prefetch: mutually exclusive"):
        StreamKnobs(route_ahead=1, predict_prefetch=True)       # so ahead and predictor never meet


def test_begin_graph_reaches_every_hook():
    # a prefill then two decode graphs: route-ahead and the predictor act from the second decode on,
    # the probe counts its decodes
    h = LayerHooks(probe=PredictProbe(2), ahead=RouteAhead(1))
    pp = LayerHooks(predictor=PredictPrefetch())
    for phase, active in ((0, False), (1, False), (1, True)):
        h.begin_graph(phase)
        pp.begin_graph(phase)
        assert h.ahead.active is active and pp.predictor.active is active
    assert h.ahead.commits(1) and not h.ahead.commits(0)
    assert h.probe._decodes == 2 and pp.predictor.graphs.decodes == 2
    LayerHooks().begin_graph(1)                                  # no hook: nothing to tell


def test_the_room_imports_nothing_above_it():
    # below forward/ and cache/: only errors, jit, lazy and the room's own modules
    root = Path(refsim.streaming.__file__).parent
    for f in sorted(root.glob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        ours = {m for m in mods if m.startswith("refsim")}
        assert ours <= {"refsim.errors", "refsim.jit", "refsim.lazy"} | {f"refsim.streaming.{g.stem}" for g in
                                                                           root.glob("*.py")}, (f.name, ours)


def test_the_face_names_resolve_lazily():
    assert refsim.streaming.LayerHooks is LayerHooks and refsim.streaming.StreamKnobs is StreamKnobs
    assert sorted(refsim.streaming.__all__) == sorted(
        ["StreamKnobs", "MAX_PREFETCH", "PREDICT_SPEC_MAX_DEFAULT", "LayerHooks", "RouteAhead", "PredictPrefetch",
         "PredictProbe", "PredictorStats"])
    assert refsim.streaming.MAX_PREFETCH == 8
