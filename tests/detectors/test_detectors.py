"""Detector API: scikit-learn / PyOD conventions, bad input, model files."""

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from fedep import ABLATION_CASES, FedEP, FedPG, LocalPCA, OneShotPCA, PooledPCA
from fedep.data import make_federated_data

ALL = [FedEP, FedPG, PooledPCA, LocalPCA, OneShotPCA]


@pytest.fixture(scope="module")
def data():
    return make_federated_data(
        n_clients=8, n_features=12, n_components=3, n_samples=(40, 90), random_state=3
    )


def _small(cls, **kw):
    if cls in (FedEP, FedPG):
        kw.setdefault("n_rounds", 30)
        kw.setdefault("tol", 0)
    return cls(n_components=3, random_state=0, **kw)


@parametrize_with_checks(
    [
        FedEP(n_components=1, n_rounds=5, tol=0),
        FedPG(n_components=1, n_rounds=5, tol=0),
        PooledPCA(n_components=1),
        LocalPCA(n_components=1),
        OneShotPCA(n_components=1),
    ]
)
@pytest.mark.filterwarnings("ignore:no groups given:UserWarning")  # the checks fit one client
def test_sklearn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


@pytest.mark.parametrize("cls", ALL)
def test_fitted_attributes_and_conventions(cls, data):
    det = _small(cls)
    assert det.fit(data.X_train, groups=data.groups_train) is det
    r, n = 3, data.X_train.shape[1]
    assert det.components_.shape == (r, n)
    assert np.allclose(det.components_ @ det.components_.T, np.eye(r), atol=1e-10)
    assert det.client_components_.shape == (8, r, n)
    assert det.n_features_in_ == n
    assert det.decision_scores_.shape == (data.X_train.shape[0],)
    # threshold_ comes from the training scores (1 - contamination quantile).
    assert det.threshold_ == pytest.approx(np.quantile(det.decision_scores_, 0.95))
    assert abs(det.labels_.mean() - 0.05) < 0.02
    s = det.decision_function(data.X_test)
    assert s.shape == (data.X_test.shape[0],) and np.all(s >= 0)
    assert set(np.unique(det.predict(data.X_test))) <= {0, 1}
    assert np.allclose(det.score_samples(data.X_test), -s)
    assert np.allclose(det.feature_contributions(data.X_test).sum(1), s)
    # Higher = more anomalous: planted anomalies score higher on average.
    assert s[data.y_test == 1].mean() > s[data.y_test == 0].mean()


def test_personalised_scoring_uses_client_bases(data):
    det = _small(FedEP).fit(data.X_train, groups=data.groups_train)
    g = data.groups_test
    personal = det.decision_function(data.X_test, groups=g)
    Z = (data.X_test - det.mean_) / det.scale_
    for c in range(8):
        rows = g == c
        B = det.client_components_[c].T
        R = Z[rows] - Z[rows] @ B @ B.T
        assert np.allclose(personal[rows], (R**2).sum(1))
    unknown = det.decision_function(data.X_test[:5], groups=np.full(5, 99))
    assert np.allclose(unknown, det.decision_function(data.X_test[:5]))
    pred = det.predict(data.X_test, groups=g)
    assert np.array_equal(pred, (personal > det.client_thresholds_[g]).astype(int))


def test_randomness_only_through_random_state(data):
    # The random start draws from random_state (the default one-shot start is
    # deterministic).
    a = _small(FedEP, init="random").fit(data.X_train, groups=data.groups_train)
    b = _small(FedEP, init="random").fit(data.X_train, groups=data.groups_train)
    assert np.array_equal(a.components_, b.components_)
    c = FedEP(n_components=3, random_state=1, n_rounds=30, tol=0, init="random")
    c.fit(data.X_train, groups=data.groups_train)
    assert not np.array_equal(a.components_, c.components_)


def test_params_stored_untouched_and_clone():
    det = FedEP(alpha=2.5, beta=0.0, n_rounds=7)
    assert det.get_params()["alpha"] == 2.5
    assert clone(det).get_params() == det.get_params()


