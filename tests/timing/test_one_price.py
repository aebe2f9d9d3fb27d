"""One price per configuration (issue 29, item 1): the same configuration -- budget, speculation,
knobs, device -- priced through every ``--device`` output gives the figure ``refsim whatif`` gives.

Every command is run in-process (``--json`` where it has one); ``run`` is compared with
:func:`refsim.timing.verdict.price` of the run's own configuration (the library function the
command calls), and a plain run with ``whatif`` on the route trace it wrote. One configuration is
hand-worked from the device's rules (docs/timing.md, "The rules") on the demo trace's exact replay.
"""

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from refsim import MIB
from refsim.cli import main
from refsim.timing import DeviceModel, Param

DEMO = str(Path(__file__).resolve().parents[2] / "traces" / "demo.route.csv")
VALUES = {"m0": 5.0, "m1": 0.2, "kappa": 0.1, "i0": 3.0, "a": 1.0, "b": 0.5, "s0": 2.0, "s1": 0.8,
          "h": 0.1, "tail": 1.0}
# the demo trace (64 decode positions) replayed at 256 MiB, flash MiB of all its decodes
# (refsim union's read_MiB; checked against union_study below): width -> (plain, --drop 0.5)
READ_256 = {1: (1299.375, 982.8984375), 2: (1295.296875, 987.57421875),
            4: (1368.28125, 955.265625)}
DECODES = {1: 64, 2: 32, 4: 16}
NO_BAND = ["--noise-pct", "0", "--position-cost-interval", "0.38,0.38"]


def device(values=VALUES) -> DeviceModel:
    return DeviceModel(params={k: Param(v) for k, v in values.items()}, compute={"m": Param(100.0)},
                       serial_runs=2, overlap_runs=2)


