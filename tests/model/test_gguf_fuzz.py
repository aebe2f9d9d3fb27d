"""Mutation tests of the GGUF reader (issue 12, section F): valid seeds written by refsim's own
synth, mutated by byte flips, truncations, typed overwrites of counts / lengths / offsets / types /
values (aimed with gguf-py's reader, :func:`refsim.testing.gguf_files.mutation_sites`), and
writer-level slips (a key re-typed, a tensor re-shaped, renamed or moved).

Every mutated file must give either a one-line :class:`RefsimError` naming the file and a byte
offset, key or tensor, or a model that gguf-py's ``GGUFReader`` reads identically (keys, types,
values, tensor table and tensor bytes) and that the inspect, memory and forward paths run
without a traceback. A small budget runs in the default suite; ``pytest -m fuzz`` runs 10,000
cases.
"""

import contextlib
import io
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from refsim.cli import main
from refsim.errors import RefsimError
from refsim.model import open_model, write_synthetic
from refsim.model.tokenizer import Tokenizer
from refsim.spec.forward_target import ForwardTarget
from refsim.testing.gguf_files import (INTERESTING_FLOATS, INTERESTING_INTS, RESHAPES, SCALAR_TYPES, apply,
                                       check_against_gguf_py, encode, from_file, mutation_sites, reshaped, retyped,
                                       to_bytes)

NAMED = re.compile(r"byte \d+|key |tensor|tokenizer\.|\b[a-z0-9]+\.[a-z_.*]+|vocabulary|general\.|GGUF|header")
"""What a refusal must name besides the file: a byte offset, a key, a tensor, ..."""


class Seed:
    def __init__(self, path):
        self.path = str(path)
        self.data = open(path, "rb").read()
        self.file = from_file(path)
        self.sites = [s for s in mutation_sites(path) if s.dtype != "data"]
        self.data_sites = [s for s in mutation_sites(path) if s.dtype == "data"]
        self.header_end = max(s.offset + s.size for s in self.sites)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzzseeds")
    return [Seed(write_synthetic(d / "q3.gguf", "qwen3moe", "Q8_0", seed=3)),
            Seed(write_synthetic(d / "q35.gguf", "qwen35moe", "F32", nextn=True, seed=4,
                                 dims=dict(n_embd=32, head_dim=8, n_ff_exp=32, n_ff_shexp=32, n_expert=4,
                                           ssm_state=8, rope_dim=4, rope_sections=(1, 1, 0, 0))))]


byte_edit = st.one_of(
    st.tuples(st.just("typed"), st.integers(0, 10**6), st.one_of(st.sampled_from(INTERESTING_INTS),
                                                                st.integers(0, 2**64 - 1)),
              st.sampled_from(INTERESTING_FLOATS)),
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 7)),
    st.tuples(st.just("cut"), st.floats(0, 1.2)),
    st.tuples(st.just("data"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("insdel"), st.integers(0, 10**6), st.integers(-8, 8)))
writer_slip = st.one_of(
    st.tuples(st.just("retype"), st.integers(0, 10**4), st.sampled_from(["scalar", "string", "array1", "arrayN",
                                                                         "nested", "value", "value"]),
              st.sampled_from(SCALAR_TYPES), st.one_of(st.sampled_from(INTERESTING_FLOATS),
                                                       st.integers(0, 70000).map(float))),
    st.tuples(st.just("drop"), st.integers(0, 10**4)),
    st.tuples(st.just("reshape"), st.integers(0, 10**4), st.sampled_from(RESHAPES), st.integers(0, 3)),
    st.tuples(st.just("qtype"), st.integers(0, 10**4), st.sampled_from([0, 1, 2, 3, 8, 12, 24, 26, 28, 30, 39, 99])),
    st.tuples(st.just("rename"), st.integers(0, 10**4), st.sampled_from([".weighu", "blk.9", "x" * 70, "dup"])),
    st.tuples(st.just("move"), st.integers(0, 10**4), st.integers(0, 10**4)))
mutations = st.tuples(st.integers(0, 1), st.lists(st.one_of(byte_edit, writer_slip), min_size=1, max_size=3))


