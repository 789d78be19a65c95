"""Estimators on DataFrames: the federated feature pipeline (``features``), its fitted
state (``features_``, feature names in / out), scoring by column name, and model files."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import ConvergenceWarning

import fedep
from fedep import FedEP, FedPG, LocalPCA, OneShotPCA, PooledPCA
from fedep.features import FeatureError, FeaturePipeline
from fedep.modelfile import ModelFileError, read_model_file, write_model_file

ALL = [FedEP, FedPG, PooledPCA, LocalPCA, OneShotPCA]


def _flows(n, seed, attack_rate=0.0):
    rng = np.random.default_rng(seed)
    label = (rng.random(n) < attack_rate).astype(int)
    orig = np.round(rng.lognormal(6.0, 2.0, n))
    resp = np.round(orig * rng.lognormal(1.5, 0.7, n))
    state = rng.choice(["SF", "S0", "REJ", "RSTO"], n, p=[0.8, 0.1, 0.09, 0.01])
    proto = rng.choice(["tcp", "udp"], n, p=[0.7, 0.3])
    a = label == 1
    orig[a], resp[a], state[a], proto[a] = (
        np.round(rng.lognormal(11, 0.3, a.sum())),
        0,
        "RSTO",
        "tcp",
    )
    return pd.DataFrame(
        {
            "ts": 1.7e9 + np.sort(rng.uniform(0, 86400, n)),
            "uid": [f"C{v:016x}" for v in rng.integers(0, 2**62, n)],
            "proto": proto,
            "conn_state": state,
            "orig_bytes": orig,
            "resp_bytes": resp,
        }
    ), label


@pytest.fixture(scope="module")
def flows():
    parts = [_flows(300, s)[0] for s in (1, 2, 3)]
    X = pd.concat(parts, ignore_index=True)
    groups = np.repeat(["gw1", "gw2", "gw3"], 300)
    test, y = _flows(400, 9, attack_rate=0.1)
    return X, groups, test, y


def _est(cls, **kw):
    extra = {"n_rounds": 20, "tol": 0.0} if cls in (FedEP, FedPG) else {}
    return cls(n_components=3, random_state=0, **extra, **kw)


def _fit(det, X, groups):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return det.fit(X, groups=groups)


@pytest.mark.parametrize("cls", ALL)
def test_dataframe_goes_through_the_pipeline(cls, flows):
    X, groups, test, y = flows
    det = _fit(_est(cls), X, groups)
    pipe = det.features_
    assert list(det.feature_names_in_) == list(X.columns)
    assert det.n_features_in_ == X.shape[1]
    assert list(det.feature_names_out_) == list(pipe.get_feature_names_out())
    assert det.components_.shape == (3, len(det.feature_names_out_))
    assert "ts" not in det.feature_names_out_ and "uid" not in det.feature_names_out_
    # the pipeline's own federated scaling replaces the estimator's
    assert np.all(det.mean_ == 0) and np.all(det.scale_ == 1)
    # fitted per gateway without pooling rows: the same as FeaturePipeline.fit(groups=)
    assert pipe.to_dict() == FeaturePipeline().fit(X, groups=groups).to_dict()
    s = det.decision_function(test)
    C = det.feature_contributions(test)
    assert C.shape == (len(test), len(det.feature_names_out_))
    np.testing.assert_allclose(C.sum(1), s)
    from sklearn.metrics import roc_auc_score

    assert roc_auc_score(y, s) > 0.9


def test_raw_z_scores_do_worse():
    """The issue: z-scores of raw heavy-tailed counts (and timestamps, ports) rank the
    attacks poorly; the pipeline's log1p / one-hot / drops rank them almost perfectly."""
    from sklearn.metrics import roc_auc_score

    from _zeek import flows

    train = pd.concat([flows(600, seed=s) for s in (1, 2, 3)], ignore_index=True)
    groups = np.repeat(["gw1", "gw2", "gw3"], 600)
    test = flows(600, seed=9, attack_rate=0.1, t0=1.7e9 + 86400)
    X, y = train.drop(columns="label"), test.pop("label").to_numpy()
    num = ["ts", "id.resp_p", "duration", "orig_bytes", "resp_bytes"]
    auto = _fit(FedEP(random_state=0, n_rounds=40), X, groups)
    raw = _fit(FedEP(features="numeric", random_state=0, n_rounds=40), X[num], groups)
    assert not hasattr(raw, "features_")
    a = roc_auc_score(y, auto.decision_function(test))
    r = roc_auc_score(y, raw.decision_function(test[num]))
    assert a > 0.9 and r < a - 0.1


