"""The shared-folder scripts (tools/*.py) on bad input: one line naming what was expected, exit 1
for a missing shared folder (the file they need), exit 2 for a flag out of range; never a
traceback (a new-user pass found ``--boot -1``, ``--seed -1`` and ``REFSIM_SHARED=/nonexistent``
each printing one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_TOOLS = ("whatif_validate.py", "whatif_terms.py", "spec_policy_study.py",
                "pressure_table.py")
FIRST_MISSING = {
    "whatif_validate.py": "real-runs/desktop-2026-07-24-qwen36",
    "whatif_terms.py": "real-runs/desktop-2026-07-24-qwen36",
    "spec_policy_study.py": "real-traces/bmoe-qwen3-30b-a3b/qwen.route.csv",
    "pressure_table.py": "real-runs/phone-2026-07-22-drop-cold",
}


def run_tool(tool, args, shared):
    env = dict(os.environ, REFSIM_SHARED=str(shared), PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, str(REPO / "tools" / tool), *args], env=env,
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("tool", SHARED_TOOLS)
@pytest.mark.parametrize("kind", ["missing", "file", "empty"])
def test_a_missing_shared_folder_is_one_line_naming_the_path(tmp_path, tool, kind):
    shared = tmp_path / "shared"
    if kind == "file":
        shared.write_text("not a folder")
    elif kind == "empty":
        shared.mkdir()
    code, out, err = run_tool(tool, [], shared)
    path = shared / FIRST_MISSING[tool]
    assert (code, out) == (1, "")
    assert err == (f"{tool}: error: {path}: not present; expected the shared folder's file (set "
                   f"REFSIM_SHARED to the shared folder, now {shared})\n")


@pytest.mark.parametrize("tool,args,expected", [
    ("whatif_validate.py", ["--boot", "-1"], "argument --boot: expected an integer in 0..1000, got '-1'"),
    ("whatif_validate.py", ["--boot", "1001"], "argument --boot: expected an integer in 0..1000, got '1001'"),
    ("whatif_validate.py", ["--seed", "-1"],
     "argument --seed: expected an integer in 0..4294967295, got '-1'"),
    ("whatif_terms.py", ["--boot", "2.5"], "argument --boot: expected an integer in 0..1000, got '2.5'"),
    ("whatif_terms.py", ["--seed", "4294967296"],
     "argument --seed: expected an integer in 0..4294967295, got '4294967296'"),
    ("spec_policy_study.py", ["--seed", "x"],
     "argument --seed: expected an integer in 0..4294967295, got 'x'"),
])
def test_a_flag_out_of_range_is_argparse_s_line_exit_2(tmp_path, tool, args, expected):
    code, out, err = run_tool(tool, args, tmp_path / "absent")
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == f"{tool}: error: {expected}"
    assert "Traceback" not in err
