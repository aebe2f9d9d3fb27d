"""``python -m refsim``: the same entry point as the ``refsim`` command (refsim.cli.__main__)."""
import refsim.cli.__main__  # noqa: F401  (runs the command and exits)
