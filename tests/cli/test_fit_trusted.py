"""``fedep fit --reference / --reference-column / --feedback``: what the fit was told,
what it reports, and one-line errors naming the file and row."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import fedep
from fedep.cli import main

from ._helpers import one_error_line

N = 8


def _files(tmp_path, seed=0):
    """Three gateways' files with a tight attack mode (15 %), a ``uid`` key and a
    ``trusted`` column; a trusted file per gateway."""
    rng = np.random.default_rng(seed)
    B = np.linalg.qr(rng.normal(size=(N, 3)))[0]
    cols = [f"f{j}" for j in range(N)]
    train, refs = [], []
    for i in range(3):
        m = 300
        X = (rng.normal(size=(m, 3)) * [3, 2, 1.5]) @ B.T + 0.3 * rng.normal(size=(m, N))
        X[:45] = np.r_[np.full(3, 5.0), np.zeros(N - 3)] + 0.05 * rng.normal(size=(45, N))
        df = pd.DataFrame(X, columns=cols)
        df.insert(0, "uid", [f"C{i}x{j}" for j in range(m)])
        df["trusted"] = 0
        df.loc[rng.choice(np.arange(45, m), 20, replace=False), "trusted"] = 1
        p = tmp_path / f"gw{i}.csv"
        df.to_csv(p, index=False)
        train.append(str(p))
        R = (rng.normal(size=(25, 3)) * [3, 2, 1.5]) @ B.T + 0.3 * rng.normal(size=(25, N))
        r = tmp_path / f"ref{i}.csv"
        pd.DataFrame(R, columns=cols).to_csv(r, index=False)
        refs.append(str(r))
    return train, refs


def _fit(train, out, *extra):
    base = ["fit", "--train", *train, "--method", "pca", "--n-components", "3"]
    return main([*base, "--features", "numeric", *extra, "--out", str(out)])


def test_reference_column_and_feedback(tmp_path, capsys):
    train, _ = _files(tmp_path)
    fb = tmp_path / "fb.csv"
    fb.write_text("uid,label\nC0x0,attack\nC1x7,attack\nC2x299,benign\nNOPE,attack\n")
    out = tmp_path / "m.fedep"
    assert (
        _fit(
            train,
            out,
            "--contamination",
            "auto",
            "--reference-column",
            "trusted",
            "--feedback",
            str(fb),
            "uid",
        )  # fmt: skip
        == 0
    )
    cap = capsys.readouterr()
    text = cap.out + cap.err
    assert "1 rows name no training record (first: 'NOPE')" in text
    assert "estimated from 60 reference records" in text
    # the floods of gateways 0 and 1 (45 records each), not their normal records
    moved = int(re.search(r"2 attack labels excluded (\d+) records", text).group(1))
    assert 80 <= moved <= 90
    det = fedep.load(out)
    assert "trusted" not in list(det.feature_names_in_)  # never a feature
    assert abs(det.contamination_ - 0.15) <= 0.06


def test_reference_files_one_per_gateway(tmp_path, capsys):
    train, refs = _files(tmp_path, seed=1)
    assert _fit(train, tmp_path / "m0.fedep", "--reference", *refs) != 0
    assert "lack training column(s) ['trusted']" in capsys.readouterr().err
    for p in train:
        pd.read_csv(p).drop(columns=["trusted"]).to_csv(p, index=False)
    out = tmp_path / "m.fedep"
    assert _fit(train, out, "--contamination", "auto", "--reference", *refs) == 0
    text = capsys.readouterr().out
    assert "75 trusted records" in text and "record trimming:" in text
    det = fedep.load(out)
    assert "reference records" in det.contamination_reason_


def test_auto_without_reference_says_it_is_unreliable(tmp_path, capsys):
    train, _ = _files(tmp_path)
    assert _fit(train, tmp_path / "m.fedep", "--contamination", "auto") == 0
    assert "without a reference" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--feedback", "{fb}", "uid"], r"fb.csv: row 3: label 'maybe'"),
        (["--reference-column", "nope"], "--reference-column 'nope' is not a column"),
        (["--reference", "{ref0}"], r"1 file\(s\) for 3 gateway\(s\)"),
    ],
)
def test_bad_trust_inputs_are_one_line(tmp_path, capsys, extra, match):
    train, refs = _files(tmp_path)
    fb = tmp_path / "fb.csv"
    fb.write_text("uid,label\nC0x0,attack\nC1x7,maybe\n")
    extra = [e.format(fb=fb, ref0=refs[0]) for e in extra]
    assert _fit(train, tmp_path / "m.fedep", *extra) != 0
    assert re.search(match, one_error_line(capsys))


def test_bad_reference_column_value_names_file_and_row(tmp_path, capsys):
    train, _ = _files(tmp_path)
    df = pd.read_csv(train[1])
    df["trusted"] = df["trusted"].astype(object)
    df.loc[4, "trusted"] = "perhaps"
    df.to_csv(train[1], index=False)
    assert _fit(train, tmp_path / "m.fedep", "--reference-column", "trusted") != 0
    line = one_error_line(capsys)
    assert "gw1.csv" in line and "perhaps" in line
