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

:func:`decode_terms` computes them for one decode and :func:`decode_term_arrays` for ``n`` at
once (one implementation, ``_terms``, for both operand kinds);
:func:`refsim.timing.verdict.price` mixes them over a configuration's decode kinds (coverage,
tokens per decode, the MTP head), :func:`refsim.timing.breakeven.decode_ms` and
:func:`refsim.timing.whatif.device_whatif` sum them, and
:func:`refsim.timing.whatif.predicted_run_times` (``run --csv --device``'s per-decode columns)
maps them onto the engine's columns, so no two commands price one decode differently (issue 29,
item 1).
"""

from __future__ import annotations

import numpy as np

from refsim.timing.model import DeviceModel

TERMS = ("compute", "extra_positions", "bookkeeping", "contention", "flash", "stall")
"""The in-decode terms, in the order :func:`decode_terms` returns and :func:`decode_ms` sums
them."""


SERIAL_FLASH = "serial_flash"
"""The key :func:`decode_term_arrays` adds beside :data:`TERMS`: the reads' serial flash time,
``tail (i0 + x (a + b / L))`` ms, under ``--overlap`` too (there it is no term of the decode: the
engine's ``io_ms`` column, which the metrics CSV fills with it for reference; docs/telemetry.md,
"Predicted times")."""


def _terms(dev: DeviceModel, model: str, overlap: bool, cache: bool, x, width, eps: float,
           io, stall) -> dict:
    """The rule itself (module docstring), written once for either operand kind: Python floats
    (one decode) or (n,) float64 arrays (elementwise); ``io`` and ``stall`` are
    :meth:`DeviceModel.token_ms`' own (before ``tail``). A term that does not depend on the
    decode is a float even for arrays (the caller broadcasts it)."""
    v, c, tail = dev.value, dev.compute_floor(model), dev.value("tail")
    mgmt = (v("m0") + v("m1") * x) if cache else 0.0
    contention = v("kappa") * x if overlap else 0.0
    flash = tail * io
    return {"compute": tail * c, "extra_positions": extra_positions_ms(tail * c, eps, width),
            "bookkeeping": tail * mgmt, "contention": tail * contention,
            "flash": 0.0 if overlap else flash, "stall": tail * stall if overlap else 0.0,
            SERIAL_FLASH: flash}


def extra_positions_ms(tail_c, eps, width):
    """The extra positions' term, ``tail C eps (w - 1)`` ms, from ``tail C`` (evaluated in this
    order: ``((tail C) eps) (w - 1)``); either operand kind."""
    return tail_c * eps * (width - 1)


def decode_terms_fixed(dev: DeviceModel, model: str, lanes: int, overlap: bool, cache: bool,
                       x: float) -> tuple[dict, float]:
    """One decode's terms that depend on neither its width nor ``eps``, and ``tail C``: the
    staging a band evaluates once per device (refsim.timing.verdict's fused tok/s). The decode's
    ``extra_positions`` is :func:`extra_positions_ms` of the second value; with it, every term
    equals :func:`decode_terms`' to the last bit (the same ``_terms``).

    Returns
    -------
    (dict of str -> float, float)
        :data:`TERMS` but ``extra_positions``, ms; ``tail C``, ms.

    Raises
    ------
    ConfigError
        As :func:`decode_term_arrays` (the device's refusals).
    """
    p = dev.token_ms([x], model, lanes, overlap, cache)
    terms = _terms(dev, model, overlap, cache, x, 1.0, 0.0, float(p["io"][0]), float(p["stall"][0]))
    return ({k: terms[k] for k in TERMS if k != "extra_positions"},
            dev.value("tail") * dev.compute_floor(model))


def decode_term_arrays(dev: DeviceModel, model: str, lanes: int, overlap: bool, cache: bool,
                       x, width, eps: float, where: str = "") -> dict:
    """The terms of ``n`` decodes at once, ms each (module docstring).

    Parameters
    ----------
    dev : DeviceModel
    model : str
        Which compute floor ``C``.
    lanes : int
        I/O lanes ``L`` (``--io-threads``).
    overlap, cache : bool
        The engine's ``--overlap``; the expert cache on.
    x : array_like, shape (n,), float64
        Flash MiB (2^20 bytes) each decode reads.
    width : array_like, shape (n,), float64
        Positions of each decode (>= 1; a mean is allowed).
    eps : float
        Compute of each extra position as a fraction of ``C``.
    where : str
        Names the option in the device's refusals (as :meth:`DeviceModel.token_ms`'s).

    Returns
    -------
    dict of str -> ndarray, shape (n,), float64
        Every key of :data:`TERMS` and :data:`SERIAL_FLASH`. Element ``i`` is, to the last bit,
        what :func:`decode_terms` gives for ``x[i]``, ``width[i]``: both evaluate the one rule
        with the same IEEE operations in the same order.

    Raises
    ------
    ConfigError
        The device's refusals (:meth:`DeviceModel.token_ms`: unknown model, a mode it was not
        fitted on, a time <= 0).
    """
    x = np.asarray(x, dtype=np.float64)
    width = np.asarray(width, dtype=np.float64)
    p = dev.token_ms(x, model, lanes, overlap, cache, where)
    terms = _terms(dev, model, overlap, cache, x, width, eps, p["io"], p["stall"])
    return {k: np.full(x.shape, t, dtype=np.float64) if np.ndim(t) == 0 else t
            for k, t in terms.items()}


def decode_terms_at(dev: DeviceModel, model: str, lanes: int, overlap: bool, cache: bool,
                    x: float):
    """:func:`decode_terms` staged for a band: the device's part that depends on the reads alone
    (:meth:`DeviceModel.token_ms` at ``x``) evaluated once; the returned function of
    ``(width, eps)`` gives, to the last bit, ``decode_terms(dev, model, lanes, overlap, cache, x,
    width, eps)`` (it is that function's second half).

    Raises
    ------
    ConfigError
        As :func:`decode_term_arrays` (the device's refusals), when staged.
    """
    p = dev.token_ms([x], model, lanes, overlap, cache)
    io, stall = float(p["io"][0]), float(p["stall"][0])

    def at(width: float, eps: float) -> dict:
        terms = _terms(dev, model, overlap, cache, x, width, eps, io, stall)
        return {k: terms[k] for k in TERMS}
    return at


def decode_terms(dev: DeviceModel, model: str, lanes: int, overlap: bool, cache: bool, x: float,
                 width: float, eps: float) -> dict:
    """One decode's terms, ms each (module docstring), keyed by :data:`TERMS`, as Python floats:
    the rule of :func:`decode_term_arrays` for one decode (its parameters, each for one decode:
    ``x`` the flash MiB it reads, ``width`` its positions, floats).

    Raises
    ------
    ConfigError
        As :func:`decode_term_arrays` (the device's refusals, :meth:`DeviceModel.token_ms`).
    """
    return decode_terms_at(dev, model, lanes, overlap, cache, x)(width, eps)


def decode_ms(dev: DeviceModel, x: float, width: float, model: str, lanes: int, overlap: bool,
              cache: bool, eps: float) -> float:
    """The sum of :func:`decode_terms` in :data:`TERMS` order, ms per decode."""
    terms = decode_terms(dev, model, lanes, overlap, cache, x, width, eps)
    return float(sum(terms[k] for k in TERMS))
