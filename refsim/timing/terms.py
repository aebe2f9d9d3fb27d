"""One term of a what-if: its value, unit, interval and what identified it (issue 29).

Every number a device what-if rests on is carried as a :class:`Term`, so that a command can print
it (``--explain``) with where it came from, and so that an input no data identifies is carried as
an interval into the band (refsim.timing.band) instead of being replaced by a constant.

Kinds (:data:`KINDS`):

- ``fitted``: identified from the engine's recorded plain runs (refsim.timing.fit and the modules
  beside it); the interval is the data's.
- ``derived``: computed from the model's tensor sizes (refsim.model.bytes); the interval is the
  spread of the assumptions the derivation needs (named in ``note``).
- ``published``: a figure the engine's authors published (bmoe-engine.md §7) used as an input.
- ``check``: a value implied by a published *speculation* cell. Printed next to the identified
  value for comparison; never an input of a fit or a default (the fit must not see speculation).
- ``assumed``: given by the user.
- ``not_modelled``: a cost this code does not model; its value is 0 and its interval the largest
  cost measured for it (the band carries it), with the measurement in ``note``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from refsim.errors import ConfigError

KINDS = ("fitted", "derived", "published", "check", "assumed", "not_modelled")
"""What identified a term (see the module docstring)."""


@dataclass(frozen=True)
class Term:
    """A value with its unit, interval and source.

    Attributes
    ----------
    name : str
        Short name (``eps``, ``head_ms``, ``noise``...).
    value : float
        The point estimate.
    lo, hi : float
        The interval the data (or the derivation) allows; ``lo <= value <= hi``. A zero-width
        interval means the term is exact by construction, not that its uncertainty is unknown.
    unit : str
        ``ms/token``, ``fraction of C per position``, ``ratio``...
    kind : str
        One of :data:`KINDS`.
    source : str
        What identified it: which runs, which tensor sizes, which published figure.
    note : str
        How the interval was made (its ends' assumptions), or what is left out.

    Raises
    ------
    ConfigError
        A non-finite number, ``lo > value`` or ``value > hi``, or an unknown kind.
    """

    name: str
    value: float
    lo: float
    hi: float
    unit: str
    kind: str
    source: str
    note: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"term {self.name}: kind {self.kind!r}, expected one of {', '.join(KINDS)}")
        for what in ("value", "lo", "hi"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"term {self.name}: {what} {v!r}, expected a finite number")
        if not self.lo <= self.value <= self.hi:
            raise ConfigError(f"term {self.name}: expected lo <= value <= hi, got {self.lo!r} <= "
                              f"{self.value!r} <= {self.hi!r}")

    @property
    def width(self) -> float:
        """``hi - lo``."""
        return self.hi - self.lo

    def contains(self, x: float) -> bool:
        """Whether ``lo <= x <= hi``."""
        return self.lo <= x <= self.hi

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self, digits: int = 3) -> str:
        """One line for ``--explain``: ``name = value unit [lo, hi] (kind: source)``."""
        f = lambda x: f"{x:.{digits}g}"  # noqa: E731
        return (f"{self.name} = {f(self.value)} {self.unit} [{f(self.lo)}, {f(self.hi)}] "
                f"({self.kind}: {self.source})" + (f"; {self.note}" if self.note else ""))


def exact(name: str, value: float, unit: str, kind: str, source: str, note: str = "") -> Term:
    """A zero-width :class:`Term` (exact by construction)."""
    return Term(name, value, value, value, unit, kind, source, note)


def envelope(name: str, value: float, terms, unit: str, kind: str, source: str,
             note: str = "") -> Term:
    """A :class:`Term` at ``value`` whose interval covers ``value`` and every term's interval
    (the union's hull)."""
    terms = list(terms)
    lo = min([value] + [t.lo for t in terms])
    hi = max([value] + [t.hi for t in terms])
    return Term(name, value, lo, hi, unit, kind, source, note)
