"""Start-up (issue 17, item 2): ``refsim --version`` imports no subcommand and no numpy; a replay
of the demo trace runs the reference (pure Python/NumPy) kernels and never imports Numba, with
output identical byte for byte to the compiled kernels'. Speed itself is measured in
benchmarks/scale.py, never asserted here."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import refsim.jit
from refsim.cli import COMMANDS, command_name, main, make_parser, requested_command
from refsim.jit import Kernel, in_reference, njit, reference

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "traces" / "demo.route.csv"


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``code`` (refsim from this tree)."""
    probe = code + "\nimport sys; print(' '.join(sorted(sys.modules)), file=sys.__stderr__)"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                         cwd=ROOT)
    return set(res.stderr.split()[-1000:]) if res.returncode == 0 else {"FAILED: " + res.stderr}


def test_version_imports_no_subcommand_and_no_numpy():
    mods = modules_after("from refsim.cli import main\ntry:\n    main(['--version'])\n"
                         "except SystemExit:\n    pass")
    assert "refsim.cli" in mods
    assert not {m for m in mods if m.startswith(("numpy", "numba", "refsim.cli."))}


def test_demo_replay_imports_neither_numba_nor_the_other_commands():
    mods = modules_after(f"from refsim.cli import main\nmain(['replay', {str(DEMO)!r}, "
                         f"'--cache-mb', '256'])")
    assert "refsim.cache.lru" in mods and "refsim.cli.replay" in mods
    assert not {m for m in mods if m.startswith(("numba", "llvmlite", "matplotlib",
                                                 "refsim.forward", "refsim.kernels",
                                                 "refsim.cache.policy", "refsim.cli.sweep"))}


@pytest.mark.parametrize("flags", [
    [],
    ["--json"],
    ["--prefetch", "2"],
    ["--drop-cold-experts", "0.75", "--json"],
    ["--route-ahead", "1"],
    ["--cache-mb", "40"],                 # below one token cycle: evictions everywhere
])
def test_demo_replay_reference_path_equals_the_compiled_kernels(flags, capsys, tmp_path,
                                                                monkeypatch):
    argv = ["replay", str(DEMO), "--cache-mb", "256", *flags]
    outs = []
    for limit, name in ((refsim.jit.REFERENCE_MAX_BYTES, "ref.csv"), (-1, "numba.csv")):
        monkeypatch.setattr(refsim.jit, "REFERENCE_MAX_BYTES", limit)
        assert main([*argv, "--csv", str(tmp_path / name)]) == 0
        outs.append(capsys.readouterr())
    assert outs[0].out == outs[1].out and outs[0].err == outs[1].err
    assert (tmp_path / "ref.csv").read_bytes() == (tmp_path / "numba.csv").read_bytes()
    if flags == ["--json"]:
        assert json.loads(outs[0].out)["residency_rows"] == 2612       # every row compared
    if "--drop-cold-experts" in flags:
        assert json.loads(outs[0].out)["knobs"]["experts_dropped"] > 0   # the rule did act


def test_the_demo_trace_is_below_the_reference_threshold():
    assert DEMO.stat().st_size <= refsim.jit.REFERENCE_MAX_BYTES


@njit(cache=False)
def _inner(a, i):
    return a[i] * 2


@njit(cache=False)
def _outer(a):
    s = 0
    for i in range(a.size):
        s += _inner(a, i)
    return s


def test_a_kernel_runs_as_python_inside_reference_and_compiled_outside():
    a = np.arange(5, dtype=np.int64)
    assert isinstance(_outer, Kernel) and _outer.py_func.__name__ == "_outer"
    with reference():
        assert in_reference()
        assert _outer(a) == 20
        assert "python" in _outer._twins and "python" in _inner._twins
        assert "numba" not in _outer._twins
    assert not in_reference()
    assert _outer(a) == 20                      # 2 * (0+1+2+3+4)
    import numba
    assert isinstance(_outer._twins["numba"], numba.core.registry.CPUDispatcher)
    assert isinstance(_outer.compiled(), numba.core.registry.CPUDispatcher)


@pytest.mark.parametrize("argv, want", [
    (["--version"], ""),
    ([], ""),
    (["-v"], ""),
    (["replay", "t.csv", "--cache-mb", "256"], "replay"),
    (["-v", "drop-replay", "t.csv"], "drop_replay"),
    (["ngram-whatif", "--tokens", "f"], "ngram_whatif"),
    (["-h"], None),
    (["--help", "replay"], None),
    (["nosuch"], None),
    (["replay_x"], None),
])
def test_requested_command(argv, want):
    assert requested_command(argv) == want


def _help_of(parser, name):
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices[name].format_help()


@pytest.mark.parametrize("module", COMMANDS)
def test_a_parser_built_alone_is_the_full_parsers_subcommand(module, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    name = command_name(module)
    assert _help_of(make_parser(module), name) == _help_of(make_parser(), name)


def test_a_parser_built_for_none_still_prints_the_version(capsys):
    with pytest.raises(SystemExit) as e:
        make_parser("").parse_args(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("refsim ")


def test_a_kernel_pickles_by_name():
    import pickle

    from refsim.cache.lru import lru_apply_event
    assert pickle.loads(pickle.dumps(lru_apply_event)) is lru_apply_event
