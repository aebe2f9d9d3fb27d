"""refsim view: the page's data, its escaping, and the page itself in a real headless browser
(Debian's chromium; skipped when it is not installed, .ci/run installs it)."""

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from refsim.analysis.viewer import metrics_columns, page_data, render_page
from refsim.cli import main
from refsim.trace import read_trace
from tests.analysis.conftest import SPEC_ROUTES

EVIL = "</script><script>document.body.dataset.pwned=1</script><b>bold</b>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]


def evil_trace(tmp_path, src):
    """The hand-made speculative trace with a model= that tries to close the script block."""
    text = src.read_text().replace("model=hand</b><script>x</script>", "model=" + EVIL, 1)
    assert EVIL in text
    p = tmp_path / "evil.route.csv"
    p.write_text(text)
    return p


def browse(html_path, tmp_path, *extra):
    """Run chromium on a local file; returns (stdout, stderr)."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium; .ci/run does)")
    prof = tmp_path / f"profile{len(list(tmp_path.iterdir()))}"
    p = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={prof}", *extra,
                        html_path.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    return p.stdout, p.stderr


def console_errors(stderr: str) -> list[str]:
    """Console messages and uncaught exceptions chromium logged (``CONSOLE(n)`` lines)."""
    return [ln for ln in stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]


def test_page_data_by_hand(spec_trace_path):
    """The hand-made trace: 2 prefill + 1 + 3 + 2 + 1 decode position rows, 2 layers, k = 2."""
    d = page_data(read_trace(spec_trace_path))
    assert d["row_step"] == [0, 1, 2, 3, 4, 5, 5, 6, 7]
    assert d["row_unit"] == [0, 0, 1, 2, 2, 2, 3, 3, 4]
    ids = np.array(d["ids"]).reshape(9, 2, 2)
    code = np.array(d["code"]).reshape(9, 2, 2)
    assert ids[0, 1].tolist() == [-1, -1]                      # prefill: last layer not routed
    want = [np.array(r, np.int16) for _k, _p, r in SPEC_ROUTES]
    assert ids[5, 0].tolist() == want[2][2, 0].tolist() == [6, 7]
    # verify [3,4,5] layer 0: 4 hit + previous decode (1 + 4), 5 miss; then 5 again in the batch
    # (miss + 8), 6 miss; then 6 in the batch (0 + 8), 7 miss
    assert code[3:6, 0].tolist() == [[5, 0], [8, 0], [8, 0]]
    assert code[8, 0].tolist() == [1 + 4, 3]                   # expert 1 hit and repeat; 9 dropped
    assert d["units"]["kind"] == ["prefill", "plain", "verify", "verify", "plain"]
    assert d["units"]["lookups"][1:] == [4, 8, 6, 3]            # distinct per layer batch
    assert d["units"]["read_mib"][1:] == [3.0, 9.0, 4.0, 0.0]
    assert d["totals"]["tokens"] == 6 and d["totals"]["verify"] == 2
    # w = 1 is top-k, less the dropped slot of position 7 (layer 0): (5 x 2 + 1) / 6
    assert d["union"]["mean"][0] == [pytest.approx(11 / 6), 2.0]


def test_metadata_is_escaped(spec_trace_path, tmp_path):
    page = render_page(read_trace(evil_trace(tmp_path, spec_trace_path)))
    assert EVIL not in page and "</script><script>document" not in page
    assert "<b>bold" not in page
    block = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
    assert json.loads(block.group(1))["meta"]["model"] == EVIL
    assert page.count("</script>") == 2                         # the data block and the code


def test_metrics_panel_reads_through_the_metrics_reader(tmp_path):
    from refsim.errors import MetricsFormatError
    p = tmp_path / "run.csv"
    p.write_text("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms\n"
                 "1,2,2.5,1.0,1.5,100,50.00,0.000\n2,2,3.0,1.0,2.0,200,51.00,0.000\n")
    cols = metrics_columns(str(p))
    assert cols["wall_ms"] == [2.5, 3.0] and cols["read_bytes"] == [100.0, 200.0]
    p.write_text("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms\n"
                 "1,2,x<y,1.0,1.5,100,50.00,0.000\n")
    with pytest.raises(MetricsFormatError, match=r"run.csv:2:"):
        metrics_columns(str(p))


@pytest.mark.parametrize("name", ["desktop-2026-07-24-qwen36/pc-A-io4.csv",
                                  "phone-2026-07-12-cache-lanes/qwen_c4000_l4.csv"])
def test_metrics_panel_on_real_runs(name):
    from refsim.testing.shared import require_shared
    cols = metrics_columns(str(require_shared("real-runs", *name.split("/"))))
    assert len(cols["wall_ms"]) == 256 and cols["steps"][0] == 256.0


def test_console_scan_catches_an_error(tmp_path):
    """Negative control: a page that throws is reported by the console scan."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><body><script>null.x = 1;</script></body>")
    _out, err = browse(bad, tmp_path, "--dump-dom")
    assert console_errors(err)


@pytest.mark.parametrize("which", ["qwen", "evil"])
def test_page_in_headless_chromium(which, qwen_trace_path, spec_trace_path, tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium; .ci/run does)")
    trace = qwen_trace_path if which == "qwen" else evil_trace(tmp_path, spec_trace_path)
    out = tmp_path / "page.html"
    argv = ["view", str(trace), "--html", str(out)]
    if which == "evil":
        m = tmp_path / "run.csv"
        m.write_text("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms\n"
                     + "".join(f"{i},6,{10 + i % 3},1.0,2.0,{i * 1000},50.00,0.000\n"
                               for i in range(1, 7)))
        argv += ["--metrics", str(m)]
    assert main(argv) == 0
    tr = read_trace(trace)
    n_rows = sum(e.n_pos for e in tr.events)
    n_layer = len(page_data(tr)["layers"])
    dom, err = browse(out, tmp_path, "--dump-dom")
    assert not console_errors(err), console_errors(err)
    body = re.search(r"<body([^>]*)>", dom).group(1)
    assert 'data-ready="1"' in body and "data-error" not in body and "pwned" not in body
    mx = re.search(r'<table id="matrix"([^>]*)>(.*?)</table>', dom, re.S)
    assert f'data-rows="{n_rows}"' in mx.group(1) and f'data-layers="{n_layer}"' in mx.group(1)
    thead = re.search(r"<thead>(.*?)</thead>", mx.group(2), re.S).group(1)
    assert thead.count("<th") == n_layer + 2                   # step, decode, one per layer
    assert mx.group(2).count("<tr") - 1 == min(32, n_rows)     # first page of rows
    if which == "evil":
        assert "&lt;/script&gt;&lt;script&gt;document.body.dataset.pwned=1" in dom
        assert 'class="metric"' in dom
    png = tmp_path / "shot.png"
    browse(out, tmp_path, f"--screenshot={png}", "--window-size=1400,1800")
    from matplotlib.image import imread
    img = imread(str(png))[..., :3]
    assert img.shape[0] >= 1000 and img.std() > 0.05          # not blank
    assert (img.std(axis=2) > 0.1).mean() > 0.02              # coloured cells are there
