"""``refsim run --mtp --baseline-plain`` (issue 26 C12): the engine's flash-split line counts as
"the widened verify batch" the bytes a plain run reads anyway; the baseline run of the same prompt
splits the MTP run's reads into baseline + widening + head, exactly."""

import json

import pytest

from refsim import MIB
from refsim.cli import main
from refsim.model.synth import write_synthetic
from refsim.session import FlashSplit, RunConfig, baseline_plain, simulate
from refsim.spec import SpecConfig


@pytest.fixture(scope="module")
def q35(tmp_path_factory):
    return write_synthetic(tmp_path_factory.mktemp("q35") / "q35.gguf", arch="qwen35moe",
                           quant="F32", nextn=True, seed=0)


@pytest.fixture(scope="module")
def mtp_report(q35):
    return simulate(RunConfig(model=q35, n_predict=8, spec=SpecConfig.from_flags(mtp=True)))


def test_the_split_adds_up_and_the_baseline_is_a_plain_run(q35, mtp_report):
    split = baseline_plain(mtp_report)
    s = mtp_report.stats
    assert split.streamed == s.read_bytes and split.head == s.draft_read_bytes > 0
    assert split.baseline + split.widening + split.head == split.streamed
    assert split.same_tokens                       # greedy: MTP emits the plain decode's tokens
    plain = simulate(RunConfig(model=q35, n_predict=8, cache_mb=mtp_report.budget_bytes / MIB,
                               prompt_tokens=list(mtp_report.prompt)))
    assert plain.stats.read_bytes == split.baseline
    assert plain.result.tokens.tolist() == mtp_report.result.tokens.tolist()


def test_the_line_by_hand():
    split = FlashSplit(streamed=4 * MIB, head=MIB, baseline=MIB // 2, widening=4 * MIB - MIB - MIB // 2,
                       same_tokens=True)
    assert split.line() == ("mtp: baseline-plain: of 4.0 MiB streamed, 0.50 MiB a plain decode of "
                            "the same prompt reads, 2.5 MiB the verify batches' widening, 1.0 MiB "
                            "the head's own routing")


def test_the_cli(q35, capsys):
    assert main(["run", q35, "--mtp", "-n", "8", "--baseline-plain", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("mtp: of "))
    assert lines[i + 1].startswith("mtp: baseline-plain: of ")
    assert main(["run", q35, "--mtp", "-n", "8", "--baseline-plain", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["baseline_plain"]
    assert d["baseline"] + d["widening"] + d["head"] == d["streamed"]


def test_it_needs_mtp(capsys):
    assert main(["run", "-n", "1", "--baseline-plain"]) == 2
    assert "argument --baseline-plain: needs --mtp" in capsys.readouterr().err
