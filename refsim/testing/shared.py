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


def shared_or_error(*paths) -> Path:
    """The shared folder, after checking that each of ``paths`` (tuples of parts under it)
    exists: for a script (``tools/*.py``), whose missing input is an error, not a skip.

    Raises
    ------
    ConfigError
        One line naming the first missing path and ``$REFSIM_SHARED``.
    """
    from refsim.errors import ConfigError
    root = shared_dir()
    for parts in paths:
        path = root.joinpath(*parts)
        if not path.exists():
            raise ConfigError(f"{path}: not present; expected the shared folder's file (set "
                              f"{ENV} to the shared folder, now "
                              f"{os.environ.get(ENV, 'unset: ../shared beside the repository')})")
    return root


def require_shared(*parts: str) -> Path:
    """``shared_path(*parts)``, or ``pytest.skip`` naming the path and ``$REFSIM_SHARED``."""
    path = shared_path(*parts)
    if not path.exists():
        import pytest
        pytest.skip(skip_reason(path))
    return path