def test_pipeline(data):
    pipe = make_pipeline(StandardScaler(), _small(FedEP))
    pipe.fit(data.X_train, fedep__groups=data.groups_train)
    assert pipe.decision_function(data.X_test).shape == (data.X_test.shape[0],)


def test_ablation_cases_are_parameters(data):
    for case, params in ABLATION_CASES.items():
        det = _small(FedEP, **params).fit(data.X_train, groups=data.groups_train)
        assert det.n_iter_ >= 1, case
    case1 = _small(FedEP, **ABLATION_CASES["I"])
    assert case1.get_params()["sparse_corruption"] is False
    assert case1.get_params()["beta"] == 0.0


def test_history_and_stop_reason(data):
    det = FedEP(n_components=3, n_rounds=3, tol=1e-12, random_state=0)
    with pytest.warns(ConvergenceWarning, match="n_rounds=3"):
        det.fit(data.X_train, groups=data.groups_train)
    assert det.stop_reason_ == "max_rounds" and det.n_iter_ == 3
    keys = {
        "objective",
        "augmented_lagrangian",
        "consensus_residual_rel",
        "data_residual_rel",
        "ssn_iter",
        "time_s",
        "round",
    }
    assert keys <= set(det.history_[0])
    ok = FedEP(n_components=3, n_rounds=500, tol=1e-4, random_state=0)
    ok.fit(data.X_train, groups=data.groups_train)
    assert ok.stop_reason_ == "stationary" and ok.n_iter_ < 500


def test_federated_standardisation_equals_pooled(data):
    det = _small(PooledPCA).fit(data.X_train, groups=data.groups_train)
    assert np.allclose(det.mean_, data.X_train.mean(0), rtol=1e-12)
    assert np.allclose(det.scale_, data.X_train.std(0), rtol=1e-12)
    raw = _small(PooledPCA, standardize=False).fit(data.X_train, groups=data.groups_train)
    assert np.all(raw.scale_ == 1.0)


@pytest.mark.parametrize(
    "kwargs, X_fn, match",
    [
        ({}, lambda X: np.where(np.arange(X.size).reshape(X.shape) == 5, np.nan, X), "NaN"),
        ({}, lambda X: np.where(np.arange(X.size).reshape(X.shape) == 5, np.inf, X), "infinity"),
        ({}, lambda X: X[:, 0], "2D array"),
        ({}, lambda X: X[:0], "0 sample"),
        ({"n_components": 13}, lambda X: X, "n_components=13"),
        ({"alpha": -1.0}, lambda X: X, "alpha"),
        ({"beta": -0.1}, lambda X: X, "beta"),
        ({"nu": 0.0}, lambda X: X, "nu"),
        ({"mu": -2}, lambda X: X, "mu"),
        ({"contamination": 0.9}, lambda X: X, "contamination"),
        ({"n_rounds": 0}, lambda X: X, "n_rounds"),
        ({"consensus_weights": "size"}, lambda X: X, "consensus_weights"),
    ],
)
def test_bad_input_names_the_problem(data, kwargs, X_fn, match):
    det = FedEP(**{"n_components": 3, **kwargs})
    X = X_fn(data.X_train.copy())
    groups = data.groups_train if X.ndim == 2 and X.shape[0] == data.X_train.shape[0] else None
    with pytest.raises(ValueError, match=match):
        det.fit(X, groups=groups)


def test_bad_groups(data):
    with pytest.raises(ValueError, match="groups must be 1-D"):
        FedEP(n_components=3).fit(data.X_train, groups=data.groups_train[:-1])
    g = data.groups_train.copy()
    g[:2] = 77  # client 77 with two rows < n_components = 3
    with pytest.raises(ValueError, match="client 77 has 2 rows"):
        FedEP(n_components=3).fit(data.X_train, groups=g)
    det = _small(PooledPCA).fit(data.X_train, groups=data.groups_train)
    with pytest.raises(ValueError, match="features"):
        det.decision_function(data.X_test[:, :5])


