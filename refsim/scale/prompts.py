"""``refsim run --prompts FILE --out-dir DIR``: the same generation over many prompts, one task per
prompt on the grid executor (docs/scale.md, "Many prompts").

Prompt ``i`` (0-based, in file order) writes ``DIR/prompt-IIII.csv`` (the per-token metrics CSV,
bmoe_metrics v2) and, for an MoE model, ``DIR/prompt-IIII.route.csv`` (its route trace), ``IIII``
the index in 4 digits (:data:`MAX_PROMPTS` is 10,000). Each file is written by the worker that
ran the prompt, by :mod:`refsim.fileio`'s rules (temp file in ``DIR``, renamed when complete), so
``DIR`` must be the same folder for every worker (a shared filesystem). The command prints one
summary row per prompt -- counts and cache figures only, no timings, so it is the same bytes for
every executor -- and the pooled row: counters summed over the prompts, rates the ratios of the
sums.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

from refsim import MIB
from refsim.errors import ConfigError, UsageError
from refsim.fmt import num, pct, ratio

MAX_PROMPTS = 10_000
"""Most lines a ``--prompts`` file may hold (the index is written in 4 digits)."""

MAX_PROMPT_BYTES = 65_536
"""Longest prompt line, in bytes of UTF-8 (the line end excluded)."""

PROMPT_STEM = "prompt-{:04d}"
"""File stem of prompt ``i``'s outputs in ``--out-dir``."""

_EXCLUSIVE = ("prompt", "prompt_tokens", "route_trace", "csv", "json")


def read_prompts(path: str) -> list[str]:
    """The prompts of ``path``: one a line (UTF-8; ``\\n`` or ``\\r\\n`` line ends), in order.

    Raises
    ------
    ConfigError
        ``"--prompts PATH: cannot read: REASON"``; ``"PATH:N: ..."`` for an empty line, a line
        longer than :data:`MAX_PROMPT_BYTES` bytes, a line that is not UTF-8, or a line past
        :data:`MAX_PROMPTS`; ``"--prompts PATH: no prompt in the file"``.
    """
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise ConfigError(f"--prompts {path}: cannot read: {exc.strerror}") from None
    out: list[str] = []
    with fh:
        lineno = 0
        while True:
            raw = fh.readline(MAX_PROMPT_BYTES + 3)          # room for the line end
            if not raw:
                break
            lineno += 1
            if lineno > MAX_PROMPTS:
                raise ConfigError(f"{path}:{lineno}: more than {MAX_PROMPTS} prompts; split the file")
            body = raw[:-1] if raw.endswith(b"\n") else raw
            body = body[:-1] if body.endswith(b"\r") else body
            if len(body) > MAX_PROMPT_BYTES or (not raw.endswith(b"\n") and len(raw) > MAX_PROMPT_BYTES):
                raise ConfigError(f"{path}:{lineno}: line longer than {MAX_PROMPT_BYTES} bytes; "
                                  f"expected one prompt a line")
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{path}:{lineno}: not UTF-8 text (byte {exc.start + 1} of the "
                                  f"line)") from None
            if not text.strip():
                raise ConfigError(f"{path}:{lineno}: empty line; expected one prompt a line")
            out.append(text)
    if not out:
        raise ConfigError(f"--prompts {path}: no prompt in the file")
    return out


@dataclass(frozen=True)
class PromptCell:
    """One task: prompt ``index`` (its ``text``) run with ``config`` (the command's
    :class:`~refsim.session.RunConfig`; its prompt and outputs are set per prompt), writing into
    ``out_dir``; ``route_trace`` False for a dense model (no routes)."""

    index: int
    text: str
    config: object
    out_dir: str
    route_trace: bool = True


def output_paths(out_dir: str, index: int) -> tuple[str, str]:
    """``(route trace, metrics CSV)`` paths of prompt ``index`` in ``out_dir``."""
    stem = os.path.join(out_dir, PROMPT_STEM.format(index))
    return stem + ".route.csv", stem + ".csv"


def prompt_cell(cell: PromptCell) -> dict:
    """Run one prompt (:func:`refsim.session.simulate` of the command's config with ``prompt`` =
    its text and its two outputs in ``out_dir``) and return its summary: counts and cache figures
    (:func:`_summary`). A warning the run gives is printed on this worker's stderr."""
    from refsim.session import simulate
    trace, metrics = output_paths(cell.out_dir, cell.index)
    config = replace(cell.config, prompt=cell.text, prompt_tokens=None, csv=metrics,
                     route_trace=trace if cell.route_trace else None)
    report = simulate(config, warn=lambda line: print(line, file=sys.stderr))
    return _summary(cell.index, report.as_dict())


