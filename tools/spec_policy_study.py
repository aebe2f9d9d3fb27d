"""The draft-policy study (docs/spec-policies.md): every policy against fixed on the shared
Qwen3-30B trace with an acceptance stream, at the engine docs' phone-like and host-like budgets
with --drop-cold-experts 0.75 and --overlap, and the lossy verify-routing variants.

Usage: python3 tools/spec_policy_study.py [--small] [--seed N]
(REFSIM_SHARED must point at the shared folder; --small is the CI budget: one configuration,
one stream, three rows.)
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from refsim.streaming.knobs import StreamKnobs
from refsim.studies.spec_policy import policy_replay
from refsim.testing.recording_sets import DESKTOP, PHONE_DROP, set_inputs
from refsim.testing.recording_sets import ROUTE_TRACE
from refsim.testing.shared import shared_or_error, shared_path
from refsim.validators import seed
from refsim.timing.identify import identify_device
from refsim.timing.whatif import device_whatif

MIB = 1 << 20
# (label, budget MiB, recording set of the device): the engine docs' phone (3000 MiB) and a
# host-sized budget (docs/timing.md's breakeven uses 8000 MiB with the desktop device)
CONFIGS = (("phone-like", 3000, PHONE_DROP), ("host-like", 8000, DESKTOP))
# (label, coverage, acceptance) of the engine's losing cells at --draft 3 (bmoe-engine.md:
# phone copy ngram 14.2 % drafted, 50.0 % accept; phone mtp d3 100 %, 52 %)
STREAMS = (("copy ngram", 0.142, 0.50), ("mtp d3", 1.0, 0.52))
POLICIES = ("fixed", "backoff", "backoff:patience=1,cooldown=16", "cost", "cost:mibs=3000",
            "union", "union:mib=64")
LOSSY = ("cap:12", "consensus:0.1")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--seed", type=seed, default=0, metavar="S",
                    help="the acceptance streams' seed (0..4294967295, default 0)")
    a = ap.parse_args(argv)
    shared_or_error(ROUTE_TRACE)
    from refsim.trace import read_trace
    trace = read_trace(str(shared_path(*ROUTE_TRACE)))
    configs, streams = (CONFIGS[:1], STREAMS[:1]) if a.small else (CONFIGS, STREAMS)
    policies = ("fixed", "backoff") if a.small else POLICIES
    lossy = LOSSY[:1] if a.small else LOSSY
    drop = StreamKnobs(drop_frac=0.75)
    print("| config | stream | policy | MiB/token | hit % | positions/decode | tokens/decode | "
          "weight discarded % | predicted eff tok/s | vs fixed |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cname, mib, dev_set in configs:
        with tempfile.TemporaryDirectory() as tmp:
            inp = set_inputs(dev_set, tmp)
            device = identify_device(inp.specs, inp.sizes, inp.work, name=dev_set).device
        model = next(iter(device.compute))
        for sname, cov, acc in streams:
            def tok_s(row):
                return device_whatif(device, cname, row.mib_per_token, row.tokens_per_decode,
                                     model, 4, True).predicted_effective_tok_s
            rows = [policy_replay(trace, mib * MIB, "fixed", 3, 0.0, acc, a.seed, drop)]
            rows[0] = type(rows[0])(**{**rows[0].__dict__, "policy": "off (no drafts)"})
            rows += [policy_replay(trace, mib * MIB, p, 3, cov, acc, a.seed, drop) for p in policies]
            # lossy variants: without drop (the cache would re-decide the drops), against drop 0.75
            rows += [policy_replay(trace, mib * MIB, "fixed", 3, cov, acc, a.seed, None, v)
                     for v in lossy]
            base = tok_s(rows[1])
            for r in rows:
                t = tok_s(r)
                knob = "" if r.lossy else ", drop 0.75"
                print(f"| {cname} {mib} MiB | {sname} | {r.policy}{knob} | {r.mib_per_token:.1f} | "
                      f"{r.hit_pct_decode:.1f} | {r.positions_per_decode:.3f} | "
                      f"{r.tokens_per_decode:.3f} | {r.weight_discarded_pct:.2f} | {t:.3f} | "
                      f"{100 * (t / base - 1):+.1f} % |")
    return 0


if __name__ == "__main__":
    from refsim.interrupt import run_interruptible
    sys.exit(run_interruptible(main))
