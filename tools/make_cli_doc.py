"""Regenerate docs/cli.md from the parsers themselves, so the flags documented cannot drift.

Usage: python tools/make_cli_doc.py [OUT]    (tests/cli/test_cli_doc.py checks every flag is there)
"""

import os
import sys

os.environ["COLUMNS"] = "100"  # argparse wraps help text to the terminal width

from refsim.cli import make_parser  # noqa: E402
from refsim.fileio import write_text_atomic  # noqa: E402


CONVENTIONS = """\
## Conventions

Every command reports a mistake the same way; which way depends on what shows it.

| exit | when | stderr |
|---|---|---|
| 0 | done | warnings only (`refsim CMD: warning: ...`) |
| 2 | **the command line alone is wrong**: a flag value outside what the flag accepts (its form, its range, or a bound another flag sets, such as `--min-match` at most `--max-match` or `--ubatch` at least `--draft + 1`), an unknown or missing flag, flags that conflict or need another (`--ngram` with `--mtp`; `--draft` without a draft source) | the usage, then `refsim CMD: error: argument FLAG: expected RANGE, got 'VALUE'` |
| 1 | **the command line is well formed but an input refuses it**: a missing, damaged or unsupported file; a value past what *that* model or trace allows (`--ctx` above its `n_ctx_train`, `-k` above its `n_expert`, a `--prompt-tokens` id past its vocabulary, `--window` wider than its decode positions, `--numerics llamacpp` or `--cache-mb` for a model that has no such thing); an output that cannot be written | one line, `refsim CMD: error: ...`, naming the flag or the file (and line or byte offset) |
| 130 | interrupted (Ctrl-C) | one line |

An unknown flag is named by the command it follows, with that command's usage (`refsim timing
fit: error: unrecognized arguments: --bogus`). A bare `refsim` prints the listing of every command
on stdout (what it asks to see) and `refsim: error: the following arguments are required: COMMAND`
on stderr, exit 2: nothing was run, so a script that calls refsim without a command fails.

Why this split: exit 2 is what argparse already gives for an unknown flag, a bad `choices` value or
two flags of one exclusive group, and what the engine's CLI gives for `--ngram` with `--mtp`; a bad
number is the same kind of mistake, so it joins them rather than being exit 1 in one command and 2 in
another (before: `--draft 0` was 1 in `run` and 2 in `ngram`). Every check of the first kind runs
before any file is opened, so a script can tell "fix the command" (2) from "the data says no" (1)
without reading the message.

One range text per flag meaning, the same in every command (`refsim/cli/common.py` validators;
tested over every command, every numeric flag and the values 0, -1, nan, inf, -inf, 1e400,
99999999999999999999 and `abc` in tests/cli/test_conventions.py):

| flags | accepted |
|---|---|
| `-n`, `--ctx`, `-k`, `--prompt-len`, `--top`, `--io-threads`, `--workers` | an integer in 1..2147483647 (`int32_t`, the engine's and llama.cpp's counts) |
| `--ubatch`, `--eog`, `--trim`, `--turn`, `--max-steps`, `--data-start`, `--merge-gap` | an integer in 0..2147483647 |
| `--resamples` | an integer in 1..100000 |
| `timing fit --boot` | an integer in 0..1000 |
| `--block-size` | an integer in 1..1048576 and a power of two |
| `replay --o-direct` | an integer in 0..1 |
| `--position-cost` | a number from 0 to 10 (a fraction of one position's compute), the bound a device file's eps has |
| `--draft-ms`, `whatif --head-ms` | a number of ms from 0 to 1e7 (the bound a device file's parameters have) |
| `--draft` | an integer in 1..8 (lists in `ngram-whatif`: each in 1..8) |
| `--ngram-min-match`, `ngram --min-match` | an integer in 1..12 (`ngram`: 1..`--max-match`) |
| `--max-match` | an integer in 1..64 |
| `--cache-mb` | a number of MiB from 2^-20 (one byte) to 2^40 (1 EiB); `sweep`, `timing breakeven`: a list of them |
| `--cache-floor-mb`, `--cache-ceil-mb` | a number of MiB from 0 to 2^40 (1 EiB) |
| `memory --mib-per-token` | a finite number >= 0 (argparse's check), then at most 2^40 MiB (1 EiB) |
| `--ram-mb` | a number of MiB > 0 and at most 2^40 (1 EiB) |
| `--mtp-p-min` | a probability in [0, 1] |
| `memory --hit-pct`, `whatif --noise-pct` | a percentage in [0, 100] |
| `--drop-cold-experts` | a number in [0, 1] (`drop-replay --frac`: fractions like 0.5,0.75,1.0, each a number in [0, 1]) |
| `--prefetch`, `--route-ahead` | an integer in 0..8 (the engine's range) |
| `--prompt-tokens`, `--corpus` | token ids like 1,5,77, each an integer in 0..2147483647 |
| `layout --fit-fraction` | a number in (0, 1) |
| `layout --fit-turns`, `--eval-turns` | turn numbers like 0,2, each an integer in 0..2147483647 |
| `--seed` | an integer in 0..4294967295 (`synth`, `bench`) |
| `union --window`, `ngram-whatif --draft`, `--min-match`, `timing breakeven --draft`, `drop-replay --n-expert-used` | N, N,M,... or A..B with A <= B, each an integer in the flag's range (1..2147483647; 1..8; 1..12), at most 10000 values |
| `sweep --policy` | comma-separated names of known policies, no empty item (`lru,,arc` is refused); parameters as `NAME:KEY=VALUE` (`random:seed=` an integer >= 0) |

Numbers are ASCII (`1_0`, `٣` and ` 3` are refused). An integer is `0` or digits without a
leading zero, with `-` for a negative (`+3`, `03` and `-0` are refused, as the trace reader refuses
them). Every integer list, token ids included, is items separated by one comma or one space, with no
empty item (`1,5 77` is read; `1,,2`, `1, 2`, ` 3` and `3,` are refused). A negative value may follow its flag with a
space (`--cache-mb -inf` is refused as -inf, like `--cache-mb -1`, not read as an unknown flag), and
so may a list that starts with one (`sweep --cache-mb -5,100` names the item `-5` and the range).
MiB = 2^20 bytes everywhere.
"""


