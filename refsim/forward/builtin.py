"""The built-in model: a small synthetic qwen3moe GGUF made once and cached, so ``refsim run``
needs no download.

The file is written by :func:`refsim.model.write_synthetic` (atomically: temp file + rename)
under ``$REFSIM_CACHE`` or ``~/.cache/refsim`` as ``builtin-qwen3moe-v1.gguf``; the same seed
and dims always give the same bytes, so a second process that races the first writes an
identical file.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

BUILTIN_NAME = "builtin-qwen3moe-v1.gguf"
BUILTIN_QUANT = "Q4_0"
BUILTIN_SEED = 5
BUILTIN_DIMS = dict(n_layer=4, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_expert=64,
                    n_expert_used=4, n_ff_exp=128, n_vocab=512, n_ctx=1024)
"""4 layers, 64 experts (top-4), expert entry 55,296 bytes at Q4_0; one token cycle
T = 4 layers x 4 x 55,296 B = 0.84 MiB; all experts 13.5 MiB."""

BUILTIN_CACHE_MB = 4.0
"""Default ``--cache-mb`` for the built-in model (about 30 % of its expert bytes)."""


def cache_dir() -> Path:
    """``$REFSIM_CACHE`` if set, else ``~/.cache/refsim`` (created if missing)."""
    d = Path(os.environ.get("REFSIM_CACHE") or Path.home() / ".cache" / "refsim")
    d.mkdir(parents=True, exist_ok=True)
    return d


def builtin_model_file() -> str:
    """Where the built-in model lives (``cache_dir() / BUILTIN_NAME``), without writing it: what
    ``refsim run`` with no MODEL compares its output paths with (an output there would overwrite
    the model every later run reads)."""
    return str(cache_dir() / BUILTIN_NAME)


def builtin_model_path() -> str:
    """Path of the built-in model, writing it on first use, and again when the cached file is
    damaged (it does not open as a GGUF: wrong magic, truncated, ...; a warning says so and names
    the file), so a damaged cache never becomes an error the user must fix by hand.

    Returns
    -------
    str

    Raises
    ------
    ConfigError
        If the cache folder cannot be written (names it and the environment variable).
    """
    from refsim.errors import ConfigError, RefsimError
    from refsim.model import open_model, write_synthetic
    try:
        path = cache_dir() / BUILTIN_NAME
        if path.exists():
            try:
                open_model(path)              # header, tensor table and data extent checked
            except RefsimError as exc:
                logging.getLogger(__name__).warning(
                    "the cached built-in model %s is damaged (%s); rebuilding it", path, exc)
                path.unlink()
        if not path.exists():
            write_synthetic(path, arch="qwen3moe", quant=BUILTIN_QUANT, seed=BUILTIN_SEED, dims=BUILTIN_DIMS)
    except OSError as exc:
        raise ConfigError(f"built-in model: cannot write {exc.filename or cache_dir()}: {exc.strerror} "
                          f"(set REFSIM_CACHE to a writable folder)") from None
    return str(path)
