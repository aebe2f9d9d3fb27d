"""One decode's time on a device, term by term: the one rule every ``--device`` figure is made of.

A decode of ``w`` positions (``w`` may be a mean: 1 + drafts) reading ``x`` MiB (2^20 bytes) from
flash costs, in ms (the device's rules, refsim.timing.model and docs/timing.md "The rules"; the
per-position term, docs/timing.md "Break-even")::

    compute           tail C
    extra_positions   tail C eps (w - 1)
    bookkeeping       tail cache (m0 + m1 x)
    contention        tail overlap kappa x
    flash             tail (i0 + x (a + b / L))          serial only
    stall             tail max(0, s0 + s1 x - h C)       --overlap only

:func:`decode_terms` returns them; :func:`refsim.timing.verdict.price` mixes them over a
configuration's decode kinds (coverage, tokens per decode, the MTP head), and
:func:`refsim.timing.breakeven.decode_ms`, :func:`refsim.timing.whatif.device_whatif` sum them, so
no two commands price one decode differently (issue 29, item 1).
"""

from __future__ import annotations

from refsim.timing.model import DeviceModel

TERMS = ("compute", "extra_positions", "bookkeeping", "contention", "flash", "stall")
"""The in-decode terms, in the order :func:`decode_terms` returns and sums them."""


def decode_terms(dev: DeviceModel, model: str, lanes: int, overlap: bool, cache: bool, x: float,
                 width: float, eps: float) -> dict:
    """One decode's terms, ms each (module docstring), keyed by :data:`TERMS`.

    Parameters
    ----------
    dev : DeviceModel
    model : str
        Which compute floor ``C``.
    lanes : int
        I/O lanes ``L`` (``--io-threads``).
    overlap, cache : bool
        The engine's ``--overlap``; the expert cache on.
    x : float
        Flash MiB the decode reads.
    width : float
        Positions of the decode (>= 1; a mean is allowed).
    eps : float
        Compute of each extra position as a fraction of ``C``.

    Raises
    ------
    ConfigError
        The device's refusals (:meth:`DeviceModel.token_ms`: unknown model, a mode it was not
        fitted on, a time <= 0).
    """
    p = dev.token_ms([x], model, lanes, overlap, cache)
    v, c, tail = dev.value, dev.compute_floor(model), dev.value("tail")
    mgmt = (v("m0") + v("m1") * x) if cache else 0.0
    contention = v("kappa") * x if overlap else 0.0
    return {"compute": tail * c, "extra_positions": tail * c * eps * (width - 1),
            "bookkeeping": tail * mgmt, "contention": tail * contention,
            "flash": 0.0 if overlap else tail * float(p["io"][0]),
            "stall": tail * float(p["stall"][0]) if overlap else 0.0}


def decode_ms(dev: DeviceModel, x: float, width: float, model: str, lanes: int, overlap: bool,
              cache: bool, eps: float) -> float:
    """The sum of :func:`decode_terms` in :data:`TERMS` order, ms per decode."""
    terms = decode_terms(dev, model, lanes, overlap, cache, x, width, eps)
    return float(sum(terms[k] for k in TERMS))
