"""``refsim`` command line: one module per subcommand, registered in ``COMMANDS``.

Each module ``refsim/cli/<name>.py`` defines ``add_parser(subparsers)`` (which must call
``set_defaults(func=run)``) and ``run(args) -> int``. A subcommand maps flags onto one library
call; logic lives in the library. ``main`` catches :class:`refsim.errors.RefsimError`, prints
one line to stderr and returns 1, so a user mistake never shows a traceback; a
:class:`refsim.errors.UsageError` (the command line alone is wrong) is reported as argparse
reports its own (the usage, then ``refsim CMD: error: ...``) and returns 2 (docs/cli.md,
"Conventions").

Ctrl-C (SIGINT) at any moment of ``main`` -- building the parser (which imports every subcommand
and through them numpy and numba), parsing, running -- prints one line and returns 130 (128 +
SIGINT, the shell's code for a command ended by Ctrl-C). This module imports only ``sys`` at
the top, so the console script's ``from refsim.cli import main`` leaves no window of its own.
"""

from __future__ import annotations

import sys

INTERRUPTED_EXIT = 130
"""Exit code after Ctrl-C: 128 + SIGINT (2)."""

# Workflow order; each name is a module in this package.
COMMANDS = ["replay", "sweep", "union", "drop_replay", "analyze", "view", "bench", "timing", "inspect",
            "synth", "run", "ngram", "ngram_whatif", "memory"]


def _version() -> str:
    """The installed distribution's version (pyproject.toml), or ``unknown`` when not installed."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("refsim")
    except PackageNotFoundError:
        return "unknown"


def make_parser():
    """Build the top-level parser (an ``argparse.ArgumentParser``) with every available
    subcommand."""
    import argparse
    import importlib
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
    from refsim.cli.common import NUMBER_ARGUMENT
    todo = [parser]
    while todo:                     # every parser, nested ones (refsim timing fit) included
        p = todo.pop()
        # "--cache-mb -inf" is the value -inf for the flag's validator, as "-1" is (argparse's
        # own pattern knows only -1 and -1.5); no refsim flag looks like a negative number
        p._negative_number_matcher = NUMBER_ARGUMENT
        p.set_defaults(_parser=p)   # the innermost parser's default wins: its usage on an error
        todo += [c for a in p._actions if isinstance(a, argparse._SubParsersAction)
                 for c in a.choices.values()]
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (0 ok, 1 refsim error, 2 usage error,
    130 interrupted by Ctrl-C)."""
    command = None
    try:
        from refsim.errors import RefsimError, UsageError
        parser = make_parser()
        args = parser.parse_args(argv)
        command = args.command
        import logging
        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                            format="refsim: %(levelname)s: %(message)s")
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        try:
            code = int(args.func(args) or 0)
            sys.stdout.flush()          # a full disk under `> file` fails here, not at exit
            return code
        except UsageError as exc:
            args._parser.print_usage(sys.stderr)
            print(f"{args._parser.prog}: error: {exc}", file=sys.stderr)   # argparse's own form
            return 2
        except RefsimError as exc:
            print(f"refsim {args.command}: error: {exc}", file=sys.stderr)
            return 1
        except BrokenPipeError:
            return 0
        except OSError as exc:
            import errno
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise
            # the report on stdout could not be written (files are refsim.fileio's, which
            # names them); a full disk is not a bug to show a traceback for
            print(f"refsim {args.command}: error: standard output: write failed: {exc.strerror}",
                  file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        return interrupted(command)


def interrupted(command: str | None = None) -> int:
    """Print the one Ctrl-C line (naming the subcommand once it is known) and return
    :data:`INTERRUPTED_EXIT`."""
    name = f"refsim {command}" if command else "refsim"
    try:
        print(f"{name}: interrupted (outputs not completed were not written)", file=sys.stderr)
    except OSError:
        pass
    return INTERRUPTED_EXIT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
