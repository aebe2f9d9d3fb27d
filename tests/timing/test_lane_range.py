"""``--io-threads`` outside the lane counts a device was fitted on (D8): the device file records
the runs' lane counts, and every ``--device`` command warns, one line, where ``b / L`` is an
extrapolation (docs/timing.md, "Lane counts outside the fit"). The figures are not changed."""

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refsim.cli import main
from refsim.errors import ConfigError
from refsim.testing.mutate import damaged_device
from refsim.testing.shared import require_shared
from refsim.timing import DeviceModel, Param, load_device

DEMO = Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv"
VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": -0.094, "s0": 2.0,
          "s1": 0.8, "h": 0.1, "tail": 1.0}


def device(lanes=(4, 8)) -> DeviceModel:
    params = {k: Param(v) for k, v in VALUES.items()} | {"b": Param(-0.094, 0.064)}
    return DeviceModel(params=params, compute={"m": Param(100.0)}, serial_runs=2, overlap_runs=2,
                       lanes=lanes)


WARN = ("--io-threads {L} is outside the lane counts the device was fitted on (4, 8): its lane "
        "term b/L (b = -0.094 ± 0.064 ms*lane/MiB) is extrapolated there, not measured")


@pytest.mark.parametrize("lanes, warned", [(1, True), (3, True), (4, False), (6, False),
                                           (8, False), (9, True), (64, True)])
def test_the_warning_is_outside_the_fitted_range_only(lanes, warned):
    assert device().lanes_warning(lanes) == (WARN.format(L=lanes) if warned else None)


def test_no_lane_counts_no_warning():
    """A device file from before refsim recorded them: nothing is known to be outside."""
    assert device(lanes=()).lanes_warning(1) is None


