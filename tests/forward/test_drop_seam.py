"""The drop seam of the live forward pass (docs/architecture.md, "The drop seam"): the rule's
edit of the routing (router_hook.cpp apply_drop), the pass asking residency and never counting
bytes, the engine's gate G8a, and a live `refsim run` whose trace replays to its numbers."""

import json

import numpy as np

from refsim.cli import main
from refsim.forward import qwen3moe
from refsim.streaming.drop import apply_drop, drop_rows, gate_layer
from refsim.streaming.hooks import LayerHooks


def test_apply_drop_zeroes_repoints_and_renormalises():
    ids = np.array([[5, 6, 7]])
    w = np.array([[0.5, 0.3, 0.2]], np.float32)
    d = np.array([[False, False, True]])
    ni, nw = apply_drop(ids, w, d, renorm=True)
    assert ni.tolist() == [[5, 6, 5]]                      # rewritten to the best slot's id
    g = np.float32(np.float32(1.0) / np.float32(np.float32(0.5) + np.float32(0.3)))
    assert nw.tolist() == [[np.float32(0.5 * g), np.float32(np.float32(0.3) * g), 0.0]]
    ni, nw = apply_drop(ids, w, d, renorm=False)           # --drop-no-renorm
    assert nw.tolist() == [[np.float32(0.5), np.float32(0.3), 0.0]]
    # untouched rows are returned as they were
    ni, nw = apply_drop(ids, w, np.zeros((1, 3), bool))
    assert ni.tolist() == ids.tolist() and nw.tolist() == w.tolist()


def test_drop_rows_is_the_rule():
    # thr = 1/3 (F = 1, k = 3). Row 0: best slot 0; 6 cold (.3 < 1/3) dropped, 7 resident kept.
    # Row 1: best slot 2 (.6); slots 0, 1 cold and light -> dropped.
    ids = np.array([[5, 6, 7], [1, 2, 3]], np.int16)
    w = np.array([[0.5, 0.3, 0.2], [0.2, 0.2, 0.6]], np.float32)
    res = np.array([[False, False, True], [False, False, False]])
    assert drop_rows(ids, w, res, np.float32(1 / 3)).tolist() == [[False, True, False],
                                                                   [True, True, False]]


class StubGate:
    """A gate that answers residency from a fixed set and records what the pass reports."""

    def __init__(self, resident=(), thr=None, renorm=True):
        self.res, self.thr, self.drop_renorm, self.fed = set(resident), thr, renorm, []

    def drop_threshold(self, il):
        return self.thr

    def resident(self, il, ids):
        return np.isin(ids, list(self.res))

    def routed(self, il, rows, ids, weights, dropped):
        self.fed.append((il, np.asarray(rows).tolist(), ids.copy(), weights.copy(), dropped.copy()))


def test_gate_layer_reports_the_routers_routing():
    g = StubGate(resident={7}, thr=np.float32(1 / 3))
    ids = np.array([[5, 6, 7]])
    w = np.array([[0.5, 0.3, 0.2]], np.float32)
    ni, nw, d = gate_layer(g, 2, [0], ids, w)
    assert d.tolist() == [[False, True, False]] and ni.tolist() == [[5, 5, 7]]
    il, rows, fid, fw, fd = g.fed[0]
    assert (il, rows, fid.tolist(), fd.tolist()) == (2, [0], [[5, 6, 7]], [[False, True, False]])
    assert fw.tolist() == w.tolist()                       # the router's weights, not the edit


def decode_with(model, gate, tokens, monkeypatch=None, seen=None):
    wts = qwen3moe.load_weights(model)
    state = qwen3moe.new_state(model.spec, 64)
    moe = qwen3moe.moe_ffn
    if seen is not None:
        real = qwen3moe.moe_ffn

        def moe(f, ids, w, *a, **kw):          # a spy: the routing the experts run
            seen.append((np.array(ids), np.array(w)))
            return real(f, ids, w, *a, **kw)
    return qwen3moe.decode(wts, state, np.array(tokens), np.arange(len(tokens)), hooks=LayerHooks(gate=gate),
                           moe=moe)


