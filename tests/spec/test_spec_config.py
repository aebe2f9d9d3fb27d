"""SpecConfig: the engine's load-time rejections (bmoe-engine.md §1, §2)."""

import pytest

from refsim.errors import ConfigError
from refsim.spec import SpecConfig, draft_source_for
from refsim.spec.draft import NgramDraft, NoDraft


def test_defaults():
    c = SpecConfig()
    assert (c.spec, c.draft_max, c.ngram_min_match, c.ngram_max_match, c.mtp_p_min) == \
        ("off", 3, 3, 12, 0.0)
    assert not c.enabled and c.preamble_draft_max == 0


@pytest.mark.parametrize("draft", [0, 9, -1])
def test_draft_outside_1_to_8_is_rejected(draft):
    with pytest.raises(ConfigError, match=r"argument --draft: expected an integer in 1\.\.8, got"):
        SpecConfig(spec="ngram", draft_max=draft)


@pytest.mark.parametrize("draft", [1, 8])
def test_draft_bounds_accepted(draft):
    assert SpecConfig(spec="ngram", draft_max=draft).preamble_draft_max == draft


@pytest.mark.parametrize("m", [0, 13])
def test_min_match_outside_1_to_12(m):
    with pytest.raises(ConfigError, match=r"argument --ngram-min-match: expected an integer in 1\.\.12"):
        SpecConfig(spec="ngram", ngram_min_match=m)


def test_ngram_with_mtp_is_rejected():
    with pytest.raises(ConfigError, match="two draft sources"):
        SpecConfig.from_flags(ngram=True, mtp=True)


def test_nonzero_p_min_with_ngram_is_rejected():
    with pytest.raises(ConfigError, match="--mtp-p-min 0.5: an MTP-only knob"):
        SpecConfig.from_flags(ngram=True, mtp_p_min=0.5)


def test_p_min_range_with_mtp():
    assert SpecConfig.from_flags(mtp=True, mtp_p_min=0.5).mtp_p_min == 0.5
    with pytest.raises(ConfigError, match=r"--mtp-p-min: expected a probability in \[0, 1\]"):
        SpecConfig.from_flags(mtp=True, mtp_p_min=1.5)


def test_speculation_requires_greedy():
    with pytest.raises(ConfigError, match="greedy"):
        SpecConfig.from_flags(ngram=True, temp=0.7)
    assert SpecConfig.from_flags(temp=0.7).temp == 0.7   # no speculation: sampling allowed


def test_unknown_spec_name():
    with pytest.raises(ConfigError, match="spec: expected one of off, ngram, mtp"):
        SpecConfig(spec="eagle")


def test_draft_source_for():
    assert isinstance(draft_source_for(SpecConfig()), NoDraft)
    src = draft_source_for(SpecConfig.from_flags(ngram=True, ngram_min_match=5))
    assert isinstance(src, NgramDraft) and src.min_match == 5 and src.max_match == 12
    with pytest.raises(ConfigError, match="MTP draft source is not available"):
        draft_source_for(SpecConfig.from_flags(mtp=True))
