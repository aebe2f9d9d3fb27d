"""``refsim`` command line: one module per subcommand, registered in ``COMMANDS``.

Each module ``refsim/cli/<name>.py`` defines ``add_parser(subparsers)`` (which must call
``set_defaults(func=run)``) and ``run(args) -> int``. A subcommand maps flags onto one library
call; logic lives in the library. ``main`` catches :class:`refsim.errors.RefsimError`, prints
one line to stderr and returns 1, so a user mistake never shows a traceback; a
:class:`refsim.errors.UsageError` (the command line alone is wrong) is reported as argparse
reports its own (the usage, then ``refsim CMD: error: ...``) and returns 2 (docs/cli.md,
"Conventions").

Start-up (docs/cli.md, "Start-up"): ``main`` builds only the parser of the subcommand named on
the command line (:func:`requested_command`), so ``refsim --version`` imports no subcommand and
``refsim replay ...`` only ``refsim.cli.replay``; :func:`make_parser` with no argument builds every
one (the help listing, tools/make_cli_doc.py, the tests). Command modules import their
implementation's heavy parts (the forward pass, matplotlib, Numba kernels) where they use them.

Ctrl-C (SIGINT) at any moment of ``main`` -- building the parser, parsing, running -- prints one
line and returns 130 (128 + SIGINT, the shell's code for a command ended by Ctrl-C). A Ctrl-C
that arrives inside an import is raised when the import has finished
(:mod:`refsim.interrupt`: numpy's and numba's extensions would turn it into an ImportError);
with SIGINT ignored on entry (a background job) the command ignores it too. This module imports
only ``sys`` at the top, so the console script's ``from refsim.cli import main`` leaves no window
of its own.
"""

from __future__ import annotations

import sys

from refsim.interrupt import INTERRUPTED_EXIT  # noqa: F401  (re-exported: exit code after Ctrl-C)

# Workflow order; each name is a module in this package.
COMMANDS = ["replay", "sweep", "union", "drop_replay", "analyze", "view", "bench", "timing", "inspect",
            "synth", "run", "ngram", "ngram_whatif", "memory", "whatif", "layout"]


