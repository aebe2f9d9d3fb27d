"""The error hierarchy. Library code raises these; only the CLI turns them into exit codes."""


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
