"""The device model's outputs beyond the what-if lines (issue 15 items 4-5): ``refsim memory
--device``, refsim's own metrics CSV and BMOE_DONE with predicted times (and the metrics reader's
refusal to treat them as measurements), and the ``timing breakeven --plot`` figure. Every figure is
hand-worked from the model's rules (docs/timing.md, "The rules")."""

import pytest

from refsim import MIB
from refsim.cli import main
from refsim.errors import ConfigError
from refsim.model import open_model, write_synthetic
from refsim.timing import DeviceModel, Param
from refsim.timing.model import PARAMS

# the hand-worked device of tests/timing/test_timing.py, tail 1: C = 100 ms/token
VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
          "h": 0.1, "tail": 1.0}


def device(values=VALUES) -> DeviceModel:
    return DeviceModel(params={k: Param(v) for k, v in values.items()}, compute={"m": Param(100.0)},
                       serial_runs=2, overlap_runs=2)


@pytest.fixture
def device_file(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(device().to_json())
    return str(path)


@pytest.fixture(scope="module")
def q3(tmp_path_factory):
    """Synthetic qwen3moe: 2 layers x k = 2 x 24576 B per expert entry -> T = 98304 B = 0.09375 MiB."""
    path = write_synthetic(tmp_path_factory.mktemp("q3") / "q3.gguf", arch="qwen3moe")
    assert open_model(path).t_bytes() == 98304
    return path


# --- refsim memory --device ------------------------------------------------------------------

def test_memory_whatif_hand_worked():
    from refsim.timing.whatif import memory_whatif
    t = 0.09375
    # serial, cache on, 4 lanes: t(x) = (100 + 5 + 0.2 x) + (3 + x (1 + 0.5/4)) = 108 + 1.325 x ms
    cases = memory_whatif(device(), "d", "m", t, 4, False, 50.0)
    assert [c.case for c in cases] == ["all hits", "hit 50%", "all misses"]
    assert [c.mib_per_token for c in cases] == [0.0, 0.046875, 0.09375]
    ms = [c.whatif.ms_per_decode for c in cases]
    assert ms == pytest.approx([108.0, 108.062109375, 108.12421875], abs=1e-12)
    assert cases[0].whatif.predicted_tok_s == pytest.approx(1000 / 108.0)
    # --overlap: cpu = 105 + 0.3 x; stall = max(0, 2 + 0.8 x - 0.1 * 100) = 0 at these reads
    (hit, miss) = memory_whatif(device(), "d", "m", 20.0, 4, True)
    assert hit.whatif.ms_per_decode == pytest.approx(105.0)
    # x = 20: cpu = 105 + 6 = 111, stall = 2 + 16 - 10 = 8 -> 119 ms
    assert miss.whatif.ms_per_decode == pytest.approx(119.0)
    with pytest.raises(ConfigError, match="--hit-pct: expected 0..100"):
        memory_whatif(device(), "d", "m", t, 4, False, 101.0)


def test_cli_memory_device(q3, device_file, capsys):
    assert main(["memory", q3, "--device", device_file, "--hit-pct", "50"]) == 0
    out = capsys.readouterr().out
    assert "predicted, not measured" in out and "4 lanes, serial, compute floor of m" in out
    assert "0.1080 s/token, 9.259 tok/s" in out             # 108 ms
    assert "0.1081 s/token, 9.249 tok/s" in out             # 108.124 ms: every expert a miss
    assert "hit 50%:" in out and "the hit rate is a trace's" in out
    # a budget that holds every expert (2 layers x 8 experts x 24 KiB = 0.375 MiB): reads 0 when warm
    assert main(["memory", q3, "--device", device_file, "--ram-mb", "100000"]) == 0
    assert "holds the whole streamed set" in capsys.readouterr().out
    # without --device nothing is predicted
    assert main(["memory", q3]) == 0
    assert "predicted" not in capsys.readouterr().out


def test_cli_memory_device_flag_errors(q3, device_file, capsys):
    assert main(["memory", q3, "--hit-pct", "50"]) == 2
    assert "--hit-pct without --device" in capsys.readouterr().err
    assert main(["memory", q3, "--overlap"]) == 2
    assert "--overlap without --device" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:                 # memory predicts plain decoding only
        main(["memory", q3, "--device", device_file, "--position-cost", "0.2"])
    assert exc.value.code == 2 and "unrecognized arguments: --position-cost" in capsys.readouterr().err
    assert main(["memory", q3, "--device", device_file, "--device-model", "x"]) == 1
    assert "not among the fitted runs" in capsys.readouterr().err
