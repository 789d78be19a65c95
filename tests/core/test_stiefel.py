"""Property tests of the Stiefel tools and proximal maps."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fedep.core.stiefel import (
    l21_norm,
    polar,
    project_tangent,
    projector_distance,
    prox_l1,
    prox_l21,
    random_stiefel,
    retract_polar,
    retract_qr,
)

dims = st.tuples(st.integers(2, 12), st.integers(1, 6)).filter(lambda t: t[1] <= t[0])
seeds = st.integers(0, 2**32 - 1)


def _point(n, r, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return random_stiefel(n, r, rng), scale * rng.standard_normal((n, r)), rng


@settings(max_examples=60, deadline=None)
@given(dims, seeds)
def test_random_point_is_orthonormal(nr, seed):
    W, _, _ = _point(*nr, seed)
    assert np.allclose(W.T @ W, np.eye(nr[1]), atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(dims, seeds)
def test_tangent_projection_is_tangent_and_idempotent(nr, seed):
    W, G, _ = _point(*nr, seed)
    D = project_tangent(W, G)
    assert np.allclose(W.T @ D + D.T @ W, 0, atol=1e-10)
    assert np.allclose(project_tangent(W, D), D, atol=1e-10)
    # Orthogonal projection: the residual is orthogonal to every tangent vector.
    assert abs(np.sum((G - D) * D)) <= 1e-9 * (1 + np.sum(G * G))


@settings(max_examples=60, deadline=None)
@given(dims, seeds, st.floats(0.0, 3.0))
def test_retractions_land_on_manifold_and_fix_zero(nr, seed, scale):
    W, G, _ = _point(*nr, seed)
    D = scale * project_tangent(W, G)
    for retract in (retract_qr, retract_polar):
        Y = retract(W, D)
        assert np.allclose(Y.T @ Y, np.eye(nr[1]), atol=1e-10)
        assert np.allclose(retract(W, 0 * D), W, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(dims, seeds)
def test_retractions_are_first_order(nr, seed):
    W, G, _ = _point(*nr, seed)
    D = project_tangent(W, G)
    D /= max(np.linalg.norm(D), 1e-12)
    h = 1e-4
    for retract in (retract_qr, retract_polar):
        err = np.linalg.norm(retract(W, h * D) - (W + h * D))
        assert err <= 10 * h**2


@settings(max_examples=40, deadline=None)
@given(dims, seeds)
def test_polar_is_nearest_orthonormal_matrix(nr, seed):
    W, G, rng = _point(*nr, seed)
    P = polar(G)
    best = np.linalg.norm(G - P)
    for _ in range(5):
        Q = random_stiefel(*nr, rng)
        assert np.linalg.norm(G - Q) >= best - 1e-9


@settings(max_examples=80, deadline=None)
@given(dims, seeds, st.floats(0.0, 2.0))
def test_prox_l1_matches_brute_force(nr, seed, tau):
    _, M, _ = _point(*nr, seed)
    S = prox_l1(M, tau)
    # Entrywise: the minimiser of tau|s| + 0.5 (s - m)^2 over a fine grid.
    grid = np.linspace(-4, 4, 8001)
    for m, s in zip(M.ravel()[:10], S.ravel()[:10], strict=False):
        obj = tau * np.abs(grid) + 0.5 * (grid - m) ** 2
        if abs(m) < 3.9:
            assert abs(grid[np.argmin(obj)] - s) <= 1.5e-3


@settings(max_examples=80, deadline=None)
@given(dims, seeds, st.floats(0.0, 3.0))
def test_prox_l21_optimality(nr, seed, tau):
    _, B, _ = _point(*nr, seed)
    P = prox_l21(B, tau)
    rows = np.linalg.norm(B, axis=1)
    # Rows at or below tau vanish; others shrink along their direction by tau.
    assert np.allclose(P[rows <= tau], 0)
    keep = rows > tau
    assert np.allclose(np.linalg.norm(P[keep], axis=1), rows[keep] - tau, atol=1e-12)

    # Optimality: objective below random perturbations.
    def obj(Y):
        return tau * l21_norm(Y) + 0.5 * np.sum((Y - B) ** 2)

    rng = np.random.default_rng(seed)
    for _ in range(5):
        assert obj(P) <= obj(P + 1e-3 * rng.standard_normal(P.shape)) + 1e-12


@settings(max_examples=40, deadline=None)
@given(dims, seeds)
def test_projector_distance_properties(nr, seed):
    W, G, rng = _point(*nr, seed)
    n, r = nr
    Q = np.linalg.qr(rng.standard_normal((r, r)))[0]
    assert projector_distance(W, W @ Q) <= 1e-10  # rotation invariant
    V = random_stiefel(n, r, rng)
    d = projector_distance(W, V)
    assert 0 <= d <= np.sqrt(r) + 1e-12
    assert abs(d - projector_distance(V, W)) <= 1e-12


def test_batched_operations_match_loop():
    rng = np.random.default_rng(0)
    W = random_stiefel(9, 3, rng, (4,))
    G = rng.standard_normal((4, 9, 3))
    D = project_tangent(W, G)
    for i in range(4):
        assert np.allclose(D[i], project_tangent(W[i], G[i]))
        assert np.allclose(retract_polar(W, D)[i], retract_polar(W[i], D[i]))
        assert np.allclose(retract_qr(W, D)[i], retract_qr(W[i], D[i]))
        assert np.allclose(prox_l21(G, 0.7)[i], prox_l21(G[i], 0.7))