def test_sample_weighted_consensus_fits_and_differs(data):
    # Sample-weighted V-step: same detector quality on the planted federation, a
    # different consensus than the curvature-weighted default.
    from sklearn.metrics import roc_auc_score

    kw = {"n_components": 3, "n_rounds": 400, "tol": 1e-4, "random_state": 0}
    a = FedEP(**kw).fit(data.X_train, groups=data.groups_train)
    b = FedEP(consensus_weights="samples", nu=5.0, **kw).fit(data.X_train, groups=data.groups_train)
    assert a.stop_reason_ == b.stop_reason_ == "stationary"
    assert not np.allclose(a.components_, b.components_)
    assert roc_auc_score(data.y_test, b.decision_function(data.X_test)) >= 0.95


@pytest.mark.parametrize("cls", [FedEP, LocalPCA])
def test_mixed_known_and_unknown_clients_scored_row_by_row(cls, data):
    # each row is scored once, by its client's basis or (unknown id) the global rule
    det = _small(cls).fit(data.X_train, groups=data.groups_train)
    g = data.groups_test.copy()
    g[::3] = 99
    contrib = det.feature_contributions(data.X_test, groups=g)
    glob = det.feature_contributions(data.X_test)
    Z = (data.X_test - det.mean_) / det.scale_
    for i in range(0, len(g), 17):
        if g[i] == 99:
            np.testing.assert_allclose(contrib[i], glob[i], rtol=1e-12)
        else:
            B = det.client_components_[g[i]].T
            r = Z[i] - Z[i] @ B @ B.T
            np.testing.assert_allclose(contrib[i], r**2, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(contrib.sum(1), det.decision_function(data.X_test, groups=g))


@pytest.mark.parametrize("cls", [FedEP, OneShotPCA, LocalPCA])
def test_fit_without_groups_warns_one_client(cls, data):
    det = _small(cls)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with pytest.warns(UserWarning, match=r"no groups given: all \d+ rows form one client"):
            det.fit(data.X_train)
        assert det.clients_.tolist() == [0]
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            det.fit(data.X_train, groups=data.groups_train)  # federated: no warning
    assert det.clients_.size == 8


def test_pooled_pca_without_groups_does_not_warn(data):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        PooledPCA(n_components=2).fit(data.X_train)  # pooled by design


@pytest.mark.parametrize("cls", ALL)
def test_get_feature_names_out_labels_contributions(cls, data):
    import pandas as pd
    from sklearn.exceptions import NotFittedError

    X, g = data.X_train, data.groups_train
    det = _small(cls)
    with pytest.raises(NotFittedError):
        det.get_feature_names_out()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        det.fit(X, groups=g)
        names = det.get_feature_names_out()
        assert names.tolist() == [f"x{j}" for j in range(X.shape[1])]
        cols = [f"c{j}" for j in range(X.shape[1])]
        det.set_params(features="numeric").fit(pd.DataFrame(X, columns=cols), groups=g)
        assert det.get_feature_names_out().tolist() == cols
        with pytest.raises(ValueError):
            det.get_feature_names_out(["a"] * X.shape[1])
        # a feature pipeline: its output names, one per column of feature_contributions
        frame = pd.DataFrame(X[:, :4], columns=cols[:4]).assign(
            proto=np.where(np.arange(len(X)) % 3 == 0, "udp", "tcp")
        )
        det.set_params(features="auto").fit(frame, groups=g)
    names = det.get_feature_names_out()
    assert "proto=tcp" in names.tolist() and names.tolist() == list(det.feature_names_out_)
    contrib = det.feature_contributions(frame.iloc[:5], groups=g[:5])
    labelled = pd.DataFrame(contrib, columns=names)
    assert labelled.shape == (5, len(names))
    assert det.get_feature_names_out(frame.columns).tolist() == names.tolist()
