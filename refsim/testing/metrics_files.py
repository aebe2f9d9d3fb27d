"""Hypothesis strategy for valid engine metrics CSVs (every layout), with what a reader must find.

:func:`metrics_files` draws a layout (``v2``, ``v1``, ``legacy`` with an 8/9/11-column header, or
header-less legacy), a column order (the engine's or shuffled: columns are read by name), one to
three turns of rows (decode groups of ``mtp_batch`` tokens where the layout has that column),
each turn closed by its ``# summary`` line except, sometimes, the last. Values are written with
the engine's printf formats, so the expected values are exact.

Also hand-made files for example tests: :func:`v2_group_text` (decode groups), :func:`v1_row`,
:data:`V1_HEAD`, :data:`V1_SESSION` (two turns).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from refsim.telemetry.constants import METRICS_COLUMNS

_INT = {"step", "steps", "read_bytes", "majflt", "turn", "mtp_batch"}
_FMT2 = {"cache_hit_pct", "majflt_mib"}
_FMT1 = {"cache_budget_mib", "rss_mib", "rss_anon_mib", "rss_file_mib", "swap_mib",
         "mem_available_mib", "mem_free_mib", "swap_free_mib"}


@dataclass(frozen=True)
class MetricsFile:
    """A drawn file: its text and the values a correct reader returns."""

    text: str
    layout: str
    header: bool
    columns: tuple
    step: list
    turn_index: list
    wall_ms: list
    read_bytes: list
    mtp_batch: list
    n_summaries: int
    complete: bool
    data_lines: list          # 0-based indices of the row lines in ``text.splitlines()``
    closed_rows: list         # row ordinals (0-based) belonging to a turn closed by a summary


def _fmt(name: str, value) -> str:
    if name in _INT:
        return str(int(value))
    if name in _FMT2:
        return f"{value:.2f}"
    if name in _FMT1:
        return f"{value:.1f}"
    return f"{value:.3f}"


@st.composite
def metrics_files(draw, max_turns: int = 3, max_groups: int = 6) -> MetricsFile:
    """A valid metrics CSV (see the module docstring)."""
    layout = draw(st.sampled_from(["v2", "v1", "legacy", "legacy-headerless"]))
    if layout == "v2":
        columns = list(METRICS_COLUMNS)
    elif layout == "v1":
        columns = list(METRICS_COLUMNS[:22])
    elif layout == "legacy":
        columns = list(METRICS_COLUMNS[:draw(st.sampled_from([8, 9, 11]))])
    else:
        columns = list(METRICS_COLUMNS[:8])
    if layout in ("v2", "v1") and draw(st.booleans()):
        columns = draw(st.permutations(columns))
    header = layout != "legacy-headerless"
    lines: list[str] = []
    if layout in ("v2", "v1"):
        lines.append(f"# bmoe_metrics {layout}")
        if layout == "v2":
            lines.append("# engine=test")
        lines.append("# model=m.gguf arch=qwen3moe n_layer=2 n_expert=8 n_expert_used=2 threads=4")
        lines.append(f"# moe_stream=1 cache_mb=100 overlap={draw(st.integers(0, 1))} io_threads=4")
    if header:
        lines.append(",".join(columns))
    has_batch = "mtp_batch" in columns
    n_turns = draw(st.integers(1, max_turns))
    last_closed = draw(st.booleans())
    step, turn_index, wall, rb, batch, data_lines, closed = [], [], [], [], [], [], []
    n_summaries = 0
    hit = 0.0
    for t in range(n_turns):
        # a header-less file starts with a row (its first line is how the layout is recognised)
        groups = draw(st.lists(st.integers(1, 3) if has_batch else st.just(1),
                               min_size=1 if t == 0 and not header else 0, max_size=max_groups))
        n_tok = sum(groups)
        steps = n_tok + draw(st.integers(0, 3))
        s = 0
        turn_rows = []
        for b in groups:
            w = draw(st.integers(1, 10**6)) / 1000.0
            r = draw(st.integers(0, 10**9))
            for k in range(b):
                s += 1
                hit = min(100.0, hit + draw(st.integers(0, 500)) / 100.0)
                vals = {c: 0.0 for c in columns}
                vals.update(step=s, steps=steps, wall_ms=w if k == 0 else 0.0,
                            read_bytes=r if k == 0 else 0, cache_hit_pct=hit, turn=t,
                            mtp_batch=b, dense_resident_frac=-1.0)
                if "compute_ms" in vals:
                    vals["compute_ms"] = vals["wall_ms"]
                data_lines.append(len(lines))
                lines.append(",".join(_fmt(c, vals[c]) for c in columns))
                turn_rows.append(len(step))
                step.append(s)
                turn_index.append(t)
                wall.append(float(f"{vals['wall_ms']:.3f}"))
                rb.append(vals["read_bytes"])
                batch.append(b)
        if t < n_turns - 1 or last_closed:
            lines.append(f"# summary tokens={n_tok} s/tok=0.100 tok/s=10.000 read_MiB=1.0 "
                         f"cache_hit_pct={hit:.1f} n_prompt=3 load_s=1.000 prefill_s=0.500 "
                         f"prefill_tps=6.00")
            n_summaries += 1
            closed.extend(turn_rows)
    # the reader numbers the turns that have rows (a turn with no rows has none to number)
    turn_index = _segments_to_ordinals(turn_index)
    complete = len(closed) == len(step)
    return MetricsFile(text="\n".join(lines) + "\n", layout="legacy" if layout.startswith("legacy")
                       else layout, header=header, columns=tuple(columns), step=step,
                       turn_index=turn_index, wall_ms=wall, read_bytes=rb,
                       mtp_batch=batch if has_batch else [1] * len(step), n_summaries=n_summaries,
                       complete=complete, data_lines=data_lines, closed_rows=closed)


def _segments_to_ordinals(turns: list) -> list:
    """Turn labels (non-decreasing) -> 0-based ordinals of the turns that have rows."""
    out, prev, k = [], None, -1
    for t in turns:
        if t != prev:
            k += 1
            prev = t
        out.append(k)
    return out


def v2_group_text(groups) -> str:
    """A ``bmoe_metrics v2`` file (magic, header, rows; no trailer) of decode groups.

    Parameters
    ----------
    groups : iterable of (mtp_batch, walls)
        One decode group each: ``walls`` gives the ``wall_ms`` of each of its rows (the engine's
        is ``[w, 0, ...]``; other values make invalid files for error tests).

    Every other column is 0 (``cache_hit_pct`` and ``dense_resident_frac`` -1); ``steps`` is 9.
    """
    rows, step = [], 0
    for batch, walls in groups:
        for w in walls:
            step += 1
            vals = {c: "0" for c in METRICS_COLUMNS}
            vals.update(step=str(step), steps="9", wall_ms=str(w), mtp_batch=str(batch),
                        cache_hit_pct="-1", dense_resident_frac="-1")
            rows.append(",".join(vals[c] for c in METRICS_COLUMNS))
    return "# bmoe_metrics v2\n" + ",".join(METRICS_COLUMNS) + "\n" + "\n".join(rows) + "\n"


def v1_row(**vals) -> str:
    """One ``v1`` row: ``vals`` by column name, other columns 0 (``steps`` 4, ``cache_hit_pct`` 50,
    ``dense_resident_frac`` -1)."""
    base = {c: 0 for c in METRICS_COLUMNS[:22]}
    base.update(steps=4, dense_resident_frac=-1, cache_hit_pct=50)
    base.update(vals)
    return ",".join(str(base[c]) for c in METRICS_COLUMNS[:22])


V1_HEAD = ("# bmoe_metrics v1\n"
           "# model=m.gguf arch=qwen35moe n_layer=40 n_expert=256 n_expert_used=8 threads=4 "
           "n_ctx=2048\n"
           "# moe_stream=1 cache_mb=3000 cache_auto=0 io_threads=4 o_direct=1 overlap=1 "
           "prefetch=0 dense_weights=ahwb drop_cold_frac=0.75\n"
           + ",".join(METRICS_COLUMNS[:22]) + "\n")
"""The preamble and header of a hand-made ``v1`` file (overlap on)."""

V1_SESSION = (
    V1_HEAD
    + v1_row(step=1, wall_ms=300.5, io_ms=400, stall_ms=80, read_bytes=4096, turn=0) + "\n"
    + v1_row(step=2, wall_ms=150.25, io_ms=90, stall_ms=20, turn=0) + "\n"
    + "# summary tokens=2 s/tok=0.225 tok/s=4.437 read_MiB=0.0 cache_hit_pct=50.0 n_prompt=19 "
      "load_s=45.521 prefill_s=5.993 prefill_tps=3.17\n"
    + v1_row(step=1, steps=2, wall_ms=100, turn=1) + "\n"
    + "# summary tokens=1 s/tok=0.100 tok/s=10.000 n_prompt=4 load_s=0 prefill_s=1.0 "
      "prefill_tps=4.00\n")
"""A two-turn ``v1`` session file: 2 rows and a trailer, then 1 row and a trailer (tokens 2, 1)."""