def test_ndarray_path_is_unchanged(flows):
    X, groups, _, _ = flows
    A = X[["orig_bytes", "resp_bytes", "ts"]].to_numpy()
    a = _fit(_est(FedEP), A, groups)
    b = _fit(_est(FedEP, features="numeric"), A, groups)
    c = _fit(_est(FedEP, features="numeric"), pd.DataFrame(A, columns=list("abc")), groups)
    for det in (a, b, c):
        assert not hasattr(det, "features_")
    assert not hasattr(a, "feature_names_out_")
    assert list(c.feature_names_out_) == list("abc")
    for name in ("components_", "mean_", "scale_", "client_components_"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        np.testing.assert_array_equal(getattr(a, name), getattr(c, name))
    # refitting on an array drops the pipeline state of an earlier DataFrame fit
    d = _fit(_est(FedEP), X, groups)
    _fit(d, A, groups)
    assert not hasattr(d, "features_") and not hasattr(d, "feature_names_in_")


def test_scoring_by_column_name(flows):
    X, groups, test, _ = flows
    det = _fit(_est(PooledPCA), X, groups)
    s = det.decision_function(test)
    shuffled = test[test.columns[::-1]].assign(extra="x")
    np.testing.assert_array_equal(det.decision_function(shuffled), s)
    assert det.features_.last_ignored_columns_ == ["extra"]
    np.testing.assert_array_equal(det.decision_function(test.to_numpy(dtype=object)), s)
    with pytest.raises(FeatureError, match="'orig_bytes'"):
        det.decision_function(test.drop(columns=["orig_bytes"]))
    with pytest.raises(ValueError, match="expecting 6 features"):
        det.decision_function(test.to_numpy(dtype=object)[:, :4])
    unseen = test.assign(proto="icmp")
    Z = det.features_.encode(unseen)
    assert (Z[:, list(det.feature_names_out_).index("proto=<other>")] == 1).all()
    assert np.isfinite(det.decision_function(unseen)).all()


def test_feature_pipeline_instance_as_parameter(flows):
    X, groups, _, _ = flows
    param = FeaturePipeline(exclude=["resp_bytes"], categorical=["conn_state"])
    det = _fit(_est(FedEP, features=param), X, groups)
    assert det.features_ is not param and not hasattr(param, "decisions_")  # cloned
    assert "resp_bytes" not in det.feature_names_out_
    assert det.get_params()["features__exclude"] == ["resp_bytes"]
    from sklearn.base import clone

    assert clone(det).get_params()["features"].exclude == ["resp_bytes"]


def test_features_on_the_parameter_table():
    from fedep.detectors import detector_param_table
    from fedep.params import _metavar, parse_value

    spec = detector_param_table()["features"]
    assert set(spec.estimators) == {c.__name__ for c in ALL}
    assert _metavar(spec) == "{auto,numeric}"
    assert parse_value(spec, "numeric") == "numeric"
    with pytest.raises(ValueError, match="features"):
        FedEP(features="raw").fit(np.zeros((4, 2)))


@pytest.mark.parametrize("cls", [FedEP, LocalPCA])
def test_model_file_round_trip_scores_the_raw_frame(cls, flows, tmp_path):
    X, groups, test, _ = flows
    det = _fit(_est(cls), X, groups)
    path = tmp_path / "m.fedep"
    fedep.save(det, path)
    meta, _ = read_model_file(path)
    assert meta["features"]["format"] == "fedep.features.FeaturePipeline"
    back = fedep.load(path)
    assert back.features_.to_dict() == det.features_.to_dict()
    assert list(back.feature_names_in_) == list(det.feature_names_in_)
    assert list(back.feature_names_out_) == list(det.feature_names_out_)
    g = np.resize(["gw1", "gw2", "gw3", "other"], len(test))
    for gr in (None, g):
        np.testing.assert_array_equal(
            back.decision_function(test, gr), det.decision_function(test, gr)
        )
        np.testing.assert_array_equal(
            back.feature_contributions(test, gr), det.feature_contributions(test, gr)
        )
        np.testing.assert_array_equal(back.predict(test, gr), det.predict(test, gr))


def test_model_file_with_a_pipeline_parameter(flows, tmp_path):
    X, groups, test, _ = flows
    det = _fit(_est(PooledPCA, features=FeaturePipeline(exclude=["resp_bytes"])), X, groups)
    fedep.save(det, tmp_path / "m.fedep")
    back = fedep.load(tmp_path / "m.fedep")
    assert isinstance(back.features, FeaturePipeline) and back.features.exclude == ["resp_bytes"]
    np.testing.assert_array_equal(back.decision_function(test), det.decision_function(test))


def test_model_file_with_normal_scores(flows, tmp_path):
    from sklearn.metrics import roc_auc_score

    X, groups, test, y = flows
    pipe = FeaturePipeline(numeric_transform="quantile")
    det = _fit(_est(PooledPCA, features=pipe), X, groups)
    acts = {d.name: d.action for d in det.features_.decisions_}
    assert acts["orig_bytes"] == acts["resp_bytes"] == "normal-score"
    fedep.save(det, tmp_path / "m.fedep")
    back = fedep.load(tmp_path / "m.fedep")
    assert back.features_.numeric_transform == "quantile"
    np.testing.assert_array_equal(back.decision_function(test), det.decision_function(test))
    assert roc_auc_score(y, back.decision_function(test)) > 0.9  # the byte-heavy attacks


def _break_knots(m):
    d = next(d for d in m["features"]["decisions"] if d["action"] == "normal-score")
    d["cdf_x"] = d["cdf_x"][::-1]


def test_bad_normal_score_knots_in_model_file_are_one_line(flows, tmp_path):
    X, groups, _, _ = flows
    det = _fit(_est(PooledPCA, features=FeaturePipeline(numeric_transform="quantile")), X, groups)
    fedep.save(det, tmp_path / "m.fedep")
    meta, files = read_model_file(tmp_path / "m.fedep")
    _break_knots(meta)
    write_model_file(tmp_path / "bad.fedep", meta, files)
    with pytest.raises(ModelFileError, match="normal-score knots") as info:
        fedep.load(tmp_path / "bad.fedep")
    assert "bad.fedep" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda m: m["features"].update(version=99), "feature pipeline"),
        (lambda m: m["features"]["scaling"].update(scale=[0.0]), "feature pipeline"),
        (lambda m: m["features"]["decisions"].pop(), "feature pipeline"),
        (lambda m: m["features"].pop("decisions"), "feature pipeline"),
    ],
)
def test_bad_pipeline_in_model_file_is_one_line(flows, tmp_path, edit, match):
    X, groups, _, _ = flows
    det = _fit(_est(PooledPCA), X, groups)
    fedep.save(det, tmp_path / "m.fedep")
    meta, arrays = read_model_file(tmp_path / "m.fedep")
    edit(meta)
    write_model_file(tmp_path / "bad.fedep", meta, arrays)  # valid digests: a forger's file
    with pytest.raises(ModelFileError, match=match) as info:
        fedep.load(tmp_path / "bad.fedep")
    assert "bad.fedep" in str(info.value) and "\n" not in str(info.value)


def test_numeric_path_refuses_values_whose_moments_overflow():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    X[:, 2] *= 1e160  # squares beyond float64: the scale would be inf, every score 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(ValueError, match=r"^feature 2: values up to \d\.\d+e\+160 overflow"):
            FedEP(n_rounds=2).fit(X, groups=np.repeat([0, 1, 2], 100))
        df = pd.DataFrame(X, columns=list("abcd"))
        with pytest.raises(ValueError, match=r"^feature 'c': values up to"):
            FedEP(n_rounds=2, features="numeric").fit(df, groups=np.repeat([0, 1, 2], 100))


def test_groups_of_mixed_id_kinds_are_refused():
    X = np.random.default_rng(0).normal(size=(60, 3))
    with pytest.raises(ValueError, match=r"^groups mixes client ids of kinds number, text"):
        FedEP(n_rounds=2).fit(X, groups=np.array([1, "1"] * 30, dtype=object))
    ids = np.array([np.int64(1), 2] * 30, dtype=object)  # numpy and Python ints: one kind
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        assert FedEP(n_rounds=2).fit(X, groups=ids).clients_.tolist() == [1, 2]
