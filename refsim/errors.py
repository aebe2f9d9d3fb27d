"""The error hierarchy (and one warning category). Library code raises these; only the CLI turns them
into exit codes."""


class RefsimError(Exception):
    """Base of every error refsim raises on bad input or configuration."""


class ModelFormatError(RefsimError):
    """A GGUF file is malformed or unsupported (names the file and what was expected)."""


class TraceFormatError(RefsimError):
    """A route-trace file is malformed (names the file, the line number and what was expected)."""


class ConfigError(RefsimError):
    """A bad flag, value or combination (names the flag and the accepted values)."""


class MetricsFormatError(RefsimError):
    """An engine per-token metrics CSV (or its ``.metrics`` sidecar) is malformed (names the file,
    the line number and what was expected)."""


class UsageError(ConfigError):
    """A mistake the command line alone shows: a flag value outside what the flag accepts, a bound
    set by another flag, flags that conflict or need another flag. The CLI exits 2 for it, as
    argparse does for its own usage errors (docs/cli.md, "Conventions"); library callers can catch
    it as a :class:`ConfigError`. Value messages read ``argument FLAG: expected RANGE, got 'TEXT'``
    (:func:`value_message`), argparse's form."""


class RefsimWarning(UserWarning):
    """A figure the caller may not expect, from library code that does not print (a budget below
    one token cycle, dropping on a narrow routing): :func:`refsim.session.simulate` issues it with
    :func:`warnings.warn` unless given a ``warn`` callback; the CLI prints the same line on
    stderr."""


def warning_line(cmd: str | None, text: str) -> str:
    """The one form of a warning on stderr: ``refsim CMD: warning: TEXT`` (``refsim: warning:
    TEXT`` before a command is known), as argparse's ``refsim CMD: error: ...`` (docs/cli.md
    "Conventions"). ``cmd`` is the subcommand's words (``replay``, ``timing fit``)."""
    return f"refsim {cmd}: warning: {text}" if cmd else f"refsim: warning: {text}"


def value_message(flag: str, expected: str, got) -> str:
    """``"argument --draft: expected an integer in 1..8, got '0'"``: the one form of a bad flag
    value, whether argparse's ``type=`` validator or a later check reports it. ``got`` is quoted
    as text (``str(got)``), as the user typed it when it is the flag's text."""
    return f"argument {flag}: expected {expected}, got {str(got)!r}"
