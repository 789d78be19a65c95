"""The automatic rank: the optimal hard threshold on the merged spectrum."""

from __future__ import annotations

import numpy as np
import pytest

from fedep import OneShotPCA, PooledPCA
from fedep.core.rank import (
    choose_rank,
    client_gram,
    marchenko_pastur_median,
    optimal_threshold_coefficient,
)
from fedep.data import make_federated_data


# ------------------------------------------------------------------ the threshold
def test_marchenko_pastur_median_matches_white_noise():
    # Independent reference: the median eigenvalue of a simulated white-noise matrix.
    rng = np.random.default_rng(0)
    for n, p in ((4000, 400), (2000, 1000)):
        X = rng.standard_normal((n, p))
        sample = np.median(np.linalg.eigvalsh(X.T @ X / n))
        assert marchenko_pastur_median(p / n) == pytest.approx(sample, rel=0.01)
    assert marchenko_pastur_median(1e-8) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("beta", [0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0])
def test_omega_matches_gavish_donoho_approximation(beta):
    # Their paper's cubic fit of omega(beta), accurate to about 0.02.
    approx = 0.56 * beta**3 - 0.95 * beta**2 + 1.82 * beta + 1.43
    assert optimal_threshold_coefficient(beta) == pytest.approx(approx, abs=0.02)


def test_omega_limits():
    assert optimal_threshold_coefficient(1.0) == pytest.approx(2.858, abs=1e-3)
    assert optimal_threshold_coefficient(1e-9) == pytest.approx(np.sqrt(2.0), abs=1e-3)
    with pytest.raises(ValueError, match="beta"):
        marchenko_pastur_median(0.0)


# ------------------------------------------------------------------ planted rank
@pytest.mark.parametrize(
    "rank, n_features, noise, corruption, seed",
    [
        (2, 30, 0.5, 0.0, 0),
        (5, 30, 1.0, 0.0, 1),
        (5, 60, 0.5, 0.01, 2),
        (10, 60, 1.0, 0.01, 3),
        (10, 30, 0.5, 0.0, 4),
    ],
)
def test_planted_rank_is_recovered(rank, n_features, noise, corruption, seed):
    D = make_federated_data(
        n_clients=10,
        n_features=n_features,
        n_components=rank,
        n_samples=(50, 300),
        noise=noise,
        corruption_rate=corruption,
        random_state=seed,
    )
    det = PooledPCA(random_state=0).fit(D.X_train, groups=D.groups_train)
    assert abs(det.n_components_ - rank) <= 1, det.rank_reason_
    assert det.components_.shape == (det.n_components_, n_features)


def test_pure_noise_gives_one_component():
    X = np.random.default_rng(1).standard_normal((3000, 20))
    det = PooledPCA().fit(X, groups=np.arange(3000) % 4)
    assert det.n_components_ == 1
    assert "at least one component" in det.rank_reason_


# ------------------------------------------------------------------ reason and bounds
def test_reason_names_the_rule_and_its_inputs():
    rng = np.random.default_rng(2)
    Z = rng.standard_normal((500, 3)) @ rng.standard_normal((3, 12)) * 3
    Z += rng.standard_normal((500, 12))
    Z -= Z.mean(axis=0)
    c = choose_rank(client_gram(Z[:200]) + client_gram(Z[200:]), [200, 300])
    assert c.rank == c.n_above == 3
    assert c.reason.startswith("r=3: 3 of 12 non-degenerate eigenvalues")
    assert "12 features, 500 records" in c.reason and "Gavish-Donoho" in c.reason
    assert (np.diff(c.eigenvalues) <= 0).all()
    assert c.threshold > c.eigenvalues[3] and c.eigenvalues[2] > c.threshold


def _diag_gram(eigs, n):
    return np.diag(np.asarray(eigs, dtype=float)) * n


def test_ties_at_the_threshold_are_not_kept():
    n = 10**6  # beta = 7e-6: omega**2 is that of beta -> 0 up to 1e-5
    beta = 7 / n
    t = optimal_threshold_coefficient(beta) ** 2  # the median of the spectrum is 1
    at = choose_rank(_diag_gram([t, t, 1, 1, 1, 1, 1], n), [n])
    assert at.n_above == 0 and at.rank == 1  # equal is not above; at least one
    assert "at least one component" in at.reason
    above = choose_rank(_diag_gram([t * (1 + 1e-9)] * 2 + [1] * 5, n), [n])
    assert above.n_above == above.rank == 2
    # An isotropic spectrum: every eigenvalue ties with the median, none is signal.
    assert choose_rank(_diag_gram(np.ones(9), n), [n]).rank == 1


