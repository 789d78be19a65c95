"""Record trimming, contamination="auto" and predict_proba on the estimators."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from fedep import FedEP, FedPG, PooledPCA
from fedep.core.stiefel import projector_distance
from fedep.core.trimming import LocalRecords, median_start
from fedep.data import make_federated_data

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def _data(rate):
    return make_federated_data(
        n_clients=10, n_features=20, n_components=3, n_samples=100, corruption_rate=0.0,
        non_iid=0.0, client_variation=0.0, anomaly_scale=0.3, outlier_rate=rate,
        outlier_scale=1.0, random_state=1,
    )  # fmt: skip


@pytest.mark.parametrize("cls", [PooledPCA, FedEP, FedPG])
@pytest.mark.parametrize("rate", [0.1, 0.2])
def test_trimming_recovers_the_planted_subspace_under_outlier_records(cls, rate):
    f = _data(rate)
    kw = {"random_state": 0, "standardize": False}
    plain = cls(3, **kw).fit(f.X_train, groups=f.groups_train)
    trim = cls(3, trim_steps=5, trim_share=0.3, **kw).fit(f.X_train, groups=f.groups_train)
    d_plain = projector_distance(plain.components_.T, f.basis)
    d_trim = projector_distance(trim.components_.T, f.basis)
    assert d_trim < 0.5 * d_plain and d_trim < 0.05
    auc = [roc_auc_score(f.y_test, e.decision_function(f.X_test)) for e in (plain, trim)]
    assert auc[1] >= auc[0]
    assert 1 <= trim.n_trim_steps_ <= 5 and trim.trim_history_[-1]["n_kept"] >= 0.69 * len(
        f.X_train
    )


def test_trimmed_objective_descends_with_pooled_pca():
    f = _data(0.2)
    e = PooledPCA(3, trim_steps=8, trim_share=0.3, standardize=False).fit(f.X_train)
    obj = [h["objective"] for h in e.trim_history_]
    assert len(obj) >= 2 and np.all(np.diff(obj) <= 1e-9 * np.abs(obj).max())


def test_trim_steps_zero_is_the_untrimmed_fit():
    f = _data(0.1)
    a = FedEP(3, random_state=0).fit(f.X_train, groups=f.groups_train)
    b = FedEP(3, random_state=0, trim_steps=0, trim_share=0.3).fit(f.X_train, groups=f.groups_train)
    np.testing.assert_array_equal(a.components_, b.components_)
    assert b.trim_history_ == [] and b.n_trim_steps_ == 0


@pytest.mark.parametrize("rate", [0.1, 0.2])
def test_auto_contamination_on_synthetic_outlier_records(rate):
    f = _data(rate)
    e = FedEP(3, contamination="auto", trim_steps=5, standardize=False, random_state=0)
    e.fit(f.X_train, groups=f.groups_train)
    assert abs(e.contamination_ - f.outlier_mask.mean()) < 0.03
    assert e.threshold_ == pytest.approx(np.quantile(e.decision_scores_, 1 - e.contamination_))


def test_predict_proba_rows_sum_to_one_and_are_monotone():
    f = _data(0.1)
    e = PooledPCA(3).fit(f.X_train, groups=f.groups_train)
    p = e.predict_proba(f.X_test)
    assert p.shape == (len(f.X_test), 2)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert np.all((p >= 0) & (p <= 1))
    order = np.argsort(e.decision_function(f.X_test))
    assert np.all(np.diff(p[order, 1]) >= 0)


def test_new_fitted_scalars_survive_a_model_file(tmp_path):
    import fedep

    f = _data(0.1)
    e = FedEP(3, contamination="auto", random_state=0).fit(f.X_train, groups=f.groups_train)
    fedep.save(e, tmp_path / "m.fedep")
    m = fedep.load(tmp_path / "m.fedep")
    assert m.contamination_ == e.contamination_
    np.testing.assert_allclose(m.predict_proba(f.X_test), e.predict_proba(f.X_test))


def _clustered_attacks(rate, seed=0, n=1000, p=20, r=3, n_shifted=3):
    """Normal records near a rank-3 subspace and a TIGHT cluster of attack records,
    shifted by 6 in ``n_shifted`` of the 20 features (like a flood of near-identical
    records): ``rate`` of the training set, no labels."""
    rng = np.random.default_rng(seed)
    B = np.linalg.qr(rng.standard_normal((p, r)))[0]
    c = np.zeros(p)
    c[:n_shifted] = 6.0

    def normal(k):
        coords = rng.standard_normal((k, r)) * [3.0, 2.0, 1.5]
        return coords @ B.T + 0.3 * rng.standard_normal((k, p))

    def attack(k):
        return c + 0.05 * rng.standard_normal((k, p))

    m = int(round(rate / (1 - rate) * n))
    X = np.vstack([normal(n), attack(m)])
    is_attack = np.r_[np.zeros(n, bool), np.ones(m, bool)]
    return X, is_attack, rng.integers(0, 10, len(X)), B


@pytest.mark.parametrize("cls", [PooledPCA, FedEP])
def test_median_start_finds_a_planted_attack_cluster_that_the_plain_start_keeps(cls):
    X, is_attack, groups, B = _clustered_attacks(0.2)
    kw = {"trim_steps": 5, "trim_share": 0.25, "standardize": False, "random_state": 0}
    plain = cls(3, trim_start="all", **kw).fit(X, groups=groups)
    robust = cls(3, trim_start="median", **kw).fit(X, groups=groups)
    # From every record the cluster takes a direction and stays kept; from the median
    # start it is trimmed and the planted subspace is recovered.
    assert projector_distance(plain.components_.T, B) > 0.5
    assert projector_distance(robust.components_.T, B) < 0.1
    assert robust.decision_scores_[is_attack].min() > robust.decision_scores_[~is_attack].max()
    obj = [h["objective"] for h in robust.trim_history_]
    if cls is PooledPCA:  # after the start, the C-steps descend (fixed scale)
        assert np.all(np.diff(obj) <= 1e-9 * np.abs(obj).max())


def test_median_start_standardises_with_the_start_set():
    # In units of the standard deviations of every record (inflated by the cluster),
    # a 20% cluster is outside the start half only when it is shifted in more than
    # about a third of the features (see fedep.core.trimming): 10 of 20 here.
    X, is_attack, groups, _ = _clustered_attacks(0.2, n_shifted=10)
    e = PooledPCA(3, trim_steps=1, trim_share=0.25, trim_start="median").fit(X, groups=groups)
    # The start half holds no attack record: its moments are the normal rows'.
    records = LocalRecords([X])
    median_start(records, X.mean(0), X.std(0), 3)
    start = records.keep[0]
    assert not start[is_attack].any() and start.sum() == len(X) - len(X) // 2
    np.testing.assert_allclose(e.scale_, X[start].std(0))
    # and the attacks inflate the plain standard deviation of the shifted features
    assert np.all(X.std(0)[:10] > 2 * e.scale_[:10])


@pytest.mark.parametrize("cls", [PooledPCA, FedEP])
def test_median_start_restandardises_a_feature_pipelines_outputs(cls, tmp_path):
    # A feature pipeline centres and scales with the moments of every record, which
    # the cluster inflates; the median start re-standardises its outputs with the
    # start set's moments, as it does raw records.
    pd = pytest.importorskip("pandas")
    X, is_attack, groups, _ = _clustered_attacks(0.2, n_shifted=10)
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    kw = {"trim_steps": 5, "trim_share": 0.25, "features": "auto", "random_state": 0}
    e = cls(3, trim_start="median", **kw).fit(df, groups=groups)
    Z = e.features_.transform(df)
    records = LocalRecords([Z])
    median_start(records, np.zeros(Z.shape[1]), np.ones(Z.shape[1]), 3)
    start = records.keep[0]
    assert not start[is_attack].any()
    np.testing.assert_allclose(e.scale_, Z[start].std(0))
    assert np.all(Z.std(0)[:10] > 2 * e.scale_[:10])
    # the location is refitted on the kept (normal) records, not the pipeline's mean 0
    assert np.linalg.norm(e.mean_ - Z[~is_attack].mean(0)) < 0.1 * np.linalg.norm(
        Z[is_attack].mean(0) - Z[~is_attack].mean(0)
    )
    assert e.decision_scores_[is_attack].min() > e.decision_scores_[~is_attack].max()
    # the refitted mean and scale travel with the model file
    import fedep

    fedep.save(e, tmp_path / "m.fedep")
    np.testing.assert_allclose(
        fedep.load(tmp_path / "m.fedep").decision_function(df), e.decision_function(df)
    )
    np.testing.assert_allclose(e.decision_function(df), e.decision_scores_, rtol=1e-9)


def _steep_start_units(seed=1, N=1200, n=24, k=12, frac=0.3):
    """Normal records whose first ``k`` features are ~0 except in a subpopulation
    (``frac`` of them, all shifted by ~1 there: a service of its own, as DNS on
    TON-IoT) that the median start's half leaves out; the rest a 3-factor model."""
    rng = np.random.default_rng(seed)
    L = rng.normal(size=(n, 3))
    X = rng.normal(size=(N, 3)) @ L.T + 0.2 * rng.normal(size=(N, n))
    sub = rng.random(N) < frac
    X[:, :k] = 0.01 * rng.normal(size=(N, k))
    X[sub, :k] += 1.0 + 0.3 * rng.normal(size=(sub.sum(), 1))
    return X, rng.integers(0, 4, N)


