"""A new user's pass over the metrics reader and the timing fit: a run measured at 0 ms, a device
file the fit writes but its own reader refuses, the default device name, an empty lane list.
Each test fails on the code before its fix."""

import json
from pathlib import Path

import numpy as np
import pytest

from refsim.cli import main
from refsim.errors import ConfigError
from refsim.telemetry.metrics_reader import read_metrics
from refsim.timing import DeviceModel, Param
from refsim.timing.model import PARAMS
from refsim.timing.runs import run_data

DEMO = str(Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv")
VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
          "h": 0.1, "tail": 1.0}


def legacy(path, wall, x_mib=None):
    """A legacy 8-column run (no cache, serial) with these ``wall_ms``; ``io_ms`` and
    ``compute_ms`` split each wall in half; ``x_mib`` MiB read per token (default 10 + step)."""
    n = len(wall)
    x = [10.0 + i for i in range(n)] if x_mib is None else x_mib
    rows = ["step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms"]
    for i, w in enumerate(wall):
        rows.append(f"{i + 1},{n},{w:.3f},{w / 2:.3f},{w / 2:.3f},{int(x[i] * 2**20)},-1.00,0.000")
    Path(path).write_text("\n".join(rows) + "\n")
    return str(path)


def device_file(tmp_path) -> str:
    dev = DeviceModel(params={k: Param(v) for k, v in VALUES.items()}, compute={"m": Param(100.0)},
                      serial_runs=2, overlap_runs=2, trim=2)
    path = tmp_path / "dev.json"
    path.write_text(dev.to_json())
    return str(path)


# --- 1. a run measured at 0 ms has no tok/s: refused where every path builds its RunData ---------

def test_run_data_refuses_a_run_whose_kept_tokens_all_measure_0_ms(tmp_path):
    # the warm-up rows are timed, the kept ones are not: the trim decides
    f = legacy(tmp_path / "z.csv", [120.0, 130.0, 0.0, 0.0, 0.0])
    run = read_metrics(f)
    with pytest.raises(ConfigError) as exc:
        run_data(run, {"model": "m", "io_threads": "4"}, trim=2)
    assert str(exc.value) == (f"{f}: measured decode time 0 ms/token (wall_ms 0 on all 3 tokens "
                              f"after the first 2); expected a run with measured times (one whose "
                              f"decode time is 0 has no tok/s)")
    # one timed kept token is a measured run: mean 90 / 3 = 30 ms, 1000 / 30 tok/s exactly
    g = legacy(tmp_path / "g.csv", [120.0, 130.0, 0.0, 90.0, 0.0])
    rd = run_data(read_metrics(g), {"model": "m", "io_threads": "4"}, trim=2)
    assert rd.measured_ms == 30.0 and rd.measured_tok_s == 1000.0 / 30.0


@pytest.mark.parametrize("command", ["predict", "validate", "fit", "whatif"])
def test_every_command_refuses_a_zero_time_run_in_one_line(tmp_path, capsys, command):
    """``timing predict``, ``timing validate`` and ``whatif --baseline`` divided by it (a
    ZeroDivisionError traceback); ``timing fit`` blamed the model ("predicts a time <= 0 ms")."""
    zero = legacy(tmp_path / "z.csv", [0.0] * 10)     # 8 kept: enough for whatif's calibration
    good = [legacy(tmp_path / f"r{i}.csv", [100.0 + 7 * i + j for j in range(10)]) for i in range(3)]
    at = "@model=m,io_threads=4"
    dev = device_file(tmp_path)
    argv = {"predict": ["timing", "predict", dev, zero + at, "--trim", "2"],
            "validate": ["timing", "validate", zero + at, *(g + at for g in good), "--trim", "2"],
            "fit": ["timing", "fit", zero + at, good[0] + at, "--out", str(tmp_path / "o.json"),
                    "--trim", "2"],
            "whatif": ["whatif", DEMO, "--device", dev, "--cache-mb", "64", "--spec", "off",
                       "--baseline", zero + at]}[command]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    prog = "refsim whatif" if command == "whatif" else f"refsim timing {command}"
    assert err == (f"{prog}: error: {zero}: measured decode time 0 ms/token (wall_ms 0 on all "
                   f"8 tokens after the first 2); expected a run with measured times "
                   f"(one whose decode time is 0 has no tok/s)\n")
    assert out == "" and not (tmp_path / "o.json").exists()


# --- 3. timing fit writes only a device its own reader accepts ----------------------------------

