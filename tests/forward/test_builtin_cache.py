"""The cached built-in model is protected from refsim's own outputs and rebuilt when damaged
(issue 12 A2)."""

import json
import logging

import pytest

from refsim.cli import main
from refsim.forward.builtin import BUILTIN_NAME, builtin_model_path
from refsim.model import open_model


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One built-in model, built once for the module (the tests copy it into their cache)."""
    d = tmp_path_factory.mktemp("built")
    mp = pytest.MonkeyPatch()
    mp.setenv("REFSIM_CACHE", str(d))
    try:
        return open(builtin_model_path(), "rb").read()
    finally:
        mp.undo()


@pytest.fixture
def cache(tmp_path, monkeypatch, built):
    d = tmp_path / "cache"
    d.mkdir()
    (d / BUILTIN_NAME).write_bytes(built)
    monkeypatch.setenv("REFSIM_CACHE", str(d))
    return d


@pytest.mark.parametrize("flag", ["--route-trace", "--csv"])
def test_run_refuses_an_output_over_the_cached_builtin_model(cache, capsys, flag):
    good = builtin_model_path()
    before = open(good, "rb").read()
    assert main(["run", "-n", "2", flag, good]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == (f"refsim run: error: {flag} {good}: is also the built-in MODEL input; "
                                 f"expected another file\n")
    assert open(good, "rb").read() == before


def test_run_refuses_the_builtin_path_before_it_exists(cache, capsys):
    path = cache / BUILTIN_NAME
    path.unlink()                                   # not built yet: the check needs no model
    assert main(["run", "--route-trace", str(path)]) == 1
    assert "is also the built-in MODEL input" in capsys.readouterr().err
    assert not path.exists()


@pytest.mark.parametrize("damage", ["magic", "truncate", "empty"])
def test_a_damaged_builtin_model_is_rebuilt_with_a_warning(cache, caplog, damage, built):
    path = builtin_model_path()
    good = built
    if damage == "magic":
        open(path, "wb").write(b"XXXX" + good[4:])
    elif damage == "truncate":
        open(path, "wb").write(good[: len(good) // 3])
    else:
        open(path, "wb").close()
    with caplog.at_level(logging.WARNING, logger="refsim.forward.builtin"):
        assert builtin_model_path() == path
    assert open(path, "rb").read() == good
    assert [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()][0].startswith(
        f"the cached built-in model {path} is damaged ({path}: ")
    open_model(path)


def test_run_route_trace_dash_streams_the_trace_and_the_report_goes_to_stderr(cache, capsys, tmp_path):
    from refsim.trace import read_trace
    assert main(["run", "-n", "3", "--json", "--route-trace", "-"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# route_trace v1\n")
    report = json.loads(err.splitlines()[0])                # --json went to stderr
    path = tmp_path / "t.route.csv"
    path.write_text(out)
    assert read_trace(path).n_rows > 0 and report["tokens"] and len(report["tokens"]) == 3
    assert main(["run", "-n", "3", "--json", "--route-trace", str(tmp_path / "f.route.csv")]) == 0
    capsys.readouterr()
    assert (tmp_path / "f.route.csv").read_text() == out    # the same bytes as a file