def test_a_gate_that_drops_nothing_is_byte_identical(tiny_models):
    # the engine's gate G8a: the seam is transparent when nothing is dropped
    m = tiny_models["F32"]
    base = decode_with(m, None, [1, 5, 9])
    res = decode_with(m, StubGate(thr=np.float32(1e-9)), [1, 5, 9])
    assert np.array_equal(base.logits, res.logits) and not res.dropped.any()
    assert np.array_equal(base.routes, res.routes)


def test_the_ffn_uses_the_edited_routing(tiny_models, monkeypatch):
    # nothing resident, F = 1 at k = 2 (thr 0.5): every non-best slot below 0.5 is dropped, and
    # the expert FFN receives exactly apply_drop's routing
    m = tiny_models["F32"]
    seen = []
    gate = StubGate(thr=np.float32(0.5))
    res = decode_with(m, gate, [1, 5, 9], monkeypatch, seen)
    assert res.dropped.any()
    for (il, rows, ids, w, d), (fid, fw) in zip(gate.fed, seen):
        ei, ew = apply_drop(ids, w, d, renorm=True)
        assert np.array_equal(fid, ei) and np.array_equal(fw, ew)
        assert np.array_equal(res.routes[rows, il], ids)     # the result keeps the router's ids
    base = decode_with(m, None, [1, 5, 9])
    assert not np.array_equal(base.logits, res.logits)     # the drop changed the computation


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_live_run_with_drop_and_prefetch_replays_to_its_numbers(builtin_model_cache, capsys, tmp_path):
    trace = tmp_path / "drop.route.csv"
    flags = ["--drop-cold-experts", "1.0", "--prefetch", "1"]
    run = _json(capsys, ["run", "-n", "8", "--cache-mb", "2", "--json", "--route-trace",
                         str(trace), *flags])
    k = run["knobs"]
    from refsim.model import open_model
    spec = open_model(builtin_model_cache / "builtin-qwen3moe-v1.gguf").spec
    # the generation delta: every decode routes every layer's k slots (prefill excluded)
    assert k["experts_routed"] == run["decodes"] * spec.n_layer * spec.n_expert_used
    assert k["experts_dropped"] > 0
    rep = _json(capsys, ["replay", str(trace), "--cache-mb", "2", "--json", *flags])
    assert rep["knobs"] == k
    for key, v in run["cache"].items():
        assert rep[key] == v, key
    assert rep["residency_agree"] == rep["residency_rows"]
    lines = trace.read_text().splitlines()
    assert next(ln for ln in lines if ln.startswith("turn,")).endswith(",dropped")
    assert sum(ln.endswith(",0,1") for ln in lines) == k["experts_dropped"]   # expert_bytes 0


def test_live_run_threshold_below_every_weight_is_the_plain_run(builtin_model_cache, capsys):
    # G8a / G8a': nothing under the threshold -> the same tokens, experts_routed > 0, 0 dropped
    plain = _json(capsys, ["run", "-n", "6", "--cache-mb", "2", "--json"])
    tiny = _json(capsys, ["run", "-n", "6", "--cache-mb", "2", "--json",
                          "--drop-cold-experts", "1e-9"])
    assert tiny["tokens"] == plain["tokens"]
    assert tiny["knobs"]["experts_routed"] > 0 and tiny["knobs"]["experts_dropped"] == 0
    assert tiny["cache"]["read_bytes"] == plain["cache"]["read_bytes"]


def test_qwen35moe_run_with_drop_replays_and_probes(tmp_path, capsys):
    # the hybrid trunk through the same seam: a live run with drop + prefetch replays to its
    # numbers, and the probe's control reads 100 %
    from refsim.model import write_synthetic
    model = write_synthetic(tmp_path / "h.gguf", "qwen35moe", "F32", seed=3)
    trace = tmp_path / "h.route.csv"
    flags = ["--drop-cold-experts", "1.0", "--prefetch", "1"]
    run = _json(capsys, ["run", str(model), "--prompt-tokens", "1,5,9,4", "-n", "6",
                         "--cache-mb", "0.05", "--json", "--route-trace", str(trace),
                         "--predict-log", *flags])
    p = run["predict"]["control"]
    assert p["hits"] == p["slots"] > 0
    assert run["knobs"]["experts_dropped"] > 0
    rep = _json(capsys, ["replay", str(trace), "--cache-mb", "0.05", "--json", *flags])
    assert rep["knobs"] == run["knobs"]
    for key, v in run["cache"].items():
        assert rep[key] == v, key