def test_degenerate_directions_are_not_noise():
    # 3 strong directions, 12 noise, 15 exactly zero (constant columns): the median
    # is that of the 15 live eigenvalues, not of all 30.
    eigs = [50, 40, 30] + [1.0] * 12 + [0.0] * 15
    c = choose_rank(_diag_gram(eigs, 10**5), [10**5])
    assert c.rank == 3 and "of 15 non-degenerate" in c.reason


def test_rank_keeps_at_most_half_the_live_directions():
    # The threshold is above the median: the residual always keeps variance.
    rng = np.random.default_rng(6)
    for p in (2, 3, 4, 7, 20):
        eigs = np.sort(rng.exponential(size=p) ** 4)[::-1]
        c = choose_rank(_diag_gram([*eigs, 0.0, 0.0], 10**4), [10**4])
        assert 1 <= c.rank <= max(p // 2, 1)


def test_rank_is_bounded_by_the_smallest_client_and_max_rank():
    # A gateway with 2 records bounds the rank at 2.
    rng = np.random.default_rng(3)
    Z = rng.standard_normal((400, 6)) @ rng.standard_normal((6, 20)) * 5
    Z += rng.standard_normal((400, 20))
    c = choose_rank(client_gram(Z), [2, 398])
    assert c.n_above >= 6 and c.rank == 2 and "smallest client has 2 records" in c.reason
    c = choose_rank(client_gram(Z), [400], max_rank=4, max_rank_reason="sketch_rank=4")
    assert c.rank == 4 and c.reason.endswith("capped at 4: sketch_rank=4")


def test_tiny_federations_do_not_crash():
    rng = np.random.default_rng(4)
    # One feature; two records per gateway; constant columns; fewer records than features.
    det = PooledPCA().fit(rng.standard_normal((6, 1)), groups=[0, 0, 1, 1, 2, 2])
    assert det.n_components_ == 1
    X = np.column_stack([rng.standard_normal(8), np.ones(8), np.zeros(8)])
    det = PooledPCA().fit(X, groups=[0, 0, 0, 0, 1, 1, 1, 1])
    assert det.n_components_ == 1
    X = rng.standard_normal((6, 40))
    det = PooledPCA().fit(X, groups=[0, 0, 0, 1, 1, 1])
    assert 1 <= det.n_components_ <= 3
    assert np.isfinite(det.decision_function(X)).all()
    with pytest.raises(ValueError, match="at least max"):
        PooledPCA().fit(X, groups=[0, 1, 1, 1, 1, 1])  # a one-row gateway


def test_sketch_rank_bounds_the_oneshot_rank():
    D = make_federated_data(n_clients=4, n_features=30, n_components=5, noise=0.5, random_state=0)
    det = OneShotPCA(sketch_rank=2).fit(D.X_train, groups=D.groups_train)
    assert det.n_components_ == 2 and det.rank_reason_.endswith("capped at 2: sketch_rank=2")


def test_client_order_does_not_change_the_rank():
    D = make_federated_data(n_clients=6, n_features=20, n_components=4, noise=0.5, random_state=5)
    a = PooledPCA().fit(D.X_train, groups=D.groups_train)
    b = PooledPCA().fit(D.X_train, groups=5 - D.groups_train)
    assert a.n_components_ == b.n_components_ and a.rank_reason_ == b.rank_reason_


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="square"):
        choose_rank(np.ones((3, 4)), [10])
    with pytest.raises(ValueError, match="at least one record"):
        choose_rank(np.eye(3), [0, 4])


def test_given_rank_is_kept_with_its_reason():
    D = make_federated_data(n_clients=3, n_features=12, n_samples=60, random_state=0)
    det = PooledPCA(n_components=4).fit(D.X_train, groups=D.groups_train)
    assert det.n_components_ == 4 and det.rank_reason_ == "r=4: n_components=4 given"


def test_client_gram_in_slices_equals_the_gram_of_the_standardised_records():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((1003, 6)) * [1, 2, 3, 4, 5, 6] + 10.0
    mean, scale = X.mean(axis=0), X.std(axis=0)
    Z = (X - mean) / scale
    for rows in (1, 100, 1003, 5000):  # one row, ragged last slice, exact, one slice
        G = client_gram(X, mean, scale, block_rows=rows)
        np.testing.assert_allclose(G, Z.T @ Z, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(client_gram(Z), Z.T @ Z, rtol=1e-12, atol=1e-9)
