"""Raw flow tables over Flower: the feature pipeline fitted by the federation itself.

The same three gateway files (two CSVs with text columns, one Zeek conn log) go
through the in-process estimator (``FedEP().fit(concatenated frame, groups=...)``) and
through the Flower apps (``run_local``): same column decisions, same pipeline scaling,
same global basis; a gateway's model file carries the pipeline and scores raw frames
like the in-process model. No message carries a record.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from _zeek import write_zeek

pytest.importorskip("flwr")

from fedep import load  # noqa: E402
from fedep.core.stiefel import projector_distance  # noqa: E402
from fedep.data import read_table  # noqa: E402
from fedep.detectors import FedEP  # noqa: E402
from fedep.features import FeaturePipeline  # noqa: E402
from fedep.federation.rounds import FederationResult  # noqa: E402
from fedep.flower import run_local  # noqa: E402
from fedep.flower.gateway_data import load_gateway_table  # noqa: E402

RUN = {"n-components": 2, "n-rounds": 4, "tol": 0.0, "random-state": 0}
LABELS = ["a", "b", "c"]
ZEEK_FIELDS = ["ts", "uid", "proto", "conn_state", "duration", "orig_bytes", "resp_bytes"]
ZEEK_TYPES = ["time", "string", "enum", "string", "interval", "count", "count"]


@pytest.fixture(autouse=True)
def _flower_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))


def _flows(seed: int, n: int, shift: float = 0.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    size = rng.lognormal(6.0 + shift, 2.0, n)  # heavy tails spanning decades
    alnum = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"))
    return pd.DataFrame(
        {
            "ts": 1.7e9 + np.sort(rng.uniform(0, 86400, n)).round(6),
            "uid": ["C" + "".join(rng.choice(alnum, 17)) for _ in range(n)],
            "proto": rng.choice(["tcp", "udp", "icmp"], n, p=[0.6, 0.3, 0.1]),
            "conn_state": rng.choice(["SF", "S0", "REJ", "RSTO", "OTH"], n),
            "duration": rng.exponential(2.0, n).round(6),
            "orig_bytes": np.floor(size).astype(np.int64),
            "resp_bytes": np.floor(size * rng.lognormal(0.5, 1.0, n)).astype(np.int64),
        }
    )


def _gateway_files(tmp_path, rows=(300, 320, 340)):
    """a: CSV with an attack-labelled column; b: CSV without ``duration``; c: Zeek log."""
    a = _flows(1, rows[0])
    a["label"] = np.where(np.arange(rows[0]) % 15 == 0, "attack", "normal")
    a.to_csv(tmp_path / "a.csv", index=False)
    _flows(2, rows[1], shift=0.5).drop(columns=["duration"]).to_csv(tmp_path / "b.csv", index=False)
    c = _flows(3, rows[2], shift=-0.3)
    c.loc[c.index % 7 == 0, "duration"] = np.nan  # unset in the log
    write_zeek(c, tmp_path / "c.log", fields=ZEEK_FIELDS, types=ZEEK_TYPES)
    cfgs = [
        {
            "data-path": str(tmp_path / "a.csv"),
            "client-label": "a",
            "label-column": "label",
            "normal-label": "normal",
        },
        {"data-path": str(tmp_path / "b.csv"), "client-label": "b"},
        {"data-path": str(tmp_path / "c.log"), "client-label": "c"},
    ]
    for c in cfgs:
        c["model-path"] = str(tmp_path / f"gw-{c['client-label']}.fedep")
    return cfgs


def _inprocess(cfgs):
    """The in-process reference: the gateways' tables concatenated, one group each."""
    frames = [load_gateway_table(c)[0] for c in cfgs]
    df = pd.concat(frames, ignore_index=True, sort=False)
    groups = np.repeat(LABELS, [len(f) for f in frames])
    det = FedEP(n_components=2, n_rounds=4, tol=0.0, random_state=0).fit(df, groups=groups)
    return det, frames


def test_gateway_tables_read_with_labels_dropped(tmp_path):
    cfgs = _gateway_files(tmp_path)
    df, label = load_gateway_table(cfgs[0])
    assert label == "a" and "label" not in df.columns and len(df) == 300 - 20
    z, _ = load_gateway_table(cfgs[2])
    assert list(z.columns) == ZEEK_FIELDS and z["duration"].isna().sum() == 49
    assert pd.api.types.is_string_dtype(z["proto"].dtype)