def _version() -> str:
    """The installed distribution's version (pyproject.toml), or ``unknown`` when not installed."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("refsim")
    except PackageNotFoundError:
        return "unknown"


def _version_action(argparse):
    """argparse's ``version`` action reading the version only when ``--version`` is given
    (``importlib.metadata`` costs more than the rest of a small command's start-up)."""
    class _Version(argparse._VersionAction):
        @property
        def version(self):
            return f"refsim {_version()}"

        @version.setter
        def version(self, value):
            pass
    return _Version


def command_name(module: str) -> str:
    """The subcommand a module of :data:`COMMANDS` defines (``drop_replay`` -> ``drop-replay``)."""
    return module.replace("_", "-")


def requested_command(argv: list[str]) -> str | None:
    """Which subcommand's parser ``argv`` needs: the module name of its first word that is not an
    option (the top-level options take no value), ``""`` for none (``refsim --version``), or None
    for every one (help asked for, no subcommand, or a word that is none: argparse's listing)."""
    names = {command_name(m): m for m in COMMANDS}
    for word in argv:
        if word in ("-h", "--help") or word == "--":
            return None
        if not word.startswith("-"):
            return names.get(word)
    return ""


def make_parser(only: str | None = None):
    """Build the top-level parser (an ``argparse.ArgumentParser``) with every available
    subcommand, or with subcommand module ``only`` alone (``""``: none; see
    :func:`requested_command`)."""
    import argparse
    import importlib
    parser = argparse.ArgumentParser(
        prog="refsim",
        description="Reference simulator of the streamed-MoE speculative decoding loop.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    parser.add_argument("--version", action=_version_action(argparse), version=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS if only is None else [m for m in COMMANDS if m == only]:
        try:
            module = importlib.import_module(f"refsim.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"refsim.cli.{name}":
                continue  # subcommand not built yet
            raise
        module.add_parser(sub)
    if only == "":
        return parser
    from refsim.cli.common import NUMBER_ARGUMENT
    todo = [parser]
    while todo:                     # every parser, nested ones (refsim timing fit) included
        p = todo.pop()
        # "--cache-mb -inf" is the value -inf for the flag's validator, as "-1" is (argparse's
        # own pattern knows only -1 and -1.5); no refsim flag looks like a negative number
        p._negative_number_matcher = NUMBER_ARGUMENT
        p.set_defaults(_parser=p)   # the innermost parser's default wins: its usage on an error
        children = [c for a in p._actions if isinstance(a, argparse._SubParsersAction)
                    for c in a.choices.values()]
        if p is not parser and not children and "--quiet" not in p._option_string_actions:
            p.add_argument("--quiet", action="store_true",     # every command, one meaning
                           help="no progress bars on stderr (shown only when stderr is a "
                                "terminal, and never with --json)")
        todo += children
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (0 ok, 1 refsim error, 2 usage error,
    130 interrupted by Ctrl-C)."""
    seen: dict = {}                     # the subcommand, once parsed (named by the Ctrl-C line)
    try:
        from refsim.interrupt import DeferredInterrupt
        with DeferredInterrupt(sys._getframe()):     # no Ctrl-C inside an import
            return _run(argv, seen)
    except KeyboardInterrupt:
        return interrupted(seen.get("command"))


def _run(argv: list[str] | None, seen: dict) -> int:
    """:func:`main` under :class:`refsim.interrupt.DeferredInterrupt`; puts the parsed
    subcommand in ``seen["command"]``."""
    from refsim.errors import RefsimError, UsageError
    parser = make_parser(requested_command(sys.argv[1:] if argv is None else argv))
    args, extra = parser.parse_known_args(argv)
    if extra:       # named by the innermost parser, with its usage ("refsim timing fit: error")
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    seen["command"] = args.command
    import logging
    root = logging.getLogger()      # this command's handler replaces an earlier main()'s
    for h in [h for h in root.handlers if getattr(h, "refsim_cli", False)]:
        root.removeHandler(h)
    root.addHandler(_log_handler(getattr(args, "_parser", parser).prog))
    root.setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    if not getattr(args, "func", None):
        # no command: the listing of every subcommand on stdout (what a bare `refsim` asks to
        # see), argparse's line for a missing argument on stderr, exit 2 (nothing was run; a
        # script that calls refsim without a command fails): docs/cli.md "Conventions"
        make_parser().print_help()
        print("refsim: error: the following arguments are required: COMMAND", file=sys.stderr)
        return 2
    if sys.stdout is None:      # started with stdout closed (`>&-`): every report would be lost
        print(f"{getattr(args, '_parser', parser).prog}: error: standard output is closed; "
              "expected it open (redirect it to a file or /dev/null)", file=sys.stderr)
        return 1
    from refsim import progress
    progress.configure(not (getattr(args, "quiet", False) or getattr(args, "json", False)))
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()          # a full disk under `> file` fails here, not at exit
        return code
    except UsageError as exc:
        args._parser.print_usage(sys.stderr)
        print(f"{args._parser.prog}: error: {exc}", file=sys.stderr)   # argparse's own form
        return 2
    except RefsimError as exc:            # named by the innermost command ("refsim timing fit")
        print(f"{args._parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except OSError as exc:
        import errno
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        # the report on stdout could not be written (files are refsim.fileio's, which
        # names them); a full disk is not a bug to show a traceback for
        print(f"{args._parser.prog}: error: standard output: write failed: {exc.strerror}",
              file=sys.stderr)
        return 1


def _log_handler(prog: str):
    """The stderr handler of library log records, each as the command's own line: ``refsim
    replay: warning: ...`` (:func:`refsim.errors.warning_line`'s form; the level in lower case,
    as argparse's ``error``). ``logging`` is imported only when a command runs."""
    import logging

    def lower_level(record) -> bool:
        record.level = record.levelname.lower()
        return True
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(prog.replace("%", "%%") + ": %(level)s: %(message)s"))
    handler.addFilter(lower_level)
    handler.refsim_cli = True
    return handler


def interrupted(command: str | None = None) -> int:
    """Print the one Ctrl-C line (naming the subcommand once it is known) and return
    :data:`INTERRUPTED_EXIT`."""
    from refsim.interrupt import report_interrupted
    return report_interrupted(f"refsim {command}" if command else "refsim")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
