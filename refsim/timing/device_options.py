"""The ``--device`` options of a what-if, as one value: which fitted device model turns a
command's counters into predicted times, and under what I/O configuration (docs/timing.md).

``refsim replay/sweep/union/run/memory`` take them as flags (``refsim.cli.device`` adds the flags
and builds a :class:`DeviceOptions` from them); :class:`refsim.session.RunConfig` holds one.
The times are predictions of the device, never measurements (:mod:`refsim.timing.whatif`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from refsim.timing.defaults import DEFAULT_EPS, DEFAULT_IO_THREADS


@dataclass(frozen=True)
class DeviceOptions:
    """The device flags of one command.

    Parameters
    ----------
    device : str or None
        ``--device DEVICE.json``: a device model written by ``refsim timing fit``; None = no
        predicted times (every other field must then keep its default).
    device_model : str or None
        ``--device-model KEY``: which of the device's compute floors stands for the model
        (None: its only one).
    io_threads : int
        ``--io-threads L``: I/O lanes (default 4, the engine's).
    overlap : bool
        ``--overlap``: reads overlapped with compute (the engine's flag).
    position_cost : float or None
        ``--position-cost EPS``: compute of each extra verify position as a fraction of one
        position's; None (the default): the device file's own reading at each verify width
        (``timing fit --gguf``), else 0.38 labelled assumed (:func:`refsim.timing.positions.resolve_eps`).
    """

    device: str | None = None
    device_model: str | None = None
    io_threads: int = DEFAULT_IO_THREADS
    overlap: bool = False
    position_cost: float | None = None

    @classmethod
    def from_args(cls, args) -> "DeviceOptions":
        """From the flags ``refsim.cli.device.add_device_args`` adds (an ``argparse.Namespace``;
        a command without ``--position-cost`` keeps its default)."""
        return cls(device=getattr(args, "device", None), device_model=getattr(args, "device_model", None),
                   io_threads=getattr(args, "io_threads", DEFAULT_IO_THREADS),
                   overlap=bool(getattr(args, "overlap", False)),
                   position_cost=getattr(args, "position_cost", None))

    def load(self, lanes_used: bool = False, defer: bool = False):
        """``(device, name, model)``: the :class:`~refsim.timing.model.DeviceModel` read from
        :attr:`device`, that path, and the compute floor's key; or None without a device. Loaded
        and checked before a command's work (a bad device file costs nothing). ``lanes_used``:
        the command uses ``--io-threads``/``--overlap`` without a device too (``replay --model``
        counts its requests' lanes, docs/io.md). ``defer``: the command calls :meth:`for_input`
        once its input is read, so a device of several models and no ``--device-model`` gives
        ``model`` None here (the input's model may pick one) instead of the refusal.

        Raises
        ------
        UsageError
            ``"--device-model without --device: it sets the device model's what-if"`` (likewise
            ``--io-threads``, ``--overlap``, ``--position-cost`` given without a device).
        ConfigError
            The device file's refusals (:func:`refsim.timing.model.load_device`), an unknown or
            missing ``--device-model`` (:func:`refsim.timing.whatif.resolve_model`).

        Logs (``logging``, logger ``refsim.timing``) a warning when ``--io-threads`` is outside
        the lane counts the device was fitted on (:meth:`~refsim.timing.model.DeviceModel.lanes_warning`).
        """
        if self.device is None:
            from refsim.errors import UsageError
            for flag, given in (("--device-model", self.device_model is not None),
                                ("--io-threads",
                                 self.io_threads != DEFAULT_IO_THREADS and not lanes_used),
                                ("--overlap", self.overlap and not lanes_used),
                                ("--position-cost", self.position_cost is not None)):
                if given:
                    raise UsageError(f"{flag} without --device: it sets the device model's what-if")
            return None
        from refsim.timing import load_device
        from refsim.timing.whatif import resolve_model
        dev = load_device(self.device)
        if defer and self.device_model is None and len(dev.compute) > 1:
            loaded = dev, self.device, None           # for_input resolves it
        else:
            loaded = dev, self.device, resolve_model(dev, self.device_model)
        text = dev.lanes_warning(self.io_threads)
        if text is not None:       # the CLI prints it as "refsim CMD: warning: ..." (one line)
            import logging
            logging.getLogger("refsim.timing").warning(text)
        return loaded

    def for_input(self, loaded, input_models):
        """``loaded`` (:meth:`load`'s value) with the compute floor the input's model names when
        the device knows it and ``--device-model`` is not given
        (:func:`refsim.timing.whatif.resolve_model`); None stays None. ``input_models``: the
        names the input states (a route trace's ``model=``, a GGUF's file name and
        ``general.name``; the first is the one a message prints; empty: unknown).
        :meth:`input_warning` says when the device knows only another model.

        Raises
        ------
        ConfigError
            The device knows several models, none the input's, and no ``--device-model``.
        """
        if loaded is None:
            return None
        from refsim.timing.whatif import resolve_model
        dev, name, _ = loaded
        return dev, name, resolve_model(dev, self.device_model,
                                        input_models=[m for m in input_models if m])

    def input_warning(self, loaded, input_models) -> str | None:
        """The one-line warning when :meth:`for_input`'s floor is the device's only one and the
        input names another model (:func:`refsim.timing.whatif.model_warning`); None otherwise
        (no device, ``--device-model`` given, the input's model unknown or the device's). The
        price is that floor's either way: a command says it after its work, so that a refusal
        stays its only stderr line."""
        if loaded is None:
            return None
        from refsim.timing.whatif import model_warning
        dev, name, model = loaded
        return model_warning(dev, name, model, self.device_model, [m for m in input_models if m])

    def eps_term(self, loaded, width: int):
        """The :class:`~refsim.timing.terms.Term` a ``width``-position decode is priced with on
        ``loaded`` (:meth:`load`'s value): ``--position-cost`` if given, else the device file's
        reading, else the labelled default (:func:`refsim.timing.positions.resolve_eps`)."""
        from refsim.timing.positions import resolve_eps
        dev, _, model = loaded
        return resolve_eps(dev, model, width, self.position_cost)

    def eps(self, loaded, width: int) -> float:
        """:meth:`eps_term`'s value."""
        return self.eps_term(loaded, width).value

    def figures(self, loaded, mib_per_token: float | None, tokens_per_decode: float = 1.0,
                draft_s_per_token: float = 0.0, cache: bool = True,
                positions_per_decode: float | None = None, width: int | None = None):
        """The :class:`refsim.timing.whatif.DeviceWhatIf` of a what-if reading ``mib_per_token``
        MiB (2^20 bytes) per confirmed token, ``tokens_per_decode`` tokens and
        ``positions_per_decode`` positions (default: as many as tokens) per target decode; or
        None when ``loaded`` (:meth:`load`'s value) is None. ``mib_per_token`` None (no decoded
        token: a prefill-only trace) gives the device's configuration with every time ``None``
        (:meth:`~refsim.timing.whatif.DeviceWhatIf.undefined`: ``n/a``, never the price of a
        decode that reads nothing). ``width``: the positions of a drafted decode, for the cost of
        its extra positions (:meth:`eps`; default: ``positions_per_decode`` (or
        ``tokens_per_decode``) rounded up)."""
        if loaded is None:
            return None
        import math

        from refsim.timing.whatif import device_whatif
        dev, name, model = loaded
        if width is None:
            width = math.ceil(positions_per_decode if positions_per_decode is not None
                              else tokens_per_decode)
        whatif = device_whatif(dev, name, 0.0 if mib_per_token is None else mib_per_token,
                               tokens_per_decode, model, self.io_threads, self.overlap, cache,
                               self.eps(loaded, width), draft_s_per_token, positions_per_decode)
        return whatif.undefined() if mib_per_token is None else whatif

    def run_figures(self, loaded, result, n_gen: int, work=None):
        """A finished run's predicted s/token, tok/s and effective tok/s
        (:class:`refsim.timing.whatif.DeviceWhatIf`), or None when ``loaded`` is None: the run's
        configuration (:func:`refsim.timing.whatif.run_config`: its coverage, drafts and tokens
        per decode, the mean reads of its plain and drafted decodes) priced per *position* by
        :func:`refsim.timing.verdict.point_terms`, the function ``refsim whatif`` prices with;
        ``work`` (:func:`refsim.timing.work.position_work` of the model) prices the MTP head's
        compute, which enters the effective rate (issue 29 item 1).

        Raises
        ------
        ConfigError
            The device's refusals; an MTP run without ``work``.
        """
        if loaded is None:
            return None
        from refsim.timing.whatif import price_device, priced_whatif, run_config
        dev, name, model = loaded
        cfg, reads = run_config(result, n_gen)
        dv = price_device(dev, model, self.io_threads, self.overlap, self.eps(loaded, cfg.width),
                          cache=result.cache is not None, work=work)
        return priced_whatif(dv, name, cfg, reads)

    def run_times(self, loaded, result):
        """A run's per-decode predicted times for its metrics CSV
        (:func:`refsim.timing.whatif.predicted_run_times`; the device named by its file's base
        name), or None when ``loaded`` is None. ``result`` is a :class:`refsim.spec.RunResult`."""
        if loaded is None:
            return None
        import os
        from refsim.timing.whatif import predicted_run_times, run_width
        dev, name, model = loaded
        return predicted_run_times(dev, os.path.basename(name), result, model, self.io_threads,
                                   self.overlap, self.eps(loaded, run_width(result)))


def trace_names(headers) -> list[str]:
    """The model names route-trace headers state (``model=``; the engine writes the model
    file's path), each once, in order."""
    return list(dict.fromkeys(h.model for h in headers if h.model))


def gguf_names(path, model) -> list[str]:
    """The names a GGUF gives its model: the file's base name (what the engine's metrics
    preamble and route trace write as ``model=``, so what ``timing fit`` keys a device's compute
    floor by) and its ``general.name``, when present."""
    names = [os.path.basename(os.fspath(path))]
    general = model.metadata.get("general.name") if hasattr(model, "metadata") else None
    if isinstance(general, str) and general:
        names.append(general)
    return names
