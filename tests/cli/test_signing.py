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


KEY = "hmac:" + "e" * 32


def _strip_signature(src, dst):
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if info.filename != "__signature__.json":
                zout.writestr(info, zin.read(info))


def test_keys_from_the_environment_sign_and_verify(table, tmp_path, capsys, monkeypatch):
    # fit signs by default with FEDEP_SIGNING_KEY; score verifies with it, quietly.
    monkeypatch.setenv("FEDEP_SIGNING_KEY", KEY)
    model = tmp_path / "m.fedep"
    assert _fit(table, model) == 0
    from fedep.modelfile.readwrite import signature_scheme

    assert signature_scheme(model) == "hmac-sha256"
    score = ["score", "--model", str(model), "--input", str(table), "--output",
             str(tmp_path / "s.csv"), "--quiet"]  # fmt: skip
    capsys.readouterr()
    assert main(score) == 0
    assert "NOT" not in capsys.readouterr().err
    # The signature stripped off (the digest still holds): refused with a key configured.
    stripped = tmp_path / "stripped.fedep"
    _strip_signature(model, stripped)
    assert main([*score[:2], str(stripped), *score[3:]]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not signed" in err[0]
    # --no-sign writes it unsigned even with the key set.
    plain = tmp_path / "p.fedep"
    assert _fit(table, plain, "--no-sign") == 0
    assert signature_scheme(plain) is None


def test_unsigned_models_are_announced_and_can_be_required(table, tmp_path, capsys, monkeypatch):
    for var in ("FEDEP_SIGNING_KEY", "FEDEP_VERIFY_KEY", "FEDEP_REQUIRE_SIGNATURE"):
        monkeypatch.delenv(var, raising=False)
    plain, signed = tmp_path / "p.fedep", tmp_path / "s.fedep"
    assert _fit(table, plain) == 0
    assert _fit(table, signed, "--sign-key", KEY) == 0
    ev = ["evaluate", "--test", str(table), "--label-column", "label", "--model"]
    capsys.readouterr()
    assert main([*ev, str(plain)]) == 0
    warn = [x for x in capsys.readouterr().err.splitlines() if "warning: model" in x]
    assert len(warn) == 1 and "NOT SIGNED" in warn[0] and str(plain) in warn[0]
    assert main([*ev, str(signed)]) == 0
    warn = [x for x in capsys.readouterr().err.splitlines() if "warning: model" in x]
    assert len(warn) == 1 and "NOT VERIFIED" in warn[0]
    # Required (option or environment) without a key: a usage error, one line.
    assert main([*ev, str(plain), "--require-signature"]) == 1
    assert "no key is configured" in capsys.readouterr().err
    monkeypatch.setenv("FEDEP_REQUIRE_SIGNATURE", "1")
    monkeypatch.setenv("FEDEP_VERIFY_KEY", KEY)
    assert main([*ev, str(plain)]) == 1
    assert "not signed" in capsys.readouterr().err
    assert main([*ev, str(signed)]) == 0
