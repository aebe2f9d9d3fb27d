"""Many traces: per-trace rows, the pooled rows (sums, ratios of sums) and the grid executors,
whose outputs are byte-identical (refsim.scale.grid, refsim.scale.executor; docs/scale.md)."""

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refsim import MIB
from refsim.streaming.knobs import StreamKnobs
from refsim.cache.summary import CacheSummary
from refsim.cli import main
from refsim.scale.executor import DASK_INSTALL_HINT, ExecutorSpec
from refsim.scale.grid import (TraceRef, counts_percentile, pool_summaries, pool_sweep,
                               pool_union, sweep_grid, union_grid)
from refsim.studies.sweep import sweep_budgets
from refsim.studies.union import union_study
from refsim.trace import read_trace

SERIAL = ExecutorSpec()


def summary(hits, lookups, d_hits, d_lookups, d_read, tokens, held=-1, budget=100):
    return CacheSummary(budget_bytes=budget, lookups=lookups, hits=hits, hit_pct_cum=None,
                        decode_lookups=d_lookups, decode_hits=d_hits, hit_pct_decode=None,
                        prefill_lookups=lookups - d_lookups, prefill_hits=hits - d_hits,
                        read_bytes=d_read + 10, read_mib=0.0, prefill_read_bytes=10,
                        decode_read_bytes=d_read, decode_read_mib=0.0, draft_read_bytes=0,
                        tokens=tokens, mib_per_token=None, resident_bytes=held, evictions=-1,
                        rereads=-1, t_bytes=7, t_mib=0.0)


def test_pooled_rates_are_ratios_of_sums_by_hand():
    # A: 3 of 4 hits, B: 1 of 4 -> pooled 4/8 = 50 % (the mean of the rates would be too: take
    # unequal lookups so it is not): A 3/4, B 1/12 -> 4/16 = 25 %, not (75 + 8.33)/2
    a = summary(3, 4, 2, 2, 2 * MIB, 4, held=90)
    b = summary(1, 12, 1, 10, 6 * MIB, 4, held=120)
    p = pool_summaries([a, b])
    assert (p.hits, p.lookups, p.hit_pct_cum) == (4, 16, 25.0)
    assert (p.decode_hits, p.decode_lookups, p.hit_pct_decode) == (3, 12, 25.0)
    assert p.decode_read_bytes == 8 * MIB and p.tokens == 8 and p.mib_per_token == 1.0
    assert p.read_bytes == 8 * MIB + 20 and p.read_mib == (8 * MIB + 20) / MIB
    assert p.resident_bytes == 120 and p.evictions == -1        # the largest held; untracked stays -1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=9), st.sampled_from([0, 10, 50, 90, 100]))
def test_percentile_of_a_histogram_is_numpys(counts, q):
    if sum(counts) == 0:
        counts = counts + [1]
    values = np.repeat(np.arange(len(counts)), counts)
    assert counts_percentile(counts, q) == pytest.approx(float(np.percentile(values, q)), abs=1e-12)


def test_sweep_cells_give_the_one_trace_sweep_and_pool_by_sums(two_traces):
    paths = [str(two_traces / "a.route.csv"), str(two_traces / "b.route.csv")]
    refs = [TraceRef.of(p) for p in paths]
    budgets, policies = [1, 64, 256], ["lru", "layer", "s3fifo"]
    per_trace = sweep_grid(refs, budgets, policies, None, SERIAL)
    for p, res in zip(paths, per_trace):         # the grid's rows are the one-trace sweep's
        t = read_trace(p)
        from refsim.cache.batches import BatchTrace
        direct = sweep_budgets(BatchTrace.from_events(t.events, t.header.expert_bytes, t.header.n_expert),
                               budgets, policies, t.header.token_cycle_bytes)
        assert res == direct
    pooled = pool_sweep(per_trace)
    for i, row in enumerate(pooled.rows):
        a, b = per_trace[0].rows[i].summary, per_trace[1].rows[i].summary
        assert (row.budget_mib, row.policy) == (per_trace[0].rows[i].budget_mib, per_trace[0].rows[i].policy)
        assert row.summary.hits == a.hits + b.hits and row.summary.lookups == a.lookups + b.lookups
        assert row.summary.hit_pct_cum == 100.0 * (a.hits + b.hits) / (a.lookups + b.lookups)
        assert row.summary.mib_per_token == (a.decode_read_bytes + b.decode_read_bytes) / MIB / (a.tokens + b.tokens)
    assert pooled.tokens == per_trace[0].tokens + per_trace[1].tokens