OUTPUTS = """## Outputs, `-`, numbers, Ctrl-C

**Outputs** (`--csv`, `--route-trace`, `--md`, `--html`, `timing fit --out`, `--plot`, `--requests`,
`synth --out`; `refsim.fileio`). Nothing at an output path is destroyed:

- A regular file or a new path is written to a temporary file in the folder of the *resolved*
  path, then renamed over it. A symlink keeps pointing at its target, and the target is the file
  replaced. An existing file keeps its permission bits; a new file gets `0666 & ~umask`. A run
  that fails or is interrupted leaves the earlier file as it was and no temporary behind.
- A FIFO, a character device (`/dev/null`, a terminal) or any path under `/dev/` or `/proc/`
  (`/dev/stdout`, `/dev/fd/N`) is opened and written in place, streamed as it is produced.
- `refsim run --route-trace` writes each decode's rows as the run produces them (into the
  temporary file, or in place for `-`, a FIFO or a device) and keeps none of them, so a
  long run's memory does not grow with its trace; the file is renamed into place when the
  run ends (docs/scale.md).
- `-` is standard output for every text output (`--csv`, `--route-trace`, `--md`, `--html`,
  `timing fit --out`). The command's own
  report (text or `--json`) then goes to standard error, so the stream holds only the file. Two
  outputs cannot both be `-`.
- Binary outputs (`synth --out` GGUF, `--plot` figures) refuse `-`, because binary bytes on a
  terminal are noise and would be mixed with the report. Name `/dev/stdout` to stream one on
  purpose. When its output is written in place (`/dev/stdout`, a FIFO, a device), `synth`
  prints the path on standard error, not into the stream.
- A folder, a path whose folder is missing or not writable, and an existing file or device
  without write permission are refused before any work (exit 1, one line). An output may not
  be an input or another output (by real path); for `refsim run` without MODEL, the cached
  built-in model counts as an input.
- A write that fails (`ENOSPC` on `/dev/full` or a full disk, `EIO`) is one line,
  `--out /dev/full: write failed: No space left on device`, exit 1.
- `--plot` (`sweep`, `analyze`, `bench`, `timing breakeven`) writes the format its extension
  names: `.png`, `.pdf` or `.svg`. Any other extension is refused before any work. A FIFO or
  device without an extension gets PNG.

**Numbers** (`refsim.fmt`; docs/telemetry.md "Undefined and unmeasured values"). A ratio over
zero events prints `n/a` (JSON `null`, `nan` in a numeric CSV column), never `0.0%`. Counters a
simulator does not measure (flash I/O seconds, MiB/s) print `n/a`. Small values keep at least
two significant digits. A budget prints as the shortest MiB text that gives back the same bytes.

**Ctrl-C** at any moment once the command's `main` has started (it installs the handler before it
builds the parser; every later import, numpy and Numba included, is covered) prints one line (`refsim CMD: interrupted
...`) and exits 130; the same for the `tools/` scripts once their `main` runs. Before that, in the
interpreter's start-up, the console script's wrapper and the import of the `refsim` package (the
first 50-60 ms of a process on the 2-core test machine), the signal is Python's: a short
traceback, exit 1 or 130.
"""


