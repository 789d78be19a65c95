"""ManPG W-step: descent, stationarity and the eigenvector special case."""

import numpy as np

from fedep.core.manpg import manpg_w_step, w_objective
from fedep.core.ssn import ssn_direction
from fedep.core.stiefel import projector_distance, random_stiefel


def _gram(rng, N=200, n=12, decay=0.7):
    X = rng.standard_normal((N, n)) * decay ** np.arange(n)
    return X, (X.T @ X)[None]


def test_objective_never_increases_over_iterations():
    rng = np.random.default_rng(0)
    _, G = _gram(rng)
    W0 = random_stiefel(12, 3, rng, (1,))
    Z = random_stiefel(12, 3, rng, (1,))
    prev = w_objective(G, W0, Z, np.array([2.0]), np.array([5.0]))[0]
    W, Lam = W0, None
    for _ in range(15):
        res = manpg_w_step(G, W, Z, np.array([2.0]), np.array([5.0]), Lam, max_iter=1)
        assert res.F[0] <= prev + 1e-9 * abs(prev)
        assert np.allclose(res.W[0].T @ res.W[0], np.eye(3), atol=1e-10)
        prev, W, Lam = res.F[0], res.W, res.Lam


def test_plain_pca_subproblem_reaches_top_eigenspace():
    rng = np.random.default_rng(1)
    X, G = _gram(rng)
    W0 = random_stiefel(12, 3, rng, (1,))
    res = manpg_w_step(G, W0, W0, np.zeros(1), np.zeros(1), max_iter=3000, tol=1e-13)
    top = np.linalg.svd(X, full_matrices=False)[2][:3].T
    assert projector_distance(res.W[0], top) <= 1e-7


def test_stationary_point_has_zero_direction():
    rng = np.random.default_rng(2)
    _, G = _gram(rng)
    W0 = random_stiefel(12, 2, rng, (1,))
    Z = random_stiefel(12, 2, rng, (1,))
    beta, nu = np.array([1.0]), np.array([3.0])
    res = manpg_w_step(G, W0, Z, beta, nu, max_iter=5000, tol=1e-10)
    W = res.W
    grad = -2 * G @ W + nu[:, None, None] * (W - Z)
    t = 1.0 / (2 * np.linalg.eigvalsh(G)[:, -1] + nu)
    D = ssn_direction(W, grad, t, t * beta, tol=1e-13).D
    # KKT of the manifold problem: the ManPG direction vanishes at a stationary point.
    assert np.linalg.norm(D) / t[0] <= 1e-6 * (1 + np.linalg.norm(grad))


def test_l21_weight_sparsifies_rows():
    rng = np.random.default_rng(3)
    _, G = _gram(rng, decay=0.5)
    W0 = random_stiefel(12, 2, rng, (1,))
    dense = manpg_w_step(G, W0, W0, np.zeros(1), np.zeros(1), max_iter=500)
    sparse = manpg_w_step(G, W0, W0, np.array([20.0]), np.zeros(1), max_iter=500)
    zero_rows = lambda W: int(np.sum(np.linalg.norm(W[0], axis=1) < 1e-12))  # noqa: E731
    assert zero_rows(sparse.W) > zero_rows(dense.W)