def test_one_budget_per_cell_is_the_same_as_all_budgets_per_cell(two_traces):
    refs = [TraceRef.of(str(two_traces / n)) for n in ("a.route.csv", "b.route.csv")]
    knobs = StreamKnobs(drop_frac=0.5, prefetch=1, traced=True)
    for kn, pols in ((None, ["lru", "arc", "layer"]), (knobs, ["lru"])):
        whole = sweep_grid(refs, [64, 128, 256, 128], pols, kn, SERIAL, split=False)
        cells = sweep_grid(refs, [64, 128, 256, 128], pols, kn, SERIAL, split=True)
        assert whole == cells and [r.budget_mib for r in whole[0].rows[::len(pols)]] == [64, 128, 256]


def test_pooled_union_of_two_copies_is_the_trace_with_doubled_counts(two_traces, tmp_path):
    import shutil
    a = two_traces / "a.route.csv"
    shutil.copy(a, tmp_path / "copy.route.csv")
    refs = [TraceRef.of(str(a)), TraceRef.of(str(tmp_path / "copy.route.csv"))]
    per_trace = union_grid(refs, [1, 2, 5], 256 * MIB, None, SERIAL)
    one = union_study(read_trace(a), [1, 2, 5], 256 * MIB)
    assert [r for r, _ in per_trace[0]] == one
    for row, single in zip(pool_union(per_trace), one):
        assert (row.union_mean, row.union_p50, row.union_p90) == pytest.approx(
            (single.union_mean, single.union_p50, single.union_p90), abs=1e-12)
        assert row.n_windows == 2 * single.n_windows and row.decodes == 2 * single.decodes
        assert row.hit_pct_decode == pytest.approx(single.hit_pct_decode, abs=1e-12)
        assert row.mib_per_token == pytest.approx(single.mib_per_token, abs=1e-12)


def test_pooled_union_percentiles_are_over_every_window_and_layer(two_traces):
    from refsim.studies.union import decode_positions, window_union_sizes
    paths = [two_traces / "a.route.csv", two_traces / "b.route.csv"]
    per_trace = union_grid([TraceRef.of(str(p)) for p in paths], [3], None, None, SERIAL)
    sizes = []
    for p in paths:
        t = read_trace(p)
        _, routes, dropped = decode_positions(t.events)
        s = np.delete(window_union_sizes(routes, t.header.n_expert, 3, dropped), t.unrouted_layers, axis=1)
        sizes.append(s.ravel())
    allsizes = np.concatenate(sizes)
    row = pool_union(per_trace)[0]
    assert row.union_mean == pytest.approx(allsizes.mean(), abs=1e-12)
    assert row.union_p50 == float(np.percentile(allsizes, 50))
    assert row.union_p90 == float(np.percentile(allsizes, 90))


def run_cli(capsys, argv):
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_one_trace_prints_today_output_whatever_the_layout(two_traces, capsys, tmp_path):
    # the many-trace flags leave a one-trace sweep as it was: the same table and CSV
    a = str(two_traces / "a.route.csv")
    base = run_cli(capsys, ["sweep", a, "--cache-mb", "64,256", "--csv", str(tmp_path / "1.csv")])
    assert "trace" not in base.splitlines()[3] and base.splitlines()[3].startswith("budget_mib")
    assert (tmp_path / "1.csv").read_text().startswith("budget_mib,policy,")


def test_many_traces_table_and_csv(two_traces, capsys, tmp_path):
    out = run_cli(capsys, ["sweep", str(two_traces), "--cache-mb", "64,256", "--policy", "lru,layer",
                           "--csv", str(tmp_path / "m.csv")])
    lines = out.splitlines()
    assert lines[0] == f"trace: {two_traces / 'a.route.csv'}" and lines[4] == f"trace: {two_traces / 'b.route.csv'}"
    csv = (tmp_path / "m.csv").read_text().splitlines()
    assert csv[0] == "trace,budget_mib,policy,hit_pct_cum,hit_pct_decode,read_mib,over_budget"
    assert len(csv) == 1 + 2 * 4 + 4 and all(c.startswith("(pooled),") for c in csv[-4:])
    assert any(line.startswith("pooled over 2 traces") for line in lines)
    u = run_cli(capsys, ["union", str(two_traces), "--window", "1..3", "--cache-mb", "1"])
    assert "pooled over 2 traces" in u and u.splitlines()[3].startswith("trace ")


def test_plot_with_many_traces_is_a_usage_error(two_traces, capsys, tmp_path):
    assert main(["sweep", str(two_traces), "--plot", str(tmp_path / "p.png")]) == 2
    assert "--plot with 2 traces" in capsys.readouterr().err


def test_dask_missing_is_one_line_saying_how_to_install(two_traces, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)        # import distributed fails
    assert main(["sweep", str(two_traces), "--dask-scheduler", "local"]) == 1
    err = capsys.readouterr().err
    assert err == f"refsim sweep: error: {DASK_INSTALL_HINT}\n"