def test_pipeline_and_model_identical_in_process_and_over_flower(tmp_path):
    cfgs = _gateway_files(tmp_path)
    res, grid = run_local(cfgs[::-1], {**RUN, "result-path": str(tmp_path / "result.json")})
    det, frames = _inprocess(cfgs)
    assert res.clients == LABELS and res.finalized == LABELS and not res.failed

    # The pipeline's decisions, identical (kinds, actions, vocabularies, imputation).
    fl = FeaturePipeline.from_dict(res.features)
    want = [d.to_dict() for d in det.features_.decisions_]
    assert [d.to_dict() for d in fl.decisions_] == want
    kinds = {d.name: (d.kind, d.action) for d in fl.decisions_}
    assert kinds["ts"][1] == kinds["uid"][1] == "drop"
    assert kinds["proto"] == ("categorical", "one-hot")
    assert kinds["orig_bytes"][1] == "log1p"
    # ``duration`` (absent from b's file) is decided as on the concatenated frame:
    # all missing at b, imputed there with a missing-indicator feature.
    assert "duration_missing" in fl.get_feature_names_out()
    np.testing.assert_array_equal(fl.get_feature_names_out(), det.feature_names_out_)
    # ... its scaling, and the estimator's own standardisation off (mean 0, scale 1).
    np.testing.assert_allclose(fl.mean_, det.features_.mean_, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fl.scale_, det.features_.scale_, rtol=1e-12, atol=1e-12)
    assert not res.mean.any() and (res.scale == 1).all() and not det.mean_.any()
    # The global basis.
    assert res.n_rounds == det.n_iter_ == 4
    assert projector_distance(res.components.T, det.components_.T) <= 1e-8
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["features"] == json.loads(json.dumps(res.features))
    assert FederationResult.from_json(saved).n_rounds == 4

    # Each gateway's model file carries the pipeline and scores raw frames like the
    # in-process model with that gateway's group (unseen categories included).
    new = frames[0].head(40).copy()
    new.loc[new.index[:5], "proto"] = "sctp"  # never seen at fit
    new.loc[new.index[5:9], "conn_state"] = "S3"
    for lab, f in zip(LABELS, [new, frames[1].assign(duration=np.nan), frames[2]], strict=True):
        m = load(tmp_path / f"gw-{lab}.fedep")
        assert m.clients_.tolist() == [lab]
        assert [d.to_dict() for d in m.features_.decisions_] == want
        assert projector_distance(m.components_.T, det.components_.T) <= 1e-8
        i = LABELS.index(lab)
        assert projector_distance(m.client_components_[0].T, det.client_components_[i].T) <= 1e-8
        g = np.full(len(f), lab)
        np.testing.assert_allclose(
            m.decision_function(f, groups=g), det.decision_function(f, groups=g), rtol=1e-6
        )
        np.testing.assert_allclose(
            m.decision_function(f), det.decision_function(f), rtol=1e-6, atol=1e-12
        )

    # Message types, in order of the run.
    seen = []
    for _, msg in grid.sent:
        if msg.metadata.message_type not in seen:
            seen.append(msg.metadata.message_type)
    assert seen == [
        "query.moments",
        "query.summaries",
        "query.feature_moments",
        "train.setup",
        "train",
        "evaluate.finalize",
    ]
    assert {"summaries_sent", "feature_moments_received"} <= set(res.setup_bytes["b"])
    # The encoded features' moments are asked once: the outputs' follow from them, and
    # the second query.moments (the fitted pipeline) is answered by the count alone.
    second = [m for _, m in grid.sent if m.metadata.message_type == "query.moments"][3:]
    assert len(second) == 3 and not any("moments" in m.content for m in second)
    n_out = len(fl.get_feature_names_out())
    assert {m.content["count"]["n-features"] for m in second} == {n_out}
    assert sorted(m.content["count"]["count"] for m in second) == sorted(map(len, frames))


def _summary_replies(grid):
    label_of = {nid: str(ctx.node_config["client-label"]) for nid, ctx in grid.contexts.items()}
    return {
        label_of[nid]: msg
        for nid, msg in grid.sent
        if msg.metadata.message_type == "query.summaries"
    }