def test_route_ahead_live_run_replays_and_counts(builtin_model_cache, capsys, tmp_path):
    # --route-ahead 1 on the built-in qwen3moe: layers >= 1 of every decode after the first take
    # the committed selection; the trace replays (cache side: the early reads) to the run's numbers
    from refsim.model import open_model
    trace = tmp_path / "ra.route.csv"
    run = _json(capsys, ["run", "-n", "8", "--cache-mb", "2", "--json", "--route-trace",
                         str(trace), "--route-ahead", "1"])
    spec = open_model(builtin_model_cache / "builtin-qwen3moe-v1.gguf").spec
    L, d = spec.n_layer, run["decodes"]
    ra = run["route_ahead"]
    assert (ra["committed"], ra["passthrough"]) == ((d - 1) * (L - 1), L + (d - 1))
    k = run["knobs"]
    assert k["spec_useful"] == k["spec_experts"] > 0       # committed reads are used by construction
    rep = _json(capsys, ["replay", str(trace), "--cache-mb", "2", "--json", "--route-ahead", "1"])
    assert rep["knobs"] == k
    for key, v in run["cache"].items():
        assert rep[key] == v, key
    # --route-ahead 0 is the plain run
    plain = _json(capsys, ["run", "-n", "8", "--cache-mb", "2", "--json"])
    zero = _json(capsys, ["run", "-n", "8", "--cache-mb", "2", "--json", "--route-ahead", "0"])
    assert zero["tokens"] == plain["tokens"] and zero["cache"] == plain["cache"]


def test_route_ahead_rejections(builtin_model_cache, capsys):
    for extra, msg in ((["--ngram"], "mutually exclusive with speculation"),
                       (["--predict-log"], "--route-ahead and --predict-log"),
                       (["--prefetch", "1"], "--route-ahead and --prefetch")):
        assert main(["run", "-n", "2", "--route-ahead", "1", *extra]) == 2   # flags alone: usage
        assert msg in capsys.readouterr().err


def test_route_weights_are_the_routers_on_its_own_selection():
    from refsim.forward.routing import route_topk, route_weights
    rng = np.random.default_rng(0)
    for _ in range(20):
        logits = (rng.normal(size=(3, 16)) * 3).astype(np.float32)
        ids, w, _ = route_topk(logits, 4)
        assert np.array_equal(route_weights(logits, ids), w)
    # another selection: softmax gathered at it, renormalised to sum 1 (float32)
    logits = np.array([[0.0, np.log(2.0), np.log(3.0), np.log(4.0)]], np.float32)
    w = route_weights(logits, np.array([[0, 1]]))
    assert np.allclose(w, [[1 / 3, 2 / 3]], atol=1e-6)


def test_route_ahead_commits_the_stale_ranking(tiny_models):
    # decode three single tokens with RouteAhead(1): the third graph's layer 1 routes the ranking
    # of layer 1's router on layer 0's gate input, with layer 1's true weights
    from refsim.forward.layers import Numerics, linear
    from refsim.forward.routing import route_topk, route_weights
    from refsim.streaming.route_ahead import RouteAhead
    m = tiny_models["F32"]
    wts = qwen3moe.load_weights(m)
    state = qwen3moe.new_state(m.spec, 64)
    ra = RouteAhead(1)
    seen = {}

    def tap(name, il, a):
        seen[(name, il)] = np.array(a)

    for pos, tok in enumerate([1, 5, 9]):
        ra.begin_graph(1)
        res = qwen3moe.decode(wts, state, np.array([tok]), np.array([pos]), tap=tap, hooks=LayerHooks(ahead=ra))
    f0 = seen[("ffn_norm", 0)]
    k = m.spec.n_expert_used
    want = route_topk(linear(wts.layers[1].ffn_gate_inp, f0, Numerics()), k)[0]
    assert np.array_equal(res.routes[:, 1], want)
    assert np.array_equal(res.weights[:, 1], route_weights(seen[("ffn_moe_logits", 1)], want))
    assert (ra.committed, ra.passthrough) == (2 * (m.spec.n_layer - 1), m.spec.n_layer + 2)


