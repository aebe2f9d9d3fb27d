"""An n-gram run's drafting cost is the engine's: 0, so its effective tok/s is the reported one
(issue 26 C11). refsim's own Python lookup time printed ``drafting costs 0.0000 s/token ->
584.98 tok/s effective (vs 590.46 reported)``; the engine times the MTP head only
(``mtp_draft_s``; bmoe-engine.md §4.2 and its docs/ngram.md example)."""

import pytest

from refsim.session import RunConfig, simulate
from refsim.spec import SpecConfig
from refsim.telemetry.lines import spec_lines


@pytest.fixture(scope="module")
def ngram_report(tmp_path_factory):
    csv = tmp_path_factory.mktemp("ng") / "m.csv"
    cfg = RunConfig(prompt_tokens=[1, 70, 71, 72, 70, 71, 72, 70, 71], n_predict=8,
                    spec=SpecConfig.from_flags(ngram=True, draft=3), csv=str(csv))
    return simulate(cfg), csv


def test_the_drafting_cost_is_zero_and_effective_equals_reported(ngram_report):
    report, _ = ngram_report
    s = report.stats
    assert s.spec == "ngram" and s.decodes > 0
    assert s.draft_s == 0.0 and s.draft_s_per_tok == 0.0
    assert s.effective_tok_s == s.tok_s
    line = spec_lines(s)[1]
    eff = f"{s.tok_s:.2f}"
    assert line == (f"ngram: drafting costs 0.0000 s/token on top of decode \u2192 {eff} tok/s "
                    f"effective (vs {eff} reported)")


def test_the_metrics_csv_writes_no_draft_time(ngram_report):
    from refsim.telemetry.metrics_reader import read_metrics
    _, csv = ngram_report
    run = read_metrics(csv)
    assert (run.data["mtp_draft_ms"] == 0).all()
    assert run.summaries[-1]["mtp_draft_s/tok"] == 0.0
