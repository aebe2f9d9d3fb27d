"""Results as tables: pandas DataFrames and Arrow tables, built column by column from NumPy arrays.

A result that is a table (a trace's rows, a sweep's points, a replay's decodes, a run's steps, a
metrics CSV's rows, ...) derives from :class:`Table` and defines :meth:`Table.to_columns`: its
columns as a dict of NumPy arrays, in order, each of one length. That needs nothing beyond NumPy;
:meth:`Table.to_pandas` and :meth:`Table.to_arrow` build the frame from those arrays (no Python
loop over rows) and need the optional extra ``frames`` (pandas, pyarrow)::

    python3 -m pip install 'refsim[frames]'

Without it they raise :class:`refsim.errors.ConfigError` saying so (:data:`FRAMES_INSTALL_HINT`);
the rest of refsim never imports pandas or pyarrow.

Conventions of every table (docs/notebook.md, "Columns", lists each table's columns and units):
names are the result's own field names (units in the names: ``_bytes`` bytes, ``_mib`` MiB =
2^20 bytes, ``_pct`` percent, ``_s`` seconds); integer counters are ``int64``; a rate that is
undefined (over zero events, ``None`` in the result) is ``NaN`` in its ``float64`` column; names
and kinds are text columns (NumPy ``object`` arrays of ``str``).
"""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np

from refsim.errors import ConfigError

FRAMES_INSTALL_HINT = ("needs the optional frames extra (pandas and pyarrow); install it with: "
                       "python3 -m pip install 'refsim[frames]'")
"""What :func:`to_pandas` / :func:`to_arrow` say, after the method's name, when pandas or pyarrow
is not installed."""


def _require(module: str, what: str):
    """Import ``module`` (``pandas`` or ``pyarrow``).

    Raises
    ------
    ConfigError
        ``"<what> <FRAMES_INSTALL_HINT> (no module named <module>)"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"{what} {FRAMES_INSTALL_HINT} (no module named {module!r})") from None


def to_pandas(columns: dict):
    """A ``pandas.DataFrame`` of ``columns`` (name -> 1-D ndarray, in order), dtypes kept.

    Raises
    ------
    ConfigError
        pandas is not installed (:data:`FRAMES_INSTALL_HINT`).
    """
    pd = _require("pandas", "to_pandas()")
    return pd.DataFrame({name: values for name, values in columns.items()})


def to_arrow(columns: dict):
    """A ``pyarrow.Table`` of ``columns`` (name -> 1-D ndarray, in order); text columns become
    ``string``, the others their NumPy type.

    Raises
    ------
    ConfigError
        pyarrow is not installed (:data:`FRAMES_INSTALL_HINT`).
    """
    pa = _require("pyarrow", "to_arrow()")
    return pa.table({name: pa.array(values) for name, values in columns.items()})


def floats(values) -> np.ndarray:
    """``float64`` column of ``values`` (a sequence of numbers or None): None becomes NaN."""
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64).reshape(len(values))


def texts(values) -> np.ndarray:
    """Text column of ``values`` (each converted with ``str``): a NumPy ``object`` array."""
    out = np.empty(len(values), dtype=object)
    out[:] = [str(v) for v in values]
    return out


def _kind(annotation: str) -> str:
    """How a dataclass field's annotation (a type or its text: ``int``, ``float | None``, ``bool``,
    ``str``, ``DecodeKind``) is held in a column: ``bool``, ``float``, ``int`` or ``text``. An ``int | None``
    field is ``float`` (None = NaN)."""
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    parts = {p.strip() for p in text.split("|")}
    if "bool" in parts:
        return "bool"
    if "float" in parts or ("int" in parts and "None" in parts):
        return "float"
    if parts == {"int"}:
        return "int"
    return "text"


def dataclass_columns(records, cls, names=None) -> dict:
    """Columns of a list of ``cls`` instances (a dataclass), one per field (or per name of
    ``names``, in that order), typed by the field's annotation (:func:`_kind`): ``int64``,
    ``float64`` (None = NaN), ``bool`` or text (an enum member as its lower-case name). For short
    lists (decodes, sweep points, windows), never for trace rows."""
    annotations = {f.name: f.type for f in dataclasses.fields(cls)}
    out = {}
    for name in names or annotations:
        values = [getattr(r, name) for r in records]
        kind = _kind(annotations[name])
        if kind == "bool":
            out[name] = np.array(values, dtype=bool).reshape(len(values))
        elif kind == "float":
            out[name] = floats(values)
        elif kind == "int":
            out[name] = np.array(values, dtype=np.int64).reshape(len(values))
        else:
            out[name] = texts([v.name.lower() if hasattr(v, "name") else v for v in values])
    return out


class Table:
    """A result with a tabular view: :meth:`to_columns` (NumPy), :meth:`to_pandas`,
    :meth:`to_arrow`."""

    def to_columns(self) -> dict:
        """The table as ``{name: 1-D ndarray}``, in column order (every array of one length)."""
        raise NotImplementedError

    def to_pandas(self):
        """The table as a ``pandas.DataFrame`` (needs ``refsim[frames]``; docs/notebook.md).

        Raises
        ------
        ConfigError
            pandas is not installed.
        """
        return to_pandas(self.to_columns())

    def to_arrow(self):
        """The table as a ``pyarrow.Table`` (needs ``refsim[frames]``; docs/notebook.md).

        Raises
        ------
        ConfigError
            pyarrow is not installed.
        """
        return to_arrow(self.to_columns())