STARTUP = """## Start-up and progress

**Start-up** (issue 17). A command imports what it runs and nothing else: `refsim --version`
builds no subcommand's parser and imports neither numpy nor Numba; `refsim CMD ...` builds the
parser of CMD alone (`refsim.cli.requested_command`; `refsim --help` and a word that is no
command build them all, for the listing); packages import their submodules on first use
(`refsim.lazy`); matplotlib, the forward pass and the quant kernels are imported by the commands
that use them. The cache and trace kernels are `refsim.jit.njit` functions: Numba is imported and
their machine code compiled or loaded from its cache only when one is first called.

`refsim replay` of a trace of at most 1 MiB (`refsim.jit.REFERENCE_MAX_BYTES`, about 34,000 rows;
the demo trace is 79 KB, 2612 rows) runs the reference path: the per-line trace reader and the
same LRU kernels run as Python (`refsim.jit.reference`), so Numba is never imported. Why the
threshold (`benchmarks/scale.py --crossover 1,4,16`: the demo trace written 1, 4 and 16 times,
78, 309 and 1248 KiB, best of 3, wall seconds of the whole command, 2026-12-03 12:45 UTC at
load average 0.3-0.5): the reference path 0.21, 0.33 and 0.63 s, the compiled path 1.19, 1.00 and
1.28 s (its ~1 s is Numba's import, the first compile's registry refresh and the cached kernels'
loading), so they meet near 2 MiB (~70,000 rows); 1 MiB keeps the reference path the faster with
margin, and above it the compiled path's fixed cost is small against the work (on the 4.5 M-row
trace it is ~0.7 s of 1.5 s, docs/scale.md "Reading traces at scale"). The output is byte for byte the compiled kernels' (text, `--json`,
`--csv`, with the streaming knobs; tests/test_startup.py). Measured by `python
benchmarks/scale.py --startup-only` (best of N, against `python -c pass` in the same run).

**Progress.** Long work shows a tqdm bar on standard error while it runs: `sweep` and `union`
(one step per cell of the grid: serially a (trace, policy) with all its budgets, with `--workers`
one budget), `run --prompts` (prompts), `refsim run` (tokens generated), trace reads (bytes read; a `--stream` replay:
bytes replayed), `timing fit` (the jackknife's refits). A bar appears only when standard error is
a terminal, after 0.5 s of work (`REFSIM_PROGRESS_DELAY` seconds), and is erased when the work
ends. There is none when standard error is piped or redirected, with `--quiet` (every command) or
with `--json`. Standard output is byte for byte the same with or without a bar (tests/test_progress.py).
The mutation campaigns (`pytest -m fuzz`) have none: pytest captures standard error (never a
terminal there), and its own per-test progress already counts the campaign's tests.
"""


def render() -> str:
    parser = make_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    out = ["# refsim command line", "",
           "Generated by `tools/make_cli_doc.py` from the parsers; every subcommand's `--help`.",
           "Errors: see Conventions (exit 2 for a wrong command line, 1 for what an input refuses).",
           "", CONVENTIONS, OUTPUTS, STARTUP]
    out += ["```", parser.format_help().rstrip(), "```", ""]
    for name, p in sub.choices.items():
        out += [f"## `refsim {name}`", "", "```", p.format_help().rstrip(), "```", ""]
        for action in p._actions:  # a command with actions of its own (refsim timing fit ...)
            if action.__class__.__name__ == "_SubParsersAction":
                for sub_name, sp in action.choices.items():
                    out += [f"### `refsim {name} {sub_name}`", "", "```",
                            sp.format_help().rstrip(), "```", ""]
    return "\n".join(out)


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(
        lambda: write_text_atomic(sys.argv[1] if len(sys.argv) > 1 else "docs/cli.md", render())))
