"""Analyst feedback files: labels matched to training records, one-line errors naming
the file and row, unknown keys counted (never dropped in silence)."""

from __future__ import annotations

import numpy as np
import pytest

from fedep.data.feedback import read_feedback


def _write(tmp_path, text, name="fb.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_row_numbers_and_keys(tmp_path):
    fb = read_feedback(_write(tmp_path, "row,label\n0,attack\n3, Benign \n"), 5)
    assert fb.labels.tolist() == ["attack", "", "", "benign", ""]
    assert fb.n_rows == 2 and fb.unknown == 0
    keys = np.array(["Ca", "Cb", "Cc"])
    fb = read_feedback(_write(tmp_path, "uid,label\nCb,attack\nZZ,benign\nYY,attack\n"), 3, keys)
    assert fb.labels.tolist() == ["", "attack", ""]
    assert fb.unknown == 2 and fb.first_unknown == "ZZ"
    assert "2 rows name no training record (first: 'ZZ')" in fb.describe("fb.csv")


def test_a_record_labelled_both_ways_counts_as_attack(tmp_path):
    fb = read_feedback(_write(tmp_path, "row,label\n1,benign\n1,attack\n"), 2)
    assert fb.labels.tolist() == ["", "attack"] and fb.conflicting == 1


@pytest.mark.parametrize(
    "text, match",
    [
        ("row,label\n0,attack\n1,maybe\n", "row 3: label 'maybe' is not one of benign, attack"),
        ("row,label\n0,attack\n9,benign\n", "row 3: row 9 is outside the training table"),
        ("row,label\nx,attack\n", "row 2: row 'x' is not a number"),
        ("row,verdict\n0,attack\n", "row 1: no 'label' column"),
        ("row,label\n0,attack,extra\n", "row 2: 3 fields, the header has 2"),
        ("", "empty file"),
    ],
)
def test_bad_files_are_one_line_naming_file_and_row(tmp_path, text, match):
    p = _write(tmp_path, text)
    with pytest.raises(ValueError, match=match) as info:
        read_feedback(p, 3)
    assert str(p) in str(info.value) and "\n" not in str(info.value)


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="feedback .*nope.csv") as info:
        read_feedback(tmp_path / "nope.csv", 3)
    assert "\n" not in str(info.value)
