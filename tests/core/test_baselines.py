"""Baselines and statistics against brute-force references."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedep.core.baselines import (
    client_sketch,
    local_pca,
    oneshot_merge,
    pooled_pca,
    pooled_pca_blocks,
)
from fedep.core.layout import make_groups
from fedep.core.scoring import feature_contributions, residual_energy
from fedep.core.stats import (
    Moments,
    client_moments,
    combine_moments,
    standardization_from_moments,
)
from fedep.core.stiefel import projector_distance


def test_oneshot_with_full_sketch_equals_pooled_pca():
    rng = np.random.default_rng(0)
    blocks = [rng.standard_normal((m, 8)) * 0.7 ** np.arange(8) for m in (40, 90, 25)]
    exact = oneshot_merge([client_sketch(b, 8) for b in blocks], 3)
    assert projector_distance(exact, pooled_pca(np.vstack(blocks), 3)) <= 1e-10


def test_client_sketch_of_tall_and_wide_blocks_matches_the_svd():
    # Tall blocks take the Gram route, wide ones the SVD: both are U_k Sigma_k of X^T.
    rng = np.random.default_rng(5)
    for N in (3, 8, 16, 200):  # below, at and above 2 n
        X = rng.standard_normal((N, 8)) * 0.6 ** np.arange(8)
        _, sv, vt = np.linalg.svd(X, full_matrices=False)
        for k in (1, 3, 8):
            B = client_sketch(X, k)
            kk = min(k, sv.size)
            assert B.shape == (8, kk)
            np.testing.assert_allclose(np.linalg.norm(B, axis=0), sv[:kk], rtol=1e-9)
            assert projector_distance(np.linalg.qr(B)[0], vt[:kk].T) <= 1e-8
            best = (vt[:kk].T * sv[:kk] ** 2) @ vt[:kk]
            np.testing.assert_allclose(B @ B.T, best, atol=1e-9 * sv[0] ** 2)


def test_local_pca_is_each_clients_svd():
    rng = np.random.default_rng(1)
    blocks = [rng.standard_normal((50, 6)) * rng.uniform(0.2, 2, 6) for _ in range(3)]
    W = local_pca(np.stack([b.T @ b for b in blocks]), 2)
    for b, w in zip(blocks, W, strict=True):
        assert projector_distance(w, np.linalg.svd(b, full_matrices=False)[2][:2].T) <= 1e-10


def test_scores_are_residual_energy_and_contributions_sum():
    rng = np.random.default_rng(2)
    B = np.linalg.qr(rng.standard_normal((7, 2)))[0]
    X = rng.standard_normal((20, 7))
    P = np.eye(7) - B @ B.T
    brute = np.array([np.sum((P @ x) ** 2) for x in X])
    assert np.allclose(residual_energy(X, B), brute)
    assert np.allclose(feature_contributions(X, B).sum(1), brute)
    assert np.allclose(residual_energy(X @ B @ B.T, B), 0, atol=1e-12)


def test_residual_energy_in_blocks_equals_one_pass(monkeypatch):
    from fedep.core import scoring

    rng = np.random.default_rng(3)
    B = np.linalg.qr(rng.standard_normal((5, 2)))[0]
    X = rng.standard_normal((23, 5))
    whole = residual_energy(X, B)
    monkeypatch.setattr(scoring, "ENERGY_BLOCK_ROWS", 4)  # 6 blocks, the last of 3 rows
    np.testing.assert_allclose(scoring.residual_energy(X, B), whole, rtol=1e-13, atol=1e-15)
    assert scoring.residual_energy(X[:0], B).shape == (0,)


def test_residual_energies_on_threads_are_each_basis_alone(monkeypatch):
    # tasks of 8 rows in blocks of 3 over 53 rows: 7 tasks, on one thread and on two
    from fedep.core import scoring

    rng = np.random.default_rng(4)
    X = np.asfortranarray(rng.standard_normal((53, 6)))
    bases = [np.linalg.qr(rng.standard_normal((6, r)))[0] for r in (1, 3)]
    monkeypatch.setattr(scoring, "ENERGY_BLOCK_ROWS", 3)
    monkeypatch.setattr(scoring, "ENERGY_TASK_ROWS", 8)
    runs = []
    for threads in ("1", "2"):
        monkeypatch.setenv("FEDEP_THREADS", threads)
        runs.append(scoring.residual_energies(X, bases))
    assert np.array_equal(runs[0], runs[1])
    for B, got in zip(bases, runs[0], strict=True):
        assert np.array_equal(got, scoring.residual_energy(X, B))
        R = X - X @ B @ B.T
        np.testing.assert_allclose(got, (R * R).sum(axis=1), rtol=1e-12, atol=1e-14)
    assert scoring.residual_energies(X[:0], bases).shape == (2, 0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=12), st.integers(0, 1000))
def test_federated_moments_equal_pooled(sizes, seed):
    rng = np.random.default_rng(seed)
    blocks = [rng.standard_normal((m, 4)) * 1e3 + 5e4 for m in sizes]
    if sum(sizes) == 0:
        return
    pooled = np.vstack(blocks)
    m = combine_moments(client_moments(b) for b in blocks)
    assert m.count == pooled.shape[0]
    assert np.allclose(m.mean, pooled.mean(0), rtol=1e-12, atol=0)
    assert np.allclose(m.m2 / m.count, pooled.var(0), rtol=1e-10, atol=1e-12)
    # Equivalent (count, sum, sumsq) form round-trips.
    m2 = Moments.from_sums(m.count, m.sum, m.sumsq)
    assert np.allclose(m2.mean, m.mean, rtol=1e-12)


def test_constant_features_are_centred_not_divided():
    X = np.column_stack([np.arange(10.0), np.full(10, 3.0)])
    mean, scale, const = standardization_from_moments(client_moments(X))
    assert const.tolist() == [False, True]
    assert scale[1] == 1.0 and np.isfinite((X - mean) / scale).all()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 60), min_size=1, max_size=30), st.integers(1, 200))
def test_groups_cover_every_client_once(sizes, max_rows):
    blocks = [np.full((m, 2), float(i)) for i, m in enumerate(sizes)]
    groups = make_groups(blocks, max_rows=max_rows)
    seen = np.concatenate([g.clients for g in groups])
    assert sorted(seen.tolist()) == list(range(len(sizes)))
    for g in groups:
        for j, c in enumerate(g.clients):
            assert np.all(g.X[j, : g.lengths[j]] == c)
            assert np.all(g.X[j, g.lengths[j] :] == 0)


def test_client_moments_do_not_overflow_for_huge_finite_values():
    import warnings

    from fedep.core.stats import client_moments

    rng = np.random.default_rng(0)
    X = np.column_stack([rng.normal(size=50), np.full(50, 1e307), rng.normal(size=50) * 1e200])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        m = client_moments(X)
    ref = client_moments(np.column_stack([X[:, 0], np.zeros((50, 2))]))  # same layout
    assert m.mean[0] == ref.mean[0] and m.m2[0] == ref.m2[0]  # ordinary columns untouched
    assert m.mean[1] == 1e307 and m.m2[1] == 0.0  # a constant column stays exact
    np.testing.assert_allclose(m.mean[2], (X[:, 2] / 1e200).mean() * 1e200, rtol=1e-12)
    assert np.isfinite(m.mean[2]) and m.m2[2] == np.inf  # its true m2 exceeds float64


@pytest.mark.parametrize("scale", [1.0, 1e150, 1e300])
def test_value_moments_with_counts_equal_the_repeated_values(scale):
    # counts of distinct values (a column summary) give the moments of the values
    # repeated, at ordinary and at overflowing magnitudes
    from fedep.core.stats import value_moments

    rng = np.random.default_rng(1)
    v = rng.normal(size=30) * scale
    counts = rng.integers(1, 5, 30)
    mean, m2 = value_moments(v, counts)
    ref_mean, ref_m2 = value_moments(np.repeat(v, counts))
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-12, atol=1e-12 * scale)
    np.testing.assert_allclose(m2, ref_m2, rtol=1e-10)
    if scale == 1.0:
        np.testing.assert_allclose(m2, np.var(np.repeat(v, counts)) * counts.sum(), rtol=1e-12)


@pytest.mark.parametrize("N", [12, 500])  # short: the SVD; tall: the Gram matrix
def test_pooled_pca_is_the_top_right_singular_subspace(N):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((N, 9)) * np.geomspace(10.0, 0.1, 9)
    ref = np.linalg.svd(X, full_matrices=False)[2][:3].T
    B = pooled_pca(X, 3)
    np.testing.assert_allclose(B.T @ B, np.eye(3), atol=1e-12)
    assert projector_distance(B, ref) <= 1e-10


@pytest.mark.parametrize("sizes", [[3, 4, 2], [200, 1, 350, 90]])  # short and tall in all
def test_pooled_pca_of_blocks_equals_pooled_pca_of_the_stacked_records(sizes):
    rng = np.random.default_rng(7)
    blocks = [rng.standard_normal((m, 9)) * np.geomspace(10.0, 0.1, 9) for m in sizes]
    ref = np.linalg.svd(np.vstack(blocks), full_matrices=False)[2][:3].T
    B = pooled_pca_blocks(blocks, 3)
    np.testing.assert_allclose(B.T @ B, np.eye(3), atol=1e-12)
    assert projector_distance(B, ref) <= 1e-10
