"""The engine's own recorded run, replayed: every row's residency and the published hit rates."""

import json

from refsim import MIB
from refsim.cli import main
from refsim.studies.replay import replay_trace


def test_real_trace_shape(qwen_trace):
    h = qwen_trace.header
    assert (h.n_layer, h.n_expert, h.n_expert_used) == (48, 128, 6)
    assert qwen_trace.n_rows == 44766
    assert qwen_trace.n_prompt == 28
    assert len(qwen_trace.decode_events) == 128
    # prefill: the last MoE layer routes only the final prompt token (28*47*6 + 6 rows)
    pre = qwen_trace.events[0]
    assert (pre.routes[:, :47] >= 0).sum() == 28 * 47 * 6
    assert (pre.routes[:, 47] >= 0).sum() == 6 and (pre.routes[27, 47] >= 0).all()
    assert set(h.expert_bytes.tolist()) == {3059712, 2654208}


def test_replay_at_4000_mib_reproduces_the_engine(qwen_trace):
    rep = replay_trace(qwen_trace, 4000 * MIB)
    s = rep.summary
    assert (rep.residency_rows, rep.residency_agree) == (44766, 44766)
    assert (s.lookups, s.hits) == (39526, 29597)
    assert round(s.hit_pct_cum, 1) == 74.9      # the engine's cache_hit_pct
    assert round(s.hit_pct_decode, 1) == 80.3
    # decode reads: the sum of the trace's decode expert_bytes (19938.8 MiB; the engine's
    # aligned read_MiB is 20023.9); resident bytes equal the engine's cache_resident_MiB
    assert round(s.decode_read_mib, 1) == 19938.8
    assert s.decode_read_bytes == sum(int(c.sum()) for e, c in
                                      zip(qwen_trace.events, qwen_trace.charged_bytes)
                                      if e.phase == 1)
    assert round(s.resident_bytes / MIB, 1) == 3997.7
    assert round(s.t_mib, 4) == 784.6875


def test_replay_cli_json(qwen_trace_path, capsys, tmp_path):
    out_csv = tmp_path / "per-decode.csv"
    assert main(["replay", str(qwen_trace_path), "--cache-mb", "4000", "--json",
                 "--csv", str(out_csv)]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("lookups", "hits", "hit_pct_cum", "hit_pct_decode", "read_bytes", "read_mib",
                "mib_per_token", "residency_rows", "residency_agree"):
        assert key in d
    assert d["residency_agree"] == d["residency_rows"] == 44766
    assert abs(d["hit_pct_cum"] - 100 * 29597 / 39526) < 1e-12
    lines = out_csv.read_text().splitlines()
    assert lines[0] == "event,kind,step,n_pos,lookups,hits,read_bytes,resident_bytes"
    assert len(lines) == 1 + 129
    assert lines[1].startswith("0,prefill,0,28,2662,0,")


def test_replay_cli_text_and_cliff_warning(qwen_trace_path, capsys):
    assert main(["replay", str(qwen_trace_path), "--cache-mb", "500"]) == 0
    cap = capsys.readouterr()
    assert "0.0% cumulative" in cap.out
    assert "below one token cycle" in cap.err
