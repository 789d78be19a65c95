"""AlertFactory: alert content against an independent NumPy computation, the identifying
fields passed through, line numbers, bad input, recalibration and the model's identity."""

from __future__ import annotations

import json
import math
import zipfile

import numpy as np
import pandas as pd
import pytest

import fedep
from fedep.alerts import ID_FIELDS, AlertFactory, model_identity
from fedep.data import DataError

from .conftest import FEATURES


def _factory(model, **kw) -> AlertFactory:
    mid, digest = model_identity(model.det)
    return AlertFactory(model.det, model_id=mid, model_digest=digest, **kw)


def _reference(det, X: np.ndarray, client: int | None):
    """Residual energy, per-feature squared residuals and threshold, by NumPy alone."""
    V = det.components_.T if client is None else det.client_components_[client].T
    Z = (X - det.mean_) / det.scale_
    R = Z - (Z @ V) @ V.T
    sq = R**2
    thr = det.threshold_ if client is None else det.client_thresholds_[client]
    return sq.sum(axis=1), sq, thr


@pytest.mark.parametrize("gateway", ["gw1", None, "unknown-gw"])
def test_alerts_match_an_independent_computation(numeric_model, fed_data, gateway):
    det = numeric_model.det
    f = _factory(numeric_model, top_k=3)
    frame = fed_data.test[fed_data.test["host"] == "gw1"].reset_index(drop=True)
    batch = f.score(frame, gateway=gateway, source="conn.log", first_line=9)
    client = 1 if gateway == "gw1" else None
    energy, sq, thr = _reference(det, frame[FEATURES].to_numpy(), client)
    np.testing.assert_allclose(batch.scores, energy, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(batch.flagged, energy > thr)
    assert 0 < batch.flagged.sum() < len(frame)  # the test means something
    rows = np.flatnonzero(energy > thr)
    assert [a["log"]["line"] for a in batch.alerts] == (9 + rows).tolist()
    for a, i in zip(batch.alerts, rows, strict=True):
        assert a["event"] == "alert"
        assert a["score"] == pytest.approx(energy[i], rel=1e-10)
        assert a["threshold"] == pytest.approx(thr)
        z = (energy[i] - det.score_mean_) / (det.score_std_ * math.sqrt(2))
        assert a["probability"] == pytest.approx(min(max(math.erf(z), 0.0), 1.0), abs=1e-12)
        tops = a["top_features"]
        order = np.argsort(-sq[i], kind="stable")[:3]
        assert [t["feature"] for t in tops] == [FEATURES[j] for j in order]
        shares = [t["share"] for t in tops]
        assert shares == sorted(shares, reverse=True)
        np.testing.assert_allclose(shares, sq[i, order] / energy[i], rtol=1e-9)
        assert sum(shares) <= 1 + 1e-12
        assert a["gateway"] == gateway
        assert a["model"] == {"id": f.model["id"], "digest": det.file_sha256_}
        assert a["log"]["file"] == "conn.log"
    # every feature named: the shares are the whole residual energy
    every = _factory(numeric_model, top_k=len(FEATURES)).score(
        frame, gateway=gateway, source="x", first_line=1
    )
    for a in every.alerts:
        assert sum(t["share"] for t in a["top_features"]) == pytest.approx(1.0, rel=1e-9)


def test_identifying_fields_are_passed_through_as_read(numeric_model, fed_data):
    frame = fed_data.test.head(60).reset_index(drop=True)
    frame.loc[0:59, "id.resp_p"] = frame["id.resp_p"].astype(float)  # as read with a gap
    frame.loc[3, "id.resp_p"] = np.nan
    batch = _factory(numeric_model).score(
        frame, gateway="gw0", source="conn.log", first_line=2, all_records=True
    )
    assert len(batch.records) == 60
    present = [c for c in ID_FIELDS if c in frame.columns]
    for i, r in enumerate(batch.records):
        assert r["event"] == ("alert" if batch.flagged[i] else "score")
        assert list(r)[: 1 + len(present)] == ["event", *present]  # the ID_FIELDS order
        assert r["uid"] == frame.loc[i, "uid"]
        assert r["ts"] == frame.loc[i, "ts"] and isinstance(r["ts"], float)
        assert r["id.orig_h"] == frame.loc[i, "id.orig_h"]
        port = r["id.resp_p"]
        assert port is None if i == 3 else (type(port) is int and port == frame.loc[i, "id.resp_p"])
        assert r["service"] == (None if i % 2 == 0 else "http")
        assert "host" not in r and "f0" not in r  # features are not identifying fields
    json.dumps(batch.records, allow_nan=False)  # JSON-ready: plain types, no NaN
    assert batch.alerts == [r for r in batch.records if r["event"] == "alert"]


def test_client_column_gives_each_record_its_gateway(numeric_model, fed_data):
    frame = fed_data.test.reset_index(drop=True)
    f = _factory(numeric_model, client_column="host")
    assert "host" in f.needed_columns
    batch = f.score(frame, gateway="ignored", source="x", first_line=1)
    g = frame["host"].to_numpy()
    np.testing.assert_array_equal(batch.gateways, g)
    for k, gw in enumerate(["gw0", "gw1"]):
        rows = g == gw
        energy, _, thr = _reference(numeric_model.det, frame.loc[rows, FEATURES].to_numpy(), k)
        np.testing.assert_allclose(batch.scores[rows], energy, rtol=1e-10)
        np.testing.assert_array_equal(batch.thresholds[rows], thr)
    assert {a["gateway"] for a in batch.alerts} == {"gw0", "gw1"}


def test_pipeline_model_reads_columns_by_name(pipeline_model, fed_data):
    f = _factory(pipeline_model)
    frame = fed_data.test.iloc[:, ::-1].reset_index(drop=True)  # any order
    batch = f.score(frame, gateway="gw0", source="x", first_line=1)
    expected = pipeline_model.det.decision_function(
        fed_data.test.drop(columns="host"), np.full(len(frame), "gw0")
    )
    np.testing.assert_allclose(batch.scores, expected, rtol=1e-10)
    assert set(f.needed_columns) <= set(fed_data.test.columns)


def test_bad_value_is_one_error_naming_line_and_column(pipeline_model, numeric_model, fed_data):
    frame = fed_data.test.head(20).reset_index(drop=True)
    col = next(c for c in FEATURES if c in _factory(pipeline_model).needed_columns)
    frame[col] = frame[col].astype(object)
    frame.loc[7, col] = "oops"
    for model in (pipeline_model, numeric_model):
        with pytest.raises(DataError) as e:
            _factory(model).score(frame, gateway=None, source="conn.log", first_line=100)
        msg = str(e.value)
        assert "\n" not in msg and "conn.log" in msg and "line 107" in msg, msg
        assert repr(col) in msg


def test_ecs_alert_names(numeric_model, fed_data):
    frame = fed_data.test.reset_index(drop=True)
    plain = _factory(numeric_model).score(frame, gateway="gw0", source="conn.log", first_line=2)
    ecs = _factory(numeric_model, ecs=True).score(
        frame, gateway="gw0", source="conn.log", first_line=2
    )
    assert len(ecs.alerts) == len(plain.alerts) > 0
    allowed = {
        "@timestamp", "ecs", "event", "source", "destination", "network", "zeek",
        "observer", "rule", "log", "fedep",
    }  # fmt: skip
    for a, e in zip(plain.alerts, ecs.alerts, strict=True):
        assert set(e) <= allowed, set(e) - allowed
        assert e["event"]["kind"] == "alert" and e["event"]["module"] == "fedep"
        assert e["@timestamp"].endswith("Z")
        ts = pd.Timestamp(e["@timestamp"]).timestamp()
        assert ts == pytest.approx(a["ts"], abs=1e-6)
        assert e["zeek"]["session_id"] == a["uid"]
        assert e["source"] == {"ip": a["id.orig_h"], "port": a["id.orig_p"]}
        assert e["destination"] == {"ip": a["id.resp_h"], "port": a["id.resp_p"]}
        assert e["network"]["transport"] == "tcp"
        assert e["network"].get("protocol") == a["service"]  # absent when unset
        assert e["event"]["risk_score"] == a["score"]
        assert e["event"]["risk_score_norm"] == pytest.approx(100 * a["probability"])
        assert e["observer"]["name"] == "gw0"
        assert e["rule"]["id"] == a["model"]["id"]
        assert e["rule"]["version"] == a["model"]["digest"]
        assert e["log"]["file"]["path"] == "conn.log"
        assert e["fedep"]["log"] == {"line": a["log"]["line"]}
        for k in ("score", "threshold", "probability", "top_features", "gateway", "model"):
            assert e["fedep"][k] == a[k]


def test_ecs_of_other_exporters_fields(numeric_model, fed_data):
    frame = fed_data.test.head(40)[FEATURES].reset_index(drop=True)
    frame["Src IP"] = "10.1.1.1"
    frame["Dst Port"] = 443.0
    frame["Protocol"] = 6
    frame["Flow ID"] = "10.1.1.1-10.2.2.2-1-443-6"
    f = _factory(numeric_model, ecs=True, threshold=-1.0)  # every record an alert
    e = f.score(frame, gateway=None, source="x.csv", first_line=2).alerts[0]
    assert e["source"]["ip"] == "10.1.1.1"
    assert e["destination"]["port"] == 443 and type(e["destination"]["port"]) is int
    assert e["network"]["iana_number"] == "6"
    assert e["fedep"]["record"] == {"Flow ID": "10.1.1.1-10.2.2.2-1-443-6"}
    assert "@timestamp" not in e and "observer" not in e


def test_recalibrate_sets_the_quantile_and_says_so(numeric_model, fed_data):
    f = _factory(numeric_model)
    frame = fed_data.test.reset_index(drop=True)
    before = f.score(frame, gateway=None, source="x", first_line=1)
    event = f.recalibrate(before.scores, 0.1)
    new = float(np.quantile(before.scores, 0.9))
    assert event == {
        "event": "threshold_changed",
        "old": pytest.approx(numeric_model.det.threshold_),
        "new": pytest.approx(new),
        "n_scores": len(frame),
        "target_rate": 0.1,
        "share_above_old": pytest.approx(float(np.mean(before.scores > f.det.threshold_))),
        "model": f.model,
    }
    assert f.threshold == pytest.approx(new)
    after = f.score(frame, gateway="gw1", source="x", first_line=1)  # one threshold for all
    np.testing.assert_array_equal(after.flagged, before.scores > new)
    assert after.flagged.mean() == pytest.approx(0.1, abs=1.5 / len(frame))
    assert all(a["threshold"] == pytest.approx(new) for a in after.alerts)
    ecs = _factory(numeric_model, ecs=True).recalibrate(before.scores, 0.1)
    assert ecs["event"]["kind"] == "event" and ecs["event"]["action"] == "threshold_changed"
    assert ecs["fedep"]["new"] == pytest.approx(new)
    for bad in ([], [np.nan]):
        with pytest.raises(ValueError, match="finite recent score"):
            f.recalibrate(np.asarray(bad, float), 0.1)
    with pytest.raises(ValueError, match="target_rate"):
        f.recalibrate(before.scores, 1.0)


def test_model_identity_is_the_files_verified_digest(numeric_model):
    with zipfile.ZipFile(numeric_model.path) as zf:
        envelope = json.loads(zf.read("__meta__.json"))
    mid, digest = model_identity(numeric_model.det)
    assert digest == envelope["sha256"] and len(digest) == 64
    assert mid == "fedep-" + digest[:12]
    again = fedep.load(numeric_model.path)
    assert model_identity(again) == (mid, digest)  # stable
    fresh = fedep.PooledPCA(n_components=1, features="numeric").fit(
        np.random.default_rng(0).normal(size=(30, 3))
    )
    with pytest.raises(ValueError, match="not loaded from a model file"):
        model_identity(fresh)


def test_empty_frame_and_bad_arguments(numeric_model, fed_data):
    f = _factory(numeric_model)
    b = f.score(fed_data.test.head(0), gateway=None, source="x", first_line=1)
    assert b.n_records == 0 and b.alerts == [] and b.scores.shape == (0,)
    with pytest.raises(ValueError, match="top_k"):
        _factory(numeric_model, top_k=-1)
    with pytest.raises(ValueError, match="threshold"):
        _factory(numeric_model, threshold=float("nan"))
    with pytest.raises(DataError, match="client column 'gw'"):
        _factory(numeric_model, client_column="gw").score(
            fed_data.test, gateway=None, source="x", first_line=1
        )


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_an_overflowing_score_is_flagged_and_written_as_null(numeric_model, fed_data):
    frame = fed_data.test.head(10).reset_index(drop=True)
    frame.loc[4, "f2"] = 1e200  # squared: beyond float64
    b = _factory(numeric_model).score(frame, gateway=None, source="x", first_line=2)
    assert np.isinf(b.scores[4]) and b.flagged[4]
    a = next(a for a in b.alerts if a["log"]["line"] == 6)
    assert a["score"] is None and a["probability"] == 1.0
    json.dumps(b.alerts, allow_nan=False)  # still JSON
