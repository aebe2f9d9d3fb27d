"""The library run path (refsim.session): RunConfig refuses what ``refsim run`` refuses, with the
same message; simulate() is ``refsim run``: the same JSON object, the same files, the same
warnings."""

import dataclasses
import json
import warnings

import numpy as np
import pytest

from refsim.streaming.knobs import StreamKnobs
from refsim.cli import main
from refsim.errors import ConfigError, RefsimWarning, UsageError
from refsim.session import STEP_COLUMNS, RunConfig, simulate
from refsim.spec import SpecConfig
from refsim.timing.device_options import DeviceOptions

MEASURED = ("load_s", "wall_s", "sim_tok_per_s", "sim_total_tok_per_s")
"""The --json keys that are the simulator's own measured seconds (they differ run to run)."""

NGRAM_PROMPT = [1, 70, 71, 72, 70, 71, 72, 70, 71]


@pytest.fixture(scope="module")
def builtin_cache(tmp_path_factory):
    """``$REFSIM_CACHE`` in a fresh folder for the module (the built-in model is made once)."""
    mp = pytest.MonkeyPatch()
    d = tmp_path_factory.mktemp("refsim-cache")
    mp.setenv("REFSIM_CACHE", str(d))
    yield d
    mp.undo()


def _cli_error(capsys, argv) -> tuple[int, str]:
    """Exit code and last stderr line of ``refsim run ARGV`` (argparse's or refsim's error)."""
    try:
        code = main(["run", *argv])
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize("kwargs, argv", [
    (dict(n_predict=0), ["-n", "0"]),
    (dict(n_predict=-3), ["-n", "-3"]),
    (dict(n_predict=2**31), ["-n", str(2**31)]),
    (dict(cache_mb=0), ["--cache-mb", "0"]),
    (dict(cache_mb=2**41), ["--cache-mb", str(2**41)]),
    (dict(ubatch=-1), ["--ubatch", "-1"]),
    (dict(numerics="fast"), ["--numerics", "fast"]),
    (dict(prompt_tokens=[1, -5]), ["--prompt-tokens", "1,-5"]),
    (dict(prompt="a", prompt_tokens=[1]), ["--prompt", "a", "--prompt-tokens", "1"]),
    (dict(spec=SpecConfig.from_flags(ngram=True, draft=8), ubatch=4),
     ["--ngram", "--draft", "8", "--ubatch", "4"]),
    (dict(spec=SpecConfig.from_flags(mtp=True), knobs=StreamKnobs(predict_prefetch=True)),
     ["--mtp", "--predict-prefetch"]),
    (dict(spec=SpecConfig.from_flags(ngram=True), knobs=StreamKnobs(route_ahead=1)),
     ["--ngram", "--route-ahead", "1"]),
    (dict(knobs=StreamKnobs(route_ahead=2), predict_log=True),
     ["--route-ahead", "2", "--predict-log"]),
    (dict(device=DeviceOptions(io_threads=0)), ["--io-threads", "0"]),
    (dict(device=DeviceOptions(position_cost=-1)), ["--position-cost", "-1"]),
])
def test_a_refused_value_is_the_command_lines_refusal(capsys, kwargs, argv):
    with pytest.raises(UsageError) as exc:
        RunConfig(**kwargs)
    code, line = _cli_error(capsys, argv)
    assert code == 2
    assert line == f"refsim run: error: {exc.value}"


def test_the_engines_knob_refusals_are_the_knobs_own():
    # a StreamKnobs validates itself (the CLI reports it as a usage error, the library as the
    # ConfigError it is); RunConfig only holds it
    with pytest.raises(ConfigError, match="^--route-ahead and --prefetch: mutually exclusive"):
        RunConfig(knobs=StreamKnobs(route_ahead=1, prefetch=1))


