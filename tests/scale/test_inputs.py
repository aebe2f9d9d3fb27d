"""TRACE arguments: paths, globs, folders of *.route.csv (refsim.scale.inputs)."""

import os

import pytest

from refsim.errors import ConfigError
from refsim.scale.inputs import expand_traces


def test_folders_globs_and_paths_in_order_without_repeats(tmp_path):
    for name in ("b.route.csv", "a.route.csv", "c.csv", "d.route.csv.bak"):
        (tmp_path / name).write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "z.route.csv").write_text("x")
    d = str(tmp_path)
    assert expand_traces([d]) == [os.path.join(d, "a.route.csv"), os.path.join(d, "b.route.csv")]
    assert expand_traces([os.path.join(d, "*.csv")]) == [
        os.path.join(d, n) for n in ("a.route.csv", "b.route.csv", "c.csv")]
    # a file named twice (here by a path and by the folder) counts once, at its first place
    assert expand_traces([os.path.join(d, "b.route.csv"), d]) == [
        os.path.join(d, "b.route.csv"), os.path.join(d, "a.route.csv")]
    assert expand_traces(["missing.route.csv"]) == ["missing.route.csv"]   # the reader names it


def test_an_empty_folder_or_glob_is_a_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match=r"^TRACE .*: no \*\.route\.csv file in this folder$"):
        expand_traces([str(tmp_path)])
    with pytest.raises(ConfigError, match=r"^TRACE .*nothing\*\.csv: matches no file$"):
        expand_traces([str(tmp_path / "nothing*.csv")])
