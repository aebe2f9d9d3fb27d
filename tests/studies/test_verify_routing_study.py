"""tools/verify_routing_study.py (docs/spec-policies.md, "Lossy verify routing: quality") on its CI
budget: the identity setting reproduces the unmodified model to the last digit, the lossy rows
read less and cost held-out loss, and the teacher-forced verify batches score every held-out
token."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "verify_routing_study.py"


def _tool():
    spec = importlib.util.spec_from_file_location("verify_routing_study", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_oracle_draft_proposes_the_held_out_continuation():
    d = _tool().OracleDraft(np.array([5, 6, 7, 8, 9]))
    assert d.draft(None, 6, 1, 3).tokens.tolist() == [7, 8, 9]
    assert d.draft(None, 8, 3, 3).tokens.tolist() == [9]          # the stream's end cuts the draft
    assert d.accept(3) == ()


@pytest.mark.slow
def test_small_budget_rows():
    out = subprocess.run([sys.executable, str(TOOL), "--budget", "small"], capture_output=True, text=True,
                         check=True).stdout
    rows = {ln.split(" | ")[1]: ln.split(" | ")[2:] for ln in out.splitlines() if ln.startswith("| tiny-moe |")}
    assert list(rows) == ["unmodified", "--drop-cold-experts 0.75", "cap:32 (lossy)", "cap:6 (lossy)",
                          "consensus:0.2 (lossy)"]
    base = rows["unmodified"]
    assert base[1:] == ["0.0", "0.00", base[3], "+0.000", "100.0", "100.0", "16,16 |"]
    assert rows["cap:32 (lossy)"] == base                   # U >= n_expert (32): the unmodified model
    for name in ("--drop-cold-experts 0.75", "cap:6 (lossy)", "consensus:0.2 (lossy)"):
        mib, saved, lost, _nats, d_nats, top1 = rows[name][:6]
        assert float(mib) < float(base[0]) and float(saved) > 0 and float(lost) > 0, name
        assert float(d_nats) != 0 and float(top1) < 100, name
