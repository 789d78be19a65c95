"""load_dataset on tiny fabricated files in the official layouts (no real data needed)."""

from __future__ import annotations

import numpy as np
import pytest

from fedep.data import DataError, load_dataset
from fedep.data.feature_sets import NSL_KDD_COLUMNS, UNSW_NB15_COLUMNS


def _unsw_rows(n: int, rng: np.random.Generator, start: int = 1) -> list[str]:
    cats = ["Normal", "Generic", "Exploits"]
    rows = []
    for i in range(n):
        cat = cats[i % 3]
        vals = []
        for c in UNSW_NB15_COLUMNS:
            if c == "id":
                vals.append(str(start + i))
            elif c == "proto":
                vals.append(["tcp", "udp"][i % 2])
            elif c == "service":
                vals.append("-")
            elif c == "state":
                vals.append("FIN")
            elif c == "attack_cat":
                vals.append(cat)
            elif c == "label":
                vals.append("0" if cat == "Normal" else "1")
            else:
                vals.append(str(int(rng.integers(0, 100))))
        rows.append(",".join(vals))
    return rows


def _write_unsw(path, n, rng, bom=True):
    text = "\r\n".join([",".join(UNSW_NB15_COLUMNS), *_unsw_rows(n, rng)]) + "\r\n"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())


def test_unsw_official_pair(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "unsw-nb15").mkdir()
    _write_unsw(tmp_path / "unsw-nb15" / "UNSW_NB15_training-set.csv", 60, rng)
    _write_unsw(tmp_path / "unsw-nb15" / "UNSW_NB15_testing-set.csv", 30, rng)
    d = load_dataset("unsw-nb15", tmp_path)
    assert d.info["split"] == "official" and len(d.y_train) == 60 and len(d.y_test) == 30
    assert d.X_train.shape[1] == 39 and d.y_train.sum() == 40
    assert set(d.category_train) == {"normal", "Generic", "Exploits"}
    with pytest.raises(ValueError, match="test_size"):
        load_dataset("unsw-nb15", tmp_path, test_size=0.5)
    r = load_dataset("unsw-nb15", tmp_path, feature_set="rich")
    assert "proto=tcp" in r.feature_names and "service=-" in r.feature_names


def test_unsw_swapped_names_warn(tmp_path):
    rng = np.random.default_rng(1)
    (tmp_path / "unsw-nb15").mkdir()
    _write_unsw(tmp_path / "unsw-nb15" / "UNSW_NB15_training-set.csv", 30, rng)
    _write_unsw(tmp_path / "unsw-nb15" / "UNSW_NB15_testing-set.csv", 60, rng)
    with pytest.warns(UserWarning, match="swapped"):
        load_dataset("unsw-nb15", tmp_path)


def test_unsw_single_file_split_and_bad_label(tmp_path):
    rng = np.random.default_rng(2)
    (tmp_path / "unsw-nb15").mkdir()
    p = tmp_path / "unsw-nb15" / "UNSW_NB15_testing-set.csv"
    _write_unsw(p, 90, rng, bom=False)
    d = load_dataset("unsw-nb15", tmp_path, test_size=1 / 3)
    assert len(d.y_test) == 30 and d.info["stratify_by"] == "attack_cat"
    assert sorted(d.category_test.tolist()).count("normal") == 10
    text = p.read_text().splitlines()
    text[5] = text[5].rsplit(",", 1)[0] + ",7"
    p.write_text("\n".join(text) + "\n")
    with pytest.raises(DataError, match=r"line 6, column 'label'"):
        load_dataset("unsw-nb15", tmp_path)


def test_nsl_kdd_fabricated(tmp_path):
    (tmp_path / "nsl-kdd").mkdir()
    names = ["normal", "neptune", "satan", "guess_passwd", "rootkit", "brandnew"]

    def row(i, name):
        vals = []
        for c in NSL_KDD_COLUMNS:
            if c == "protocol_type":
                vals.append("tcp")
            elif c in ("service", "flag"):
                vals.append(["http", "SF"][c == "flag"])
            elif c == "attack_type":
                vals.append(name)
            else:
                vals.append(str(i % 7))
        return ",".join(vals)

    body = "\n".join(row(i, names[i % 6]) for i in range(24)) + "\n"
    for f in ("KDDTrain+.txt", "KDDTest+.txt", "KDDTrain+_20Percent.txt"):
        (tmp_path / "nsl-kdd" / f).write_text(body)
    d = load_dataset("nsl-kdd", tmp_path)
    assert d.X_train.shape == (24, 34)
    assert d.category_train[:6].tolist() == ["normal", "DoS", "Probe", "R2L", "U2R", "unknown"]
    assert d.info["unknown_attack_names"] == ["brandnew"]
    assert d.y_train[:6].tolist() == [0, 1, 1, 1, 1, 1]
    with pytest.raises(ValueError, match="variant"):
        load_dataset("nsl-kdd", tmp_path, variant="10percent")