@pytest.fixture
def device_file(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(device().to_json())
    return str(path)


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _whatif(capsys, dev, spec, *extra):
    doc = _json(capsys, ["whatif", DEMO, "--device", dev, "--cache-mb", "256", "--spec", spec,
                         "--json", *NO_BAND, *extra])
    return {r["config"]: r for r in doc["rows"]}


def _ngram(d, acceptance, coverage=1):
    return f"ngram:d={d}:m=2:acceptance={acceptance}:coverage={coverage}"


# --- one configuration, by hand --------------------------------------------------------------

def test_the_reads_are_the_union_replays():
    from refsim.streaming.knobs import StreamKnobs
    from refsim.studies.union import union_study
    from refsim.trace import read_trace
    rows = union_study(read_trace(DEMO), [1, 2, 4], 256 * MIB, StreamKnobs(drop_frac=0.5))
    assert {r.window: (r.read_mib, r.knob_read_mib) for r in rows} == READ_256
    assert {r.window: r.decodes for r in rows} == DECODES


def test_one_configuration_hand_worked_through_every_command(device_file, capsys):
    """Serial, 4 lanes, cache on, eps 0.38, --drop-cold-experts 0.5 at 256 MiB. A decode of w
    positions reading x MiB costs t = C (1 + eps (w - 1)) + m0 + m1 x + i0 + x (a + b / 4)
    = 100 (1 + 0.38 (w - 1)) + 8 + 1.325 x ms."""
    x1 = READ_256[1][1] / 64                     # 15.3577880859375 MiB per plain decode
    x4 = READ_256[4][1] / 16                     # 59.7041015625 MiB per 4-wide decode
    t1 = 108.0 + 1.325 * x1                      # 128.349069... ms
    t4 = 100.0 * (1 + 0.38 * 3) + 8.0 + 1.325 * x4   # 301.107934... ms
    assert t1 == pytest.approx(128.34906921386719, rel=1e-15)
    assert t4 == pytest.approx(301.10793457031250, rel=1e-15)
    drop = ["--drop-cold-experts", "0.5"]
    # whatif: off; n-gram d3 on every decode at acceptance 0.5 (2.5 tokens per 4-wide decode);
    # the same at acceptance 1 (union's column) and 0 (breakeven's verify decode)
    rows = _whatif(capsys, device_file, f"off,{_ngram(3, 0.5)}", *drop)
    assert rows["off"]["ms_per_token"] == pytest.approx(t1, rel=1e-14)
    assert rows["off"]["eff_tok_s"] == pytest.approx(1000 / t1, rel=1e-14)
    assert rows["ngram:d=3:m=2"]["ms_per_token"] == pytest.approx(t4 / 2.5, rel=1e-14)
    assert rows["ngram:d=3:m=2"]["positions_per_decode"] == 4.0
    # timing breakeven: t(1), t(4) and the acceptance needed (t4/t1 - 1)/3 = 44.87 %
    be = _json(capsys, ["timing", "breakeven", DEMO, "--device", device_file, "--cache-mb", "256",
                        "--draft", "3", "--json", *drop])
    assert be["drop_cold_experts"] == 0.5
    (row,) = be["rows"]
    assert row["plain_ms"] == pytest.approx(t1, rel=1e-14)
    assert row["verify_ms"] == pytest.approx(t4, rel=1e-14)
    assert row["mib_per_decode"] == x4
    assert row["acceptance_needed_pct"] == pytest.approx(100 * (t4 / t1 - 1) / 3, rel=1e-12)
    # union: every draft accepted, 4 tokens per 4-wide decode, on the knob columns it shows
    un = _json(capsys, ["union", DEMO, "--cache-mb", "256", "--window", "1,4", "--device",
                        device_file, "--json", *drop])
    pred = {r["window"]: r["predicted_tok_s"] for r in un["traces"][0]["rows"]}
    assert pred[1] == pytest.approx(1000 / t1, rel=1e-14)
    assert pred[4] == pytest.approx(4000 / t4, rel=1e-14)


# --- the same figure, every command ----------------------------------------------------------

@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("knobs", [[], ["--drop-cold-experts", "0.5"],
                                   ["--drop-cold-experts", "0.25", "--prefetch", "1"]])
def test_breakeven_and_union_price_as_whatif(device_file, capsys, overlap, knobs):
    flags = knobs + (["--overlap"] if overlap else [])
    be = _json(capsys, ["timing", "breakeven", DEMO, "--device", device_file, "--cache-mb", "256",
                        "--draft", "1,3", "--json", *flags])
    # whatif lists a configuration once: acceptance 0 (breakeven's verify decode: one token per
    # decode) and 1 (union's column: every draft accepted) are two commands
    at0 = _whatif(capsys, device_file, ",".join(["off"] + [_ngram(d, 0) for d in (1, 3)]), *flags)
    at1 = _whatif(capsys, device_file, ",".join(["off"] + [_ngram(d, 1) for d in (1, 3)]), *flags)
    for row in be["rows"]:
        label = f"ngram:d={row['draft']}:m=2"
        assert row["plain_ms"] == pytest.approx(at0["off"]["ms_per_token"], rel=1e-13)
        assert row["verify_ms"] == pytest.approx(at0[label]["ms_per_token"], rel=1e-13)
        assert row["acceptance_needed_pct"] == pytest.approx(
            100 * at0[label]["breakeven_acceptance"], abs=1e-6)
    un = _json(capsys, ["union", DEMO, "--cache-mb", "256", "--window", "1,2,4", "--device",
                        device_file, "--json", *flags])
    pred = {r["window"]: r["predicted_tok_s"] for r in un["traces"][0]["rows"]}
    assert pred[1] == pytest.approx(at1["off"]["eff_tok_s"], rel=1e-13)
    assert pred[2] == pytest.approx(at1["ngram:d=1:m=2"]["eff_tok_s"], rel=1e-13)
    assert pred[4] == pytest.approx(at1["ngram:d=3:m=2"]["eff_tok_s"], rel=1e-13)


@pytest.mark.parametrize("overlap", [False, True])
def test_replay_and_sweep_price_a_plain_trace_as_whatif_off(device_file, capsys, overlap):
    flags = ["--overlap"] if overlap else []
    off = _whatif(capsys, device_file, "off", *flags)["off"]
    rep = _json(capsys, ["replay", DEMO, "--cache-mb", "256", "--device", device_file, "--json",
                         *flags])
    assert rep["device"]["predicted_tok_s"] == pytest.approx(off["eff_tok_s"], rel=1e-13)
    sw = _json(capsys, ["sweep", DEMO, "--cache-mb", "256", "--policy", "lru", "--device",
                        device_file, "--json", *flags])
    assert sw["traces"][0]["rows"][0]["predicted_tok_s"] == pytest.approx(off["eff_tok_s"],
                                                                          rel=1e-13)


@pytest.fixture(scope="module")
def q3(tmp_path_factory):
    from refsim.model import write_synthetic
    return str(write_synthetic(tmp_path_factory.mktemp("q3") / "q3.gguf", arch="qwen3moe"))


def test_memory_prices_a_read_level_as_whatif_off(device_file, capsys, q3):
    """memory --mib-per-token M is plain decoding at M MiB/token: whatif's off at a budget whose
    replay reads M MiB per decode."""
    off = _whatif(capsys, device_file, "off")["off"]
    mem = _json(capsys, ["memory", q3, "--device", device_file, "--json", "--mib-per-token",
                         repr(off["mib_per_token"])])
    (case,) = [c for c in mem["device"]["cases"] if c["case"].startswith("run ")]
    assert case["mib_per_token"] == off["mib_per_token"]
    assert case["predicted_tok_s"] == pytest.approx(off["eff_tok_s"], rel=1e-13)
    assert mem["device"]["hit_kind"] == "decode"


def test_a_plain_run_prices_as_whatif_on_its_trace(device_file, capsys, q3, tmp_path):
    trace = str(tmp_path / "run.route.csv")
    run = _json(capsys, ["run", q3, "-n", "12", "--cache-mb", "0.05", "--json", "--device",
                         device_file, "--route-trace", trace])
    doc = _json(capsys, ["whatif", trace, "--device", device_file, "--cache-mb", "0.05", "--spec",
                         "off", "--json", *NO_BAND])
    (off,) = doc["rows"]
    assert off["mib_per_token"] == pytest.approx(run["mib_per_token"], rel=1e-15)
    assert run["device"]["predicted_tok_s"] == pytest.approx(off["eff_tok_s"], rel=1e-13)
    assert run["device"]["predicted_effective_tok_s"] == run["device"]["predicted_tok_s"]


def test_a_speculative_trace_prices_per_position_in_replay_and_sweep(device_file, capsys, q3,
                                                                     tmp_path):
    """replay/sweep --device of an n-gram run's trace: its decodes carry 1 + drafts positions
    (rejected ones included), priced as the run itself prices them (serial: the terms are linear
    in the reads, so the run's per-kind means and the replay's overall mean agree)."""
    from refsim.cli.device import n_target_decodes, n_target_positions
    from refsim.trace import read_trace
    trace = str(tmp_path / "ng.route.csv")
    run = _json(capsys, ["run", q3, "-n", "24", "--ngram", "--cache-mb", "0.05", "--json",
                         "--device", device_file, "--route-trace", trace, "--prompt-tokens",
                         "1,5,77,9,1,5,77,9,1,5,77,9,1,5"])
    assert run["drafted"] > run["accepted"]          # some drafts rejected: positions > tokens
    t = read_trace(trace)
    assert n_target_decodes(t) == run["decodes"]
    assert n_target_positions(t) == run["decodes"] + run["drafted"]
    rep = _json(capsys, ["replay", trace, "--cache-mb", "0.05", "--device", device_file, "--json"])
    assert rep["mib_per_token"] == run["mib_per_token"]
    assert rep["device"]["predicted_tok_s"] == pytest.approx(run["device"]["predicted_tok_s"],
                                                             rel=1e-13)
    sw = _json(capsys, ["sweep", trace, "--cache-mb", "0.05", "--policy", "lru", "--device",
                        device_file, "--json"])
    assert sw["traces"][0]["rows"][0]["predicted_tok_s"] == pytest.approx(
        rep["device"]["predicted_tok_s"], rel=1e-13)
    # by hand: x MiB per decode, p positions and n tokens per decode, t = 108 + 1.325 x + 38 (p - 1)
    n, p = run["cache"]["tokens"] / run["decodes"], 1 + run["drafted"] / run["decodes"]
    x = run["mib_per_token"] * n
    assert 1000 / rep["device"]["predicted_tok_s"] == pytest.approx(
        (108 + 1.325 * x + 38 * (p - 1)) / n, rel=1e-13)
    # layout --device: the evaluated decodes (all but the first 10 %) at their window reads and
    # positions
    lay = _json(capsys, ["layout", q3, trace, "--cache-mb", "0.05", "--device", device_file,
                         "--json", "--fit-fraction", "0.1"])
    dec = [e for e in t.events if e.kind.name in ("PLAIN", "VERIFY")]
    held = dec[int(len(dec) * 0.1):]
    assert any(e.n_pos > 1 for e in held)                 # a verify decode is evaluated
    p_eval = sum(e.n_pos for e in held) / len(held)
    for row in lay["rows"]:
        n_eval = row["tokens"] / row["eval_decodes"]
        x_eval = row["window_mib_per_token"] * n_eval
        assert row["predicted_ms_per_token"] == pytest.approx(
            (108 + 1.325 * x_eval + 38 * (p_eval - 1)) / n_eval, rel=1e-13)


# --- run --device: per position, the MTP head ------------------------------------------------

def _fake_run():
    """Two decodes: a plain one reading 10 MiB, a verify of 1 + 2 drafts (one accepted: 2
    tokens) reading 41 MiB; 3 tokens (tests/timing/test_device_outputs.py's run)."""
    from types import SimpleNamespace

    from refsim.events import DecodeKind
    from refsim.spec.loop import StepRecord
    steps = [StepRecord(DecodeKind.PLAIN, 8, 0, 0, 1, 1, False, 0.5, 0.0, 0.01, 10 * MIB, 4, 1, 20, 5),
             StepRecord(DecodeKind.VERIFY, 9, 2, 1, 2, 2, False, 0.7, 0.02, 0.03, 41 * MIB, 8, 2, 28,
                        7, draft_read_bytes=MIB)]
    return SimpleNamespace(steps=steps, cache=SimpleNamespace(budget_bytes=8 * MIB), n_predict=3,
                           events=[], spec="ngram", draft_max=2)


def test_run_config_and_its_price_hand_worked():
    """Coverage 1/2, 2 drafts per drafted decode, 1.5 tokens per decode (acceptance 1/2). With
    tail 1.1 and eps 0.5: t(1) = 1.1 (108 + 1.325 x 10) = 133.375 ms; the 3-position verify decode
    t(3) = 1.1 (100 (1 + 0.5 x 2) + 8 + 1.325 x 41) = 288.5575 ms; per token (t(1) + t(3)) / 2 /
    1.5 = 70.322083 ms... x 2 = 140.644167 ms. The old per-token rule (1.5 positions at the mean
    read 25.5 MiB) gave 122.31 ms: the rejected draft's position was not paid."""
    from refsim.timing.device_options import DeviceOptions
    from refsim.timing.whatif import run_config
    cfg, reads = run_config(_fake_run(), 3)
    assert (cfg.kind, cfg.draft, cfg.coverage, cfg.drafts, cfg.acceptance) == ("ngram", 2, 0.5, 2.0, 0.5)
    assert (cfg.positions_per_decode, cfg.tokens_per_decode) == (2.0, 1.5)
    assert {w: r.mib_per_decode for w, r in reads.items()} == {1: 10.0, 3: 41.0}
    dev = device({**VALUES, "tail": 1.1})
    opts = DeviceOptions(device="dev.json", position_cost=0.5)
    w = opts.run_figures((dev, "dev.json", "m"), _fake_run(), 3)
    want_ms = (133.375 + 288.5575) / 2 / 1.5
    assert 1000 * w.predicted_s_per_token == pytest.approx(want_ms, rel=1e-14)
    assert w.ms_per_decode == pytest.approx(want_ms * 1.5, rel=1e-14)
    assert w.predicted_effective_tok_s == w.predicted_tok_s        # n-gram: no head
    assert w.position_cost == 0.5
    # a run without drafts is off: plain decodes at their mean read
    plain = _fake_run()
    plain.steps = plain.steps[:1]
    cfg, reads = run_config(plain, 1)
    assert cfg.kind == "off" and {w: r.mib_per_decode for w, r in reads.items()} == {1: 10.0}


@pytest.fixture(scope="module")
def q35(tmp_path_factory):
    from refsim.model import write_synthetic
    return str(write_synthetic(tmp_path_factory.mktemp("q35") / "q35.gguf", arch="qwen35moe",
                               quant="F32", nextn=True, seed=0))


@pytest.mark.parametrize("mtp", [False, True], ids=["ngram", "mtp"])
def test_a_speculative_run_prices_as_price_of_its_configuration(device_file, q3, q35, mtp):
    """refsim run's device figure (refsim.session.simulate, what the command prints) is
    :func:`refsim.timing.verdict.price` of the run's configuration (run_config): the function
    whatif prices with, the MTP head's term from the model's tensor table."""
    from refsim.model import open_model
    from refsim.session import RunConfig, simulate
    from refsim.spec import SpecConfig as RunSpec
    from refsim.timing.device_options import DeviceOptions
    from refsim.timing.verdict import Reads, price
    from refsim.timing.whatif import price_device, run_config
    from refsim.timing.work import position_work
    path = q35 if mtp else q3
    rep = simulate(RunConfig(model=path, n_predict=12, cache_mb=0.2,
                             prompt_tokens=[1, 5, 77, 9, 1, 5, 77, 9, 1, 5, 77, 9, 1, 5],
                             spec=RunSpec.from_flags(mtp=mtp, ngram=not mtp),
                             device=DeviceOptions(device=device_file, device_model="m")))
    cfg, reads = run_config(rep.result, rep.result.n_gen)
    assert cfg.kind == ("mtp" if mtp else "ngram") and rep.stats.drafted > 0
    assert cfg.tokens_per_decode == pytest.approx(rep.result.n_gen / rep.stats.decodes, rel=1e-14)
    # per position: 1 + the drafts of a decode, rejected ones included
    assert cfg.positions_per_decode == pytest.approx(1 + rep.stats.drafted / rep.stats.decodes,
                                                     rel=1e-14)
    work = position_work(open_model(path)) if mtp else None
    dv = price_device(device(), "m", 4, False, work=work)
    # price's baseline (off) needs a plain decode's read; it does not enter cfg's own figures
    p = price(dv, cfg, {1: Reads(1, 0.0), **reads})
    d = rep.device
    assert d.predicted_effective_tok_s == pytest.approx(p.eff_tok_s.point, rel=1e-13)
    head = p.term("head").value
    assert 1000 / d.predicted_tok_s == pytest.approx(p.ms_per_token - head, rel=1e-13)
    if mtp:      # the head's compute is priced, in the effective rate only
        assert head > 0 and d.predicted_effective_tok_s < d.predicted_tok_s
    else:
        assert head == 0.0 and d.predicted_effective_tok_s == d.predicted_tok_s


# --- properties ------------------------------------------------------------------------------

positive = st.floats(0.01, 50.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(vals=st.fixed_dictionaries({k: positive for k in VALUES}), c=st.floats(10.0, 500.0),
       x=st.floats(0.0, 2000.0), width=st.integers(1, 8), eps=st.floats(0.0, 1.5),
       overlap=st.booleans(), lanes=st.integers(1, 8))
def test_every_command_sums_the_same_decode_terms(vals, c, x, width, eps, overlap, lanes):
    """breakeven's t(w), union's column and the per-token what-if of replay/sweep/memory are each
    point_terms (price's own sum) of their configuration: equal to decode_ms to rounding."""
    from refsim.timing.breakeven import decode_ms
    from refsim.timing.verdict import Reads, SpecConfig, point_terms
    from refsim.timing.whatif import device_whatif, price_device, width_whatif
    dev = DeviceModel(params={k: Param(v) for k, v in vals.items()}, compute={"m": Param(c)},
                      serial_runs=1, overlap_runs=1)
    t = decode_ms(dev, x * width, width, "m", lanes, overlap, True, eps)
    dv = price_device(dev, "m", lanes, overlap, eps)
    reads = {1: Reads(1, x * width), width: Reads(width, x * width)}
    cfg0 = SpecConfig("off") if width == 1 else SpecConfig("ngram", width - 1, acceptance=0.0,
                                                             coverage=1.0)
    assert sum(point_terms(dv, cfg0, reads).values()) == pytest.approx(t, rel=1e-13)
    u = width_whatif(dev, "d", "m", lanes, overlap, width, x, eps)
    assert u.predicted_tok_s == pytest.approx(1000 * width / t, rel=1e-13)
    w = device_whatif(dev, "d", x, float(width), "m", lanes, overlap, True, eps)
    assert w.predicted_tok_s == pytest.approx(u.predicted_tok_s, rel=1e-13)
    assert math.isfinite(u.ms_per_decode)
