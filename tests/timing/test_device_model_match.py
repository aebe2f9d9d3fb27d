"""The compute floor's model (issue 29 polish): a ``--device`` command took the device's only
compute floor even when its input names another model (the Qwen3-30B trace priced on the Qwen3.6
desktop's floor said nothing). Now the input's own model (a route trace's ``model=``, a GGUF's
file name or ``general.name``) picks the device's floor of that model when the device has it, and
a device that knows only another model prices as before with one warning line naming both and
``--device-model``. The numbers are those of ``--device-model KEY`` naming the same floor."""

import json
from pathlib import Path

import pytest

from refsim.cli import main
from refsim.timing import DeviceModel, Param
from refsim.timing.whatif import input_match, model_warning, resolve_model

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "traces" / "demo.route.csv")              # model=refsim-synthetic-router
TINY = str(ROOT / "models" / "tiny-moe-q8_0.gguf")          # general.name: refsim tiny-moe (stdlib) Q8_0
TINY35 = str(ROOT / "models" / "tiny-moe35-q8_0.gguf")
DEMO_MODEL = "refsim-synthetic-router"
OTHER = "Qwen_Qwen3.6-35B-A3B-Q4_K_M.gguf"
VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
          "h": 0.1, "tail": 1.0}
WARNING = "warning: the input's model is "


def device(**floors) -> DeviceModel:
    return DeviceModel(params={k: Param(v) for k, v in VALUES.items()},
                       compute={k: Param(v) for k, v in floors.items()}, serial_runs=2, overlap_runs=2)


def write(tmp_path, name, dev) -> str:
    path = tmp_path / name
    path.write_text(dev.to_json())
    return str(path)


# --- the rule, by hand ---------------------------------------------------------------------------

def test_names_compare_by_file_name():
    """A trace's ``model=`` is the engine's model path; the device's key its preamble's base
    name: the same model. Another file name (quantisation, version) is another model."""
    dev = device(**{"Qwen3-30B-A3B-Q4_K_M.gguf": 90.0, OTHER: 100.0})
    assert input_match(dev, ["/data/local/tmp/shardllm/Qwen3-30B-A3B-Q4_K_M.gguf"]) == \
        "Qwen3-30B-A3B-Q4_K_M.gguf"
    assert input_match(dev, ["Qwen3-30B-A3B-Q8_0.gguf", "qwen3-30b-a3b-q4_k_m.gguf"]) is None
    assert input_match(dev, []) is None


def test_resolve_and_warn():
    one = device(**{OTHER: 100.0})
    two = device(**{OTHER: 100.0, DEMO_MODEL: 50.0})
    assert resolve_model(one, None, input_models=[DEMO_MODEL]) == OTHER         # as before
    assert model_warning(one, "d.json", OTHER, None, [DEMO_MODEL]) == (
        f"the input's model is {DEMO_MODEL}, but the device d.json has only {OTHER}'s compute "
        f"floor: priced with it (--device-model {OTHER} says that is meant)")
    assert model_warning(one, "d.json", OTHER, OTHER, [DEMO_MODEL]) is None     # named: meant
    assert model_warning(one, "d.json", OTHER, None, []) is None                # input unknown
    assert model_warning(one, "d.json", OTHER, None, [OTHER]) is None           # the same model
    assert resolve_model(two, None, input_models=[DEMO_MODEL]) == DEMO_MODEL    # was refused
    assert resolve_model(two, OTHER, input_models=[DEMO_MODEL]) == OTHER        # the flag wins
    with pytest.raises(Exception, match="the device knows 2 models"):
        resolve_model(two, None, input_models=["another.gguf"])


# --- every --device command ----------------------------------------------------------------------