def _summary(index: int, out: dict) -> dict:
    c = out.get("cache") or {}
    return {"index": index, "prompt": len(out["prompt_tokens"]), "generated": len(out["tokens"]),
            "decodes": out["decodes"], "drafted": out["drafted"], "accepted": out["accepted"],
            "lookups": c.get("lookups", 0), "hits": c.get("hits", 0),
            "decode_lookups": c.get("decode_lookups", 0), "decode_hits": c.get("decode_hits", 0),
            "read_bytes": c.get("read_bytes", out.get("read_bytes", 0)),
            "decode_read_bytes": c.get("decode_read_bytes", out.get("read_bytes", 0)),
            "dense": bool(out["dense"])}


def check_prompt_flags(args) -> None:
    """``--prompts`` needs ``--out-dir`` and takes none of ``--prompt``, ``--prompt-tokens``,
    ``--route-trace``, ``--csv``, ``--json`` (each prompt's outputs are in the folder).

    Raises
    ------
    UsageError
    """
    if args.out_dir is None:
        raise UsageError("--prompts without --out-dir: each prompt writes its route trace and "
                         "metrics CSV into a folder; give --out-dir DIR")
    if args.out_dir == "-":
        raise UsageError("--out-dir -: a folder is needed (each prompt writes two files into it); "
                         "'-' (standard output) cannot hold them")
    for name in _EXCLUSIVE:
        if getattr(args, name) not in (None, False):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"--prompts and {flag}: mutually exclusive (with --prompts every "
                             f"prompt's outputs are written into --out-dir)")


def prepare_out_dir(path: str) -> None:
    """Create ``--out-dir`` (its parent must exist) and check a file can be made in it.

    Raises
    ------
    ConfigError
        ``"--out-dir PATH: ..."`` naming the reason.
    """
    from refsim.fileio import check_writable
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"--out-dir {path}: is not a folder")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigError(f"--out-dir {path}: its parent folder {parent} does not exist (refsim "
                          f"makes the folder itself, not its parents)")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out-dir {path}: cannot create the folder: {exc.strerror}") from None
    check_writable(os.path.join(path, PROMPT_STEM.format(0) + ".csv"), "--out-dir")


def run_prompts(args, build_config) -> int:
    """``refsim run --prompts FILE --out-dir DIR``: every prompt on the executor, then the
    summary table on standard output.

    ``build_config()`` returns the run's :class:`~refsim.session.RunConfig` (the command's flags;
    ``refsim.cli.run.config_from_args``); it is called once the prompts file, ``--out-dir`` and
    the model are checked, so their refusals come first."""
    from refsim.scale.executor import ExecutorSpec, require_dask, run_cells
    check_prompt_flags(args)
    spec = ExecutorSpec.from_args(args)
    if spec.dask is not None:
        require_dask()
    prompts = read_prompts(args.prompts)
    prepare_out_dir(args.out_dir)
    if args.model is None:
        from refsim.forward.builtin import builtin_model_path
        path = builtin_model_path()      # built once here, not by every worker at once
    elif not os.path.exists(args.model):
        raise ConfigError(f"MODEL {args.model}: no such file")
    else:
        path = args.model
    from refsim.model import open_model
    dense = not open_model(path).spec.n_expert     # a dense model writes no route trace
    config = build_config()
    rows = run_cells(prompt_cell, [PromptCell(i, t, config, args.out_dir, not dense)
                                   for i, t in enumerate(prompts)], spec, desc="prompts")
    print(f"prompts: {args.prompts}, {len(rows)} prompts; outputs in {args.out_dir}: "
          f"{PROMPT_STEM.format(0)}.csv (metrics)"
          + ("" if dense else f" and {PROMPT_STEM.format(0)}.route.csv (route trace)")
          + f", ... to {PROMPT_STEM.format(len(rows) - 1)}")
    for line in summary_lines(rows):
        print(line)
    return 0


def summary_lines(rows: list[dict]) -> list[str]:
    """The per-prompt table and the pooled row (module docstring)."""
    head = (f"{'#':>5}  {'prompt':>6}  {'generated':>9}  {'decodes':>7}  {'accepted':>8}  "
            f"{'hit_cum%':>8}  {'hit_dec%':>8}  {'read_MiB':>10}  {'MiB/token':>9}")
    out = [head]
    keys = ("prompt", "generated", "decodes", "drafted", "accepted", "lookups", "hits",
            "decode_lookups", "decode_hits", "read_bytes", "decode_read_bytes")
    pooled = {k: sum(r[k] for r in rows) for k in keys}
    for label, r in [(str(r["index"]), r) for r in rows] + [("all", pooled)]:
        out.append(f"{label:>5}  {r['prompt']:>6}  {r['generated']:>9}  {r['decodes']:>7}  "
                   f"{r['accepted']:>8}  {num(pct(r['hits'], r['lookups']), 3):>8}  "
                   f"{num(pct(r['decode_hits'], r['decode_lookups']), 3):>8}  "
                   f"{num(r['read_bytes'] / MIB, 1):>10}  "
                   f"{num(ratio(r['decode_read_bytes'] / MIB, r['generated']), 3):>9}")
    out.append(f"all: the {len(rows)} prompts pooled (counts and bytes summed, rates the ratios of "
               f"the sums; MiB/token = decode read bytes / 2^20 / generated tokens)")
    return out