# ---- the stale gate acted on: --predict-prefetch, and route-ahead with drop ------------------

def test_stale_weights_are_the_softmax_over_the_ranked_top_k():
    # scores (ln 1, ln 3, ln 6, 0-ish): ranked top-2 = [2, 1]; exp(s - s_max) = (1, 1/2):
    # weights (2/3, 1/3) in float32
    from refsim.streaming.stale_gate import stale_weights
    sc = np.log(np.array([[1.0, 3.0, 6.0, 0.5]], np.float32))
    w = stale_weights(sc, np.array([[2, 1]]))
    assert np.allclose(w, [[2 / 3, 1 / 3]], atol=1e-7) and w.dtype == np.float32


def test_predict_prefetch_ranks_layer_il_plus_2_on_layer_il_input(builtin_model_cache):
    # three single-token decode graphs with PredictPrefetch: the first predicts nothing; the
    # third's prediction for layer 2 is layer 2's router on layer 0's gate input (ffn_norm),
    # with the softmax over its top-k; the routing itself is the router's (nothing committed)
    from refsim.forward.layers import Numerics, linear
    from refsim.forward.routing import route_topk
    from refsim.model import open_model
    from refsim.streaming.stale_gate import PredictPrefetch, stale_weights
    m = open_model(builtin_model_cache / "builtin-qwen3moe-v1.gguf")
    assert m.spec.n_layer >= 3
    wts = qwen3moe.load_weights(m)
    state = qwen3moe.new_state(m.spec, 64)
    pp = PredictPrefetch()
    seen = {}

    def tap(name, il, a):
        seen[(name, il)] = np.array(a)

    out = []
    for pos, tok in enumerate([1, 5, 9]):
        pp.begin_graph(1)
        out.append(qwen3moe.decode(wts, state, np.array([tok]), np.array([pos]), tap=tap,
                                   hooks=LayerHooks(predictor=pp)))
    assert (out[0].pred_routes < 0).all()                       # the run's first decode graph
    res = out[2]
    sc = linear(wts.layers[2].ffn_gate_inp, seen[("ffn_norm", 0)], Numerics())
    want = route_topk(sc, m.spec.n_expert_used)[0]
    assert np.array_equal(res.pred_routes[0, 2], want[0])
    assert np.array_equal(res.pred_weights[0, 2], stale_weights(sc, want)[0])
    assert (res.pred_routes[0, :2] < 0).all()                   # layers 0, 1: nothing 2 back
    assert np.array_equal(res.routes[0, 2], route_topk(seen[("ffn_moe_logits", 2)],
                                                        m.spec.n_expert_used)[0][0])


def test_predict_prefetch_live_run_replays_to_its_numbers(builtin_model_cache, capsys, tmp_path):
    trace = tmp_path / "pp.route.csv"
    flags = ["--predict-prefetch", "--predict-spec-max", "3", "--drop-cold-experts", "0.75"]
    run = _json(capsys, ["run", "-n", "8", "--cache-mb", "2", "--json", "--route-trace",
                         str(trace), *flags])
    k = run["knobs"]
    assert k["predict_prefetch"] and k["predict_spec_max"] == 3
    assert 0 < k["spec_read_bytes"] <= run["cache"]["decode_read_bytes"]
    assert k["spec_useful"] <= k["spec_experts"]
    rep = _json(capsys, ["replay", str(trace), "--cache-mb", "2", "--json", *flags])
    assert rep["knobs"] == k
    for key, v in run["cache"].items():
        assert rep[key] == v, key
    assert rep["residency_agree"] == rep["residency_rows"]
    lines = trace.read_text().splitlines()
    assert next(ln for ln in lines if ln.startswith("turn,")).endswith(",pred_expert,pred_weight")
    # the text report tags the line
    assert main(["replay", str(trace), "--cache-mb", "2", *flags]) == 0
    assert "[stale-gate]" in capsys.readouterr().out
    # a trace without the prediction columns cannot drive --predict-prefetch (data: exit 1)
    bare = tmp_path / "bare.route.csv"
    assert main(["run", "-n", "3", "--cache-mb", "2", "--route-trace", str(bare)]) == 0
    capsys.readouterr()
    assert main(["replay", str(bare), "--cache-mb", "2", "--predict-prefetch"]) == 1
    err = capsys.readouterr().err
    assert str(bare) in err and "pred_expert/pred_weight" in err