def test_no_message_carries_a_record(tmp_path):
    small = tmp_path / "small"
    big = tmp_path / "big"
    small.mkdir()
    big.mkdir()
    cfgs = _gateway_files(small)
    res, grid = run_local(cfgs, {**RUN, "n-rounds": 1})
    frames = {lab: load_gateway_table(c)[0] for lab, c in zip(LABELS, cfgs, strict=True)}
    n_out = len(res.features["decisions"])
    for nid, msg in grid.sent:
        lab = str(grid.contexts[nid].node_config["client-label"])
        n_rows = len(frames[lab])
        for rec in msg.content.array_records.values():
            for name, arr in rec.items():
                assert n_rows not in arr.numpy().shape, (msg.metadata.message_type, name)
        for rec in msg.content.metric_records.values():
            assert all(np.ndim(v) == 0 for v in rec.values())
        if msg.metadata.message_type != "query.summaries":
            for rec in msg.content.config_records.values():
                assert all(not isinstance(v, str) or len(v) < 64 for v in rec.values())
    assert n_out >= 7
    # A summary is a bounded number of values per column, whatever the gateway's rows:
    # at most 256 top categories (values with their counts, the rest counted in
    # ``other_count``), 256 distinct-count hashes, 32 sketch bins per decade. Columns
    # are summarised one by one: no record (the values of one row together) is sent.
    summaries = _summary_replies(grid)
    for lab, msg in summaries.items():
        data = json.loads(str(msg.content["summary"]["json"]))
        assert data["n_rows"] == len(frames[lab]) > 256
        for col in data["columns"]:
            assert len(col["top_keys"]) <= 256 and len(col["distinct_hashes"]) <= 256
            for k in ("pos_bins", "neg_bins"):
                assert len(col["sketch"][k]) <= 32 * 12
    # Four times the rows: summaries of about the same size.
    _gateway_files(big, rows=(1200, 1280, 1360))
    cfgs_big = [
        {**c, "data-path": c["data-path"].replace(str(small), str(big)), "model-path": ""}
        for c in cfgs
    ]
    _, grid_big = run_local(cfgs_big, {**RUN, "n-rounds": 1})
    big_msgs = _summary_replies(grid_big)
    for lab, msg in summaries.items():
        n_small = len(msg.content["summary"]["json"])
        n_big = len(big_msgs[lab].content["summary"]["json"])
        assert n_big < 1.25 * n_small, (lab, n_small, n_big)


def test_numeric_and_table_gateways_are_not_mixed(tmp_path):
    cfgs = _gateway_files(tmp_path)[:2] + [{"partition-id": 0, "synthetic-seed": 1}]
    with pytest.raises(RuntimeError, match=r"gateways a, b hold raw tables.*gateways 0 hold"):
        run_local(cfgs, RUN)


def test_numeric_features_read_the_table_as_numbers(tmp_path):
    # features="numeric": the numeric columns of the file, z-scored as before (no pipeline).
    num = tmp_path / "num.csv"
    _flows(5, 200)[["duration", "orig_bytes", "resp_bytes"]].to_csv(num, index=False)
    res, grid = run_local([{"data-path": str(num)}], {**RUN, "features": "numeric"})
    assert res.features is None and res.clients == ["num"]
    assert {m.metadata.message_type for _, m in grid.sent} == {
        "query.moments",
        "train.setup",
        "train",
        "evaluate.finalize",
    }
    res, _ = run_local([{"data-path": str(num)}], RUN)  # auto: through the pipeline
    assert res.features is not None and not res.mean.any()


def test_read_table_formats(tmp_path):
    # Parquet goes through the same gateway reader (any read_table format).
    pytest.importorskip("pyarrow")
    df = _flows(4, 50)
    df.to_parquet(tmp_path / "p.parquet")
    got, label = load_gateway_table({"data-path": str(tmp_path / "p.parquet")})
    assert label == "p" and len(got) == 50 and list(got.columns) == list(df.columns)
    assert read_table(tmp_path / "p.parquet").shape == got.shape


def test_a_gateway_whose_values_cannot_be_encoded_is_named_and_left_out(tmp_path):
    cfgs = _gateway_files(tmp_path)
    b = pd.read_csv(tmp_path / "b.csv")
    b["resp_bytes"] = b["resp_bytes"].astype(object)
    b.loc[3, "resp_bytes"] = "lots"  # one junk value in a numeric column
    b.to_csv(tmp_path / "b.csv", index=False)
    res, _ = run_local(cfgs, {**RUN, "n-rounds": 1})
    assert res.clients == ["a", "c"] and res.finalized == ["a", "c"]
    why = res.failed["b"]
    assert why.startswith("feature-moments: error 100: gateway data: ") and "b.csv" in why
    assert "'resp_bytes'" in why and "'lots'" in why


