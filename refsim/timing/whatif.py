"""A what-if's counters in seconds: the device model applied to a replay, sweep point or run.

Given a device (refsim.timing.model), the MiB a decode reads on average, the tokens it confirms
(1 without speculation; tokens per verify decode with it) and the positions it carries, a decode
costs ``t = tail * (C (1 + eps (w - 1)) + cache (m0 + m1 X) + overlap kappa X + flash(X))`` ms with
``X = MiB/token * tokens/decode`` (refsim.timing.breakeven's rule), and

- predicted s/token = ``t / tokens_per_decode / 1000``; tok/s its inverse;
- effective tok/s = ``1 / (s/token + drafting s/token)`` (the engine's definition,
  docs/telemetry.md; drafting is refsim's measured figure or 0).

These are predictions of the device, never measurements: every output that carries them says
``predicted``. The stall's hinge is applied to the mean decode (docs/timing.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from refsim.errors import ConfigError
from refsim.timing.breakeven import DEFAULT_EPS, decode_ms
from refsim.timing.model import DeviceModel

DEFAULT_IO_THREADS = 4
"""I/O lanes a what-if assumes unless told (the engine's default ``--io-threads``,
bmoe-engine.md §3.4)."""


@dataclass(frozen=True)
class DeviceWhatIf:
    """Predicted times of one what-if on one device (s = seconds)."""

    device: str
    model: str
    io_threads: int
    overlap: bool
    position_cost: float
    ms_per_decode: float
    predicted_s_per_token: float
    predicted_tok_s: float
    predicted_effective_tok_s: float

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        eff = (f", effective {self.predicted_effective_tok_s:.3f} tok/s"
               if self.predicted_effective_tok_s != self.predicted_tok_s else "")
        return (f"device {self.device} (predicted, not measured): {self.predicted_s_per_token:.4f} "
                f"s/token, {self.predicted_tok_s:.3f} tok/s{eff} ({self.io_threads} lanes, "
                f"{'--overlap' if self.overlap else 'serial'}, compute floor of {self.model})")


def resolve_model(device: DeviceModel, model: str | None, flag: str = "--device-model") -> str:
    """The compute floor to use: ``model``, or the device's only one.

    ``flag`` names the option in the messages.

    Raises
    ------
    ConfigError
        No model named and the device knows several; a model the device does not know.
    """
    if model is None:
        if len(device.compute) != 1:
            raise ConfigError(f"{flag}: the device knows {len(device.compute)} models "
                              f"({', '.join(sorted(device.compute))}); name one")
        return next(iter(device.compute))
    device.compute_floor(model, where=f"{flag} {model}")
    return model


def device_whatif(device: DeviceModel, name: str, mib_per_token: float, tokens_per_decode: float,
                  model: str, io_threads: int, overlap: bool, cache: bool = True,
                  eps: float = DEFAULT_EPS, draft_s_per_token: float = 0.0) -> DeviceWhatIf:
    """Predicted s/token and tok/s (see the module docstring).

    ``tokens_per_decode`` >= 1 is also taken as the mean positions per decode (all positions of a
    verify decode are confirmed or re-decoded; a lower bound on the width when drafts are
    rejected).
    """
    if not tokens_per_decode >= 1.0:
        raise ConfigError(f"tokens per decode {tokens_per_decode!r}: expected >= 1")
    x = mib_per_token * tokens_per_decode
    t = decode_ms(device, x, tokens_per_decode, model, io_threads, overlap, cache, eps)
    s_tok = t / tokens_per_decode / 1000.0
    return DeviceWhatIf(device=name, model=model, io_threads=io_threads, overlap=overlap,
                        position_cost=eps, ms_per_decode=t, predicted_s_per_token=s_tok,
                        predicted_tok_s=1.0 / s_tok,
                        predicted_effective_tok_s=1.0 / (s_tok + draft_s_per_token))