def test_route_ahead_with_drop_live_run_replays(builtin_model_cache, capsys, tmp_path):
    # the drop-aware early-read filter runs live on the stale ranking's weights; the trace
    # records them (pred_weight), so its replay with the same flags gives the run's numbers
    trace = tmp_path / "rad.route.csv"
    flags = ["--route-ahead", "1", "--drop-cold-experts", "1.0"]
    run = _json(capsys, ["run", "-n", "8", "--cache-mb", "2", "--json", "--route-trace",
                         str(trace), *flags])
    k = run["knobs"]
    assert k["experts_dropped"] > 0 and k["spec_experts"] > 0
    rep = _json(capsys, ["replay", str(trace), "--cache-mb", "2", "--json", *flags])
    assert rep["knobs"] == k
    for key, v in run["cache"].items():
        assert rep[key] == v, key
    # committed rows: the ranked id is the routed id
    from refsim.trace import read_trace
    tr = read_trace(trace)
    n_committed = 0
    for ev in tr.decode_events:
        has = ev.pred_routes[:, :, 0] >= 0
        assert np.array_equal(ev.pred_routes[has], ev.routes[has])
        n_committed += int(has.sum())
    assert n_committed == run["route_ahead"]["committed"]
    # without the filter (a filter-blind replay at F = 0 reads every committed expert early)
    blind = _json(capsys, ["replay", str(trace), "--cache-mb", "2", "--json", "--route-ahead", "1"])
    assert blind["knobs"]["spec_experts"] >= k["spec_experts"]


def test_route_ahead_runs_on_the_qwen35moe_pass(tmp_path, capsys):
    from refsim.model import write_synthetic
    model = write_synthetic(tmp_path / "h.gguf", "qwen35moe", "F32", seed=3)
    trace = tmp_path / "h.route.csv"
    flags = ["--route-ahead", "1", "--drop-cold-experts", "0.75"]
    run = _json(capsys, ["run", str(model), "--prompt-tokens", "1,5,9,4", "-n", "6",
                         "--cache-mb", "0.05", "--json", "--route-trace", str(trace), *flags])
    assert run["route_ahead"]["committed"] > 0
    rep = _json(capsys, ["replay", str(trace), "--cache-mb", "0.05", "--json", *flags])
    assert rep["knobs"] == run["knobs"]
    for key, v in run["cache"].items():
        assert rep[key] == v, key


def test_predict_prefetch_rejections(builtin_model_cache, capsys):
    for extra, msg in ((["--prefetch", "1"], "--predict-prefetch and --prefetch"),
                       (["--route-ahead", "1"], "--route-ahead and --predict-prefetch")):
        assert main(["run", "-n", "2", "--predict-prefetch", *extra]) == 2
        assert msg in capsys.readouterr().err
    assert main(["run", "-n", "2", "--predict-spec-max", "1"]) == 2
    assert "only with --predict-prefetch" in capsys.readouterr().err
    import pytest
    with pytest.raises(SystemExit) as exc:               # argparse's type check: exit 2
        main(["run", "-n", "2", "--predict-prefetch", "--predict-spec-max", "9"])
    assert exc.value.code == 2
    assert "--predict-spec-max: expected an integer in 0..8" in capsys.readouterr().err
