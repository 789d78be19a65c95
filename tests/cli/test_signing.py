"""Signed model files from the command line: fit --sign-key, score/evaluate --verify-key."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedep.cli import main
from fedep.modelfile import generate_signing_key


@pytest.fixture
def table(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(5)])
    df["label"] = (rng.random(300) < 0.1).astype(int)
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    return path


def _fit(table, out, *extra):
    return main(["fit", "--train", str(table), "--label-column", "label", "--method", "pca",
                 "--n-components", "2", "--out", str(out), "--quiet", *extra])  # fmt: skip


@pytest.mark.parametrize("scheme", ["hmac", "ed25519"])
def test_signed_round_trip_and_refusals(table, tmp_path, capsys, scheme):
    if scheme == "hmac":
        sign = verify = "hmac:" + "k" * 32
        wrong = "hmac:" + "x" * 32
    else:
        generate_signing_key(tmp_path / "k.pem", tmp_path / "k.pub")
        generate_signing_key(tmp_path / "o.pem", tmp_path / "o.pub")
        sign, verify, wrong = (
            str(tmp_path / "k.pem"),
            str(tmp_path / "k.pub"),
            str(tmp_path / "o.pub"),
        )
    model = tmp_path / "m.fedep"
    assert _fit(table, model, "--sign-key", sign) == 0
    out = tmp_path / "s.csv"
    score = ["score", "--model", str(model), "--input", str(table), "--output", str(out)]
    assert main([*score, "--verify-key", verify, "--quiet"]) == 0
    assert out.exists()
    capsys.readouterr()
    assert main([*score, "--verify-key", wrong]) == 1
    err = capsys.readouterr().err.strip()
    assert "signature" in err and len(err.splitlines()) == 1
    # An unsigned model is refused when a key is given.
    plain = tmp_path / "p.fedep"
    assert _fit(table, plain) == 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(plain), "--test", str(table), "--label-column",
                 "label", "--verify-key", verify]) == 1  # fmt: skip
    assert "not signed" in capsys.readouterr().err


def test_missing_key_file_is_found_before_training(table, tmp_path, capsys):
    assert _fit(table, tmp_path / "m.fedep", "--sign-key", str(tmp_path / "nope.pem")) == 1
    err = capsys.readouterr().err
    assert "nope.pem" in err and not (tmp_path / "m.fedep").exists()
