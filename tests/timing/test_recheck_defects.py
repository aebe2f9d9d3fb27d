"""Defects a new-user recheck found (each test fails on the code before its fix):

- a byte-identical copy of a run was a second run and a noise repeat of 0.00 %;
- ``timing fit <(cat RUN.csv)`` and ``whatif --baseline <(cat RUN.csv)`` read the file twice
  (a pipe reads once: "got an empty file");
- ``refsim.fit_device("RUN.csv")`` split the path into characters; ``fit_device(None)`` a TypeError;
- ``--position-cost`` had no upper bound on union/replay/run/breakeven (1e300 printed a 300-digit 0);
- ``--explain`` on a serial run labelled contention and stall (zero by construction) with the
  bootstrap refits' interval.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from refsim.cli import main
from refsim.errors import ConfigError, UsageError
from refsim.testing.shared import require_shared

DESKTOP = ("real-runs", "desktop-2026-07-24-qwen36")
DEMO = str(Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv")
DEV_FILE = "never-read.json"            # argparse refuses the flag before any file is opened


def _desktop(name):
    return str(require_shared(*DESKTOP, name))


def test_a_copy_of_a_run_is_refused_in_one_line(tmp_path, capsys):
    a = _desktop("pc-A-io4.csv")
    copy = tmp_path / "copyA.csv"
    shutil.copyfile(a, copy)
    out = tmp_path / "d.json"
    capsys.readouterr()
    assert main(["timing", "fit", a, str(copy), _desktop("pc-B-io8.csv"), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == (f"refsim timing fit: error: {copy}: the same per-token reads and times as {a} "
                   f"(a copy of one run); expected each run once\n")
    assert not out.exists()
    # a real repeat (pc-E / pc-F: the same reads, other times) is still a repeat
    assert main(["timing", "fit", _desktop("pc-E-c5000-io4t4.csv"), _desktop("pc-F-c5000-io8t4.csv"),
                 _desktop("pc-A-io4.csv"), "--out", str(out)]) == 0


def test_every_run_file_is_read_once(monkeypatch):
    """load_runs and load_plain_runs (timing fit, whatif --baseline, the repeats' configurations)
    open each file once: a pipe has no second reading."""
    import refsim.telemetry.metrics_reader as mr
    from refsim.timing.noise import device_repeats
    from refsim.timing.plain import load_plain_runs
    from refsim.timing.runs import load_runs
    from refsim.timing.fit import fit_device
    specs = [_desktop(n) for n in ("pc-A-io4.csv", "pc-E-c5000-io4t4.csv", "pc-F-c5000-io8t4.csv")]
    calls = []
    real = mr.read_metrics

    def counting(path, *a, **k):
        calls.append(str(path))
        return real(path, *a, **k)
    monkeypatch.setattr(mr, "read_metrics", counting)
    runs, _ = load_runs(specs, 50)
    assert sorted(calls) == sorted(specs)
    calls.clear()
    plain, _ = load_plain_runs(specs, 50)
    assert sorted(calls) == sorted(specs) and len(plain) == 3
    calls.clear()
    device_repeats(runs, fit_device(runs, jackknife=False))
    assert calls == []                  # the configurations came with the runs (RunData.config)


def test_a_pipe_is_a_run(tmp_path, capsys):
    """Through a real FIFO, written by a thread (as `<(cat RUN.csv)`)."""
    import os
    import threading
    fifo = tmp_path / "run.csv"
    os.mkfifo(fifo)
    text = open(_desktop("pc-A-io4.csv"), "rb").read()

    stop = threading.Event()

    def feed():
        with open(fifo, "wb") as f:
            f.write(text)
        while not stop.is_set():        # any further reading (the defect) gets an empty file,
            with open(fifo, "wb"):      # not a hang; released below
                pass
    t = threading.Thread(target=feed, daemon=True)
    t.start()
    out = tmp_path / "d.json"
    capsys.readouterr()
    code = main(["timing", "fit", str(fifo), _desktop("pc-B-io8.csv"), _desktop("pc-C-drop075.csv"),
                 "--out", str(out)])
    stop.set()
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)     # lets the feeder's last open finish
    t.join(timeout=60)
    os.close(fd)
    assert code == 0, capsys.readouterr().err
    assert out.exists()


def test_the_library_takes_one_path_as_a_list_of_one():
    import refsim
    a = _desktop("pc-A-io4.csv")
    with pytest.raises(ConfigError, match=r"timing fit: 1 run\(s\); a device needs at least 2"):
        refsim.fit_device(a)
    for bad in (None, 5):
        with pytest.raises(UsageError, match="runs: expected a list of RUN.csv paths or RunData"):
            refsim.fit_device(bad)
    dev = refsim.fit_device([a, _desktop("pc-B-io8.csv"), _desktop("pc-C-drop075.csv")])
    one, listed = refsim.predict_time(dev, a), refsim.predict_time(dev, [a])
    assert len(one) == 1 and one == listed


@pytest.mark.parametrize("argv", [
    ["union", "TRACE", "--window", "1,4", "--cache-mb", "64", "--device", "DEV"],
    ["replay", "TRACE", "--cache-mb", "64", "--device", "DEV"],
    ["timing", "breakeven", "TRACE", "--cache-mb", "64", "--device", "DEV"],
])
@pytest.mark.parametrize("value", ["1e300", "10.5", "-1", "nan"])
def test_position_cost_is_bounded_as_a_device_file_s_eps(argv, value, capsys):
    argv = [DEMO if a == "TRACE" else DEV_FILE if a == "DEV" else a for a in argv]
    code = None
    try:
        code = main([*argv, "--position-cost", value])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        f"argument --position-cost: expected a number from 0 to 10 (a fraction of one "
        f"position's compute), got '{value}'")


def test_the_flag_bound_is_the_device_file_s():
    from refsim.timing.model import MAX_EPS
    from refsim.validators import MAX_POSITION_COST, position_cost
    assert MAX_POSITION_COST == MAX_EPS
    assert position_cost("10") == 10.0 and position_cost("0") == 0.0


def test_serial_zero_terms_are_exact_with_refits():
    from refsim.timing import DeviceModel, Param
    from refsim.timing.model import PARAMS
    from refsim.timing.terms import exact
    from refsim.timing.verdict import Device, Reads, SpecConfig, price
    vals = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0,
            "s1": 0.8, "h": 0.1, "tail": 1.1}

    def device(c):
        return DeviceModel(params={k: Param(vals[k]) for k in PARAMS}, compute={"m": Param(c)},
                           serial_runs=2, overlap_runs=2)
    dv = Device(device(100.0), "m", 4, False, exact("eps", 0.4, "", "assumed", "t"),
                replicates=(device(90.0), device(110.0)))
    p = price(dv, SpecConfig("off"), {1: Reads(1, 50.0, 80.0)})
    for name in ("contention", "stall"):
        t = p.term(name)
        assert (t.value, t.lo, t.hi, t.note) == (0.0, 0.0, 0.0, "")
    assert p.term("compute").note.startswith("interval: the 2 bootstrap refits")
