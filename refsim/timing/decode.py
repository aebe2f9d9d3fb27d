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

:func:`decode_term_arrays` computes them for ``n`` decodes at once (the one implementation) and
:func:`decode_terms` for one; :func:`refsim.timing.verdict.price` mixes them over a configuration's
decode kinds (coverage, tokens per decode, the MTP head), :func:`refsim.timing.breakeven.decode_ms`
and :func:`refsim.timing.whatif.device_whatif` sum them, and
:func:`refsim.timing.whatif.predicted_run_times` (``run --csv --device``'s per-decode columns)
maps them onto the engine's columns, so no two commands price one decode differently (issue 29,
item 1).
"""

from __future__ import annotations

import numpy as np

from refsim.timing.model import DeviceModel

TERMS = ("compute", "extra_positions", "bookkeeping", "contention", "flash", "stall")
"""The in-decode terms, in the order :func:`decode_terms` returns and :func:`decode_ms` sums them."""


SERIAL_FLASH = "serial_flash"
"""The key :func:`decode_term_arrays` adds beside :data:`TERMS`: the reads' serial flash time,
``tail (i0 + x (a + b / L))`` ms, under ``--overlap`` too (there it is no term of the decode: the
engine's ``io_ms`` column, which the metrics CSV fills with it for reference; docs/telemetry.md,
"Predicted times")."""


def decode_term_arrays(dev: DeviceModel, model: str, lanes: int, overlap: bool, cache: bool,
                       x, width, eps: float, where: str = "") -> dict:
    """The terms of ``n`` decodes at once, ms each (module docstring): the one implementation of
    the rule; :func:`decode_terms` is its one-decode view.

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
        what :func:`decode_terms` gives for ``x[i]``, ``width[i]`` (the same IEEE operations in
        the same order, elementwise).

    Raises
    ------
    ConfigError
        The device's refusals (:meth:`DeviceModel.token_ms`: unknown model, a mode it was not
        fitted on, a time <= 0).
    """
    x = np.asarray(x, dtype=np.float64)
    width = np.asarray(width, dtype=np.float64)
    p = dev.token_ms(x, model, lanes, overlap, cache, where)
    v, c, tail = dev.value, dev.compute_floor(model), dev.value("tail")
    zero = np.zeros_like(x)
    mgmt = (v("m0") + v("m1") * x) if cache else zero
    contention = v("kappa") * x if overlap else zero
    flash = tail * p["io"]
    return {"compute": np.full_like(x, tail * c),
            "extra_positions": tail * c * eps * (width - 1),
            "bookkeeping": tail * mgmt, "contention": tail * contention,
            "flash": zero if overlap else flash,
            "stall": tail * p["stall"] if overlap else zero,
            SERIAL_FLASH: flash}


def decode_terms(dev: DeviceModel, model: str, lanes: int, overlap: bool, cache: bool, x: float,
                 width: float, eps: float) -> dict:
    """One decode's terms, ms each (module docstring), keyed by :data:`TERMS`: element 0 of
    :func:`decode_term_arrays` at ``[x]``, ``[width]`` (the parameters are its, each for one
    decode: ``x`` the flash MiB it reads, ``width`` its positions, floats), as Python floats.

    Raises
    ------
    ConfigError
        As :func:`decode_term_arrays` (the device's refusals, :meth:`DeviceModel.token_ms`).
    """
    arrays = decode_term_arrays(dev, model, lanes, overlap, cache, [x], [width], eps)
    return {k: float(arrays[k][0]) for k in TERMS}


def decode_ms(dev: DeviceModel, x: float, width: float, model: str, lanes: int, overlap: bool,
              cache: bool, eps: float) -> float:
    """The sum of :func:`decode_terms` in :data:`TERMS` order, ms per decode."""
    terms = decode_terms(dev, model, lanes, overlap, cache, x, width, eps)
    return float(sum(terms[k] for k in TERMS))