def test_config_values_are_normalised():
    import pathlib
    c = RunConfig(model=pathlib.Path("m.gguf"), prompt_tokens=[1, 2, 3],
                  knobs=StreamKnobs(drop_frac=0.5), route_trace=pathlib.Path("t.route.csv"))
    assert c.model == "m.gguf" and c.route_trace == "t.route.csv"
    assert c.prompt_tokens == (1, 2, 3) and not c.builtin
    assert c.knobs.traced and c.knobs.drop_frac == 0.5          # a trace is recorded: traced
    assert not RunConfig(knobs=StreamKnobs(traced=True)).knobs.traced
    assert RunConfig().builtin and hash(RunConfig()) == hash(RunConfig())   # frozen, a value
    # numbers are read as the flags read their text: NumPy values, ids as text
    n = RunConfig(prompt_tokens=np.array([1, 5, 77], np.int32), n_predict=np.int64(4), cache_mb=2,
                  device=DeviceOptions(io_threads=np.int64(3)))
    assert n.prompt_tokens == (1, 5, 77) and type(n.prompt_tokens[0]) is int
    assert type(n.n_predict) is int and n.cache_mb == 2.0 and type(n.device.io_threads) is int
    assert RunConfig(prompt_tokens="1,5 77").prompt_tokens == (1, 5, 77)
    for bad in ([1.0], [], [True], [2**31]):
        with pytest.raises(UsageError, match="^argument --prompt-tokens: expected token ids"):
            RunConfig(prompt_tokens=bad)
    with pytest.raises(ConfigError, match="^RunConfig.spec: expected a SpecConfig, got str$"):
        RunConfig(spec="ngram")
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunConfig().n_predict = 3


