"""examples/ngram_scripted.py runs, prints the three ngram: lines, and its traces replay to the
live counters (the example returns 1 otherwise)."""

import runpy
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ngram_scripted.py"


def test_example_runs(tmp_path, capsys):
    mod = runpy.run_path(str(EXAMPLE))
    assert mod["main"](["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    ngram = [ln for ln in out.splitlines() if ln.startswith("ngram: ")]
    assert len(ngram) == 3
    assert ngram[0].startswith("ngram: 82/111 drafts accepted (73.9%), 1.75 tokens per verify "
                               "decode (110 decodes for 192 tokens)")
    assert ngram[2] == "ngram: drafted on 37 of 110 steps (33.6%); the rest decoded plainly"
    assert out.count("same as the live run") == 2
    for name in ("off", "ngram"):
        assert (tmp_path / f"{name}.metrics.csv").read_text().startswith("# bmoe_metrics v2\n")
        assert (tmp_path / f"{name}.route.csv").read_text().startswith("# route_trace v1\n")
