"""Gateways that refuse unsigned or altered server messages (global model included)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

import fedep  # noqa: E402
from fedep.flower import run_local  # noqa: E402
from fedep.flower.messages import content_digest  # noqa: E402
from fedep.modelfile import generate_signing_key  # noqa: E402

SECRET = "hmac:" + "s" * 32
RC = {"n-components": 2, "n-rounds": 3, "tol": 0.0, "random-state": 0}


@pytest.fixture(autouse=True)
def _flower_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))


def _gateways(tmp_path, key=None, d=3):
    cfgs = []
    for i in range(d):
        c = {"partition-id": i, "synthetic-seed": 2, "model-path": str(tmp_path / f"g{i}.fedep")}
        if key is not None:
            c["verify-key"] = key
        cfgs.append(c)
    return cfgs


def test_signed_run_equals_the_plain_run(tmp_path):
    plain, _ = run_local(_gateways(tmp_path / "a"), RC)
    signed, grid = run_local(_gateways(tmp_path / "b", SECRET), {**RC, "sign-key": SECRET})
    assert signed.failed == {} and signed.finalized == ["0", "1", "2"]
    np.testing.assert_array_equal(signed.V, plain.V)
    m = fedep.load(tmp_path / "b" / "g0.fedep")
    assert m.n_iter_ == 3


def test_unsigned_or_other_key_is_refused(tmp_path):
    res, _ = run_local(_gateways(tmp_path / "a", SECRET)[:2] + _gateways(tmp_path / "a")[2:], RC)
    # The two gateways that verify refuse the first (unsigned) message, before they are
    # known by label; the third runs.
    assert len(res.failed) == 2
    assert all("not signed" in why for why in res.failed.values())
    assert res.clients == ["2"]
    generate_signing_key(tmp_path / "k.pem", tmp_path / "k.pub")
    generate_signing_key(tmp_path / "o.pem", tmp_path / "o.pub")
    res, _ = (
        run_local(
            _gateways(tmp_path / "b", str(tmp_path / "o.pub"), d=2),
            {**RC, "sign-key": str(tmp_path / "k.pem"), "min-clients": 1},
        )
        if False
        else (None, None)
    )
    with pytest.raises(RuntimeError, match="does not verify"):
        run_local(
            _gateways(tmp_path / "b", str(tmp_path / "o.pub"), d=2),
            {**RC, "sign-key": str(tmp_path / "k.pem")},
        )
    ok, _ = run_local(
        _gateways(tmp_path / "c", str(tmp_path / "k.pub"), d=2),
        {**RC, "sign-key": str(tmp_path / "k.pem")},
    )
    assert ok.failed == {} and ok.n_rounds == 3


def test_digest_covers_every_record_and_the_message_type():
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    from fedep.flower.messages import to_array_record

    def content(v):
        return RecordDict({"global": to_array_record(V=v), "round": ConfigRecord({"round": 1})})

    V = np.eye(4, 2)
    base = content_digest(content(V), "train", "1")
    V2 = V.copy()
    V2[0, 0] = np.nextafter(1.0, 2.0)
    assert content_digest(content(V2), "train", "1") != base
    assert content_digest(content(V), "train", "2") != base
    assert content_digest(content(V), "evaluate.finalize", "1") != base
    c = content(V)
    c["round"] = ConfigRecord({"round": 2})
    assert content_digest(c, "train", "1") != base
    assert isinstance(content(V)["global"], ArrayRecord)
