"""OpenMP defaults for Numba's parallel kernels (refsim.jitcache.configure_openmp, run by `import refsim.kernels`):
PASSIVE idle workers that first spin GOMP_SPINCOUNT=30000 times, unless the caller chose (docs/forward.md,
"OpenMP workers between parallel regions")."""

import os
import subprocess
import sys

import pytest

from refsim.jitcache import configure_openmp


@pytest.mark.parametrize("given,want", [
    ({}, {"GOMP_SPINCOUNT": "30000", "OMP_WAIT_POLICY": "PASSIVE"}),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "ACTIVE"}),          # the caller's policy: no spin count
    ({"OMP_WAIT_POLICY": "PASSIVE"}, {"OMP_WAIT_POLICY": "PASSIVE"}),
    ({"GOMP_SPINCOUNT": "5"}, {"GOMP_SPINCOUNT": "5", "OMP_WAIT_POLICY": "PASSIVE"}),
    ({"GOMP_SPINCOUNT": "5", "OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "5", "OMP_WAIT_POLICY": "ACTIVE"}),
    ({"PATH": "/bin"}, {"PATH": "/bin", "GOMP_SPINCOUNT": "30000", "OMP_WAIT_POLICY": "PASSIVE"}),
])
def test_defaults_only_where_the_caller_set_nothing(given, want):
    env = dict(given)
    configure_openmp(env)
    assert env == want
    configure_openmp(env)              # idempotent
    assert env == want


def test_importing_the_kernels_sets_them_before_numba_starts_threads():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    code = ("import os, refsim.kernels; "
            "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["PASSIVE", "30000"]
    env["OMP_WAIT_POLICY"] = "ACTIVE"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["ACTIVE", "None"]
