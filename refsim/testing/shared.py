"""Where the tests find the project's shared material (real traces, real runs, engine docs).

The folder is ``$REFSIM_SHARED`` when set, else ``../shared`` beside the repository (the layout
the developers and CI have). Nothing from it is ever copied into the project; tests that need it
skip, naming the variable, when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "REFSIM_SHARED"
_REPO = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    """The shared folder: ``$REFSIM_SHARED`` or ``<repo>/../shared`` (may not exist)."""
    env = os.environ.get(ENV)
    return Path(env) if env else _REPO.parent / "shared"


def shared_path(*parts: str) -> Path:
    """``shared_dir() / parts...`` (may not exist)."""
    return shared_dir().joinpath(*parts)


def skip_reason(path: Path) -> str:
    """The skip message for a missing shared file: names the file and the variable to set."""
    return f"shared file not present: {path} (set {ENV} to the shared folder)"


def require_shared(*parts: str) -> Path:
    """``shared_path(*parts)``, or ``pytest.skip`` naming the path and ``$REFSIM_SHARED``."""
    path = shared_path(*parts)
    if not path.exists():
        import pytest
        pytest.skip(skip_reason(path))
    return path