def _cmds(tmp_path):
    """Each --device command on an input whose model is known: (argv without the device flags,
    the input's printed name, whether stdout is JSON)."""
    trace = str(tmp_path / "tiny.route.csv")
    assert main(["run", TINY, "--prompt", "import os", "-n", "24", "--route-trace", trace]) == 0
    return {
        "replay": (["replay", DEMO, "--cache-mb", "256", "--json"], DEMO_MODEL),
        "sweep": (["sweep", DEMO, "--cache-mb", "256", "--policy", "lru", "--json"], DEMO_MODEL),
        "union": (["union", DEMO, "--window", "1..2", "--cache-mb", "256", "--json"], DEMO_MODEL),
        "whatif": (["whatif", DEMO, "--cache-mb", "256", "--json",
                    "--spec", "off,ngram:d=2:m=2:acceptance=0.5:coverage=0.5"], DEMO_MODEL),
        "breakeven": (["timing", "breakeven", DEMO, "--cache-mb", "256", "--draft", "1..2",
                       "--json"], DEMO_MODEL),
        "memory": (["memory", TINY35, "--ctx", "128", "--ram-mb", "3000", "--json"],
                   "tiny-moe35-q8_0.gguf"),
        "run": (["run", TINY, "--prompt", "import os", "-n", "8", "--json"], "tiny-moe-q8_0.gguf"),
        "layout": (["layout", TINY, trace, "--cache-mb", "2", "--json"], "tiny-moe-q8_0.gguf"),
    }


@pytest.fixture(scope="module")
def cmds(tmp_path_factory):
    return _cmds(tmp_path_factory.mktemp("cmds"))


def _out(capsys, argv):
    assert main(argv) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    return out, [line for line in err.splitlines() if WARNING in line]


def _flag(cmd):
    return "--model" if cmd == "breakeven" else "--device-model"


def _strip_device(doc):
    """A run's JSON without the wall-clock (measured) seconds; every predicted number stays."""
    if isinstance(doc, dict):
        return {k: _strip_device(v) for k, v in doc.items()
                if not k.startswith("sim_") and k not in ("wall_s", "load_s")}   # refsim run's
    if isinstance(doc, list):
        return [_strip_device(v) for v in doc]
    return doc


CMDS = ["replay", "sweep", "union", "whatif", "breakeven", "memory", "run", "layout"]


@pytest.mark.parametrize("cmd", CMDS)
def test_another_model_warns_once_and_prices_as_before(tmp_path, capsys, cmds, cmd):
    argv, name = cmds[cmd]
    dev = write(tmp_path, "other.json", device(**{OTHER: 100.0}))
    out, warned = _out(capsys, argv + ["--device", dev])
    prog = "refsim timing breakeven" if cmd == "breakeven" else f"refsim {cmd}"
    assert warned == [f"{prog}: {WARNING}{name}, but the device {dev} has only {OTHER}'s compute "
                      f"floor: priced with it ({_flag(cmd)} {OTHER} says that is meant)"]
    named, quiet = _out(capsys, argv + ["--device", dev, _flag(cmd), OTHER])
    assert quiet == []                                      # the flag says the floor is meant
    assert _strip_device(json.loads(out)) == _strip_device(json.loads(named))   # numbers unchanged


@pytest.mark.parametrize("cmd", CMDS)
def test_the_inputs_own_model_is_used_and_silent(tmp_path, capsys, cmds, cmd):
    """A device of two models and no flag: was refused ("name one"); now the input's floor, the
    numbers of naming it."""
    argv, name = cmds[cmd]
    key = "refsim tiny-moe35 (stdlib) Q8_0" if cmd == "memory" else name   # general.name too
    dev = write(tmp_path, "two.json", device(**{OTHER: 100.0, key: 40.0}))
    out, warned = _out(capsys, argv + ["--device", dev])
    assert warned == []
    named, _ = _out(capsys, argv + ["--device", dev, _flag(cmd), key])
    assert _strip_device(json.loads(out)) == _strip_device(json.loads(named))
    other, _ = _out(capsys, argv + ["--device", dev, _flag(cmd), OTHER])
    assert _strip_device(json.loads(out)) != _strip_device(json.loads(other))   # the floor counts
