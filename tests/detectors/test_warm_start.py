"""Warm start (``warm_start=True``, ``fedep fit --warm-start``), lineage and drift."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.linalg import subspace_angles
from scipy.stats import special_ortho_group

import fedep
from fedep import FedEP, FedPG
from fedep.core.cohort import check_start, make_cohort
from fedep.core.stiefel import random_stiefel
from fedep.data.synthetic import make_federated_data
from fedep.evaluation.drift import model_diff, principal_angles
from fedep.federation.rounds import STOP_WINDOW
from fedep.modelfile import ModelFileError, read_model_file, write_model_file


def _periods(fd):
    """Each gateway's first half of rows (period 1) and second half (period 2)."""
    g = fd.groups_train
    first = np.zeros(g.size, dtype=bool)
    for c in np.unique(g):
        rows = np.flatnonzero(g == c)
        first[rows[: rows.size // 2]] = True
    return first


@pytest.fixture(scope="module")
def fed():
    return make_federated_data(
        n_clients=5, n_features=10, n_components=2, n_samples=300, random_state=0
    )


@pytest.fixture(scope="module")
def fitted(fed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FedEP(n_components=2, random_state=0).fit(fed.X_train, groups=fed.groups_train)


def _warm(det, X, groups, **params):
    est = copy.deepcopy(det).set_params(warm_start=True, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, groups=groups)


@pytest.mark.parametrize("cls", [FedEP, FedPG])
def test_warm_start_on_the_same_data_stops_at_once_with_the_same_basis(cls, fed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cold = cls(n_components=2, random_state=0).fit(fed.X_train, groups=fed.groups_train)
    assert cold.stop_reason_.endswith("stationary")
    warm = _warm(cold, fed.X_train, fed.groups_train)
    # the same stopping test as a cold fit, on its own rounds: no stop on the carried
    # fit's window (it was on other records in general); stationary from the start,
    # the refit stops soon after its own window is full
    assert STOP_WINDOW + 1 <= warm.n_iter_ <= 2 * STOP_WINDOW
    assert warm.stop_reason_ == cold.stop_reason_
    measure = "lagrangian_change" if cls is FedEP else "objective_change"
    assert all(h[measure] is None for h in warm.history_[:STOP_WINDOW])
    assert warm.history_[-1][measure] <= cold.tol
    angles = subspace_angles(cold.components_.T, warm.components_.T)
    assert angles.max() < 0.02
    np.testing.assert_array_equal(warm.mean_, cold.mean_)  # the model's scaling kept
    assert warm.lineage_["parent"] == cold.lineage_["id"] != warm.lineage_["id"]


def test_a_new_gateway_starts_from_the_consensus_the_others_from_their_own_state(fed):
    n, r = 10, 2
    rng = np.random.default_rng(0)
    V0 = random_stiefel(n, r, rng)
    own = {"W": random_stiefel(n, r, rng), "dual": rng.normal(size=(n, r)), "ssn": np.eye(r)}
    blocks = [fed.X_train[fed.groups_train == c] for c in (0, 1)]
    fe = FedEP(n_components=2, sparse_corruption=False).cohort_spec()
    cohort = make_cohort(fe, blocks, V0, [own, None])
    np.testing.assert_array_equal(cohort.W[0], own["W"])
    np.testing.assert_array_equal(cohort.Pi[0], own["dual"])
    np.testing.assert_array_equal(cohort.Lam_ssn[0], own["ssn"])
    np.testing.assert_array_equal(cohort.W[1], V0)
    assert not cohort.Pi[1].any()
    # through fit: period 1 without gateway 4, period 2 with it
    g = fed.groups_train
    first = _periods(fed)
    old = first & (g != 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det = FedEP(n_components=2, random_state=0).fit(fed.X_train[old], groups=g[old])
    assert det.clients_.tolist() == [0, 1, 2, 3]
    warm = _warm(det, fed.X_train[~first], g[~first])
    assert warm.clients_.tolist() == [0, 1, 2, 3, 4]
    assert warm.stop_reason_ == "stationary"
    assert warm.client_duals_.shape == warm.client_components_.shape == (5, 2, 10)
    # the new gateway's basis ends beside the others' (it started at the consensus)
    angle = subspace_angles(warm.client_components_[4].T, warm.components_.T).max()
    assert angle < 0.05


def test_warm_consensus_steps_are_short_on_the_same_records_and_reach_moved_ones(fitted, fed):
    X, g = fed.X_train, fed.groups_train
    # the same records: the consensus steps start at their optimum, one or two rounds
    same = _warm(fitted, X, g)
    steps = [h for h in same.history_ if h.get("remerged")]
    assert 1 <= len(steps) <= 2 and same.n_iter_ <= 2 * STOP_WINDOW
    # rotated records: consensus steps from the carried consensus to the new optimum,
    # which a cold fit of the rotated records reaches too (same units)
    R = special_ortho_group.rvs(10, random_state=1)
    moved = _warm(fitted, X @ R.T, g)
    assert moved.history_[0]["remerged"] is True
    assert len([h for h in moved.history_ if h.get("remerged")]) > len(steps)
    assert moved.n_iter_ > STOP_WINDOW and moved.stop_reason_ == "stationary"
    cold = FedEP(**{**fitted.get_params(), "warm_start": False}).fit(X @ R.T, groups=g)
    assert moved.history_[-1]["objective"] <= 1.01 * cold.history_[-1]["objective"]


def test_warm_start_refusals(fitted, fed):
    X, g = fed.X_train, fed.groups_train
    with pytest.raises(ValueError, match=r"^warm start: .*10 features"):
        _warm(fitted, X[:, :9], g)
    with pytest.raises(ValueError, match=r"warm start: n_components=3 but the model has rank 2"):
        _warm(fitted, X, g, n_components=3)
    tampered = copy.deepcopy(fitted)
    tampered.client_duals_ = tampered.client_duals_[:, :, :9]
    with pytest.raises(ValueError, match=r"gateway .*warm-start dual has shape \(9, 2\)"):
        _warm(tampered, X, g)
    skewed = copy.deepcopy(fitted)
    skewed.client_components_ = skewed.client_components_ * 1.1
    with pytest.raises(ValueError, match=r"warm-start W is not orthonormal"):
        _warm(skewed, X, g)
    bad = {"W": np.eye(10)[:, :2], "dual": np.full((10, 2), np.nan)}
    with pytest.raises(ValueError, match=r"gateway gw7: warm-start dual holds NaN"):
        check_start(bad, 10, 2, "gateway gw7")
    with pytest.raises(ValueError, match=r"unknown \['G'\], missing \['dual'\]"):
        check_start({"W": np.eye(10)[:, :2], "G": np.eye(10)}, 10, 2, "gateway 1")


def test_a_model_file_with_a_tampered_state_is_refused(fitted, tmp_path):
    path = tmp_path / "m.fedep"
    fedep.save(fitted, path)
    meta, arrays = read_model_file(path)
    arrays["client_duals_"] = arrays["client_duals_"][:, :, :5]  # digest recomputed below
    write_model_file(path, meta, arrays)
    with pytest.raises(ModelFileError, match=r"'client_duals_' has shape \(5, 2, 5\)"):
        fedep.load(path)


def test_lineage_round_trips_and_chains_signed_files(fed, tmp_path):
    X = pd.DataFrame(fed.X_train, columns=[f"f{j}" for j in range(10)])
    X["ts"] = np.arange(len(X), dtype=float) + 1e9
    g = fed.groups_train
    first = _periods(fed)
    key = "hmac:0123456789abcdef0123"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parent = FedEP(n_components=2, random_state=0, features="numeric")
        parent.fit(X[first].drop(columns="ts"), groups=g[first])
    fedep.save(parent, tmp_path / "a.fedep", sign_key=key)
    a = fedep.load(tmp_path / "a.fedep", verify_key=key)
    assert a.lineage_ == parent.lineage_ and a.lineage_["parent"] is None
    assert a.lineage_["window"] == {"rows": int(first.sum())}
    assert a.lineage_["gateways"] == ["0", "1", "2", "3", "4"]
    # the window's time from a ts column (features="auto" drops it as a timestamp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        timed = FedEP(n_components=2, random_state=0).fit(X[first], groups=g[first])
    w = timed.lineage_["window"]
    assert (w["time_column"], w["ts_first"]) == ("ts", X["ts"][first].min())
    assert w["ts_last"] == X["ts"][first].max()
    child = _warm(a, X[~first].drop(columns="ts"), g[~first])
    fedep.save(child, tmp_path / "b.fedep", sign_key=key)
    b = fedep.load(tmp_path / "b.fedep", verify_key=key)
    assert b.lineage_["parent"] == a.lineage_["id"]
    assert b.lineage_["parent_sha256"] == a.file_sha256_
    assert b.lineage_["gateway_rows"] == np.bincount(g[~first]).tolist()
    d = model_diff(a, b)
    assert d["lineage"]["b_is_child"] and not model_diff(b, a)["lineage"]["b_is_child"]


def test_principal_angles_match_scipy():
    rng = np.random.default_rng(1)
    for p, q in ((3, 3), (2, 4), (5, 1)):
        A, B = random_stiefel(12, p, rng), random_stiefel(12, q, rng)
        np.testing.assert_allclose(
            principal_angles(A, B), np.sort(subspace_angles(A, B)), atol=1e-10
        )


def test_diff_names_the_gateway_whose_data_rotated():
    fd = make_federated_data(
        n_clients=6, n_features=10, n_components=2, n_samples=400, random_state=3,
        corruption_rate=0.0,
    )  # fmt: skip
    g, X = fd.groups_train, fd.X_train
    first = _periods(fd)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = FedEP(n_components=2, random_state=0).fit(X[first], groups=g[first])
    X2, g2 = X[~first].copy(), g[~first]
    X2[g2 == 4] = X2[g2 == 4] @ special_ortho_group.rvs(10, random_state=1)
    b = _warm(a, X2, g2)
    d = model_diff(a, b)
    assert d["moved"] == ["4"]
    ref = np.sort(subspace_angles(a.components_.T, b.components_.T))
    np.testing.assert_allclose(np.radians(d["global"]["angles_deg"]), ref, atol=1e-8)
    assert d["threshold"]["change"] == pytest.approx(b.threshold_ - a.threshold_)
    # the same period without the rotation: nobody named
    quiet = _warm(a, X[~first], g2)
    assert model_diff(a, quiet)["moved"] == []
