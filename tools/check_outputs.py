"""Are refsim's user-visible outputs the same in two source trees?

Runs every command of README.md and the docs' runnable examples (the cases below) against two
trees -- a git revision (``--base REV``, checked out into a temporary worktree) and the working
tree -- and compares stdout, stderr, the exit status and every file a command writes, byte for
byte after one normalisation: measured wall-clock figures (seconds, tok/s, MiB/s of this host)
are masked, and the two trees' paths read the same. Nothing else is masked: a moved module that
changes one printed digit, one column or one error word is a difference.

Used for the re-housing of issue 27 ("outputs of the README commands and every docs example are
byte-identical before and after"):

    python3 tools/check_outputs.py --base 83559f5            # all cases, both trees
    python3 tools/check_outputs.py --base HEAD~3 --only run  # the cases whose name has 'run'
    python3 tools/check_outputs.py --list

Cases that read the engine's shared material (``$REFSIM_SHARED``, default ``../shared``) are
skipped, and said to be, when it is absent. ``--self-check`` runs the base tree twice and shows
what the masking leaves different between two runs of the same code (it should be nothing).
Exit status: 0 when every case agrees, 1 when any differs, 2 on a usage error.
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Case:
    """One command line. ``argv`` may hold ``{tmp}`` (the case's scratch folder), ``{shared}``
    and ``{root}`` (the tree under test); ``outputs`` name the files under ``{tmp}`` it writes;
    ``python`` runs ``argv`` as a Python snippet instead of ``refsim``."""
    name: str
    argv: tuple
    outputs: tuple = ()
    shared: bool = False
    python: bool = False
    setup: tuple = field(default=())   # earlier commands (argv tuples) run in the same scratch folder
    stdin: str | None = None


def _c(name, *argv, outputs=(), shared=False, setup=(), stdin=None):
    return Case(name, tuple(argv), tuple(outputs), shared, False, tuple(setup), stdin)


DEMO = "{root}/traces/demo.route.csv"
QWEN = "{shared}/real-traces/bmoe-qwen3-30b-a3b/qwen.route.csv"
DESK = "{shared}/real-runs/desktop-2026-07-24-qwen36"
PHONE = "{shared}/real-runs/phone-2026-07-12-cache-lanes"
TINY = "{root}/models/tiny-moe-q8_0.gguf"
TINY35 = "{root}/models/tiny-moe35-q8_0.gguf"
RUN_TRACE = ("run", "--prompt", "import os", "-n", "24", "--route-trace", "{tmp}/t.route.csv")

CASES = [
    # README: the main job and its outputs
    _c("replay-demo", "replay", DEMO, "--cache-mb", "256"),
    _c("replay-demo-json", "replay", DEMO, "--cache-mb", "256", "--json"),
    _c("replay-demo-csv", "replay", DEMO, "--cache-mb", "256", "--csv", "{tmp}/r.csv", outputs=("r.csv",)),
    _c("replay-demo-stream", "replay", DEMO, "--cache-mb", "128", "--stream", "--json"),
    _c("replay-demo-knobs", "replay", DEMO, "--cache-mb", "128", "--drop-cold-experts", "0.75", "--prefetch", "2"),
    _c("sweep-demo", "sweep", DEMO, "--cache-mb", "64:512:64", "--policy",
       "lru,lfu,random,fifo,clock,slru,2q,arc,lirs,s3fifo,tinylfu,layer,layerlfu,layer-opt,belady",
       "--csv", "{tmp}/s.csv", outputs=("s.csv",)),
    _c("sweep-demo-knobs", "sweep", DEMO, "--cache-mb", "96,192", "--drop-cold-experts", "0.5"),
    _c("union-demo", "union", DEMO, "--window", "1..4", "--cache-mb", "256"),
    _c("drop-replay-demo", "drop-replay", DEMO, "--frac", "0.5,0.75,1.0", "--cache-mb", "128"),
    *[_c(f"analyze-{v}", "analyze", DEMO, "--view", v, "--json")
      for v in ("matrix", "hot", "reuse", "overlap", "workset", "cache", "entropy", "bytes")],
    _c("analyze-position", "analyze", DEMO, "--view", "overlap", "--framing", "position"),
    _c("view-demo", "view", DEMO, "--html", "{tmp}/v.html", outputs=("v.html",)),
    _c("inspect-tiny", "inspect", TINY, "--json"),
    _c("inspect-tiny35", "inspect", TINY35),
    _c("synth-qwen3moe", "synth", "--arch", "qwen3moe", "--out", "{tmp}/s.gguf", outputs=("s.gguf",)),
    _c("synth-qwen35moe", "synth", "--arch", "qwen35moe", "--nextn", "--quant", "Q4_K", "--out", "{tmp}/s.gguf",
       outputs=("s.gguf",)),
    # refsim run: the built-in model, speculation, knobs, telemetry
    _c("run-builtin", "run"),
    _c("run-builtin-json", "run", "--json"),
    _c("run-builtin-ngram", "run", "--ngram", "--draft", "3", "--csv", "{tmp}/m.csv",
       "--route-trace", "{tmp}/t.route.csv", outputs=("m.csv", "t.route.csv")),
    _c("run-builtin-knobs", "run", "--drop-cold-experts", "0.75", "--prefetch", "1",
       "--route-trace", "{tmp}/t.route.csv", outputs=("t.route.csv",)),
    _c("run-builtin-predict-prefetch", "run", "--predict-prefetch", "--route-trace", "{tmp}/t.route.csv",
       outputs=("t.route.csv",)),
    _c("replay-predict-prefetch", "replay", "{tmp}/t.route.csv", "--cache-mb", "4", "--predict-prefetch",
       setup=(("run", "--predict-prefetch", "--route-trace", "{tmp}/t.route.csv"),)),
    _c("run-builtin-predict-log", "run", "--predict-log"),
    _c("run-builtin-route-ahead", "run", "--route-ahead", "2", "--json"),
    _c("run-builtin-ggml", "run", "--numerics", "ggml", "-n", "12"),
    # docs/real-moe.md
    _c("run-tiny-trace", "run", TINY, "--prompt", "import os", "-n", "32", "--route-trace", "{tmp}/t.route.csv",
       outputs=("t.route.csv",)),
    _c("replay-tiny-trace", "replay", "{tmp}/t.route.csv", "--cache-mb", "4",
       setup=(("run", TINY) + RUN_TRACE[1:],)),
    _c("run-tiny35-mtp", "run", TINY35, "--prompt", "import os", "-n", "40", "--mtp"),
    _c("run-tiny35-mtp-json", "run", TINY35, "--prompt", "import os", "-n", "24", "--mtp", "--draft", "2",
       "--json", "--csv", "{tmp}/m.csv", outputs=("m.csv",)),
    _c("run-tiny-ngram-drop", "run", TINY, "--prompt", "import os", "-n", "24", "--ngram",
       "--drop-cold-experts", "0.5", "--cache-mb", "3"),
    _c("run-prompts", "run", "--prompts", "{tmp}/p.txt", "--out-dir", "{tmp}/out", "-n", "8",
       setup=(("!write", "{tmp}/p.txt", "one\ntwo three\n"),), outputs=("out",)),
    # docs/speculation.md
    _c("ngram-1", "ngram", "--corpus", "1,2,3,4,5,6,0,1,2,3", "--draft", "3"),
    _c("ngram-2", "ngram", "--corpus", "7,1,2,3,40,8,1,2,3,50,9,1,2,3", "--draft", "1", "--rule", "earliest"),
    _c("ngram-3", "ngram", "--corpus", "7,7,1,2,3,40,0,0,1,2,3,50,7,7,1,2,3", "--draft", "1", "--max-match", "3"),
    _c("ngram-whatif", "ngram-whatif", "--tokens", "{tmp}/s.txt", "--prompt-len", "8", "--draft", "1..4",
       "--min-match", "1..3", setup=(("!write", "{tmp}/s.txt", " ".join(str(i % 7) for i in range(60)) + "\n"),)),
    # docs/hybrid.md
    _c("memory-tiny35", "memory", TINY35, "--ctx", "256", "--draft", "3", "--mtp", "--ram-mb", "8000"),
    _c("memory-tiny", "memory", TINY, "--ctx", "128", "--ram-mb", "3000"),
    # docs/timing.md (the device model) on the demo trace
    _c("breakeven-demo", "timing", "breakeven", DEMO, "--device", "{tmp}/d.json", "--cache-mb", "128,256",
       "--draft", "1..4", setup=(("timing", "fit", f"{DESK}/pc-A-io4.csv", f"{DESK}/pc-B-io8.csv",
                                  f"{DESK}/pc-D-t8.csv", "--out", "{tmp}/d.json", "--name", "desktop"),),
       shared=True),
    # docs/timing.md "The decision": the runnable synopsis of refsim whatif (a live run of the tiny MTP model)
    _c("whatif-synopsis", "whatif", TINY35, "--device", "{tmp}/d.json", "--cache-mb", "2,4", "--spec",
       "off,ngram:d=3:m=3,mtp:d=3", setup=(("timing", "fit", f"{DESK}/pc-A-io4.csv", f"{DESK}/pc-B-io8.csv",
                                              f"{DESK}/pc-D-t8.csv", "--out", "{tmp}/d.json", "--name", "desktop"),),
       shared=True),
    # the engine's shared material
    _c("replay-qwen", "replay", QWEN, "--cache-mb", "4000", shared=True),
    _c("replay-qwen-json", "replay", QWEN, "--cache-mb", "3000", "--json", "--drop-cold-experts", "0.75",
       shared=True),
    _c("sweep-qwen", "sweep", QWEN, "--cache-mb", "250,500,1000,2000,4000,8000", "--policy",
       "belady,lru,lfu,random,layer,layerlfu", shared=True),
    _c("union-qwen", "union", QWEN, "--window", "1..4", "--cache-mb", "3000", shared=True),
    _c("drop-replay-qwen", "drop-replay", QWEN, shared=True),
    _c("analyze-qwen", "analyze", QWEN, "--view", "workset", shared=True),
    _c("timing-fit", "timing", "fit", f"{DESK}/pc-A-io4.csv", f"{DESK}/pc-B-io8.csv", f"{DESK}/pc-C-drop075.csv",
       f"{DESK}/pc-D-t8.csv", "--out", "{tmp}/d.json", "--name", "desktop", outputs=("d.json",), shared=True),
    _c("timing-validate", "timing", "validate", f"{DESK}/pc-A-io4.csv", f"{DESK}/pc-B-io8.csv",
       f"{DESK}/pc-D-t8.csv", f"{DESK}/pc-E-c5000-io4t4.csv", shared=True),
    _c("timing-breakeven-qwen", "timing", "breakeven", QWEN, "--device", "{tmp}/d.json", "--cache-mb", "8000",
       "--draft", "1..4", setup=(("timing", "fit", f"{DESK}/pc-A-io4.csv", f"{DESK}/pc-B-io8.csv",
                                               f"{DESK}/pc-D-t8.csv", "--out", "{tmp}/d.json"),), shared=True),
    _c("replay-qwen-device", "replay", QWEN, "--cache-mb", "3000", "--device", "{tmp}/d.json", "--json",
       setup=(("timing", "fit", f"{DESK}/pc-A-io4.csv", f"{DESK}/pc-B-io8.csv", f"{DESK}/pc-D-t8.csv",
               "--out", "{tmp}/d.json"),), shared=True),
    _c("bench-desktop", "bench", f"{DESK}/pc-A-io4.csv", f"{DESK}/pc-B-io8.csv", "--json", shared=True),
    _c("bench-phone", "bench", f"{PHONE}/qwen_c2000_l2.csv", f"{PHONE}/qwen_c2000_l4.csv", shared=True),
    # docs/real-model.md: the real Gemma-3-270M (assembled by the tests or the first gemma3_270m_path())
    Case("run-gemma-llamacpp", ("run", "{gemma}", "--prompt", "The capital of France is", "-n", "8",
                                "--numerics", "llamacpp")),
    # bad input: the one-line errors are outputs too
    _c("error-missing-trace", "replay", "{tmp}/nope.route.csv", "--cache-mb", "4"),
    _c("error-bad-flag", "sweep", DEMO, "--cache-mb", "0"),
    _c("error-bad-policy", "sweep", DEMO, "--cache-mb", "64", "--policy", "lru,,arc"),
]

# Python snippets from the docs (docs/real-model.md uses the real Gemma weights: slow, but an example)
PY_CASES = [
    Case("py-models", ("from refsim.model import open_model\n"
                       "m = open_model('{root}/models/tiny-moe-q8_0.gguf')\n"
                       "print(m.spec); print(m.t_bytes(k=m.spec.n_expert_used)); print(m.layers[0])\n",),
         python=True),
    Case("py-forward-target", ("from refsim.forward import ForwardTarget\n"
                               "from refsim.model import open_model\n"
                               "from refsim.model.tokenizer import Tokenizer\n"
                               "from refsim.spec import NgramDraft, run_generation\n"
                               "model = open_model('{root}/models/tiny-moe-q8_0.gguf')\n"
                               "tok = Tokenizer.from_model(model)\n"
                               "ids = tok.encode('import os')\n"
                               "target = ForwardTarget(model, numerics='exact')\n"
                               "res = run_generation(target, NgramDraft(min_match=3), ids, 16, draft_max=3)\n"
                               "print(list(ids)); print(list(res.tokens)); print(tok.decode(res.tokens))\n",),
         python=True),
    Case("py-layer-alloc", ("from refsim.trace import read_trace\n"
                            "from refsim.cache.batches import BatchTrace\n"
                            "from refsim.studies.layer_alloc import layer_alloc_report, format_layer_alloc\n"
                            "t = read_trace('{root}/traces/demo.route.csv'); h = t.header\n"
                            "bt = BatchTrace.from_events(t.events, h.expert_bytes, h.n_expert)\n"
                            "print('\\n'.join(format_layer_alloc(layer_alloc_report(bt, [64, 128, 256]))))\n",),
         python=True),
]

# Wall-clock figures of this host: masked. Each pattern's number group becomes '#'.
_NUM = r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?"
_TIMED = [
    re.compile(rf"({_NUM})(\s*(?:s/token|tok/s|ms|s\b|MiB/s|s\)))"),
    re.compile(rf"(TTFT\s+)({_NUM})"),
    re.compile(rf"(model load\s+)({_NUM})"),
]
_TIMED_JSON_KEY = re.compile(r"(wall|seconds|_s$|_ms$|tok_s|elapsed|load_s|ttft|mib_s|per_s|time)", re.I)


_KV_TIMED = re.compile(r"(\b[\w/]*(?:_s|_ms|s/tok|tok/s|_tps|_s/tok|ms/tok)=)(" + _NUM + ")")
_REPORTED = re.compile(rf"(\(vs )({_NUM})( reported\))")
_COMPUTE = re.compile(rf"(\(compute )({_NUM})")


def _mask_csv(text: str) -> str | None:
    """A metrics CSV (bmoe_metrics): its measured *_ms columns become '#'."""
    lines = text.splitlines(keepends=True)
    head = next((i for i, ln in enumerate(lines) if ln.startswith("step,")), None)
    if head is None:
        return None
    cols = lines[head].rstrip("\n").split(",")
    timed = {i for i, c in enumerate(cols) if c.endswith("_ms")}
    for i in range(head + 1, len(lines)):
        if lines[i].startswith("#") or "," not in lines[i]:
            continue
        cells = lines[i].rstrip("\n").split(",")
        lines[i] = ",".join("#" if j in timed else c for j, c in enumerate(cells)) + "\n"
    return "".join(lines)


def _mask_text(text: str) -> str:
    masked = _mask_csv(text)
    text = masked if masked is not None else text
    out = []
    for line in text.splitlines(keepends=True):
        line = _KV_TIMED.sub(lambda m: m.group(1) + "#", line)
        line = _REPORTED.sub(lambda m: m.group(1) + "#" + m.group(3), line)
        line = _COMPUTE.sub(lambda m: m.group(1) + "#", line)
        line = _TIMED[0].sub(lambda m: "#" + m.group(2), line)
        line = _TIMED[1].sub(lambda m: m.group(1) + "#", line)
        line = _TIMED[2].sub(lambda m: m.group(1) + "#", line)
        out.append(line)
    return "".join(out)


def _mask_json(obj):
    if isinstance(obj, dict):
        return {k: ("#" if _TIMED_JSON_KEY.search(k) and isinstance(v, (int, float)) and not isinstance(v, bool)
                    and "predicted" not in k and "measured" not in k else _mask_json(v))
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_mask_json(v) for v in obj]
    return obj


def _normalise(text: str, tree: Path, tmp: Path) -> str:
    text = text.replace(str(tmp), "{tmp}").replace(str(tree), "{root}")
    try:
        return json.dumps(_mask_json(json.loads(text)), indent=1, sort_keys=False) + "\n"
    except ValueError:
        return _mask_text(text)


def _digest_dir(p: Path, tree: Path, tmp: Path) -> dict:
    if p.is_dir():
        return {str(q.relative_to(p)): _file_text(q, tree, tmp) for q in sorted(p.rglob("*")) if q.is_file()}
    return {p.name: _file_text(p, tree, tmp)}


def _file_text(p: Path, tree: Path, tmp: Path) -> str:
    data = p.read_bytes()
    if p.suffix in (".gguf", ".png"):
        return "sha256:" + hashlib.sha256(data).hexdigest()
    try:
        return _normalise(data.decode(), tree, tmp)
    except UnicodeDecodeError:
        return "sha256:" + hashlib.sha256(data).hexdigest()


GEMMA = Path(os.environ.get("REFSIM_CACHE", Path.home() / ".cache" / "refsim")) / "gemma-3-270m-q4_k_m.gguf"


def _subst(s: str, tree: Path, tmp: Path, shared: Path) -> str:
    return s.replace("{gemma}", str(GEMMA)).replace("{root}", str(tree)).replace("{tmp}", str(tmp)).replace("{shared}", str(shared))


def run_case(case: Case, tree: Path, shared: Path, env: dict) -> dict:
    """Run one case in ``tree``; return its normalised stdout, stderr, status and outputs."""
    tmp = Path(tempfile.mkdtemp(prefix=f"chk-{case.name}-"))
    try:
        base = [sys.executable, "-m", "refsim"]
        for step in case.setup:
            if step[0] == "!write":
                Path(_subst(step[1], tree, tmp, shared)).write_text(step[2])
                continue
            subprocess.run(base + [_subst(a, tree, tmp, shared) for a in step], cwd=tmp, env=env,
                           capture_output=True, check=True, timeout=1800)
        if case.python:
            cmd = [sys.executable, "-c", _subst(case.argv[0], tree, tmp, shared)]
        else:
            cmd = base + [_subst(a, tree, tmp, shared) for a in case.argv]
        p = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, timeout=1800,
                           input=case.stdin.encode() if case.stdin else None)
        res = {"status": p.returncode,
               "stdout": _normalise(p.stdout.decode(errors="replace"), tree, tmp),
               "stderr": _normalise(p.stderr.decode(errors="replace"), tree, tmp)}
        for name in case.outputs:
            q = tmp / name
            res["file:" + name] = _digest_dir(q, tree, tmp) if q.exists() else None
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_tree(tree: Path, cases, shared: Path, label: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), REFSIM_SHARED=str(shared), PYTHONHASHSEED="0",
               COLUMNS="100", TERM="dumb")
    env.pop("NUMBA_CACHE_DIR", None)   # refsim.jitcache keys the compile folder by this tree's source
    out = {}
    for i, case in enumerate(cases, 1):
        print(f"[{label} {i}/{len(cases)}] {case.name}", file=sys.stderr, flush=True)
        out[case.name] = run_case(case, tree, shared, env)
    return out


def compare(a: dict, b: dict, la: str, lb: str) -> int:
    bad = 0
    for name in a:
        if a[name] == b.get(name):
            continue
        bad += 1
        print(f"DIFFERS: {name}")
        for key in sorted(set(a[name]) | set(b[name])):
            x, y = a[name].get(key), b[name].get(key)
            if x == y:
                continue
            xs = json.dumps(x, indent=1) if not isinstance(x, str) else x
            ys = json.dumps(y, indent=1) if not isinstance(y, str) else y
            if xs.startswith("{") and ys.startswith("{"):   # a folder or file digest: per file
                xs, ys = "\n".join(xs.split("\\n")), "\n".join(ys.split("\\n"))
            for line in list(difflib.unified_diff(xs.splitlines(), ys.splitlines(), f"{la}:{key}", f"{lb}:{key}",
                                                  lineterm="", n=1))[:40]:
                print("   ", line[:240])
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="git revision to compare the working tree with")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this text")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--self-check", action="store_true", help="run the base tree twice (masking check)")
    ap.add_argument("--save", help="write the working tree's normalised outputs to this JSON file")
    args = ap.parse_args(argv)
    shared = Path(os.environ.get("REFSIM_SHARED", ROOT.parent / "shared")).resolve()
    cases = [c for c in CASES + PY_CASES if args.only in c.name]
    skipped = [c.name for c in cases if c.shared and not shared.is_dir()]
    if not GEMMA.exists():
        skipped += [c.name for c in cases if "{gemma}" in c.argv]
    cases = [c for c in cases if c.name not in skipped]
    if args.list:
        for c in cases:
            print(c.name, " ".join(c.argv) if not c.python else "(python)")
        return 0
    if skipped:
        print(f"skipped (no {shared} or no {GEMMA}): {', '.join(skipped)}", file=sys.stderr)
    if not args.base:
        if not args.save:
            ap.error("--base REV or --save FILE")
        Path(args.save).write_text(json.dumps(run_tree(ROOT, cases, shared, "work"), indent=1))
        return 0
    wt = Path(tempfile.mkdtemp(prefix="chk-base-"))
    try:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(wt), args.base], check=True)
        base = run_tree(wt, cases, shared, "base")
        if args.self_check:
            other = run_tree(wt, cases, shared, "base again")
            lb = "base again"
        else:
            other = run_tree(ROOT, cases, shared, "work")
            lb = "work"
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)], check=False)
    # paths: both trees print as {root}
    if args.save:
        Path(args.save).write_text(json.dumps(other, indent=1))
    bad = compare(base, other, "base", lb)
    print(f"{len(cases) - bad} of {len(cases)} cases agree byte for byte (after masking wall-clock figures)"
          + (f"; {bad} differ" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(main))