def mutate(seed: Seed, edits) -> bytes:
    """Writer slips rebuild the file (:func:`to_bytes`); byte edits then apply to its bytes."""
    f = seed.file.copy()
    slips = [e for e in edits if e[0] in ("retype", "drop", "reshape", "qtype", "rename", "move")]
    for e in slips:
        if e[0] == "retype":
            i = e[1] % len(f.kv)
            f.kv[i] = retyped(f.kv[i], e[2], e[3], e[4])
        elif e[0] == "drop":
            del f.kv[e[1] % len(f.kv)]
        elif e[0] == "reshape":
            i = e[1] % len(f.tensors)
            f.tensors[i] = reshaped(f.tensors[i], e[2], e[3])
        elif e[0] == "qtype":
            t = f.tensors[e[1] % len(f.tensors)]
            f.tensors[e[1] % len(f.tensors)] = reshaped(type(t)(t.name, t.ne, e[2], t.data), "none", 0)
        elif e[0] == "rename":
            t = f.tensors[e[1] % len(f.tensors)]
            t.name = (t.name.replace(".weight", e[2]) if e[2] == ".weighu" else t.name.replace("blk.0", e[2], 1)
                      if e[2] == "blk.9" else f.tensors[(e[1] + 1) % len(f.tensors)].name if e[2] == "dup" else e[2])
        else:
            i, j = e[1] % len(f.tensors), e[2] % len(f.tensors)
            f.tensors[i], f.tensors[j] = f.tensors[j], f.tensors[i]
    data = to_bytes(f) if slips else seed.data
    out = []
    for e in edits:
        if e[0] == "typed":
            s = seed.sites[e[1] % len(seed.sites)]
            if s.dtype == "bytes":
                out.append(("set", s.offset + e[2] % s.size, bytes([e[2] % 256])))
            else:
                out.append(("set", s.offset, encode(e[3] if np.dtype(s.dtype).kind == "f" else e[2], s.dtype)))
        elif e[0] == "flip":
            s = seed.sites[e[1] % len(seed.sites)]
            pos = min(s.offset + e[1] % s.size, len(data) - 1)
            out.append(("set", pos, bytes([data[pos] ^ (1 << e[2])])))
        elif e[0] == "cut":
            out.append(("cut", int(e[1] * seed.header_end) if e[1] <= 1 else int((e[1] - 1) * 5 * len(data))))
        elif e[0] == "data":
            s = seed.data_sites[e[1] % len(seed.data_sites)]
            out.append(("set", s.offset + e[1] % s.size, bytes([e[2]])))
        elif e[0] == "insdel":
            s = seed.sites[e[1] % len(seed.sites)]
            out.append(("insert", s.offset, bytes(e[2] % 256 for _ in range(e[2]))) if e[2] > 0
                       else ("delete", s.offset, -e[2] or 1))
    return apply(data, out)


def check_case(tmp_path, seed: Seed, edits, decode: bool = True) -> str:
    """The property: a clean refusal, or an independently confirmed reading that every path runs.
    Returns ``"refused"`` or ``"accepted"``."""
    bad = mutate(seed, edits)
    p = tmp_path / "mut.gguf"
    p.write_bytes(bad)
    try:
        m = open_model(p)
    except RefsimError as exc:
        msg = str(exc)
        assert str(p) in msg and "\n" not in msg and NAMED.search(msg.replace(str(p), "")), msg
        return "refused"
    if m.has_data:
        assert check_against_gguf_py(m.header, p) == []
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        assert main(["inspect", str(p)]) == 0 and main(["memory", str(p)]) == 0, err.getvalue()
    if "tokenizer.ggml.tokens" in m.metadata:
        try:
            tok = Tokenizer.from_model(m)
            tok.decode(tok.encode("Hello world"))
        except RefsimError as exc:
            assert str(p) in str(exc) or "token id" in str(exc)
    if decode and m.has_data:
        try:
            t = ForwardTarget(m)
            out = t.prefill(np.array([1, 5, 7]))
            t.decode(np.array([int(np.argmax(out.logits[-1]))]), np.array([3]))
        except RefsimError as exc:
            assert str(p) in str(exc), str(exc)
    return "accepted"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=mutations)
def test_mutated_seeds_give_a_clean_error_or_a_confirmed_reading(tmp_path, seeds, case):
    check_case(tmp_path, seeds[case[0]], case[1])


@pytest.mark.fuzz
@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                      HealthCheck.too_slow])
@given(case=mutations)
def test_mutation_campaign_at_ci_budget(request, tmp_path, seeds, case):
    if "fuzz" not in (request.config.getoption("markexpr") or "").replace("not fuzz", ""):
        pytest.skip("the 10,000-case campaign runs with `pytest -m fuzz`")   # (main's addopts deselect it too)
    check_case(tmp_path, seeds[case[0]], case[1])


def test_the_oracle_sees_a_misread(tmp_path, seeds):
    """The independent check is not vacuous: a header that says other than the file is caught."""
    import dataclasses
    m = open_model(seeds[0].path)
    assert check_against_gguf_py(m.header, seeds[0].path) == []
    md = dict(m.header.metadata, **{"qwen3moe.expert_used_count": 1})
    lie = dataclasses.replace(m.header, metadata=md)
    assert check_against_gguf_py(lie, seeds[0].path) == ["qwen3moe.expert_used_count: value differs from gguf-py's"]
    ti = m.header.tensors["blk.0.attn_q.weight"]
    moved = dict(m.header.tensors, **{ti.name: dataclasses.replace(ti, data_offset=ti.data_offset + 32)})
    assert check_against_gguf_py(dataclasses.replace(m.header, tensors=moved), seeds[0].path) == [
        "tensor blk.0.attn_q.weight: ne/type/offset/size differ from gguf-py's"]
