"""``refsim run --prompts FILE --out-dir DIR`` (refsim.scale.prompts; docs/scale.md)."""

import pytest

import refsim.scale.prompts as prompts_mod
from refsim.cli import main
from refsim.errors import ConfigError
from refsim.scale.prompts import read_prompts


def test_prompts_one_a_line(tmp_path):
    f = tmp_path / "p.txt"
    f.write_bytes(b"Hello world\r\nsecond, with  spaces \nno newline at the end")
    assert read_prompts(str(f)) == ["Hello world", "second, with  spaces ", "no newline at the end"]


@pytest.mark.parametrize("data, line, what", [
    (b"a\n\nb\n", 2, "empty line; expected one prompt a line"),
    (b"a\n   \n", 2, "empty line; expected one prompt a line"),
    (b"ok\n\xff\xfe\n", 2, "not UTF-8 text (byte 1 of the line)"),
    (b"ok\n" + b"x" * 70_000 + b"\n", 2, "line longer than 65536 bytes; expected one prompt a line"),
])
def test_a_bad_prompts_file_is_one_line_naming_file_and_line(tmp_path, data, line, what):
    f = tmp_path / "p.txt"
    f.write_bytes(data)
    with pytest.raises(ConfigError) as exc:
        read_prompts(str(f))
    assert str(exc.value) == f"{f}:{line}: {what}"


def test_line_count_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(prompts_mod, "MAX_PROMPTS", 3)
    f = tmp_path / "p.txt"
    f.write_text("a\nb\nc\nd\n")
    with pytest.raises(ConfigError, match=rf"^{f}:4: more than 3 prompts; split the file$"):
        read_prompts(str(f))


def test_missing_or_empty_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read: No such file"):
        read_prompts(str(tmp_path / "none.txt"))
    (tmp_path / "e.txt").write_text("")
    with pytest.raises(ConfigError, match="no prompt in the file$"):
        read_prompts(str(tmp_path / "e.txt"))


@pytest.mark.parametrize("extra, msg", [
    ([], "--prompts without --out-dir"),
    (["--out-dir", "D", "--csv", "x.csv"], "--prompts and --csv: mutually exclusive"),
    (["--out-dir", "D", "--prompt", "hi"], "--prompts and --prompt: mutually exclusive"),
    (["--out-dir", "D", "--json"], "--prompts and --json: mutually exclusive"),
    (["--out-dir", "-"], "--out-dir -: a folder is needed"),
])
def test_flag_mistakes_are_usage_errors(tmp_path, capsys, extra, msg):
    f = tmp_path / "p.txt"
    f.write_text("a\n")
    assert main(["run", "--prompts", str(f)] + extra) == 2
    assert msg in capsys.readouterr().err


def test_out_dir_parent_must_exist_and_nothing_is_made(tmp_path, capsys):
    f = tmp_path / "p.txt"
    f.write_text("a\n")
    target = tmp_path / "none" / "sub"
    assert main(["run", "--prompts", str(f), "--out-dir", str(target), "-n", "1"]) == 1
    err = capsys.readouterr().err
    assert f"--out-dir {target}: its parent folder {tmp_path / 'none'} does not exist" in err
    assert err.count("\n") == 1 and not (tmp_path / "none").exists()


def test_executor_flags_without_prompts_are_usage_errors(capsys):
    assert main(["run", "--workers", "2"]) == 2
    assert "with --prompts only" in capsys.readouterr().err


def test_each_prompt_is_the_one_prompt_run_and_every_executor_prints_the_same(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    f = tmp_path / "p.txt"
    texts = ["abc abc abc abc", "Hello world"]
    f.write_text("\n".join(texts) + "\n")
    argv = ["run", "--prompts", str(f), "-n", "6", "--ngram"]
    assert main(argv + ["--out-dir", str(tmp_path / "serial")]) == 0
    serial = capsys.readouterr().out
    lines = serial.splitlines()
    assert lines[1].split() == ["#", "prompt", "generated", "decodes", "accepted", "hit_cum%",
                                "hit_dec%", "read_MiB", "MiB/token"]
    assert [ln.split()[0] for ln in lines[2:5]] == ["0", "1", "all"]
    # prompt 1's files are those of refsim run --prompt TEXT (the metrics CSV up to its timings)
    assert main(["run", "--prompt", texts[1], "-n", "6", "--ngram",
                 "--route-trace", str(tmp_path / "one.route.csv")]) == 0
    capsys.readouterr()
    assert ((tmp_path / "serial" / "prompt-0001.route.csv").read_bytes()
            == (tmp_path / "one.route.csv").read_bytes())
    assert (tmp_path / "serial" / "prompt-0000.csv").read_text().startswith("#")
    # the pooled row: sums of the per-prompt counts
    rows = [ln.split() for ln in lines[2:5]]
    assert [int(rows[2][i]) for i in (1, 2, 3)] == [int(rows[0][i]) + int(rows[1][i]) for i in (1, 2, 3)]
    with distributed.LocalCluster(n_workers=2, processes=False, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        assert main(argv + ["--out-dir", str(tmp_path / "serial"), "--dask-scheduler",
                            cluster.scheduler_address]) == 0
    assert capsys.readouterr().out == serial