def _cli_json(capsys, argv) -> dict:
    assert main(["run", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _without_measured(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in MEASURED}


@pytest.mark.parametrize("config, argv", [
    (RunConfig(n_predict=6), ["-n", "6"]),
    (RunConfig(prompt_tokens=NGRAM_PROMPT, n_predict=12,
               spec=SpecConfig.from_flags(ngram=True, ngram_min_match=1)),
     ["--prompt-tokens", ",".join(map(str, NGRAM_PROMPT)), "-n", "12", "--ngram",
      "--ngram-min-match", "1"]),
    (RunConfig(n_predict=8, cache_mb=2, knobs=StreamKnobs(drop_frac=0.75, prefetch=1)),
     ["-n", "8", "--cache-mb", "2", "--drop-cold-experts", "0.75", "--prefetch", "1"]),
    (RunConfig(n_predict=8, knobs=StreamKnobs(route_ahead=2)), ["-n", "8", "--route-ahead", "2"]),
    (RunConfig(prompt="abc", n_predict=4, numerics="ggml", predict_log=True),
     ["--prompt", "abc", "-n", "4", "--numerics", "ggml", "--predict-log"]),
])
def test_simulate_is_run_json(builtin_cache, capsys, config, argv):
    report = simulate(config, warn=[].append)
    cli = _cli_json(capsys, argv)
    ours = report.as_dict()
    assert list(ours) == list(cli)                          # the same keys in the same order
    assert _without_measured(ours) == _without_measured(cli)
    assert json.dumps(_without_measured(ours)) == json.dumps(_without_measured(cli))
    assert all(isinstance(ours[k], (float, type(None))) for k in MEASURED)


def test_simulate_writes_the_commands_files(builtin_cache, capsys, tmp_path):
    ours_t, ours_m = tmp_path / "a.route.csv", tmp_path / "a.csv"
    cli_t, cli_m = tmp_path / "b.route.csv", tmp_path / "b.csv"
    simulate(RunConfig(n_predict=10, spec=SpecConfig.from_flags(ngram=True),
                       route_trace=ours_t, csv=ours_m))
    assert main(["run", "-n", "10", "--ngram", "--route-trace", str(cli_t), "--csv", str(cli_m)]) == 0
    capsys.readouterr()
    assert ours_t.read_bytes() == cli_t.read_bytes()
    # the metrics CSV: the same bytes but for the measured *_ms columns
    from refsim.telemetry import read_metrics
    a, b = read_metrics(ours_m), read_metrics(cli_m)
    assert a.columns == b.columns and a.config == b.config
    for name in a.columns:
        if not name.endswith("_ms"):
            assert np.array_equal(a.data[name], b.data[name]), name


def test_warnings_go_to_the_callback_or_to_warnings(builtin_cache, capsys):
    said = []
    report = simulate(RunConfig(n_predict=2, cache_mb=0.5), warn=said.append)
    want = ("refsim run: warning: budget 0.5 MiB is below one token cycle T = 0.84 MiB: a global "
            "LRU evicts what the next layers need, and its hit rate collapses toward 0 (exactly 0 "
            "once the budget is short of T by more than a few entries; docs/cache-studies.md)")
    assert said == [want] and report.warnings == (want,)
    assert main(["run", "-n", "2", "--cache-mb", "0.5"]) == 0
    assert capsys.readouterr().err == want + "\n"
    with pytest.warns(RefsimWarning) as caught:
        simulate(RunConfig(n_predict=2, cache_mb=0.5))
    assert [str(w.message) for w in caught] == [want]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert simulate(RunConfig(n_predict=2), warn=said.append).warnings == ()


def test_the_narrow_routing_warning_comes_once_the_model_is_known(builtin_cache, capsys):
    said = []
    simulate(RunConfig(n_predict=2, knobs=StreamKnobs(drop_frac=0.5)), warn=said.append)
    # the built-in model routes top-4: the engine's load-time warning for k <= 4
    assert said == ["refsim run: warning: drop-cold-experts=0.5 with top-k 4 — the threshold is 12.5% "
                    "of the routing here, against 6.2% at the top-k 8 this was measured on. Expect "
                    "it to discard much more, and check output quality on your own task."]
    assert main(["run", "-n", "2", "--drop-cold-experts", "0.5"]) == 0
    assert capsys.readouterr().err == said[0] + "\n"


def test_the_model_refusals_are_simulates(builtin_cache, tmp_path, monkeypatch):
    import refsim.spec
    monkeypatch.setattr(refsim.spec, "run_generation", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(ConfigError, match=r"^MODEL .*missing\.gguf: no such file$"):
        simulate(RunConfig(model=tmp_path / "missing.gguf"))
    with pytest.raises(ConfigError, match=r"^--prompt-tokens: ids must be < n_vocab 512, got 9999$"):
        simulate(RunConfig(prompt_tokens=[1, 9999], n_predict=1))
    with pytest.raises(ConfigError, match=r"^--csv .*: cannot write here"):
        simulate(RunConfig(csv=tmp_path / "no" / "m.csv"))


def test_the_steps_table_is_the_runs_decodes(builtin_cache):
    report = simulate(RunConfig(prompt_tokens=NGRAM_PROMPT, n_predict=12,
                                spec=SpecConfig.from_flags(ngram=True, ngram_min_match=1)))
    cols = report.to_columns()
    steps = report.result.steps
    assert tuple(cols) == STEP_COLUMNS
    assert all(len(v) == report.stats.decodes == len(steps) for v in cols.values())
    assert cols["kind"].tolist() == [s.kind.name.lower() for s in steps]
    assert cols["n_acc"].dtype == np.int64 and cols["eog"].dtype == bool
    assert cols["wall_s"].dtype == np.float64
    # the table sums to the run's counters
    assert int(cols["n_draft"].sum()) == report.stats.drafted
    assert int(cols["n_acc"].sum()) == report.stats.accepted
    assert int(cols["read_bytes"].sum()) == report.stats.read_bytes
    assert int(cols["batch"].sum()) == report.result.n_gen
    assert set(cols["kind"]) == {"plain", "verify"}
    assert cols["cum_lookups"][-1] == report.cache.lookups      # lifetime, prefill included
