"""Output form (issue 26 C8): every warning reads ``refsim CMD: warning: ...`` (it was
``refsim: WARNING ...`` / ``refsim: WARNING: ...``), and a number keeps its significant digits
(``read MiB/tok 0`` for 0.18; ``memory``'s ``2672.5991211 MiB``)."""

import logging

import pytest

from refsim import MIB
from refsim.cli import main
from refsim.errors import warning_line


def test_the_one_warning_form():
    assert warning_line("sweep", "x y") == "refsim sweep: warning: x y"
    assert warning_line("timing fit", "z") == "refsim timing fit: warning: z"
    assert warning_line(None, "z") == "refsim: warning: z"


@pytest.mark.parametrize("cmd", ["replay", "sweep", "union"])
def test_the_narrow_routing_warning_names_its_command(cmd, tmp_path, capsys):
    from tests.studies.test_drop_replay import tiny_trace      # k = 2
    path = str(tiny_trace(tmp_path))
    argv = {"replay": ["replay", path, "--cache-mb", "1"],
            "sweep": ["sweep", path, "--cache-mb", "1"],
            "union": ["union", path, "--window", "1"]}[cmd]
    main(argv + ["--drop-cold-experts", "0.75"])
    err = capsys.readouterr().err.splitlines()
    said = [ln for ln in err if "drop-cold-experts=0.75 with top-k 2" in ln]
    assert said and all(ln.startswith(f"refsim {cmd}: warning: drop-cold-experts=0.75 with top-k 2 "
                                      f"\u2014 the threshold is 37.5% of the routing here")
                        for ln in said)
    assert not any("WARNING" in ln for ln in err)


def test_a_library_log_record_is_named_by_the_command(monkeypatch, capsys):
    """The CLI's handler writes a library's logging warning as the running command's line; a
    second command in the same process names itself, not the first (a nested one in full)."""
    import refsim.cli.replay as replay
    import refsim.cli.timing as timing

    def noisy(args):
        logging.getLogger("refsim.trace").warning("something odd at line 6")
        return 0
    monkeypatch.setattr(replay, "run", noisy)
    assert main(["replay", "t.csv", "--cache-mb", "1"]) == 0
    assert capsys.readouterr().err == "refsim replay: warning: something odd at line 6\n"
    monkeypatch.setattr(timing, "run_fit", noisy)
    assert main(["timing", "fit", "r.csv", "--out", "d.json"]) == 0
    assert capsys.readouterr().err == "refsim timing fit: warning: something odd at line 6\n"


def test_bench_keeps_two_significant_digits(tmp_path, capsys):
    text = ("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms,mgmt_ms\n"
            + "".join(f"{i},4,100.000,60.000,40.000,{int(0.18 * MIB)},10.00,0.000,0.000\n"
                      for i in range(1, 5)))
    p = tmp_path / "r.csv"
    p.write_text(text)
    assert main(["bench", str(p), "--trim", "0", "--resamples", "20"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = lines[2]
    assert "read MiB/tok" in lines[1]
    assert row.split()[-2] == "0.18"                      # was 0 (".0f")
    assert row.split()[2] == "10.00"                      # tok/s keeps its 2 decimals


def test_memory_prints_the_auto_budget_to_its_significant_digits(capsys):
    from refsim.forward.builtin import builtin_model_path
    from refsim.cache.ledger import memory_ledger
    from refsim.model import open_model
    led = memory_ledger(open_model(builtin_model_path()), 256, ram_mb=100, floor_mb=0,
                        ceil_mb=7.5991211)
    assert led.budget_bytes == 7968256                    # exact, 7.5991211 MiB
    assert led.lines()[-1].startswith("cache-mb auto: 7.6 MiB (the preamble's cache_mb=7;")
