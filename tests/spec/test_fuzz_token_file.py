"""Mutation tests of ``read_token_file`` (issue 12 F): damaged copies of token files.

The seeds are token streams written the ways the reader documents (spaces, commas, one id per
line, CRLF). The reader's answer is compared with a tiny independent reading of the same bytes
(ASCII text, commas and ASCII whitespace between fields, each field an integer 0..2**31-1):
accepted exactly when that reading is, with the same ids; refused with a one-line
``ConfigError`` naming ``--tokens``, the file and the line of the first bad field (or, for a file
without ids, saying so). A hang (10 s alarm) fails the case. Default suite: 150 cases;
``pytest -m fuzz``: 20,000 cases.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refsim.errors import ConfigError
from refsim.spec.whatif import TOKEN_ID_MAX, read_token_file
from refsim.testing.mutate import cpu_time_limit, mutated, refusal_in_child

_rng = np.random.default_rng(12)
_ids = _rng.integers(0, 152064, 40).tolist()
SEEDS = [
    (" ".join(map(str, _ids[:20])) + "\n" + " ".join(map(str, _ids[20:])) + "\n").encode(),
    (",".join(map(str, _ids)) + "\n").encode(),
    "".join(f"{t}\r\n" for t in _ids[:12]).encode(),
    b"0, 1, 2147483647\n\t5 6\n",
    b"7",
]


def independent_read(data: bytes):
    """(ids, None) if the file is a valid token file, else (None, line of the first problem)
    (line 0: the file holds no ids). No regular expressions, no numpy."""
    ids, line, field, field_line = [], 1, "", 1
    for ch in data + b" ":
        c = chr(ch)
        if c in ", \t\n\r\x0b\x0c":
            if field:
                if not field.isdigit() or len(field) > 10 or int(field) > TOKEN_ID_MAX:
                    return None, field_line
                ids.append(int(field))
                field = ""
            if c == "\n":
                line += 1
        elif c in "0123456789":
            if not field:
                field_line = line
            field += c
        else:
            return None, line
    return (ids, None) if ids else (None, 0)


def check(data: bytes, recipe: str, path: Path) -> None:
    path.write_bytes(data)
    with cpu_time_limit(10.0, "read_token_file"):
        try:
            got, err = read_token_file(path), None
        except ConfigError as exc:
            got, err = None, str(exc)
    want, bad_line = independent_read(data)
    if want is not None:
        assert err is None, f"{recipe}: refused a valid file: {err}"
        assert got.dtype == np.int64 and got.tolist() == want, recipe
        return
    assert err is not None, f"{recipe}: accepted an invalid file as {got.tolist()}"
    assert "\n" not in err and err.startswith(f"--tokens {path}"), f"{recipe}: {err!r}"
    if bad_line == 0:
        assert err == (f"--tokens {path}: no token ids found; expected a text file of token ids "
                       f"separated by commas or whitespace"), f"{recipe}: {err!r}"
    else:
        m = re.match(rf"--tokens {re.escape(str(path))}:(\d+): ", err)
        assert m and int(m.group(1)) == bad_line, f"{recipe}: want line {bad_line}: {err!r}"


@pytest.fixture(scope="module")
def case_path(tmp_path_factory):
    return tmp_path_factory.mktemp("tokfuzz") / "toks.txt"


_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.function_scoped_fixture])


def _run(case_path, data):
    seed = data.draw(st.sampled_from(SEEDS), label="seed")
    case, recipe = data.draw(mutated(seed), label="mutation")
    check(case, recipe, case_path)


@settings(max_examples=150, **_SETTINGS)
@given(data=st.data())
def test_mutated_token_files_are_refused_or_read_as_written(case_path, data):
    _run(case_path, data)


@pytest.mark.fuzz
@settings(max_examples=20_000, **_SETTINGS)
@given(data=st.data())
def test_mutated_token_files_fuzz(case_path, data):
    _run(case_path, data)


@pytest.mark.parametrize("data", SEEDS)
def test_seeds_read(case_path, data):
    check(data, "seed", case_path)
    assert read_token_file(case_path).size > 0


def test_a_field_longer_than_a_chunk_is_refused_from_the_chunk(tmp_path):
    p = tmp_path / "toks.txt"
    p.write_bytes(b"1 2\n" + b"7" * (3 << 20))
    with pytest.raises(ConfigError, match=r"toks.txt:2: '7{40}\.\.\.' is not a token id"):
        read_token_file(p)


def test_a_field_cut_by_the_chunk_boundary_reads(tmp_path, monkeypatch):
    import refsim.spec.whatif as whatif
    monkeypatch.setattr(whatif, "TOKEN_FILE_CHUNK", 4)
    p = tmp_path / "toks.txt"
    p.write_bytes(b"12,345\n6789 1\n\n0")
    assert read_token_file(p).tolist() == [12, 345, 6789, 1, 0]
    p.write_bytes("1 2 3\n45 \u0661\n".encode())          # a 2-byte character cut by the chunk
    with pytest.raises(ConfigError, match=r"toks.txt:2: '\u0661' is not a token id"):
        read_token_file(p)


def test_non_ascii_separators_are_refused(tmp_path):
    # main split on Unicode whitespace: "1\u00a02" read as [1, 2]
    p = tmp_path / "toks.txt"
    p.write_bytes("1\u00a02\n".encode())
    with pytest.raises(ConfigError, match=r"toks.txt:1: '1\\xa02' is not a token id"):
        read_token_file(p)


def test_dev_zero_is_refused_from_its_first_bytes():
    # main: read /dev/zero whole (forever, then out of memory); the child has a 60 s and 1 GiB guard
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    assert refusal_in_child("refsim.spec.whatif:read_token_file", "/dev/zero") == (
        "--tokens /dev/zero:1: NUL byte at byte offset 0; expected a text file of token ids "
        "separated by commas or whitespace (a binary file?)")
