"""ManPG W-step: descent, stationarity and the eigenvector special case."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedep.core._kernels import manpg_clients
from fedep.core.manpg import manpg_w_step, w_objective
from fedep.core.ssn import ssn_direction
from fedep.core.stiefel import projector_distance, random_stiefel


def _gram(rng, N=200, n=12, decay=0.7):
    X = rng.standard_normal((N, n)) * decay ** np.arange(n)
    return X, (X.T @ X)[None]


@pytest.mark.parametrize("kernel", ["numpy", "numba"])
def test_objective_never_increases_over_iterations(kernel):
    rng = np.random.default_rng(0)
    _, G = _gram(rng)
    W0 = random_stiefel(12, 3, rng, (1,))
    Z = random_stiefel(12, 3, rng, (1,))
    prev = w_objective(G, W0, Z, np.array([2.0]), np.array([5.0]))[0]
    W, Lam = W0, None
    for _ in range(15):
        res = manpg_w_step(
            G, W, Z, np.array([2.0]), np.array([5.0]), Lam, max_iter=1, kernel=kernel
        )
        assert res.F[0] <= prev + 1e-9 * abs(prev)
        assert np.allclose(res.W[0].T @ res.W[0], np.eye(3), atol=1e-10)
        prev, W, Lam = res.F[0], res.W, res.Lam


@pytest.mark.parametrize("kernel", ["numpy", "numba"])
def test_plain_pca_subproblem_reaches_top_eigenspace(kernel):
    rng = np.random.default_rng(1)
    X, G = _gram(rng)
    W0 = random_stiefel(12, 3, rng, (1,))
    res = manpg_w_step(G, W0, W0, np.zeros(1), np.zeros(1), max_iter=3000, tol=1e-13, kernel=kernel)
    top = np.linalg.svd(X, full_matrices=False)[2][:3].T
    assert projector_distance(res.W[0], top) <= 1e-7


@pytest.mark.parametrize("kernel", ["numpy", "numba"])
def test_stationary_point_has_zero_direction(kernel):
    rng = np.random.default_rng(2)
    _, G = _gram(rng)
    W0 = random_stiefel(12, 2, rng, (1,))
    Z = random_stiefel(12, 2, rng, (1,))
    beta, nu = np.array([1.0]), np.array([3.0])
    res = manpg_w_step(G, W0, Z, beta, nu, max_iter=5000, tol=1e-10, kernel=kernel)
    W = res.W
    grad = -2 * G @ W + nu[:, None, None] * (W - Z)
    t = 1.0 / (2 * np.linalg.eigvalsh(G)[:, -1] + nu)
    D = ssn_direction(W, grad, t, t * beta, tol=1e-13).D
    # KKT of the manifold problem: the ManPG direction vanishes at a stationary point.
    assert np.linalg.norm(D) / t[0] <= 1e-6 * (1 + np.linalg.norm(grad))


@pytest.mark.parametrize("kernel", ["numpy", "numba"])
def test_l21_weight_sparsifies_rows(kernel):
    rng = np.random.default_rng(3)
    _, G = _gram(rng, decay=0.5)
    W0 = random_stiefel(12, 2, rng, (1,))
    dense = manpg_w_step(G, W0, W0, np.zeros(1), np.zeros(1), max_iter=500, kernel=kernel)
    sparse = manpg_w_step(G, W0, W0, np.array([20.0]), np.zeros(1), max_iter=500, kernel=kernel)
    zero_rows = lambda W: int(np.sum(np.linalg.norm(W[0], axis=1) < 1e-12))  # noqa: E731
    assert zero_rows(sparse.W) > zero_rows(dense.W)


@pytest.mark.parametrize(
    ("n", "r", "beta", "nu", "retraction"),
    [
        (12, 3, 2.0, 5.0, "polar"),
        (12, 3, 2.0, 5.0, "qr"),
        (30, 5, 0.5, 1.0, "polar"),
        (8, 1, 0.0, 0.0, "polar"),  # plain PCA, rank one
        (20, 10, 1.0, 2.0, "polar"),  # above the dense-map rank of the NumPy SSN
        (15, 4, 40.0, 1.0, "qr"),  # large beta: rows cut to zero
        (40, 16, 1.0, 2.0, "polar"),  # 136 Newton unknowns: matrix-free Newton (CG)
        (60, 30, 20.0, 1.0, "polar"),  # CG with rows cut; LAPACK's eigh in the retraction
    ],
)
def test_compiled_w_step_matches_numpy_reference(n, r, beta, nu, retraction):
    # Several clients with different data, targets and warm starts in one call.
    rng = np.random.default_rng(n * 100 + r)
    d = 6
    G = np.stack([_gram(rng, n=n, decay=rng.uniform(0.5, 0.9))[1][0] for _ in range(d)])
    W0 = random_stiefel(n, r, rng, (d,))
    Z = W0 + 0.3 * rng.standard_normal((d, n, r))
    betas = beta * rng.uniform(0.5, 1.5, d)
    nus = nu * rng.uniform(0.5, 1.5, d)
    out = {
        k: manpg_w_step(G, W0, Z, betas, nus, max_iter=25, retraction=retraction, kernel=k)
        for k in ("numpy", "numba")
    }
    a, b = out["numpy"], out["numba"]
    assert np.allclose(a.W, b.W, atol=1e-8)
    assert np.allclose(a.F, b.F, rtol=1e-10, atol=1e-10)
    assert np.allclose(a.Lam, b.Lam, atol=1e-6)
    assert np.all(np.abs(a.n_iter - b.n_iter) <= 1)
    assert np.all(np.abs(a.ssn_iter - b.ssn_iter) <= 2)
    assert np.allclose(np.swapaxes(b.W, 1, 2) @ b.W, np.eye(r), atol=1e-10)


def test_unknown_kernel_is_rejected():
    rng = np.random.default_rng(0)
    _, G = _gram(rng)
    W0 = random_stiefel(12, 2, rng, (1,))
    with pytest.raises(ValueError, match="kernel"):
        manpg_w_step(G, W0, W0, np.zeros(1), np.zeros(1), kernel="fortran")


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    st.integers(2, 16),
    st.integers(1, 6),
    st.floats(0.0, 5.0),
    st.floats(0.0, 10.0),
    st.integers(0, 2**31 - 1),
)
def test_compiled_w_step_property(n, r, beta, nu, seed):
    # Random shapes and penalties: the compiled W-step takes the NumPy reference's steps
    # and returns orthonormal bases with a non-increasing objective.
    r = min(r, n)
    rng = np.random.default_rng(seed)
    G = np.stack([_gram(rng, N=3 * n, n=n)[1][0] for _ in range(3)])
    W0 = random_stiefel(n, r, rng, (3,))
    Z = W0 + 0.2 * rng.standard_normal(W0.shape)
    b, v = np.full(3, beta), np.full(3, nu)
    a = manpg_w_step(G, W0, Z, b, v, max_iter=3, kernel="numpy")
    c = manpg_w_step(G, W0, Z, b, v, max_iter=3, kernel="numba")
    assert np.allclose(a.W, c.W, atol=1e-7)
    assert np.allclose(np.swapaxes(c.W, 1, 2) @ c.W, np.eye(r), atol=1e-10)
    F0 = w_objective(G, W0, Z, b, v)
    assert np.all(c.F <= F0 + 1e-9 * np.abs(F0))


def test_compiled_w_step_compiles_one_signature_for_any_input_flags():
    # Read-only, broadcast, scalar or non-contiguous inputs reach the kernel in one
    # layout: a new signature would compile the whole W-step again (tens of seconds).
    # (Before: an array ``beta`` reached it read-only, a scalar one writable.)
    rng = np.random.default_rng(3)
    G = np.concatenate([_gram(rng, n=8)[1], _gram(rng, n=8)[1]])
    W0 = np.stack([random_stiefel(8, 2, rng), random_stiefel(8, 2, rng)])
    two = np.array([0.5, 1.0])
    manpg_w_step(G, W0, W0, two, two, max_iter=2, kernel="numba")
    before = set(manpg_clients.signatures)
    ro = two.copy()
    ro.flags.writeable = False
    Wf = np.stack([np.asfortranarray(w) for w in W0])
    variants = [
        (G, W0, W0, ro, ro),
        (G, W0, W0, 0.5, 1.0),
        (G, Wf.transpose(0, 2, 1).transpose(0, 2, 1), W0, np.broadcast_to(0.5, (2,)), 1.0),
        (G.astype(np.float32), W0, W0, 0.5, 1.0),
    ]
    for args in variants:
        manpg_w_step(*args, max_iter=2, kernel="numba")
    assert set(manpg_clients.signatures) == before
