import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from refsim.testing.shared import shared_dir, shared_path, skip_reason

settings.register_profile("dev", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")

REPO = Path(__file__).resolve().parent.parent
SHARED = shared_dir()
QWEN_TRACE = shared_path("real-traces", "bmoe-qwen3-30b-a3b", "qwen.route.csv")


@pytest.fixture(scope="session")
def qwen_trace_path():
    """The engine's real Qwen3-30B-A3B trace from ../shared, or skip when absent."""
    if not QWEN_TRACE.exists():
        pytest.skip(skip_reason(QWEN_TRACE))
    return QWEN_TRACE


@pytest.fixture(scope="session")
def qwen_trace(qwen_trace_path):
    from refsim.trace import read_trace
    return read_trace(qwen_trace_path)
