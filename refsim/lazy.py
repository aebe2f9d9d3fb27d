"""Packages whose public names are imported on first use (PEP 562), so that importing one
submodule (``refsim.streaming.knobs``, ``refsim.spec.constants``) does not import its siblings.

Why: a package ``__init__`` that imports every submodule makes each ``refsim`` command pay for
all of them at start-up (issue 17, "Start-up"; docs/cli.md, "Start-up"). A package lists its
names and their submodules once::

    __getattr__, __dir__ = lazy_exports(__name__, {"ExpertCache": "expert_cache", ...})
    __all__ = [...]

``from refsim.cache import ExpertCache`` then imports ``refsim.cache.expert_cache`` alone, and
``refsim.cache.mrc`` as an attribute imports that submodule.
"""

from __future__ import annotations

import importlib
import sys


def lazy_exports(package: str, names: dict[str, str]):
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps a public name to the submodule
    (relative to ``package``) that defines it. A name neither listed nor a submodule raises
    AttributeError as usual."""

    def __getattr__(name: str):
        sub = names.get(name)
        try:
            if sub is None:
                return importlib.import_module(f"{package}.{name}")   # a submodule, as before
            value = getattr(importlib.import_module(f"{package}.{sub}"), name)
        except ModuleNotFoundError as exc:
            if sub is None and exc.name == f"{package}.{name}":
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
            raise
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
