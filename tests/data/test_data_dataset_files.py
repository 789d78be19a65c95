"""Data directory resolution, verification and missing-file errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedep.data import (
    DatasetNotFoundError,
    format_verify_report,
    load_dataset,
    resolve_data_dir,
    verify_data_dir,
)
from fedep.data.dataset_files import KNOWN_FILES, SHA256


def test_resolution_order(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDEP_DATA_DIR", str(tmp_path / "env"))
    assert resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"
    assert resolve_data_dir() == tmp_path / "env"
    monkeypatch.delenv("FEDEP_DATA_DIR")
    work = tmp_path / "proj" / "main"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_data_dir() == tmp_path / "home" / ".fedep" / "data"
    (tmp_path / "proj" / "shared" / "data").mkdir(parents=True)
    assert resolve_data_dir() == (tmp_path / "proj" / "shared" / "data").resolve()


def test_hash_table_matches_known_files():
    assert set(SHA256) <= set(KNOWN_FILES)
    assert all(len(h) == 64 for h in SHA256.values())
    # only the optional UNSW-NB15 training set has no reference hash
    assert all(not req for rel, (_, req) in KNOWN_FILES.items() if rel not in SHA256)


def test_verify_missing_and_altered(tmp_path):
    (tmp_path / "nsl-kdd").mkdir()
    (tmp_path / "nsl-kdd" / "KDDTest+.txt").write_text("not the real file\n")
    recs = verify_data_dir(tmp_path)
    by = {r.file: r for r in recs}
    assert [r.file for r in recs] == list(KNOWN_FILES)
    assert by["nsl-kdd/KDDTest+.txt"].status == "altered"
    assert by["nsl-kdd/KDDTest+.txt"].sha256 != by["nsl-kdd/KDDTest+.txt"].expected
    assert by["nsl-kdd/KDDTrain+.txt"].status == "missing"
    assert by["nsl-kdd/KDDTrain+.txt"].sha256 is None
    report = format_verify_report(recs, str(tmp_path))
    assert "ALTERED  nsl-kdd/KDDTest+.txt" in report
    assert "https://www.unb.ca/cic/datasets/nsl.html" in report
    assert report.splitlines()[-1].endswith("problem(s)")


@pytest.mark.parametrize(
    "name,file,url",
    [
        ("nsl-kdd", "nsl-kdd/KDDTrain+.txt", "unb.ca/cic/datasets/nsl"),
        ("unsw-nb15", "unsw-nb15/UNSW_NB15_testing-set.csv", "unsw-nb15-dataset"),
        ("ton-iot", "ton-iot/train_test_network.csv", "toniot-datasets"),
    ],
)
def test_missing_dataset_error(tmp_path, name, file, url):
    with pytest.raises(DatasetNotFoundError) as exc:
        load_dataset(name, tmp_path)
    msg = str(exc.value)
    assert file in msg and str(tmp_path) in msg and url in msg
    assert isinstance(exc.value, FileNotFoundError)
    assert exc.value.directory == Path(tmp_path)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="name"):
        load_dataset("kdd99", tmp_path)
    with pytest.raises(ValueError, match="feature_set"):
        load_dataset("nsl-kdd", tmp_path, feature_set="fancy")
    with pytest.raises(ValueError, match="test_size"):
        load_dataset("nsl-kdd", tmp_path, test_size=0.2)
    with pytest.raises(ValueError, match="variant"):
        load_dataset("ton-iot", tmp_path, variant="20percent")