def test_the_device_file_keeps_the_lane_counts(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(device().to_json())
    assert json.loads(path.read_text())["lanes"] == [4, 8]
    assert load_device(str(path)) == device()
    old = tmp_path / "old.json"                     # no "lanes" key: loads, lanes unknown
    old.write_text(device(lanes=()).to_json())
    assert "lanes" not in json.loads(old.read_text())
    assert load_device(str(old)).lanes == ()


@pytest.mark.parametrize("bad", [[8, 4], [4, 4], [0], [True], ["4"], 4, [4.0], [],
                                 list(range(40, 0, -1))])
def test_a_bad_lanes_key_is_one_line(tmp_path, bad):
    """``[]`` included: absent is an older file (lane counts unknown), but an empty list was read
    as unknown too and silenced the --io-threads range warning. What was found is quoted, cut at
    60 characters."""
    doc = json.loads(device().to_json())
    doc["lanes"] = bad
    path = tmp_path / "d.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as exc:
        load_device(str(path))
    got = json.dumps(bad) if len(json.dumps(bad)) <= 60 else json.dumps(bad)[:57] + "..."
    assert str(exc.value) == (f"{path}: lanes: expected a sorted list of distinct integers 1..2^31 "
                              f"(the runs' io_threads), at least one, got {got}")


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_lanes_are_refused_or_read_as_lane_counts(tmp_path, data):
    """A damaged copy of the ``lanes`` lines (refsim.testing.mutate) is refused in one line naming
    the file, or read as 1 or more sorted distinct lane counts (never as "unknown" while the key
    is there: that is what an absent key means)."""
    text = device(lanes=(1, 4, 8)).to_json().encode()
    start = text.index(b'  "lanes": [')
    end = text.index(b"]", start) + 1
    p, dev, err, recipe = damaged_device(data, text, start, end, tmp_path)
    if err is not None:
        return
    key_there = "lanes" in json.loads(p.read_text())
    assert (len(dev.lanes) >= 1) == key_there, recipe
    assert list(dev.lanes) == sorted(set(dev.lanes)) and all(n >= 1 for n in dev.lanes), recipe


def test_an_empty_lanes_list_is_refused_by_every_device_command(tmp_path, capsys):
    """Before: ``"lanes": []`` loaded as "lane counts unknown" and replay --io-threads 1 printed
    no range warning; now the command stops on the file, in one line, exit 1."""
    doc = json.loads(device().to_json())
    doc["lanes"] = []
    path = tmp_path / "d.json"
    path.write_text(json.dumps(doc))
    assert main(["replay", str(DEMO), "--cache-mb", "256", "--io-threads", "1", "--device",
                 str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == (f"refsim replay: error: {path}: lanes: expected a sorted list of "
                                 f"distinct integers 1..2^31 (the runs' io_threads), at least one, "
                                 f"got []\n")


def test_replay_warns_and_prints_the_same_figure(tmp_path, capsys):
    """The figure at 1 lane is the model's, with or without the lane counts; only the warning is
    new, on stderr, in the CLI's warning form."""
    with_lanes, without = tmp_path / "d.json", tmp_path / "old.json"
    with_lanes.write_text(device().to_json())
    without.write_text(device(lanes=()).to_json())
    # --device-model: the demo trace's model is not the device's "m"; named, it is meant (no
    # model warning: only the lane warning is this test's)
    argv = ["replay", str(DEMO), "--cache-mb", "256", "--io-threads", "1", "--device-model", "m",
            "--device"]
    assert main(argv + [str(without)]) == 0
    base = capsys.readouterr()
    assert base.err == ""
    assert main(argv + [str(with_lanes)]) == 0
    out, err = capsys.readouterr()
    assert err == f"refsim replay: warning: {WARN.format(L=1)}\n"
    assert out.replace(str(with_lanes), str(without)) == base.out
    assert main(["replay", str(DEMO), "--cache-mb", "256", "--io-threads", "8", "--device-model",
                 "m", "--device", str(with_lanes)]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv", [["sweep", str(DEMO), "--cache-mb", "256", "--policy", "lru"],
                                  ["union", str(DEMO), "--cache-mb", "256"]])
def test_every_device_command_warns(tmp_path, capsys, argv):
    path = tmp_path / "d.json"
    path.write_text(device().to_json())
    assert main(argv + ["--device", str(path), "--io-threads", "2"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert f"refsim {argv[0]}: warning: {WARN.format(L=2)}" in err


def test_fit_records_the_desktop_runs_lanes():
    """The shared desktop set ran at 4 and 8 lanes (pc-A-io4, pc-B-io8, ...)."""
    from refsim.timing.fit import fit_device
    from refsim.timing.runs import load_runs
    folder = require_shared("real-runs", "desktop-2026-07-24-qwen36")      # ../shared by default
    runs, _ = load_runs(sorted(str(p) for p in folder.glob("*.csv")), trim=50)
    dev = fit_device(runs, jackknife=False)
    assert dev.lanes == (4, 8) == tuple(sorted({r.lanes for r in runs}))
    assert dataclasses.replace(dev, lanes=()).lanes_warning(1) is None
    assert dev.lanes_warning(1).startswith("--io-threads 1 is outside the lane counts the device "
                                           "was fitted on (4, 8)")


def test_desktop_runs_cannot_tell_b_from_zero():
    """The evidence behind keeping the desktop's b (docs/timing.md, "Lane counts outside the
    fit"): leave one run out, b fitted against b held at 0 (every run's lanes set equal for the
    fit, so b folds into a), each held-out run predicted at its own lanes."""
    import numpy as np
    from refsim.timing import fit_device, load_runs, predict_run
    folder = require_shared("real-runs", "desktop-2026-07-24-qwen36")      # ../shared by default
    runs, _ = load_runs(sorted(str(p) for p in folder.glob("*.csv")), trim=50)
    free, held = [], []
    for i, run in enumerate(runs):
        rest = runs[:i] + runs[i + 1:]
        d_held = fit_device([dataclasses.replace(r, lanes=4) for r in rest], jackknife=False)
        assert not d_held.params["b"].identified and d_held.value("b") == 0.0
        free.append(abs(predict_run(fit_device(rest, jackknife=False), run).error_pct))
        held.append(abs(predict_run(d_held, run).error_pct))
    assert (round(float(np.median(free)), 2), round(float(np.median(held)), 2)) == (1.12, 1.16)
    assert (round(max(free), 2), round(max(held), 2)) == (4.99, 4.90)
    assert max(abs(f - h) for f, h in zip(free, held)) < 0.7     # no run moves by 0.7 pp
