"""``refsim`` command line: one module per subcommand, registered in ``COMMANDS``.

Each module ``refsim/cli/<name>.py`` defines ``add_parser(subparsers)`` (which must call
``set_defaults(func=run)``) and ``run(args) -> int``. A subcommand maps flags onto one library
call; logic lives in the library. ``main`` catches :class:`refsim.errors.RefsimError`, prints
one line to stderr and returns 1, so a user mistake never shows a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from refsim.errors import RefsimError

# Workflow order; each name is a module in this package.
COMMANDS = ["replay", "sweep", "union", "drop_replay", "inspect", "synth", "run", "ngram", "ngram_whatif", "memory"]


def _version() -> str:
    """The installed distribution's version (pyproject.toml), or ``unknown`` when not installed."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("refsim")
    except PackageNotFoundError:
        return "unknown"


def make_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="refsim",
        description="Reference simulator of the streamed-MoE speculative decoding loop.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    parser.add_argument("--version", action="version", version=f"refsim {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"refsim.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"refsim.cli.{name}":
                continue  # subcommand not built yet
            raise
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (0 ok, 1 refsim error, 2 usage error)."""
    parser = make_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="refsim: %(levelname)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except RefsimError as exc:
        print(f"refsim {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print(f"refsim {args.command}: interrupted (outputs not completed were not written)",
              file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