def _outlier_runs(tmp_path, n=3):
    """``n`` runs the reader accepts, each with one token of 9 999 999 ms (inside the reader's
    bound): the robust terms ignore it, ``tail`` (mean over robust) is ~1e4, outside 0.5..10."""
    out = []
    for i in range(n):
        wall = [100.0 + 3 * i + (j % 5) for j in range(20)]
        wall[10] = 9999999.0
        out.append(legacy(tmp_path / f"o{i}.csv", wall) + "@model=m,io_threads=4")
    return out


def test_fit_refuses_a_device_its_reader_would_refuse_and_writes_nothing(tmp_path, capsys):
    """Before: exit 0, a file every --device command then refused (params.tail.value)."""
    from refsim.timing.model import MAX_TAIL
    runs = _outlier_runs(tmp_path)
    out = tmp_path / "dev.json"
    assert main(["timing", "fit", *runs, "--out", str(out), "--trim", "0"]) == 1
    o, err = capsys.readouterr()
    assert o == "" and not out.exists() and err.count("\n") == 1, err
    prefix = (f"refsim timing fit: error: the fitted device (not written to {out}): "
              f"params.tail.value: expected 0.5..{MAX_TAIL:g} (")
    assert err.startswith(prefix), err
    tail = float(err.rsplit("got ", 1)[1])
    assert tail > MAX_TAIL
    # the same runs without the outlier fit and are written: the refusal is the bound's
    fine = [legacy(tmp_path / f"f{i}.csv", [100.0 + 3 * i + (j % 5) for j in range(20)])
            + "@model=m,io_threads=4" for i in range(3)]
    assert main(["timing", "fit", *fine, "--out", str(out), "--trim", "0"]) == 0
    assert out.exists()


@pytest.mark.parametrize("out_name", ["dev.json", "-"])
def test_fit_refuses_a_non_finite_fitted_value_by_name(tmp_path, capsys, monkeypatch, out_name):
    """A fit steered to inf (before: ``to_json`` raised ValueError, a traceback): the reader's
    message, one line, nothing on stdout or in the file."""
    import refsim.cli.timing as cli_timing
    real = cli_timing.fit_device

    def fit_inf(runs, name=""):
        dev = real(runs, name=name)
        params = dict(dev.params, tail=Param(dev.params["tail"].value, float("inf"), True))
        return DeviceModel(**{**dev.__dict__, "params": params})

    monkeypatch.setattr(cli_timing, "fit_device", fit_inf)
    fine = [legacy(tmp_path / f"f{i}.csv", [100.0 + 3 * i + (j % 5) for j in range(20)])
            + "@model=m,io_threads=4" for i in range(3)]
    out = str(tmp_path / out_name) if out_name != "-" else "-"
    assert main(["timing", "fit", *fine, "--out", out, "--trim", "0"]) == 1
    o, err = capsys.readouterr()
    where = "stdout" if out == "-" else out
    assert o == "" and err == (f"refsim timing fit: error: the fitted device (not written to "
                               f"{where}): params.tail.se: expected a finite number of magnitude "
                               f"<= 1e+07, got 'Infinity'\n")
    assert not (tmp_path / "dev.json").exists()


# --- 4. the default device name is one the user recognises, not the run count -------------------

def test_fit_names_the_device_after_its_out_file_or_the_runs_folder(tmp_path, capsys):
    """Before: ``device: 3 runs; 3 runs (...)``, and whatif --explain ``device 3 runs fitted on
    3 plain run(s)``."""
    from refsim.cli.timing import default_device_name
    from refsim.timing import load_device
    folder = tmp_path / "phone-07-12"
    folder.mkdir()
    runs = [legacy(folder / f"f{i}.csv", [100.0 + 3 * i + (j % 5) for j in range(20)])
            + "@model=m,io_threads=4" for i in range(3)]
    out = tmp_path / "pixel8.json"
    assert main(["timing", "fit", *runs, "--out", str(out), "--trim", "0"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "device: pixel8; 3 runs (3 serial, 0 --overlap), first 0 tokens of each left out")
    assert load_device(str(out)).name == "pixel8"
    # --out -: the file on stdout names the runs' folder; the report goes to stderr
    assert main(["timing", "fit", *runs, "--out", "-", "--trim", "0"]) == 0
    o, err = capsys.readouterr()
    assert json.loads(o)["name"] == "phone-07-12" and err.startswith("device: phone-07-12; 3 runs")
    # --name wins
    assert main(["timing", "fit", *runs, "--out", str(out), "--trim", "0", "--name", "mine"]) == 0
    capsys.readouterr()
    assert load_device(str(out)).name == "mine"
    # the rule itself: runs in two folders have no common one
    assert default_device_name("a/b/desk.top.json", []) == "desk.top"
    assert default_device_name("-", ["x/r1.csv", "x/r2.csv"]) == "x"
    assert default_device_name("-", [str(tmp_path / "a.csv"), str(folder / "b.csv")]) == "device"