def test_automatic_rank_from_raw_tables_matches_in_process(tmp_path):
    # n-components unset: each gateway's Gram matrix of its encoded, scaled table.
    cfgs = _gateway_files(tmp_path)
    rc = {k: v for k, v in RUN.items() if k != "n-components"}
    res, _ = run_local(cfgs, rc)
    frames = [load_gateway_table(c)[0] for c in cfgs]
    df = pd.concat(frames, ignore_index=True, sort=False)
    groups = np.repeat(LABELS, [len(f) for f in frames])
    det = FedEP(n_rounds=4, tol=0.0, random_state=0).fit(df, groups=groups)
    assert res.rank_reason == det.rank_reason_ and "non-degenerate" in det.rank_reason_
    assert res.components.shape == det.components_.shape
    assert projector_distance(res.components.T, det.components_.T) <= 1e-8
    m = load(cfgs[1]["model-path"])
    assert (m.n_components_, m.rank_reason_) == (det.n_components_, det.rank_reason_)


def test_pipeline_options_reach_the_federation(tmp_path):
    # Run-config keys of the pipeline (derived from its parameters) change the
    # decisions and the scaling exactly as the same FeaturePipeline in-process.
    cfgs = _gateway_files(tmp_path)
    opts = {
        "exclude": "conn_state,duration",
        "scale-rule": "shrink",
        "scale-floor": 0.3,
        "numeric-transform": "quantile",
    }
    res, _ = run_local(cfgs, {**RUN, **opts})
    frames = [load_gateway_table(c)[0] for c in cfgs]
    df = pd.concat(frames, ignore_index=True, sort=False)
    groups = np.repeat(LABELS, [len(f) for f in frames])
    pipe = FeaturePipeline(
        exclude=["conn_state", "duration"],
        scale_rule="shrink",
        scale_floor=0.3,
        numeric_transform="quantile",
    )
    det = FedEP(n_components=2, n_rounds=4, tol=0.0, random_state=0, features=pipe)
    det.fit(df, groups=groups)
    fl = FeaturePipeline.from_dict(res.features)
    acts = {d.name: d.action for d in fl.decisions_}
    assert acts["conn_state"] == acts["duration"] == "drop"
    assert acts["orig_bytes"] == "normal-score"  # knots from the merged sketches
    assert [d.to_dict() for d in fl.decisions_] == [d.to_dict() for d in det.features_.decisions_]
    np.testing.assert_allclose(fl.scale_, det.features_.scale_, rtol=1e-12, atol=1e-12)
    assert projector_distance(res.components.T, det.components_.T) <= 1e-8


def test_bad_pipeline_option_is_refused_before_any_round(tmp_path):
    cfgs = _gateway_files(tmp_path)
    with pytest.raises(ValueError, match="scale_rule"):
        run_local(cfgs, {**RUN, "scale-rule": "bogus"})
    with pytest.raises(ValueError, match="need features 'auto'"):
        run_local(cfgs, {**RUN, "features": "numeric", "include": "ts"})


def test_gateway_checks_the_servers_pipeline():
    # a malformed (or hostile) pipeline in a server message fails the reply with one
    # line naming the field, before any record is encoded with it
    from fedep.flower.client_app import _pipeline

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x": rng.normal(size=50), "p": np.where(np.arange(50) % 2, "a", "b")})
    good = FeaturePipeline().fit(df).to_dict()
    assert _pipeline(json.loads(json.dumps(good))).get_feature_names_out().size > 0
    bad = json.loads(json.dumps(good))
    bad["decisions"][1]["vocabulary"] = "ab"
    with pytest.raises(ValueError, match=r"^feature pipeline from the server: .*vocabulary"):
        _pipeline(bad)


def test_a_gateway_of_another_summary_version_is_named(tmp_path, monkeypatch):
    # a gateway still on version-1 summaries (numbers hashed by their text) cannot be
    # merged with the others: it is left out, named, not merged with wrong counts
    from fedep.features.summaries import ColumnSummaries

    cfgs = _gateway_files(tmp_path)
    to_dict = ColumnSummaries.to_dict

    def old_for_b(self):
        d = to_dict(self)
        if not any(c["name"] == "duration" for c in d["columns"]):  # b's file lacks it
            d["version"] = 1
        return d

    monkeypatch.setattr(ColumnSummaries, "to_dict", old_for_b)
    res, _ = run_local(cfgs, {**RUN, "n-rounds": 1})
    assert "b" not in res.clients
    assert res.failed["b"].startswith("summaries: malformed summaries reply: not a version-2")
