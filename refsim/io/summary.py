"""The headline figures of a replay's reads on the device (``refsim replay --model``).

Scopes follow :class:`refsim.cache.summary.CacheSummary`'s: ``window_read_bytes`` covers every
event (prefill included), as ``read_bytes`` does; the ``decode_*`` figures and the per-token ones
cover the generation (target and draft-context decodes), as the engine's ``read_MiB`` does
(bmoe-engine.md §4.2: "aligned windows"). MiB = 2^20 bytes; KiB = 2^10 bytes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from refsim import MIB
from refsim.cache.summary import GENERATION_KINDS
from refsim.fmt import num, plural, ratio


@dataclass(frozen=True)
class IoSummary:
    """Windows, requests and lanes of a replay (bytes unless the name says MiB).

    ``requests_per_token`` and ``window_mib_per_token`` are per confirmed token;
    ``bytes_per_request`` is decode window bytes per decode request; ``lane_bytes_per_token``
    the busiest lane's window bytes summed over each decode's layer batches, per token (what the
    reads take on lanes of equal bandwidth); ``decode_batches`` the layer batches with a read,
    ``decode_rounds`` their ``ceil(requests / lanes)`` summed. A ratio over zero is None. With
    ``--merge-gap`` (``merge_gap`` not None) the requests are the merged ones and
    ``decode_slices``/``slices_per_token`` count the slices before merging; without it these
    three are None and absent from the JSON.
    """

    model: str
    data_start: int
    block_bytes: int
    o_direct: bool
    io_threads: int
    lanes: int
    overlap: bool
    window_read_bytes: int
    slice_read_bytes: int
    decode_window_read_bytes: int
    decode_slice_read_bytes: int
    requests: int
    decode_requests: int
    decode_batches: int
    decode_rounds: int
    tokens: int
    window_mib_per_token: float | None
    requests_per_token: float | None
    bytes_per_request: float | None
    lane_bytes_per_token: float | None
    merge_gap: int | None = None
    decode_slices: int | None = None
    slices_per_token: float | None = None

    @classmethod
    def from_tally(cls, tally, tokens: int) -> "IoSummary":
        lay, cfg = tally.layout, tally.cfg
        gen = GENERATION_KINDS
        dw = tally.total("window_bytes", gen)
        dr = tally.total("requests", gen)
        return cls(model=lay.source, data_start=lay.data_start, block_bytes=lay.block,
                   o_direct=lay.o_direct, io_threads=cfg.io_threads, lanes=cfg.lanes,
                   overlap=cfg.overlap, window_read_bytes=int(tally.window_bytes.sum()),
                   slice_read_bytes=int(tally.slice_bytes.sum()), decode_window_read_bytes=dw,
                   decode_slice_read_bytes=tally.total("slice_bytes", gen),
                   requests=int(tally.requests.sum()), decode_requests=dr,
                   decode_batches=tally.total("batches", gen),
                   decode_rounds=tally.total("rounds", gen), tokens=int(tokens),
                   window_mib_per_token=ratio(dw / MIB, tokens),
                   requests_per_token=ratio(dr, tokens), bytes_per_request=ratio(dw, dr),
                   lane_bytes_per_token=ratio(tally.total("lane_bytes", gen), tokens),
                   **cls._merged(tally, tokens))

    @staticmethod
    def _merged(tally, tokens: int) -> dict:
        if tally.cfg.merge_gap is None:
            return {}
        ds = tally.total("slices", GENERATION_KINDS)
        return {"merge_gap": tally.cfg.merge_gap, "decode_slices": ds,
                "slices_per_token": ratio(ds, tokens)}

    def json_keys(self) -> dict:
        """The ``--json`` additions: the totals beside the cache summary's, the rest under
        ``io``."""
        d = asdict(self)
        top = ("window_read_bytes", "decode_window_read_bytes", "window_mib_per_token",
               "requests", "decode_requests", "requests_per_token", "bytes_per_request")
        out = {k: d.pop(k) for k in top}
        if self.merge_gap is None:
            for k in ("merge_gap", "decode_slices", "slices_per_token"):
                d.pop(k)
        out["io"] = d
        return out

    def line(self) -> str:
        """One text line."""
        over = (ratio(100.0 * (self.decode_window_read_bytes - self.decode_slice_read_bytes),
                      self.decode_slice_read_bytes))
        kib = None if self.bytes_per_request is None else self.bytes_per_request / 1024
        lane = None if self.lane_bytes_per_token is None else self.lane_bytes_per_token / MIB
        mode = "O_DIRECT" if self.o_direct else "buffered"
        return (f"windows: {num(self.decode_window_read_bytes / MIB, 1)} MiB in decode "
                f"(+{num(over, 3)}% over the slices), {num(self.window_mib_per_token, 2)} "
                f"MiB/token; {num(self.requests_per_token, 1)} requests/token of "
                f"{num(kib, 1)} KiB; block {self.block_bytes} B, {mode}, {plural(self.lanes, 'lane')} "
                f"{'--overlap' if self.overlap else 'serial'}: busiest lane "
                f"{num(lane, 2)} MiB/token" + self._merge_text())

    def _merge_text(self) -> str:
        if self.merge_gap is None:
            return ""
        return (f"; --merge-gap {self.merge_gap}: {num(self.slices_per_token, 1)} slices/token "
                f"read as {num(self.requests_per_token, 1)} requests")