def test_serial_local_processes_and_dask_give_the_same_bytes(two_traces, capsys, tmp_path):
    # one grid (2 traces x 2 budgets x 2 policies: 8 cells, one task each off this process),
    # serially, on 2 local processes and on a 2-worker LocalCluster: the same stdout and CSV bytes
    distributed = pytest.importorskip("distributed")
    sweep = ["sweep", str(two_traces), "--cache-mb", "64,256", "--policy", "lru,layer", "--csv"]
    union = ["union", str(two_traces), "--window", "1..2", "--cache-mb", "1"]
    outs = {}
    with distributed.LocalCluster(n_workers=2, processes=False, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        for name, extra in (("serial", []), ("processes", ["--workers", "2"]),
                            ("dask", ["--dask-scheduler", cluster.scheduler_address])):
            csv = tmp_path / f"{name}.csv"
            outs[name] = (run_cli(capsys, sweep + [str(csv)] + extra), csv.read_bytes())
        unions = [run_cli(capsys, union), run_cli(capsys, union + ["--dask-scheduler",
                                                                  cluster.scheduler_address])]
    assert outs["serial"] == outs["processes"] == outs["dask"]
    assert b"(pooled)" in outs["serial"][1] and unions[0] == unions[1]


@pytest.mark.slow
def test_dask_local_cluster_of_processes(two_traces, capsys):
    pytest.importorskip("distributed")
    argv = ["union", str(two_traces), "--window", "1..2"]
    assert run_cli(capsys, argv) == run_cli(capsys, argv + ["--dask-scheduler", "local", "--workers", "2"])


def test_device_predictions_per_trace_and_pooled(two_traces, capsys, tmp_path):
    from refsim.timing import DeviceModel, Param
    from refsim.timing.model import PARAMS
    dev = DeviceModel(params={k: Param(1.0) for k in PARAMS}, compute={"m": Param(100.0)},
                      serial_runs=1, overlap_runs=1)
    (tmp_path / "d.json").write_text(dev.to_json())
    one = run_cli(capsys, ["sweep", str(two_traces / "a.route.csv"), "--cache-mb", "64", "--policy",
                           "lru", "--device", str(tmp_path / "d.json"), "--csv", "-"])
    many = run_cli(capsys, ["sweep", str(two_traces), "--cache-mb", "64", "--policy", "lru",
                            "--device", str(tmp_path / "d.json"), "--csv", "-"]).splitlines()
    assert many[0].endswith(",over_budget,predicted_tok_s") and many[-1].startswith("(pooled),64,lru,")
    # the first trace's row is its one-trace row, the trace column in front
    assert many[1] == f"{two_traces / 'a.route.csv'}," + one.splitlines()[1]


def test_a_worker_refuses_a_trace_that_is_not_the_checked_file(two_traces):
    import dataclasses
    from refsim.errors import ConfigError
    from refsim.scale.grid import load_trace
    ref = TraceRef.of(str(two_traces / "b.route.csv"))
    other = dataclasses.replace(ref, size=ref.size + 1)       # what a worker sees on another disk
    with pytest.raises(ConfigError, match=r"^TRACE .*b\.route\.csv: not the file refsim checked"):
        load_trace(other)
    gone = TraceRef(str(two_traces / "gone.route.csv"), 1, 1)
    with pytest.raises(ConfigError, match="not readable on this worker: No such file"):
        load_trace(gone)
    assert load_trace(ref).header.model == "scripted"


def _serve(handler):
    """A TCP server on 127.0.0.1 (a free port) whose every connection runs ``handler(conn)``
    in a daemon thread; returns the address ``tcp://127.0.0.1:PORT``."""
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def loop():
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=handler, args=(conn,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return f"tcp://127.0.0.1:{srv.getsockname()[1]}"


def test_a_peer_that_is_not_a_scheduler_is_one_line(two_traces, capsys):
    """Found by a fresh-user check: an HTTP-like peer that answers garbage made distributed
    allocate 3 EiB and print a 51-line traceback; now one line, exit 1."""
    pytest.importorskip("distributed")

    def garbage(conn):
        conn.recv(65536)
        conn.sendall(b"\xff" * 64)
        conn.close()

    addr = _serve(garbage)
    assert main(["sweep", str(two_traces), "--cache-mb", "256", "--dask-scheduler", addr]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"refsim sweep: error: --dask-scheduler {addr}: cannot connect")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_silent_peer_times_out_with_one_line(two_traces, capsys, monkeypatch):
    """A peer that accepts and never answers the handshake: a bounded wait, then one line (the
    bound is shortened here; the command waits CONNECT_TIMEOUT_S + 5 s)."""
    pytest.importorskip("distributed")
    import time
    from refsim.scale import executor
    monkeypatch.setattr(executor, "CONNECT_TIMEOUT_S", 1.0)
    addr = _serve(lambda conn: time.sleep(3600))
    assert main(["sweep", str(two_traces), "--cache-mb", "256", "--dask-scheduler", addr]) == 1
    err = capsys.readouterr().err
    assert f"--dask-scheduler {addr}: cannot connect: no scheduler handshake within 6 s" in err