@pytest.mark.parametrize(
    "cls, kw", [(FedEP, {"sparse_corruption": False}), (FedEP, {}), (FedPG, {})]
)
def test_each_concentration_step_fits_its_kept_records_from_their_one_shot_merge(cls, kw):
    # In the median start's units the subpopulation's features (scale ~0.01 there)
    # hold nearly all the energy (lam_4 / lam_1 ~ 1e-3): rounds warm-started at the
    # previous step's consensus stopped long before its weak directions reached the new
    # kept set's (projector distance 0.23 from pooled PCA for FedEP without S). Each
    # fit step starts from the one-shot merge of its kept records instead.
    X, groups = _steep_start_units()
    trim = {"trim_steps": 3, "trim_share": 0.2, "trim_start": "median"}
    ref = PooledPCA(4, **trim).fit(X, groups=groups)
    est = cls(4, random_state=0, **trim, **kw).fit(X, groups=groups)
    assert ref.scale_[:12].max() < 0.05  # the steep units of the mechanism
    # FedEP with S fits the records less its sparse part, not pooled PCA: its optimum
    # here is 0.04-0.06 from pooled PCA (by start); the failure mode was 0.23
    bound = 0.08 if cls is FedEP and not kw else 0.04
    assert projector_distance(est.components_.T, ref.components_.T) < bound
